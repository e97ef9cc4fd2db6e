//! `list`: what a container with a given request would receive.

use std::io::Write;

use super::Result;
use crate::config::Config;
use crate::driver::Inventory;
use crate::image::ImageLayout;
use crate::plan::Plan;
use crate::request::{Capabilities, DeviceSelection, Request};

/// Plans the request and prints host paths, or the whole plan as JSON.
pub fn run(
    config: &Config,
    devices: &str,
    capabilities: &str,
    layout: ImageLayout,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let request = Request::new(
        DeviceSelection::parse(Some(devices))?,
        Capabilities::parse(capabilities)?,
    );
    let mut inventory = Inventory::discover(&config.driver, &request.capabilities)?;
    if request.needs_nvml() {
        inventory.load_nvml()?;
    }
    for missing in inventory.missing_libraries.iter().filter(|m| !m.core) {
        log::debug!(
            "{} library {} not found",
            missing.capability,
            missing.prefix
        );
    }
    let plan = Plan::build(&inventory, &request, &layout.into())?;
    if json {
        serde_json::to_writer_pretty(&mut *out, &plan)?;
        writeln!(out)?;
    } else {
        for path in plan.host_paths() {
            writeln!(out, "{}", path.display())?;
        }
    }
    Ok(())
}

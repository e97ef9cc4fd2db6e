//! `list`: what a container with a given request would receive, planned by
//! the same planner as the hook.

use std::io::Write;
use std::path::PathBuf;

use super::Result;
use crate::config::Config;
use crate::planning::bundle;
use crate::planning::image::ImageLayout;
use crate::planning::planner::{self, ImageSource, Inputs, Source};

/// Where `list` takes its request from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// Flags: devices and capabilities, for an image of `layout`.
    Flags {
        /// As `NVIDIA_VISIBLE_DEVICES` takes them.
        devices: String,
        /// As `NVIDIA_DRIVER_CAPABILITIES` takes them.
        capabilities: String,
        /// Where the image keeps libraries.
        layout: ImageLayout,
        /// The devices beyond the GPU, as the container's variables would ask.
        env: Vec<String>,
    },
    /// A container's bundle, read as the hook reads it.
    Bundle(PathBuf),
}

/// Plans the request and prints host paths, or the whole plan as JSON.
pub fn run(config: &Config, ask: &Ask, json: bool, out: &mut impl Write) -> Result<()> {
    let container;
    let (source, image) = match ask {
        Ask::Flags {
            devices,
            capabilities,
            layout,
            env,
        } => (
            Source::Flags {
                devices,
                capabilities,
                env,
            },
            ImageSource::Layout(*layout),
        ),
        Ask::Bundle(dir) => {
            container = bundle::load(dir)?;
            (
                Source::Container(&container),
                ImageSource::Rootfs(&container.rootfs),
            )
        }
    };
    let planned = planner::plan(config, Inputs::new(source, image))?;
    for missing in planned
        .inventory
        .iter()
        .flat_map(|i| &i.missing_libraries)
        .filter(|m| !m.core)
    {
        log::debug!(
            "{} library {} not found",
            missing.capability,
            missing.prefix
        );
    }
    if json {
        serde_json::to_writer_pretty(&mut *out, &planned.plan)?;
        writeln!(out)?;
    } else {
        for path in planned.plan.host_paths() {
            writeln!(out, "{}", path.display())?;
        }
    }
    Ok(())
}

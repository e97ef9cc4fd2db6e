//! Plans what a container gets on a CSV (Jetson, IGX) host, as NVIDIA's
//! `csv` mode gives it: every node the CSV files list with its cgroup rule;
//! every listed file mounted read-only at its path inside the driver root,
//! a shared object with its SONAME and `.so` links and its loader-cache
//! entry; every listed directory mounted read-only; each link of a `sym`
//! entry recreated; `/etc/nv_tegra_release`; the libraries' directories in
//! the loader's configuration. The host has one GPU, integrated: `all` and
//! `0` name it; `none` gets the files without the nodes.

use super::nodes::{add_node, required};
use super::{Error, MountKind, Plan, Result, Symlink};
use crate::host::driver::csv::Csv;
use crate::host::driver::{Inventory, NodeRole};
use crate::host::elf::Arch;
use crate::planning::request::{DeviceId, DeviceSelection, Request};

/// What a CSV host's devices are called: NVIDIA's `csv` mode accepts these alone.
pub const CSV_DEVICES: &str = "all or 0 (a Jetson/Tegra host has one integrated GPU, \
                               whose nodes its CSV files list)";

/// Adds a CSV host's nodes and files for `request` to `plan`.
pub(super) fn plan(
    plan: &mut Plan,
    inventory: &Inventory,
    found: &Csv,
    request: &Request,
) -> Result<()> {
    let with_nodes = match &request.devices {
        DeviceSelection::Void | DeviceSelection::None => false,
        DeviceSelection::All => true,
        DeviceSelection::List(ids) => {
            let unknown: Vec<String> = ids
                .iter()
                .filter(|id| **id != DeviceId::Index(0))
                .map(|id| id.to_string())
                .collect();
            if !unknown.is_empty() {
                return Err(Error::UnknownDevice {
                    item: unknown.join(","),
                    available: CSV_DEVICES.into(),
                });
            }
            true
        }
    };
    if with_nodes {
        for node in inventory
            .nodes
            .iter()
            .filter(|n| n.role == NodeRole::Listed)
        {
            let (node, mode) = required(Some(node), &node.path.to_string_lossy())?;
            add_node(plan, node.clone(), mode);
        }
    }
    let host = Arch::host();
    for file in &found.files_listed {
        let library = inventory
            .libraries
            .iter()
            .find(|l| l.path == file.host && l.arch == host.name);
        match (library, file.inner.parent()) {
            (Some(library), Some(dir)) => plan.add_library(library, host, dir),
            _ => plan.mount(MountKind::Library, &file.host, file.inner.clone()),
        }
    }
    for dir in &found.dirs {
        plan.mount(MountKind::Tree, &dir.host, dir.inner.clone());
    }
    for link in &found.links {
        plan.symlinks.push(Symlink {
            path: link.path.clone(),
            target: link.target.clone(),
        });
    }
    if let Some(release) = found
        .release
        .as_ref()
        .filter(|r| !plan.mounts.iter().any(|m| m.destination == r.inner))
    {
        plan.mount(MountKind::Config, &release.host, release.inner.clone());
    }
    plan.loader_dirs.extend(found.library_dirs());
    // One link per path (a `sym` entry may list a link the SONAME gives
    // too), and none where a file is mounted.
    let mut seen: Vec<std::path::PathBuf> =
        plan.mounts.iter().map(|m| m.destination.clone()).collect();
    plan.symlinks.retain(|link| {
        let new = !seen.contains(&link.path);
        seen.push(link.path.clone());
        new
    });
    Ok(())
}

#[cfg(test)]
mod tests;

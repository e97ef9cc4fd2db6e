//! The host layer on a Jetson/IGX (Tegra) host: its GPU is integrated, so
//! there is no `/proc/driver/nvidia` or `/dev/nvidia0` to judge; what
//! matters is the CSV mount specs L4T installs and what they list (see
//! `driver::csv`). Everything comes from the hook's own discovery; this
//! module only judges it.

use super::host::{self, L};
use super::{Check, HostFacts};
use crate::config::Config;
use crate::host::driver::csv::Csv;
use crate::planning::planner::Inputs;

/// Checks a Tegra host and returns what later layers need.
pub(super) fn check(
    config: &Config,
    container: Option<Inputs<'_>>,
    out: &mut Vec<Check>,
) -> HostFacts {
    let fix = "install JetPack's container packages (nvidia-container-toolkit's CSV \
               files come with L4T: nvidia-l4t-core and the CUDA, cuDNN and TensorRT packages)";
    let Some((inventory, planned)) =
        host::examine(config, container, "Jetson/Tegra host", fix, out)
    else {
        return HostFacts::unknown();
    };
    let mut failed = false;
    if let Some(found) = &inventory.csv {
        out.push(Check::ok(
            L,
            "Jetson/Tegra host",
            format!(
                "L4T {}, no /proc/driver/nvidia: its integrated GPU (device 0) is served from \
                 the CSV files {}",
                if inventory.driver_version.is_empty() {
                    "(no /etc/nv_tegra_release)"
                } else {
                    &inventory.driver_version
                },
                found.files_line()
            ),
        ));
        host::nodes(&inventory, out);
        failed |= listed(found, inventory.nodes.len(), out);
    }
    let cuda = host::cuda(&inventory, out);
    HostFacts {
        inventory: Some(inventory),
        container: planned,
        cuda,
        failed,
    }
}

/// What the CSV files list: no node at all fails (a container gets no
/// GPU), an entry the host lacks warns (NVIDIA skips it too). True on failure.
fn listed(found: &Csv, nodes: usize, out: &mut Vec<Check>) -> bool {
    let provided = format!(
        "{nodes} nodes, {} files, {} directories, {} links",
        found.files_listed.len(),
        found.dirs.len(),
        found.links.len()
    );
    if !found.skipped.is_empty() {
        let skipped: Vec<String> = found
            .skipped
            .iter()
            .map(|s| format!("{} {} ({})", s.kind.name(), s.path.display(), s.reason))
            .collect();
        out.push(Check::warn(
            L,
            "CSV entries",
            format!(
                "{provided}; skipped, as NVIDIA skips them: {}",
                skipped.join("; ")
            ),
            "reinstall the L4T package that installs the file, or remove its line from the CSV file",
        ));
    }
    if nodes == 0 {
        out.push(Check::fail(
            L,
            "CSV device nodes",
            "the CSV files list no device node this host has: containers get no GPU",
            "check devices.csv against /dev (nvmap, nvhost-*, nvgpu/…): reinstall nvidia-l4t-core",
        ));
        return true;
    }
    if found.skipped.is_empty() {
        out.push(Check::ok(L, "CSV entries", provided));
    }
    false
}

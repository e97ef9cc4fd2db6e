//! The host layer on a WSL2 host: the driver runs on Windows, so there is
//! no kernel module, persistence daemon or `/dev/nvidia*` to judge; what
//! matters is `/dev/dxg`, the driver store and the files NVIDIA's `wsl`
//! mode injects (see `driver::wsl`). Everything comes from the hook's own
//! discovery; this module only judges it.

use super::host::{self, L};
use super::{Check, HostFacts};
use crate::config::Config;
use crate::host::driver::wsl::{self, WslKind};
use crate::planning::planner::Inputs;

/// Checks a WSL2 host and returns what later layers need.
pub(super) fn check(
    config: &Config,
    host_smi: bool,
    container: Option<Inputs<'_>>,
    out: &mut Vec<Check>,
) -> HostFacts {
    let fix = "install or update the NVIDIA driver on Windows (WSL2 takes the Windows \
               driver; never install a Linux driver inside WSL), then `wsl --shutdown`";
    let Some((inventory, planned)) = host::examine(config, container, "WSL2 driver", fix, out)
    else {
        return HostFacts::unknown();
    };
    let mut failed = false;
    if let Some(found) = &inventory.wsl {
        out.push(Check::ok(
            L,
            "WSL2 host",
            format!(
                "/dev/dxg and no /proc/driver/nvidia: Windows' driver, driver store {}",
                found.store.display()
            ),
        ));
        host::nodes(&inventory, out);
        failed |= files(found, out);
    }
    let cuda = host::cuda(&inventory, out);
    if host_smi {
        smi(&inventory, out);
    }
    HostFacts {
        inventory: Some(inventory),
        container: planned,
        cuda,
        failed,
    }
}

/// The files NVIDIA's `wsl` mode injects: a core one missing fails, another
/// warns (older Windows drivers lack the loaders and dxgdmal). True when a
/// core one is missing.
fn files(found: &wsl::Wsl, out: &mut Vec<Check>) -> bool {
    let (core, other): (Vec<&str>, Vec<&str>) = found.missing.iter().partition(|name| {
        wsl::FILES
            .iter()
            .any(|spec| spec.name == **name && spec.core)
    });
    let dirs = format!("{} or {}", found.store.display(), wsl::LIB_DIR);
    if !core.is_empty() {
        out.push(Check::fail(
            L,
            "WSL2 driver files",
            format!(
                "no {} in {dirs}: every container asking for what they serve fails",
                core.join(", ")
            ),
            "reinstall the NVIDIA driver on Windows, then `wsl --shutdown`",
        ));
    }
    if !other.is_empty() {
        out.push(Check::warn(
            L,
            "WSL2 driver files",
            format!(
                "no {} in {dirs}: containers get the rest, as NVIDIA's wsl mode gives them",
                other.join(", ")
            ),
            "update the NVIDIA driver on Windows to one that ships them",
        ));
    }
    if core.is_empty() {
        out.push(Check::ok(
            L,
            "WSL2 driver files",
            format!(
                "{} of NVIDIA's wsl-mode files, libcuda, libnvidia-ml and libdxcore among them",
                found.files.len()
            ),
        ));
    }
    !core.is_empty()
}

/// The driver store's `nvidia-smi -L`, bounded in time.
fn smi(inventory: &crate::host::driver::Inventory, out: &mut Vec<Check>) {
    let Some(smi) = inventory
        .wsl
        .iter()
        .flat_map(|w| &w.files)
        .find(|f| f.kind == WslKind::Program && f.name == "nvidia-smi")
    else {
        out.push(Check::fail(
            L,
            "nvidia-smi -L",
            "no nvidia-smi in the WSL driver store",
            "reinstall the NVIDIA driver on Windows",
        ));
        return;
    };
    host::run_smi(
        &smi.path,
        "update WSL (`wsl --update`) and the Windows driver, then `wsl --shutdown`",
        "a hung nvidia-smi is a hung driver: `wsl --shutdown`, then start WSL again",
        out,
    );
}

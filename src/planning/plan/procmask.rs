//! Plans the masked `/proc/driver/nvidia`: which host files are copied in,
//! how (`params` loses `ModifyDeviceFiles`), and which GPUs' directories
//! are shown. Only the selected devices' entries appear.

use std::path::{Path, PathBuf};

use super::mig::Management;
use super::{ProcCopy, ProcFile, ProcMask, Selected};
use crate::host::driver::{CapFile, Inventory};

/// The mask for `devices` and what MIG `management` brings.
pub(super) fn plan(
    inventory: &Inventory,
    devices: &[Selected<'_>],
    management: &Management<'_>,
) -> ProcMask {
    let capability_file = |cap: &CapFile| ProcFile {
        path: cap.rel.clone(),
        source: cap.path.clone(),
        copy: ProcCopy::Verbatim,
    };
    let mut files = driver_files(&inventory.proc_dir);
    let mut gpus: Vec<(String, PathBuf)> = Vec::new();
    for device in devices {
        let gpu = device.gpu();
        if !gpus.iter().any(|(bus, _)| *bus == gpu.bus) {
            gpus.push((
                gpu.bus.clone(),
                inventory.proc_dir.join("gpus").join(&gpu.bus),
            ));
        }
        files.extend(device.access_files().into_iter().map(capability_file));
    }
    files.extend(
        management
            .capabilities
            .iter()
            .chain(&management.instances)
            .copied()
            .map(capability_file),
    );
    // `all` and management may bring the same access file: it is copied once.
    let mut seen = Vec::new();
    files.retain(|f| {
        let new = !seen.contains(&f.path);
        seen.push(f.path.clone());
        new
    });
    ProcMask {
        path: PathBuf::from(PATH),
        files,
        gpus,
    }
}

/// Where the container's procfs shows the driver.
const PATH: &str = "/proc/driver/nvidia";

/// The driver's own files in `proc_dir` (the host's `/proc/driver/nvidia`),
/// `params` rewritten.
fn driver_files(proc_dir: &Path) -> Vec<ProcFile> {
    let driver_file = |name: &str, copy| ProcFile {
        path: PathBuf::from(name),
        source: proc_dir.join(name),
        copy,
    };
    vec![
        driver_file("params", ProcCopy::ModifyDeviceFilesOff),
        driver_file("version", ProcCopy::Verbatim),
        driver_file("registry", ProcCopy::IfPresent),
    ]
}

/// The mask NVIDIA's `disable-device-node-modification` comes to: the
/// driver's files, `params` rewritten, and every GPU directory of `buses`
/// in `proc_dir`, for a container whose devices the spec chose.
pub fn whole_driver(proc_dir: &Path, buses: Vec<String>) -> ProcMask {
    ProcMask {
        path: PathBuf::from(PATH),
        files: driver_files(proc_dir),
        gpus: buses
            .into_iter()
            .map(|bus| {
                let dir = proc_dir.join("gpus").join(&bus);
                (bus, dir)
            })
            .collect(),
    }
}

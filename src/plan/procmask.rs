//! Plans the masked `/proc/driver/nvidia`: which host files are copied in,
//! how (`params` loses `ModifyDeviceFiles`), and which GPUs' directories
//! are shown. Only the selected devices' entries appear.

use std::path::PathBuf;

use super::mig::Management;
use super::{ProcCopy, ProcFile, ProcMask, Selected};
use crate::driver::{CapFile, Inventory};

/// The mask for `devices` and what MIG `management` brings.
pub(super) fn plan(
    inventory: &Inventory,
    devices: &[Selected<'_>],
    management: &Management<'_>,
) -> ProcMask {
    let driver_file = |name: &str, copy| ProcFile {
        path: PathBuf::from(name),
        source: inventory.proc_dir.join(name),
        copy,
    };
    let capability_file = |cap: &CapFile| ProcFile {
        path: cap.rel.clone(),
        source: cap.path.clone(),
        copy: ProcCopy::Verbatim,
    };
    let mut files = vec![
        driver_file("params", ProcCopy::ModifyDeviceFilesOff),
        driver_file("version", ProcCopy::Verbatim),
        driver_file("registry", ProcCopy::IfPresent),
    ];
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
        path: PathBuf::from("/proc/driver/nvidia"),
        files,
        gpus,
    }
}

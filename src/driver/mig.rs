//! MIG devices: NVML's list joined with the kernel module's capability files.
//!
//! A MIG device is reached through its parent GPU's node plus two
//! `/dev/nvidia-caps/nvidia-capN` nodes, one for its GPU instance and one
//! for its compute instance. The minors come from the `access` files under
//! `<proc>/driver/nvidia/capabilities/gpu<minor>/mig/`, never from NVML.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::proc::read_text;
use super::{Error, Gpu, Result};
use crate::nvml;

/// A driver capability file and the device minor it grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CapFile {
    /// The file on the host.
    pub path: PathBuf,
    /// Its path below `driver/nvidia`, as the container's masked copy has it.
    pub rel: PathBuf,
    /// `DeviceFileMinor`: the minor of its `nvidia-capN` node.
    pub minor: u32,
}

/// One MIG device, ready to plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigDevice {
    /// The parent GPU's index.
    pub parent: u32,
    /// Its index on the parent, as `<gpu>:<mig>` counts.
    pub index: u32,
    /// `MIG-…`.
    pub uuid: String,
    /// GPU instance id.
    pub gpu_instance: u32,
    /// Compute instance id.
    pub compute_instance: u32,
    /// The GPU instance's access file.
    pub gi_access: CapFile,
    /// The compute instance's access file.
    pub ci_access: CapFile,
}

/// Parses an `access` file (`DeviceFileMinor: N` among other lines).
pub fn parse_access(path: &Path, text: &str) -> Result<u32> {
    text.lines()
        .find_map(|line| line.strip_prefix("DeviceFileMinor:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| Error::UnknownFormat {
            path: path.to_path_buf(),
            reason: "no \"DeviceFileMinor:\" number".into(),
        })
}

/// Reads the capability file `rel` below the module's procfs directory.
pub fn cap_file(proc_dir: &Path, rel: PathBuf) -> Result<CapFile> {
    let path = proc_dir.join(&rel);
    let minor = parse_access(&path, &read_text(&path)?)?;
    Ok(CapFile { path, rel, minor })
}

/// Joins NVML's MIG devices with the GPUs from `/proc` (by UUID) and their access files.
pub fn devices(proc_dir: &Path, gpus: &[Gpu], report: &nvml::Report) -> Result<Vec<MigDevice>> {
    let mut devices = Vec::new();
    for info in report.gpus.iter().filter(|g| g.mig_enabled) {
        let Some(gpu) = gpus
            .iter()
            .find(|g| g.uuid.eq_ignore_ascii_case(&info.uuid))
        else {
            log::warn!(
                "NVML reports {} which the kernel module does not list; skipping its MIG devices",
                info.uuid
            );
            continue;
        };
        for mig in &info.migs {
            let gi = PathBuf::from(format!(
                "capabilities/gpu{}/mig/gi{}",
                gpu.minor, mig.gpu_instance
            ));
            let ci = gi.join(format!("ci{}", mig.compute_instance));
            devices.push(MigDevice {
                parent: gpu.index,
                index: mig.index,
                uuid: mig.uuid.to_ascii_lowercase().replacen("mig-", "MIG-", 1),
                gpu_instance: mig.gpu_instance,
                compute_instance: mig.compute_instance,
                gi_access: cap_file(proc_dir, gi.join("access"))?,
                ci_access: cap_file(proc_dir, ci.join("access"))?,
            });
        }
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn parses_access_files() {
        let p = Path::new("/proc/driver/nvidia/capabilities/gpu0/mig/gi1/access");
        assert_eq!(
            parse_access(
                p,
                "DeviceFileMinor: 21\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
            )
            .unwrap(),
            21
        );
        let err = parse_access(p, "DeviceFileMode: 292\n").unwrap_err();
        assert!(err.to_string().contains("gi1/access"), "{err}");
    }

    #[test]
    fn joins_nvml_migs_with_access_files_by_parent_minor() {
        let dir = tempfile::tempdir().unwrap();
        for (rel, minor) in [
            ("capabilities/gpu3/mig/gi2/access", 30),
            ("capabilities/gpu3/mig/gi2/ci0/access", 31),
        ] {
            fs::create_dir_all(dir.path().join(rel).parent().unwrap()).unwrap();
            fs::write(
                dir.path().join(rel),
                format!("DeviceFileMinor: {minor}\nDeviceFileMode: 292\n"),
            )
            .unwrap();
        }
        let gpus = [Gpu {
            index: 0,
            minor: 3,
            model: "NVIDIA A100".into(),
            uuid: "GPU-0aaaaaaa-0000-0000-0000-000000000000".into(),
            bus: "0000:18:00.0".into(),
        }];
        let report = nvml::Report {
            gpus: vec![nvml::GpuInfo {
                uuid: "GPU-0AAAAAAA-0000-0000-0000-000000000000".into(),
                brand: "nvidia".into(),
                compute_capability: "8.0".into(),
                mig_enabled: true,
                migs: vec![nvml::MigInfo {
                    index: 0,
                    uuid: "MIG-1BBBBBBB-0000-0000-0000-000000000000".into(),
                    gpu_instance: 2,
                    compute_instance: 0,
                }],
            }],
        };
        let migs = devices(dir.path(), &gpus, &report).unwrap();
        assert_eq!(migs.len(), 1);
        assert_eq!(migs[0].uuid, "MIG-1bbbbbbb-0000-0000-0000-000000000000");
        assert_eq!((migs[0].gi_access.minor, migs[0].ci_access.minor), (30, 31));
        assert_eq!(
            migs[0].ci_access.rel,
            Path::new("capabilities/gpu3/mig/gi2/ci0/access")
        );
    }
}

//! MIG devices: NVML's list joined with the kernel module's capability
//! files, and the instances the kernel module lists on its own.
//!
//! A MIG device is reached through its parent GPU's node plus two
//! `/dev/nvidia-caps/nvidia-capN` nodes, one for its GPU instance and one
//! for its compute instance. The minors come from the `access` files under
//! `<proc>/driver/nvidia/capabilities/gpu<minor>/mig/`, never from NVML.
//! Only NVML knows a MIG device's UUID and index; which instances exist,
//! and their minors, procfs says alone. Nothing here writes or loads driver code.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::proc::read_text;
use super::{Error, Gpu, Result};
use crate::host::nvml;

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

/// A GPU instance the kernel module lists (`capabilities/gpu<minor>/mig/gi<id>`),
/// with its compute instances: which MIG devices exist, known without NVML.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuInstance {
    /// The index of the GPU it lives on.
    pub parent: u32,
    /// Its id, as `gi<id>` names it.
    pub id: u32,
    /// Its access file.
    pub access: CapFile,
    /// Its compute instances, by id; each makes one MIG device with it.
    pub compute: Vec<ComputeInstance>,
}

/// A compute instance (`gi<id>/ci<id>`) of a [`GpuInstance`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ComputeInstance {
    /// Its id, as `ci<id>` names it.
    pub id: u32,
    /// Its access file.
    pub access: CapFile,
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

/// `instances` in one word, as a spec records the MIG layout it was made
/// on: `<gpu>:<gi>:<ci>` for each compute instance (`<gpu>:<gi>` for a GPU
/// instance without one), comma-separated in GPU then id order; `none`
/// without MIG. A MIG device's name in a spec (`0:1`, `MIG-…`) means the
/// instance it had then: another layout gives it another one, or none.
pub fn layout(instances: &[GpuInstance]) -> String {
    let mut words = Vec::new();
    for gi in instances {
        if gi.compute.is_empty() {
            words.push(format!("{}:{}", gi.parent, gi.id));
        }
        for ci in &gi.compute {
            words.push(format!("{}:{}:{}", gi.parent, gi.id, ci.id));
        }
    }
    if words.is_empty() {
        return "none".into();
    }
    words.join(",")
}

/// The GPU instances, and their compute instances, that the kernel module
/// lists for each of `gpus`, in GPU order then by id. The driver makes the
/// `gi<id>` and `ci<id>` directories as instances are created and removes
/// them as they are destroyed, so a GPU without MIG has none; one destroyed
/// while this reads is skipped, not an error.
pub fn instances(proc_dir: &Path, gpus: &[Gpu]) -> Result<Vec<GpuInstance>> {
    let mut found = Vec::new();
    for gpu in gpus {
        let mig = PathBuf::from(format!("capabilities/gpu{}/mig", gpu.minor));
        for (id, gi) in numbered_dirs(proc_dir, &mig, "gi")? {
            let Some(access) = instance_access(proc_dir, gi.join("access"))? else {
                continue;
            };
            let mut compute = Vec::new();
            for (id, ci) in numbered_dirs(proc_dir, &gi, "ci")? {
                if let Some(access) = instance_access(proc_dir, ci.join("access"))? {
                    compute.push(ComputeInstance { id, access });
                }
            }
            found.push(GpuInstance {
                parent: gpu.index,
                id,
                access,
                compute,
            });
        }
    }
    Ok(found)
}

/// The `<prefix><number>` directories in `rel` (below `proc_dir`), by number,
/// each with its path below `proc_dir`; none where `rel` does not exist.
fn numbered_dirs(proc_dir: &Path, rel: &Path, prefix: &str) -> Result<Vec<(u32, PathBuf)>> {
    let path = proc_dir.join(rel);
    let read_err = |source| Error::Read {
        path: path.clone(),
        source,
    };
    let entries = match fs::read_dir(&path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(read_err(e)),
    };
    let mut dirs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(read_err)?;
        let name = entry.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse().ok())
        else {
            continue;
        };
        if entry.file_type().map_err(read_err)?.is_dir() {
            dirs.push((id, rel.join(name)));
        }
    }
    dirs.sort_unstable();
    Ok(dirs)
}

/// An instance's access file, or `None` if the instance went away.
fn instance_access(proc_dir: &Path, rel: PathBuf) -> Result<Option<CapFile>> {
    match cap_file(proc_dir, rel) {
        Ok(cap) => Ok(Some(cap)),
        Err(Error::Read { source, .. }) if source.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
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

    fn write_access(root: &Path, rel: &str, minor: u32) {
        fs::create_dir_all(root.join(rel).parent().unwrap()).unwrap();
        fs::write(
            root.join(rel),
            format!("DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"),
        )
        .unwrap();
    }

    fn gpu(index: u32, minor: u32) -> Gpu {
        Gpu {
            index,
            minor,
            model: "NVIDIA H100 80GB HBM3".into(),
            uuid: format!("GPU-0000000{index}-0000-0000-0000-000000000000"),
            bus: format!("0000:{index:02x}:00.0"),
        }
    }

    #[test]
    fn lists_instances_from_procfs_by_gpu_minor_without_nvml() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // GPU index 1 has minor 3: its instances live under gpu3.
        write_access(root, "capabilities/gpu3/mig/gi2/access", 30);
        write_access(root, "capabilities/gpu3/mig/gi2/ci1/access", 32);
        write_access(root, "capabilities/gpu3/mig/gi2/ci0/access", 31);
        // A GPU instance without compute instances is still listed.
        write_access(root, "capabilities/gpu3/mig/gi11/access", 102);
        // Neither a file named like an instance nor a stray name counts.
        fs::write(root.join("capabilities/gpu3/mig/gi7"), "").unwrap();
        fs::create_dir_all(root.join("capabilities/gpu3/mig/gix")).unwrap();
        // A GPU the driver does not list for us, and one without MIG.
        write_access(root, "capabilities/gpu9/mig/gi1/access", 90);
        fs::create_dir_all(root.join("capabilities/gpu0/mig")).unwrap();
        let found = instances(root, &[gpu(0, 0), gpu(1, 3)]).unwrap();
        // (GPU index, GPU instance, its minor, [(compute instance, its minor)]).
        type Listed = (u32, u32, u32, Vec<(u32, u32)>);
        let ids: Vec<Listed> = found
            .iter()
            .map(|gi| {
                let cis = gi.compute.iter().map(|c| (c.id, c.access.minor)).collect();
                (gi.parent, gi.id, gi.access.minor, cis)
            })
            .collect();
        assert_eq!(
            ids,
            [(1, 2, 30, vec![(0, 31), (1, 32)]), (1, 11, 102, vec![])]
        );
        assert_eq!(
            found[0].compute[1].access.rel,
            Path::new("capabilities/gpu3/mig/gi2/ci1/access")
        );
    }

    #[test]
    fn an_instance_destroyed_while_listing_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // The directory is there, its access file already gone.
        fs::create_dir_all(root.join("capabilities/gpu0/mig/gi1/ci0")).unwrap();
        write_access(root, "capabilities/gpu0/mig/gi2/access", 21);
        let found = instances(root, &[gpu(0, 0)]).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].id, found[0].compute.len()), (2, 0));
        // A malformed access file is not a race: it is refused, naming the file.
        fs::write(root.join("capabilities/gpu0/mig/gi2/access"), "junk\n").unwrap();
        let err = instances(root, &[gpu(0, 0)]).unwrap_err();
        assert!(err.to_string().contains("gi2/access"), "{err}");
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
                compute_capability: nvml::ComputeCapability { major: 8, minor: 0 },
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

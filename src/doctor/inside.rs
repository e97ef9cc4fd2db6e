//! The live check's half inside the container (`doctor --inside`): this
//! very binary, bind-mounted into a rootfs built of host files, reports
//! what a GPU container sees: each `/dev/nvidia*` node opened (`ENXIO`
//! means the device cgroup allows it and no GPU answers, `EPERM` that the
//! cgroup denies it), `libcuda.so.1` loaded through the loader cache the
//! hook wrote with its `cuDriverGetVersion`, and NVML's device count where
//! NVML loads. Driver code runs in bounded children, as everywhere else.
//!
//! It prints one JSON object on stdout and never fails: what went wrong is
//! part of the report.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{open, OFlag};
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};

/// How long libcuda and NVML may take inside the container.
const TIMEOUT: Duration = Duration::from_secs(20);

/// One device node the container has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSeen {
    /// Its path, e.g. `/dev/nvidia0`.
    pub path: PathBuf,
    /// `ok` when it opened, else the errno's name (`ENXIO`, `EPERM`).
    pub open: String,
}

/// What the container saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// Every `/dev/nvidia*` and `/dev/nvidia-caps/*` node.
    pub nodes: Vec<NodeSeen>,
    /// `cuDriverGetVersion` of the libcuda the loader found.
    pub cuda_driver_version: Option<i32>,
    /// Why libcuda gave no version.
    pub cuda_error: Option<String>,
    /// NVML's device count.
    pub nvml_devices: Option<u32>,
    /// Why NVML gave no count.
    pub nvml_error: Option<String>,
}

/// Looks, and prints the report as JSON.
pub fn run(out: &mut impl Write) -> std::io::Result<()> {
    let seen = look();
    serde_json::to_writer(&mut *out, &seen)?;
    writeln!(out)
}

/// What this container sees.
pub fn look() -> Seen {
    let mut seen = Seen {
        nodes: nodes(Path::new("/dev")),
        ..Seen::default()
    };
    // The loader's search, through the cache the hook wrote: what a CUDA
    // program in this container gets.
    match crate::host::driver::cuda::ask(Path::new("libcuda.so.1"), TIMEOUT) {
        Ok(version) => seen.cuda_driver_version = Some(version.0),
        Err(e) => seen.cuda_error = Some(e.to_string()),
    }
    match crate::host::nvml::device_count(Path::new("libnvidia-ml.so.1"), TIMEOUT) {
        Ok(count) => seen.nvml_devices = Some(count),
        Err(e) => seen.nvml_error = Some(e.to_string()),
    }
    seen
}

/// The NVIDIA nodes under `dev`, each opened and closed again.
fn nodes(dev: &Path) -> Vec<NodeSeen> {
    let mut paths: Vec<PathBuf> = Vec::new();
    for dir in [dev.to_path_buf(), dev.join("nvidia-caps")] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let is_char = entry
                .file_type()
                .is_ok_and(|t| std::os::unix::fs::FileTypeExt::is_char_device(&t));
            let name = entry.file_name();
            if is_char && name.to_string_lossy().starts_with("nvidia") {
                paths.push(entry.path());
            }
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let open = match open(
                &path,
                OFlag::O_RDWR | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY,
                Mode::empty(),
            ) {
                Ok(fd) => {
                    drop(fd);
                    "ok".to_string()
                }
                Err(errno) => format!("{errno:?}"),
            };
            NodeSeen { path, open }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_only_nvidia_character_devices() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("nvidia0"), b"not a device").unwrap();
        std::os::unix::fs::symlink("/dev/null", dir.path().join("nvidia1")).unwrap();
        assert!(nodes(dir.path()).is_empty());
    }

    #[test]
    fn the_report_round_trips_as_json() {
        let seen = Seen {
            nodes: vec![NodeSeen {
                path: "/dev/nvidiactl".into(),
                open: "ENXIO".into(),
            }],
            cuda_driver_version: Some(12020),
            ..Seen::default()
        };
        let text = serde_json::to_string(&seen).unwrap();
        assert_eq!(serde_json::from_str::<Seen>(&text).unwrap(), seen);
    }
}

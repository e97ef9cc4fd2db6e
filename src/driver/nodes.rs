//! Checks the host's NVIDIA device nodes against the numbers the kernel
//! module says they must have. A node that is missing or wrong is reported,
//! never used: injecting `/dev/nvidia0` with the wrong major would hand the
//! container some other device.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::proc::Gpu;

/// Major of `nvidiactl`, `nvidia-modeset` and `nvidiaN`, fixed by the driver.
pub const NVIDIA_MAJOR: u32 = 195;
/// Minor of `/dev/nvidiactl`.
pub const CONTROL_MINOR: u32 = 255;
/// Minor of `/dev/nvidia-modeset`.
pub const MODESET_MINOR: u32 = 254;

/// What a node is for, which decides when it is injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeRole {
    /// `nvidiactl`: every GPU container needs it.
    Control,
    /// `nvidia-modeset`: display only.
    Modeset,
    /// `nvidia-uvm`: compute only.
    Uvm,
    /// `nvidia-uvm-tools`: compute only.
    UvmTools,
    /// `nvidiaN`: one GPU.
    Gpu,
    /// `nvidia-caps/nvidia-capN`: a MIG capability.
    Capability,
}

/// What stat found at a node's path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "state", content = "detail")]
pub enum NodeState {
    /// A character device with the expected numbers; `mode` holds its permission bits.
    Ok { mode: u32 },
    /// Nothing at the path.
    Missing,
    /// Something else: says what.
    Wrong(String),
}

/// One device node the container may receive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    /// What it is for.
    pub role: NodeRole,
    /// Path inside the container, e.g. `/dev/nvidia0`.
    pub path: PathBuf,
    /// Path on the host, under the dev root.
    pub host_path: PathBuf,
    /// The major it must have.
    pub major: u32,
    /// The minor it must have.
    pub minor: u32,
    /// What stat found.
    pub state: NodeState,
}

/// What stat told us about a path: enough to judge a node, and easy to fake in tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    /// Nothing there.
    Missing,
    /// A character device.
    Char { major: u32, minor: u32, mode: u32 },
    /// Something that is not a character device; names its kind.
    Other(&'static str),
}

/// Judges a stat result against the expected numbers.
pub fn judge(stat: Stat, major: u32, minor: u32) -> NodeState {
    match stat {
        Stat::Missing => NodeState::Missing,
        Stat::Other(kind) => NodeState::Wrong(format!("is a {kind}, not a character device")),
        Stat::Char {
            major: found_major,
            minor: found_minor,
            mode,
        } if found_major == major && found_minor == minor => NodeState::Ok { mode },
        Stat::Char {
            major: found_major,
            minor: found_minor,
            ..
        } => NodeState::Wrong(format!(
            "is character device {found_major}:{found_minor}, expected {major}:{minor}"
        )),
    }
}

/// Stats `path` without following a symlink.
pub fn stat(path: &Path) -> io::Result<Stat> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Stat::Missing),
        Err(e) => return Err(e),
    };
    let ft = meta.file_type();
    Ok(if ft.is_char_device() {
        let rdev = meta.rdev();
        Stat::Char {
            major: nix::sys::stat::major(rdev) as u32,
            minor: nix::sys::stat::minor(rdev) as u32,
            mode: meta.mode() & 0o7777,
        }
    } else if ft.is_symlink() {
        Stat::Other("symlink")
    } else if ft.is_dir() {
        Stat::Other("directory")
    } else if ft.is_block_device() {
        Stat::Other("block device")
    } else if ft.is_file() {
        Stat::Other("regular file")
    } else {
        Stat::Other("special file")
    })
}

/// Inspects every NVIDIA node under `<dev_root>/dev`: the control nodes,
/// one per GPU, and the MIG capability nodes.
pub fn inspect(dev_root: &Path, gpus: &[Gpu], majors: &BTreeMap<String, u32>) -> Vec<Node> {
    let dev = dev_root.join("dev");
    let mut nodes = Vec::new();
    let mut add = |role, name: String, major: Option<u32>, minor| {
        let path = PathBuf::from("/dev").join(&name);
        let host_path = dev.join(&name);
        let (major, state) = match major {
            Some(major) => {
                let state = match stat(&host_path) {
                    Ok(s) => judge(s, major, minor),
                    Err(e) => NodeState::Wrong(format!("cannot stat: {e}")),
                };
                (major, state)
            }
            None => (
                0,
                NodeState::Wrong("its driver module has no major in /proc/devices".into()),
            ),
        };
        nodes.push(Node {
            role,
            path,
            host_path,
            major,
            minor,
            state,
        });
    };
    add(
        NodeRole::Control,
        "nvidiactl".into(),
        Some(NVIDIA_MAJOR),
        CONTROL_MINOR,
    );
    add(
        NodeRole::Modeset,
        "nvidia-modeset".into(),
        Some(NVIDIA_MAJOR),
        MODESET_MINOR,
    );
    let uvm = majors.get("nvidia-uvm").copied();
    add(NodeRole::Uvm, "nvidia-uvm".into(), uvm, 0);
    add(NodeRole::UvmTools, "nvidia-uvm-tools".into(), uvm, 1);
    for gpu in gpus {
        add(
            NodeRole::Gpu,
            format!("nvidia{}", gpu.minor),
            Some(NVIDIA_MAJOR),
            gpu.minor,
        );
    }
    if let Some(caps) = majors.get("nvidia-caps").copied() {
        for minor in capability_minors(&dev.join("nvidia-caps")) {
            add(
                NodeRole::Capability,
                format!("nvidia-caps/nvidia-cap{minor}"),
                Some(caps),
                minor,
            );
        }
    }
    nodes
}

/// Minors of the `nvidia-capN` nodes present, sorted; the name carries the minor.
fn capability_minors(dir: &Path) -> Vec<u32> {
    let mut minors: Vec<u32> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("nvidia-cap")?
                .parse()
                .ok()
        })
        .collect();
    minors.sort_unstable();
    minors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_char_device_with_expected_numbers() {
        let state = judge(
            Stat::Char {
                major: 195,
                minor: 0,
                mode: 0o666,
            },
            195,
            0,
        );
        assert_eq!(state, NodeState::Ok { mode: 0o666 });
    }

    #[test]
    fn reports_wrong_major_with_both_numbers() {
        let state = judge(
            Stat::Char {
                major: 1,
                minor: 3,
                mode: 0o666,
            },
            195,
            0,
        );
        assert_eq!(
            state,
            NodeState::Wrong("is character device 1:3, expected 195:0".into())
        );
    }

    #[test]
    fn reports_missing_and_non_devices() {
        assert_eq!(judge(Stat::Missing, 195, 0), NodeState::Missing);
        assert!(
            matches!(judge(Stat::Other("regular file"), 195, 0), NodeState::Wrong(s) if s.contains("regular file"))
        );
    }

    #[test]
    fn stat_does_not_follow_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("nvidia0");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        assert_eq!(stat(&link).unwrap(), Stat::Other("symlink"));
        assert_eq!(stat(&dir.path().join("nope")).unwrap(), Stat::Missing);
        std::fs::write(dir.path().join("f"), b"").unwrap();
        assert_eq!(
            stat(&dir.path().join("f")).unwrap(),
            Stat::Other("regular file")
        );
    }

    #[test]
    fn stat_reads_real_char_device_numbers() {
        // /dev/null is 1:3 on every Linux system.
        assert!(matches!(
            stat(Path::new("/dev/null")).unwrap(),
            Stat::Char {
                major: 1,
                minor: 3,
                ..
            }
        ));
    }

    #[test]
    fn uvm_without_a_major_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = inspect(dir.path(), &[], &BTreeMap::new());
        let uvm = nodes.iter().find(|n| n.role == NodeRole::Uvm).unwrap();
        assert!(matches!(&uvm.state, NodeState::Wrong(s) if s.contains("/proc/devices")));
        let ctl = nodes.iter().find(|n| n.role == NodeRole::Control).unwrap();
        assert_eq!(ctl.state, NodeState::Missing);
        assert_eq!(ctl.path, Path::new("/dev/nvidiactl"));
    }
}

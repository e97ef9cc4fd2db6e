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
use crate::planning::device_class::Class;

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
    /// `nvidia-caps-imex-channels/channelN`: an IMEX channel, asked for by number.
    ImexChannel,
    /// `dri/cardN` of one GPU: graphics and display.
    DrmCard,
    /// `dri/renderDN` of one GPU: graphics and display.
    DrmRender,
    /// `dxg`: a WSL2 host's one node, through which Windows' driver serves every GPU.
    Dxg,
    /// A node a CSV (Jetson) host's mount specs list (`/dev/nvmap`,
    /// `/dev/nvhost-*`, …): its integrated GPU's, all given together.
    Listed,
    /// A node of a feature-gated device class (`NVIDIA_GDS=enabled`, …),
    /// named as its row of [`crate::planning::device_class::CLASSES`] names it.
    #[serde(untagged)]
    Gated(Class),
}

impl NodeRole {
    /// The device class whose variable brings this node, if any.
    pub fn class(self) -> Option<Class> {
        match self {
            NodeRole::Gated(class) => Some(class),
            NodeRole::Control
            | NodeRole::Modeset
            | NodeRole::Uvm
            | NodeRole::UvmTools
            | NodeRole::Gpu
            | NodeRole::Capability
            | NodeRole::ImexChannel
            | NodeRole::DrmCard
            | NodeRole::DrmRender
            | NodeRole::Dxg
            | NodeRole::Listed => None,
        }
    }
}

/// The `/proc/devices` name of the IMEX channels' major.
pub const IMEX_MAJOR_NAME: &str = "nvidia-caps-imex-channels";
/// The directory of the IMEX channel nodes, below `/dev`.
pub const IMEX_DIR: &str = "nvidia-caps-imex-channels";

/// What stat found at a node's path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "state", content = "detail")]
pub enum NodeState {
    /// A character device with the expected numbers; `mode` holds its
    /// permission bits, `gid` its group.
    Ok { mode: u32, gid: u32 },
    /// Nothing at the path.
    Missing,
    /// Something else: says what.
    Wrong(NodeProblem),
}

/// What is wrong with a node that is there, or why it cannot be judged;
/// its `Display` is what `info`, `list` and `doctor` print after the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeProblem {
    /// Something that is not a character device: names its kind.
    NotCharDevice(&'static str),
    /// A character device of other numbers.
    Numbers {
        /// Its major.
        found_major: u32,
        /// Its minor.
        found_minor: u32,
        /// The major it must have.
        major: u32,
        /// The minor it must have.
        minor: u32,
    },
    /// stat failed: its error, as text (an `io::Error` is neither `Clone` nor `Eq`).
    Stat(String),
    /// The node's driver module (`nvidia-uvm`) has no major in `/proc/devices`.
    NoMajor,
    /// The driver has no IMEX channels' major in `/proc/devices`.
    NoImexMajor,
    /// sysfs gives a DRM node a major that is not the `drm` one.
    SysfsMajor {
        /// The major sysfs gives.
        found: u32,
        /// The `drm` major.
        major: u32,
    },
    /// sysfs's `dev` file of a DRM node holds no `MAJOR:MINOR`.
    NoSysfsNumbers {
        /// The `dev` file.
        dev_file: PathBuf,
    },
}

impl std::fmt::Display for NodeProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeProblem::NotCharDevice(kind) => {
                write!(f, "is a {kind}, not a character device")
            }
            NodeProblem::Numbers {
                found_major,
                found_minor,
                major,
                minor,
            } => write!(
                f,
                "is character device {found_major}:{found_minor}, expected {major}:{minor}"
            ),
            NodeProblem::Stat(error) => write!(f, "cannot stat: {error}"),
            NodeProblem::NoMajor => f.write_str("its driver module has no major in /proc/devices"),
            NodeProblem::NoImexMajor => {
                write!(f, "the driver has no {IMEX_MAJOR_NAME} in /proc/devices")
            }
            NodeProblem::SysfsMajor { found, major } => {
                write!(f, "sysfs gives it major {found}, not the drm major {major}")
            }
            NodeProblem::NoSysfsNumbers { dev_file } => {
                write!(f, "{} gives no MAJOR:MINOR", dev_file.display())
            }
        }
    }
}

impl Serialize for NodeProblem {
    /// As its message, as `info --json` has always given it.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl NodeProblem {
    /// stat's error at a node's path.
    pub fn stat(error: &io::Error) -> NodeProblem {
        NodeProblem::Stat(error.to_string())
    }
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
    /// A character device: its numbers, permission bits and group.
    Char {
        major: u32,
        minor: u32,
        mode: u32,
        gid: u32,
    },
    /// Something that is not a character device; names its kind.
    Other(&'static str),
}

/// Judges a stat result against the expected numbers.
pub fn judge(stat: Stat, major: u32, minor: u32) -> NodeState {
    match stat {
        Stat::Missing => NodeState::Missing,
        Stat::Other(kind) => NodeState::Wrong(NodeProblem::NotCharDevice(kind)),
        Stat::Char {
            major: found_major,
            minor: found_minor,
            mode,
            gid,
        } if found_major == major && found_minor == minor => NodeState::Ok { mode, gid },
        Stat::Char {
            major: found_major,
            minor: found_minor,
            ..
        } => NodeState::Wrong(NodeProblem::Numbers {
            found_major,
            found_minor,
            major,
            minor,
        }),
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
            gid: meta.gid(),
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
                    Err(e) => NodeState::Wrong(NodeProblem::stat(&e)),
                };
                (major, state)
            }
            None => (0, NodeState::Wrong(NodeProblem::NoMajor)),
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
    numbered(dir, "nvidia-cap")
}

/// The numbers `N` of the entries `<prefix>N` in `dir`, sorted.
fn numbered(dir: &Path, prefix: &str) -> Vec<u32> {
    let mut numbers: Vec<u32> = names(dir)
        .iter()
        .filter_map(|name| {
            let digits = name.strip_prefix(prefix)?;
            digits
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| digits.parse().ok())
                .flatten()
        })
        .collect();
    numbers.sort_unstable();
    numbers
}

/// The UTF-8 names in `dir`, sorted; none when it cannot be read.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// The IMEX channel nodes the host has under `<dev_root>/dev`, checked
/// against the major `/proc/devices` gives them (the minor is the channel).
pub fn imex_channels(dev_root: &Path, major: Option<u32>) -> Vec<Node> {
    let dir = dev_root.join("dev").join(IMEX_DIR);
    numbered(&dir, "channel")
        .into_iter()
        .map(|channel| imex_channel(dev_root, major, channel))
        .collect()
}

/// IMEX channel `channel`, as the host has it (or not).
pub fn imex_channel(dev_root: &Path, major: Option<u32>, channel: u32) -> Node {
    let name = format!("{IMEX_DIR}/channel{channel}");
    let host_path = dev_root.join("dev").join(&name);
    let (major, state) = match major {
        Some(major) => (major, checked(&host_path, major, channel)),
        None => (0, NodeState::Wrong(NodeProblem::NoImexMajor)),
    };
    Node {
        role: NodeRole::ImexChannel,
        path: PathBuf::from("/dev").join(name),
        host_path,
        major,
        minor: channel,
        state,
    }
}

/// What stat finds at `host_path`, judged against `major:minor`.
pub fn checked(host_path: &Path, major: u32, minor: u32) -> NodeState {
    match stat(host_path) {
        Ok(s) => judge(s, major, minor),
        Err(e) => NodeState::Wrong(NodeProblem::stat(&e)),
    }
}

/// The feature-gated devices' nodes under `<dev_root>/dev`, each class's
/// names as its row of [`crate::planning::device_class::CLASSES`] gives them. Their drivers
/// are not NVIDIA's GPU driver and their majors are dynamic, so a node
/// counts as its driver's when it is a character device of that name (as
/// NVIDIA's char device locator takes it); anything else at the name is
/// reported, never used.
pub fn gated(dev_root: &Path) -> Vec<Node> {
    let dev = dev_root.join("dev");
    let mut nodes = Vec::new();
    let mut listed: Vec<(&str, Vec<String>)> = Vec::new();
    for class in Class::all() {
        for pattern in class.row().nodes {
            let dir = pattern.dir;
            if !listed.iter().any(|(d, _)| *d == dir) {
                listed.push((dir, names(&dev.join(dir))));
            }
            let Some((_, entries)) = listed.iter().find(|(d, _)| *d == dir) else {
                continue;
            };
            for name in entries.iter().filter(|name| pattern.matches(name)) {
                let inner = Path::new(dir).join(name);
                let host_path = dev.join(&inner);
                let (major, minor, state) = match stat(&host_path) {
                    Ok(Stat::Char {
                        major,
                        minor,
                        mode,
                        gid,
                    }) => (major, minor, NodeState::Ok { mode, gid }),
                    Ok(Stat::Missing) => continue,
                    Ok(other) => (0, 0, judge(other, 0, 0)),
                    Err(e) => (0, 0, NodeState::Wrong(NodeProblem::stat(&e))),
                };
                nodes.push(Node {
                    role: NodeRole::Gated(class),
                    path: Path::new("/dev").join(&inner),
                    host_path,
                    major,
                    minor,
                    state,
                });
            }
        }
    }
    nodes
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
                gid: 44,
            },
            195,
            0,
        );
        assert_eq!(
            state,
            NodeState::Ok {
                mode: 0o666,
                gid: 44
            }
        );
    }

    #[test]
    fn reports_wrong_major_with_both_numbers() {
        let state = judge(
            Stat::Char {
                major: 1,
                minor: 3,
                mode: 0o666,
                gid: 0,
            },
            195,
            0,
        );
        assert_eq!(
            state,
            NodeState::Wrong(NodeProblem::Numbers {
                found_major: 1,
                found_minor: 3,
                major: 195,
                minor: 0
            })
        );
        let NodeState::Wrong(problem) = state else {
            unreachable!()
        };
        assert_eq!(
            problem.to_string(),
            "is character device 1:3, expected 195:0"
        );
    }

    #[test]
    fn reports_missing_and_non_devices() {
        assert_eq!(judge(Stat::Missing, 195, 0), NodeState::Missing);
        assert!(
            matches!(judge(Stat::Other("regular file"), 195, 0), NodeState::Wrong(s) if s.to_string().contains("regular file"))
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

    /// nvswitch_test.go, gds_test.go, mofed_test.go, gdrcopy_test.go: an
    /// empty dev root gives nothing, one with the nodes gives them.
    #[test]
    fn gated_devices_are_the_char_devices_of_their_names() {
        let dir = tempfile::tempdir().unwrap();
        assert!(gated(dir.path()).is_empty());
        let dev = dir.path().join("dev");
        std::fs::create_dir_all(dev.join("infiniband")).unwrap();
        // Real character devices cannot be made unprivileged: links to
        // /dev/null stand in where the name is all that is tested, and a
        // regular file must be reported, not used.
        for name in [
            "nvidia-nvswitchctl",
            "nvidia-nvswitch0",
            "nvidia-fs0",
            "gdrdrv",
        ] {
            std::fs::write(dev.join(name), b"").unwrap();
        }
        std::fs::write(dev.join("infiniband/rdma_cm"), b"").unwrap();
        std::fs::write(dev.join("infiniband/other"), b"").unwrap();
        std::fs::write(dev.join("gdrdrv2"), b"").unwrap();
        let nodes = gated(dir.path());
        let paths: Vec<(NodeRole, &str)> = nodes
            .iter()
            .map(|n| (n.role, n.path.to_str().unwrap()))
            .collect();
        let role = |name| NodeRole::Gated(Class::named(name).unwrap());
        assert_eq!(
            paths,
            [
                (role("nvswitch"), "/dev/nvidia-nvswitch0"),
                (role("nvswitch"), "/dev/nvidia-nvswitchctl"),
                (role("gds"), "/dev/nvidia-fs0"),
                (role("mofed"), "/dev/infiniband/rdma_cm"),
                (role("gdrcopy"), "/dev/gdrdrv"),
            ]
        );
        assert!(nodes.iter().all(
            |n| matches!(&n.state, NodeState::Wrong(s) if s.to_string().contains("regular file"))
        ));
    }

    #[test]
    fn imex_channels_are_numbered_nodes_with_the_drivers_major() {
        let dir = tempfile::tempdir().unwrap();
        let imex = dir.path().join("dev").join(IMEX_DIR);
        std::fs::create_dir_all(&imex).unwrap();
        for name in ["channel3", "channel0", "channelx", "channel+1"] {
            std::fs::write(imex.join(name), b"").unwrap();
        }
        let nodes = imex_channels(dir.path(), Some(234));
        let minors: Vec<u32> = nodes.iter().map(|n| n.minor).collect();
        assert_eq!(minors, [0, 3]);
        assert_eq!(
            nodes[1].path,
            Path::new("/dev/nvidia-caps-imex-channels/channel3")
        );
        assert_eq!(nodes[1].major, 234);
        let absent = imex_channel(dir.path(), Some(234), 9);
        assert_eq!(absent.state, NodeState::Missing);
        let unloaded = imex_channel(dir.path(), None, 9);
        assert!(
            matches!(&unloaded.state, NodeState::Wrong(s) if s.to_string().contains("/proc/devices"))
        );
        assert_eq!(unloaded.state, NodeState::Wrong(NodeProblem::NoImexMajor));
    }

    #[test]
    fn uvm_without_a_major_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = inspect(dir.path(), &[], &BTreeMap::new());
        let uvm = nodes.iter().find(|n| n.role == NodeRole::Uvm).unwrap();
        assert!(
            matches!(&uvm.state, NodeState::Wrong(s) if s.to_string().contains("/proc/devices"))
        );
        assert_eq!(uvm.state, NodeState::Wrong(NodeProblem::NoMajor));
        let ctl = nodes.iter().find(|n| n.role == NodeRole::Control).unwrap();
        assert_eq!(ctl.state, NodeState::Missing);
        assert_eq!(ctl.path, Path::new("/dev/nvidiactl"));
    }
}

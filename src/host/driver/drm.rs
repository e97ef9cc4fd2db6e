//! Each GPU's DRM nodes (`/dev/dri/cardN`, `/dev/dri/renderDN`), found
//! through sysfs by the GPU's PCI bus id as NVIDIA's graphics discoverer
//! finds them (`internal/discover/graphics.go`, through
//! `/sys/bus/pci/devices/<bus>/drm/`), and their `/dev/dri/by-path` links.
//! Only read: the numbers come from sysfs's `dev` files and every node is
//! checked against them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::nodes::{self, Node, NodeProblem, NodeRole, NodeState};
use super::proc::Gpu;

/// The DRM major when `/proc/devices` does not list `drm` (it is fixed at 226).
pub const DRM_MAJOR: u32 = 226;

/// One GPU's DRM nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuDrm {
    /// The GPU's PCI bus id, as `/proc/driver/nvidia/gpus` names it.
    pub bus: String,
    /// Its `card` and `renderD` nodes, checked.
    pub nodes: Vec<Node>,
}

impl GpuDrm {
    /// The `/dev/dri/by-path` link of one of its nodes: (link, target
    /// relative to the link), as udev names them.
    pub fn by_path(&self, node: &Node) -> Option<(PathBuf, PathBuf)> {
        let kind = match node.role {
            NodeRole::DrmCard => "card",
            NodeRole::DrmRender => "render",
            NodeRole::Control
            | NodeRole::Modeset
            | NodeRole::Uvm
            | NodeRole::UvmTools
            | NodeRole::Gpu
            | NodeRole::Capability
            | NodeRole::ImexChannel
            | NodeRole::Dxg
            | NodeRole::Listed
            | NodeRole::Gated(_) => return None,
        };
        let name = node.path.file_name()?;
        Some((
            PathBuf::from(format!(
                "/dev/dri/by-path/pci-{}-{kind}",
                self.bus.to_ascii_lowercase()
            )),
            Path::new("..").join(name),
        ))
    }
}

/// The DRM nodes of each of `gpus` that sysfs shows one for.
pub fn inspect(
    sys_root: &Path,
    dev_root: &Path,
    gpus: &[Gpu],
    majors: &BTreeMap<String, u32>,
) -> Vec<GpuDrm> {
    let major = majors.get("drm").copied().unwrap_or(DRM_MAJOR);
    gpus.iter()
        .filter_map(|gpu| {
            let dir = sys_root
                .join("bus/pci/devices")
                .join(gpu.bus.to_ascii_lowercase())
                .join("drm");
            let nodes: Vec<Node> = entries(&dir)
                .into_iter()
                .filter_map(|name| {
                    let role = if name.starts_with("renderD") {
                        NodeRole::DrmRender
                    } else if name.starts_with("card") {
                        NodeRole::DrmCard
                    } else {
                        return None;
                    };
                    Some(node(&dir, dev_root, role, &name, major))
                })
                .collect();
            (!nodes.is_empty()).then(|| GpuDrm {
                bus: gpu.bus.clone(),
                nodes,
            })
        })
        .collect()
}

/// The names below `dir` that name a DRM node (digits after the kind).
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| {
            let digits = name
                .strip_prefix("renderD")
                .or_else(|| name.strip_prefix("card"))
                .unwrap_or("");
            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
        })
        .collect();
    names.sort();
    names
}

/// The node `name` of the GPU whose sysfs `drm` directory is `dir`: its
/// numbers from sysfs's `dev` file, the host's `/dev/dri/<name>` checked
/// against them.
fn node(dir: &Path, dev_root: &Path, role: NodeRole, name: &str, major: u32) -> Node {
    let host_path = dev_root.join("dev/dri").join(name);
    let dev_file = dir.join(name).join("dev");
    let numbers = crate::util::bounded_read::read_text(&dev_file)
        .ok()
        .and_then(|text| parse_dev(&text));
    let (major, minor, state) = match numbers {
        Some((found, minor)) if found == major => {
            (found, minor, nodes::checked(&host_path, found, minor))
        }
        Some((found, minor)) => (
            found,
            minor,
            NodeState::Wrong(NodeProblem::SysfsMajor { found, major }),
        ),
        None => (
            major,
            0,
            NodeState::Wrong(NodeProblem::NoSysfsNumbers { dev_file }),
        ),
    };
    Node {
        role,
        path: PathBuf::from("/dev/dri").join(name),
        host_path,
        major,
        minor,
        state,
    }
}

/// A sysfs `dev` file: `MAJOR:MINOR`.
fn parse_dev(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.trim().split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn gpu(index: u32, bus: &str) -> Gpu {
        Gpu {
            index,
            minor: index,
            model: "NVIDIA L40S".into(),
            uuid: format!("GPU-{index}"),
            bus: bus.into(),
        }
    }

    /// graphics_test.go: the card and render nodes of the GPU's bus id,
    /// nothing for a GPU sysfs shows none for.
    #[test]
    fn finds_each_gpus_card_and_render_nodes_through_sysfs() {
        let sys = tempfile::tempdir().unwrap();
        let dev = tempfile::tempdir().unwrap();
        let drm = sys.path().join("bus/pci/devices/0000:3b:00.0/drm");
        for (name, numbers) in [("card1", "226:1\n"), ("renderD128", "226:128\n")] {
            fs::create_dir_all(drm.join(name)).unwrap();
            fs::write(drm.join(name).join("dev"), numbers).unwrap();
        }
        fs::create_dir_all(drm.join("controlD64")).unwrap();
        let gpus = [gpu(0, "0000:1B:00.0"), gpu(1, "0000:3B:00.0")];
        let found = inspect(sys.path(), dev.path(), &gpus, &BTreeMap::new());
        assert_eq!(found.len(), 1);
        let drm = &found[0];
        assert_eq!(drm.bus, "0000:3B:00.0");
        let got: Vec<(NodeRole, &str, u32, u32)> = drm
            .nodes
            .iter()
            .map(|n| (n.role, n.path.to_str().unwrap(), n.major, n.minor))
            .collect();
        assert_eq!(
            got,
            [
                (NodeRole::DrmCard, "/dev/dri/card1", 226, 1),
                (NodeRole::DrmRender, "/dev/dri/renderD128", 226, 128),
            ]
        );
        // The host lacks the nodes: reported, for doctor and the plan.
        assert!(drm.nodes.iter().all(|n| n.state == NodeState::Missing));
        let links: Vec<_> = drm.nodes.iter().filter_map(|n| drm.by_path(n)).collect();
        assert_eq!(
            links,
            [
                (
                    PathBuf::from("/dev/dri/by-path/pci-0000:3b:00.0-card"),
                    PathBuf::from("../card1")
                ),
                (
                    PathBuf::from("/dev/dri/by-path/pci-0000:3b:00.0-render"),
                    PathBuf::from("../renderD128")
                ),
            ]
        );
    }

    #[test]
    fn a_dev_file_of_another_major_is_reported() {
        let sys = tempfile::tempdir().unwrap();
        let drm = sys.path().join("bus/pci/devices/0000:01:00.0/drm/card0");
        fs::create_dir_all(&drm).unwrap();
        fs::write(drm.join("dev"), "10:0").unwrap();
        let mut majors = BTreeMap::new();
        majors.insert("drm".to_string(), 226);
        let found = inspect(sys.path(), sys.path(), &[gpu(0, "0000:01:00.0")], &majors);
        assert!(
            matches!(&found[0].nodes[0].state, NodeState::Wrong(s) if s.to_string().contains("major 10")),
            "{found:?}"
        );
        assert_eq!(parse_dev("226:0"), Some((226, 0)));
        assert_eq!(parse_dev("226"), None);
    }
}

//! Plans the device nodes a container gets, and the device cgroup rule of
//! each: the control node, the nodes its capabilities need, its GPUs' nodes
//! and its MIG capability nodes; the IMEX channels and feature-gated
//! devices it asks for; its GPUs' DRM nodes for graphics. Every node must
//! be one discovery checked, but for an IMEX channel the host has no node
//! for, made with the driver's major.

use std::path::PathBuf;

use super::mig::Management;
use super::{CgroupRule, DeviceNode, Error, NodeMode, Plan, Result, Selected, Symlink};
use crate::host::driver::nodes::IMEX_DIR;
use crate::host::driver::{CapFile, Inventory, Node, NodeRole, NodeState};
use crate::planning::request::{Capability, ImexChannels, Request};

/// Permission bits of an IMEX channel node the host has none for, as the
/// driver's own `nvidia-modprobe` makes them.
const IMEX_MODE: u32 = 0o666;

/// Adds the nodes of `devices` and of `management` (the MIG config and
/// monitor capabilities, and the managed GPUs' instances) to `plan`, each
/// once, with its cgroup rule.
pub(super) fn plan(
    plan: &mut Plan,
    inventory: &Inventory,
    request: &Request,
    devices: &[Selected<'_>],
    management: &Management<'_>,
) -> Result<()> {
    let caps = &request.capabilities;
    let mut nodes: Vec<(&Node, u32)> = vec![required(
        inventory.node(NodeRole::Control),
        "/dev/nvidiactl",
    )?];
    if caps.contains(Capability::Compute) {
        nodes.push(required(inventory.node(NodeRole::Uvm), "/dev/nvidia-uvm")?);
        nodes.push(required(
            inventory.node(NodeRole::UvmTools),
            "/dev/nvidia-uvm-tools",
        )?);
    }
    if caps.contains(Capability::Display) {
        nodes.push(required(
            inventory.node(NodeRole::Modeset),
            "/dev/nvidia-modeset",
        )?);
    }
    for device in devices {
        let path = PathBuf::from(format!("/dev/nvidia{}", device.gpu().minor));
        nodes.push(required(inventory.node_at(&path), &path.to_string_lossy())?);
        for cap in device.access_files() {
            nodes.push(capability_node(inventory, cap)?);
        }
    }
    for cap in &management.capabilities {
        nodes.push(capability_node(inventory, cap)?);
    }
    // NVIDIA binds the host's whole /dev/nvidia-caps for management
    // (libnvidia-container src/nvc_mount.c `nvc_mig_config_global_caps_mount`):
    // the instances' nodes the host has come, the others are simply absent.
    nodes.extend(
        management
            .instances
            .iter()
            .filter_map(|cap| capability_node(inventory, cap).ok()),
    );
    let mut nodes: Vec<(Node, u32)> = nodes.into_iter().map(|(n, m)| (n.clone(), m)).collect();
    // The dev root's `dev`, as the control node shows it.
    let dev = nodes[0]
        .0
        .host_path
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    nodes.extend(imex(inventory, &request.imex, plan.node_mode, &dev)?);
    nodes.extend(gated(inventory, request));
    if caps.contains(Capability::Graphics) {
        nodes.extend(drm(plan, inventory, devices));
    }
    // Two MIG devices of one GPU share its node.
    let mut seen = Vec::new();
    nodes.retain(|(node, _)| {
        let new = !seen.contains(&node.path);
        seen.push(node.path.clone());
        new
    });
    for (node, mode) in nodes {
        add_node(plan, node, mode);
    }
    Ok(())
}

/// Adds `node` to `plan` with permission bits `mode`, and its cgroup rule.
pub(super) fn add_node(plan: &mut Plan, node: Node, mode: u32) {
    let gid = match node.state {
        NodeState::Ok { gid, .. } => gid,
        NodeState::Missing | NodeState::Wrong(_) => 0,
    };
    plan.cgroup_rules.push(CgroupRule {
        kind: 'c',
        major: node.major,
        minor: node.minor,
        access: "rw",
    });
    plan.devices.push(DeviceNode {
        host_path: node.host_path,
        path: node.path,
        major: node.major,
        minor: node.minor,
        mode,
        gid,
    });
}

/// The IMEX channels asked for: `all` is every channel the host has; a
/// channel named is made with the driver's major even where the host has
/// no node for it (its driver makes them only on demand, and NVIDIA's CLI
/// makes them itself unless `--no-create-imex-channels`), but bound only
/// where it has one.
fn imex(
    inventory: &Inventory,
    asked: &ImexChannels,
    mode: NodeMode,
    dev: &std::path::Path,
) -> Result<Vec<(Node, u32)>> {
    let channels: Vec<u32> = match asked {
        ImexChannels::None => return Ok(Vec::new()),
        ImexChannels::All => inventory
            .nodes
            .iter()
            .filter(|n| n.role == NodeRole::ImexChannel)
            .map(|n| n.minor)
            .collect(),
        ImexChannels::List(channels) => channels.clone(),
    };
    let mut nodes = Vec::new();
    for channel in channels {
        let path = PathBuf::from(format!("/dev/{IMEX_DIR}/channel{channel}"));
        let Some(major) = inventory.imex_major else {
            return Err(Error::NodeUnusable {
                path,
                problem: "the driver has no nvidia-caps-imex-channels in /proc/devices                           (an IMEX-capable driver, 550 or later, loaded?)"
                    .into(),
            });
        };
        let known = inventory
            .nodes
            .iter()
            .find(|n| n.role == NodeRole::ImexChannel && n.minor == channel);
        let node = match known {
            Some(node) if node.state != NodeState::Missing => required(Some(node), "")?,
            _ if mode == NodeMode::Bind => {
                return Err(Error::NodeUnusable {
                    path,
                    problem: "the host has no node for it, and a container in a user \
                    namespace gets the host's node bound"
                        .into(),
                })
            }
            _ => {
                nodes.push((
                    Node {
                        role: NodeRole::ImexChannel,
                        // Where the host would have it: `list` names it.
                        host_path: dev.join(format!("{IMEX_DIR}/channel{channel}")),
                        path,
                        major,
                        minor: channel,
                        state: NodeState::Ok {
                            mode: IMEX_MODE,
                            gid: 0,
                        },
                    },
                    IMEX_MODE,
                ));
                continue;
            }
        };
        nodes.push((node.0.clone(), node.1));
    }
    Ok(nodes)
}

/// The feature-gated devices' nodes the request enables, as NVIDIA's
/// discoverers find them: those the host has; one that is not a character
/// device is left out, and said.
fn gated(inventory: &Inventory, request: &Request) -> Vec<(Node, u32)> {
    let enabled = |role: NodeRole| role.class().is_some_and(|c| request.gated.contains(c));
    usable(inventory.nodes.iter().filter(|n| enabled(n.role)))
}

/// The selected GPUs' DRM nodes (a MIG device's are its GPU's), with their
/// `/dev/dri/by-path` links added to `plan`; a GPU without any (no
/// `nvidia-drm`, or a headless one) simply has none, as with NVIDIA.
fn drm(plan: &mut Plan, inventory: &Inventory, devices: &[Selected<'_>]) -> Vec<(Node, u32)> {
    let mut nodes = Vec::new();
    let mut buses: Vec<&str> = Vec::new();
    for device in devices {
        let bus = device.gpu().bus.as_str();
        if buses.contains(&bus) {
            continue;
        }
        buses.push(bus);
        let Some(drm) = inventory.drm_of(bus) else {
            continue;
        };
        let found = usable(drm.nodes.iter());
        for (node, _) in &found {
            if let Some((path, target)) = drm.by_path(node) {
                plan.symlinks.push(Symlink { path, target });
            }
        }
        nodes.extend(found);
    }
    nodes
}

/// The nodes of `candidates` that are usable, with their permission bits;
/// the others are said and left out.
fn usable<'a>(candidates: impl Iterator<Item = &'a Node>) -> Vec<(Node, u32)> {
    candidates
        .filter_map(|node| match &node.state {
            NodeState::Ok { mode, .. } => Some((node.clone(), *mode)),
            NodeState::Missing => {
                log::warn!("{} is missing: not given", node.host_path.display());
                None
            }
            NodeState::Wrong(problem) => {
                log::warn!("{} {problem}: not given", node.host_path.display());
                None
            }
        })
        .collect()
}

/// The `nvidia-capN` node a capability file grants.
fn capability_node<'a>(inventory: &'a Inventory, cap: &CapFile) -> Result<(&'a Node, u32)> {
    let path = format!("/dev/nvidia-caps/nvidia-cap{}", cap.minor);
    let node = inventory
        .nodes
        .iter()
        .find(|n| n.role == NodeRole::Capability && n.minor == cap.minor);
    required(node, &path)
}

/// A node that must be usable, with its permission bits.
pub(super) fn required<'a>(node: Option<&'a Node>, path: &str) -> Result<(&'a Node, u32)> {
    let node = node.ok_or_else(|| Error::NodeUnusable {
        path: PathBuf::from(path),
        problem: "not known to the driver".into(),
    })?;
    match &node.state {
        NodeState::Ok { mode, .. } => Ok((node, *mode)),
        NodeState::Missing => Err(Error::NodeUnusable {
            path: node.host_path.clone(),
            problem: "it does not exist".into(),
        }),
        NodeState::Wrong(problem) => Err(Error::NodeUnusable {
            path: node.host_path.clone(),
            problem: problem.to_string(),
        }),
    }
}

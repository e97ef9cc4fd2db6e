//! Plans the device nodes a container gets, and the device cgroup rule of
//! each: the control node, the nodes its capabilities need, its GPUs' nodes
//! and its MIG capability nodes. Every node must be one discovery checked.

use std::path::PathBuf;

use super::mig::Management;
use super::{CgroupRule, DeviceNode, Error, Plan, Result, Selected};
use crate::driver::{CapFile, Inventory, Node, NodeRole, NodeState};
use crate::request::{Capability, Request};

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
    let mut nodes = vec![required(
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
    // Two MIG devices of one GPU share its node.
    let mut seen = Vec::new();
    nodes.retain(|(node, _)| {
        let new = !seen.contains(&node.path);
        seen.push(node.path.clone());
        new
    });
    for (node, mode) in nodes {
        plan.cgroup_rules.push(CgroupRule {
            kind: 'c',
            major: node.major,
            minor: node.minor,
            access: "rw",
        });
        plan.devices.push(DeviceNode {
            host_path: node.host_path.clone(),
            path: node.path.clone(),
            major: node.major,
            minor: node.minor,
            mode,
        });
    }
    Ok(())
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
fn required<'a>(node: Option<&'a Node>, path: &str) -> Result<(&'a Node, u32)> {
    let node = node.ok_or_else(|| Error::NodeUnusable {
        path: PathBuf::from(path),
        problem: "not known to the driver".into(),
    })?;
    match &node.state {
        NodeState::Ok { mode } => Ok((node, *mode)),
        NodeState::Missing => Err(Error::NodeUnusable {
            path: node.host_path.clone(),
            problem: "it does not exist".into(),
        }),
        NodeState::Wrong(problem) => Err(Error::NodeUnusable {
            path: node.host_path.clone(),
            problem: problem.clone(),
        }),
    }
}

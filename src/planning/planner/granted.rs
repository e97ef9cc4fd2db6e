//! What a runtime granted a container from a spec we generated, read back
//! as devices: the `cdi-hook` plans from the nodes the runtime created,
//! never from the environment.

use crate::host::driver::{Inventory, NodeRole};
use crate::planning::bundle::GrantedNode;
use crate::planning::request::{DeviceId, DeviceSelection};

/// The devices whose nodes are among `nodes`: a GPU by its `nvidiaN`
/// node, a MIG device by its two `nvidia-capN` nodes beside its GPU's,
/// named in the older form that procfs resolves without NVML.
pub(super) fn granted_devices(inventory: &Inventory, nodes: &[GrantedNode]) -> DeviceSelection {
    let has = |role: NodeRole, minor: u32| {
        inventory
            .nodes
            .iter()
            .filter(|n| n.role == role && n.minor == minor)
            .any(|n| {
                nodes.contains(&GrantedNode {
                    major: n.major,
                    minor,
                })
            })
    };
    if inventory.wsl.is_some() || inventory.csv.is_some() {
        // /dev/dxg serves every GPU, a CSV host's nodes its one GPU: granted, it is `all`.
        return if inventory
            .nodes
            .iter()
            .any(|n| matches!(n.role, NodeRole::Dxg | NodeRole::Listed) && has(n.role, n.minor))
        {
            DeviceSelection::All
        } else {
            DeviceSelection::None
        };
    }
    let mut ids = Vec::new();
    for gpu in inventory
        .gpus
        .iter()
        .filter(|g| has(NodeRole::Gpu, g.minor))
    {
        ids.push(DeviceId::Index(gpu.index));
        for gi in inventory
            .mig_instances
            .iter()
            .filter(|i| i.parent == gpu.index)
        {
            if !has(NodeRole::Capability, gi.access.minor) {
                continue;
            }
            for ci in gi
                .compute
                .iter()
                .filter(|c| has(NodeRole::Capability, c.access.minor))
            {
                ids.push(DeviceId::Mig(format!(
                    "MIG-{}/{}/{}",
                    gpu.uuid, gi.id, ci.id
                )));
            }
        }
    }
    if ids.is_empty() {
        DeviceSelection::None
    } else {
        DeviceSelection::List(ids)
    }
}

//! Who in the container may use the nodes a plan gives it: a node only its
//! group may use is opened to the container's users, as NVIDIA's toolkit
//! does since 1.19 with its additional GIDs.

use crate::config::Config;
use crate::planning::plan::Plan;

/// A node only its group may use (`0660`, a render node's `root:render`)
/// is one the container's non-root user cannot open, though the device
/// cgroup grants it: as NVIDIA's toolkit since 1.19, the container's
/// process joins the node's group (the runtime wrapper's
/// `additionalGids`; never root's group), and the node made in the
/// container gets the group's access for everyone, which reaches a
/// container the hook or a CDI spec serves, whose process's groups
/// nothing of ours sets. `no-additional-gids` keeps the host's modes.
pub(super) fn open_group_only_nodes(config: &Config, plan: &mut Plan) {
    if config.no_additional_gids {
        return;
    }
    for node in &mut plan.devices {
        let group = node.mode & 0o060;
        if group == 0 || node.mode & 0o006 == group >> 3 {
            continue;
        }
        node.mode |= group >> 3;
        if node.gid != 0 && !plan.additional_gids.contains(&node.gid) {
            plan.additional_gids.push(node.gid);
        }
    }
}

//! What a planner's caller leaves to a runtime or a spec.

use crate::planning::plan::Plan;

/// What the caller leaves to someone else: a runtime that creates the
/// nodes or grants the cgroup itself (NVIDIA's CLI `--no-devbind`,
/// `--no-cgroups`), or a CDI spec whose edits the runtime applied. The
/// plan then holds none of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeftToOthers {
    /// The device nodes in the container's `/dev`.
    pub nodes: bool,
    /// The device cgroup rules.
    pub cgroup_rules: bool,
    /// The bind mounts.
    pub mounts: bool,
}

impl LeftToOthers {
    /// Nothing: the caller applies the whole plan.
    pub const NOTHING: LeftToOthers = LeftToOthers {
        nodes: false,
        cgroup_rules: false,
        mounts: false,
    };

    /// What a runtime applies from a spec we generated: the nodes, their
    /// cgroup rules and the mounts.
    pub const SPEC_EDITS: LeftToOthers = LeftToOthers {
        nodes: true,
        cgroup_rules: true,
        mounts: true,
    };

    /// `plan` without what others own.
    pub(super) fn take_from(self, plan: &mut Plan) {
        if self.nodes {
            plan.devices.clear();
        }
        if self.cgroup_rules {
            plan.cgroup_rules.clear();
        }
        if self.mounts {
            plan.mounts.clear();
        }
    }
}

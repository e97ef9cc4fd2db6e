//! A plan as container edits: the part of it a runtime applies itself
//! (device nodes with their cgroup permissions, bind mounts), plus the one
//! `createRuntime` hook that does the rest (loader cache, links, the
//! `/proc/driver/nvidia` mask). The CDI spec and the runtime wrapper both
//! take their edits from here, so neither re-derives what a plan means.

use std::path::PathBuf;

use super::spec::{ContainerEdits, DeviceNode, Hook, Mount};
use crate::planning::plan::{self, Plan};
use crate::planning::planner::{Planned, SpecMade};
pub use crate::specs::cdi_hook_args::{HOOK_COMMAND, HOOK_STAGE};
use crate::util::this_program;

pub use crate::util::this_program::HOOK_ENV;

/// What keeps a `hooks.d` copy of our hook, or NVIDIA's, from injecting a
/// second time into a container whose devices the runtime already added:
/// both read `void` as "not a GPU container". CDI appends it after the
/// image's own environment, so it wins.
pub const VISIBLE_DEVICES_VOID: &str = "NVIDIA_VISIBLE_DEVICES=void";

/// The cgroup access we grant: read and write, never mknod.
const PERMISSIONS: &str = "rw";

/// How the spec's hook calls this binary back at `createRuntime`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Callback {
    /// This binary, absolute.
    pub program: PathBuf,
    /// The configuration the spec was made with, absolute; `None` for the default path.
    pub config: Option<PathBuf>,
    /// How the spec was made: the hook refuses another driver's.
    pub made: SpecMade,
}

impl Callback {
    /// The hook of a spec of `planned`'s edits; `None` for a void request.
    pub fn for_planned(
        program: PathBuf,
        config: Option<PathBuf>,
        planned: &Planned,
    ) -> Option<Callback> {
        Some(Callback {
            program,
            config,
            made: planned.spec_made()?,
        })
    }

    /// The `createRuntime` hook entry, with its explicit environment.
    pub fn hook(&self) -> Hook {
        let mut args: Vec<String> = vec![
            this_program::NAME.into(),
            HOOK_COMMAND.into(),
            HOOK_STAGE.into(),
        ];
        args.extend(self.made.args());
        if let Some(config) = &self.config {
            args.push("--config".into());
            args.push(config.display().to_string());
        }
        Hook {
            hook_name: HOOK_STAGE.into(),
            path: self.program.clone(),
            args,
            env: HOOK_ENV.iter().map(|e| (*e).to_string()).collect(),
            timeout: None,
        }
    }
}

/// `nodes` as CDI device nodes, each with its host node where that is elsewhere.
pub fn device_nodes<'a>(nodes: impl IntoIterator<Item = &'a plan::DeviceNode>) -> Vec<DeviceNode> {
    nodes
        .into_iter()
        .map(|node| DeviceNode {
            path: node.path.clone(),
            host_path: (node.host_path != node.path).then(|| node.host_path.clone()),
            kind: Some("c".into()),
            major: Some(node.major.into()),
            minor: Some(node.minor.into()),
            file_mode: Some(node.mode & 0o7777),
            permissions: Some(PERMISSIONS.into()),
            uid: None,
            gid: None,
        })
        .collect()
}

/// The plan's bind mounts, with the options the hook would mount them with.
pub fn mounts(plan: &Plan) -> Vec<Mount> {
    plan.mounts
        .iter()
        .map(|m| {
            let mut options: Vec<String> =
                m.options.names().into_iter().map(String::from).collect();
            options.push("bind".into());
            Mount {
                host_path: m.source.clone(),
                container_path: m.destination.clone(),
                options,
                kind: Some("bind".into()),
            }
        })
        .collect()
}

/// Everything of `plan` for one container: its nodes, mounts, the
/// `void` marker and the hook. What a spec splits between its devices and
/// its spec-wide edits, the runtime wrapper writes at once.
pub fn container_edits(plan: &Plan, callback: &Callback) -> ContainerEdits {
    ContainerEdits {
        env: vec![VISIBLE_DEVICES_VOID.into()],
        device_nodes: device_nodes(&plan.devices),
        hooks: vec![callback.hook()],
        mounts: mounts(plan),
        additional_gids: plan.additional_gids.clone(),
        ..ContainerEdits::default()
    }
}

/// The nodes of `plan` that `common` does not have: what one device adds.
pub fn nodes_beyond<'a>(
    plan: &'a Plan,
    common: &'a Plan,
) -> impl Iterator<Item = &'a plan::DeviceNode> {
    plan.devices
        .iter()
        .filter(move |node| !common.devices.iter().any(|c| c.path == node.path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planning::image::ImageLayout;

    /// The runtime wrapper's edits carry the groups the planner joined
    /// (NVIDIA 1.19's additional GIDs), and each node's mode as planned.
    #[test]
    fn the_wrappers_edits_carry_the_plans_groups_and_modes() {
        let plan = Plan {
            devices: vec![plan::DeviceNode {
                host_path: "/dev/dri/renderD128".into(),
                path: "/dev/dri/renderD128".into(),
                major: 226,
                minor: 128,
                mode: 0o666,
                gid: 105,
            }],
            additional_gids: vec![105],
            ..Plan::default()
        };
        let callback = Callback {
            program: "/usr/bin/oci-nvidia-hook".into(),
            config: None,
            made: SpecMade {
                driver_version: "535.261.03".into(),
                capabilities: "graphics".into(),
                layout: ImageLayout::Debian,
                mig_layout: None,
                roots: Default::default(),
            },
        };
        let edits = container_edits(&plan, &callback);
        assert_eq!(edits.additional_gids, [105]);
        assert_eq!(edits.device_nodes[0].file_mode, Some(0o666));
        // A spec's device holds nodes, never a process's groups.
        assert!(device_nodes(&plan.devices).iter().all(|n| n.gid.is_none()));
    }
}

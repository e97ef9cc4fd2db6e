//! `cdi generate`: a spec for every device of this host, from the one
//! planner. Each device is the plan for that device alone; its edits are
//! the nodes its plan has beyond the plan for no device, which with the
//! mounts and the hook make the spec-wide edits.

use std::fmt;
use std::str::FromStr;

use super::edits::{self, Callback, VISIBLE_DEVICES_VOID};
use super::spec::{required_version, ContainerEdits, Device, Spec, KIND};
use super::{Error, Result};
use crate::config::Config;
use crate::host::driver::{Inventory, NodeRole, NodeState};
use crate::planning::image::ImageLayout;
use crate::planning::plan;
use crate::planning::planner::{self, EachDevice, SpecMade};

/// The kind of IMEX channel devices, as NVIDIA's: `nvidia.com/imex-channel=0`.
pub const IMEX_KIND: &str = "nvidia.com/imex-channel";

/// How devices are named; a spec may use several at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameStrategy {
    /// `0`, and `0:1` for MIG devices: what users type.
    Index,
    /// `GPU-…` and `MIG-…`: what the Kubernetes device plugin passes.
    Uuid,
}

impl FromStr for NameStrategy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "index" => Ok(NameStrategy::Index),
            "uuid" => Ok(NameStrategy::Uuid),
            other => Err(Error::NameStrategy {
                value: other.to_string(),
            }),
        }
    }
}

impl fmt::Display for NameStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameStrategy::Index => "index",
            NameStrategy::Uuid => "uuid",
        })
    }
}

/// Parses `index,uuid`: each name once, at least one.
pub fn parse_strategies(value: &str) -> Result<Vec<NameStrategy>> {
    let mut strategies = Vec::new();
    for item in value.split(',').map(str::trim) {
        let strategy: NameStrategy = item.parse()?;
        if !strategies.contains(&strategy) {
            strategies.push(strategy);
        }
    }
    Ok(strategies)
}

/// Which kind of host a spec is made for (`--mode`): `auto` takes the
/// host discovery found; `nvml` (a native driver) and `wsl` (a WSL2 host)
/// insist, and refuse the other.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Whatever the host is.
    #[default]
    Auto,
    /// A native driver: `/proc/driver/nvidia`, `/dev/nvidia*`.
    Nvml,
    /// A WSL2 host: `/dev/dxg`, `/usr/lib/wsl`.
    Wsl,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Auto => "auto",
            Mode::Nvml => "nvml",
            Mode::Wsl => "wsl",
        })
    }
}

/// What a spec is generated with.
#[derive(Debug, Clone)]
pub struct Options {
    /// The kind of host it is for.
    pub mode: Mode,
    /// Device names to write.
    pub strategies: Vec<NameStrategy>,
    /// Capabilities whose files the spec mounts; `None` for every one the config supports.
    pub capabilities: Option<String>,
    /// The library layout of the container paths.
    pub layout: ImageLayout,
    /// This binary and its config, for the hook.
    pub program: std::path::PathBuf,
    /// The config file the hook is to read, absolute; `None` for the default.
    pub config_path: Option<std::path::PathBuf>,
    /// Whether the spec has an `all` device (NVIDIA's `--no-all-device` leaves it out).
    pub all_device: bool,
}

/// Generates the spec for this host, from the planner's plan for each device.
pub fn generate(config: &Config, options: &Options) -> Result<Generated> {
    let capabilities = options
        .capabilities
        .clone()
        .unwrap_or_else(|| config.supported().to_string());
    let EachDevice {
        inventory,
        common,
        devices: planned,
        all,
    } = planner::plan_each_device(config, &capabilities, options.layout)?;
    let found = if inventory.wsl.is_some() {
        Mode::Wsl
    } else {
        Mode::Nvml
    };
    if options.mode != Mode::Auto && options.mode != found {
        return Err(Error::Mode {
            asked: options.mode,
            found,
        });
    }

    let mut devices = Vec::new();
    for device in &planned {
        let edits = ContainerEdits {
            device_nodes: edits::device_nodes(edits::nodes_beyond(&device.plan, &common)),
            ..ContainerEdits::default()
        };
        for strategy in &options.strategies {
            let name = match strategy {
                NameStrategy::Index => &device.index,
                NameStrategy::Uuid => &device.uuid,
            };
            devices.push(Device {
                name: name.clone(),
                container_edits: edits.clone(),
                ..Device::default()
            });
        }
    }
    if options.all_device {
        devices.push(Device {
            name: "all".into(),
            container_edits: ContainerEdits {
                device_nodes: edits::device_nodes(edits::nodes_beyond(&all, &common)),
                ..ContainerEdits::default()
            },
            ..Device::default()
        });
    }

    // The IMEX channels, from the same inventory.
    let imex = imex_spec(&inventory);
    let callback = Callback {
        program: options.program.clone(),
        config: options.config_path.clone(),
        made: SpecMade {
            mig_layout: Some(crate::host::driver::mig_layout(&inventory.mig_instances)),
            driver_version: inventory.driver_version,
            capabilities,
            layout: options.layout,
        },
    };
    let mut spec = Spec {
        cdi_version: String::new(),
        kind: KIND.into(),
        devices,
        container_edits: ContainerEdits {
            env: vec![VISIBLE_DEVICES_VOID.into()],
            device_nodes: edits::device_nodes(&common.devices),
            hooks: vec![callback.hook()],
            mounts: edits::mounts(&common),
            ..ContainerEdits::default()
        },
        ..Spec::default()
    };
    spec.cdi_version = required_version(&spec).into();
    Ok(Generated { gpus: spec, imex })
}

/// The specs of one host, made from one inventory.
#[derive(Debug, Clone)]
pub struct Generated {
    /// The GPUs' spec (`nvidia.com/gpu`).
    pub gpus: Spec,
    /// The IMEX channels' spec; `None` when the host has no channel.
    pub imex: Option<Spec>,
}

/// The IMEX channel spec of an inventoried host: one device per channel
/// node it has, named by its number, holding only that node; `None` when
/// the host has none. A spec of its own, as a spec has one kind.
pub fn imex_spec(inventory: &Inventory) -> Option<Spec> {
    let devices: Vec<Device> = inventory
        .nodes
        .iter()
        .filter(|n| n.role == NodeRole::ImexChannel)
        .filter_map(|n| {
            let NodeState::Ok { mode } = n.state else {
                log::warn!(
                    "{} left out of the IMEX spec: {:?}",
                    n.host_path.display(),
                    n.state
                );
                return None;
            };
            let node = plan::DeviceNode {
                host_path: n.host_path.clone(),
                path: n.path.clone(),
                major: n.major,
                minor: n.minor,
                mode,
            };
            Some(Device {
                name: n.minor.to_string(),
                container_edits: ContainerEdits {
                    device_nodes: edits::device_nodes(std::slice::from_ref(&node)),
                    ..ContainerEdits::default()
                },
                ..Device::default()
            })
        })
        .collect();
    if devices.is_empty() {
        return None;
    }
    let mut spec = Spec {
        cdi_version: String::new(),
        kind: IMEX_KIND.into(),
        devices,
        ..Spec::default()
    };
    spec.cdi_version = required_version(&spec).into();
    Some(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::driver::Node;

    #[test]
    fn imex_spec_has_one_device_per_host_channel() {
        let mut inventory = crate::planning::plan::tests::inventory();
        assert_eq!(imex_spec(&inventory), None);
        for (minor, state) in [
            (0, NodeState::Ok { mode: 0o666 }),
            (5, NodeState::Ok { mode: 0o660 }),
            (6, NodeState::Missing),
        ] {
            inventory.nodes.push(Node {
                role: NodeRole::ImexChannel,
                path: format!("/dev/nvidia-caps-imex-channels/channel{minor}").into(),
                host_path: format!("/sim/dev/nvidia-caps-imex-channels/channel{minor}").into(),
                major: 234,
                minor,
                state,
            });
        }
        let spec = imex_spec(&inventory).unwrap();
        assert_eq!(spec.kind, "nvidia.com/imex-channel");
        let names: Vec<&str> = spec.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["0", "5"]);
        let node = &spec.devices[1].container_edits.device_nodes[0];
        assert_eq!(
            node.path,
            std::path::Path::new("/dev/nvidia-caps-imex-channels/channel5")
        );
        assert_eq!((node.major, node.minor), (Some(234), Some(5)));
    }
}

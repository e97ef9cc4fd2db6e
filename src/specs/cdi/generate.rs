//! `cdi generate`: a spec for every device of this host, from the one
//! planner. Each device is the plan for that device alone; its edits are
//! the nodes its plan has beyond the plan for no device, which with the
//! mounts and the hook make the spec-wide edits.

use std::fmt;
use std::str::FromStr;

use super::edits::{self, Callback, VISIBLE_DEVICES_VOID};
use super::spec::{required_version, ContainerEdits, Device, Spec};
use super::{Error, Result};
use crate::config::Config;
use crate::host::driver::{Inventory, NodeRole, NodeState};
use crate::planning::image::ImageLayout;
use crate::planning::plan;
use crate::planning::planner::{self, DevicePlan, EachDevice, SpecMade, SpecScope};
use crate::specs::cdi_hook_args::Roots;

pub use crate::planning::request::IMEX_KIND;

/// How devices are named; a spec may use several at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameStrategy {
    /// `0`, and `0:1` for MIG devices: what users type.
    Index,
    /// `GPU-…` and `MIG-…`: what the Kubernetes device plugin passes.
    Uuid,
    /// `gpu0`, and `mig0:1` for MIG devices: NVIDIA's `type-index`.
    TypeIndex,
}

impl NameStrategy {
    /// The name of the device `index` (`0`, or `0:1` for a MIG device)
    /// and `uuid` by this strategy.
    pub fn name(self, index: &str, uuid: &str) -> String {
        match self {
            NameStrategy::Index => index.to_string(),
            NameStrategy::Uuid => uuid.to_string(),
            NameStrategy::TypeIndex if index.contains(':') => format!("mig{index}"),
            NameStrategy::TypeIndex => format!("gpu{index}"),
        }
    }
}

impl FromStr for NameStrategy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "index" => Ok(NameStrategy::Index),
            "uuid" => Ok(NameStrategy::Uuid),
            "type-index" => Ok(NameStrategy::TypeIndex),
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
            NameStrategy::TypeIndex => "type-index",
        })
    }
}

/// Parses `index,uuid` (or `type-index`): each name once, at least one.
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
/// host discovery found; `nvml` (a native driver), `wsl` (a WSL2 host)
/// and `csv` (a Jetson/Tegra host's CSV mount specs) insist, and refuse
/// the others; `management` is NVIDIA's spec for the
/// pods that manage a native driver's GPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Whatever the host is.
    #[default]
    Auto,
    /// A native driver: `/proc/driver/nvidia`, `/dev/nvidia*`.
    Nvml,
    /// A WSL2 host: `/dev/dxg`, `/usr/lib/wsl`.
    Wsl,
    /// A Jetson/Tegra host: what its CSV mount specs list.
    Csv,
    /// A native driver, one device `all` with every GPU's and the MIG
    /// management nodes, and the driver's files.
    Management,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Auto => "auto",
            Mode::Nvml => "nvml",
            Mode::Wsl => "wsl",
            Mode::Csv => "csv",
            Mode::Management => "management",
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
    /// Its kind, `vendor/class`.
    pub kind: String,
    /// The devices it has, by index or UUID (`--device-id`): `all` for
    /// every one, `none` for a device `none` holding no GPU.
    pub device_ids: Vec<String>,
    /// Whether it carries its hook (NVIDIA's `--disable-hook=all` says no).
    pub hook: bool,
    /// The roots it is made on where they are not the config's, for the hook.
    pub roots: Roots,
}

/// The name of the device that holds no GPU (NVIDIA's `--device-id=none`).
pub const NO_GPU_DEVICE: &str = "none";

/// Generates the spec for this host, from the planner's plan for each device.
pub fn generate(config: &Config, options: &Options) -> Result<Generated> {
    let capabilities = options
        .capabilities
        .clone()
        .unwrap_or_else(|| config.supported().to_string());
    let scope = match options.mode {
        Mode::Management => SpecScope::Management,
        Mode::Auto | Mode::Nvml | Mode::Wsl | Mode::Csv => SpecScope::EachDevice,
    };
    let EachDevice {
        inventory,
        common,
        devices: planned,
        all,
    } = planner::plan_each_device(config, &capabilities, options.layout, scope)?;
    let found = if inventory.wsl.is_some() {
        Mode::Wsl
    } else if inventory.csv.is_some() {
        Mode::Csv
    } else {
        Mode::Nvml
    };
    let asked = match options.mode {
        Mode::Management => Mode::Nvml,
        mode => mode,
    };
    if asked != Mode::Auto && asked != found {
        return Err(Error::Mode {
            asked: options.mode,
            found,
        });
    }

    let mut devices = Vec::new();
    for device in selected(&planned, &options.device_ids)? {
        let edits = ContainerEdits {
            device_nodes: edits::device_nodes(edits::nodes_beyond(&device.plan, &common)),
            ..ContainerEdits::default()
        };
        // A CSV host's GPU has no UUID: it is named by index alone.
        let strategies = options
            .strategies
            .iter()
            .filter(|s| !(device.uuid.is_empty() && **s == NameStrategy::Uuid));
        for strategy in strategies {
            devices.push(Device {
                name: strategy.name(&device.index, &device.uuid),
                container_edits: edits.clone(),
                ..Device::default()
            });
        }
    }
    if options.device_ids.iter().any(|id| id == NO_GPU_DEVICE) {
        // A device must edit something: the marker the spec sets anyway.
        devices.push(Device {
            name: NO_GPU_DEVICE.into(),
            container_edits: ContainerEdits {
                env: vec![VISIBLE_DEVICES_VOID.into()],
                ..ContainerEdits::default()
            },
            ..Device::default()
        });
    }
    if options.all_device || options.mode == Mode::Management {
        devices.push(Device {
            name: "all".into(),
            container_edits: ContainerEdits {
                device_nodes: edits::device_nodes(edits::nodes_beyond(&all, &common)),
                ..ContainerEdits::default()
            },
            ..Device::default()
        });
    }

    // The IMEX channels, from the same inventory; a management spec is one spec.
    let imex = match options.mode {
        Mode::Management => None,
        _ => imex_spec(&inventory),
    };
    let callback = Callback {
        program: options.program.clone(),
        config: options.config_path.clone(),
        made: SpecMade {
            mig_layout: Some(crate::host::driver::mig_layout(&inventory.mig_instances)),
            driver_version: inventory.driver_version,
            capabilities,
            layout: options.layout,
            // A CSV host is recorded with what it was read from, for the hook.
            roots: Roots {
                csv: inventory
                    .csv
                    .is_some()
                    .then(|| crate::config::CsvSelection {
                        force: false,
                        ..config.driver.csv.clone()
                    }),
                ..options.roots.clone()
            },
        },
    };
    let mut spec = Spec {
        cdi_version: String::new(),
        kind: options.kind.clone(),
        devices,
        container_edits: ContainerEdits {
            env: vec![VISIBLE_DEVICES_VOID.into()],
            device_nodes: edits::device_nodes(&common.devices),
            hooks: options.hook.then(|| callback.hook()).into_iter().collect(),
            mounts: edits::mounts(&common),
            ..ContainerEdits::default()
        },
        ..Spec::default()
    };
    spec.cdi_version = required_version(&spec).into();
    Ok(Generated { gpus: spec, imex })
}

/// The planned devices `ids` names (each by index or UUID; `all` for every
/// one, `none` for none), in the planner's order; an id no device has is
/// refused.
fn selected<'a>(planned: &'a [DevicePlan], ids: &[String]) -> Result<Vec<&'a DevicePlan>> {
    if ids.iter().any(|id| id == "all") {
        return Ok(planned.iter().collect());
    }
    for id in ids.iter().filter(|id| *id != NO_GPU_DEVICE) {
        if !planned.iter().any(|d| d.index == *id || d.uuid == *id) {
            return Err(Error::UnknownDeviceId {
                id: id.clone(),
                known: planned
                    .iter()
                    .map(|d| d.index.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
    }
    Ok(planned
        .iter()
        .filter(|d| ids.iter().any(|id| d.index == *id || d.uuid == *id))
        .collect())
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
            let NodeState::Ok { mode, gid } = n.state else {
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
                gid,
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
    fn type_index_names_gpus_and_mig_devices_as_nvidias() {
        // NVIDIA v1.20.0 `pkg/nvcdi/namer.go`: `gpu%d`, `mig%d:%d`; run
        // side by side, `--device-name-strategy=type-index` named gpu0, gpu1.
        let name = |index, uuid| NameStrategy::TypeIndex.name(index, uuid);
        assert_eq!(name("0", "GPU-a"), "gpu0");
        assert_eq!(name("1:2", "MIG-b"), "mig1:2");
        assert_eq!(NameStrategy::Index.name("1:2", "MIG-b"), "1:2");
        assert_eq!(NameStrategy::Uuid.name("1:2", "MIG-b"), "MIG-b");
        assert_eq!(
            parse_strategies("type-index,uuid,type-index").unwrap(),
            [NameStrategy::TypeIndex, NameStrategy::Uuid]
        );
        assert!(parse_strategies("index,bogus").is_err());
    }

    #[test]
    fn device_ids_select_by_index_or_uuid_and_refuse_what_the_host_lacks() {
        let plan = |index: &str, uuid: &str| DevicePlan {
            index: index.into(),
            uuid: uuid.into(),
            plan: plan::Plan::default(),
        };
        let planned = [plan("0", "GPU-a"), plan("1", "GPU-b"), plan("1:0", "MIG-c")];
        let picked = |ids: &[&str]| -> Vec<String> {
            let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
            selected(&planned, &ids)
                .unwrap()
                .iter()
                .map(|d| d.index.clone())
                .collect()
        };
        assert_eq!(picked(&["all"]), ["0", "1", "1:0"]);
        // The planner's order, whatever the ids' order.
        assert_eq!(picked(&["MIG-c", "0"]), ["0", "1:0"]);
        assert!(picked(&["none"]).is_empty());
        // NVIDIA: `failed to get device handle from index: Invalid Argument`.
        let err = selected(&planned, &["7".to_string()]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no device \"7\" on this host to put in the spec: its devices are 0, 1, 1:0 \
             (or their UUIDs), or all, or none"
        );
    }

    #[test]
    fn imex_spec_has_one_device_per_host_channel() {
        let mut inventory = crate::planning::plan::tests::inventory();
        assert_eq!(imex_spec(&inventory), None);
        for (minor, state) in [
            (
                0,
                NodeState::Ok {
                    mode: 0o666,
                    gid: 0,
                },
            ),
            (
                5,
                NodeState::Ok {
                    mode: 0o660,
                    gid: 0,
                },
            ),
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

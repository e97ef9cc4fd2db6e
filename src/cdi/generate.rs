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
use crate::image::ImageLayout;
use crate::planner::{self, EachDevice, SpecMade};

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

/// What a spec is generated with.
#[derive(Debug, Clone)]
pub struct Options {
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
}

/// Generates the spec for this host, from the planner's plan for each device.
pub fn generate(config: &Config, options: &Options) -> Result<Spec> {
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
    devices.push(Device {
        name: "all".into(),
        container_edits: ContainerEdits {
            device_nodes: edits::device_nodes(edits::nodes_beyond(&all, &common)),
            ..ContainerEdits::default()
        },
        ..Device::default()
    });

    let callback = Callback {
        program: options.program.clone(),
        config: options.config_path.clone(),
        made: SpecMade {
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
    Ok(spec)
}

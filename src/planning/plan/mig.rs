//! Plans what `NVIDIA_MIG_CONFIG_DEVICES=all` and
//! `NVIDIA_MIG_MONITOR_DEVICES=all` bring, and refuses them beside a single
//! MIG device. Privilege is the planner's to check, not this module's; it
//! only decides which capability files and nodes the managed GPUs need.

use super::{Error, Result, Selected};
use crate::host::driver::{CapFile, Inventory};
use crate::planning::request::{DeviceSelection, Request};

/// What the MIG management variables bring.
#[derive(Debug, Default)]
pub(super) struct Management<'a> {
    /// The config and monitor capabilities asked for: their nodes must be usable.
    pub capabilities: Vec<&'a CapFile>,
    /// The access files of every GPU and compute instance of the managed
    /// GPUs; their nodes come where the host has them.
    pub instances: Vec<&'a CapFile>,
}

/// The variables in NVIDIA's order of checking: config, then monitor
/// (libnvidia-container src/cli/configure.c `configure_command`).
fn wanted(request: &Request) -> impl Iterator<Item = &'static str> {
    [
        (request.mig_config, "NVIDIA_MIG_CONFIG_DEVICES"),
        (request.mig_monitor, "NVIDIA_MIG_MONITOR_DEVICES"),
    ]
    .into_iter()
    .filter_map(|(wanted, name)| wanted.then_some(name))
}

/// Refuses MIG management when the request names a MIG device: whoever
/// holds one MIG device must not reconfigure or watch the whole GPU.
/// NVIDIA refuses it too ("cannot enable mig-config with specific MIG
/// devices selected", libnvidia-container src/cli/common.c:354-357), but
/// accepts `all`, whose MIG devices come with every GPU.
pub(super) fn refuse_beside_mig_devices(request: &Request) -> Result<()> {
    let DeviceSelection::List(ids) = &request.devices else {
        return Ok(());
    };
    let (Some(variable), Some(device)) =
        (wanted(request).next(), ids.iter().find(|id| id.is_mig()))
    else {
        return Ok(());
    };
    Err(Error::MigManagementBesideMigDevice {
        variable,
        device: device.to_string(),
    })
}

/// What management brings for `devices`: the config and monitor
/// capabilities asked for, and every instance's access file on the GPUs
/// selected, so that `nvidia-smi mig` can list, create in and destroy the
/// instances there (creating a compute instance needs its GPU instance's
/// access capability). Nothing when no GPU is selected, as NVIDIA mounts
/// nothing then (src/cli/configure.c: `mig_config_devices.ngpus` is 0).
pub(super) fn plan<'a>(
    inventory: &'a Inventory,
    request: &Request,
    devices: &[Selected<'a>],
) -> Result<Management<'a>> {
    let mut gpus: Vec<u32> = Vec::new();
    for device in devices {
        if !gpus.contains(&device.gpu().index) {
            gpus.push(device.gpu().index);
        }
    }
    if gpus.is_empty() {
        return Ok(Management::default());
    }
    let capabilities = [
        (request.mig_config, &inventory.mig_config),
        (request.mig_monitor, &inventory.mig_monitor),
    ]
    .into_iter()
    .filter(|(wanted, _)| *wanted)
    .map(|(_, cap)| cap.as_ref().ok_or(Error::NoMigCapabilities))
    .collect::<Result<Vec<_>>>()?;
    if capabilities.is_empty() {
        return Ok(Management::default());
    }
    let instances = inventory
        .mig_instances
        .iter()
        .filter(|gi| gpus.contains(&gi.parent))
        .flat_map(|gi| {
            [&gi.access]
                .into_iter()
                .chain(gi.compute.iter().map(|ci| &ci.access))
        })
        .collect();
    Ok(Management {
        capabilities,
        instances,
    })
}

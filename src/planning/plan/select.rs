//! Matches a device selection against the host's GPUs and MIG devices.
//! `all` takes its MIG devices from procfs; a MIG device named in a list
//! needs NVML, which must have been asked already: nothing here loads it.

use super::{Error, Result};
use crate::host::driver::{CapFile, ComputeInstance, Gpu, GpuInstance, Inventory, MigDevice};
use crate::planning::request::{DeviceId, DeviceSelection};

/// One selected device.
#[derive(Debug, Clone, Copy)]
pub enum Selected<'a> {
    /// A whole GPU.
    Gpu(&'a Gpu),
    /// A MIG device and its parent GPU.
    Mig {
        /// The GPU it lives on.
        parent: &'a Gpu,
        /// The MIG device.
        mig: &'a MigDevice,
    },
    /// A MIG device as procfs lists it, which is how `all` takes them: NVML
    /// is not asked, so its UUID and index are not known.
    Instance {
        /// The GPU it lives on.
        parent: &'a Gpu,
        /// Its GPU instance.
        gpu_instance: &'a GpuInstance,
        /// Its compute instance.
        compute_instance: &'a ComputeInstance,
    },
}

impl<'a> Selected<'a> {
    /// The GPU whose node the device needs.
    pub fn gpu(&self) -> &'a Gpu {
        match self {
            Selected::Gpu(gpu) => gpu,
            Selected::Mig { parent, .. } | Selected::Instance { parent, .. } => parent,
        }
    }

    /// The capability files a MIG device needs: its GPU instance's and its
    /// compute instance's `access` files; none for a whole GPU.
    pub fn access_files(&self) -> Vec<&'a CapFile> {
        match self {
            Selected::Gpu(_) => Vec::new(),
            Selected::Mig { mig, .. } => vec![&mig.gi_access, &mig.ci_access],
            Selected::Instance {
                gpu_instance,
                compute_instance,
                ..
            } => vec![&gpu_instance.access, &compute_instance.access],
        }
    }
}

/// The devices a selection names, each once, in the order asked.
pub fn select<'a>(
    inventory: &'a Inventory,
    selection: &DeviceSelection,
) -> Result<Vec<Selected<'a>>> {
    let ids = match selection {
        DeviceSelection::Void | DeviceSelection::None => return Ok(Vec::new()),
        DeviceSelection::All => return Ok(all(inventory)),
        DeviceSelection::List(ids) => ids,
    };
    // As NVIDIA's CLI (configure.c:309-314): a host whose driver shows no
    // GPU selects nothing, so the container gets the driver's files alone.
    if inventory.gpus.is_empty() {
        log::warn!(
            "the driver shows no GPU: {} device(s) asked for, none selected",
            ids.len()
        );
        return Ok(Vec::new());
    }
    let mut selected: Vec<Selected<'a>> = Vec::new();
    for id in ids {
        let found = if id.is_mig() {
            find_mig(inventory, id)?
        } else {
            find_gpu(&inventory.gpus, id).map(Selected::Gpu)
        };
        let device = found.ok_or_else(|| Error::UnknownDevice {
            item: id.to_string(),
            available: describe(inventory),
        })?;
        let duplicate = selected.iter().any(|s| match (s, &device) {
            (Selected::Gpu(a), Selected::Gpu(b)) => a.index == b.index,
            (Selected::Mig { mig: a, .. }, Selected::Mig { mig: b, .. }) => a.uuid == b.uuid,
            (
                Selected::Instance {
                    gpu_instance: a,
                    compute_instance: x,
                    ..
                },
                Selected::Instance {
                    gpu_instance: b,
                    compute_instance: y,
                    ..
                },
            ) => a.parent == b.parent && a.id == b.id && x.id == y.id,
            _ => false,
        });
        if !duplicate {
            selected.push(device);
        }
    }
    Ok(selected)
}

/// Every GPU, then every MIG device, as NVIDIA's `all` selects them
/// (libnvidia-container src/cli/common.c:144-154, `select_all_devices`).
/// NVIDIA's MIG devices are NVML's, one per compute instance of a GPU whose
/// MIG mode is enabled (src/nvc_info.c `init_nvc_device`,
/// `fill_mig_device_info`); procfs lists the same compute instances, with
/// the access files NVIDIA mounts for them, so NVML is not needed.
fn all(inventory: &Inventory) -> Vec<Selected<'_>> {
    let gpus = inventory.gpus.iter().map(Selected::Gpu);
    let migs = inventory.mig_instances.iter().flat_map(|gpu_instance| {
        let parent = inventory
            .gpus
            .iter()
            .find(|g| g.index == gpu_instance.parent);
        gpu_instance
            .compute
            .iter()
            .filter_map(move |compute_instance| {
                Some(Selected::Instance {
                    parent: parent?,
                    gpu_instance,
                    compute_instance,
                })
            })
    });
    gpus.chain(migs).collect()
}

fn find_gpu<'a>(gpus: &'a [Gpu], id: &DeviceId) -> Option<&'a Gpu> {
    gpus.iter().find(|g| match id {
        DeviceId::Index(i) => g.index == *i,
        DeviceId::Uuid(u) => g.uuid == *u,
        DeviceId::Bus(b) => g.bus == *b,
        DeviceId::Mig(_) | DeviceId::MigIndex { .. } => false,
    })
}

fn find_mig<'a>(inventory: &'a Inventory, id: &DeviceId) -> Result<Option<Selected<'a>>> {
    if let (None, Some(instance)) = (&inventory.mig, id.instance()) {
        return Ok(find_instance(inventory, &instance));
    }
    let migs = inventory.mig.as_deref().ok_or_else(|| Error::NeedsNvml {
        item: id.to_string(),
    })?;
    let parent_of = |mig: &MigDevice| inventory.gpus.iter().find(|g| g.index == mig.parent);
    let mig = migs.iter().find(|mig| match id {
        DeviceId::MigIndex { gpu, mig: index } => mig.parent == *gpu && mig.index == *index,
        DeviceId::Mig(uuid) => match uuid.strip_prefix("MIG-GPU-") {
            // The older form: parent UUID, GPU instance, compute instance.
            Some(old) => parent_of(mig).is_some_and(|parent| {
                format!(
                    "{}/{}/{}",
                    parent.uuid, mig.gpu_instance, mig.compute_instance
                ) == format!("GPU-{old}")
            }),
            None => mig.uuid == *uuid,
        },
        _ => false,
    });
    Ok(mig.and_then(|mig| {
        Some(Selected::Mig {
            parent: parent_of(mig)?,
            mig,
        })
    }))
}

/// An older-form MIG name resolved from procfs alone, as `all` takes MIG
/// devices: NVML was not asked, and the name needs no UUID it knows.
fn find_instance<'a>(
    inventory: &'a Inventory,
    (uuid, gi, ci): &(String, u32, u32),
) -> Option<Selected<'a>> {
    let parent = inventory
        .gpus
        .iter()
        .find(|g| g.uuid.eq_ignore_ascii_case(uuid))?;
    let gpu_instance = inventory
        .mig_instances
        .iter()
        .find(|i| i.parent == parent.index && i.id == *gi)?;
    let compute_instance = gpu_instance.compute.iter().find(|c| c.id == *ci)?;
    Some(Selected::Instance {
        parent,
        gpu_instance,
        compute_instance,
    })
}

/// The host's devices, for an error about one that does not exist.
fn describe(inventory: &Inventory) -> String {
    if inventory.gpus.is_empty() {
        return "no GPUs".into();
    }
    let mut items: Vec<String> = inventory
        .gpus
        .iter()
        .map(|g| format!("{} ({}, {})", g.index, g.uuid, g.bus))
        .collect();
    items.extend(
        inventory
            .mig
            .iter()
            .flatten()
            .map(|m| format!("{}:{} ({})", m.parent, m.index, m.uuid)),
    );
    items.join(", ")
}

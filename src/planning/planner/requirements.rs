//! A plan's requirement check: the container's `NVIDIA_REQUIRE_*` rules
//! on every GPU the plan selected, before anything changes, NVML asked
//! only where a rule's answer hangs on it.

use super::{Effective, Error, Result};
use crate::host::driver::{CudaVersion, Inventory};
use crate::host::nvml;
use crate::planning::image::Image;
use crate::planning::plan::{Plan, SelectedDevice};
use crate::planning::require::{DeviceFacts, Facts, Requirements};

/// Plans `effective` on the inventoried host for `image`, then checks its
/// requirements on every GPU the plan selected, before anything changes.
///
/// NVML is asked only when evaluation reaches an `arch` or `brand` term
/// whose answer decides: a CUDA image's rule such as `cuda>=12.2
/// brand=tesla,driver>=470,…` holds on its first alternative on any
/// recent driver, and NVML's start (a fork, `nvmlInit`, up to seconds
/// without persistence mode) is spared.
pub(super) fn build(
    effective: &Effective,
    inventory: &mut Inventory,
    image: &Image,
) -> Result<Plan> {
    let plan = Plan::build(inventory, &effective.request, image, effective.node_mode)?;
    let requirements = &effective.requirements;
    if requirements.is_empty() {
        return Ok(plan);
    }
    let cuda = if requirements.needs().cuda {
        Some(inventory.cuda_version()?)
    } else {
        None
    };
    check_requirements(requirements, inventory, &plan, image, cuda)?;
    Ok(plan)
}

/// Checks `requirements` on every GPU `plan` selected (a MIG device's
/// parent), once each: a refusal here replaces "CUDA driver version is
/// insufficient" at run time. A GPU's `arch` and `brand` are NVML's
/// answers, asked of the inventory only when a rule's answer hangs on them.
fn check_requirements(
    requirements: &Requirements,
    inventory: &mut Inventory,
    plan: &Plan,
    image: &Image,
    cuda: Option<CudaVersion>,
) -> Result<()> {
    let mut facts = Facts {
        driver: inventory.driver_version.clone(),
        cuda,
        compat_cuda: image.compat.as_ref().and_then(|c| c.cuda),
        device: None,
    };
    let mut checked: Vec<u32> = Vec::new();
    for device in &plan.selected {
        if checked.contains(&device.gpu) {
            continue;
        }
        checked.push(device.gpu);
        facts.device = Some(device_facts(inventory.nvml.as_ref(), device));
        requirements.check_learning(&mut facts, &mut |facts| {
            if inventory.nvml.is_some() {
                return Ok(false);
            }
            let report = inventory.nvml()?;
            facts.device = Some(device_facts(Some(report), device));
            Ok::<bool, Error>(true)
        })?;
    }
    if checked.is_empty() {
        requirements.check(&facts)?;
    }
    Ok(())
}

/// What the `arch` and `brand` terms are checked against for `device`:
/// NVML's answers when it was asked, unknown before.
fn device_facts(nvml: Option<&nvml::Report>, device: &SelectedDevice) -> DeviceFacts {
    let nvml = nvml.and_then(|r| r.gpu(&device.uuid));
    DeviceFacts {
        name: format!("GPU {} ({})", device.gpu, device.uuid),
        arch: nvml.and_then(|g| g.compute_capability.version()),
        brand: nvml.map(|g| g.brand.clone()),
    }
}

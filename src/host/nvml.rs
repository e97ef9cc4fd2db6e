//! NVML, used only where `/proc` cannot answer: MIG devices and their
//! instance ids, and a GPU's brand and compute capability when a requirement
//! asks for them. A request for whole GPUs never gets here: that is the
//! hook's speed advantage over NVIDIA's, which initialises NVML on every
//! container start.
//!
//! NVML is loaded from the discovered driver library path (a containerized
//! driver lives under its own root), in a forked child with a time bound
//! ([`crate::host::child`]), so neither its threads nor a hang reach the hook.

use std::path::Path;
use std::time::Duration;

#[cfg(not(target_env = "musl"))]
use nvml_wrapper::error::NvmlError;
#[cfg(not(target_env = "musl"))]
use nvml_wrapper::Nvml;
use serde::{Deserialize, Serialize};

use crate::host::child;

/// How long NVML may take; `nvmlInit` alone can take seconds without persistence mode.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// One MIG device as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInfo {
    /// Its index on the parent GPU, as `<gpu>:<mig>` counts.
    pub index: u32,
    /// `MIG-…`.
    pub uuid: String,
    /// GPU instance id.
    pub gpu_instance: u32,
    /// Compute instance id.
    pub compute_instance: u32,
}

/// One GPU as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// `GPU-…`, to match it with the GPU from `/proc`.
    pub uuid: String,
    /// Brand, lower case as requirements spell it: `tesla`, `geforce`, `nvidia`…
    pub brand: String,
    /// Compute capability, e.g. 9.0.
    pub compute_capability: ComputeCapability,
    /// Whether MIG mode is on.
    pub mig_enabled: bool,
    /// Its MIG devices, in index order.
    pub migs: Vec<MigInfo>,
}

/// A GPU's compute capability (its architecture), as NVML gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComputeCapability {
    /// E.g. 8 for an A100.
    pub major: i32,
    /// E.g. 0 for an A100.
    pub minor: i32,
}

impl std::fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl ComputeCapability {
    /// (major, minor), as `arch` requirements compare it; `None` for a
    /// value no GPU has.
    pub fn version(self) -> Option<(u32, u32)> {
        Some((
            u32::try_from(self.major).ok()?,
            u32::try_from(self.minor).ok()?,
        ))
    }
}

/// Everything asked of NVML in one query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// GPUs in NVML order.
    pub gpus: Vec<GpuInfo>,
}

impl Report {
    /// The GPU with `uuid` (`GPU-…`, in any case), as `/proc` names it.
    pub fn gpu(&self, uuid: &str) -> Option<&GpuInfo> {
        self.gpus.iter().find(|g| g.uuid.eq_ignore_ascii_case(uuid))
    }
}

/// Queries NVML from `lib` (the driver's `libnvidia-ml.so.*`) in a child process.
#[cfg(not(target_env = "musl"))]
pub fn query(lib: &Path, timeout: Duration) -> Result<Report, child::Error> {
    let lib = lib.to_path_buf();
    child::query("NVML", timeout, move || {
        query_here(&lib).map_err(|e| describe(&e))
    })
}

/// Queries NVML from `lib` (the driver's `libnvidia-ml.so.*`) in a child
/// process: the static binary's helper program ([`crate::host::probe`]).
#[cfg(target_env = "musl")]
pub fn query(lib: &Path, timeout: Duration) -> Result<Report, child::Error> {
    crate::host::probe::ask("NVML", timeout, c"nvml", lib)
}

/// NVML's device count from `lib`, which may be a bare name the loader
/// finds (`doctor --inside`), in a child process.
#[cfg(not(target_env = "musl"))]
pub fn device_count(lib: &Path, timeout: Duration) -> Result<u32, child::Error> {
    let lib = lib.to_path_buf();
    child::query("NVML", timeout, move || {
        let nvml = Nvml::builder()
            .lib_path(lib.as_os_str())
            .init()
            .map_err(|e| describe(&e))?;
        nvml.device_count().map_err(|e| describe(&e))
    })
}

/// NVML's device count from `lib`, which may be a bare name the loader
/// finds (`doctor --inside`), in a child process ([`crate::host::probe`]).
#[cfg(target_env = "musl")]
pub fn device_count(lib: &Path, timeout: Duration) -> Result<u32, child::Error> {
    crate::host::probe::ask("NVML", timeout, c"nvml-count", lib)
}

/// A clear, short message for an NVML error.
#[cfg(not(target_env = "musl"))]
fn describe(error: &NvmlError) -> String {
    match error {
        NvmlError::DriverNotLoaded => "driver not loaded".into(),
        NvmlError::LibloadingError(e) => format!("cannot load libnvidia-ml: {e}"),
        NvmlError::NoPermission => "no permission to use the GPUs".into(),
        other => other.to_string(),
    }
}

/// The query itself; runs in the child.
#[cfg(not(target_env = "musl"))]
fn query_here(lib: &Path) -> Result<Report, NvmlError> {
    let nvml = Nvml::builder().lib_path(lib.as_os_str()).init()?;
    let mut gpus = Vec::new();
    for index in 0..nvml.device_count()? {
        let device = nvml.device_by_index(index)?;
        let cc = device.cuda_compute_capability()?;
        let mig_enabled = device
            .mig_mode()
            .map(|mode| mode.current == 1)
            .or_else(|e| match e {
                NvmlError::NotSupported => Ok(false),
                e => Err(e),
            })?;
        let mut migs = Vec::new();
        if mig_enabled {
            for mig_index in 0..device.mig_device_count()? {
                let mig = match device.mig_device_by_index(mig_index) {
                    Ok(mig) => mig,
                    // Slots without an instance are absent, not errors.
                    Err(NvmlError::NotFound) => continue,
                    Err(e) => return Err(e),
                };
                let (gpu_instance, compute_instance) =
                    crate::sys::dl::mig_instance_ids(&nvml, &mig)?;
                migs.push(MigInfo {
                    index: mig_index,
                    uuid: mig.uuid()?,
                    gpu_instance,
                    compute_instance,
                });
            }
        }
        gpus.push(GpuInfo {
            uuid: device.uuid()?,
            brand: format!("{:?}", device.brand()?).to_ascii_lowercase(),
            compute_capability: ComputeCapability {
                major: cc.major,
                minor: cc.minor,
            },
            mig_enabled,
            migs,
        });
    }
    Ok(Report { gpus })
}

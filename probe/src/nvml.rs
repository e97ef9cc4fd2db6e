//! NVML's answers, and (feature `load`) the queries that ask them: the GPUs
//! with their brand, compute capability and MIG mode, and their MIG devices
//! with instance ids, or only the device count.
//!
//! Errors leave as NVML's in a few clear words ([`describe`]): the hook
//! reports them as they are, from its own child or from the helper program.

#[cfg(feature = "load")]
use std::path::Path;

#[cfg(feature = "load")]
use nvml_wrapper::error::NvmlError;
#[cfg(feature = "load")]
use nvml_wrapper::Nvml;
use serde::{Deserialize, Serialize};

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

/// Loads NVML from `lib` (the driver's `libnvidia-ml.so.*`) and reports its
/// GPUs and MIG devices. Loads driver code: run it in a child process.
#[cfg(feature = "load")]
pub fn report(lib: &Path) -> Result<Report, String> {
    query(lib).map_err(|e| describe(&e))
}

/// NVML's device count from `lib`, which may be a bare name the loader
/// finds (`doctor --inside`). Loads driver code: run it in a child process.
#[cfg(feature = "load")]
pub fn device_count(lib: &Path) -> Result<u32, String> {
    let count = || {
        Nvml::builder()
            .lib_path(lib.as_os_str())
            .init()?
            .device_count()
    };
    count().map_err(|e| describe(&e))
}

/// A clear, short message for an NVML error.
#[cfg(feature = "load")]
fn describe(error: &NvmlError) -> String {
    match error {
        NvmlError::DriverNotLoaded => "driver not loaded".into(),
        NvmlError::LibloadingError(e) => format!("cannot load libnvidia-ml: {e}"),
        // The library, or a symbol of it the query calls, is not NVML's.
        NvmlError::FailedToLoadSymbol(e) => format!("cannot load libnvidia-ml: {e}"),
        NvmlError::NoPermission => "no permission to use the GPUs".into(),
        other => other.to_string(),
    }
}

/// The report itself.
#[cfg(feature = "load")]
fn query(lib: &Path) -> Result<Report, NvmlError> {
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
                let (gpu_instance, compute_instance) = crate::ffi::mig_instance_ids(&nvml, &mig)?;
                migs.push(MigInfo {
                    index: mig_index,
                    uuid: mig.uuid()?,
                    gpu_instance,
                    compute_instance,
                });
            }
        }
        let brand = match device.brand() {
            Ok(brand) => format!("{brand:?}").to_ascii_lowercase(),
            // A brand newer than nvml-wrapper's list: no requirement names it.
            Err(NvmlError::UnexpectedVariant(_)) => "unknown".into(),
            Err(e) => return Err(e),
        };
        gpus.push(GpuInfo {
            uuid: device.uuid()?,
            brand,
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

#[cfg(all(test, feature = "load"))]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_cannot_be_loaded() {
        let err = report(Path::new("/nonexistent/libnvidia-ml.so.1")).unwrap_err();
        assert!(err.starts_with("cannot load libnvidia-ml: "), "{err}");
        assert!(err.contains("/nonexistent/libnvidia-ml.so.1"), "{err}");
    }

    #[test]
    fn a_library_that_is_not_nvml_names_the_symbol_it_lacks() {
        // libc is present everywhere and has no NVML symbol.
        let libc = crate::libc();
        for err in [report(libc).unwrap_err(), device_count(libc).unwrap_err()] {
            assert!(err.starts_with("cannot load libnvidia-ml: "), "{err}");
            assert!(err.contains("nvmlInit_v2"), "{err}");
        }
    }
}

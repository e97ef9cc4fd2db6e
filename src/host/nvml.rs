//! NVML, used only where `/proc` cannot answer: MIG devices and their
//! instance ids, and a GPU's brand and compute capability when a requirement
//! asks for them. A request for whole GPUs never gets here: that is the
//! hook's speed advantage over NVIDIA's, which initialises NVML on every
//! container start.
//!
//! NVML is loaded from the discovered driver library path (a containerized
//! driver lives under its own root), in a forked child with a time bound
//! ([`crate::host::driver_child`]), so neither its threads nor a hang reach the hook. The
//! query and its answer's types live in the driver helper's crate (probe/),
//! whose program the static binary runs in that child instead.

use std::path::Path;
use std::time::Duration;

pub use oci_nvidia_hook_probe::nvml::{ComputeCapability, GpuInfo, MigInfo, Report};

use crate::host::driver_child;

/// How long NVML may take; `nvmlInit` alone can take seconds without persistence mode.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Queries NVML from `lib` (the driver's `libnvidia-ml.so.*`) in a child process.
#[cfg(not(target_env = "musl"))]
pub fn query(lib: &Path, timeout: Duration) -> Result<Report, driver_child::Error> {
    let lib = lib.to_path_buf();
    driver_child::query("NVML", timeout, move || {
        oci_nvidia_hook_probe::nvml::report(&lib)
    })
}

/// Queries NVML from `lib` (the driver's `libnvidia-ml.so.*`) in a child
/// process: the static binary's helper program ([`crate::host::probe`]).
#[cfg(target_env = "musl")]
pub fn query(lib: &Path, timeout: Duration) -> Result<Report, driver_child::Error> {
    crate::host::probe::ask("NVML", timeout, c"nvml", lib)
}

/// NVML's device count from `lib`, which may be a bare name the loader
/// finds (`doctor --inside`), in a child process.
#[cfg(not(target_env = "musl"))]
pub fn device_count(lib: &Path, timeout: Duration) -> Result<u32, driver_child::Error> {
    let lib = lib.to_path_buf();
    driver_child::query("NVML", timeout, move || {
        oci_nvidia_hook_probe::nvml::device_count(&lib)
    })
}

/// NVML's device count from `lib`, which may be a bare name the loader
/// finds (`doctor --inside`), in a child process ([`crate::host::probe`]).
#[cfg(target_env = "musl")]
pub fn device_count(lib: &Path, timeout: Duration) -> Result<u32, driver_child::Error> {
    crate::host::probe::ask("NVML", timeout, c"nvml-count", lib)
}

//! The crate's one home of `unsafe` code: foreign calls into the driver
//! libraries, libcuda's `cuDriverGetVersion` and the two NVML calls
//! nvml-wrapper does not wrap. Which library file is loaded is the
//! caller's choice (a path the hook's discovery found in the driver root,
//! or a bare name for `doctor --inside`); this module never looks one up on
//! its own.

use std::ffi::c_int;
use std::path::Path;

use nvml_wrapper::error::{nvml_try, NvmlError};
use nvml_wrapper::{Device, Nvml};

use crate::cuda::Error;

/// `CUresult cuDriverGetVersion(int *driverVersion)`.
type CuDriverGetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;

/// Loads `libcuda` for good (libcuda does not support unloading well) and
/// calls its `cuDriverGetVersion`: the `CUresult` and the version it wrote.
pub fn cu_driver_get_version(libcuda: &Path) -> Result<(c_int, c_int), Error> {
    let path = || libcuda.to_path_buf();
    // SAFETY: loading runs the library's initialisers, as every CUDA program
    // does; the caller passes the driver's own libcuda, found and ELF-checked
    // by discovery. The symbol is declared with its C signature, the out
    // pointer is valid for the call, and the library is never unloaded, so
    // the function pointer never dangles.
    unsafe {
        let library = libloading::Library::new(libcuda).map_err(|source| Error::Load {
            path: path(),
            source,
        })?;
        let get: libloading::Symbol<CuDriverGetVersion> = library
            .get(b"cuDriverGetVersion\0")
            .map_err(|source| Error::Symbol {
                path: path(),
                source,
            })?;
        let mut version: c_int = 0;
        let status = get(&mut version);
        std::mem::forget(library);
        Ok((status, version))
    }
}

/// The GPU and compute instance ids of the MIG device `mig` of `nvml`
/// (`nvmlDeviceGetGpuInstanceId`, `nvmlDeviceGetComputeInstanceId`).
pub fn mig_instance_ids(nvml: &Nvml, mig: &Device<'_>) -> Result<(u32, u32), NvmlError> {
    let lib = nvml.lib();
    let missing = |e: &libloading::Error| NvmlError::FailedToLoadSymbol(e.to_string());
    let gi = lib.nvmlDeviceGetGpuInstanceId.as_ref().map_err(missing)?;
    let ci = lib
        .nvmlDeviceGetComputeInstanceId
        .as_ref()
        .map_err(missing)?;
    let (mut gpu_instance, mut compute_instance) = (0, 0);
    // SAFETY: both symbols come from the loaded NVML with their C signatures;
    // the handle is a live device of this NVML instance (borrowed from it),
    // and the out pointers are valid for the calls.
    unsafe {
        nvml_try(gi(mig.handle(), &mut gpu_instance))?;
        nvml_try(ci(mig.handle(), &mut compute_instance))?;
    }
    Ok((gpu_instance, compute_instance))
}

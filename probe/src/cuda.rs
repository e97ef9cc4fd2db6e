//! libcuda's `cuDriverGetVersion`: which CUDA version the driver supports,
//! asked of the driver's own library (a host path the hook's discovery found
//! in the driver root, or a bare name the loader finds for
//! `doctor --inside`), never of one the loader's search path picks.

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::ffi;

/// Why libcuda gave no CUDA version.
#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot get the CUDA version from {}: cannot load: {source}", path.display())]
    Load {
        path: PathBuf,
        source: libloading::Error,
    },
    #[error("cannot get the CUDA version from {}: no cuDriverGetVersion: {source}", path.display())]
    Symbol {
        path: PathBuf,
        source: libloading::Error,
    },
    #[error("cannot get the CUDA version from {}: cuDriverGetVersion returned CUresult {status}", path.display())]
    Status { path: PathBuf, status: i32 },
    #[error("cannot get the CUDA version from {}: cuDriverGetVersion reported {version}", path.display())]
    Reported { path: PathBuf, version: i32 },
}

/// Loads `libcuda` and returns what its `cuDriverGetVersion` reports
/// (12020 for 12.2). Loads driver code: run it in a child process.
pub fn driver_version(libcuda: &Path) -> Result<i32, Error> {
    let (status, version) = ffi::cu_driver_get_version(libcuda)?;
    let path = libcuda.to_path_buf();
    if status != 0 {
        return Err(Error::Status { path, status });
    }
    if version <= 0 {
        return Err(Error::Reported { path, version });
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_without_the_symbol_is_an_error_naming_it() {
        // libc is present everywhere and has no cuDriverGetVersion.
        let libc = crate::libc();
        let err = driver_version(libc).unwrap_err();
        assert!(matches!(err, Error::Symbol { .. }), "{err}");
        assert!(err.to_string().contains("cuDriverGetVersion"), "{err}");
        assert!(err.to_string().contains("libc.so.6"), "{err}");
    }

    #[test]
    fn a_missing_library_is_a_load_error_naming_it() {
        let err = driver_version(Path::new("/nonexistent/libcuda.so.1")).unwrap_err();
        assert!(matches!(err, Error::Load { .. }), "{err}");
        assert!(
            err.to_string().contains("/nonexistent/libcuda.so.1"),
            "{err}"
        );
    }
}

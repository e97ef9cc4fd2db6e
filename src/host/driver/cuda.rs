//! Asks the driver's own `libcuda` which CUDA version it supports.
//!
//! The answer must come from *that* driver's library, found by discovery in
//! the driver root, never from the loader's search path. This is the only
//! place the hook loads driver code, and only when the answer is needed
//! (`info`, or a `cuda` requirement): loading libcuda costs milliseconds.

use std::fmt;
use std::path::Path;

use serde::Serialize;

/// How long loading libcuda and asking its version may take.
pub const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A CUDA driver API version as `cuDriverGetVersion` reports it: 12020 is 12.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct CudaVersion(pub i32);

impl CudaVersion {
    /// `major.minor`, as `cuDriverGetVersion` encodes it; `None` past what
    /// the encoding holds.
    pub fn new(major: u32, minor: u32) -> Option<CudaVersion> {
        if minor >= 100 {
            return None;
        }
        let major = i32::try_from(major).ok()?;
        let minor = i32::try_from(minor).ok()?;
        Some(CudaVersion(
            major.checked_mul(1000)?.checked_add(minor * 10)?,
        ))
    }

    /// A CUDA version as images carry it: `12.6` of `12.6.3`,
    /// `CUDA_VERSION`, `version.json`'s `12.6.20240820` or a
    /// `libcudart.so.12.6.77` name: `major.minor[.anything]`, with an
    /// optional leading `v`.
    pub fn parse(text: &str) -> Option<CudaVersion> {
        let text = text.trim();
        let text = text.strip_prefix('v').unwrap_or(text);
        let mut parts = text.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = match parts.next() {
            Some(minor) => minor.parse().ok()?,
            None => 0,
        };
        CudaVersion::new(major, minor)
    }

    /// The major version, 12 for 12020.
    pub fn major(self) -> i32 {
        self.0 / 1000
    }

    /// The minor version, 2 for 12020.
    pub fn minor(self) -> i32 {
        (self.0 % 1000) / 10
    }
}

impl fmt::Display for CudaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major(), self.minor())
    }
}

/// `cuDriverGetVersion` of `libcuda` (a resolved host path inside the
/// driver root, or a bare name the loader finds for `doctor --inside`),
/// asked in a child process: libcuda is driver code, and the hook must stay
/// single-threaded.
#[cfg(not(target_env = "musl"))]
pub fn ask(
    libcuda: &Path,
    timeout: std::time::Duration,
) -> std::result::Result<CudaVersion, crate::host::driver_child::Error> {
    let path = libcuda.to_path_buf();
    crate::host::driver_child::query("libcuda", timeout, move || {
        oci_nvidia_hook_probe::cuda::driver_version(&path).map_err(|e| e.to_string())
    })
    .map(CudaVersion)
}

/// `cuDriverGetVersion` of `libcuda` (a resolved host path inside the
/// driver root, or a bare name the loader finds for `doctor --inside`),
/// asked in a child process by the static binary's helper ([`crate::host::probe`]).
#[cfg(target_env = "musl")]
pub fn ask(
    libcuda: &Path,
    timeout: std::time::Duration,
) -> std::result::Result<CudaVersion, crate::host::driver_child::Error> {
    crate::host::probe::ask("libcuda", timeout, c"cuda", libcuda).map(CudaVersion)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_major_and_minor() {
        assert_eq!(CudaVersion(12020).to_string(), "12.2");
        assert_eq!(CudaVersion(11040).to_string(), "11.4");
        assert_eq!(CudaVersion(12080).to_string(), "12.8");
        assert!(CudaVersion(12020) < CudaVersion(12040));
    }
}

//! The static binary's way to driver code. A static (musl) binary cannot
//! load the host's driver libraries, which are linked against glibc, so it
//! carries one small dynamically linked program, the driver helper
//! (`probe/`, the crate `oci-nvidia-hook-probe`), built for glibc 2.17 by
//! `make build` (integration/zigbuild, which passes its path in
//! `ONH_PROBE`). A forked child runs it from a memfd with an empty
//! environment ([`crate::sys::process::exec_image`]); it loads the one
//! library named and prints its answer as [`driver_child::query`]'s closures do.
//!
//! A glibc build (`cargo build`, the tests) runs the same crate's queries
//! in a forked child itself: [`crate::host::nvml`] and [`crate::host::driver::cuda`]
//! choose.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::host::driver_child;

/// The helper's bytes.
static IMAGE: &[u8] = include_bytes!(env!(
    "ONH_PROBE",
    "a static build embeds the driver helper (probe/): build it with `make build` (integration/zigbuild sets ONH_PROBE)"
));

/// Runs `probe COMMAND LIBRARY` in a bounded child: `cuda`, `nvml` or `nvml-count`.
pub fn ask<T: DeserializeOwned>(
    what: &'static str,
    timeout: Duration,
    command: &'static std::ffi::CStr,
    library: &Path,
) -> Result<T, driver_child::Error> {
    let library =
        CString::new(library.as_os_str().as_bytes()).map_err(|_| driver_child::Error::Failed {
            what,
            message: format!("{} holds a NUL byte", library.display()),
        })?;
    driver_child::exec(what, timeout, IMAGE, &[command, &library])
}

//! The driver queries of oci-nvidia-hook: NVML's GPUs and MIG devices, and
//! libcuda's `cuDriverGetVersion`. One copy serves both ways the hook asks:
//! its glibc build runs them in a forked child, and its static (musl)
//! build, which cannot load the host's glibc libraries, runs this crate's
//! program (src/main.rs), embedded in it and built for glibc 2.17.
//!
//! Without the `load` feature only the answers' types are here: what the
//! static build deserializes.
#![deny(unsafe_code)]

#[cfg(feature = "load")]
pub mod cuda;
#[cfg(feature = "load")]
#[allow(unsafe_code)]
mod ffi;
pub mod nvml;

/// This machine's libc.so.6: a library that is present everywhere and is
/// neither NVML nor libcuda, for the tests' failures to load them.
#[cfg(all(test, feature = "load"))]
fn libc() -> &'static std::path::Path {
    [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/aarch64-linux-gnu/libc.so.6",
        "/lib64/libc.so.6",
    ]
    .into_iter()
    .map(std::path::Path::new)
    .find(|p| p.exists())
    .expect("a libc.so.6 on this machine")
}

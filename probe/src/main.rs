//! oci-nvidia-hook-probe: the one part of oci-nvidia-hook that loads driver
//! code, for the static (musl) binary that ships, which cannot load the
//! host's glibc libraries itself.
//!
//! ```text
//! oci-nvidia-hook-probe cuda LIBCUDA        cuDriverGetVersion of that libcuda
//! oci-nvidia-hook-probe nvml LIBNVML        the GPUs and MIG devices NVML reports
//! oci-nvidia-hook-probe nvml-count LIBNVML  NVML's device count
//! ```
//!
//! It prints one JSON line on stdout, serde's form of a `Result<T, String>`:
//! `{"Ok":...}` or `{"Err":"why"}`, and exits 0 either way; any other
//! command line exits 2 and prints nothing.
//!
//! integration/zigbuild builds it against glibc 2.17's symbol set (so it
//! runs wherever the driver does); the hook embeds it and runs it from a
//! sealed memfd in a forked child (the hook's src/probe.rs) with an empty
//! environment, from `/`, with stdout on the pipe the parent reads with a
//! size and time bound. So no variable of a runtime's (LD_PRELOAD,
//! LD_LIBRARY_PATH, ...) reaches its loader, and nothing is loaded but the
//! library named on its command line and that library's own dependencies.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use oci_nvidia_hook_probe::{cuda, nvml};
use serde::Serialize;

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let [command, library] = args.as_slice() else {
        return ExitCode::from(2);
    };
    let library = Path::new(library);
    let answer = match command.to_str() {
        Some("cuda") => json(&cuda::driver_version(library).map_err(|e| e.to_string())),
        Some("nvml") => json(&nvml::report(library)),
        Some("nvml-count") => json(&nvml::device_count(library)),
        _ => return ExitCode::from(2),
    };
    // A failed write leaves the hook without an answer, which it reports.
    let _ = std::io::stdout().lock().write_all(&answer);
    ExitCode::SUCCESS
}

/// `answer` as one JSON line.
fn json<T: Serialize>(answer: &Result<T, String>) -> Vec<u8> {
    let mut line = serde_json::to_vec(answer).unwrap_or_default();
    line.push(b'\n');
    line
}

//! The names other software calls NVIDIA's tools by, answered by this one
//! binary: `nvidia-container-runtime-hook` (Docker's `--gpus`, hooks.d files
//! written for NVIDIA's toolkit) and `nvidia-container-cli` (containerd's
//! `ctr run --gpus`, NVIDIA's own hook in legacy mode, people's habits).
//! Each front parses NVIDIA's command line for that name and hands the
//! request to the same planner and hook as ours; none decides policy.

pub mod nvidia_cli;
pub mod runtime_hook;

/// The name hosts configured for NVIDIA's runtime wrapper call (`daemon.json`'s `runtimes`).
pub const RUNTIME_NAME: &str = "nvidia-container-runtime";

use std::ffi::OsStr;
use std::path::Path;

/// Which command line the binary was called with, by the name it was run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front {
    /// `oci-nvidia-hook` (or any other name): our own.
    Ours,
    /// `nvidia-container-runtime-hook`: NVIDIA's OCI hook.
    RuntimeHook,
    /// `nvidia-container-runtime`: NVIDIA's runc wrapper, our runtime mode.
    Runtime,
    /// `nvidia-container-cli`: NVIDIA's C CLI.
    Cli,
}

impl Front {
    /// The front for `argv0`, by its file name: a link's name, not its target's.
    pub fn of(argv0: &OsStr) -> Front {
        match Path::new(argv0).file_name().and_then(OsStr::to_str) {
            Some(runtime_hook::NAME) => Front::RuntimeHook,
            Some(RUNTIME_NAME) => Front::Runtime,
            Some(nvidia_cli::NAME) => Front::Cli,
            _ => Front::Ours,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_front_is_chosen_by_the_file_name_it_was_run_as() {
        for (argv0, front) in [
            ("nvidia-container-runtime-hook", Front::RuntimeHook),
            ("/usr/bin/nvidia-container-runtime-hook", Front::RuntimeHook),
            ("/usr/bin/nvidia-container-runtime", Front::Runtime),
            ("nvidia-container-cli", Front::Cli),
            ("/usr/local/bin/nvidia-container-cli", Front::Cli),
            ("/usr/bin/nvidia-container-cli.real", Front::Ours),
            ("/usr/bin/oci-nvidia-hook", Front::Ours),
            ("oci-nvidia-hook", Front::Ours),
            (
                "/opt/nvidia-container-runtime-hook/oci-nvidia-hook",
                Front::Ours,
            ),
        ] {
            assert_eq!(Front::of(OsStr::new(argv0)), front, "{argv0}");
        }
    }
}

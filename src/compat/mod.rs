//! The names other software calls NVIDIA's tools by, answered by this one
//! binary: `nvidia-container-runtime-hook` (Docker's `--gpus`, hooks.d files
//! written for NVIDIA's toolkit) and `nvidia-container-cli` (containerd's
//! `ctr run --gpus`, NVIDIA's own hook in legacy mode, people's habits) and
//! `nvidia-ctk` (NVIDIA's current setup instructions) and `nvidia-cdi-hook`
//! (the hooks of CDI specs NVIDIA's tools write).
//! Each front parses NVIDIA's command line for that name and hands the
//! request to the same planner and hook as ours; none decides policy.

pub mod cdi_hook;
pub mod ctk;
pub mod nvidia_cli;
pub mod runtime_hook;

/// The name hosts configured for NVIDIA's runtime wrapper call (`daemon.json`'s `runtimes`).
pub const RUNTIME_NAME: &str = "nvidia-container-runtime";

use std::ffi::{OsStr, OsString};
use std::path::Path;

use clap::Parser;
use thiserror::Error;

use crate::cli::{self, Cli};

/// Why a command line under one of NVIDIA's names was refused.
#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    RuntimeHook(#[from] runtime_hook::Error),
    #[error(transparent)]
    NvidiaCli(#[from] nvidia_cli::args::Error),
}

/// What a command line asks for, whichever name the binary was run as.
#[derive(Debug)]
pub enum Invocation {
    /// A command of our own command line: ours, and what NVIDIA's hook
    /// (`prestart`) and runtime (runc's arguments, whole) come to.
    Ours(Cli),
    /// A command of NVIDIA's CLI.
    NvidiaCli(Box<nvidia_cli::Invocation>),
    /// A command of NVIDIA's `nvidia-ctk`.
    Ctk(Box<ctk::Ctk>),
    /// A hook of NVIDIA's `nvidia-cdi-hook`.
    CdiHook(Box<cdi_hook::CdiHook>),
    /// Text to print, and nothing else to do (versions, help).
    Print(String),
    /// Nothing to do (`poststart`, `poststop`).
    Nothing,
}

/// Reads `args` (`argv[0]` first) by the front its name picks. Our own
/// command line's errors are clap's (it prints them and exits).
pub fn dispatch(args: Vec<OsString>) -> Result<Invocation, Error> {
    let front = Front::of(args.first().map(OsString::as_os_str).unwrap_or_default());
    // NVIDIA's command lines are ASCII; a stray byte is refused by name.
    let lossy = || -> Vec<String> {
        args.iter()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    };
    Ok(match front {
        // The hook's own command lines skip clap's start-up (see `cli::fast`).
        Front::Ours => {
            Invocation::Ours(cli::fast::parse(&args).unwrap_or_else(|| Cli::parse_from(&args)))
        }
        Front::RuntimeHook => match runtime_hook::parse(&lossy())? {
            runtime_hook::Parsed::Ours(cli) => Invocation::Ours(cli),
            runtime_hook::Parsed::Nothing => Invocation::Nothing,
            runtime_hook::Parsed::Version => {
                Invocation::Print(format!("{} {}\n", runtime_hook::NAME, cli::version()))
            }
        },
        // runc's command line, whole: nothing of it is ours to parse.
        Front::Runtime => Invocation::Ours(Cli {
            config: None,
            command: cli::Command::Runtime {
                args: args.get(1..).unwrap_or_default().to_vec(),
            },
        }),
        Front::Cli => match nvidia_cli::parse(&lossy())? {
            nvidia_cli::Parsed::Run(invocation) => Invocation::NvidiaCli(invocation),
            nvidia_cli::Parsed::Version => Invocation::Print(nvidia_cli::version_text()),
            nvidia_cli::Parsed::Help(text) => Invocation::Print(text),
        },
        Front::Ctk => Invocation::Ctk(Box::new(ctk::parse(&args))),
        Front::CdiHook => Invocation::CdiHook(Box::new(cdi_hook::parse(&args))),
    })
}

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
    /// `nvidia-ctk`: NVIDIA's toolkit command line.
    Ctk,
    /// `nvidia-cdi-hook`: the hooks of NVIDIA's CDI specs.
    CdiHook,
}

impl Front {
    /// The front for `argv0`, by its file name: a link's name, not its target's.
    pub fn of(argv0: &OsStr) -> Front {
        match Path::new(argv0).file_name().and_then(OsStr::to_str) {
            Some(runtime_hook::NAME) => Front::RuntimeHook,
            Some(RUNTIME_NAME) => Front::Runtime,
            Some(nvidia_cli::NAME) => Front::Cli,
            Some(ctk::NAME) => Front::Ctk,
            Some(cdi_hook::NAME) => Front::CdiHook,
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
            ("/usr/bin/nvidia-ctk", Front::Ctk),
            ("/usr/bin/nvidia-cdi-hook", Front::CdiHook),
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

//! The fronts: each command line the binary answers, read into an
//! [`Invocation`] for [`crate::app`] to run. Which front reads it is chosen
//! by the name the binary was run as: ours (`oci-nvidia-hook`), and the
//! names other software calls NVIDIA's tools by:
//! `nvidia-container-runtime-hook` (Docker's `--gpus`, hooks.d files
//! written for NVIDIA's toolkit), `nvidia-container-runtime` (hosts
//! configured for NVIDIA's runc wrapper), `nvidia-container-cli`
//! (containerd's `ctr run --gpus`, LXC, enroot, people's habits),
//! `nvidia-ctk` (NVIDIA's current setup instructions) and `nvidia-cdi-hook`
//! (the hooks of CDI specs NVIDIA's tools write).
//!
//! A front only parses: it never loads the configuration, sets up the log
//! or does the work, and no front imports another ([`common`] and
//! [`hooks`] hold what several read the same way).

pub mod cdi_hook;
pub mod common;
pub mod ctk;
pub mod hooks;
pub mod nvidia_cli;
pub mod ours;
pub mod runtime_hook;

use std::ffi::{OsStr, OsString};
use std::path::Path;

use thiserror::Error;

use crate::app::{Invocation, Operation, Overrides};
use crate::config::RuntimeMode;
use crate::util::this_program::{
    CDI_HOOK_NAME, CLI_NAME as CLI, CTK_NAME, RUNTIME_CDI_NAME, RUNTIME_HOOK_NAME as HOOK,
    RUNTIME_LEGACY_NAME, RUNTIME_NAME,
};

/// Why a command line under one of NVIDIA's names was refused.
#[derive(Debug, Error)]
pub enum Error {
    // nvidia-container-runtime-hook's command line.
    #[error("{HOOK}: no command: expected prestart, poststart or poststop")]
    HookNoCommand,
    #[error("{HOOK}: unknown command {command:?}: expected prestart, poststart or poststop")]
    HookUnknownCommand { command: String },
    #[error("{HOOK}: flag {flag} needs a value")]
    HookMissingValue { flag: String },
    #[error("{HOOK}: unknown flag {flag:?} (known: -config PATH, -debug, -version)")]
    HookUnknownFlag { flag: String },
    #[error("{HOOK}: unexpected argument {argument:?} after {command}")]
    HookExtra { command: String, argument: String },
    // nvidia-container-cli's command line.
    #[error("{CLI}{command}: {problem}; NVIDIA's CLI takes {known}", command = at(.command))]
    CliOption {
        command: Option<&'static str>,
        problem: nvidia_cli::OptionProblem,
        known: String,
    },
    #[error("{CLI}: no command: expected info, list or configure")]
    CliNoCommand,
    #[error("{CLI}: unknown command {command:?}: expected info, list or configure")]
    CliUnknownCommand { command: String },
    #[error("{CLI} {command}: unexpected argument {argument:?}")]
    CliExtra {
        command: &'static str,
        argument: String,
    },
    #[error(
        "{CLI} configure: no ROOTFS argument (usage: configure [OPTION...] [--pid=PID] ROOTFS)"
    )]
    NoRootfs,
    #[error("{CLI} configure: invalid rootfs directory {rootfs:?}: it must be an absolute path other than /")]
    BadRootfs { rootfs: String },
    #[error("{CLI} configure: --pid={value:?} is not a process id")]
    BadPid { value: String },
    #[error("{CLI} configure: --cuda-compat-mode={value:?} is not a mode (known: ldconfig, mount, disabled)")]
    BadCudaCompatMode { value: String },
    #[error("{CLI}: {option}={value:?} must be an absolute path")]
    NotAbsolute { option: &'static str, value: String },
    #[error("{CLI}: {option} is not valid UTF-8")]
    NotUtf8 { option: &'static str },
    // nvidia-ctk's command line.
    #[error("{0}")]
    Usage(String),
}

/// The parsers' tests compare refusals whole: two errors are equal when
/// their variants and operands are (the `Debug` text says both).
#[cfg(test)]
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        format!("{self:?}") == format!("{other:?}")
    }
}

/// Result of parsing a command line.
pub type Result<T> = std::result::Result<T, Error>;

/// ` COMMAND` for an error of a command's options, nothing for a global one.
fn at(command: &Option<&'static str>) -> String {
    command.map(|c| format!(" {c}")).unwrap_or_default()
}

/// Reads `args` (`argv[0]` first) by the front its name picks. Our own
/// command line's errors are clap's (it prints them and exits).
pub fn parse(args: Vec<OsString>) -> Result<Invocation> {
    let front = Front::of(args.first().map(OsString::as_os_str).unwrap_or_default());
    // NVIDIA's command lines are ASCII; a stray byte is refused by name.
    let lossy = || -> Vec<String> {
        args.iter()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    };
    Ok(match front {
        Front::Ours => ours::parse(&args),
        Front::RuntimeHook => runtime_hook::invocation(runtime_hook::parse(&lossy())?),
        // runc's command line, whole: nothing of it is ours to parse.
        Front::Runtime(mode) => Invocation::Run(
            Operation::Runtime {
                args: args.get(1..).unwrap_or_default().to_vec(),
            },
            Overrides {
                runtime_mode: mode,
                ..Overrides::default()
            },
        ),
        Front::Cli => match nvidia_cli::parse(&lossy())? {
            nvidia_cli::Parsed::Run(invocation) => nvidia_cli::operation(*invocation),
            nvidia_cli::Parsed::Version => Invocation::Print(nvidia_cli::version_text()),
            nvidia_cli::Parsed::Help(text) => Invocation::Print(text),
        },
        Front::Ctk => ctk::parse(&args)?,
        Front::CdiHook => cdi_hook::parse(&args),
    })
}

/// Which command line the binary was called with, by the name it was run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front {
    /// `oci-nvidia-hook` (or any other name): our own.
    Ours,
    /// `nvidia-container-runtime-hook`: NVIDIA's OCI hook.
    RuntimeHook,
    /// `nvidia-container-runtime`: NVIDIA's runc wrapper, our runtime mode;
    /// its `.cdi` and `.legacy` names force that mode.
    Runtime(Option<RuntimeMode>),
    /// `nvidia-container-cli`: NVIDIA's C CLI.
    Cli,
    /// `nvidia-ctk`: NVIDIA's toolkit command line.
    Ctk,
    /// `nvidia-cdi-hook`: the hooks of NVIDIA's CDI specs.
    CdiHook,
}

impl Front {
    /// The names that pick a front other than ours.
    const NAMES: [(&'static str, Front); 7] = [
        (HOOK, Front::RuntimeHook),
        (RUNTIME_NAME, Front::Runtime(None)),
        (RUNTIME_CDI_NAME, Front::Runtime(Some(RuntimeMode::Cdi))),
        (
            RUNTIME_LEGACY_NAME,
            Front::Runtime(Some(RuntimeMode::Legacy)),
        ),
        (CLI, Front::Cli),
        (CTK_NAME, Front::Ctk),
        (CDI_HOOK_NAME, Front::CdiHook),
    ];

    /// The front for `argv0`, by its file name: a link's name, not its target's.
    pub fn of(argv0: &OsStr) -> Front {
        let name = Path::new(argv0).file_name().and_then(OsStr::to_str);
        Front::NAMES
            .iter()
            .find(|(n, _)| Some(*n) == name)
            .map_or(Front::Ours, |(_, front)| *front)
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
            ("/usr/bin/nvidia-container-runtime", Front::Runtime(None)),
            // The GPU Operator's runtime classes nvidia-cdi and nvidia-legacy.
            (
                "/usr/bin/nvidia-container-runtime.cdi",
                Front::Runtime(Some(RuntimeMode::Cdi)),
            ),
            (
                "/usr/local/nvidia/toolkit/nvidia-container-runtime.legacy",
                Front::Runtime(Some(RuntimeMode::Legacy)),
            ),
            ("/usr/bin/nvidia-container-runtime.jit", Front::Ours),
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

    #[test]
    fn the_cdi_and_legacy_names_force_the_runtime_mode() {
        for (argv0, mode) in [
            ("nvidia-container-runtime", None),
            ("nvidia-container-runtime.cdi", Some(RuntimeMode::Cdi)),
            ("nvidia-container-runtime.legacy", Some(RuntimeMode::Legacy)),
        ] {
            let args = vec![OsString::from(argv0), "create".into(), "id".into()];
            let Ok(Invocation::Run(Operation::Runtime { args: passed }, overrides)) = parse(args)
            else {
                panic!("{argv0} runs no runtime");
            };
            assert_eq!(passed, ["create", "id"], "{argv0}");
            assert_eq!(overrides.runtime_mode, mode, "{argv0}");
        }
    }
}

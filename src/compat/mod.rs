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
use std::io;
use std::path::Path;

use clap::Parser;
use thiserror::Error;

use crate::cli::{self, Cli};
use crate::{config, driver, engine_config, hook, logging, planner};
use nvidia_cli::NAME as CLI;
use runtime_hook::NAME as HOOK;

/// Why a command line under one of NVIDIA's names was refused, or why the
/// command it asked for failed.
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
    #[error("{CLI} configure: no ROOTFS argument (usage: configure [OPTION...] --pid=PID ROOTFS)")]
    NoRootfs,
    #[error("{CLI} configure: invalid rootfs directory {rootfs:?}: it must be an absolute path other than /")]
    BadRootfs { rootfs: String },
    #[error("{CLI} configure: --pid={value:?} is not a process id")]
    BadPid { value: String },
    #[error(
        "{CLI} configure: --pid=PID is required: without it NVIDIA's CLI configures its \
         calling process in its own mount namespace, which this implementation never does"
    )]
    NoPid,
    #[error("{CLI} configure: --cuda-compat-mode={value:?} is not a mode (known: ldconfig, mount, disabled)")]
    BadCudaCompatMode { value: String },
    #[error("{CLI}: {option}={value:?} must be an absolute path")]
    NotAbsolute { option: &'static str, value: String },
    #[error("{CLI}: {option} is not valid UTF-8")]
    NotUtf8 { option: &'static str },
    #[error("list: nothing on this host matches the options given (no driver file of those kinds and capabilities, no such device)")]
    CliNothingListed,
    // nvidia-ctk's command line.
    #[error("{0}")]
    Usage(String),
    // Running the command.
    #[error(transparent)]
    Config(#[from] config::Error),
    #[error(transparent)]
    Log(#[from] logging::Error),
    #[error(transparent)]
    Driver(#[from] driver::Error),
    #[error(transparent)]
    Planner(#[from] planner::Error),
    #[error(transparent)]
    Hook(#[from] hook::Error),
    #[error(transparent)]
    Engine(#[from] engine_config::Error),
    #[error(transparent)]
    Ours(Box<cli::Error>),
    #[error(transparent)]
    Inject(Box<crate::inject::Error>),
    #[error(transparent)]
    Image(#[from] crate::image::Error),
    // nvidia-cdi-hook's arguments and work.
    #[error("invalid --link {0:?}: expected TARGET::LINK")]
    CdiHookLink(String),
    #[error("invalid --mode {0:?}: expected octal permission bits, at most 7777")]
    CdiHookMode(String),
    #[error("cannot list the host's {path}: {source}")]
    CdiHookHostProc {
        path: std::path::PathBuf,
        source: io::Error,
    },
    #[error("cannot write output: {0}")]
    Output(#[from] io::Error),
}

impl From<crate::inject::Error> for Error {
    fn from(e: crate::inject::Error) -> Self {
        Error::Inject(Box::new(e))
    }
}

impl From<cli::Error> for Error {
    fn from(e: cli::Error) -> Self {
        Error::Ours(Box::new(e))
    }
}

/// The parsers' tests compare refusals whole: two errors are equal when
/// their variants and operands are (the `Debug` text says both).
#[cfg(test)]
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        format!("{self:?}") == format!("{other:?}")
    }
}

/// ` COMMAND` for an error of a command's options, nothing for a global one.
fn at(command: &Option<&'static str>) -> String {
    command.map(|c| format!(" {c}")).unwrap_or_default()
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

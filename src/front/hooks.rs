//! The command line of NVIDIA's CDI spec hooks, shared by the two fronts
//! that take it: `nvidia-cdi-hook SUBCOMMAND` and `nvidia-ctk hook
//! SUBCOMMAND`. Read into [`crate::app::nvidia_hooks::Hook`].
//!
//! Forward compatible as NVIDIA's (v1.20.0, run side by side): no hook, or
//! one this binary does not know (a spec written by a newer device plugin,
//! DRA driver or operator), is a warning and success, never a container
//! that fails to start; so is a flag a known hook does not take, where
//! NVIDIA's fails: the hook is skipped, since running it without what the
//! flag meant could do something else than the spec asked.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use clap::error::{ContextKind, ErrorKind};
use clap::{Args, Subcommand};

use crate::app::nvidia_hooks::{Hook, HookEdits};
use crate::app::Invocation;

/// The hooks this binary answers, by NVIDIA's names; `noop`, hidden in
/// NVIDIA's too, does nothing.
pub const NAMES: [&str; 8] = [
    "update-ldcache",
    "create-soname-symlinks",
    "create-symlinks",
    "enable-cuda-compat",
    "disable-device-node-modification",
    "chmod",
    "update-application-profile",
    "noop",
];

/// The global flags that may come before a hook's name, taking no value.
const GLOBAL: [&str; 3] = ["-d", "--debug", "--quiet"];

/// What `words` (the arguments after `nvidia-cdi-hook`, or after `nvidia-ctk
/// hook`) come to before they are parsed: a warning for no hook or an
/// unknown one, nothing to do for `noop`; `None` for a known hook (or help
/// and version flags), left to the parser.
pub fn before_parsing(words: &[OsString]) -> Option<Invocation> {
    match named(words) {
        None => Some(Invocation::Warn("No CDI hook specified".into())),
        Some(word) if word.as_bytes().starts_with(b"-") => None,
        Some(word) if word == "noop" => Some(Invocation::Nothing),
        Some(word) if NAMES.iter().any(|n| word.as_bytes() == n.as_bytes()) => None,
        Some(word) => Some(Invocation::Warn(format!(
            "Unsupported CDI hook: {}",
            word.to_string_lossy()
        ))),
    }
}

/// A parse error of a known hook's command line as what to do: a flag the
/// hook does not take skips it with a warning; any other error is clap's
/// to print, and exits.
pub fn unparsed(error: clap::Error, hook: Option<&OsString>) -> Invocation {
    if error.kind() != ErrorKind::UnknownArgument {
        error.exit()
    }
    let flag = error
        .get(ContextKind::InvalidArg)
        .map(ToString::to_string)
        .unwrap_or_default();
    Invocation::Warn(format!(
        "Unsupported flag {flag} for CDI hook {}: the hook is skipped",
        hook.map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default()
    ))
}

/// The hook named among `words`, as [`before_parsing`] finds it.
pub fn named(words: &[OsString]) -> Option<&OsString> {
    words.get(first_word(words)?)
}

/// Where the first word past the global flags is among `words`.
pub fn first_word(words: &[OsString]) -> Option<usize> {
    words
        .iter()
        .position(|w| !GLOBAL.iter().any(|g| w.as_bytes() == g.as_bytes()))
}

/// The OCI state a hook reads.
#[derive(Debug, PartialEq, Eq, Args)]
pub struct State {
    /// Read the OCI state from this file instead of stdin (testing).
    #[arg(long, value_name = "FILE", hide = true)]
    pub container_spec: Option<PathBuf>,
}

impl State {
    /// The state file, `-` (or none) meaning stdin.
    fn file(&self) -> Option<&Path> {
        self.container_spec
            .as_deref()
            .filter(|p| p.as_os_str().as_bytes() != b"-" && !p.as_os_str().is_empty())
    }
}

/// The library folders `update-ldcache` and `create-soname-symlinks` take.
#[derive(Debug, PartialEq, Eq, Args)]
pub struct Folders {
    /// A directory of the container whose libraries the loader must find (repeatable).
    #[arg(long = "folder", value_name = "DIR")]
    pub folders: Vec<PathBuf>,
    /// Accepted for NVIDIA's specs and ignored: nothing is executed.
    #[arg(long, value_name = "PATH")]
    pub ldconfig_path: Option<PathBuf>,
    #[command(flatten)]
    pub state: State,
}

/// The hooks, by NVIDIA's names and flags.
#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum HookCommand {
    /// Add the libraries of --folder directories to the container's loader
    /// cache (and SONAME links to them), written by us: ldconfig never runs.
    UpdateLdcache(Folders),
    /// Create the SONAME links of the libraries in --folder directories.
    CreateSonameSymlinks(Folders),
    /// Create symlinks in the container, each given as TARGET::LINK.
    CreateSymlinks {
        /// TARGET::LINK, LINK a path in the container (repeatable).
        #[arg(long = "link", value_name = "TARGET::LINK")]
        links: Vec<String>,
        #[command(flatten)]
        state: State,
    },
    /// Let the loader prefer the image's CUDA compat libraries when they
    /// come from a newer driver than the host's.
    EnableCudaCompat {
        /// The host's driver version: libraries of a newer driver branch are preferred.
        #[arg(long, value_name = "VERSION")]
        host_driver_version: Option<String>,
        /// The CUDA version the host's driver supports (NVIDIA's specs for
        /// Jetson give it instead): libraries supporting a newer one are preferred.
        #[arg(long, value_name = "X.Y")]
        host_cuda_version: Option<String>,
        /// Where the container keeps its CUDA compat libraries [default: /usr/local/cuda/compat].
        #[arg(long, value_name = "DIR")]
        cuda_compat_container_root: Option<PathBuf>,
        #[command(flatten)]
        state: State,
    },
    /// Show the container a /proc/driver/nvidia/params with
    /// ModifyDeviceFiles: 0, so the driver never makes device nodes for it.
    DisableDeviceNodeModification {
        #[command(flatten)]
        state: State,
    },
    /// Set the permission bits of paths in the container.
    Chmod {
        /// The mode, in octal.
        #[arg(long, value_name = "MODE")]
        mode: String,
        /// A path in the container (repeatable); one it lacks is skipped.
        #[arg(long = "path", value_name = "PATH")]
        paths: Vec<PathBuf>,
        #[command(flatten)]
        state: State,
    },
    /// Restrict EGL and Vulkan to the container's GPUs through the driver's
    /// application profile.
    UpdateApplicationProfile {
        #[command(flatten)]
        state: State,
    },
}

impl HookCommand {
    /// The hook this command line asks for.
    pub fn hook(&self) -> Hook {
        let (state, kind) = match self {
            HookCommand::UpdateLdcache(Folders { folders, state, .. }) => (
                state,
                HookEdits::UpdateLdcache {
                    folders: folders.clone(),
                },
            ),
            HookCommand::CreateSonameSymlinks(Folders { folders, state, .. }) => (
                state,
                HookEdits::CreateSonameSymlinks {
                    folders: folders.clone(),
                },
            ),
            HookCommand::CreateSymlinks { links, state } => (
                state,
                HookEdits::CreateSymlinks {
                    links: links.clone(),
                },
            ),
            HookCommand::EnableCudaCompat {
                host_driver_version,
                host_cuda_version,
                cuda_compat_container_root,
                state,
            } => (
                state,
                HookEdits::EnableCudaCompat {
                    host_driver_version: host_driver_version.clone(),
                    host_cuda_version: host_cuda_version.clone(),
                    container_root: cuda_compat_container_root.clone(),
                },
            ),
            HookCommand::DisableDeviceNodeModification { state } => {
                (state, HookEdits::DisableDeviceNodeModification)
            }
            HookCommand::Chmod { mode, paths, state } => (
                state,
                HookEdits::Chmod {
                    mode: mode.clone(),
                    paths: paths.clone(),
                },
            ),
            HookCommand::UpdateApplicationProfile { state } => {
                (state, HookEdits::UpdateApplicationProfile)
            }
        };
        Hook {
            state: state.file().map(Path::to_path_buf),
            kind,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_names_are_the_parsers_hooks_and_noop() {
        let command = crate::front::cdi_hook::CdiHook::command();
        let mut parsed: Vec<&str> = command
            .get_subcommands()
            .map(clap::Command::get_name)
            .chain(["noop"])
            .collect();
        parsed.sort_unstable();
        let mut names = NAMES.to_vec();
        names.sort_unstable();
        assert_eq!(parsed, names);
    }
}

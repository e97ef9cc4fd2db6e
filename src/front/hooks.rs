//! The command line of NVIDIA's CDI spec hooks, shared by the two fronts
//! that take it: `nvidia-cdi-hook SUBCOMMAND` and `nvidia-ctk hook
//! SUBCOMMAND`. Read into [`crate::app::nvidia_hooks::Hook`].

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use crate::app::nvidia_hooks::{Hook, HookEdits};

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
        /// The host's driver version.
        #[arg(long, value_name = "VERSION")]
        host_driver_version: String,
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
                state,
            } => (
                state,
                HookEdits::EnableCudaCompat {
                    host_driver_version: host_driver_version.clone(),
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

//! What the hooks of NVIDIA's CDI specs ask for: each subcommand of
//! `nvidia-cdi-hook` (and `nvidia-ctk hook`) and its flags, as given. The
//! planner turns one into a plan ([`crate::planning::planner`]).

use std::path::PathBuf;

/// The edits NVIDIA's CDI spec hooks ask for (`nvidia-cdi-hook
/// SUBCOMMAND`), as their flags give them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookEdits {
    /// Add the libraries of `folders` to the loader cache, with SONAME links.
    UpdateLdcache {
        /// Directories of the container.
        folders: Vec<PathBuf>,
    },
    /// Create the SONAME links of the libraries in `folders`.
    CreateSonameSymlinks {
        /// Directories of the container.
        folders: Vec<PathBuf>,
    },
    /// Create links, each given as `TARGET::LINK`.
    CreateSymlinks {
        /// `TARGET::LINK`, as given.
        links: Vec<String>,
    },
    /// Prefer the image's CUDA compat libraries when they come from a newer driver.
    EnableCudaCompat {
        /// The host's driver version, as given.
        host_driver_version: Option<String>,
        /// The CUDA version the host's driver supports, as given (NVIDIA's
        /// specs for Jetson give it instead of a driver version).
        host_cuda_version: Option<String>,
        /// Where the container keeps its compat libraries; `None` for
        /// `/usr/local/cuda/compat`.
        container_root: Option<PathBuf>,
    },
    /// Show the container a driver params file that never makes nodes.
    DisableDeviceNodeModification,
    /// Set the permission bits of paths in the container.
    Chmod {
        /// The mode, in octal, as given.
        mode: String,
        /// Paths in the container.
        paths: Vec<PathBuf>,
    },
    /// Restrict EGL and Vulkan to the container's GPUs.
    UpdateApplicationProfile,
}

impl HookEdits {
    /// Whether the hook is planned from what the container shows inside its
    /// mount namespace; `disable-device-node-modification` is planned from
    /// the host's driver procfs, whose files are opened before entering.
    pub fn reads_container(&self) -> bool {
        !matches!(self, HookEdits::DisableDeviceNodeModification)
    }

    /// NVIDIA's name for it, in log lines.
    pub fn name(&self) -> &'static str {
        match self {
            HookEdits::UpdateLdcache { .. } => "update-ldcache",
            HookEdits::CreateSonameSymlinks { .. } => "create-soname-symlinks",
            HookEdits::CreateSymlinks { .. } => "create-symlinks",
            HookEdits::EnableCudaCompat { .. } => "enable-cuda-compat",
            HookEdits::DisableDeviceNodeModification => "disable-device-node-modification",
            HookEdits::Chmod { .. } => "chmod",
            HookEdits::UpdateApplicationProfile => "update-application-profile",
        }
    }
}

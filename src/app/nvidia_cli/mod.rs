//! `nvidia-container-cli`'s commands, answered by the same inventory,
//! planner and hook as ours: `info`, `list` and `configure`. The request
//! comes from the command line alone ([`crate::front`]'s `nvidia_cli`
//! reads it), never from the environment or the container's
//! `process.env`. Nothing here loads a kernel module or runs `ldconfig`,
//! whatever the options said.

mod configure;
mod info;
mod list;

use std::path::PathBuf;

pub use configure::run as configure;
pub use info::run as info;
pub use list::run as list;

use crate::planning::planner::Asked;

/// The name NVIDIA's CLI goes by, in its log lines.
const NAME: &str = crate::util::this_program::CLI_NAME;

/// Which kinds of paths `list` prints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sections {
    /// Device nodes and MIG capability files (`--device`).
    pub devices: bool,
    /// `--binaries`.
    pub binaries: bool,
    /// `--libraries`.
    pub libraries: bool,
    /// `--ipcs`.
    pub ipcs: bool,
    /// `--firmwares`.
    pub firmwares: bool,
}

/// `list`: what to plan and which kinds of paths to print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct List {
    /// The request, NVIDIA's defaults filled in.
    pub asked: Asked,
    /// What to print.
    pub sections: Sections,
}

/// `configure`: the container, the request and the steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Configure {
    /// `--pid`: the container's init, being created; `None`: the container
    /// whose mount namespace the caller runs in (NVIDIA's standalone mode).
    pub pid: Option<u32>,
    /// The container's rootfs.
    pub rootfs: PathBuf,
    /// The request.
    pub asked: Asked,
    /// `--ldconfig=PATH`: never run; the loader cache is written, not built.
    pub ldconfig: Option<String>,
    /// `--no-cgroups`: leave the device cgroup to the runtime.
    pub no_cgroups: bool,
    /// `--no-devbind`: leave the device nodes to the runtime.
    pub no_devbind: bool,
    /// `--cuda-compat-mode`, which NVIDIA's hook passes since 1.17.
    pub cuda_compat: Option<CudaCompat>,
}

/// How the image's CUDA forward-compatibility libraries are used
/// (`--cuda-compat-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaCompat {
    /// Preferred through the loader cache: our `ldconfig` mode.
    Ldconfig,
    /// NVIDIA mounts them over the driver's; nothing of an image is ever
    /// mounted here, so this is the `ldconfig` mode too.
    Mount,
    /// Ignored.
    Disabled,
}

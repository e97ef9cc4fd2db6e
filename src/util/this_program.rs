//! This program as others see it: the name and path a spec's hook calls
//! it by, and the system `PATH` it looks tools up in and hands its hooks,
//! never the caller's.

use std::io;
use std::path::PathBuf;

/// The system `PATH`, as a literal for `concat!`.
macro_rules! system_path {
    () => {
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    };
}

/// The system's directories, in lookup order: where plain runtime names
/// are looked up, the `PATH` every hook entry we write runs with, and
/// Go's lookup for a process without one.
pub const SYSTEM_PATH: &str = system_path!();

/// The environment every hook entry we generate runs with: explicit,
/// never the runtime's or the container's.
pub const HOOK_ENV: [&str; 1] = [concat!("PATH=", system_path!())];

/// The name this program goes by, as a hook entry's first argument.
pub const NAME: &str = "oci-nvidia-hook";

/// [`SYSTEM_PATH`]'s directories.
pub fn system_dirs() -> impl Iterator<Item = &'static str> {
    SYSTEM_PATH.split(':')
}

/// This binary, absolute, as a spec's hook calls it back.
pub fn path() -> io::Result<PathBuf> {
    std::env::current_exe()
}

/// This build's version and the git commit it was built from (build.rs),
/// so that a binary found on a host names the exact source it came from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("OCI_NVIDIA_HOOK_COMMIT"),
    ")"
);

/// NVIDIA's OCI hook's name, which Docker's `--gpus` looks up on its PATH.
pub const RUNTIME_HOOK_NAME: &str = "nvidia-container-runtime-hook";

/// NVIDIA's runc wrapper's name, which hosts configured for it call
/// (`daemon.json`'s `runtimes`).
pub const RUNTIME_NAME: &str = "nvidia-container-runtime";

/// The names the GPU Operator's runtime classes `nvidia-cdi` and
/// `nvidia-legacy` call NVIDIA's runtime wrapper by, each forcing its mode.
pub const RUNTIME_CDI_NAME: &str = "nvidia-container-runtime.cdi";

/// See [`RUNTIME_CDI_NAME`].
pub const RUNTIME_LEGACY_NAME: &str = "nvidia-container-runtime.legacy";

/// NVIDIA's C CLI's name, which `ctr run --gpus`, LXC and enroot call.
pub const CLI_NAME: &str = "nvidia-container-cli";

/// NVIDIA's toolkit command's name, which NVIDIA's instructions call.
pub const CTK_NAME: &str = "nvidia-ctk";

/// The name the hooks of NVIDIA's CDI specs call.
pub const CDI_HOOK_NAME: &str = "nvidia-cdi-hook";

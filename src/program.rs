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

//! Where the project's own files are: the repository (its `integration/`
//! scripts, `hooks.d/`, `README.md`) and the hook binary cargo built for
//! these tests. The one place that names them; never a copy of either.

use std::path::Path;

/// The repository's top directory.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The `oci-nvidia-hook` binary under test.
// Every suite that runs the product uses it; tests/ldcache_ldconfig.rs
// includes this module only for `repo()` (its simulated host) and runs no
// binary.
#[allow(dead_code)]
pub fn hook_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_oci-nvidia-hook"))
}

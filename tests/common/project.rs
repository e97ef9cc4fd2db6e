//! Where the project's own files are: the repository (its `integration/`
//! scripts, `hooks.d/`, `README.md` and `docs/`) and the hook binary cargo
//! built for these tests. The one place that names them; never a copy of
//! either.

use std::path::{Path, PathBuf};

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

/// README.md and every Markdown file below docs/, relative to the
/// repository, sorted: the project's documents.
// Only the suites that read the documents use it (tests/hook_entries.rs,
// tests/packaging.rs).
#[allow(dead_code)]
pub fn documents() -> Vec<PathBuf> {
    let mut found = vec![PathBuf::from("README.md")];
    let mut dirs = vec![PathBuf::from("docs")];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(repo().join(&dir))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let name = dir.join(entry.expect("docs entry").file_name());
            if repo().join(&name).is_dir() {
                dirs.push(name);
            } else if name.extension().is_some_and(|x| x == "md") {
                found.push(name);
            }
        }
    }
    found.sort();
    found
}

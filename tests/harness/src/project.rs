//! Where the project's own files are: the repository (its `integration/`
//! scripts, `hooks.d/`, `README.md` and `docs/`), the hook binary cargo
//! built for the tests, and the target directory's scratch space. The one place that
//! names them; never a copy of either.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The repository's top directory (this crate sits in `tests/harness`).
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("tests/harness lies two levels below the repository")
}

/// README.md and every Markdown file below docs/, relative to the
/// repository, sorted: the project's documents, which the suites that read
/// them (hook entries, the shipped key table) must all cover.
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

/// The profile directory cargo built the running test binary into
/// (`target/debug`): a test binary is `<profile>/deps/<suite>-<hash>`, and
/// the package's binaries lie beside `deps`, as `CARGO_BIN_EXE_*` names them.
fn profile_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("test binary path");
        let deps = exe.parent().expect("test binary directory");
        assert!(
            deps.file_name().is_some_and(|n| n == "deps"),
            "{} is not a test binary cargo built (<profile>/deps/<suite>-<hash>): run it with `cargo test`",
            exe.display()
        );
        deps.parent().expect("profile directory").to_path_buf()
    })
}

/// The `oci-nvidia-hook` binary under test, which cargo builds for every
/// integration test of the package.
pub fn hook_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = profile_dir().join("oci-nvidia-hook");
        assert!(
            bin.is_file(),
            "{} is missing: cargo builds it for the package's integration tests (`cargo test`)",
            bin.display()
        );
        bin
    })
}

/// The target directory's scratch space for tests (`target/tmp`, cargo's
/// `CARGO_TARGET_TMPDIR`), where the fixtures live.
pub fn target_tmpdir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        profile_dir()
            .parent()
            .expect("target directory")
            .join("tmp")
    })
}

//! Where engines look for CDI specs, and which files there they load: the
//! one listing `doctor` and `nvidia-ctk cdi list` read.

use std::path::{Path, PathBuf};

/// CDI's spec directories, in increasing priority.
pub const SPEC_DIRS: &[&str] = crate::config::CDI_SPEC_DIRS;

/// The `.json` and `.yaml` files of `dir`, the ones CDI loads, by name.
pub fn spec_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json" || x == "yaml") && p.is_file())
        .collect();
    files.sort();
    files
}

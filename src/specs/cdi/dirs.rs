//! Where engines look for CDI specs, and which files there they load: the
//! one listing `doctor` and `nvidia-ctk cdi list` read.

use std::path::{Path, PathBuf};

/// CDI's spec directories, in increasing priority.
pub const SPEC_DIRS: &[&str] = crate::config::CDI_SPEC_DIRS;

/// The largest spec file read: NVIDIA's for 8 GPUs is about 40 KiB.
pub const MAX_SPEC: usize = 4 * 1024 * 1024;

/// A spec file's text, read only if root (or the reader) owns it and no one
/// else may write it: a spec's hooks run as root at every container start,
/// so a file another user could change is refused, in one line.
pub fn read_spec_text(path: &Path) -> Result<String, String> {
    let data = crate::util::hostfile::read_trusted(path, MAX_SPEC).map_err(|e| e.to_string())?;
    String::from_utf8(data).map_err(|_| "not UTF-8".to_string())
}

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

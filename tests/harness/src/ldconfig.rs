//! glibc's own reading of a loader cache (`ldconfig -p -C FILE`): the
//! ground truth for what a container's loader will find. Only ever prints
//! a cache; never writes one.

use std::path::Path;
use std::process::Command;

/// One `ldconfig -p` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    /// The name looked up.
    pub soname: String,
    /// `libc6,x86-64`, `libc6`, ...
    pub tag: String,
    /// The file the loader opens.
    pub path: String,
}

/// glibc's own listing of a cache file, in file order.
pub fn ldconfig_print(cache: &Path) -> Vec<CacheEntry> {
    let out = Command::new("ldconfig")
        .arg("-p")
        .arg("-C")
        .arg(cache)
        .output()
        .expect("run ldconfig -p");
    assert!(
        out.status.success(),
        "ldconfig -p -C {} failed: {}",
        cache.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| line.starts_with('\t'))
        .filter_map(|line| {
            let (left, path) = line.trim().split_once(" => ")?;
            let (soname, tag) = left.split_once(" (")?;
            Some(CacheEntry {
                soname: soname.to_string(),
                tag: tag.trim_end_matches(')').to_string(),
                path: path.to_string(),
            })
        })
        .collect()
}

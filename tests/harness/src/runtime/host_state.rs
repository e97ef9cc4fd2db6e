//! Snapshots of host state that a container run must leave as it found:
//! a directory tree's every entry with its metadata, and the difference of
//! two snapshots for a failure message. Only reads.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Every entry under `root` with its type, mode, owner, size, mtime, ctime,
/// device number and link target: any write, chmod, chown, rename, mknod or
/// unlink by the hook changes the listing (atime, which reads change, is
/// left out).
pub fn tree_listing(root: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let meta = std::fs::symlink_metadata(&path)
                .unwrap_or_else(|e| panic!("lstat {}: {e}", path.display()));
            let ft = meta.file_type();
            let kind = if ft.is_symlink() {
                format!("link->{}", std::fs::read_link(&path).unwrap().display())
            } else if ft.is_dir() {
                "dir".into()
            } else if ft.is_char_device() {
                format!("char {}", meta.rdev())
            } else if ft.is_block_device() {
                format!("block {}", meta.rdev())
            } else if ft.is_socket() {
                "socket".into()
            } else if ft.is_fifo() {
                "fifo".into()
            } else {
                "file".into()
            };
            let facts = format!(
                "{kind} mode={:o} uid={} gid={} size={} mtime={}.{} ctime={}.{}",
                meta.mode(),
                meta.uid(),
                meta.gid(),
                meta.size(),
                meta.mtime(),
                meta.mtime_nsec(),
                meta.ctime(),
                meta.ctime_nsec()
            );
            out.insert(path.strip_prefix(root).unwrap().to_path_buf(), facts);
            if ft.is_dir() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// The differences between two listings, one line each, for messages.
pub fn listing_diff(
    before: &BTreeMap<PathBuf, String>,
    after: &BTreeMap<PathBuf, String>,
) -> Vec<String> {
    let mut diff = Vec::new();
    for (path, facts) in before {
        match after.get(path) {
            None => diff.push(format!("removed {}: {facts}", path.display())),
            Some(now) if now != facts => {
                diff.push(format!("changed {}: {facts} -> {now}", path.display()))
            }
            Some(_) => {}
        }
    }
    for (path, facts) in after {
        if !before.contains_key(path) {
            diff.push(format!("added {}: {facts}", path.display()));
        }
    }
    diff
}

/// What a node of daemons must leave the host as it found: the host's
/// mount table and the simulated host's tree, taken before it starts.
pub struct NodeBefore {
    mounts: Vec<String>,
    host_dir: PathBuf,
    driver: BTreeMap<PathBuf, String>,
}

impl NodeBefore {
    /// The host's state now, `host_dir` being the simulated host's tree.
    pub fn take(host_dir: &Path) -> NodeBefore {
        NodeBefore {
            mounts: crate::mounts::host_mounts(),
            host_dir: host_dir.to_path_buf(),
            driver: tree_listing(host_dir),
        }
    }

    /// Panics unless, once the daemons tagged `tag` are gone, no cgroup of
    /// theirs is left, the mount table is as it was and the simulated host
    /// is unchanged.
    pub fn assert_left_alone(&self, tag: &str) {
        super::cleanup::assert_left_as_found(
            tag,
            &self.mounts,
            &self.host_dir,
            &self.driver,
            "after containerd stopped",
        );
    }
}

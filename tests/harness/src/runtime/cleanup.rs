//! What a container run leaves behind, and removing it: the container and
//! its runtime state (a drop guard, so a failed or killed run is cleaned up
//! too), cgroups a killed runtime left, and old bundles. Never deletes
//! through a mount: a bind mount leaked under a bundle would lead
//! `remove_dir_all` into the host's driver files.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::oci_config::path_str;
use super::process::run_bounded;
use super::runtimes::Runtime;
use crate::mounts::host_mounts;

/// Removes the container and its runtime state when dropped, even when the
/// test failed or the run was killed: `delete -f` / `rm -f` of something
/// already gone is a harmless error, so its output is ignored.
pub struct Cleanup {
    /// The runtime that ran the container.
    pub runtime: Runtime,
    /// The container's id.
    pub id: String,
    /// The runtime's `--root`.
    pub state_root: PathBuf,
    /// Podman's `--hooks-dir` (its global options name it).
    pub hooks_dir: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let argv = self
            .runtime
            .delete_argv(&self.state_root, &self.hooks_dir, &self.id);
        // The same namespace as the run: runc v2 must see the cgroup2 mount
        // to remove the container's cgroup.
        let mut cmd = self.runtime.in_namespace(argv);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        let _ = run_bounded(cmd, Duration::from_secs(30));
        if !self.runtime.is_podman() {
            remove_leftover_cgroups(&self.id);
        }
    }
}

/// A runtime killed before it saved its state (say, while its hook hung)
/// leaves the container's cgroups behind, and `delete -f` then knows nothing
/// of them. runc and crun name them after the container id (no
/// cgroupsPath is set), which is unique to this test process: remove the
/// empty ones.
fn remove_leftover_cgroups(id: &str) {
    for dir in cgroup_dirs(|name| name == id) {
        let _ = std::fs::remove_dir(&dir); // rmdir: only if empty
    }
}

/// Every directory whose name `matches` in any cgroup hierarchy under
/// /sys/fs/cgroup (v1 controllers and the v2 `unified` mount), sorted. The
/// depth covers a controller whose root is nested (here
/// `memory/process_api/<hash>/<id>`); a match is not searched below.
pub fn cgroup_dirs(matches: impl Fn(&OsStr) -> bool) -> Vec<PathBuf> {
    fn visit(dir: &Path, matches: &dyn Fn(&OsStr) -> bool, depth: u32, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let path = entry.path();
            if matches(&entry.file_name()) {
                out.push(path);
            } else if depth > 0 {
                visit(&path, matches, depth - 1, out);
            }
        }
    }
    let mut out = Vec::new();
    visit(Path::new("/sys/fs/cgroup"), &matches, 4, &mut out);
    out.sort();
    out
}

/// Panics if anything is mounted under `dir` in the host's namespace: a hook
/// that mounted there leaked out of the container's mount namespace, and
/// deleting `dir` could then delete the driver files behind the mount.
pub fn assert_no_mounts_under(dir: &Path) {
    let prefix = format!("{}/", path_str(dir).trim_end_matches('/'));
    let leaked: Vec<String> = host_mounts()
        .into_iter()
        .filter(|m| m.starts_with(&prefix))
        .collect();
    assert!(
        leaked.is_empty(),
        "mounts leaked into the host's namespace under {}: {leaked:#?}",
        dir.display()
    );
}

/// Deletes what an earlier run left at `dir`, refusing if anything is
/// mounted under it (`remove_dir_all` would follow a bind mount into the
/// host tree).
pub fn remove_tree_safely(dir: &Path) {
    if !dir.exists() {
        return;
    }
    assert_no_mounts_under(dir);
    std::fs::remove_dir_all(dir).unwrap_or_else(|e| panic!("remove {}: {e}", dir.display()));
}

/// Removes an empty cgroup and its empty children, deepest first.
pub fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// What a suite of daemons must leave as it found once they stopped: no
/// cgroup named with `prefix`, the host's mounts as `mounts_before`, the
/// simulated host at `host_dir` as `host_before`.
pub fn assert_left_as_found(
    prefix: &str,
    mounts_before: &[String],
    host_dir: &Path,
    host_before: &std::collections::BTreeMap<PathBuf, String>,
    when: &str,
) {
    let left = cgroup_dirs(|n| n.to_str().is_some_and(|n| n.starts_with(prefix)));
    assert!(left.is_empty(), "cgroups left behind: {left:?}");
    crate::mounts::assert_mounts_unchanged(mounts_before, when);
    let changed =
        super::host_state::listing_diff(host_before, &super::host_state::tree_listing(host_dir));
    assert!(
        changed.is_empty(),
        "the simulated host changed: {changed:?}"
    );
}

//! This machine, which the tests install the packages on for real, kept as
//! it was: a drop guard that purges every package of ours and puts back the
//! files it moved aside (a `make install`'s hooks.d file, an administrator's
//! config) whatever happens, and listings of the file system to show that
//! nothing of ours is left. Also `dpkg` run as the tests need it.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::files::PACKAGES;
use harness::runtime::host_state::listing_diff;

/// Where a package can leave a file: dpkg's and deb-systemd-helper's
/// records live under /var/lib.
const LISTED: [&str; 3] = ["/etc", "/usr", "/var/lib"];
/// Under those, what the tests' container engines (Podman's storage) and
/// apt change on their own.
const NOT_LISTED: [&str; 3] = ["/var/lib/containers", "/var/lib/docker", "/var/lib/apt"];

/// The machine as it was before a test installed anything; restores it
/// when dropped.
pub struct HostGuard {
    before: BTreeMap<PathBuf, String>,
    /// (original path, where it was moved), in the order moved.
    moved: Vec<(PathBuf, PathBuf)>,
    restored: bool,
}

impl HostGuard {
    /// Records the file system, then moves aside whatever is at `paths`
    /// (the packages' files), so that dpkg neither overwrites nor, at purge,
    /// deletes a file that was not the package's. Panics when a package of
    /// ours is already known to dpkg: an administrator's install is not
    /// the tests' to remove.
    pub fn take(paths: &[String], backup_dir: &Path) -> HostGuard {
        for package in PACKAGES {
            if let Some(status) = status(package) {
                panic!(
                    "{package} is already known to dpkg ({status}); these tests install and purge it: \
                     remove it first (dpkg --purge oci-nvidia-hook-compat oci-nvidia-hook)"
                );
            }
        }
        let before = listing();
        let _ = std::fs::remove_dir_all(backup_dir);
        std::fs::create_dir_all(backup_dir).unwrap();
        let mut guard = HostGuard {
            before,
            moved: Vec::new(),
            restored: false,
        };
        for (i, path) in paths.iter().enumerate() {
            let path = PathBuf::from(path);
            if std::fs::symlink_metadata(&path).is_ok() {
                let aside = backup_dir.join(i.to_string());
                move_path(&path, &aside);
                guard.moved.push((path, aside));
            }
        }
        guard
    }

    /// Purges what is left of ours, puts the moved files back, and checks
    /// that the file system lists exactly what it did before.
    pub fn finish(mut self) {
        self.restore();
        let diff = listing_diff(&self.before, &listing());
        assert!(
            diff.is_empty(),
            "the file system differs from before the install:\n{}",
            diff.join("\n")
        );
    }

    fn restore(&mut self) {
        if self.restored {
            return;
        }
        self.restored = true;
        let known: Vec<&str> = PACKAGES
            .iter()
            .rev()
            .copied()
            .filter(|p| status(p).is_some())
            .collect();
        if !known.is_empty() {
            let out = dpkg_command().arg("--purge").args(&known).output();
            if !out.as_ref().is_ok_and(|o| o.status.success()) {
                eprintln!("packaging: dpkg --purge {known:?} failed while restoring: {out:?}");
            }
        }
        for (path, aside) in self.moved.iter().rev() {
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            move_path(aside, path);
        }
    }
}

impl Drop for HostGuard {
    fn drop(&mut self) {
        self.restore();
    }
}

/// `mv -T FROM TO`: a rename, or a copy across file systems.
fn move_path(from: &Path, to: &Path) {
    let status = Command::new("mv")
        .arg("-T")
        .arg(from)
        .arg(to)
        .status()
        .expect("run mv");
    assert!(
        status.success(),
        "mv {} {} failed",
        from.display(),
        to.display()
    );
}

/// Every path under [`LISTED`] with its type, permissions and link target
/// (times and sizes change with any dpkg run and say nothing of what is
/// left behind).
pub fn listing() -> BTreeMap<PathBuf, String> {
    fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if NOT_LISTED.iter().any(|skip| path == Path::new(skip)) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            let ft = meta.file_type();
            let kind = if ft.is_symlink() {
                format!(
                    "link -> {}",
                    std::fs::read_link(&path).unwrap_or_default().display()
                )
            } else if ft.is_dir() {
                "dir".to_string()
            } else if ft.is_char_device() || ft.is_block_device() {
                format!("device {}", meta.rdev())
            } else {
                "file".to_string()
            };
            out.insert(
                path.clone(),
                format!("{kind} mode {:o}", meta.mode() & 0o7777),
            );
            if ft.is_dir() {
                walk(&path, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    for root in LISTED {
        walk(Path::new(root), &mut out);
    }
    out
}

/// dpkg with no terminal to ask on: a question it would ask (a conffile
/// prompt) fails the run instead of hanging it.
fn dpkg_command() -> Command {
    let mut cmd = Command::new("dpkg");
    cmd.env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null());
    cmd
}

/// `dpkg ARGS`, which must succeed.
pub fn dpkg(args: &[&str], debs: &[PathBuf]) -> Output {
    let out = dpkg_command()
        .args(args)
        .args(debs)
        .output()
        .expect("run dpkg");
    assert!(
        out.status.success(),
        "dpkg {args:?} {debs:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// dpkg's status of `package` and its version ("ii 0.1.0"), or None when
/// dpkg knows nothing of it (never installed, or purged).
pub fn status(package: &str) -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f", "${db:Status-Abbrev}${Version}", package])
        .output()
        .expect("run dpkg-query");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    // A removed package without conffiles shows as "un" until forgotten.
    (out.status.success() && !text.is_empty() && !text.starts_with("un")).then_some(text)
}

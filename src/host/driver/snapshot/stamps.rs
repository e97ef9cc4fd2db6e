//! The stamps a snapshot is checked by: each path discovery examined, as
//! `lstat` saw it, checked again on its path resolved inside the driver
//! root, through no link; directories found unchanged are kept open so
//! that a stamp directly inside one is checked by its name there.

use std::ffi::OsStr;
use std::fs::Metadata;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, FileStat, Mode, SFlag};
use serde::{Deserialize, Serialize};

/// One examined path and what `lstat` said of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Stamp {
    pub(super) path: PathBuf,
    dev: u64,
    ino: u64,
    mode: u32,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    pub(super) fn of(path: PathBuf, m: &Metadata) -> Stamp {
        Stamp {
            path,
            dev: m.dev(),
            ino: m.ino(),
            mode: m.mode(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// Whether `fstat` said `s` of this stamp's path: the same file, unchanged.
    pub(super) fn is(&self, s: &FileStat) -> bool {
        (self.dev, self.ino, self.mode, self.mtime, self.ctime)
            == (
                s.st_dev,
                s.st_ino,
                s.st_mode,
                (s.st_mtime, s.st_mtime_nsec),
                (s.st_ctime, s.st_ctime_nsec),
            )
            && Ok(self.size) == u64::try_from(s.st_size)
    }
}

/// Checks stamps in the driver root, keeping a descriptor of each
/// directory found unchanged: a later stamp directly inside one is then
/// looked at by its name in that descriptor (one `fstatat` for a file),
/// not resolved from the root again (an `openat2`, an `fstat` and a
/// `close`, walking every component). The same guarantee: the directory
/// was reached through no symlink and is the one stamped, and a single
/// plain name, not followed if it is a link, cannot leave it.
pub(super) struct CheckedDirs<'r> {
    root: &'r NormalRoot,
    /// The root, as an `O_PATH` descriptor.
    root_fd: OwnedFd,
    /// Each directory below the root found unchanged, by its path inside
    /// the root, and its `O_PATH` descriptor.
    open: Vec<(Vec<u8>, OwnedFd)>,
}

impl<'r> CheckedDirs<'r> {
    /// None checked yet but the root, open as `root_fd`, whose stamp is still to check.
    pub(super) fn new(root: &'r NormalRoot, root_fd: OwnedFd) -> CheckedDirs<'r> {
        CheckedDirs {
            root,
            root_fd,
            open: Vec::new(),
        }
    }

    /// The descriptor of checked directory `inner` (the root for empty).
    pub(super) fn dir(&self, inner: &[u8]) -> Option<&OwnedFd> {
        if inner.is_empty() {
            return Some(&self.root_fd);
        }
        self.open
            .iter()
            .find(|(path, _)| path == inner)
            .map(|(_, fd)| fd)
    }

    /// Whether `stamp`'s path (normal, see [`confined`]), resolved inside
    /// the driver root through no symlink, is still the same.
    pub(super) fn holds(&mut self, stamp: &Stamp) -> bool {
        let Some(inner) = self.root.inner(&stamp.path) else {
            return false;
        };
        if inner.is_empty() {
            return fstat(self.root_fd.as_fd()).is_ok_and(|s| stamp.is(&s));
        }
        let is_dir = SFlag::from_bits_truncate(stamp.mode) & SFlag::S_IFMT == SFlag::S_IFDIR;
        let (parent, name) = match inner.iter().rposition(|&b| b == b'/') {
            Some(at) => (&inner[..at], &inner[at + 1..]),
            None => (&inner[..0], inner),
        };
        let name = OsStr::from_bytes(name);
        let fd = match self.dir(parent) {
            // A file: its own `lstat`, in its checked directory.
            Some(dir) if !is_dir => {
                let stat =
                    nix::sys::stat::fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW);
                return stat.is_ok_and(|s| stamp.is(&s));
            }
            Some(dir) => openat(
                dir,
                name,
                OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .ok(),
            None => resolve_in_root(&self.root_fd, Path::new(OsStr::from_bytes(inner))),
        };
        let Some(fd) = fd else {
            return false;
        };
        let holds = fstat(fd.as_fd()).is_ok_and(|s| stamp.is(&s));
        if holds && is_dir {
            self.open.push((inner.to_vec(), fd));
        }
        holds
    }
}

/// The driver root in normal form, to tell by their bytes whether normal
/// paths lie under it: `Path::starts_with` and `strip_prefix` walk both
/// paths' components, which for a snapshot's few dozen paths was most of
/// a start's own (user-space) work.
pub(super) struct NormalRoot(Vec<u8>);

impl NormalRoot {
    /// `root` with its components rejoined: no `.`, repeated or trailing `/`.
    pub(super) fn new(root: &Path) -> NormalRoot {
        NormalRoot(
            root.components()
                .collect::<PathBuf>()
                .into_os_string()
                .into_vec(),
        )
    }

    /// What follows the root in `path`, a normal path (empty for the root
    /// itself), if `path` lies under it; as `path.strip_prefix(root)` says
    /// for a normal path.
    pub(super) fn inner<'p>(&self, path: &'p Path) -> Option<&'p [u8]> {
        let path = path.as_os_str().as_bytes();
        if self.0 == b"/" {
            return path.strip_prefix(b"/");
        }
        match path.strip_prefix(self.0.as_slice())? {
            [] => Some(&[]),
            [b'/', rest @ ..] => Some(rest),
            _ => None,
        }
    }
}

/// `inner` (relative) resolved inside the root open as `root_fd` as an
/// `O_PATH` descriptor, through no symlink: stamped paths are resolved
/// paths, so a link on the way means the root changed, or the snapshot lies.
pub(super) fn resolve_in_root(root_fd: &OwnedFd, inner: &Path) -> Option<OwnedFd> {
    use rustix::fs::{openat2, Mode as RxMode, OFlags, ResolveFlags};
    openat2(
        root_fd,
        inner,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        RxMode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .ok()
}

/// Whether `path` is normal: absolute, with no `.`, `..` or empty component.
pub(super) fn is_normal(path: &Path) -> bool {
    match path.as_os_str().as_bytes() {
        b"/" => true,
        [b'/', rest @ ..] => rest
            .split(|&b| b == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b".."),
        _ => false,
    }
}

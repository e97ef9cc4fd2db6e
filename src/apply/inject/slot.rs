//! A single entry of the rootfs, named by a directory resolved inside it
//! and one plain component: what every change of injection acts on, and
//! what the journal keeps to undo one; and the kinds of mount target made
//! at one (`O_CREAT|O_EXCL|O_NOFOLLOW`, or `mkdirat`). It resolves nothing
//! itself and never follows a link.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{mkdirat, Mode};

use super::Error;

/// A name inside a directory of the rootfs that was resolved once, safely:
/// every operation on it is a single-component `*at` call with `O_NOFOLLOW`
/// semantics, so it can neither traverse nor follow anything.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    /// The resolved directory.
    pub dir: BorrowedFd<'a>,
    /// The final component.
    pub name: &'a OsStr,
    /// The whole path in the container, for messages.
    pub path: &'a Path,
}

/// A [`Place`] that owns its parts, so that the journal can keep it to undo
/// a change there; the directory descriptor is shared, not duplicated.
#[derive(Debug, Clone)]
pub(super) struct Slot {
    pub dir: Rc<OwnedFd>,
    pub name: OsString,
    pub path: PathBuf,
}

impl Slot {
    /// The slot, borrowed for one operation.
    pub fn place(&self) -> Place<'_> {
        Place {
            dir: self.dir.as_fd(),
            name: &self.name,
            path: &self.path,
        }
    }

    /// Its container path with the final component replaced, for messages.
    pub fn sibling(&self, name: &OsStr) -> PathBuf {
        self.path.with_file_name(name)
    }
}

/// What a mount target must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    File,
    Directory,
}

impl Target {
    pub fn kind(self) -> &'static str {
        match self {
            Target::File => "regular file",
            Target::Directory => "directory",
        }
    }

    /// Creates the target as `name` in `dir`; its own descriptor is what to mount onto.
    pub fn make(self, dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<OwnedFd> {
        match self {
            Target::File => openat(
                dir,
                name,
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o644),
            ),
            Target::Directory => {
                mkdirat(dir, name, Mode::from_bits_truncate(0o755)).and_then(|()| {
                    openat(
                        dir,
                        name,
                        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                        Mode::empty(),
                    )
                })
            }
        }
    }
}

pub(super) fn symlink_err(path: &Path, target: &Path, errno: Errno) -> Error {
    Error::Symlink {
        path: path.to_path_buf(),
        target: target.to_path_buf(),
        source: errno.into(),
    }
}

//! What injection changed in the rootfs, recorded in memory as it happens:
//! undone in reverse order when a later step fails, finished once every step
//! succeeded.
//!
//! Undoing detaches our mounts, removes the entries and directories we
//! created, and puts back image entries that ours replaced; finishing
//! removes those image entries from the hidden names they were swapped to.
//! Neither adds a syscall to a successful injection that replaced nothing.
//! Undoing goes on past a step it cannot undo, and says so; finishing logs
//! what it cannot remove, as injection has succeeded by then.
//!
//! Changes are undone by name, in directories resolved before: were the
//! image changed meanwhile (a running container sharing the rootfs), an
//! entry of the image now at that name could be removed in place of ours,
//! always inside the rootfs.
//! Every step is a single-component `*at` call in a directory resolved
//! before, or a path resolved inside the rootfs: nothing here follows an
//! image's symlink.

use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, renameat, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::{unlinkat, UnlinkatFlags};
use pathrs::Root;

use super::slot::{Place, Slot};
use super::userns::{self, Edit};
use super::{Error, Result, Sys};
use crate::planning::userns::MappedRoot;

/// One change to the rootfs, with what it takes to undo it.
#[derive(Debug)]
pub(super) enum Change {
    /// A file, node, link or mount target we created where nothing was.
    Created(Slot),
    /// A directory we created where nothing was; what we put in it is
    /// recorded after it, so it is empty again when its turn comes.
    CreatedDir(Slot),
    /// Ours took the place of an image entry, which now has the hidden
    /// name `aside` in the same directory.
    Replaced {
        slot: Slot,
        aside: OsString,
        ours_is_dir: bool,
    },
    /// A mount we attached.
    Mounted(Mountpoint),
    /// An image entry whose permission bits we changed from `old`.
    Mode {
        handle: pathrs::Handle,
        path: PathBuf,
        old: u32,
    },
    /// An image file ours replaced outright, as an injection's last change
    /// ([`super::staged::Staged::install_last`]): nothing was kept to put
    /// back, so undoing it fails, by name.
    Overwritten(Slot),
}

/// Where a mount of ours is, to find its root again and detach it.
#[derive(Debug)]
pub(super) enum Mountpoint {
    /// On the entry at a slot.
    Entry(Slot),
    /// On the directory at this path, resolved in the rootfs again: the
    /// tmpfs over `/proc/driver/nvidia`, whose descriptor from before the
    /// mount names the covered directory, not the tmpfs.
    InRoot(PathBuf),
}

/// The changes made so far, in order, and whose rights they are made
/// with: each change site asks [`Journal::may`] first.
#[derive(Debug, Default)]
pub(super) struct Journal {
    changes: Vec<Change>,
    /// The container's root where its user namespace is not the hook's.
    acting_as: Option<MappedRoot>,
}

impl Journal {
    /// A journal of changes made for the container's root `acting_as`, held
    /// to what it could change itself (none: as the hook).
    pub fn acting_as(acting_as: Option<MappedRoot>) -> Journal {
        Journal {
            changes: Vec::new(),
            acting_as,
        }
    }

    /// Whether `edit` at `place` may be made (see [`userns::may_change`]).
    pub fn may(&self, place: Place<'_>, edit: Edit) -> Result<()> {
        match &self.acting_as {
            Some(root) => userns::may_change(root, place, edit),
            None => Ok(()),
        }
    }

    /// Whether the mode of the entry `fd` at `path` may be changed.
    pub fn may_change_mode(&self, fd: BorrowedFd<'_>, path: &Path) -> Result<()> {
        match &self.acting_as {
            Some(root) => userns::may_change_mode(root, fd, path),
            None => Ok(()),
        }
    }

    /// Records a change just made.
    pub fn record(&mut self, change: Change) {
        self.changes.push(change);
    }

    /// Undoes every change, the latest first: a mount before its target,
    /// an entry before its directory. Returns the steps that failed.
    pub fn undo(self, sys: &impl Sys, root: &Root) -> Vec<Error> {
        let mut failed = Vec::new();
        for change in self.changes.into_iter().rev() {
            if let Err(e) = undo(change, sys, root) {
                log::debug!("undoing the failed injection: {e}");
                failed.push(e);
            }
        }
        failed
    }

    /// Removes the image entries that ours replaced, now that nothing can fail.
    pub fn finish(self) {
        for change in self.changes {
            if let Change::Replaced { slot, aside, .. } = change {
                if let Err(errno) = unlinkat(
                    slot.dir.as_fd(),
                    aside.as_os_str(),
                    UnlinkatFlags::NoRemoveDir,
                ) {
                    log::warn!(
                        "cannot remove the image's former {}, now {aside:?} beside it: {errno}",
                        slot.path.display()
                    );
                }
            }
        }
    }
}

fn undo(change: Change, sys: &impl Sys, root: &Root) -> Result<()> {
    let remove = |slot: &Slot, flags| {
        unlinkat(slot.dir.as_fd(), slot.name.as_os_str(), flags).map_err(|errno| Error::Remove {
            path: slot.path.clone(),
            source: errno.into(),
        })
    };
    match change {
        Change::Mounted(Mountpoint::Entry(slot)) => {
            // Opened again, the name crosses into the mount: its root.
            let mounted = openat(
                slot.dir.as_fd(),
                slot.name.as_os_str(),
                OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(|errno| Error::Open {
                path: slot.path.clone(),
                source: errno.into(),
            })?;
            sys.unmount(mounted.as_fd(), &slot.path)
        }
        Change::Mounted(Mountpoint::InRoot(path)) => {
            let mounted = root.resolve(&path).map_err(|source| Error::Resolve {
                path: path.clone(),
                source,
            })?;
            sys.unmount(mounted.as_fd(), &path)
        }
        Change::Overwritten(slot) => Err(Error::Overwritten { path: slot.path }),
        Change::Mode { handle, path, old } => crate::util::reopen::Reopener::open()
            .and_then(|reopener| reopener.chmod(handle.as_fd(), &path, old))
            .map_err(Error::Reopen),
        Change::Created(slot) => remove(&slot, UnlinkatFlags::NoRemoveDir),
        Change::CreatedDir(slot) => remove(&slot, UnlinkatFlags::RemoveDir),
        Change::Replaced {
            slot,
            aside,
            ours_is_dir,
        } => {
            // A rename replaces a file or link of ours in one step; a
            // directory of ours cannot be renamed over, so it goes first.
            if ours_is_dir {
                remove(&slot, UnlinkatFlags::RemoveDir)?;
            }
            let dir = slot.dir.as_fd();
            renameat(dir, aside.as_os_str(), dir, slot.name.as_os_str()).map_err(|errno| {
                Error::Swap {
                    path: slot.path.clone(),
                    staged: aside,
                    source: errno.into(),
                }
            })
        }
    }
}

//! Entries of ours made whole under a hidden name beside where they go,
//! then put in place in one atomic step: a loader cache is never seen half
//! written, and an image entry in the way is swapped aside
//! (`renameat2(RENAME_EXCHANGE)`, or a hard link then `rename` where the
//! filesystem lacks it), never deleted while injection can still fail. The
//! journal puts it back, or removes it once everything succeeded.
//!
//! Hidden names are created `O_EXCL|O_NOFOLLOW`: a name the image already
//! has there fails the step rather than being written through.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::{linkat, symlinkat, unlinkat, UnlinkatFlags};
use rustix::fs::{renameat_with, RenameFlags};

use super::journal::{Change, Journal};
use super::slot::{symlink_err, Slot, Target};
use super::{Error, Result};

/// `.<name>.oci-nvidia-hook.<pid><suffix>`: a hidden name beside `name`
/// for ours before it is swapped in, or for the image's entry after.
fn hidden_name(name: &OsStr, suffix: &str) -> OsString {
    let mut hidden = OsString::from(".");
    hidden.push(name);
    hidden.push(format!(".oci-nvidia-hook.{}{suffix}", std::process::id()));
    hidden
}

/// An entry of ours, complete under a hidden name beside `slot`, not yet in its place.
#[derive(Debug)]
pub(super) struct Staged {
    slot: Slot,
    temp: OsString,
    is_dir: bool,
}

impl Staged {
    /// Writes `data` to a new file (`O_EXCL|O_NOFOLLOW`) beside `slot`.
    pub fn file(slot: Slot, data: &[u8]) -> Result<Staged> {
        let temp = hidden_name(&slot.name, "");
        let fd = openat(
            slot.dir.as_fd(),
            temp.as_os_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        )
        .map_err(|errno| Error::Create {
            what: "file",
            path: slot.sibling(&temp),
            source: errno.into(),
        })?;
        let staged = Staged {
            slot,
            temp,
            is_dir: false,
        };
        // No fsync: the rootfs is the container's, and the hook reruns on every start.
        if let Err(source) = File::from(fd).write_all(data) {
            let path = staged.slot.sibling(&staged.temp);
            staged.discard();
            return Err(Error::Write { path, source });
        }
        Ok(staged)
    }

    /// A symlink to `target` beside `slot`.
    pub fn symlink(slot: Slot, target: &Path) -> Result<Staged> {
        let temp = hidden_name(&slot.name, "");
        symlinkat(target, slot.dir.as_fd(), temp.as_os_str())
            .map_err(|errno| symlink_err(&slot.sibling(&temp), target, errno))?;
        Ok(Staged {
            slot,
            temp,
            is_dir: false,
        })
    }

    /// An empty mount target beside `slot`, with its descriptor.
    pub fn target(slot: Slot, target: Target) -> Result<(Staged, OwnedFd)> {
        let temp = hidden_name(&slot.name, "");
        let fd = target
            .make(slot.dir.as_fd(), &temp)
            .map_err(|errno| Error::Create {
                what: "mount target",
                path: slot.sibling(&temp),
                source: errno.into(),
            })?;
        let staged = Staged {
            slot,
            temp,
            is_dir: target == Target::Directory,
        };
        Ok((staged, fd))
    }

    /// Removes the staged entry: it never took its place.
    pub fn discard(self) {
        let flags = if self.is_dir {
            UnlinkatFlags::RemoveDir
        } else {
            UnlinkatFlags::NoRemoveDir
        };
        if let Err(errno) = unlinkat(self.slot.dir.as_fd(), self.temp.as_os_str(), flags) {
            log::warn!(
                "cannot remove {}: {errno}",
                self.slot.sibling(&self.temp).display()
            );
        }
    }

    /// Puts the staged entry in place of `slot`'s name in one atomic step;
    /// what was there stays aside until the journal finishes or undoes it.
    /// `existing` says whether something is expected there, to try first
    /// the call that most likely succeeds.
    pub fn install(self, existing: bool, journal: &mut Journal) -> Result<()> {
        match self.put(existing) {
            Ok(Some(aside)) => journal.record(Change::Replaced {
                slot: self.slot,
                aside,
                ours_is_dir: self.is_dir,
            }),
            Ok(None) if self.is_dir => journal.record(Change::CreatedDir(self.slot)),
            Ok(None) => journal.record(Change::Created(self.slot)),
            Err(errno) => return Err(self.swap_failed(errno)),
        }
        Ok(())
    }

    /// Puts the staged file in place of `slot`'s name with a plain
    /// `rename`, which replaces the image's entry there, keeping nothing
    /// aside. Only for an injection's last change, which is never undone:
    /// no step follows it that could fail. On an overlay rootfs this spares
    /// what [`Staged::install`]'s exchange costs: the image's file, still
    /// in a lower layer, copied up whole (and synced) only to be deleted.
    pub fn install_last(self, journal: &mut Journal) -> Result<()> {
        let dir = self.slot.dir.as_fd();
        match renameat(dir, self.temp.as_os_str(), dir, self.slot.name.as_os_str()) {
            Ok(()) => {
                journal.record(Change::Overwritten(self.slot));
                Ok(())
            }
            Err(errno) => Err(self.swap_failed(errno)),
        }
    }

    /// Removes the staged entry that could not be put in place, and names
    /// the failure.
    fn swap_failed(self, errno: Errno) -> Error {
        let err = Error::Swap {
            path: self.slot.path.clone(),
            staged: self.temp.clone(),
            source: errno.into(),
        };
        self.discard();
        err
    }

    /// Moves the staged entry to the slot's name: the hidden name where the
    /// image's entry went, or `None` when there was none.
    fn put(&self, existing: bool) -> nix::Result<Option<OsString>> {
        let dir = self.slot.dir.as_fd();
        let (temp, name) = (self.temp.as_os_str(), self.slot.name.as_os_str());
        // rustix's renameat2 is the system call itself: glibc has no
        // renameat2 wrapper before 2.28, and the binary runs on 2.17.
        let renameat2 = |flags| {
            renameat_with(dir, temp, dir, name, flags)
                .map_err(|e| Errno::from_raw(e.raw_os_error()))
        };
        let exchange = || renameat2(RenameFlags::EXCHANGE).map(|()| Some(self.temp.clone()));
        let create = || renameat2(RenameFlags::NOREPLACE).map(|()| None);
        let put = match (existing, if existing { exchange() } else { create() }) {
            (true, Err(Errno::ENOENT)) => create(),
            (false, Err(Errno::EEXIST)) => exchange(),
            (_, first) => first,
        };
        match put {
            // The filesystem has no such renameat2 flags (NFS, some FUSE).
            Err(Errno::EINVAL) => self.put_by_link(),
            other => other,
        }
    }

    /// `put` without `renameat2` flags: a hard link keeps the image's entry
    /// under a hidden name, then `rename` replaces it with ours in one step.
    pub fn put_by_link(&self) -> nix::Result<Option<OsString>> {
        let dir = self.slot.dir.as_fd();
        let aside = hidden_name(&self.slot.name, ".old");
        // No AT_SYMLINK_FOLLOW: an image's symlink is linked, not followed.
        let kept = match linkat(
            dir,
            self.slot.name.as_os_str(),
            dir,
            aside.as_os_str(),
            AtFlags::empty(),
        ) {
            Ok(()) => Some(aside),
            Err(Errno::ENOENT) => None,
            Err(errno) => return Err(errno),
        };
        match renameat(dir, self.temp.as_os_str(), dir, self.slot.name.as_os_str()) {
            Ok(()) => Ok(kept),
            Err(errno) => {
                if let Some(aside) = &kept {
                    let _ = unlinkat(dir, aside.as_os_str(), UnlinkatFlags::NoRemoveDir);
                }
                Err(errno)
            }
        }
    }
}

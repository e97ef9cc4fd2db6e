//! Covers the container's `/proc/driver/nvidia`, where the kernel shows one,
//! with a small tmpfs holding our copies of the driver's files (`params`
//! with `ModifyDeviceFiles: 0`) and read-only binds of the selected GPUs'
//! directories only, so the container sees neither the other GPUs nor a
//! driver willing to make device nodes. The tmpfs is made read-only once
//! filled.
//!
//! Everything below the tmpfs is ours and new: files are created
//! `O_EXCL|O_NOFOLLOW` and directories never through a symlink. Only the
//! mounts are journaled; undoing them takes the tmpfs and all it holds.

use std::ffi::OsStr;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};
use std::rc::Rc;

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, mkdirat, Mode};
use pathrs::Root;

use super::journal::{Change, Journal, Mountpoint};
use super::place::{mount_target, open_dir, split, MountTarget, TargetFiles};
use super::slot::{Place, Slot, Target};
use super::sources::{self, Sources};
use super::{Error, Result, Sys};
use crate::util::reopen::kind_name;

/// Masks `path` (`/proc/driver/nvidia`) if it is a directory in the container.
pub(super) fn mask(
    sys: &impl Sys,
    root: &Root,
    path: &Path,
    sources: &mut Sources,
    journal: &mut Journal,
) -> Result<()> {
    let resolve = |root: &Root| {
        root.resolve(path).map_err(|source| Error::Resolve {
            path: path.to_path_buf(),
            source,
        })
    };
    match crate::util::reopen::resolve_in(root, path) {
        Ok(Some(handle)) if is_our_mask(handle.as_fd()) => {
            log::debug!(
                "{} is masked already (an earlier run of the hook for this container)",
                path.display()
            );
            return Ok(());
        }
        Ok(Some(handle))
            if fstat(handle.as_fd()).is_ok_and(|s| kind_name(s.st_mode) == "directory") =>
        {
            // Now they are needed: the GPUs' directories are cloned.
            sys.clone_in_host(&mut sources.proc_gpus, sources::PROC_OPTIONS)?;
            sys.mount_tmpfs(handle.as_fd(), path)?;
            journal.record(Change::Mounted(Mountpoint::InRoot(path.to_path_buf())));
        }
        _ => {
            log::debug!(
                "{} is not a directory in the container: nothing to mask",
                path.display()
            );
            return Ok(());
        }
    }
    // Resolve again: the tmpfs now covers the old directory.
    let tmpfs: OwnedFd = resolve(root)?.into();
    let tmpfs_dir = openat(
        &tmpfs,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| Error::Open {
        path: path.to_path_buf(),
        source: errno.into(),
    })?;
    for (rel, data) in &sources.proc_files {
        let file_path = path.join(rel);
        let (parent, name) = split(rel)?;
        let dir = nested_dir(tmpfs_dir.as_fd(), parent, path)?;
        let dir = dir.as_ref().map_or(tmpfs_dir.as_fd(), |d| d.as_fd());
        create_file(
            Place {
                dir,
                name,
                path: &file_path,
            },
            data,
        )?;
    }
    if !sources.proc_gpus.is_empty() {
        let gpus_path = path.join("gpus");
        let gpus = Rc::new(subdir(tmpfs_dir.as_fd(), OsStr::new("gpus"), &gpus_path)?);
        for (bus, source) in &sources.proc_gpus {
            let slot = Slot {
                dir: gpus.clone(),
                name: bus.into(),
                path: gpus_path.join(bus),
            };
            // The tmpfs is new: the target is created, and goes with it.
            let MountTarget::Ready(target) = mount_target(
                &slot,
                Target::Directory,
                None,
                &mut TargetFiles::default(),
                &mut Journal::default(),
            )?
            else {
                continue; // Only a source's own inode reads as mounted.
            };
            sys.bind_mount(source, target.as_fd(), slot.place(), sources::PROC_OPTIONS)?;
            journal.record(Change::Mounted(Mountpoint::Entry(slot)));
        }
    }
    sys.remount_read_only(resolve(root)?.as_fd(), path)
}

/// Whether `dir` is a mask an earlier run made: a read-only tmpfs, which
/// the driver's procfs directory never is, nor an image directory the hook
/// could write into.
fn is_our_mask(dir: BorrowedFd<'_>) -> bool {
    use nix::sys::statfs::{fstatfs, TMPFS_MAGIC};
    use nix::sys::statvfs::{fstatvfs, FsFlags};
    fstatfs(dir).is_ok_and(|fs| fs.filesystem_type() == TMPFS_MAGIC)
        && fstatvfs(dir).is_ok_and(|vfs| vfs.flags().contains(FsFlags::ST_RDONLY))
}

/// Creates file `place` holding `data`; nothing may be there yet.
fn create_file(place: Place<'_>, data: &[u8]) -> Result<()> {
    let fd = openat(
        place.dir,
        place.name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )
    .map_err(|errno| Error::Create {
        what: "file",
        path: place.path.to_path_buf(),
        source: errno.into(),
    })?;
    File::from(fd)
        .write_all(data)
        .map_err(|source| Error::Write {
            path: place.path.to_path_buf(),
            source,
        })
}

/// Opens (creating as needed) the directories of `rel` below `dir`, one
/// component at a time and never through a symlink; `None` when `rel` is empty.
fn nested_dir(dir: BorrowedFd<'_>, rel: &Path, base: &Path) -> Result<Option<OwnedFd>> {
    let mut walked = base.to_path_buf();
    let mut current: Option<OwnedFd> = None;
    for component in rel.components() {
        let Component::Normal(name) = component else {
            return Err(Error::PathShape {
                path: base.join(rel),
                refused: "it has a component other than a plain name",
            });
        };
        walked.push(name);
        let parent = current.as_ref().map_or(dir, |d| d.as_fd());
        current = Some(subdir(parent, name, &walked)?);
    }
    Ok(current)
}

/// Opens directory `name` in `dir`, creating it if missing, never through a symlink.
fn subdir(dir: BorrowedFd<'_>, name: &OsStr, path: &Path) -> Result<OwnedFd> {
    match mkdirat(dir, name, Mode::from_bits_truncate(0o755)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(errno) => {
            return Err(Error::Create {
                what: "directory",
                path: path.to_path_buf(),
                source: errno.into(),
            })
        }
    }
    open_dir(Place { dir, name, path }, OFlag::O_RDONLY)
}

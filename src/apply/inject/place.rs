//! Finds and changes single entries of the rootfs: the directories items
//! live in, mount targets and symlinks.
//!
//! Each directory is resolved inside the rootfs once (`pathrs`); every
//! change below it is a single-component `*at` call with `O_NOFOLLOW`
//! semantics, so it can neither traverse nor follow anything. Every change
//! is recorded in the [`Journal`] as it is made; an image entry that ours
//! replaces is swapped aside, never deleted here (see `inject`'s module
//! documentation). Nothing here ever writes through an image's symlink or
//! opens an image entry whose type was not checked through `O_PATH`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, mkdirat, Mode};
use nix::unistd::{linkat, symlinkat};
use pathrs::Root;

use super::journal::{Change, Journal};
use super::slot::{symlink_err, Place, Slot, Target};
use super::staged::Staged;
use super::userns::Edit;
use super::{Error, Result};
use crate::util::reopen::{kind_name, resolve_in};

/// The rootfs's directories, each resolved (and created if missing) once,
/// then reused by every item that lives in it.
pub(super) struct Dirs<'r> {
    root: &'r Root,
    open: HashMap<PathBuf, Rc<OwnedFd>>,
}

impl<'r> Dirs<'r> {
    pub fn new(root: &'r Root) -> Self {
        Dirs {
            root,
            open: HashMap::new(),
        }
    }

    /// The slot of container path `path`, its parent directories created
    /// (and journaled) as needed.
    pub fn slot(&mut self, path: &Path, journal: &mut Journal) -> Result<Slot> {
        let (parent, name) = split(path)?;
        let dir = match self.open.get(parent) {
            Some(dir) => dir.clone(),
            None => {
                let dir = self.dir(parent, journal)?;
                self.open.insert(parent.to_path_buf(), dir.clone());
                dir
            }
        };
        Ok(Slot {
            dir,
            name: name.to_owned(),
            path: path.to_path_buf(),
        })
    }

    /// Directory `dir` of the rootfs, resolved inside it, created if missing.
    /// Usually it exists, and one `openat2(RESOLVE_IN_ROOT)` finds it; an
    /// `O_PATH` descriptor is all the `*at` calls need.
    fn dir(&self, dir: &Path, journal: &mut Journal) -> Result<Rc<OwnedFd>> {
        match resolve_in(self.root, dir) {
            Ok(Some(handle)) => Ok(Rc::new(checked_dir(handle.into(), dir)?)),
            Ok(None) => self.create_dir(dir, journal),
            Err(source) => Err(Error::Resolve {
                path: dir.to_path_buf(),
                source,
            }),
        }
    }

    /// Creates the missing directories of `dir` below the deepest one that
    /// exists, one component at a time and never through a symlink, and
    /// journals each, so that a failure removes them again.
    fn create_dir(&self, dir: &Path, journal: &mut Journal) -> Result<Rc<OwnedFd>> {
        let mut missing = Vec::new();
        let mut ancestor = dir;
        let (mut path, base) = loop {
            let Some(Component::Normal(name)) = ancestor.components().next_back() else {
                return Err(Error::PathShape {
                    path: dir.to_path_buf(),
                    refused: "a directory to create must be a path of plain names",
                });
            };
            missing.push(name);
            ancestor = match ancestor.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent,
                _ => Path::new("/"),
            };
            match resolve_in(self.root, ancestor) {
                Ok(Some(handle)) => {
                    break (
                        ancestor.to_path_buf(),
                        checked_dir(handle.into(), ancestor)?,
                    )
                }
                Ok(None) => continue,
                Err(source) => {
                    return Err(Error::Resolve {
                        path: ancestor.to_path_buf(),
                        source,
                    })
                }
            }
        };
        let mut current = Rc::new(base);
        for name in missing.into_iter().rev() {
            path.push(name);
            let place = Place {
                dir: current.as_fd(),
                name,
                path: &path,
            };
            journal.may(place, Edit::Add)?;
            match mkdirat(current.as_fd(), name, Mode::from_bits_truncate(0o755)) {
                Ok(()) => journal.record(Change::CreatedDir(Slot {
                    dir: current.clone(),
                    name: name.to_owned(),
                    path: path.clone(),
                })),
                // A dangling symlink, say: opening it below says what it is.
                Err(Errno::EEXIST) => {}
                Err(errno) => {
                    return Err(Error::Create {
                        what: "directory",
                        path,
                        source: errno.into(),
                    })
                }
            }
            let place = Place {
                dir: current.as_fd(),
                name,
                path: &path,
            };
            current = Rc::new(open_dir(place, OFlag::O_PATH)?);
        }
        Ok(current)
    }
}

/// `handle` if it is a directory; resolved `path` names it in messages.
fn checked_dir(handle: OwnedFd, path: &Path) -> Result<OwnedFd> {
    let stat = fstat(&handle).map_err(|errno| Error::Stat {
        path: path.to_path_buf(),
        source: errno.into(),
    })?;
    match kind_name(stat.st_mode) {
        "directory" => Ok(handle),
        found => Err(Error::Exists {
            path: path.to_path_buf(),
            found,
            expected: "directory",
        }),
    }
}

/// Opens directory `place` (with `flags`: `O_PATH` for `*at` calls only),
/// never through a symlink; anything else there is refused by its kind.
pub(super) fn open_dir(place: Place<'_>, flags: OFlag) -> Result<OwnedFd> {
    match openat(
        place.dir,
        place.name,
        flags | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => Ok(fd),
        Err(errno @ (Errno::ELOOP | Errno::ENOTDIR)) => Err(match kind_at(place)? {
            Some(found) => Error::Exists {
                path: place.path.to_path_buf(),
                found,
                expected: "directory",
            },
            None => Error::Open {
                path: place.path.to_path_buf(),
                source: errno.into(),
            },
        }),
        Err(errno) => Err(Error::Open {
            path: place.path.to_path_buf(),
            source: errno.into(),
        }),
    }
}

/// A path's parent directory and final component; the final component must be a plain name.
pub(super) fn split(path: &Path) -> Result<(&Path, &OsStr)> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name))
            if path
                .components()
                .next_back()
                .is_some_and(|c| matches!(c, Component::Normal(_))) =>
        {
            Ok((parent, name))
        }
        _ => Err(Error::PathShape {
            path: path.to_path_buf(),
            refused: "it does not end in a file name",
        }),
    }
}

/// What is at `place` now, without following a symlink.
pub(super) fn kind_at(place: Place<'_>) -> Result<Option<&'static str>> {
    match fstatat(place.dir, place.name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some(kind_name(stat.st_mode))),
        Err(Errno::ENOENT) => Ok(None),
        Err(errno) => Err(Error::Stat {
            path: place.path.to_path_buf(),
            source: errno.into(),
        }),
    }
}

/// What is at a mount target.
pub(super) enum MountTarget {
    /// A target to mount onto.
    Ready(OwnedFd),
    /// The source is mounted there already: an earlier run of the hook for
    /// the same container (Docker runs it twice for a repeated `--gpus`).
    Mounted,
}

/// The first file mount target an injection created, still open: the
/// next missing ones are made hard links to it. A file mount target is only
/// a name to mount onto, all of them empty, and a new inode is the
/// costliest step of injection on a disk filesystem, on an overlay
/// rootfs's upper layer above all (ext4 without a journal also passes over
/// every inode deleted in the last minute to find a free one), where a link
/// allocates none.
#[derive(Debug, Default)]
pub(super) struct TargetFiles(Option<(OwnedFd, (u64, u64))>);

impl TargetFiles {
    /// Keeps `fd`, a file mount target just created, to link the next ones to.
    fn keep(&mut self, fd: &OwnedFd) {
        if self.0.is_some() {
            return;
        }
        // Without a second descriptor or its identity, every target is created.
        if let (Ok(kept), Ok(stat)) = (fd.try_clone(), fstat(fd)) {
            self.0 = Some((kept, (stat.st_dev, stat.st_ino)));
        }
    }

    /// Makes `slot` (found missing) a hard link to the kept target, by its
    /// descriptor (`AT_EMPTY_PATH`): `None` when there is none yet or the
    /// link cannot be made (another filesystem; no `CAP_DAC_READ_SEARCH`,
    /// as in a user namespace), and the target is then created. The name
    /// is checked, through the descriptor returned, to be the kept inode:
    /// a rootfs shared with a running container can change under us.
    fn link(&self, slot: &Slot, journal: &mut Journal) -> Result<Option<OwnedFd>> {
        let Some((kept, id)) = &self.0 else {
            return Ok(None);
        };
        let place = slot.place();
        journal.may(place, Edit::Add)?;
        match linkat(kept, "", place.dir, place.name, AtFlags::AT_EMPTY_PATH) {
            Ok(()) => journal.record(Change::Created(slot.clone())),
            // Taken since it was found missing: as creating it would fail.
            Err(errno @ Errno::EEXIST) => {
                return Err(Error::Create {
                    what: "mount target",
                    path: place.path.to_path_buf(),
                    source: errno.into(),
                })
            }
            Err(_) => return Ok(None),
        }
        let fd = openat(
            place.dir,
            place.name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| Error::Open {
            path: place.path.to_path_buf(),
            source: errno.into(),
        })?;
        let stat = fstat(&fd).map_err(|errno| Error::Stat {
            path: place.path.to_path_buf(),
            source: errno.into(),
        })?;
        if (stat.st_dev, stat.st_ino) != *id {
            return Err(Error::Exists {
                path: place.path.to_path_buf(),
                found: "file that replaced the hook's while it ran",
                expected: "mount target",
            });
        }
        Ok(Some(fd))
    }
}

/// The mount target at `slot` for the host source whose device and inode
/// are `source` (none for targets of our own tree), as a descriptor to
/// mount onto. An existing regular file (or directory) is reused: its type
/// is checked on the very descriptor that is returned. A mount root
/// showing the source's own inode is the source already mounted, left as
/// it is rather than stacked. An image's symlink there is swapped aside,
/// never followed; anything else is refused. A missing target is created
/// (`O_CREAT|O_EXCL|O_NOFOLLOW`, or `mkdirat`), or, for a file, linked to
/// the first one `files` kept.
pub(super) fn mount_target(
    slot: &Slot,
    target: Target,
    source: Option<(u64, u64)>,
    files: &mut TargetFiles,
    journal: &mut Journal,
) -> Result<MountTarget> {
    let place = slot.place();
    // O_PATH opens nothing: an image's device node or fifo is only looked at.
    match openat(
        place.dir,
        place.name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => {
            let stat = fstat(&fd).map_err(|errno| Error::Stat {
                path: place.path.to_path_buf(),
                source: errno.into(),
            })?;
            if source == Some((stat.st_dev, stat.st_ino)) && is_mount_root(&fd) {
                return Ok(MountTarget::Mounted);
            }
            return match kind_name(stat.st_mode) {
                found if found == target.kind() => Ok(MountTarget::Ready(fd)),
                "symlink" => {
                    journal.may(place, Edit::Replace)?;
                    let (staged, fd) = Staged::target(slot.clone(), target)?;
                    staged.install(true, journal)?;
                    Ok(MountTarget::Ready(fd))
                }
                found => Err(Error::Exists {
                    path: place.path.to_path_buf(),
                    found,
                    expected: target.kind(),
                }),
            };
        }
        Err(Errno::ENOENT) => {}
        Err(errno) => {
            return Err(Error::Stat {
                path: place.path.to_path_buf(),
                source: errno.into(),
            })
        }
    }
    if target == Target::File {
        if let Some(fd) = files.link(slot, journal)? {
            return Ok(MountTarget::Ready(fd));
        }
    }
    journal.may(place, Edit::Add)?;
    let fd = target
        .make(place.dir, place.name)
        .map_err(|errno| Error::Create {
            what: "mount target",
            path: place.path.to_path_buf(),
            source: errno.into(),
        })?;
    journal.record(match target {
        Target::File => Change::Created(slot.clone()),
        Target::Directory => Change::CreatedDir(slot.clone()),
    });
    if target == Target::File {
        files.keep(&fd);
    }
    Ok(MountTarget::Ready(fd))
}

/// Whether `fd` is the root of a mount (statx, Linux 5.8+). Where the
/// kernel cannot say, it is taken as not: the source is mounted again, on
/// top. A read-only mount stacked on ours is harmless; one skipped would
/// leave whatever holds the inode there (an image's hard link to the host
/// file, writable) in the mount's place.
fn is_mount_root(fd: &OwnedFd) -> bool {
    use rustix::fs::{statx, AtFlags as StatxAt, StatxAttributes, StatxFlags};
    match statx(fd, "", StatxAt::EMPTY_PATH, StatxFlags::BASIC_STATS) {
        Ok(stx) => {
            let known = StatxAttributes::from_bits_retain(stx.stx_attributes_mask.bits());
            known.contains(StatxAttributes::MOUNT_ROOT)
                && StatxAttributes::from_bits_retain(stx.stx_attributes.bits())
                    .contains(StatxAttributes::MOUNT_ROOT)
        }
        Err(_) => false,
    }
}

/// Makes `slot` a symlink to `target`, swapping an image's file or link
/// there aside. A symlink that already reads `target` (a reused rootfs) is
/// kept: it is exactly what we would create, and creating an inode is the
/// costliest step of injection on a disk filesystem.
pub(super) fn replace_with_symlink(slot: Slot, target: &Path, journal: &mut Journal) -> Result<()> {
    let place = slot.place();
    journal.may(place, Edit::Add)?;
    match symlinkat(target, place.dir, place.name) {
        Ok(()) => {
            journal.record(Change::Created(slot));
            return Ok(());
        }
        Err(Errno::EEXIST) => {}
        Err(errno) => return Err(symlink_err(place.path, target, errno)),
    }
    // Reading the link first also tells what is there: EINVAL, not a link.
    match readlinkat(place.dir, place.name) {
        Ok(old) if old == target.as_os_str() => return Ok(()),
        Ok(_) | Err(Errno::ENOENT) => {}
        Err(Errno::EINVAL) => match kind_at(place)? {
            Some("regular file") | None => {}
            Some(found) => {
                return Err(Error::Exists {
                    path: place.path.to_path_buf(),
                    found,
                    expected: "symlink",
                })
            }
        },
        Err(errno) => {
            return Err(Error::Stat {
                path: place.path.to_path_buf(),
                source: errno.into(),
            })
        }
    }
    journal.may(place, Edit::Replace)?;
    Staged::symlink(slot, target)?.install(true, journal)
}

/// Makes `slot` a regular file holding `data`, in place of a regular file
/// or link of the image there (kept aside in the journal); a file that
/// already holds it (`holds`) is left alone, anything else is refused.
/// Returns whether it wrote.
pub(super) fn replace_with_file(
    slot: Slot,
    data: &[u8],
    holds: bool,
    journal: &mut Journal,
) -> Result<bool> {
    let existing = kind_at(slot.place())?;
    match existing {
        Some("regular file") if holds => return Ok(false),
        None | Some("regular file") | Some("symlink") => {}
        Some(found) => {
            return Err(Error::Exists {
                path: slot.place().path.to_path_buf(),
                found,
                expected: "regular file",
            })
        }
    }
    let edit = if existing.is_some() {
        Edit::Replace
    } else {
        Edit::Add
    };
    journal.may(slot.place(), edit)?;
    Staged::file(slot, data)?.install(existing.is_some(), journal)?;
    Ok(true)
}

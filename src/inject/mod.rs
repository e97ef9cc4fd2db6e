//! Applies a plan inside the container's mount namespace, before `pivot_root`.
//!
//! The container image is hostile. Every path inside the rootfs is resolved
//! with `pathrs` (`openat2(RESOLVE_IN_ROOT)`, or its emulation on old
//! kernels), targets are created `O_EXCL|O_NOFOLLOW`, and mounts go onto the
//! resolved descriptor. Nothing is ever executed, nothing from the image is
//! mounted, and sources are host descriptors opened before entering the
//! namespace ([`Sources`]). The privileged syscalls sit behind [`Sys`].

mod loader;
mod sources;
mod sys;
pub mod userns;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, Permissions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{symlinkat, unlinkat, UnlinkatFlags};
use pathrs::error::ErrorKind;
use pathrs::Root;
use thiserror::Error;

pub use loader::{conf_file, merged_cache, CONF_NAME};
pub use sources::{mask_params, Source, Sources, DEVICE_OPTIONS};
pub use sys::{LinuxSys, Sys};

use crate::ldcache;
use crate::plan::{MountKind, NodeMode, Plan};
use crate::reopen::{self, kind_name, Expect, Reopener};

/// Largest image `ld.so.cache` we read; real ones are well under 1 MiB.
const MAX_IMAGE_CACHE: u64 = 32 * 1024 * 1024;

/// Largest `ld.so.conf.d` file of ours we read back; ours are a few lines.
const MAX_CONF: u64 = 64 * 1024;

/// Why injection failed; each error names the path inside the container or on the host.
#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot open the container rootfs {path}: {source}")]
    OpenRoot {
        path: PathBuf,
        source: pathrs::error::Error,
    },
    #[error("cannot resolve {path} inside the container rootfs: {source}")]
    Resolve {
        path: PathBuf,
        source: pathrs::error::Error,
    },
    #[error("cannot create {path} inside the container rootfs: {source}")]
    Create {
        path: PathBuf,
        source: pathrs::error::Error,
    },
    #[error("refusing {path} in the container: it exists as a {found}, expected a {expected}")]
    Exists {
        path: PathBuf,
        found: &'static str,
        expected: &'static str,
    },
    #[error("cannot write {path} in the container: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("bad loader cache {path} in the container image: {source}")]
    ImageCache {
        path: PathBuf,
        source: ldcache::Error,
    },
    #[error("cannot mknod {path} (c {major}:{minor}) in the container: {source}")]
    Mknod {
        path: PathBuf,
        major: u32,
        minor: u32,
        source: io::Error,
    },
    #[error("device node {path} is {found}, expected {expected}")]
    NodeMismatch {
        path: PathBuf,
        expected: String,
        found: String,
    },
    #[error("cannot stat {path}: {source}")]
    Stat { path: PathBuf, source: io::Error },
    #[error("{what} mount onto {target} in the container failed: {source}")]
    Mount {
        target: PathBuf,
        what: &'static str,
        source: io::Error,
    },
    #[error("cannot enter mount namespace {path}: {source}")]
    Namespace { path: PathBuf, source: io::Error },
    #[error("cannot open host source {path}: {source}")]
    Source { path: PathBuf, source: io::Error },
    #[error("host source {path} is a {found}, expected a {expected}")]
    SourceKind {
        path: PathBuf,
        expected: &'static str,
        found: &'static str,
    },
    #[error(transparent)]
    Reopen(reopen::Error),
    #[error("cannot act as the container's root (uid {uid}, gid {gid}): {source}")]
    Identity {
        uid: u32,
        gid: u32,
        source: io::Error,
    },
}

/// Result of injection.
pub type Result<T> = std::result::Result<T, Error>;

/// Counts of what was injected, for the hook's log line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Device nodes created or bound.
    pub devices: usize,
    /// Files and directories bind-mounted.
    pub mounts: usize,
    /// Symlinks created.
    pub symlinks: usize,
    /// Entries added to the loader cache.
    pub loader_entries: usize,
}

/// A name inside a directory of the rootfs that was resolved once, safely:
/// every operation on it is a single-component `*at` call with
/// `O_NOFOLLOW` semantics, so it can neither traverse nor follow anything.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    /// The resolved directory.
    pub dir: BorrowedFd<'a>,
    /// The final component.
    pub name: &'a OsStr,
    /// The whole path in the container, for messages.
    pub path: &'a Path,
}

/// The rootfs's directories, each resolved (and created if missing) with
/// `pathrs` once, then reused by every item that lives in it.
struct Dirs<'r> {
    root: &'r Root,
    open: HashMap<PathBuf, OwnedFd>,
}

impl<'r> Dirs<'r> {
    fn new(root: &'r Root) -> Self {
        Dirs {
            root,
            open: HashMap::new(),
        }
    }

    /// Directory `dir` of the rootfs, resolved inside it, created if missing.
    /// Usually it exists, and one `openat2(RESOLVE_IN_ROOT)` finds it; an
    /// `O_PATH` descriptor is all the `*at` calls need.
    fn dir(&self, dir: &Path) -> Result<OwnedFd> {
        let handle = match self.root.resolve(dir) {
            Ok(handle) => handle,
            Err(e) if e.kind() == ErrorKind::OsError(Some(nix::libc::ENOENT)) => self
                .root
                .mkdir_all(dir, &dir_perm())
                .map_err(|source| Error::Create {
                    path: dir.to_path_buf(),
                    source,
                })?,
            Err(source) => {
                return Err(Error::Resolve {
                    path: dir.to_path_buf(),
                    source,
                })
            }
        };
        let stat = fstat(handle.as_fd()).map_err(|errno| Error::Stat {
            path: dir.to_path_buf(),
            source: errno.into(),
        })?;
        if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFDIR {
            return Err(Error::Exists {
                path: dir.to_path_buf(),
                found: kind_name(stat.st_mode),
                expected: "directory",
            });
        }
        Ok(handle.into())
    }

    /// The place of container path `path`, creating its parent directories.
    fn place<'a>(&'a mut self, path: &'a Path) -> Result<Place<'a>> {
        let (parent, name) = split(path)?;
        if !self.open.contains_key(parent) {
            let handle = self.dir(parent)?;
            self.open.insert(parent.to_path_buf(), handle);
        }
        let dir = self.open[parent].as_fd();
        Ok(Place { dir, name, path })
    }
}

/// A path's parent directory and final component; the final component must be a plain name.
fn split(path: &Path) -> Result<(&Path, &OsStr)> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name))
            if path
                .components()
                .next_back()
                .is_some_and(|c| matches!(c, Component::Normal(_))) =>
        {
            Ok((parent, name))
        }
        _ => Err(Error::Exists {
            path: path.to_path_buf(),
            found: "path without a file name",
            expected: "file name",
        }),
    }
}

/// Injects `plan` into the rootfs at `rootfs`, as seen from the current
/// (container) mount namespace, taking host data from `sources`.
pub fn apply(sys: &impl Sys, plan: &Plan, sources: &mut Sources, rootfs: &Path) -> Result<Summary> {
    let root = Root::open(rootfs).map_err(|source| Error::OpenRoot {
        path: rootfs.to_path_buf(),
        source,
    })?;
    let mut dirs = Dirs::new(&root);
    let mut summary = Summary::default();

    for (index, node) in plan.devices.iter().enumerate() {
        let place = dirs.place(&node.path)?;
        match plan.node_mode {
            NodeMode::Mknod => sys.mknod(place, node.mode, node.major, node.minor)?,
            NodeMode::Bind => {
                let source = sources
                    .devices
                    .get(index)
                    .ok_or_else(|| missing_source(&node.host_path))?;
                let target = create_target(place, Target::File)?;
                sys.bind_mount(source, target.as_fd(), place, DEVICE_OPTIONS)?;
            }
        }
        summary.devices += 1;
    }

    for (index, mount) in plan.mounts.iter().enumerate() {
        let source = sources
            .mounts
            .get(index)
            .ok_or_else(|| missing_source(&mount.source))?;
        let target = if mount.kind == MountKind::Directory {
            Target::Directory
        } else {
            Target::File
        };
        let place = dirs.place(&mount.destination)?;
        let target = create_target(place, target)?;
        sys.bind_mount(source, target.as_fd(), place, mount.options)?;
        summary.mounts += 1;
    }

    for link in &plan.symlinks {
        replace_with_symlink(dirs.place(&link.path)?, &link.target)?;
        summary.symlinks += 1;
    }

    if !plan.loader_entries.is_empty() {
        update_loader(&root, &sources.reopener, &mut dirs, plan)?;
        summary.loader_entries = plan.loader_entries.len();
    }

    if let Some(mask) = &plan.proc_mask {
        mask_proc(sys, &root, &mask.path, sources)?;
    }
    Ok(summary)
}

fn missing_source(path: &Path) -> Error {
    Error::Source {
        path: path.to_path_buf(),
        source: io::Error::other("not opened before entering the container"),
    }
}

fn dir_perm() -> Permissions {
    Permissions::from_mode(0o755)
}

fn errno_err(path: &Path, errno: nix::Error) -> Error {
    Error::Write {
        path: path.to_path_buf(),
        source: errno.into(),
    }
}

/// What is at `place` now, without following a symlink.
fn kind_at(place: Place<'_>) -> Result<Option<&'static str>> {
    match fstatat(place.dir, place.name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some(kind_name(stat.st_mode))),
        Err(Errno::ENOENT) => Ok(None),
        Err(errno) => Err(Error::Stat {
            path: place.path.to_path_buf(),
            source: errno.into(),
        }),
    }
}

/// What a mount target must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    File,
    Directory,
}

/// The mount target at `place`, as a descriptor to mount onto. An existing
/// regular file (or directory) is reused: its type is checked on the very
/// descriptor that is returned. An image's symlink there is replaced, never
/// followed; anything else is refused. A missing target is created
/// (`O_CREAT|O_EXCL|O_NOFOLLOW`, or `mkdirat`).
fn create_target(place: Place<'_>, target: Target) -> Result<OwnedFd> {
    let expected = match target {
        Target::File => "regular file",
        Target::Directory => "directory",
    };
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
            match kind_name(stat.st_mode) {
                found if found == expected => return Ok(fd),
                "symlink" => unlinkat(place.dir, place.name, UnlinkatFlags::NoRemoveDir)
                    .map_err(|errno| errno_err(place.path, errno))?,
                found => {
                    return Err(Error::Exists {
                        path: place.path.to_path_buf(),
                        found,
                        expected,
                    })
                }
            }
        }
        Err(Errno::ENOENT) => {}
        Err(errno) => return Err(errno_err(place.path, errno)),
    }
    match target {
        // The new file's own descriptor is the mount target.
        Target::File => openat(
            place.dir,
            place.name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        ),
        Target::Directory => mkdirat(place.dir, place.name, Mode::from_bits_truncate(0o755))
            .and_then(|()| {
                openat(
                    place.dir,
                    place.name,
                    OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
            }),
    }
    .map_err(|errno| errno_err(place.path, errno))
}

/// Creates symlink `place` → `target`, replacing an image's file or link there.
/// A symlink that already reads `target` (a reused rootfs) is kept: it is
/// exactly what we would create, and creating an inode is the costliest step
/// of injection on a disk filesystem.
fn replace_with_symlink(place: Place<'_>, target: &Path) -> Result<()> {
    match symlinkat(target, place.dir, place.name) {
        Ok(()) => return Ok(()),
        Err(Errno::EEXIST) => {}
        Err(errno) => return Err(errno_err(place.path, errno)),
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
        Err(errno) => return Err(errno_err(place.path, errno)),
    }
    match unlinkat(place.dir, place.name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => {}
        Err(errno) => return Err(errno_err(place.path, errno)),
    }
    symlinkat(target, place.dir, place.name).map_err(|errno| errno_err(place.path, errno))
}

/// Writes `data` at `place` by creating a fresh file beside it
/// (`O_EXCL|O_NOFOLLOW`) and renaming it over the old one, so an image's
/// symlink there is replaced, never written through.
fn write_replacing(place: Place<'_>, data: &[u8]) -> Result<()> {
    let temp = format!(
        ".{}.oci-nvidia-hook.{}",
        place.name.to_string_lossy(),
        std::process::id()
    );
    let fd = openat(
        place.dir,
        temp.as_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )
    .map_err(|errno| errno_err(place.path, errno))?;
    // No fsync: the rootfs is the container's, and the hook reruns on every start.
    let written = File::from(fd).write_all(data);
    let renamed = written.map_err(|source| Error::Write {
        path: place.path.to_path_buf(),
        source,
    });
    let renamed = renamed.and_then(|()| {
        renameat(place.dir, temp.as_str(), place.dir, place.name)
            .map_err(|errno| errno_err(place.path, errno))
    });
    if renamed.is_err() {
        let _ = unlinkat(place.dir, temp.as_str(), UnlinkatFlags::NoRemoveDir);
    }
    renamed
}

/// Reads a file of the image, following links only inside the rootfs; what
/// they reach must be a regular file, and only then is it opened.
fn read_image_file(
    root: &Root,
    reopener: &Reopener,
    path: &Path,
    limit: u64,
) -> Result<Option<Vec<u8>>> {
    let handle = match root.resolve(path) {
        Ok(h) => h,
        Err(e) if e.kind() == ErrorKind::OsError(Some(nix::libc::ENOENT)) => return Ok(None),
        Err(source) => {
            return Err(Error::Resolve {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let file = reopener
        .reopen(handle.as_fd(), path, Expect::File)
        .map_err(|e| match e {
            reopen::Error::Kind {
                path,
                found,
                expected,
            } => Error::Exists {
                path,
                found,
                expected,
            },
            other => Error::Reopen(other),
        })?;
    let mut data = Vec::new();
    file.take(limit)
        .read_to_end(&mut data)
        .map_err(|source| Error::Write {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(Some(data))
}

fn update_loader(root: &Root, reopener: &Reopener, dirs: &mut Dirs<'_>, plan: &Plan) -> Result<()> {
    let cache_path = Path::new("/etc/ld.so.cache");
    let image = read_image_file(root, reopener, cache_path, MAX_IMAGE_CACHE)?;
    let merged = merged_cache(image.as_deref(), &plan.loader_entries).map_err(|source| {
        Error::ImageCache {
            path: cache_path.to_path_buf(),
            source,
        }
    })?;
    write_unless_same(dirs.place(cache_path)?, image.as_deref(), &merged)?;
    let conf = Path::new("/etc/ld.so.conf.d").join(CONF_NAME);
    // Whatever the image has there that is not a regular file is replaced.
    let old_conf = read_image_file(root, reopener, &conf, MAX_CONF)
        .ok()
        .flatten();
    write_unless_same(
        dirs.place(&conf)?,
        old_conf.as_deref(),
        &conf_file(&plan.loader_dirs),
    )
}

/// Writes `data` at `place` unless the regular file there (not a link to
/// one) already holds it, as `old` (read through the same path) says. A
/// reused rootfs already has our files: rewriting them would cost a new
/// inode and, on ext4, a data flush for each container start.
fn write_unless_same(place: Place<'_>, old: Option<&[u8]>, data: &[u8]) -> Result<()> {
    if old == Some(data) && kind_at(place)? == Some("regular file") {
        return Ok(());
    }
    write_replacing(place, data)
}

/// Opens (creating as needed) the directories of `rel` below `dir`, one
/// component at a time and never through a symlink; `None` when `rel` is empty.
fn nested_dir(dir: BorrowedFd<'_>, rel: &Path, base: &Path) -> Result<Option<OwnedFd>> {
    let mut walked = base.to_path_buf();
    let mut current: Option<OwnedFd> = None;
    for component in rel.components() {
        let Component::Normal(name) = component else {
            return Err(Error::Exists {
                path: base.join(rel),
                found: "path with . or ..",
                expected: "plain path",
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
        Err(errno) => return Err(errno_err(path, errno)),
    }
    openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| errno_err(path, errno))
}

/// Covers the container's `/proc/driver/nvidia`, if the kernel shows one, with
/// a tmpfs holding our copies and the selected GPUs' directories.
fn mask_proc(sys: &impl Sys, root: &Root, path: &Path, sources: &mut Sources) -> Result<()> {
    let resolve = |root: &Root| {
        root.resolve(path).map_err(|source| Error::Resolve {
            path: path.to_path_buf(),
            source,
        })
    };
    match root.resolve(path) {
        Ok(handle) if fstat(handle.as_fd()).is_ok_and(|s| kind_name(s.st_mode) == "directory") => {
            // Now they are needed: the GPUs' directories are cloned.
            sys.clone_in_host(&mut sources.proc_gpus, sources::PROC_OPTIONS)?;
            sys.mount_tmpfs(handle.as_fd(), path)?
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
    .map_err(|errno| errno_err(path, errno))?;
    for (rel, data) in &sources.proc_files {
        let file_path = path.join(rel);
        let (parent, name) = split(rel)?;
        let dir = nested_dir(tmpfs_dir.as_fd(), parent, path)?;
        let dir = dir.as_ref().map_or(tmpfs_dir.as_fd(), |d| d.as_fd());
        write_replacing(
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
        let gpus = subdir(tmpfs_dir.as_fd(), OsStr::new("gpus"), &gpus_path)?;
        for (bus, source) in &sources.proc_gpus {
            let target = gpus_path.join(bus);
            let place = Place {
                dir: gpus.as_fd(),
                name: OsStr::new(bus),
                path: &target,
            };
            let target = create_target(place, Target::Directory)?;
            sys.bind_mount(source, target.as_fd(), place, sources::PROC_OPTIONS)?;
        }
    }
    sys.remount_read_only(resolve(root)?.as_fd(), path)
}

#[cfg(test)]
mod tests;

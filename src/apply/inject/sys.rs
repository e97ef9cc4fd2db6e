//! The seam: the few privileged syscalls injection makes (entering the mount
//! namespace, mknod, mount, unmount). Everything else in `inject` works
//! through `pathrs` on the rootfs and is tested without root against a fake.
//! Each call either does all it says or leaves nothing behind: a bind that
//! cannot take its options is detached again, a node that is not what was
//! asked for is removed if this call made it.
//!
//! Bind mounts use the new mount API where the kernel has it: `open_tree`
//! clones each host source's mount in the host's namespace (a plain bind
//! cannot take its source from another mount namespace), `mount_setattr`
//! sets the options on the detached mount, and `move_mount` attaches it onto
//! the resolved target descriptor. Older kernels fall back to `mount(2)`
//! through `/proc/self/fd`, after checking that the host path still names the
//! file checked before entering the container.

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::libc;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{setns, CloneFlags};
use nix::sys::stat::{fstatat, major, makedev, minor, mknodat, Mode, SFlag};
use rustix::mount::{MoveMountFlags, OpenTreeFlags};

use super::{Error, Place, Result, Source};
use crate::planning::plan::MountOptions;
use crate::sys::mount;
use crate::sys::process::{self, Hold};

/// The privileged operations injection needs; the Linux implementation makes
/// the syscalls, tests substitute a recorder.
pub trait Sys {
    /// Moves this process into the mount namespace of `pid`, held by
    /// `pidfd` where the kernel has pidfds, so that the namespace entered is
    /// that of the process checked, even if `pid` now names another.
    fn enter_mount_namespace(&self, proc: &Path, pid: u32, hold: Hold<'_>) -> Result<()>;
    /// Creates character device `place` and verifies it with `fstatat`; a
    /// node already there is accepted if it is the same device.
    fn mknod(&self, place: Place<'_>, mode: u32, major: u32, minor: u32) -> Result<NodeMade>;
    /// In the host's namespace, clones the mount of `source` (at host `path`)
    /// into a detached mount carrying `options`; `None` where the kernel
    /// lacks the new mount API.
    fn clone_mount(
        &self,
        path: &Path,
        source: BorrowedFd<'_>,
        options: MountOptions,
    ) -> Result<Option<OwnedFd>>;
    /// From the container's namespace: gives each source without a clone one
    /// made in the host's namespace, re-entered for that and left again, with
    /// `options`. Where the host's namespace cannot be re-entered, the sources
    /// stay without, and binding them falls back to their host paths.
    fn clone_in_host(&self, sources: &mut [(String, Source)], options: MountOptions) -> Result<()>;
    /// Binds `source` onto `target`, a descriptor of the existing `place`, with `options`.
    fn bind_mount(
        &self,
        source: &Source,
        target: BorrowedFd<'_>,
        place: Place<'_>,
        options: MountOptions,
    ) -> Result<()>;
    /// Mounts a small tmpfs on the directory `dir` (container path `path`).
    fn mount_tmpfs(&self, dir: BorrowedFd<'_>, path: &Path) -> Result<()>;
    /// Makes the tmpfs at `dir` read-only once it is filled.
    fn remount_read_only(&self, dir: BorrowedFd<'_>, path: &Path) -> Result<()>;
    /// Detaches the mount that `mounted` is the root of (container path `path`),
    /// with whatever is mounted below it: undoing a failed injection.
    fn unmount(&self, mounted: BorrowedFd<'_>, path: &Path) -> Result<()>;
}

/// What [`Sys::mknod`] found: whether the node is ours to remove on failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeMade {
    /// It made the node.
    Created,
    /// The same device was there already (the runtime made it).
    Existed,
}

/// The real syscalls.
#[derive(Debug, Default)]
pub struct LinuxSys {
    /// Once the container's namespace is entered: the host's and the
    /// container's mount namespaces (and the latter's path, for messages),
    /// to clone in the one and come back.
    namespaces: RefCell<Option<(File, File, PathBuf)>>,
}

/// The magic-link path of an open descriptor: mounting through it acts on the
/// resolved file, never on a path re-parsed from a string.
fn fd_path(fd: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

fn mount_flags(options: MountOptions) -> MsFlags {
    let mut flags = MsFlags::empty();
    flags.set(MsFlags::MS_RDONLY, options.read_only);
    flags.set(MsFlags::MS_NOSUID, options.nosuid);
    flags.set(MsFlags::MS_NODEV, options.nodev);
    flags.set(MsFlags::MS_NOEXEC, options.noexec);
    flags
}

fn mount_err<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(nix::Error) -> Error + 'a {
    move |errno| Error::Mount {
        target: path.to_path_buf(),
        what,
        source: errno.into(),
    }
}

/// An `O_PATH` descriptor of `place` itself, never following a symlink.
fn open_place(place: Place<'_>) -> Result<OwnedFd> {
    openat(
        place.dir,
        place.name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| Error::Stat {
        path: place.path.to_path_buf(),
        source: errno.into(),
    })
}

/// Checks that `place` is character device `maj`:`min`.
fn verify_node(place: Place<'_>, maj: u32, min: u32) -> Result<()> {
    let stat = fstatat(place.dir, place.name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(|errno| {
        Error::Stat {
            path: place.path.to_path_buf(),
            source: errno.into(),
        }
    })?;
    let is_char = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFCHR;
    let found = (major(stat.st_rdev) as u32, minor(stat.st_rdev) as u32);
    if !is_char || found != (maj, min) {
        return Err(Error::NodeMismatch {
            path: place.path.to_path_buf(),
            expected: format!("c {maj}:{min}"),
            found: if is_char {
                format!("c {}:{}", found.0, found.1)
            } else {
                format!("mode {:o}", stat.st_mode)
            },
        });
    }
    Ok(())
}

/// `umount2(MNT_DETACH)` of the mount that `mounted` is the root of, with the
/// mounts below it.
fn detach(mounted: BorrowedFd<'_>, path: &Path) -> Result<()> {
    umount2(&fd_path(mounted), MntFlags::MNT_DETACH).map_err(mount_err(path, "detach"))
}

impl Sys for LinuxSys {
    fn enter_mount_namespace(&self, proc: &Path, pid: u32, hold: Hold<'_>) -> Result<()> {
        let open =
            |path: PathBuf| File::open(&path).map_err(|source| Error::Namespace { path, source });
        let host = open(proc.join("self/ns/mnt"))?;
        let ns = proc.join(pid.to_string()).join("ns/mnt");
        let entered = |errno: Errno| Error::Namespace {
            path: ns.clone(),
            source: errno.into(),
        };
        // Since Linux 5.8 setns takes the pidfd itself: the namespace is the
        // held process's, whatever its pid names by now. The way back from
        // the host's (`clone_in_host`) then takes this one as now ours.
        if let Hold::Pidfd(pidfd) = hold {
            match setns(pidfd, CloneFlags::CLONE_NEWNS) {
                Ok(()) => {
                    let container = open(proc.join("self/ns/mnt"))?;
                    *self.namespaces.borrow_mut() = Some((host, container, ns));
                    return Ok(());
                }
                // Older kernels take only namespace files: by path below.
                Err(Errno::EINVAL) => {
                    log::debug!(
                        "setns on a pidfd needs Linux 5.8: entering {}",
                        ns.display()
                    )
                }
                Err(errno) => return Err(entered(errno)),
            }
        }
        let container = open(ns.clone())?;
        // The file opened must be the held process's namespace: its pid
        // cannot have been reused while the process is still held.
        let held = process::is_held(proc, pid, hold).map_err(|source| Error::Namespace {
            path: ns.clone(),
            source,
        })?;
        if !held {
            return Err(entered(Errno::ESRCH));
        }
        setns(container.as_fd(), CloneFlags::CLONE_NEWNS).map_err(entered)?;
        *self.namespaces.borrow_mut() = Some((host, container, ns));
        Ok(())
    }

    fn clone_in_host(&self, sources: &mut [(String, Source)], options: MountOptions) -> Result<()> {
        let namespaces = self.namespaces.borrow();
        let Some((host, container, container_path)) = namespaces.as_ref() else {
            return Ok(());
        };
        if let Err(errno) = setns(host.as_fd(), CloneFlags::CLONE_NEWNS) {
            log::debug!("cannot re-enter the host's mount namespace ({errno}): binding by path");
            return Ok(());
        }
        // Only open_tree and mount_setattr on descriptors opened before: no
        // path is looked up while the host's namespace is current.
        let cloned = sources.iter_mut().try_for_each(|(_, source)| {
            source.tree = self.clone_mount(&source.path, source.file.as_fd(), options)?;
            Ok(())
        });
        // Back whatever happened; if that fails, the error ends the hook here.
        setns(container.as_fd(), CloneFlags::CLONE_NEWNS).map_err(|errno| Error::Namespace {
            path: container_path.clone(),
            source: errno.into(),
        })?;
        cloned
    }

    fn mknod(&self, place: Place<'_>, mode: u32, maj: u32, min: u32) -> Result<NodeMade> {
        let dev = makedev(u64::from(maj), u64::from(min));
        match mknodat(
            place.dir,
            place.name,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(mode),
            dev,
        ) {
            // Made by us, as asked: a stat would only read back our arguments.
            Ok(()) => Ok(NodeMade::Created),
            // A node the runtime already made is fine if it is the same device.
            Err(Errno::EEXIST) => verify_node(place, maj, min).map(|()| NodeMade::Existed),
            Err(errno) => Err(Error::Mknod {
                path: place.path.to_path_buf(),
                major: maj,
                minor: min,
                source: errno.into(),
            }),
        }
    }

    fn clone_mount(
        &self,
        path: &Path,
        source: BorrowedFd<'_>,
        options: MountOptions,
    ) -> Result<Option<OwnedFd>> {
        let err = |what: &'static str, source: io::Error| Error::Mount {
            target: path.to_path_buf(),
            what,
            source,
        };
        let tree = match open_tree(source) {
            Ok(tree) => tree,
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => return Ok(None),
            Err(e) => return Err(err("open_tree clone", e)),
        };
        match mount_setattr(tree.as_fd(), options) {
            Ok(()) => Ok(Some(tree)),
            // open_tree without mount_setattr (5.2 to 5.11): use the fallback.
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => Ok(None),
            Err(e) => Err(err("mount_setattr", e)),
        }
    }

    fn bind_mount(
        &self,
        source: &Source,
        target: BorrowedFd<'_>,
        place: Place<'_>,
        options: MountOptions,
    ) -> Result<()> {
        if let Some(tree) = &source.tree {
            return move_mount(tree.as_fd(), target).map_err(|e| Error::Mount {
                target: place.path.to_path_buf(),
                what: "move_mount",
                source: e,
            });
        }
        // Before pivot_root the host path is visible here too; it must still
        // be the very file that was checked in the host's namespace.
        let file = super::sources::open_path(&source.path)?;
        let meta = file.metadata().map_err(|e| Error::Source {
            path: source.path.clone(),
            source: e,
        })?;
        if (meta.dev(), meta.ino()) != source.id {
            return Err(Error::SourceKind {
                path: source.path.clone(),
                expected: "the file checked before entering the container",
                found: "a different file",
            });
        }
        mount(
            Some(&fd_path(file.as_fd())),
            &fd_path(target),
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(mount_err(place.path, "bind"))?;
        // The old descriptor still names the file under the new mount: open again.
        let mounted = open_place(place)?;
        let remounted = mount(
            None::<&str>,
            &fd_path(mounted.as_fd()),
            None::<&str>,
            MsFlags::MS_REMOUNT | MsFlags::MS_BIND | mount_flags(options),
            None::<&str>,
        )
        .map_err(mount_err(place.path, "remount"));
        if remounted.is_err() {
            // Without its options the bind must not stay.
            let _ = detach(mounted.as_fd(), place.path);
        }
        remounted
    }

    fn mount_tmpfs(&self, dir: BorrowedFd<'_>, path: &Path) -> Result<()> {
        mount(
            Some("tmpfs"),
            &fd_path(dir),
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some("mode=0555,size=1m"),
        )
        .map_err(mount_err(path, "tmpfs"))
    }

    fn remount_read_only(&self, dir: BorrowedFd<'_>, path: &Path) -> Result<()> {
        mount(
            None::<&str>,
            &fd_path(dir),
            None::<&str>,
            MsFlags::MS_REMOUNT
                | MsFlags::MS_RDONLY
                | MsFlags::MS_NOSUID
                | MsFlags::MS_NODEV
                | MsFlags::MS_NOEXEC,
            None::<&str>,
        )
        .map_err(mount_err(path, "read-only remount"))
    }

    fn unmount(&self, mounted: BorrowedFd<'_>, path: &Path) -> Result<()> {
        detach(mounted, path)
    }
}

/// `open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)`:
/// a detached copy of the mount of `source`, not the mount itself.
fn open_tree(source: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let flags = OpenTreeFlags::OPEN_TREE_CLONE
        | OpenTreeFlags::OPEN_TREE_CLOEXEC
        | OpenTreeFlags::AT_EMPTY_PATH;
    Ok(rustix::mount::open_tree(source, c"", flags)?)
}

/// `mount_setattr(tree, "", AT_EMPTY_PATH, {attr_set})`: the options, on the detached mount.
fn mount_setattr(tree: BorrowedFd<'_>, options: MountOptions) -> io::Result<()> {
    let attr_set = [
        (options.read_only, mount::MOUNT_ATTR_RDONLY),
        (options.nosuid, mount::MOUNT_ATTR_NOSUID),
        (options.nodev, mount::MOUNT_ATTR_NODEV),
        (options.noexec, mount::MOUNT_ATTR_NOEXEC),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .fold(0, |bits, (_, bit)| bits | bit);
    mount::mount_setattr(tree, attr_set)
}

/// `move_mount(tree, "", target, "", F_EMPTY_PATH | T_EMPTY_PATH)`: attaches the detached mount.
fn move_mount(tree: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
    let flags = MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH;
    Ok(rustix::mount::move_mount(tree, c"", target, c"", flags)?)
}

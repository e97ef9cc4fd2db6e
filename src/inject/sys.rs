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
use std::ffi::{c_uint, CStr};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::libc;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{setns, CloneFlags};
use nix::sys::stat::{fstatat, major, makedev, minor, mknodat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

use super::{Error, Place, Result, Source};
use crate::plan::MountOptions;

/// The privileged operations injection needs; the Linux implementation makes
/// the syscalls, tests substitute a recorder.
pub trait Sys {
    /// Moves this process into the mount namespace of `pid`.
    fn enter_mount_namespace(&self, proc: &Path, pid: u32) -> Result<()>;
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
    fn enter_mount_namespace(&self, proc: &Path, pid: u32) -> Result<()> {
        let open =
            |path: PathBuf| File::open(&path).map_err(|source| Error::Namespace { path, source });
        let host = open(proc.join("self/ns/mnt"))?;
        let ns = proc.join(pid.to_string()).join("ns/mnt");
        let container = open(ns.clone())?;
        setns(container.as_fd(), CloneFlags::CLONE_NEWNS).map_err(|errno| Error::Namespace {
            path: ns.clone(),
            source: errno.into(),
        })?;
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
        let made = match mknodat(
            place.dir,
            place.name,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(mode),
            dev,
        ) {
            Ok(()) => NodeMade::Created,
            // A node the runtime already made is fine if it is the same device.
            Err(Errno::EEXIST) => NodeMade::Existed,
            Err(errno) => {
                return Err(Error::Mknod {
                    path: place.path.to_path_buf(),
                    major: maj,
                    minor: min,
                    source: errno.into(),
                })
            }
        };
        let checked = verify_node(place, maj, min);
        if checked.is_err() && made == NodeMade::Created {
            let _ = unlinkat(place.dir, place.name, UnlinkatFlags::NoRemoveDir);
        }
        checked.map(|()| made)
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
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&source.path)
            .map_err(|e| Error::Source {
                path: source.path.clone(),
                source: e,
            })?;
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

/// `OPEN_TREE_CLONE`: a detached copy of the mount, not the mount itself.
const OPEN_TREE_CLONE: c_uint = 1;
/// `MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH`: both ends are descriptors.
const MOVE_MOUNT_EMPTY_PATHS: c_uint = 0x04 | 0x40;
/// `MOUNT_ATTR_RDONLY` of `struct mount_attr`.
const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// `MOUNT_ATTR_NOSUID`.
const MOUNT_ATTR_NOSUID: u64 = 0x2;
/// `MOUNT_ATTR_NODEV`.
const MOUNT_ATTR_NODEV: u64 = 0x4;
/// `MOUNT_ATTR_NOEXEC`.
const MOUNT_ATTR_NOEXEC: u64 = 0x8;
/// The empty path the `*_EMPTY_PATH` flags go with.
const EMPTY: &CStr = c"";

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn check(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)`.
fn open_tree(source: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as c_uint | libc::AT_EMPTY_PATH as c_uint;
    // SAFETY: the descriptor is valid for the call, the path is a valid
    // NUL-terminated string, and the flags are plain integers.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            source.as_raw_fd(),
            EMPTY.as_ptr(),
            flags,
        )
    })?;
    // SAFETY: on success open_tree returns a new descriptor that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `mount_setattr(tree, "", AT_EMPTY_PATH, {attr_set})`: the options, on the detached mount.
fn mount_setattr(tree: BorrowedFd<'_>, options: MountOptions) -> io::Result<()> {
    let attr_set = [
        (options.read_only, MOUNT_ATTR_RDONLY),
        (options.nosuid, MOUNT_ATTR_NOSUID),
        (options.nodev, MOUNT_ATTR_NODEV),
        (options.noexec, MOUNT_ATTR_NOEXEC),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .fold(0, |bits, (_, bit)| bits | bit);
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `attr` lives across the call and its size is passed with it;
    // the descriptor and the empty path are valid.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            EMPTY.as_ptr(),
            libc::AT_EMPTY_PATH as c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(drop)
}

/// `move_mount(tree, "", target, "", F_EMPTY_PATH | T_EMPTY_PATH)`: attaches the detached mount.
fn move_mount(tree: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: both descriptors are valid for the call and the paths are
    // valid NUL-terminated strings.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            EMPTY.as_ptr(),
            target.as_raw_fd(),
            EMPTY.as_ptr(),
            MOVE_MOUNT_EMPTY_PATHS,
        )
    })
    .map(drop)
}

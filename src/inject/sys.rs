//! The seam: the few privileged syscalls injection makes (entering the mount
//! namespace, mknod, mount). Everything else in `inject` works through
//! `pathrs` on the rootfs and is tested without root against a fake.

use std::fs::{File, Permissions};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::mount::{mount, MsFlags};
use nix::sched::{setns, CloneFlags};
use nix::sys::stat::{fstat, major, makedev, minor, SFlag};
use pathrs::{InodeType, Root};

use super::{Error, Result};
use crate::plan::MountOptions;

/// The privileged operations injection needs; the Linux implementation makes
/// the syscalls, tests substitute a recorder.
pub trait Sys {
    /// Moves this process into the mount namespace of `pid`.
    fn enter_mount_namespace(&self, proc: &Path, pid: u32) -> Result<()>;
    /// Creates character device `path` inside `root` and verifies it with `fstat`.
    fn mknod(&self, root: &Root, path: &Path, mode: u32, major: u32, minor: u32) -> Result<()>;
    /// Bind-mounts `source` onto the existing `target` inside `root`, then applies `options`.
    fn bind_mount(
        &self,
        source: BorrowedFd<'_>,
        root: &Root,
        target: &Path,
        options: MountOptions,
    ) -> Result<()>;
    /// Mounts a small tmpfs on the existing directory `target` inside `root`.
    fn mount_tmpfs(&self, root: &Root, target: &Path) -> Result<()>;
    /// Makes the tmpfs at `target` read-only once it is filled.
    fn remount_read_only(&self, root: &Root, target: &Path) -> Result<()>;
}

/// The real syscalls.
#[derive(Debug, Default)]
pub struct LinuxSys;

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

fn resolve(root: &Root, path: &Path) -> Result<pathrs::Handle> {
    root.resolve_nofollow(path)
        .map_err(|source| Error::Resolve {
            path: path.to_path_buf(),
            source,
        })
}

impl Sys for LinuxSys {
    fn enter_mount_namespace(&self, proc: &Path, pid: u32) -> Result<()> {
        let ns = proc.join(pid.to_string()).join("ns/mnt");
        let file = File::open(&ns).map_err(|source| Error::Namespace {
            path: ns.clone(),
            source,
        })?;
        setns(file.as_fd(), CloneFlags::CLONE_NEWNS).map_err(|errno| Error::Namespace {
            path: ns,
            source: errno.into(),
        })
    }

    fn mknod(&self, root: &Root, path: &Path, mode: u32, maj: u32, min: u32) -> Result<()> {
        let dev = makedev(u64::from(maj), u64::from(min));
        let created = root.create(
            path,
            &InodeType::CharacterDevice(Permissions::from_mode(mode), dev),
        );
        if let Err(source) = created {
            // A node the runtime already made is fine if it is the same device.
            if source.kind() != pathrs::error::ErrorKind::OsError(Some(nix::libc::EEXIST)) {
                return Err(Error::Mknod {
                    path: path.to_path_buf(),
                    major: maj,
                    minor: min,
                    source,
                });
            }
        }
        let handle = resolve(root, path)?;
        let stat = fstat(handle.as_fd()).map_err(|errno| Error::Stat {
            path: path.to_path_buf(),
            source: errno.into(),
        })?;
        let is_char = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFCHR;
        let (found_major, found_minor) = (major(stat.st_rdev) as u32, minor(stat.st_rdev) as u32);
        if !is_char || (found_major, found_minor) != (maj, min) {
            return Err(Error::NodeMismatch {
                path: path.to_path_buf(),
                expected: format!("c {maj}:{min}"),
                found: if is_char {
                    format!("c {found_major}:{found_minor}")
                } else {
                    format!("mode {:o}", stat.st_mode)
                },
            });
        }
        Ok(())
    }

    fn bind_mount(
        &self,
        source: BorrowedFd<'_>,
        root: &Root,
        target: &Path,
        options: MountOptions,
    ) -> Result<()> {
        let handle = resolve(root, target)?;
        let mount_err = |errno: nix::Error| Error::Mount {
            target: target.to_path_buf(),
            what: "bind",
            source: errno.into(),
        };
        mount(
            Some(&fd_path(source)),
            &fd_path(handle.as_fd()),
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(mount_err)?;
        // The old handle still names the file under the new mount: resolve again.
        let mounted = resolve(root, target)?;
        mount(
            None::<&str>,
            &fd_path(mounted.as_fd()),
            None::<&str>,
            MsFlags::MS_REMOUNT | MsFlags::MS_BIND | mount_flags(options),
            None::<&str>,
        )
        .map_err(|errno| Error::Mount {
            target: target.to_path_buf(),
            what: "remount",
            source: errno.into(),
        })
    }

    fn mount_tmpfs(&self, root: &Root, target: &Path) -> Result<()> {
        let handle = resolve(root, target)?;
        mount(
            Some("tmpfs"),
            &fd_path(handle.as_fd()),
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some("mode=0555,size=1m"),
        )
        .map_err(|errno| Error::Mount {
            target: target.to_path_buf(),
            what: "tmpfs",
            source: errno.into(),
        })
    }

    fn remount_read_only(&self, root: &Root, target: &Path) -> Result<()> {
        let handle = resolve(root, target)?;
        mount(
            None::<&str>,
            &fd_path(handle.as_fd()),
            None::<&str>,
            MsFlags::MS_REMOUNT
                | MsFlags::MS_RDONLY
                | MsFlags::MS_NOSUID
                | MsFlags::MS_NODEV
                | MsFlags::MS_NOEXEC,
            None::<&str>,
        )
        .map_err(|errno| Error::Mount {
            target: target.to_path_buf(),
            what: "read-only remount",
            source: errno.into(),
        })
    }
}

//! Opens for reading what was resolved in the image as an `O_PATH` descriptor.
//!
//! An `O_PATH` descriptor opens nothing, so its type can be checked first:
//! opening an image's device node can act on the device (a watchdog, a tape)
//! and opening its fifo can block. Only a checked regular file or directory
//! is then reopened, through its magic link in the host's `/proc/self/fd`.
//! That directory is opened before the hook enters the container's mount
//! namespace and checked to be procfs, so the image cannot stand anything in
//! its place; the reopened file must be the very inode that was checked.
//!
//! `pathrs` can reopen too, but it mounts a private procfs for it, and the
//! unmount of that mount when the hook exits waits for an RCU grace period.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};
use nix::sys::statfs::{fstatfs, PROC_SUPER_MAGIC};
use thiserror::Error;

/// Resolves `path` inside `root` as `pathrs` does with `openat2` (an
/// `O_PATH` descriptor, `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`), and says
/// `None` when nothing is there. `pathrs` turns that answer into an error
/// that names the root by its path, read back through procfs, then probes
/// `openat2` again: about ten syscalls for each absent path the hook looks
/// for (an image's compat directory, a directory still to create). Any
/// other failure, no `openat2` included, is `pathrs`'s to handle and name.
pub fn resolve_in(
    root: &pathrs::Root,
    path: &Path,
) -> std::result::Result<Option<pathrs::Handle>, pathrs::error::Error> {
    use rustix::fs::{openat2, Mode as RxMode, OFlags, ResolveFlags};
    match openat2(
        root,
        path,
        OFlags::PATH | OFlags::CLOEXEC,
        RxMode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => return Ok(Some(pathrs::Handle::from_fd(fd))),
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(_) => {}
    }
    match root.resolve(path) {
        Ok(handle) => Ok(Some(handle)),
        Err(e) if e.kind() == pathrs::error::ErrorKind::OsError(Some(nix::libc::ENOENT)) => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The host directory whose magic links reopen our own descriptors.
pub const SELF_FDS: &str = "/proc/self/fd";

/// Why a descriptor could not be reopened; each names the path it stands for.
#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot open the host's {SELF_FDS}: {0}")]
    Proc(io::Error),
    #[error("the host's {SELF_FDS} is not on procfs")]
    NotProc,
    #[error("cannot inspect {path}: {source}")]
    Stat { path: PathBuf, source: io::Error },
    #[error("{path} is a {found}, expected a {expected}")]
    Kind {
        path: PathBuf,
        found: &'static str,
        expected: &'static str,
    },
    #[error("cannot open {path} for reading: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("{path} was replaced while it was being opened")]
    Replaced { path: PathBuf },
    #[error("cannot set the mode of {path} to {mode:o}: {source}")]
    Chmod {
        path: PathBuf,
        mode: u32,
        source: io::Error,
    },
}

/// Result of reopening.
pub type Result<T> = std::result::Result<T, Error>;

/// What a reopened descriptor must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// A regular file, to read.
    File,
    /// A directory, to list.
    Directory,
}

/// The type of a stat mode, as messages name it.
pub fn kind_name(mode: u32) -> &'static str {
    match SFlag::from_bits_truncate(mode) & SFlag::S_IFMT {
        SFlag::S_IFREG => "regular file",
        SFlag::S_IFDIR => "directory",
        SFlag::S_IFLNK => "symlink",
        SFlag::S_IFCHR => "character device",
        SFlag::S_IFBLK => "block device",
        SFlag::S_IFIFO => "fifo",
        SFlag::S_IFSOCK => "socket",
        _ => "special file",
    }
}

/// The host's `/proc/self/fd`, held to reopen checked `O_PATH` descriptors.
#[derive(Debug)]
pub struct Reopener {
    fds: OwnedFd,
}

/// Opens [`SELF_FDS`] as an `O_PATH` descriptor, refusing it unless it is procfs.
pub fn open_self_fds() -> Result<OwnedFd> {
    // rustix's own system call: musl's `open` adds an `fcntl` for `O_CLOEXEC`.
    let fds = rustix::fs::open(
        SELF_FDS,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|errno| Error::Proc(errno.into()))?;
    let fs = fstatfs(&fds).map_err(|errno| Error::Proc(errno.into()))?;
    if fs.filesystem_type() != PROC_SUPER_MAGIC {
        return Err(Error::NotProc);
    }
    Ok(fds)
}

impl Reopener {
    /// Opens the host's `/proc/self/fd`: call it before entering a container.
    pub fn open() -> Result<Reopener> {
        Ok(Reopener {
            fds: open_self_fds()?,
        })
    }

    /// Sets the permission bits of what `file` (an `O_PATH` descriptor of
    /// `path`, its type checked by the caller) is, through its magic link:
    /// the very inode resolved, whatever has since been put at `path`.
    pub fn chmod(&self, file: BorrowedFd<'_>, path: &Path, mode: u32) -> Result<()> {
        nix::sys::stat::fchmodat(
            &self.fds,
            file.as_raw_fd().to_string().as_str(),
            Mode::from_bits_truncate(mode),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        )
        .map_err(|errno| Error::Chmod {
            path: path.to_path_buf(),
            mode,
            source: errno.into(),
        })
    }

    /// Opens `file`, an `O_PATH` descriptor of `path`, for reading, if it is
    /// what `expect` says; anything else is refused without being opened.
    pub fn reopen(&self, file: BorrowedFd<'_>, path: &Path, expect: Expect) -> Result<File> {
        self.reopen_sized(file, path, expect).map(|(file, _)| file)
    }

    /// [`Reopener::reopen`], with the size the opened file had: reading it
    /// whole then takes one read (and one to see its end), where growing a
    /// buffer from nothing took one per doubling.
    pub fn reopen_sized(
        &self,
        file: BorrowedFd<'_>,
        path: &Path,
        expect: Expect,
    ) -> Result<(File, u64)> {
        let stat_err = |errno: Errno| Error::Stat {
            path: path.to_path_buf(),
            source: errno.into(),
        };
        let checked = fstat(file).map_err(stat_err)?;
        let (wanted, expected, flags) = match expect {
            Expect::File => (SFlag::S_IFREG, "regular file", OFlag::empty()),
            Expect::Directory => (SFlag::S_IFDIR, "directory", OFlag::O_DIRECTORY),
        };
        if SFlag::from_bits_truncate(checked.st_mode) & SFlag::S_IFMT != wanted {
            return Err(Error::Kind {
                path: path.to_path_buf(),
                found: kind_name(checked.st_mode),
                expected,
            });
        }
        let opened = openat(
            &self.fds,
            file.as_raw_fd().to_string().as_str(),
            OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | flags,
            Mode::empty(),
        )
        .map_err(|errno| Error::Open {
            path: path.to_path_buf(),
            source: errno.into(),
        })?;
        let now = fstat(opened.as_fd()).map_err(stat_err)?;
        if (now.st_dev, now.st_ino) != (checked.st_dev, checked.st_ino) {
            return Err(Error::Replaced {
                path: path.to_path_buf(),
            });
        }
        Ok((File::from(opened), u64::try_from(now.st_size).unwrap_or(0)))
    }
}

#[cfg(test)]
mod tests {
    use std::fs::{self, OpenOptions};
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;

    use super::*;

    fn o_path(path: &Path) -> File {
        OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_PATH | nix::libc::O_NOFOLLOW)
            .open(path)
            .unwrap()
    }

    #[test]
    fn reopens_a_regular_file_for_reading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ld.so.cache");
        fs::write(&path, b"cache bytes").unwrap();
        let reopener = Reopener::open().unwrap();
        let mut data = String::new();
        reopener
            .reopen(o_path(&path).as_fd(), &path, Expect::File)
            .unwrap()
            .read_to_string(&mut data)
            .unwrap();
        assert_eq!(data, "cache bytes");
    }

    #[test]
    fn reopens_a_directory_for_listing() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("libcuda.so.1"), b"").unwrap();
        let reopener = Reopener::open().unwrap();
        let reopened = reopener
            .reopen(o_path(dir.path()).as_fd(), dir.path(), Expect::Directory)
            .unwrap();
        let names: Vec<_> = nix::dir::Dir::from_fd(reopened.into())
            .unwrap()
            .iter()
            .map(|e| e.unwrap().file_name().to_owned())
            .collect();
        assert!(names.iter().any(|n| n.to_bytes() == b"libcuda.so.1"));
    }

    #[test]
    fn refuses_other_kinds_without_opening_them() {
        let dir = tempfile::tempdir().unwrap();
        // Opening this fifo for reading would block the test: it must not be opened.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o644)).unwrap();
        let reopener = Reopener::open().unwrap();
        let cases = [
            (fifo.as_path(), Expect::File, "fifo"),
            (Path::new("/dev/null"), Expect::File, "character device"),
            (dir.path(), Expect::File, "directory"),
            (fifo.as_path(), Expect::Directory, "fifo"),
        ];
        for (path, expect, found) in cases {
            let err = reopener
                .reopen(o_path(path).as_fd(), path, expect)
                .unwrap_err();
            assert!(
                matches!(err, Error::Kind { found: f, .. } if f == found),
                "{}: {err}",
                path.display()
            );
            assert!(err.to_string().contains(&*path.to_string_lossy()), "{err}");
        }
    }

    #[test]
    fn a_symlink_descriptor_is_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("target"), b"host secret").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("target", &link).unwrap();
        let err = Reopener::open()
            .unwrap()
            .reopen(o_path(&link).as_fd(), &link, Expect::File)
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Kind {
                    found: "symlink",
                    ..
                }
            ),
            "{err}"
        );
    }
}

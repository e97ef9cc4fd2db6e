//! Opens and reads the host-side files a container start depends on (the
//! config file, the driver root's loader cache and ELF headers, procfs and
//! sysfs entries, a bundle's `config.json`, the inventory snapshot) so that
//! none of them can hang the start.
//!
//! A fifo opened for reading blocks until a writer comes, and opening a
//! device node can act on the device. So a path is first opened `O_PATH`
//! (which opens nothing) and its type checked with `fstat`; only a regular
//! file is then opened, non-blocking, through its descriptor's magic link in
//! `/proc/self/fd` (opened once, and checked to be procfs), and it must
//! still be the inode that was checked. Anything
//! else is refused, and the error names what was found (the caller's error
//! names the path). Reads stop at a size bound.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Mutex;

use nix::errno::Errno;
use nix::sys::stat::{fstat, FileStat, SFlag};
use rustix::fs::{Mode, OFlags};

use crate::util::reopen::{kind_name, open_self_fds, SELF_FDS};

/// Opens `path`, following links (a host's config may be one), `O_PATH`:
/// the descriptor to check before anything is opened.
pub fn open_path(path: &Path) -> io::Result<OwnedFd> {
    // rustix's own system call: musl's `open` adds an `fcntl` for
    // `O_CLOEXEC`, one more call for every file a start reads.
    Ok(rustix::fs::open(
        path,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Opens the regular file at `path` for reading: its type checked before it
/// is opened, then opened non-blocking; with the size `fstat` gave.
pub fn open_regular(path: &Path) -> io::Result<(File, u64)> {
    let _waiting = crate::util::deadline::waiting_on("opening", path);
    let fd = open_path(path)?;
    let stat = fstat(fd.as_fd()).map_err(io::Error::from)?;
    reopen_regular(fd.as_fd(), &stat)
}

/// Opens `fd`, an `O_PATH` descriptor that `fstat` said is `stat`, for
/// reading if it is a regular file; refuses anything else unopened.
pub fn reopen_regular(fd: BorrowedFd<'_>, stat: &FileStat) -> io::Result<(File, u64)> {
    if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a {}, not a regular file", kind_name(stat.st_mode)),
        ));
    }
    // Not `NotFound` when procfs is missing: the file is there.
    let opened = reopen_for_reading(fd)
        .map_err(|e| io::Error::other(format!("cannot reopen it through {SELF_FDS}: {e}")))?;
    let now = fstat(opened.as_fd()).map_err(io::Error::from)?;
    if (now.st_dev, now.st_ino) != (stat.st_dev, stat.st_ino) {
        return Err(io::Error::other("replaced while it was being opened"));
    }
    Ok((File::from(opened), u64::try_from(now.st_size).unwrap_or(0)))
}

/// [`SELF_FDS`] as an `O_PATH` descriptor, checked to be procfs, with the
/// process it was opened in: opened once, so that each reopen looks up one
/// name, not four; again in a forked child, whose descriptors they are not.
static SELF_FDS_OPEN: Mutex<Option<(u32, OwnedFd)>> = Mutex::new(None);

/// Opens what `fd` is for reading, non-blocking, through its magic link.
fn reopen_for_reading(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let name = fd.as_raw_fd().to_string();
    // Never waited for: a lock held elsewhere (another thread, or a parent
    // that forked while holding it) means the whole path, looked up again.
    let Ok(mut open) = SELF_FDS_OPEN.try_lock() else {
        return Ok(rustix::fs::open(
            Path::new(SELF_FDS).join(&name).as_path(),
            flags,
            Mode::empty(),
        )?);
    };
    let pid = std::process::id();
    let (_, dir) = match open.take() {
        Some((opened_in, dir)) if opened_in == pid => open.insert((opened_in, dir)),
        stale => {
            // The parent's, in a forked child that may have closed it or
            // reused its number since: not this process's to close.
            std::mem::forget(stale);
            open.insert((pid, open_self_fds().map_err(io::Error::other)?))
        }
    };
    Ok(rustix::fs::openat(
        &*dir,
        name.as_str(),
        flags,
        Mode::empty(),
    )?)
}

/// Reads the regular file at `path` whole, refusing one of more than `limit` bytes.
pub fn read(path: &Path, limit: usize) -> io::Result<Vec<u8>> {
    let (file, size) = open_regular(path)?;
    let _waiting = crate::util::deadline::waiting_on("reading", path);
    read_opened(file, size, limit)
}

/// Reads the regular file at `path` whole, as [`read`], only if it is
/// root's (or the reader's own) and writable by no one else: a file another
/// user could change decides nothing a privileged reader does. The owner
/// and mode are those of the file opened, checked before it is read.
pub fn read_trusted(path: &Path, limit: usize) -> io::Result<Vec<u8>> {
    let fd = open_path(path)?;
    let stat = fstat(fd.as_fd()).map_err(io::Error::from)?;
    let euid = nix::unistd::geteuid().as_raw();
    if stat.st_uid != 0 && stat.st_uid != euid {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("owned by uid {}, not root", stat.st_uid),
        ));
    }
    let writable = stat.st_mode & 0o022;
    if writable != 0 {
        let who = match writable {
            0o020 => "its group",
            0o002 => "everyone",
            _ => "its group and everyone",
        };
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("writable by {who} (mode {:04o})", stat.st_mode & 0o7777),
        ));
    }
    let (file, size) = reopen_regular(fd.as_fd(), &stat)?;
    let _waiting = crate::util::deadline::waiting_on("reading", path);
    read_opened(file, size, limit)
}

/// Reads `file`, which `fstat` said has `size` bytes (procfs and sysfs say
/// 0), whole, refusing more than `limit` bytes.
pub fn read_opened(file: File, size: u64, limit: usize) -> io::Result<Vec<u8>> {
    let too_large = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("more than {limit} bytes"),
        )
    };
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    if size > limit {
        return Err(too_large());
    }
    // One read for the whole file and one to see its end; a page where
    // the size is unknown.
    let mut data = vec![0; size.max(4095) + 1];
    let mut len = 0;
    let mut file = file.take(u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1));
    loop {
        if len == data.len() {
            data.resize(len * 2, 0);
        }
        match file.read(&mut data[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(Errno::EAGAIN as i32) => {
                return Err(io::Error::other("would block: not a plain file"))
            }
            Err(e) => return Err(e),
        }
        if len > limit {
            return Err(too_large());
        }
    }
    data.truncate(len);
    Ok(data)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn reads_regular_files_and_procfs_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let text = "x".repeat(10_000);
        fs::write(&path, &text).unwrap();
        assert_eq!(read(&path, 10_000).unwrap(), text.as_bytes());
        let status = read(Path::new("/proc/self/status"), 1 << 20).unwrap();
        assert!(status.starts_with(b"Name:"));
        // Through a link: the type checked is the target's.
        std::os::unix::fs::symlink(&path, dir.path().join("link")).unwrap();
        assert_eq!(
            read(&dir.path().join("link"), 10_000).unwrap().len(),
            10_000
        );
    }

    #[test]
    fn reads_through_the_whole_path_while_the_open_directory_is_busy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        fs::write(&path, "text").unwrap();
        assert_eq!(read(&path, 100).unwrap(), b"text");
        let _busy = SELF_FDS_OPEN.lock().unwrap();
        assert_eq!(read(&path, 100).unwrap(), b"text");
    }

    #[test]
    fn refuses_more_than_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        fs::write(&path, [0u8; 100]).unwrap();
        let err = read(&path, 99).unwrap_err();
        assert!(err.to_string().contains("more than 99 bytes"), "{err}");
        let err = read(Path::new("/proc/self/maps"), 10).unwrap_err();
        assert!(err.to_string().contains("more than 10 bytes"), "{err}");
    }

    #[test]
    fn refuses_fifos_devices_and_directories_without_opening_them() {
        let dir = tempfile::tempdir().unwrap();
        // Opened, this fifo would block the test.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        for (path, found) in [
            (fifo.as_path(), "fifo"),
            (Path::new("/dev/null"), "character device"),
            (dir.path(), "directory"),
        ] {
            let err = read(path, 100).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
            assert!(err.to_string().contains(found), "{err}");
        }
        let err = read(&dir.path().join("missing"), 100).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}

//! Character device nodes made on the host (`nvidia-ctk system
//! create-device-nodes`): `mknodat` in a directory the caller opened, then
//! what is at the name opened with `O_PATH` and `fstat`ed, so that the
//! device is checked on the inode itself, and its mode set through that
//! descriptor whatever the umask. It never replaces, removes or follows
//! what is at the name: a node that is not the device asked for is an
//! error, left as it is.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag, AT_FDCWD};
use nix::sys::stat::{fchmodat, fstat, major, makedev, minor, mknodat, FchmodatFlags, Mode, SFlag};

/// Whether [`char_device_at`] made the node or found it there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Made {
    /// Made by this call, with the mode asked for.
    Created,
    /// The same device was there already, left as it was.
    Existed,
}

/// Makes character device `major`:`minor` named `name` in `dir` with the
/// permission bits `mode`, or accepts the same device already there. Any
/// other file at the name (another device, a link, a regular file) is an
/// error of kind `AlreadyExists` saying what it is.
pub fn char_device_at(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    mode: u32,
    maj: u32,
    min: u32,
) -> io::Result<Made> {
    let dev = makedev(u64::from(maj), u64::from(min));
    let perm = Mode::from_bits_truncate(mode);
    let made = match mknodat(dir, name, SFlag::S_IFCHR, perm, dev) {
        Ok(()) => Made::Created,
        Err(Errno::EEXIST) => Made::Existed,
        Err(errno) => return Err(errno.into()),
    };
    let node = openat(
        dir,
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let stat = fstat(&node)?;
    let is_char = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFCHR;
    let found = (major(stat.st_rdev) as u32, minor(stat.st_rdev) as u32);
    if !is_char || found != (maj, min) {
        let what = if is_char {
            format!("character device {}:{}", found.0, found.1)
        } else {
            format!("not a character device (mode {:o})", stat.st_mode)
        };
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("it is {what}, not {maj}:{min}"),
        ));
    }
    // The umask took bits from the new node; an existing one keeps its own.
    if made == Made::Created && stat.st_mode & 0o7777 != mode & 0o7777 {
        // Through the descriptor's magic link: the inode checked above,
        // whatever the name has come to mean since.
        let magic = format!("/proc/self/fd/{}", node.as_raw_fd());
        fchmodat(AT_FDCWD, magic.as_str(), perm, FchmodatFlags::FollowSymlink)?;
    }
    Ok(made)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    fn dir_of(path: &std::path::Path) -> std::os::fd::OwnedFd {
        nix::fcntl::open(path, OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty()).unwrap()
    }

    #[test]
    fn another_file_at_the_name_is_an_error_saying_what_it_is_and_stays() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("nvidiactl"), b"x").unwrap();
        std::os::unix::fs::symlink("/dev/null", tmp.path().join("nvidia-uvm")).unwrap();
        let dir = dir_of(tmp.path());
        for name in ["nvidiactl", "nvidia-uvm"] {
            let e = char_device_at(dir.as_fd(), OsStr::new(name), 0o666, 195, 255).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{name}: {e}");
            assert!(e.to_string().contains("not a character device"), "{e}");
        }
        assert_eq!(std::fs::read(tmp.path().join("nvidiactl")).unwrap(), b"x");
        assert!(tmp.path().join("nvidia-uvm").is_symlink());
    }
}

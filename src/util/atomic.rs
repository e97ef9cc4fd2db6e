//! Replacing a file whole: the one way this program writes a file that
//! someone else may read at any moment (a CDI spec, a bundle's
//! `config.json`, the driver snapshot). The data goes to a hidden
//! temporary file beside it, created new without following links, given
//! its mode, optionally synced, then renamed over the file: a reader sees
//! the old file or the new one, never half of one, and a failure leaves
//! no temporary file behind.

use std::ffi::OsStr;
use std::fs::{File, Permissions};
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, renameat, OFlag, AT_FDCWD};
use nix::sys::stat::Mode;
use nix::unistd::{unlinkat, UnlinkatFlags};
use thiserror::Error;

/// Why a file could not be replaced: the file (the temporary one while it
/// was being written) and the cause.
#[derive(Debug, Error)]
#[error("cannot write {path}: {source}")]
pub struct Error {
    /// The file that could not be written.
    pub path: PathBuf,
    /// Why.
    pub source: io::Error,
}

/// How the new file is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Its mode, whatever the umask.
    pub mode: u32,
    /// Whether it reaches the disk before it replaces the old one (not
    /// needed on memory filesystems, where a torn file cannot outlive a crash).
    pub sync: bool,
}

/// Replaces `path` with `data`.
pub fn replace(path: &Path, data: &[u8], options: Options) -> Result<(), Error> {
    let name = path.file_name().unwrap_or_default();
    let temp = path.with_file_name(temp_name(name));
    write_then_rename(AT_FDCWD, (&temp, &temp), (path, path), data, options)
}

/// Replaces `name` in the directory open as `dir` (at `dir_path`, which
/// messages name) with `data`: for a directory whose checks were made on
/// the descriptor.
pub fn replace_in(
    dir: BorrowedFd<'_>,
    dir_path: &Path,
    name: &OsStr,
    data: &[u8],
    options: Options,
) -> Result<(), Error> {
    let temp = PathBuf::from(temp_name(name));
    let target = Path::new(name);
    write_then_rename(
        dir,
        (&temp, &dir_path.join(&temp)),
        (target, &dir_path.join(target)),
        data,
        options,
    )
}

/// A hidden name beside `name`, unique to this process.
fn temp_name(name: &OsStr) -> String {
    format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id())
}

/// Writes `temp` (relative to `dir`, and as messages name it) and renames
/// it over `target`; removes it on failure.
fn write_then_rename(
    dir: BorrowedFd<'_>,
    (temp, temp_shown): (&Path, &Path),
    (target, target_shown): (&Path, &Path),
    data: &[u8],
    options: Options,
) -> Result<(), Error> {
    let failed = |path: &Path| {
        let path = path.to_path_buf();
        move |source: io::Error| Error { path, source }
    };
    let fd = openat(
        dir,
        temp,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(options.mode),
    )
    .map_err(|errno| failed(temp_shown)(errno.into()))?;
    let mut file = File::from(fd);
    let written = file
        .write_all(data)
        .and_then(|()| file.set_permissions(Permissions::from_mode(options.mode)))
        .and_then(|()| {
            if options.sync {
                file.sync_all()
            } else {
                Ok(())
            }
        })
        .map_err(failed(temp_shown))
        .and_then(|()| {
            renameat(dir, temp, dir, target).map_err(|errno| failed(target_shown)(errno.into()))
        });
    if written.is_err() {
        let _ = unlinkat(dir.as_fd(), temp, UnlinkatFlags::NoRemoveDir);
    }
    written
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    const SYNCED: Options = Options {
        mode: 0o640,
        sync: true,
    };

    #[test]
    fn replaces_the_file_whole_with_its_mode_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spec.yaml");
        fs::write(&path, "old").unwrap();
        replace(&path, b"new\n", SYNCED).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new\n");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn in_an_open_directory_too() {
        let dir = tempfile::tempdir().unwrap();
        let fd = File::open(dir.path()).unwrap();
        let name = OsStr::new("snapshot.json");
        replace_in(fd.as_fd(), dir.path(), name, b"{}", SYNCED).unwrap();
        assert_eq!(fs::read(dir.path().join(name)).unwrap(), b"{}");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_failure_names_the_file_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let err = replace(&dir.path().join("absent/x.yaml"), b"x", SYNCED).unwrap_err();
        assert!(err.to_string().contains("absent/.x.yaml."), "{err}");
        // A directory in the way of the rename: the temporary file goes.
        fs::create_dir(dir.path().join("taken")).unwrap();
        fs::write(dir.path().join("taken/f"), "").unwrap();
        let err = replace(&dir.path().join("taken"), b"x", SYNCED).unwrap_err();
        assert_eq!(err.path, dir.path().join("taken"), "{err}");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}

//! Listings of the image's directories, bounded. The hook runs as root in
//! the runtime's cgroup, often with its low OOM score, before the container
//! exists: a directory an image fills with millions of long names must
//! cost it neither the node's memory nor the start's time. A listing past
//! a bound is refused, naming the directory and the bound.

use std::ffi::OsString;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// The most entries read of one directory of the image: some ten times the
/// library directory of the largest CUDA images (about 3,000).
pub const MAX_ENTRIES: usize = 32_768;

/// The most bytes of names kept of one directory (about 30 a name in a
/// library directory).
pub const MAX_NAME_BYTES: usize = 2 << 20;

/// Why a directory of the image was not listed.
#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot list {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("refusing {path} in the image: it holds more than {bound} {what}, the most the hook reads of a directory")]
    TooLarge {
        path: PathBuf,
        bound: usize,
        what: &'static str,
    },
}

/// The names in the directory open at `dir` (container path `path`, for
/// messages), `.` and `..` left out; refused past [`MAX_ENTRIES`] entries
/// or [`MAX_NAME_BYTES`] bytes of names.
pub fn names(dir: BorrowedFd<'_>, path: &Path) -> Result<Vec<OsString>, Error> {
    names_within(dir, path, MAX_ENTRIES, MAX_NAME_BYTES)
}

fn names_within(
    dir: BorrowedFd<'_>,
    path: &Path,
    max_entries: usize,
    max_bytes: usize,
) -> Result<Vec<OsString>, Error> {
    let read_err = |source: io::Error| Error::Read {
        path: path.to_path_buf(),
        source,
    };
    // A listing of its own: the caller's descriptor keeps its offset.
    let fd = dir.try_clone_to_owned().map_err(read_err)?;
    let mut listing = nix::dir::Dir::from_fd(fd).map_err(|errno| read_err(errno.into()))?;
    let too_large = |bound, what| Error::TooLarge {
        path: path.to_path_buf(),
        bound,
        what,
    };
    let (mut names, mut bytes) = (Vec::new(), 0);
    for entry in listing.iter() {
        let entry = entry.map_err(|errno| read_err(errno.into()))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if names.len() == max_entries {
            return Err(too_large(max_entries, "entries"));
        }
        bytes += name.len();
        if bytes > max_bytes {
            return Err(too_large(max_bytes, "bytes of names"));
        }
        names.push(std::ffi::OsStr::from_bytes(name).to_os_string());
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::fd::AsFd;

    use super::*;

    #[test]
    fn lists_and_refuses_past_either_bound() {
        let dir = tempfile::tempdir().unwrap();
        for n in 0..10 {
            fs::write(dir.path().join(format!("lib{n:02}.so")), b"").unwrap();
        }
        let open = fs::File::open(dir.path()).unwrap();
        let mut found = names(open.as_fd(), Path::new("/usr/lib")).unwrap();
        found.sort();
        assert_eq!(found.len(), 10);
        assert_eq!(found[0], "lib00.so");
        assert_eq!(
            names_within(open.as_fd(), Path::new("/d"), 10, 80)
                .unwrap()
                .len(),
            10
        );
        let err = names_within(open.as_fd(), Path::new("/d"), 9, 80).unwrap_err();
        assert_eq!(
            err.to_string(),
            "refusing /d in the image: it holds more than 9 entries, the most the hook reads of a directory"
        );
        let err = names_within(open.as_fd(), Path::new("/d"), 10, 79).unwrap_err();
        assert!(
            err.to_string().contains("more than 79 bytes of names"),
            "{err}"
        );
    }
}

//! Reads a pipe to its end within a size and a time limit, so that a broken
//! or hostile writer (a runtime feeding the hook's stdin, a child process
//! answering a query) can neither hang the hook nor exhaust its memory; and
//! reads the host's small text files (procfs) whole, within a size limit.

use std::io::{self, Read};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use thiserror::Error;

/// Why a bounded read stopped short.
#[derive(Debug, Error)]
pub enum Error {
    #[error("{0}")]
    Io(io::Error),
    #[error("more than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("nothing complete within {} ms", timeout.as_millis())]
    Timeout { timeout: Duration },
}

/// Reads all of `input` (until EOF) within `limit` bytes and `timeout`.
pub fn read_to_end(
    mut input: impl Read + AsFd,
    limit: usize,
    timeout: Duration,
) -> Result<Vec<u8>, Error> {
    let deadline = Instant::now() + timeout;
    let mut data = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let millis = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(input.as_fd(), PollFlags::POLLIN)];
        let ready = poll(&mut fds, PollTimeout::from(millis)).map_err(|e| Error::Io(e.into()))?;
        if ready == 0 {
            if Instant::now() >= deadline {
                return Err(Error::Timeout { timeout });
            }
            continue;
        }
        let n = match input.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::Io(e)),
        };
        if n == 0 {
            return Ok(data);
        }
        if data.len() + n > limit {
            return Err(Error::TooLarge { limit });
        }
        data.extend_from_slice(&chunk[..n]);
    }
}

/// Largest host text file [`read_text`] takes: `mountinfo` of a node with
/// thousands of mounts is the largest, at a few MiB.
pub const MAX_TEXT: usize = 16 * 1024 * 1024;

/// Reads the text file at `path` whole, up to [`MAX_TEXT`] bytes, through
/// [`crate::util::hostfile`]: a fifo or device there is refused, never opened.
///
/// procfs files report a size of 0, so `fs::read_to_string` asks for the
/// size (a `statx`) in vain and then reads in chunks growing from 32 bytes:
/// six reads for a GPU's `information`. Here the first read takes a page.
pub fn read_text(path: &Path) -> io::Result<String> {
    let (file, size) = crate::util::hostfile::open_regular(path)?;
    let _waiting = crate::util::deadline::waiting_on("reading", path);
    let data = crate::util::hostfile::read_opened(file, size, MAX_TEXT)?;
    String::from_utf8(data).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_text_reads_procfs_and_files_larger_than_a_page() {
        let own = read_text(Path::new("/proc/self/status")).unwrap();
        assert!(own.starts_with("Name:"), "{own}");
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        let text = "0123456789abcdef\n".repeat(1000);
        std::fs::write(&big, &text).unwrap();
        assert_eq!(read_text(&big).unwrap(), text);
        let err = read_text(&dir.path().join("missing")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        std::fs::write(&big, b"\xff\xfe").unwrap();
        assert_eq!(
            read_text(&big).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn reads_until_eof() {
        let (reader, mut writer) = io::pipe().unwrap();
        io::Write::write_all(&mut writer, b"{\"pid\":1}").unwrap();
        drop(writer);
        assert_eq!(
            read_to_end(reader, 100, Duration::from_secs(1)).unwrap(),
            b"{\"pid\":1}"
        );
    }

    #[test]
    fn refuses_more_than_the_limit() {
        let (reader, mut writer) = io::pipe().unwrap();
        let handle = std::thread::spawn(move || {
            let _ = io::Write::write_all(&mut writer, &[b' '; 4096]);
        });
        let err = read_to_end(reader, 1000, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(err, Error::TooLarge { limit: 1000 }), "{err}");
        handle.join().unwrap();
    }

    #[test]
    fn gives_up_when_the_writer_stalls() {
        let (reader, writer) = io::pipe().unwrap();
        let err = read_to_end(reader, 1000, Duration::from_millis(100)).unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        drop(writer);
    }
}

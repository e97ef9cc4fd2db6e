//! Reads a pipe to its end within a size and a time limit, so that a broken
//! or hostile writer (a runtime feeding the hook's stdin, a child process
//! answering a query) can neither hang the hook nor exhaust its memory.

use std::io::{self, Read};
use std::os::fd::AsFd;
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

#[cfg(test)]
mod tests {
    use super::*;

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

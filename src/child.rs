//! Runs a query in a forked child process and takes its answer over a pipe,
//! bounded in size and time.
//!
//! Driver libraries (NVML, libcuda) start threads and may hang; the hook must
//! stay single-threaded to `setns` into a mount namespace later, and must
//! never hang a container start. So their queries run in a child that is
//! killed when the time is up; the hook itself never loads them.

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use serde::de::DeserializeOwned;
use serde::Serialize;
use thiserror::Error;

use crate::{bounded, deadline, sys};

/// Largest answer a child may send.
const MAX_ANSWER: usize = 4 * 1024 * 1024;

/// Why a query in a child failed.
#[derive(Debug, Error)]
pub enum Error {
    #[error("{what}: cannot start a child process: {source}")]
    Spawn {
        what: &'static str,
        source: io::Error,
    },
    #[error("{what}: no answer within {} ms", timeout.as_millis())]
    Timeout {
        what: &'static str,
        timeout: Duration,
    },
    #[error("{what}: the query process failed without an answer ({reason})")]
    NoAnswer { what: &'static str, reason: String },
    #[error("{what}: {message}")]
    Failed { what: &'static str, message: String },
}

/// Runs `query` in a forked child and returns its answer, or kills it after `timeout`.
///
/// Call it only while the process is single-threaded (the hook always is).
pub fn query<T, F>(what: &'static str, timeout: Duration, query: F) -> Result<T, Error>
where
    T: Serialize + DeserializeOwned,
    F: FnOnce() -> Result<T, String>,
{
    // One policy with the entry point's deadline: this bound runs out first.
    let timeout = deadline::clip(timeout);
    let _waiting = deadline::waiting_for(|| format!("{what} (a query in a child process)"));
    let (reader, writer) = io::pipe().map_err(|source| Error::Spawn { what, source })?;
    let child = sys::process::fork_and_run(writer.as_fd(), || {
        let answer = serde_json::to_vec(&query()).unwrap_or_default();
        i32::from((&writer).write_all(&answer).is_err())
    })
    .map_err(|source| Error::Spawn { what, source })?;
    drop(writer);
    let answer = bounded::read_to_end(reader, MAX_ANSWER, timeout);
    if answer.is_err() {
        let _ = kill(child, Signal::SIGKILL);
    }
    let status = waitpid(child, None);
    let data = match answer {
        Ok(data) => data,
        Err(bounded::Error::Timeout { timeout }) => return Err(Error::Timeout { what, timeout }),
        Err(e) => {
            return Err(Error::NoAnswer {
                what,
                reason: e.to_string(),
            })
        }
    };
    let answer: Result<T, String> = serde_json::from_slice(&data).map_err(|_| Error::NoAnswer {
        what,
        reason: format!("{status:?}"),
    })?;
    answer.map_err(|message| Error::Failed { what, message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_childs_answer() {
        let answer: Vec<u32> = query("sum", Duration::from_secs(5), || Ok(vec![1, 2, 3])).unwrap();
        assert_eq!(answer, [1, 2, 3]);
    }

    #[test]
    fn reports_the_childs_error() {
        let err = query::<u32, _>("NVML", Duration::from_secs(5), || {
            Err("driver not loaded".into())
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "NVML: driver not loaded");
    }

    #[test]
    fn kills_a_child_that_hangs() {
        let started = std::time::Instant::now();
        let err = query::<u32, _>("NVML", Duration::from_millis(200), || {
            std::thread::sleep(Duration::from_secs(30));
            Ok(1)
        })
        .unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        assert!(err.to_string().contains("200 ms"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn the_child_inherits_no_stray_descriptors() {
        let stray = std::fs::File::open("/dev/null").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&stray);
        let open: bool = query("fds", Duration::from_secs(5), move || {
            Ok(std::path::Path::new(&format!("/proc/self/fd/{fd}")).exists())
        })
        .unwrap();
        assert!(!open, "descriptor {fd} reached the child");
        drop(stray);
    }

    #[test]
    fn a_child_that_dies_is_an_error() {
        let err = query::<u32, _>("NVML", Duration::from_secs(5), || {
            // Ends the forked child at once, as a crash in a driver library would.
            let _ = nix::sys::signal::raise(Signal::SIGKILL);
            Err("still alive after SIGKILL".into())
        })
        .unwrap_err();
        assert!(matches!(err, Error::NoAnswer { .. }), "{err}");
    }
}

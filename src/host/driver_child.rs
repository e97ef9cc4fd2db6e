//! Runs a query in a forked child process and takes its answer over a pipe,
//! bounded in size and time.
//!
//! Driver libraries (NVML, libcuda) start threads and may hang; the hook must
//! stay single-threaded to `setns` into a mount namespace later, and must
//! never hang a container start. So their queries run in a child that is
//! killed when the time is up; the hook itself never loads them.

use std::ffi::CStr;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use serde::de::DeserializeOwned;
use serde::Serialize;
use thiserror::Error;

use crate::{sys, util::bounded_read, util::deadline};

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
    #[error(
        "{what}: cannot run the query program embedded in this binary (from a memfd): {reason}"
    )]
    Exec { what: &'static str, reason: String },
}

/// The exit status of a child whose program could not be executed (as a
/// shell's 126); its answer is why.
const EXEC_FAILED: i32 = 126;

/// The exit status of a child that could not be confined; its answer is why.
const CONFINE_FAILED: i32 = 125;

/// Runs `query` in a forked child and returns its answer, or kills it after `timeout`.
///
/// Call it only while the process is single-threaded (the hook always is).
pub fn query<T, F>(what: &'static str, timeout: Duration, query: F) -> Result<T, Error>
where
    T: Serialize + DeserializeOwned,
    F: FnOnce() -> Result<T, String>,
{
    answered(what, timeout, |mut writer| {
        let answer = serde_json::to_vec(&query()).unwrap_or_default();
        i32::from(writer.write_all(&answer).is_err())
    })
}

/// Runs the program `image` (an executable's bytes, the binary's own) with
/// `args` in a forked child, whose standard output is its answer: the JSON
/// of a `Result<T, String>`, as [`query`]'s closures give it.
pub fn exec<T: DeserializeOwned>(
    what: &'static str,
    timeout: Duration,
    image: &'static [u8],
    args: &[&CStr],
) -> Result<T, Error> {
    answered(what, timeout, |writer| {
        let e = sys::process::exec_image(image, args, writer.as_fd());
        fail_with(writer, e.to_string());
        EXEC_FAILED
    })
}

/// Answers the parent, from the child, that the query failed with `message`.
fn fail_with(mut writer: &File, message: String) {
    let answer: Result<(), String> = Err(message);
    let _ = writer.write_all(&serde_json::to_vec(&answer).unwrap_or_default());
}

/// The one way a child answers: `child` runs in the fork with the pipe's
/// writing end and returns its exit status; the parent reads what it wrote.
fn answered<T, F>(what: &'static str, timeout: Duration, child: F) -> Result<T, Error>
where
    T: DeserializeOwned,
    F: FnOnce(&File) -> i32,
{
    // One policy with the entry point's deadline: this bound runs out first.
    let timeout = deadline::clip(timeout);
    let _waiting = deadline::waiting_for(|| format!("{what} (a query in a child process)"));
    let (reader, writer) = io::pipe().map_err(|source| Error::Spawn { what, source })?;
    let writer = File::from(OwnedFd::from(writer));
    let child = sys::process::fork_and_run(writer.as_fd(), || {
        // Driver code changes nothing on the host: as root, it runs
        // confined, or not at all. Unprivileged, it can make nothing there.
        if nix::unistd::geteuid().is_root() {
            if let Err(e) = sys::confine::driver_child() {
                fail_with(&writer, format!("cannot confine the driver's code: {e}"));
                return CONFINE_FAILED;
            }
        }
        child(&writer)
    })
    .map_err(|source| Error::Spawn { what, source })?;
    drop(writer);
    let answer = bounded_read::read_to_end(reader, MAX_ANSWER, timeout);
    if answer.is_err() {
        let _ = kill(child, Signal::SIGKILL);
    }
    let status = waitpid(child, None);
    let data = match answer {
        Ok(data) => data,
        Err(bounded_read::Error::Timeout { timeout }) => {
            return Err(Error::Timeout { what, timeout })
        }
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
    answer.map_err(|message| match status {
        Ok(WaitStatus::Exited(_, EXEC_FAILED)) => Error::Exec {
            what,
            reason: message,
        },
        _ => Error::Failed { what, message },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As root, driver code runs where it can make nothing in `/dev` (as
    /// NVML's `nvidia-modprobe` would make `/dev/nvidiactl`), while device
    /// nodes there still open for writing (issue 40).
    #[test]
    #[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
    fn driver_code_runs_with_dev_read_only_and_changes_nothing_on_the_host() {
        let probe = std::path::PathBuf::from(format!("/dev/onh-confine-{}", std::process::id()));
        let target = probe.clone();
        let made: Result<String, Error> = query("a node", Duration::from_secs(10), move || {
            std::fs::write(&target, b"x").map_err(|e| e.to_string())?;
            Ok("made".to_string())
        });
        let err = made.unwrap_err().to_string();
        assert!(err.contains("Read-only file system"), "{err}");
        assert!(!probe.exists(), "{} was made on the host", probe.display());
        let opened: String = query("/dev/null", Duration::from_secs(10), || {
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/null")
                .map(|_| "opened".to_string())
                .map_err(|e| e.to_string())
        })
        .unwrap();
        assert_eq!(opened, "opened");
    }

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

    /// `sh -c SCRIPT` run by [`exec`] from a memfd: its answer.
    fn sh(script: &CStr) -> Result<String, Error> {
        let image: &'static [u8] = Box::leak(std::fs::read("/bin/sh").unwrap().into_boxed_slice());
        exec("sh", Duration::from_secs(5), image, &[c"-c", script])
    }

    #[test]
    fn exec_runs_the_image_from_a_memfd_in_slash_with_an_empty_environment() {
        let answer =
            sh(c"printf '{\"Ok\":\"%s %s %s\"}' \"$(pwd)\" \"${LD_PRELOAD-unset}\" \"$0\"")
                .unwrap();
        assert_eq!(answer, "/ unset oci-nvidia-hook-probe");
        let err = sh(c"printf '{\"Err\":\"no GPU\"}'").unwrap_err();
        assert_eq!(err.to_string(), "sh: no GPU");
    }

    #[test]
    fn an_image_the_kernel_cannot_execute_is_an_exec_error() {
        let err = exec::<u32>("probe", Duration::from_secs(5), b"not a program", &[]).unwrap_err();
        assert!(matches!(err, Error::Exec { .. }), "{err}");
        assert!(
            err.to_string().contains("cannot run the query program"),
            "{err}"
        );
        assert!(err.to_string().contains("os error 8"), "{err}");
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

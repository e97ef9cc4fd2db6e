//! Bounded processes: every runtime, cleanup and probe the harness starts
//! runs in its own process group and is killed, group and all, at a time
//! limit, so a hang fails the test instead of blocking CI. Output is
//! drained by threads so a chatty child never blocks on a full pipe.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;

/// A finished (or killed) process's status and output.
pub struct Finished {
    /// The exit status; `None` when it was killed at its limit.
    pub status: Option<ExitStatus>,
    /// It ran past its limit and was killed.
    pub timed_out: bool,
    /// What it wrote to stdout.
    pub stdout: String,
    /// What it wrote to stderr.
    pub stderr: String,
}

impl Finished {
    /// Its stdout, panicking with `what` and its stderr unless it exited 0.
    pub fn succeeded(&self, what: &str) -> String {
        assert!(
            self.status.is_some_and(|s| s.success()),
            "{what} failed: {:?}\n{}",
            self.status,
            self.stderr
        );
        self.stdout.clone()
    }
}

/// Runs `cmd` in its own process group, killing the whole group at `limit`.
/// The end of the process is waited for, not polled, so the time a caller
/// measures around this is the process's own. Output still held open by a
/// stray descendant after the process ended is given up on rather than
/// waited for.
pub fn run_bounded(mut cmd: Command, limit: Duration) -> Finished {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let program = format!("{cmd:?}");
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    let stdout = drain(child.stdout.take().unwrap());
    let stderr = drain(child.stderr.take().unwrap());
    let pid = Pid::from_raw(child.id() as i32);
    let timed_out = match exit_of(pid).recv_timeout(limit) {
        Ok(()) => false,
        Err(RecvTimeoutError::Timeout) => {
            // Not reaped yet (see exit_of): the group id is still ours.
            let _ = killpg(pid, Signal::SIGKILL);
            true
        }
        Err(RecvTimeoutError::Disconnected) => panic!("cannot wait for {program}"),
    };
    let status = child.wait().expect("wait for the child");
    // Pipes reach EOF as soon as the last writer exits; one still open
    // seconds after the process ended is held by a stray descendant (a
    // daemonized helper), and waiting for it would hang the test.
    let grace = if timed_out {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(5)
    };
    Finished {
        status: (!timed_out).then_some(status),
        timed_out,
        stdout: collect(stdout, grace),
        stderr: collect(stderr, grace),
    }
}

/// Says when process `pid` has exited, without reaping it (`WNOWAIT`): until
/// the caller reaps it, its pid, and so its process group's id, cannot be
/// reused, and killing that group cannot hit a stranger.
fn exit_of(pid: Pid) -> Receiver<()> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || loop {
        match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
            Err(Errno::EINTR) => continue,
            // Exited; or reaped already by the caller after a timeout.
            Ok(_) | Err(Errno::ECHILD) => {
                let _ = tx.send(());
                return;
            }
            // Dropping `tx` unsent tells the caller waiting failed.
            Err(_) => return,
        }
    });
    rx
}

fn drain(mut pipe: impl Read + Send + 'static) -> Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    rx
}

fn collect(rx: Receiver<Vec<u8>>, wait: Duration) -> String {
    match rx.recv_timeout(wait) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => "(output not collected: still held open by a leftover process)".into(),
    }
}

//! A container run's outcome, [`Run`]: the runtime's exit and output, what
//! `/checker` (integration/checker.c) saw inside the container parsed into
//! a [`CheckerReport`], the hook's own log and the container's loader
//! cache; and the lock that serializes every run of this test binary (see
//! [`serial`]) so that host-wide snapshots and timings stay meaningful.
//! Collects and describes; the suites judge.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::cleanup::assert_no_mounts_under;
use super::process::Finished;
use super::report::CheckerReport;
use super::runtimes::Runtime;
use crate::ldconfig::{ldconfig_print, CacheEntry};
use crate::simhost::require_root;

/// How long one container run may take before it is killed: far above the
/// ~0.1-1 s a run takes here, low enough that a hang fails CI instead of
/// blocking it.
pub const RUN_LIMIT: Duration = Duration::from_secs(60);

/// Held for a whole test: container runs never overlap, so that host-wide
/// snapshots (mount table, driver tree) taken by one test are not disturbed
/// by another's containers, and per-test timings are not skewed on 2 cores.
pub struct Serial {
    _lock: MutexGuard<'static, ()>,
}

/// Waits for the other tests of this binary, then checks that we are root
/// (each runtime's tools are checked when it runs).
pub fn serial() -> Serial {
    static LOCK: Mutex<()> = Mutex::new(());
    // A failed test poisons the lock; the next test must still run.
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    require_root();
    Serial { _lock: guard }
}

/// A run's outcome: exit, output, the checker's report, the hook's log.
pub struct Run {
    /// The runtime that ran it.
    pub runtime: Runtime,
    /// The scenario's name.
    pub name: String,
    /// The runtime's exit status; None when it was killed at its limit.
    pub status: Option<ExitStatus>,
    /// The runtime's stdout: the container's output.
    pub stdout: String,
    /// The runtime's stderr: its errors, the hook's error, nvidia-smi's.
    pub stderr: String,
    /// How long the runtime ran.
    pub elapsed: Duration,
    /// What the checker saw inside the container.
    pub report: CheckerReport,
    /// What the hook appended to its log file (`[log] file` in its config).
    pub hook_log: Option<String>,
    /// The bundle (for Podman, the run's directory).
    pub bundle: PathBuf,
    /// The container's root filesystem, as the hook left it.
    pub rootfs: PathBuf,
    /// The container's `/etc/ld.so.cache` as glibc's `ldconfig -p` lists
    /// it, from the copy the checker left in the bundle's `out/`.
    pub ld_cache: Option<Vec<CacheEntry>>,
}

/// Where a run's files are, for [`Run::collect`].
pub struct RunFiles<'a> {
    /// The bundle, or Podman's run directory: its `out/` holds the
    /// checker's copy of the loader cache.
    pub bundle: &'a Path,
    /// The container's root filesystem.
    pub rootfs: &'a Path,
    /// The hook's log file.
    pub hook_log: &'a Path,
}

impl Run {
    /// Turns what the runtime did into a [`Run`]: parses the checker's
    /// report, reads the hook's log and the container's cache. Panics with
    /// the whole run if the runtime was killed at its limit, and if any
    /// mount leaked under the bundle into the host's namespace; a container
    /// that failed to start is not a panic here but [`Run::status`], for the
    /// test to judge.
    pub fn collect(
        runtime: Runtime,
        name: &str,
        finished: Finished,
        elapsed: Duration,
        files: RunFiles,
    ) -> Run {
        let copied = files.bundle.join("out/ld.so.cache");
        let run = Run {
            runtime,
            name: name.to_string(),
            status: finished.status,
            report: CheckerReport::parse(&finished.stdout, &finished.stderr),
            stdout: finished.stdout,
            stderr: finished.stderr,
            elapsed,
            hook_log: std::fs::read_to_string(files.hook_log).ok(),
            bundle: files.bundle.to_path_buf(),
            rootfs: files.rootfs.to_path_buf(),
            ld_cache: copied.exists().then(|| ldconfig_print(&copied)),
        };
        assert!(
            !finished.timed_out,
            "the runtime was killed after {elapsed:?}:{}",
            run.describe()
        );
        assert_no_mounts_under(&run.bundle);
        run
    }

    /// The hook's refusal as the user sees it (the runtime's stderr) plus
    /// the hook's log.
    pub fn failure_text(&self) -> String {
        format!(
            "{}\n{}",
            self.stderr,
            self.hook_log.as_deref().unwrap_or_default()
        )
    }

    /// The runtime exited with success.
    pub fn succeeded(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Everything about the run, for assertion messages.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        let status = match self.status {
            Some(status) => status.to_string(),
            None => format!("killed after {:?}", self.elapsed),
        };
        let _ = writeln!(
            s,
            "\n=== {} [{}] {status} in {:.0?}, bundle {}",
            self.name,
            self.runtime.name(),
            self.elapsed,
            self.bundle.display()
        );
        let _ = writeln!(s, "--- stdout\n{}", self.stdout.trim_end());
        let _ = writeln!(s, "--- stderr\n{}", self.stderr.trim_end());
        match &self.hook_log {
            Some(log) => {
                let _ = writeln!(s, "--- hook log\n{}", log.trim_end());
            }
            None => {
                let _ = writeln!(s, "--- hook log: none written");
            }
        }
        s
    }

    /// Panics with the whole run unless the container ran to the end.
    pub fn assert_completed(&self) {
        assert!(self.succeeded(), "the container failed:{}", self.describe());
        assert!(
            self.report.complete,
            "the checker did not finish:{}",
            self.describe()
        );
        assert!(
            self.report.smi_exit.is_some(),
            "no smi_exit line:{}",
            self.describe()
        );
    }
}

//! Grants a running container access to device nodes in its device cgroup.
//!
//! Owns everything between a [`CgroupRule`] list and the kernel: finding the
//! container's v1 `devices` and v2 cgroup directories in the hook's (host's)
//! view, writing v1 rules, and extending v2 `BPF_CGROUP_DEVICE` programs. It
//! runs before the hook enters the container's mount namespace and must never
//! loosen a restriction beyond the rules given, never grant mknod, never
//! create a cgroup or a file, and never attach a device program to a cgroup
//! that had none.
//!
//! A systemd `daemon-reload` regenerates the device rules of the cgroups it
//! manages and drops ours (NVIDIA's "Failed to initialize NVML: Unknown
//! Error"); CDI avoids that by putting the devices in the container spec.

// The raw bpf(2) calls live in `crate::sys::bpf`.
#![forbid(unsafe_code)]

mod bpf_sys;
mod discovery;
mod eval;
/// The v2 device program as pure data; public for the benchmarks.
pub mod program;
mod v1;
mod v2;

#[cfg(test)]
mod root_tests;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use crate::planning::plan::CgroupRule;
use crate::util::bounded_read;
use discovery::Hierarchy;

/// Why a grant failed; every variant names what it acted on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The container's init exited before its cgroups were read.
    #[error("process {pid} is gone ({path} does not exist)")]
    ProcessGone { pid: u32, path: PathBuf },
    /// The container's init exited while its cgroups were read: the pid may
    /// name another process by now.
    #[error("process {pid} exited while {path} was read; its pid may name another process now, so nothing was granted")]
    NotHeld { pid: u32, path: PathBuf },
    /// A proc file could not be read.
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    /// A proc file did not have the kernel's format.
    #[error("{path}: malformed line {line:?}")]
    Malformed { path: PathBuf, line: String },
    /// A rule that names no single device or grants mknod.
    #[error("cannot grant `{rule}`: {reason}")]
    UnsupportedRule {
        rule: CgroupRule,
        reason: &'static str,
    },
    /// The hierarchy is mounted, but no visible mount shows the container's cgroup.
    #[error("{hierarchy} cgroup {cgroup} of process {pid} is below none of the visible mounts {mounts:?}")]
    CgroupNotVisible {
        pid: u32,
        hierarchy: &'static str,
        cgroup: PathBuf,
        mounts: Vec<PathBuf>,
    },
    /// The container's cgroup directory does not exist (any more).
    #[error("cgroup directory {path} does not exist")]
    CgroupDirMissing { path: PathBuf },
    /// The container's cgroup directory could not be opened.
    #[error("cannot open cgroup directory {path}: {errno}")]
    OpenCgroupDir { path: PathBuf, errno: Errno },
    /// The cgroup's control file is read-only to us.
    #[error("{path} is not writable: {errno}")]
    NotWritable { path: PathBuf, errno: Errno },
    /// The kernel refused a v1 rule.
    #[error("cannot write `{rule}` to {path}: {errno}")]
    WriteRule {
        path: PathBuf,
        rule: CgroupRule,
        errno: Errno,
    },
    /// A `bpf(2)` command on the cgroup failed.
    #[error("{cmd} on cgroup {path}: {errno}")]
    BpfCgroup {
        cmd: &'static str,
        path: PathBuf,
        errno: Errno,
    },
    /// A `bpf(2)` command about one attached program failed.
    #[error("{cmd} for device program {id} of cgroup {path}: {errno}")]
    BpfProgram {
        cmd: &'static str,
        id: u32,
        path: PathBuf,
        errno: Errno,
    },
    /// An attached program cannot be reloaded from the kernel's dump.
    #[error("device program {id} of cgroup {path} cannot be extended: {reason}")]
    ProgramNotReusable {
        id: u32,
        path: PathBuf,
        reason: String,
    },
    /// A program of an ancestor cgroup applies to the container and denies a
    /// rule (or cannot be read): ours, at the container's cgroup, cannot override it.
    #[error("{} restricts devices with a BPF program the hook cannot extend: its program {id} {reason}; allow the devices in that cgroup", whose(.ancestor, .path))]
    AncestorRestricts {
        ancestor: Ancestor,
        path: PathBuf,
        id: u32,
        reason: String,
    },
    /// The cgroup's only program (no `multi`) changed while the hook swapped
    /// it: the runtime is changing the rules concurrently, so nothing is granted.
    #[error("device programs of cgroup {path} changed {when}: expected only program {expected}, found {found:?}; not granting")]
    ProgramChanged {
        path: PathBuf,
        expected: u32,
        found: Vec<u32>,
        when: &'static str,
    },
    /// The verifier rejected the extended program.
    #[error("BPF_PROG_LOAD of device program {id} extended for cgroup {path}: {errno}; verifier log: {log}")]
    Load {
        id: u32,
        path: PathBuf,
        errno: Errno,
        log: String,
    },
}

/// Where a restricting program of an ancestor cgroup is attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ancestor {
    /// A visible ancestor cgroup directory.
    Dir(PathBuf),
    /// A cgroup above this mount's root, which the hook cannot see.
    AboveMount(PathBuf),
    /// An ancestor that could not be read while looking for it.
    Unknown,
}

/// The error's subject: which cgroup restricts, and whose ancestor it is.
fn whose(ancestor: &Ancestor, path: &Path) -> String {
    match ancestor {
        Ancestor::Dir(dir) => format!(
            "device cgroup {} (an ancestor of the container's {})",
            dir.display(),
            path.display()
        ),
        Ancestor::AboveMount(mount) => format!(
            "a device cgroup above {} (out of the hook's view; an ancestor of the container's {})",
            mount.display(),
            path.display()
        ),
        Ancestor::Unknown => format!("an ancestor of the container's {}", path.display()),
    }
}

/// Result of granting devices.
pub type Result<T> = std::result::Result<T, Error>;

/// What was changed, for the log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The rules were written to `<dir>/devices.allow`.
    V1 { dir: PathBuf },
    /// `replaced` device programs of `dir` were swapped for extended ones.
    V2 { dir: PathBuf, replaced: usize },
    /// `dir` has no device program of its own, and the `programs` of its
    /// ancestors that apply already allow every rule: nothing was changed.
    V2AllowedAbove { dir: PathBuf, programs: usize },
    /// No device controller restricts this container: nothing was changed.
    Unrestricted,
}

impl fmt::Display for Outcome {
    /// One phrase for the hook's log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::V1 { dir } => write!(f, "cgroup v1 rules written to {}", dir.display()),
            Outcome::V2 { dir, replaced } => write!(
                f,
                "{replaced} cgroup v2 device program(s) of {} extended",
                dir.display()
            ),
            Outcome::V2AllowedAbove { dir, programs } => write!(
                f,
                "{programs} cgroup v2 device program(s) of ancestors of {} already allow the devices",
                dir.display()
            ),
            Outcome::Unrestricted => f.write_str("no device cgroup restricts the container"),
        }
    }
}

/// Grants `rules` to the container whose init is `pid`, reading `<proc>/<pid>/cgroup` and `<proc>/self/mountinfo` (proc is normally "/proc").
///
/// With no rules nothing is read and no outcome is returned.
pub fn allow(proc: &Path, pid: u32, rules: &[CgroupRule]) -> Result<Vec<Outcome>> {
    allow_held(proc, pid, rules, &|| true)
}

/// [`allow`], where `held` says whether `pid` is still the process the
/// caller checked (a pidfd it holds is alive). It is asked once
/// `<pid>/cgroup` was read and before anything changes: a pid cannot be
/// reused while its process exists, so the cgroups read were that
/// process's, and another process's cgroup is never granted.
pub fn allow_held(
    proc: &Path,
    pid: u32,
    rules: &[CgroupRule],
    held: &dyn Fn() -> bool,
) -> Result<Vec<Outcome>> {
    // Refuse bad rules before touching anything, the same way for v1 and v2.
    for rule in rules {
        program::rule_bits(rule).map_err(|reason| Error::UnsupportedRule {
            rule: *rule,
            reason,
        })?;
    }
    if rules.is_empty() {
        return Ok(Vec::new());
    }

    let cgroup_path = proc.join(pid.to_string()).join("cgroup");
    let text = match bounded_read::read_text(&cgroup_path) {
        Ok(text) => text,
        Err(e) if e.raw_os_error().is_some_and(is_gone) => {
            return Err(Error::ProcessGone {
                pid,
                path: cgroup_path,
            })
        }
        Err(source) => {
            return Err(Error::Read {
                path: cgroup_path,
                source,
            })
        }
    };
    if !held() {
        return Err(Error::NotHeld {
            pid,
            path: cgroup_path,
        });
    }
    let memberships = discovery::parse_memberships(&text).map_err(|line| Error::Malformed {
        path: cgroup_path.clone(),
        line,
    })?;
    let mountinfo_path = proc.join("self/mountinfo");
    let mountinfo = bounded_read::read_text(&mountinfo_path).map_err(|source| Error::Read {
        path: mountinfo_path.clone(),
        source,
    })?;
    let mounts = discovery::parse_mountinfo(&mountinfo).map_err(|line| Error::Malformed {
        path: mountinfo_path,
        line,
    })?;

    let mut outcomes = Vec::new();
    if let Some(cgroup) = discovery::membership(&memberships, Hierarchy::V1Devices) {
        let dir = discovery::open_cgroup_dir(proc, &mounts, Hierarchy::V1Devices, pid, cgroup)?;
        if let Some(dir) = dir {
            v1::allow(&dir, rules)?;
            outcomes.push(Outcome::V1 { dir: dir.path });
        }
    }
    if let Some(cgroup) = discovery::membership(&memberships, Hierarchy::V2) {
        let dir = discovery::open_cgroup_dir(proc, &mounts, Hierarchy::V2, pid, cgroup)?;
        if let Some(dir) = dir {
            match v2::allow(&dir, rules)? {
                v2::Grant::Extended { replaced } => outcomes.push(Outcome::V2 {
                    dir: dir.path,
                    replaced,
                }),
                v2::Grant::AllowedAbove { programs } => outcomes.push(Outcome::V2AllowedAbove {
                    dir: dir.path,
                    programs,
                }),
                v2::Grant::Unrestricted => {
                    log::debug!("{}: no device program applies", dir.path.display());
                }
            }
        }
    }
    if outcomes.is_empty() {
        log::info!("pid {pid}: no device cgroup restricts the container; nothing to grant");
        outcomes.push(Outcome::Unrestricted);
    }
    Ok(outcomes)
}

/// A proc read that fails this way means the process exited.
fn is_gone(raw: i32) -> bool {
    raw == Errno::ENOENT as i32 || raw == Errno::ESRCH as i32
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn rule(access: &'static str) -> CgroupRule {
        CgroupRule {
            kind: 'c',
            major: 195,
            minor: 0,
            access,
        }
    }

    /// A fake proc: `<pid>/cgroup` and `self/mountinfo`.
    fn fake_proc(pid: u32, cgroup: &str, mountinfo: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join(pid.to_string())).unwrap();
        fs::create_dir_all(dir.path().join("self")).unwrap();
        fs::write(dir.path().join(format!("{pid}/cgroup")), cgroup).unwrap();
        fs::write(dir.path().join("self/mountinfo"), mountinfo).unwrap();
        dir
    }

    #[test]
    fn dead_pid_is_an_error_naming_the_pid() {
        let proc = fake_proc(1, "0::/\n", "");

        let err = allow(proc.path(), 424242, &[rule("rw")]).unwrap_err();

        assert!(
            matches!(err, Error::ProcessGone { pid: 424242, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("424242"));
    }

    #[test]
    fn refuses_mknod_before_reading_anything() {
        let err = allow(Path::new("/nonexistent"), 1, &[rule("rwm")]).unwrap_err();

        assert!(matches!(err, Error::UnsupportedRule { .. }), "{err}");
        assert!(err.to_string().contains("c 195:0 rwm"));
    }

    #[test]
    fn mounts_that_are_not_really_cgroupfs_restrict_nothing() {
        let scratch = tempfile::tempdir().unwrap();
        let mp = scratch.path().display();
        let mountinfo = format!(
            "36 31 0:33 / {mp} rw - cgroup cgroup rw,devices\n41 31 0:38 / {mp} rw - cgroup2 cgroup2 rw\n"
        );
        let proc = fake_proc(7, "5:devices:/ctr\n0::/ctr\n", &mountinfo);

        let outcomes = allow(proc.path(), 7, &[rule("rw")]).unwrap();

        assert_eq!(outcomes, [Outcome::Unrestricted]);
    }

    #[test]
    fn malformed_cgroup_file_names_the_file_and_line() {
        let proc = fake_proc(7, "nonsense\n", "");

        let err = allow(proc.path(), 7, &[rule("rw")]).unwrap_err();

        assert!(err.to_string().contains("7/cgroup"), "{err}");
        assert!(err.to_string().contains("nonsense"), "{err}");
    }

    #[test]
    fn no_rules_changes_nothing() {
        assert_eq!(allow(Path::new("/nonexistent"), 1, &[]).unwrap(), []);
    }
}

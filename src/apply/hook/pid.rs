//! Which process the hook was told to act on, and whether it may: the
//! container's init, created by the runtime that runs this hook and not yet
//! pivoted into its rootfs. The hook changes that process's device cgroup
//! and mount namespace, so it must never accept any other: not pid 1's
//! orphans (a service in a private mount namespace looks like a container
//! being created), and not a process that took a checked pid after the
//! checked one died.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rustix::io::Errno;
use rustix::process::{pidfd_open, Pid, PidfdFlags};

use super::{Error, Result};
use crate::sys::process::{is_held, start_time, Hold};

/// Refuses a `pid` that cannot be a container being created.
///
/// When it shares this process's mount namespace, this is the
/// `createContainer` stage. Refusing it keeps the hook from changing a
/// namespace it is already in, but it is no defence against
/// CVE-2025-23266: a dynamically linked hook started there under the
/// image's environment has run the image's `LD_PRELOAD` before `main`.
/// The defence is the explicit `env` of every hook entry this project ships
/// or writes (`tests/hook_entries.rs`). When its root is not
/// this process's, it has already pivoted into a rootfs: a running
/// container or some other process, never one at `prestart`/`createRuntime`,
/// which run before `pivot_root`.
///
/// Returns the process held, by a pidfd taken before the checks (or, before
/// Linux 5.3, which has no pidfds, by its start time read before them) and
/// found still held after them, so that the checks were about it, and
/// entering its mount namespace enters the one checked.
pub(super) fn refuse_inside_container(proc: &Path, pid: u32) -> Result<Held> {
    let held = hold(proc, pid)?;
    check(proc, pid)?;
    still_held(proc, pid, held.hold())?;
    Ok(held)
}

/// A container's init, checked to be one being created, and held.
#[derive(Debug)]
pub(super) struct Held {
    /// Its pid, in this process's pid namespace.
    pub pid: u32,
    /// How it is held.
    grip: Grip,
}

/// How a [`Held`] process is held.
#[derive(Debug)]
enum Grip {
    Pidfd(OwnedFd),
    /// Its start time, where the kernel has no pidfds.
    Started(u64),
}

impl Held {
    /// What tells the process is still the one checked.
    pub fn hold(&self) -> Hold<'_> {
        match &self.grip {
            Grip::Pidfd(fd) => Hold::Pidfd(fd.as_fd()),
            Grip::Started(time) => Hold::Started(*time),
        }
    }

    /// A process of the tests, held by a start time no process has.
    #[cfg(test)]
    pub fn fake(pid: u32) -> Held {
        Held {
            pid,
            grip: Grip::Started(u64::MAX),
        }
    }
}

/// Fails unless the process `hold` holds is still process `pid`, so that
/// what was read of `/proc/<pid>` since it was taken was about that process
/// and not one that recycled its pid.
pub(super) fn still_held(proc: &Path, pid: u32, hold: Hold<'_>) -> Result<()> {
    let alive = is_held(proc, pid, hold).map_err(|source| Error::Inspect {
        path: proc.join(pid.to_string()),
        source,
    })?;
    if alive {
        Ok(())
    } else {
        Err(Error::DeadPid { pid })
    }
}

/// Holds `pid`: by a pidfd, or by its start time where the kernel has no
/// `pidfd_open`.
fn hold(proc: &Path, pid: u32) -> Result<Held> {
    let Some(raw) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return Err(Error::DeadPid { pid });
    };
    let grip = match pidfd_open(raw, PidfdFlags::empty()) {
        Ok(fd) => Grip::Pidfd(fd),
        Err(Errno::SRCH) => return Err(Error::DeadPid { pid }),
        Err(Errno::NOSYS) => {
            log::debug!("no pidfd_open (Linux < 5.3): process {pid} is held by its start time");
            let started = start_time(proc, pid).map_err(|source| Error::Inspect {
                path: proc.join(pid.to_string()).join("stat"),
                source,
            })?;
            Grip::Started(started.ok_or(Error::DeadPid { pid })?)
        }
        Err(errno) => {
            return Err(Error::Inspect {
                path: proc.join(pid.to_string()),
                source: io::Error::other(format!("pidfd_open: {errno}")),
            })
        }
    };
    Ok(Held { pid, grip })
}

/// The checks themselves, on `/proc/<pid>`.
fn check(proc: &Path, pid: u32) -> Result<()> {
    let theirs = |what: &str| -> Result<std::fs::Metadata> {
        let path = proc.join(pid.to_string()).join(what);
        std::fs::metadata(&path).map_err(|source| match source.kind() {
            io::ErrorKind::NotFound => Error::DeadPid { pid },
            _ => Error::Inspect { path, source },
        })
    };
    let ours = |what: &str| -> Result<std::fs::Metadata> {
        let path = proc.join("self").join(what);
        std::fs::metadata(&path).map_err(|source| Error::Inspect { path, source })
    };
    let same =
        |a: &std::fs::Metadata, b: &std::fs::Metadata| (a.dev(), a.ino()) == (b.dev(), b.ino());
    if same(&theirs("ns/mnt")?, &ours("ns/mnt")?) {
        return Err(Error::InsideContainer { pid });
    }
    if !same(&theirs("root/")?, &ours("root/")?) {
        return Err(Error::NotCreating { pid });
    }
    // runc, crun and the runtimes built like them run hooks from the very
    // process that started the container's init, possibly through a wrapper
    // (a shell, strace): the init's parent is one of the hook's ancestors.
    let parent_pid = |p: u32| -> Result<u32> {
        let path = proc.join(p.to_string()).join("stat");
        let stat =
            crate::util::bounded_read::read_text(&path).map_err(|source| match source.kind() {
                io::ErrorKind::NotFound if p == pid => Error::DeadPid { pid: p },
                // An ancestor of the hook (a wrapper) that exited: not the container.
                io::ErrorKind::NotFound => Error::AncestorGone { pid: p },
                _ => Error::Inspect {
                    path: path.clone(),
                    source,
                },
            })?;
        parent_of(&stat).ok_or_else(|| Error::Inspect {
            path,
            source: io::Error::other("no parent pid in it"),
        })
    };
    // Pid 1 never counts as the runtime or a wrapper: it is every orphan's
    // parent, so the walk stops below it.
    let parent = parent_pid(pid)?;
    let runtime = nix::unistd::getppid().as_raw() as u32;
    let mut ancestor = runtime;
    for _ in 0..MAX_WRAPPERS {
        if ancestor <= 1 {
            break;
        }
        if ancestor == parent {
            return Ok(());
        }
        ancestor = parent_pid(ancestor)?;
    }
    Err(Error::NotSibling {
        pid,
        parent,
        runtime,
    })
}

/// How many wrapper processes may stand between the runtime and the hook.
const MAX_WRAPPERS: usize = 8;

/// The parent pid in a `/proc/<pid>/stat` line; the command name before it
/// may hold spaces and parentheses, so fields count from the last `)`.
fn parent_of(stat: &str) -> Option<u32> {
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC: &str = "/proc";

    #[test]
    fn refuses_to_run_in_its_own_mount_namespace() {
        // Our own pid shares our mount namespace, as a container's would at createContainer.
        let err = refuse_inside_container(Path::new(PROC), std::process::id()).unwrap_err();
        assert!(matches!(err, Error::InsideContainer { .. }), "{err}");
        assert!(err.to_string().contains("createContainer"));
    }

    #[test]
    fn reads_the_parent_from_stat() {
        assert_eq!(parent_of("42 (runc:[2:INIT]) S 41 42 1 0 -1"), Some(41));
        assert_eq!(parent_of("7 (a) b) (c) R 3 7 7"), Some(3));
        assert_eq!(parent_of("garbage"), None);
    }

    #[test]
    fn dead_pid_is_named() {
        let err = refuse_inside_container(Path::new(PROC), 999_999_999).unwrap_err();
        assert!(err.to_string().contains("999999999"), "{err}");
    }
}

//! Programs that engine configs name, found as the engine finds them:
//! absolute paths, or names looked up on a `PATH` as Go's `exec.LookPath`
//! does, inside a root (a process's `/proc/<pid>/root`, the host root),
//! and whether each is oci-nvidia-hook. Nothing is executed.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::hooks::is_this_program;
use super::{Check, HostRoot, Layer};
use crate::host::driver::DriverRoot;
use crate::util::this_program::SYSTEM_PATH;

const L: Layer = Layer::Wiring;

/// A name found on a `PATH`: the entry's path there, and whether it is ours.
pub(super) struct Found {
    /// The path on the `PATH` (as the process sees it).
    pub shown: String,
    /// The file on this machine.
    pub host: std::path::PathBuf,
    /// Whether it is oci-nvidia-hook.
    pub ours: bool,
}

/// Looks `name` up on `path_var` (a `PATH` value) inside `root`, as Go's
/// `exec.LookPath` does: the first executable regular file wins.
pub(super) fn look_path(root: &DriverRoot, path_var: &str, name: &str) -> Option<Found> {
    path_var
        .split(':')
        .filter(|d| d.starts_with('/'))
        .find_map(|dir| {
            let inner = Path::new(dir).join(name);
            let resolved = root.resolve(&inner).ok()?;
            let executable = resolved.metadata.is_file() && resolved.metadata.mode() & 0o111 != 0;
            executable.then(|| Found {
                shown: inner.display().to_string(),
                ours: is_this_program(&resolved.host)
                    || resolved
                        .inner
                        .file_name()
                        .is_some_and(|n| n == "oci-nvidia-hook"),
                host: resolved.host,
            })
        })
}

/// A program a config names, absolute or looked up on `path_var`, inside `root`.
pub(super) fn find_program(root: &DriverRoot, path_var: &str, program: &str) -> Option<Found> {
    if !program.starts_with('/') {
        return look_path(root, path_var, program);
    }
    root.resolve(Path::new(program)).ok().map(|r| Found {
        shown: program.to_string(),
        ours: is_this_program(&r.host)
            || r.inner.file_name().is_some_and(|n| n == "oci-nvidia-hook"),
        host: r.host,
    })
}

/// A CRI runtime handler (containerd's or CRI-O's), as one check named
/// `check`: the `program` it runs found (ours or not), or a failure whose
/// remedy ends with `fix`. Whether it runs oci-nvidia-hook.
pub(super) fn runtime_handler(
    host: &HostRoot,
    check: &str,
    handler: (&str, bool),
    program: &str,
    fix: &str,
    out: &mut Vec<Check>,
) -> bool {
    let (name, default) = handler;
    let default = if default {
        " (the default: every pod runs it)"
    } else {
        ""
    };
    match find_program(&DriverRoot::new(host.root()), SYSTEM_PATH, program) {
        None => {
            out.push(Check::fail(
                L,
                check,
                format!(
                    "runtime handler {name:?}{default} runs {program}, which is not found: \
                     pods of its RuntimeClass fail"
                ),
                format!(
                    "`make install` (it links /usr/local/bin/nvidia-container-runtime to \
                     oci-nvidia-hook), or {fix}"
                ),
            ));
            false
        }
        Some(found) => {
            let whose = if found.ours {
                "oci-nvidia-hook"
            } else {
                "not oci-nvidia-hook"
            };
            out.push(Check::ok(
                L,
                check,
                format!(
                    "runtime handler {name:?}{default} → {} ({whose})",
                    found.host.display()
                ),
            ));
            found.ours
        }
    }
}

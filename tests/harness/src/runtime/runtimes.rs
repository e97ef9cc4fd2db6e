//! The runtimes under test and how each is invoked on these machines
//! (shared/TESTBED.md): runc on the host's hybrid cgroups (v1 devices) or
//! in a private mount namespace with cgroup2 on /sys/fs/cgroup, crun in a
//! private pure-v1 namespace, Podman with runc or crun. Builds command
//! lines only: never quotes anything into a shell string, never runs them.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::oci_config::path_str;

/// A runtime, set up the way it works on these machines (TESTBED.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// runc on the host's hybrid hierarchy: the v1 devices controller.
    RuncV1,
    /// runc in a private mount namespace with cgroup2 mounted on
    /// /sys/fs/cgroup: device rules are a BPF program.
    RuncV2,
    /// crun refuses hybrid mode, so the cgroup2 mount is dropped in a
    /// private mount namespace: pure v1.
    CrunV1,
    /// podman with runc and the cgroupfs manager, the hook from a hooks dir.
    Podman,
    /// podman with crun, in the same pure-v1 namespace as `CrunV1`.
    PodmanCrunV1,
}

impl Runtime {
    /// The runtime's name in test and container names.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::RuncV1 => "runc-v1",
            Runtime::RuncV2 => "runc-v2",
            Runtime::CrunV1 => "crun-v1",
            Runtime::Podman => "podman",
            Runtime::PodmanCrunV1 => "podman-crun-v1",
        }
    }

    /// Podman takes its hook from a hooks dir, not from `config.json`.
    pub fn is_podman(self) -> bool {
        matches!(self, Runtime::Podman | Runtime::PodmanCrunV1)
    }

    /// The tools this runtime needs on PATH.
    pub fn tools(self) -> &'static [&'static str] {
        match self {
            Runtime::RuncV1 => &["runc"],
            Runtime::RuncV2 => &["runc", "unshare", "mount"],
            Runtime::CrunV1 => &["crun", "unshare", "umount"],
            Runtime::Podman => &["podman", "runc"],
            Runtime::PodmanCrunV1 => &["podman", "crun", "unshare", "umount"],
        }
    }

    /// Panics naming the first of [`Runtime::tools`] missing from PATH.
    pub fn require_tools(self) {
        for tool in self.tools() {
            require_tool(tool);
        }
    }

    /// `argv` run inside the mount namespace this runtime needs. The runtime
    /// command is passed as arguments to `sh -c '…; exec "$@"'`, so nothing
    /// is ever quoted into a shell string.
    pub fn in_namespace(self, argv: Vec<String>) -> Command {
        let setup = match self {
            Runtime::RuncV1 | Runtime::Podman => None,
            Runtime::RuncV2 => Some("mount -t cgroup2 none /sys/fs/cgroup"),
            Runtime::CrunV1 | Runtime::PodmanCrunV1 => Some("umount /sys/fs/cgroup/unified"),
        };
        match setup {
            None => {
                let mut cmd = Command::new(&argv[0]);
                cmd.args(&argv[1..]);
                cmd
            }
            Some(setup) => {
                let mut cmd = Command::new("unshare");
                cmd.args(["-m", "--propagation", "private", "sh", "-c"])
                    .arg(format!("{setup} && exec \"$@\""))
                    .arg("sh")
                    .args(argv);
                cmd
            }
        }
    }

    /// podman's global options (TESTBED.md: this machine cannot raise
    /// default rlimits, so they are given explicitly in `run`).
    pub fn podman_globals(self, hooks_dir: &Path) -> Vec<String> {
        let oci = if self == Runtime::PodmanCrunV1 {
            "crun"
        } else {
            "runc"
        };
        vec![
            "podman".into(),
            "--runtime".into(),
            oci.into(),
            "--cgroup-manager=cgroupfs".into(),
            "--events-backend=file".into(),
            "--hooks-dir".into(),
            path_str(hooks_dir),
        ]
    }

    /// The runtime's command line that runs container `id`: runc's or
    /// crun's `run` of the bundle `bundle_dir` (`podman` is the caller's,
    /// see [`podman_run_args`]).
    pub fn run_argv(self, state_root: &Path, bundle_dir: &Path, id: &str) -> Vec<String> {
        let state = path_str(state_root);
        let bundle = path_str(bundle_dir);
        let program = match self {
            Runtime::RuncV1 | Runtime::RuncV2 => "runc",
            Runtime::CrunV1 => "crun",
            Runtime::Podman | Runtime::PodmanCrunV1 => {
                panic!("podman runs no bundle: build its command with podman_run_args")
            }
        };
        strings(&[program, "--root", &state, "run", "--bundle", &bundle, id])
    }

    /// The command line that removes container `id`, whatever state it is
    /// in; removing one already gone is a harmless error.
    pub fn delete_argv(self, state_root: &Path, hooks_dir: &Path, id: &str) -> Vec<String> {
        let state = path_str(state_root);
        match self {
            Runtime::RuncV1 | Runtime::RuncV2 => {
                strings(&["runc", "--root", &state, "delete", "-f", id])
            }
            Runtime::CrunV1 => strings(&["crun", "--root", &state, "delete", "-f", id]),
            Runtime::Podman | Runtime::PodmanCrunV1 => {
                let mut argv = self.podman_globals(hooks_dir);
                argv.extend(strings(&["rm", "-f", "--ignore", id]));
                argv
            }
        }
    }
}

/// `podman run`'s arguments (after the globals) for container `id` on
/// `rootfs`, with the bundle's `out/` at /out, the container's `env`, and
/// `extra` options (say `--uidmap`), running `argv`.
pub fn podman_run_args(
    id: &str,
    out_dir: &Path,
    env: &[(&str, &str)],
    extra: &[String],
    rootfs: &Path,
    argv: &[&str],
) -> Vec<String> {
    let mut args = strings(&[
        "run",
        "--rm",
        "--name",
        id,
        "--ulimit",
        "nofile=20000:20000",
        "--ulimit",
        "nproc=1000:1000",
        "--network=none",
        "--volume",
        &format!("{}:/out", path_str(out_dir)),
    ]);
    for (k, v) in env {
        args.push("--env".into());
        args.push(format!("{k}={v}"));
    }
    args.extend(extra.iter().cloned());
    args.extend(strings(&["--rootfs", &path_str(rootfs)]));
    args.extend(strings(argv));
    args
}

/// Panics naming the missing tool: a missing runtime must fail, never skip.
pub fn require_tool(tool: &str) {
    assert!(
        find_tool(tool).is_some(),
        "`{tool}` is not on PATH: install it with integration/install-deps (or `make test`)"
    );
}

/// Where `tool` is on PATH, if it is.
pub fn find_tool(tool: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

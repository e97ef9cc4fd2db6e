//! The live check (`doctor --run`): a throwaway container started through
//! this host's runc with the hook as installed (the hooks.d file engines
//! read, else the hook dockerd finds), from a minimal rootfs built here out
//! of host files, each bind-mounted read-only: the dynamic loader, the C
//! library (and the glibc pieces driver libraries need) and this very
//! binary, which runs inside as `doctor --inside` ([`super::inside`]).
//!
//! Nothing of any image is used or executed. Whatever happens (a failing
//! hook, a hung container, SIGINT/SIGTERM/SIGHUP meanwhile) the container,
//! its cgroups, runc's state and the rootfs are removed before doctor
//! reports, and the report says whether anything was left.

use std::fs::{self, File};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{killpg, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::statfs::{statfs, CGROUP2_SUPER_MAGIC};
use nix::unistd::Pid;
use serde_json::json;

use super::hooks::InstalledHook;
use super::inside::Seen;
use super::{Check, Error, HostFacts, Layer};
use crate::host::elf::Arch;
use crate::host::ldcache::LdCache;

const L: Layer = Layer::Live;

/// How long the container may take, hook included.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the binary appears in the container.
const INSIDE_BINARY: &str = "/oci-nvidia-hook-doctor";

/// The C library pieces copied in: libc, and what NVIDIA's libcuda and NVML
/// link (on glibc 2.34 and later the last four are stubs, but must exist).
const GLIBC: &[&str] = &[
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
];

/// The cgroup hierarchies' mount point.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Runs the container and reports what it saw, then what was cleaned up.
pub(super) fn check(hook: Option<&InstalledHook>, facts: &HostFacts, out: &mut Vec<Check>) {
    let Some(hook) = hook else {
        out.push(Check::fail(
            L,
            "container",
            "not started: no hooks.d file runs oci-nvidia-hook correctly, and no dockerd \
             finds it, so there is no installed hook to start it through",
            "fix the runtime wiring layer first",
        ));
        return;
    };
    let Some(runc) = find_runc() else {
        out.push(Check::fail(
            L,
            "container",
            {
                let dirs: Vec<&str> = crate::util::this_program::system_dirs().collect();
                let (last, rest) = dirs.split_last().unwrap_or((&"", &[]));
                format!("not started: no runc in {} or {last}", rest.join(", "))
            },
            "install runc (`apt-get install runc`)",
        ));
        return;
    };
    let work = match Work::create() {
        Ok(work) => work,
        Err(e) => {
            out.push(Check::fail(
                L,
                "container",
                format!("not started: cannot make a scratch directory: {e}"),
                "run doctor as root, with a writable /tmp (or TMPDIR)",
            ));
            return;
        }
    };
    let outcome = work.prepare(hook).and_then(|()| {
        work.run(&runc).map_err(|source| Error::Runc {
            runc: runc.clone(),
            source,
        })
    });
    let left = work.clean_up(&runc);
    let cgroup = if cgroup2() { "v2" } else { "v1" };
    match outcome {
        Err(e) => out.push(Check::fail(
            L,
            "container",
            e.to_string(),
            "fix what the message names; `oci-nvidia-hook list` shows what the hook would \
             inject",
        )),
        Ok(Ran::Interrupted) => out.push(Check::fail(
            L,
            "container",
            "interrupted by a signal: the container was stopped and removed",
            "run `doctor --run` again and let it finish",
        )),
        Ok(Ran::TimedOut) => out.push(Check::fail(
            L,
            "container",
            format!(
                "no result within {} s: the hook or the container hung, and was killed",
                RUN_TIMEOUT.as_secs()
            ),
            "a hung driver (`dmesg | grep NVRM`), or a hook waiting on NVML: see the \
             hook's log (config [log] file)",
        )),
        Ok(Ran::Exited {
            success,
            stdout,
            stderr,
        }) => report(hook, &runc, cgroup, success, &stdout, &stderr, facts, out),
    }
    match left {
        Ok(()) => out.push(Check::ok(
            L,
            "clean-up",
            "the container, its cgroups, runc's state and the rootfs are gone",
        )),
        Err(left) => out.push(Check::fail(
            L,
            "clean-up",
            format!("left behind: {}", left.join(", ")),
            "remove them by hand (`runc delete --force`, `rmdir` the cgroups, `rm -r` the \
             directory)",
        )),
    }
}

/// What the container run came to.
enum Ran {
    Exited {
        success: bool,
        stdout: String,
        stderr: String,
    },
    TimedOut,
    Interrupted,
}

/// Turns the container's report into checks.
#[allow(clippy::too_many_arguments)] // one caller; each argument is another fact
fn report(
    hook: &InstalledHook,
    runc: &Path,
    cgroup: &str,
    success: bool,
    stdout: &str,
    stderr: &str,
    facts: &HostFacts,
    out: &mut Vec<Check>,
) {
    let seen: Option<Seen> = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok());
    let (true, Some(seen)) = (success, seen) else {
        let why = hook_message(stderr);
        out.push(Check::fail(
            L,
            "container",
            format!(
                "{} failed to start a container through {}'s hook: {}",
                runc.display(),
                hook.source,
                crate::util::error_line::escape_controls(&why)
            ),
            "the hook's message names the cause; `oci-nvidia-hook list` shows what it \
             would inject",
        ));
        return;
    };
    out.push(Check::ok(
        L,
        "container",
        format!(
            "{} (cgroup {cgroup}) ran a container through {} at {}",
            runc.display(),
            hook.source,
            hook.stage
        ),
    ));
    nodes(&seen, out);
    libcuda(&seen, facts, out);
    match (seen.nvml_devices, &seen.nvml_error) {
        (Some(count), _) => out.push(Check::ok(
            L,
            "NVML",
            format!("libnvidia-ml.so.1 counts {count} GPUs"),
        )),
        (None, error) => out.push(Check::warn(
            L,
            "NVML",
            format!(
                "NVML does not start in the container: {}",
                error.as_deref().unwrap_or("no answer")
            ),
            "nvidia-smi fails there too: the driver must be loaded with its GPUs \
             (host driver layer; a simulated host has none)",
        )),
    }
}

/// The reason in runc's last error line: a failing hook's own line when
/// runc quotes one (`… error running hook #0: … stderr: <the hook's line>`).
fn hook_message(stderr: &str) -> String {
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no message from runc");
    match last.rsplit_once("stderr: ") {
        Some((_, hook)) => hook
            .trim_end_matches('"')
            .trim_end_matches("\\n")
            .trim()
            .to_string(),
        None => last.trim().to_string(),
    }
}

/// The device nodes the container has, and what opening them said.
fn nodes(seen: &Seen, out: &mut Vec<Check>) {
    let denied: Vec<String> = seen
        .nodes
        .iter()
        .filter(|n| n.open == "EPERM")
        .map(|n| n.path.display().to_string())
        .collect();
    let has_ctl = seen
        .nodes
        .iter()
        .any(|n| n.path == Path::new("/dev/nvidiactl"));
    if !denied.is_empty() {
        out.push(Check::fail(
            L,
            "device nodes",
            format!(
                "the device cgroup denies {} (EPERM): the hook's grant did not hold",
                denied.join(", ")
            ),
            "a `systemctl daemon-reload` or another program rewrote the device rules: \
             use CDI, whose devices are in the spec (docs/cdi.md)",
        ));
    } else if !has_ctl {
        out.push(Check::fail(
            L,
            "device nodes",
            "the container has no /dev/nvidiactl: the hook injected no GPU",
            "see the hook's log (config [log] file); `oci-nvidia-hook list` shows what it \
             would inject",
        ));
    } else {
        let opens: Vec<String> = seen
            .nodes
            .iter()
            .map(|n| {
                let name = n.path.strip_prefix("/dev").unwrap_or(&n.path);
                format!("{} {}", name.display(), n.open)
            })
            .collect();
        let none_answers = seen.nodes.iter().all(|n| n.open == "ENXIO");
        out.push(Check::ok(
            L,
            "device nodes",
            format!(
                "{}{}",
                opens.join(", "),
                if none_answers {
                    " (allowed by the cgroup; no GPU answers: a simulated host)"
                } else {
                    ""
                }
            ),
        ));
    }
}

/// libcuda as a CUDA program in the container loads it.
fn libcuda(seen: &Seen, facts: &HostFacts, out: &mut Vec<Check>) {
    match (seen.cuda_driver_version, facts.cuda) {
        (Some(inside), Some(host)) if inside != host.0 => out.push(Check::fail(
            L,
            "libcuda",
            format!(
                "libcuda.so.1 in the container reports {inside}, the host's driver {}: \
                 the loader finds another driver's library",
                host.0
            ),
            "see the hook's log: the image's own libcuda may shadow the injected one",
        )),
        (Some(inside), _) => out.push(Check::ok(
            L,
            "libcuda",
            format!(
                "libcuda.so.1 loads through the container's loader cache: \
                 cuDriverGetVersion = {inside}"
            ),
        )),
        (None, _) => out.push(Check::fail(
            L,
            "libcuda",
            format!(
                "libcuda.so.1 does not load in the container: {}",
                seen.cuda_error.as_deref().unwrap_or("no answer")
            ),
            "CUDA cannot start in containers: see the host driver layer and the hook's log",
        )),
    }
}

/// runc from the system directories, never the caller's `PATH`.
fn find_runc() -> Option<PathBuf> {
    crate::util::this_program::system_dirs()
        .map(|d| Path::new(d).join("runc"))
        .find(|p| p.is_file())
}

/// Whether `/sys/fs/cgroup` is the unified (v2) hierarchy.
fn cgroup2() -> bool {
    statfs(CGROUP_ROOT).is_ok_and(|s| s.filesystem_type() == CGROUP2_SUPER_MAGIC)
}

/// The scratch directory (bundle, rootfs, runc state) and the container's names.
struct Work {
    dir: PathBuf,
    id: String,
    cgroup: String,
}

impl Work {
    /// A fresh directory, private to root.
    fn create() -> std::io::Result<Work> {
        let template = std::env::temp_dir().join("oci-nvidia-hook-doctor.XXXXXX");
        let dir = nix::unistd::mkdtemp(&template)?;
        let id = format!("oci-nvidia-hook-doctor-{}", std::process::id());
        Ok(Work {
            dir,
            cgroup: format!("/{id}"),
            id,
        })
    }

    fn rootfs(&self) -> PathBuf {
        self.dir.join("bundle/rootfs")
    }

    fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// Builds the rootfs from host files and writes `config.json`.
    fn prepare(&self, hook: &InstalledHook) -> Result<(), Error> {
        let rootfs = self.rootfs();
        let host = Arch::host();
        let mkdir = |p: &Path| {
            fs::create_dir_all(p).map_err(|source| Error::Create {
                path: p.to_path_buf(),
                source,
            })
        };
        for dir in ["dev", "proc", "sys", "tmp", "etc"] {
            mkdir(&rootfs.join(dir))?;
        }
        mkdir(&self.state())?;
        // The loader at the path the binary names (PT_INTERP, fixed per ABI).
        let loader = match host.name {
            "aarch64" => "/lib/ld-linux-aarch64.so.1",
            _ => "/lib64/ld-linux-x86-64.so.2",
        };
        let mut binds = vec![PathBuf::from(loader)];
        let cache_path = Path::new("/etc/ld.so.cache");
        let cache = fs::read(cache_path).map_err(|source| Error::HostCache {
            path: cache_path.to_path_buf(),
            source,
        })?;
        let cache = LdCache::parse_where(&cache, |s| GLIBC.iter().any(|g| g.as_bytes() == s))
            .map_err(|source| Error::HostCacheParse {
                path: cache_path.to_path_buf(),
                source,
            })?;
        for soname in GLIBC {
            let entry = cache
                .entries
                .iter()
                .find(|e| e.soname == *soname && e.arch() == host.cache_flags);
            match entry {
                Some(entry) => binds.push(PathBuf::from(&entry.path)),
                None if *soname == "libc.so.6" => return Err(Error::NoLibc { soname }),
                None => {}
            }
        }
        let exe =
            crate::util::this_program::path().map_err(|source| Error::CurrentExe { source })?;
        // Host files are bind-mounted read-only, not copied: nothing to
        // copy, and they stay executable where $TMPDIR is mounted noexec.
        let mut mounts: Vec<(PathBuf, PathBuf)> =
            binds.into_iter().map(|p| (p.clone(), p)).collect();
        mounts.push((exe, PathBuf::from(INSIDE_BINARY)));
        for (_, target) in &mounts {
            let point = rootfs.join(target.strip_prefix("/").unwrap_or(target));
            if let Some(parent) = point.parent() {
                mkdir(parent)?;
            }
            File::create(&point).map_err(|source| Error::MountPoint {
                path: point.clone(),
                source,
            })?;
        }
        // The host's layout decides where the hook puts libraries, as for
        // an image of the host's own distribution.
        let debian = Path::new("/etc/debian_version");
        if debian.is_file() {
            fs::copy(debian, rootfs.join("etc/debian_version")).map_err(|source| Error::Copy {
                path: debian.to_path_buf(),
                source,
            })?;
        }
        let config = self.config(hook, &mounts);
        let text = serde_json::to_vec_pretty(&config).map_err(|source| Error::Encode { source })?;
        let path = self.dir.join("bundle/config.json");
        fs::write(&path, text).map_err(|source| Error::Write { path, source })
    }

    /// The container: `doctor --inside` asking for every GPU, the hook as installed.
    fn config(&self, hook: &InstalledHook, binds: &[(PathBuf, PathBuf)]) -> serde_json::Value {
        let mut entry = json!({
            "path": hook.path,
            "args": hook.args,
            "timeout": 30
        });
        if let Some(env) = &hook.env {
            entry["env"] = json!(env);
        }
        let caps = json!(["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]);
        let mut mounts = vec![
            json!({"destination": "/proc", "type": "proc", "source": "proc"}),
            json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
                   "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        ];
        mounts.extend(binds.iter().map(|(source, destination)| {
            json!({"destination": destination, "type": "bind", "source": source,
                   "options": ["bind", "ro", "nosuid", "nodev"]})
        }));
        json!({
            "ociVersion": "1.0.2",
            "process": {
                "terminal": false,
                "user": {"uid": 0, "gid": 0},
                "args": [INSIDE_BINARY, "doctor", "--inside"],
                "env": [
                    "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                    "NVIDIA_VISIBLE_DEVICES=all",
                    "NVIDIA_DRIVER_CAPABILITIES=utility,compute"
                ],
                "cwd": "/",
                "capabilities": {
                    "bounding": caps, "effective": caps, "permitted": caps
                },
                "noNewPrivileges": true
            },
            "root": {"path": "rootfs", "readonly": false},
            "hostname": "oci-nvidia-hook-doctor",
            "mounts": mounts,
            "hooks": { hook.stage.clone(): [entry] },
            "linux": {
                "cgroupsPath": self.cgroup,
                "resources": {"devices": [{"allow": false, "access": "rwm"}]},
                "namespaces": [
                    {"type": "pid"}, {"type": "network"}, {"type": "ipc"},
                    {"type": "uts"}, {"type": "mount"}
                ]
            }
        })
    }

    /// `runc run`, bounded in time; SIGINT, SIGTERM and SIGHUP stop it
    /// instead of doctor, so that clean-up still happens.
    fn run(&self, runc: &Path) -> std::io::Result<Ran> {
        let mut signals = SigSet::empty();
        for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
            signals.add(signal);
        }
        signals.thread_block()?;
        let result = self.run_blocked(runc, &signals);
        // Consume what arrived, so that unblocking does not kill doctor
        // before it reports.
        if let Ok(fd) = SignalFd::with_flags(&signals, SfdFlags::SFD_NONBLOCK) {
            while let Ok(Some(_)) = fd.read_signal() {}
        }
        signals.thread_unblock()?;
        result
    }

    fn run_blocked(&self, runc: &Path, signals: &SigSet) -> std::io::Result<Ran> {
        let interrupt =
            SignalFd::with_flags(signals, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        let stdout_path = self.dir.join("stdout");
        let stderr_path = self.dir.join("stderr");
        let mut child = Command::new(runc)
            .arg("--root")
            .arg(self.state())
            .args(["run", "--bundle"])
            .arg(self.dir.join("bundle"))
            .arg(&self.id)
            .env_clear()
            .env("PATH", crate::util::this_program::SYSTEM_PATH)
            .stdin(Stdio::null())
            .stdout(File::create(&stdout_path)?)
            .stderr(File::create(&stderr_path)?)
            // Its own process group: the terminal's ^C does not reach it,
            // and runc, the hook it runs and their children are killed as one.
            .process_group(0)
            .spawn()?;
        let kill = |child: &mut std::process::Child| {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        };
        let deadline = Instant::now() + RUN_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break Some(status);
            }
            if Instant::now() >= deadline {
                break None;
            }
            let mut fds = [PollFd::new(interrupt.as_fd(), PollFlags::POLLIN)];
            if poll(&mut fds, PollTimeout::from(10u16)).unwrap_or(0) > 0 {
                kill(&mut child);
                return Ok(Ran::Interrupted);
            }
        };
        let Some(status) = status else {
            kill(&mut child);
            return Ok(Ran::TimedOut);
        };
        let read = |p: &Path| {
            let data = fs::read(p).unwrap_or_default();
            String::from_utf8_lossy(&data[..data.len().min(1 << 20)]).into_owned()
        };
        Ok(Ran::Exited {
            success: status.success(),
            stdout: read(&stdout_path),
            stderr: read(&stderr_path),
        })
    }

    /// runc with this run's state directory, quietly.
    fn runc(&self, runc: &Path, args: &[&str]) -> std::io::Result<std::process::ExitStatus> {
        Command::new(runc)
            .arg("--root")
            .arg(self.state())
            .args(args)
            .env_clear()
            .env("PATH", crate::util::this_program::SYSTEM_PATH)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
    }

    /// Removes the container, its cgroups, runc's state and the directory;
    /// what could not be removed.
    fn clean_up(&self, runc: &Path) -> Result<(), Vec<String>> {
        let mut left = Vec::new();
        if self.state().join(&self.id).exists() {
            let _ = self.runc(runc, &["delete", "--force", &self.id]);
            if self.state().join(&self.id).exists() {
                left.push(format!(
                    "container {} (runc --root {})",
                    self.id,
                    self.state().display()
                ));
            }
        }
        for dir in self.cgroup_dirs() {
            if dir.exists() && remove_cgroup(&dir).is_err() {
                left.push(dir.display().to_string());
            }
        }
        if left.is_empty() {
            if let Err(e) = fs::remove_dir_all(&self.dir) {
                left.push(format!("{} ({e})", self.dir.display()));
            }
        } else {
            left.push(self.dir.display().to_string());
        }
        if left.is_empty() {
            Ok(())
        } else {
            Err(left)
        }
    }

    /// Where runc makes the container's cgroup: one directory on v2, one per
    /// v1 hierarchy (and the hybrid hosts' `unified`).
    fn cgroup_dirs(&self) -> Vec<PathBuf> {
        let rel = self.cgroup.trim_start_matches('/');
        if cgroup2() {
            return vec![Path::new(CGROUP_ROOT).join(rel)];
        }
        fs::read_dir(CGROUP_ROOT)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path().join(rel))
            .collect()
    }
}

/// How long a killed container's cgroup may take to empty.
const CGROUP_EMPTIES: Duration = Duration::from_secs(2);

/// Removes the cgroup directory `dir`. Its processes, just killed by `runc
/// delete --force`, may not all be gone yet, and the kernel refuses to
/// remove a cgroup that still has any (`EBUSY`): retried until it empties,
/// within [`CGROUP_EMPTIES`].
fn remove_cgroup(dir: &Path) -> std::io::Result<()> {
    let started = Instant::now();
    loop {
        match fs::remove_dir(dir) {
            Err(e)
                if e.raw_os_error() == Some(nix::libc::EBUSY)
                    && started.elapsed() < CGROUP_EMPTIES =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            done => return done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_hooks_own_line_out_of_runcs_error() {
        let runc = "time=\"2026-12-01T02:25:31Z\" level=error msg=\"runc run failed: unable to \
                    start container process: error during container init: error running hook \
                    #0: error running hook: exit status 1, stdout: , stderr: \
                    oci-nvidia-hook[18849]: error: device node /dev/nvidia-uvm cannot be used: \
                    it does not exist\\n\"\n";
        assert_eq!(
            hook_message(runc),
            "oci-nvidia-hook[18849]: error: device node /dev/nvidia-uvm cannot be used: it \
             does not exist"
        );
        assert_eq!(
            hook_message("runc: some other failure\n"),
            "runc: some other failure"
        );
        assert_eq!(hook_message(""), "no message from runc");
    }
}

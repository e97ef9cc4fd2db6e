//! Support for `tests/runtimes.rs`: real containers under runc, crun and
//! podman, with `oci-nvidia-hook` as their prestart hook, on a simulated GPU
//! host (see `shared/TESTBED.md` for how each runtime runs on these machines).
//!
//! A test makes a fresh bundle (a copy of a template rootfs built once by
//! `integration/rootfs`, plus a `config.json`), runs it with one runtime,
//! and gets back what `/checker` (integration/checker.c) saw inside the
//! container, parsed into a [`CheckerReport`], along with nvidia-smi's output,
//! the runtime's output and the hook's own log.
//!
//! Every run is bounded in time, cleaned up by a drop guard even when the
//! test fails, and serialized with every other run of this test binary (see
//! [`serial`]) so that host-wide snapshots and timings stay meaningful.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub use crate::common::host_mounts;
use crate::common::{ldconfig_print, require_root, CacheEntry, SimHost};

/// How long one container run may take before it is killed: far above the
/// ~0.1-1 s a run takes here, low enough that a hang fails CI instead of
/// blocking it.
pub const RUN_LIMIT: Duration = Duration::from_secs(60);

/// What the container runs: the checker, then nvidia-smi (whose own exit
/// code tells "found the driver libraries but no kernel driver" (9) from
/// "not there" (127)).
pub const CONTAINER_SCRIPT: &str = "/checker; /usr/bin/nvidia-smi; echo smi_exit=$?";

/// NVIDIA's character major for nvidiactl and nvidiaN.
pub const NVIDIA_MAJOR: u32 = 195;

/// The PATH the hook gets, as in the project's hooks.d file.
const HOOK_PATH_ENV: &str = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn hook_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_oci-nvidia-hook"))
}

/// Where this binary keeps its bundles and template.
fn work_root() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("runtimes")
}

// ---------------------------------------------------------------- serial runs

/// Held for a whole test: container runs never overlap, so that host-wide
/// snapshots (mount table, driver tree) taken by one test are not disturbed
/// by another's containers, and per-test timings are not skewed on 2 cores.
pub struct Serial(MutexGuard<'static, ()>);

/// Waits for the other tests of this binary, then checks that we are root
/// (each runtime's tools are checked when it runs).
pub fn serial() -> Serial {
    static LOCK: Mutex<()> = Mutex::new(());
    // A failed test poisons the lock; the next test must still run.
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    require_root();
    Serial(guard)
}

/// Panics naming the missing tool: a missing runtime must fail, never skip.
pub fn require_tool(tool: &str) {
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "`{tool}` is not on PATH: install it with integration/install-deps (or `make test`)"
    );
}

// ---------------------------------------------------------------- runtimes

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
    pub fn name(self) -> &'static str {
        match self {
            Runtime::RuncV1 => "runc-v1",
            Runtime::RuncV2 => "runc-v2",
            Runtime::CrunV1 => "crun-v1",
            Runtime::Podman => "podman",
            Runtime::PodmanCrunV1 => "podman-crun-v1",
        }
    }

    fn is_podman(self) -> bool {
        matches!(self, Runtime::Podman | Runtime::PodmanCrunV1)
    }

    /// The tools this runtime needs on PATH.
    fn tools(self) -> &'static [&'static str] {
        match self {
            Runtime::RuncV1 => &["runc"],
            Runtime::RuncV2 => &["runc", "unshare", "mount"],
            Runtime::CrunV1 => &["crun", "unshare", "umount"],
            Runtime::Podman => &["podman", "runc"],
            Runtime::PodmanCrunV1 => &["podman", "crun", "unshare", "umount"],
        }
    }

    /// `argv` run inside the mount namespace this runtime needs. The runtime
    /// command is passed as arguments to `sh -c '…; exec "$@"'`, so nothing
    /// is ever quoted into a shell string.
    fn in_namespace(self, argv: Vec<String>) -> Command {
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
    fn podman_globals(self, hooks_dir: &Path) -> Vec<String> {
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
}

fn path_str(path: &Path) -> String {
    path.to_str()
        .unwrap_or_else(|| panic!("non-UTF-8 path {}", path.display()))
        .to_string()
}

// ---------------------------------------------------------------- template rootfs

/// The template rootfs, built once per test binary by `integration/rootfs`
/// (with the driver root, so any extra host library NVIDIA's files need is
/// copied in too).
pub fn template_rootfs(host: &SimHost) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = work_root().join("template-rootfs");
            let status = Command::new(repo().join("integration/rootfs"))
                .arg("--driver-root")
                .arg(host.path("driver"))
                .arg(&out)
                .status()
                .expect("run integration/rootfs");
            assert!(status.success(), "integration/rootfs failed: {status}");
            out
        })
        .clone()
}

// ---------------------------------------------------------------- the scenario

/// Whether and how the hook is configured for a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// No hook at all: proves the runtime plumbing on its own.
    Absent,
    /// `oci-nvidia-hook --config <per-test config> prestart`.
    Prestart,
}

/// One container to run.
pub struct Scenario<'a> {
    /// Unique within the test binary: names the bundle and the container.
    pub name: &'a str,
    pub runtime: Runtime,
    pub host: &'a SimHost,
    /// The container's NVIDIA_* variables.
    pub env: &'a [(&'a str, &'a str)],
    pub hook: Hook,
    /// Minors of `/dev/nvidiaN` nodes the runtime itself creates (OCI
    /// `linux.devices`) without a device-cgroup rule: controls that must
    /// open with EPERM, proving that the cgroup is enforced and that the
    /// hook allowed only what was asked for. Not for podman (its
    /// `--device` also allows the node).
    pub decoy_minors: &'a [u32],
    /// Run on the rootfs an earlier run of the same name left, as a
    /// restarted container does, instead of a fresh copy of the template.
    pub reuse_rootfs: bool,
    /// Changes the fresh rootfs before the run (an image with extra files).
    pub prepare: Option<&'a dyn Fn(&Path)>,
}

/// A run's outcome: exit, output, the checker's report, the hook's log.
pub struct Run {
    pub runtime: Runtime,
    pub name: String,
    /// The runtime's exit status; None when it was killed at [`RUN_LIMIT`].
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    pub report: CheckerReport,
    /// What the hook appended to its log file (`[log] file` in its config).
    pub hook_log: Option<String>,
    pub bundle: PathBuf,
    pub rootfs: PathBuf,
    /// The container's `/etc/ld.so.cache` as glibc's `ldconfig -p` lists
    /// it, from the copy the checker left in the bundle's `out/`.
    pub ld_cache: Option<Vec<CacheEntry>>,
}

impl Run {
    pub fn succeeded(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Everything about the run, for assertion messages.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        let status = match self.status {
            Some(status) => status.to_string(),
            None => format!("killed after {RUN_LIMIT:?}"),
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

/// Runs one container and returns what happened. Panics on a missing tool,
/// a bundle that cannot be made, a run killed at [`RUN_LIMIT`], or mounts
/// leaked into the host's namespace; a container that failed to start is
/// not a panic here but [`Run::status`], for the test to judge.
pub fn run(_serial: &Serial, scenario: &Scenario) -> Run {
    for tool in scenario.runtime.tools() {
        require_tool(tool);
    }
    assert!(
        scenario.decoy_minors.is_empty() || !scenario.runtime.is_podman(),
        "decoy nodes need a runtime that takes config.json, not podman"
    );
    let bundle = Bundle::create(scenario);
    let id = format!("onh-{}-{}", scenario.name, std::process::id());
    let argv = bundle.runtime_argv(scenario, &id);

    let guard = Cleanup {
        runtime: scenario.runtime,
        id: id.clone(),
        state_root: bundle.state_root(),
        hooks_dir: bundle.hooks_dir(),
    };
    let started = Instant::now();
    let finished = run_bounded(scenario.runtime.in_namespace(argv), RUN_LIMIT);
    let elapsed = started.elapsed();
    drop(guard);

    let report = CheckerReport::parse(&finished.stdout, &finished.stderr);
    let copied = bundle.dir.join("out/ld.so.cache");
    let ld_cache = copied.exists().then(|| ldconfig_print(&copied));
    let hook_log = std::fs::read_to_string(bundle.hook_log()).ok();
    let run = Run {
        runtime: scenario.runtime,
        name: scenario.name.to_string(),
        status: finished.status,
        stdout: finished.stdout,
        stderr: finished.stderr,
        elapsed,
        report,
        hook_log,
        rootfs: bundle.rootfs(),
        bundle: bundle.dir,
        ld_cache,
    };
    eprintln!(
        "{} [{}]: container run took {} ms",
        run.name,
        run.runtime.name(),
        run.elapsed.as_millis()
    );
    assert!(
        !finished.timed_out,
        "the runtime was killed after {RUN_LIMIT:?}:{}",
        run.describe()
    );
    assert_no_mounts_under(&run.bundle);
    run
}

// ---------------------------------------------------------------- many runs of prepared bundles

/// Changes to a bundle beyond [`Scenario`], for tests that start many
/// containers at once or restart one many times (tests/load.rs). The
/// default changes nothing. Only for runtimes that take `config.json`
/// (runc, crun), not podman.
#[derive(Debug, Clone, Default)]
pub struct BundleExtras {
    /// The container's `process.args` instead of `sh -c CONTAINER_SCRIPT`.
    pub args: Option<Vec<String>>,
    /// Extra read-write bind mounts: (host directory, container path).
    pub binds: Vec<(PathBuf, String)>,
    /// The hook logs to this file (appending, possibly shared with other
    /// containers) instead of the bundle's own `hook.log`.
    pub hook_log: Option<PathBuf>,
    /// The hook's `[log] level` instead of `debug`.
    pub log_level: Option<&'static str>,
}

/// A bundle made but not run: the test starts [`Prepared::command`] itself,
/// many at once or many times, and may turn an outcome into a [`Run`] with
/// [`Prepared::finish`]. Dropping it removes the container and its
/// cgroups, as [`run`] does, even when the test failed.
pub struct Prepared {
    pub runtime: Runtime,
    pub name: String,
    /// The container id [`Prepared::command`] uses; unique to this test process.
    pub id: String,
    pub bundle: PathBuf,
    pub rootfs: PathBuf,
    /// The runtime's `--root`.
    pub state_root: PathBuf,
    /// Where the hook logs.
    pub hook_log: PathBuf,
    scenario_args: Vec<String>,
    _guard: Cleanup,
}

/// Makes the bundle of `scenario` (with `extras`) without running it.
pub fn prepare(_serial: &Serial, scenario: &Scenario, extras: &BundleExtras) -> Prepared {
    for tool in scenario.runtime.tools() {
        require_tool(tool);
    }
    assert!(
        !scenario.runtime.is_podman(),
        "prepared bundles are for runtimes that take config.json, not podman"
    );
    let bundle = Bundle::create_with(scenario, extras);
    let id = format!("onh-{}-{}", scenario.name, std::process::id());
    let scenario_args = bundle.runtime_argv(scenario, &id);
    let guard = Cleanup {
        runtime: scenario.runtime,
        id: id.clone(),
        state_root: bundle.state_root(),
        hooks_dir: bundle.hooks_dir(),
    };
    Prepared {
        runtime: scenario.runtime,
        name: scenario.name.to_string(),
        hook_log: extras.hook_log.clone().unwrap_or_else(|| bundle.hook_log()),
        rootfs: bundle.rootfs(),
        state_root: bundle.state_root(),
        bundle: bundle.dir,
        id,
        scenario_args,
        _guard: guard,
    }
}

impl Prepared {
    /// The runtime's `run` of this bundle as [`Prepared::id`], inside the
    /// mount namespace the runtime needs. Not yet spawned.
    pub fn command(&self) -> Command {
        self.runtime.in_namespace(self.scenario_args.clone())
    }

    /// The same bundle run as container `id` (a restart under a new id);
    /// `id` must start with [`Prepared::id`] so that leftovers are found.
    pub fn command_for(&self, id: &str) -> Command {
        assert!(id.starts_with(&self.id), "{id} must start with {}", self.id);
        let mut argv = self.scenario_args.clone();
        *argv.last_mut().expect("the id is the last argument") = id.to_string();
        self.runtime.in_namespace(argv)
    }

    /// Removes container `id` (one started by [`Prepared::command_for`])
    /// and its leftover cgroups; harmless when it is already gone.
    pub fn delete(&self, id: &str) {
        drop(Cleanup {
            runtime: self.runtime,
            id: id.to_string(),
            state_root: self.state_root.clone(),
            hooks_dir: self.bundle.join("hooks.d"),
        });
    }

    /// Turns the outcome of [`Prepared::command`] into a [`Run`], as [`run`]
    /// does, and checks that no mount leaked under the bundle.
    pub fn finish(&self, finished: Finished, elapsed: Duration) -> Run {
        let report = CheckerReport::parse(&finished.stdout, &finished.stderr);
        let copied = self.bundle.join("out/ld.so.cache");
        let ld_cache = copied.exists().then(|| ldconfig_print(&copied));
        let run = Run {
            runtime: self.runtime,
            name: self.name.clone(),
            status: finished.status,
            stdout: finished.stdout,
            stderr: finished.stderr,
            elapsed,
            report,
            hook_log: std::fs::read_to_string(&self.hook_log).ok(),
            bundle: self.bundle.clone(),
            rootfs: self.rootfs.clone(),
            ld_cache,
        };
        assert!(
            !finished.timed_out,
            "the runtime was killed after {elapsed:?}:{}",
            run.describe()
        );
        assert_no_mounts_under(&run.bundle);
        run
    }
}

/// Every directory named `<prefix>…` in any cgroup hierarchy under
/// /sys/fs/cgroup (v1 controllers and the v2 `unified` mount), down to the
/// depth [`remove_leftover_cgroups`] covers: what containers whose ids
/// start with `prefix` left behind.
pub fn cgroup_dirs_named(prefix: &str) -> Vec<PathBuf> {
    fn visit(dir: &Path, prefix: &str, depth: u32, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with(prefix) {
                out.push(path);
            } else if depth > 0 {
                visit(&path, prefix, depth - 1, out);
            }
        }
    }
    let mut out = Vec::new();
    visit(Path::new("/sys/fs/cgroup"), prefix, 4, &mut out);
    out.sort();
    out
}

/// The root of this binary's scratch space (bundles live in `bundles/`).
pub fn scratch_dir() -> PathBuf {
    work_root()
}

// ---------------------------------------------------------------- bundles

/// A bundle directory: `rootfs/`, `config.json`, the hook's config and log,
/// the hooks dir (podman), `out/` (bind-mounted at /out) and the runtime's
/// state root. Kept after the test for post-mortems; the next run of the
/// same test replaces it.
struct Bundle {
    dir: PathBuf,
}

impl Bundle {
    fn create(scenario: &Scenario) -> Bundle {
        Bundle::create_with(scenario, &BundleExtras::default())
    }

    /// [`Bundle::create`] with the changes `extras` asks for.
    fn create_with(scenario: &Scenario, extras: &BundleExtras) -> Bundle {
        let dir = work_root().join("bundles").join(scenario.name);
        let bundle = Bundle { dir };
        if scenario.reuse_rootfs && bundle.rootfs().is_dir() {
            // A restart: the rootfs keeps what earlier runs left in it; the
            // rest is this run's own.
            for stale in [bundle.dir.join("out"), bundle.state_root()] {
                remove_tree_safely(&stale);
            }
            let _ = std::fs::remove_file(bundle.hook_log());
        } else {
            remove_tree_safely(&bundle.dir);
            std::fs::create_dir_all(&bundle.dir).expect("create the bundle");
            // cp -a keeps the template's links, modes and ownership.
            let status = Command::new("cp")
                .arg("-a")
                .arg(template_rootfs(scenario.host))
                .arg(bundle.rootfs())
                .status()
                .expect("run cp");
            assert!(status.success(), "cp -a of the template rootfs failed");
            if let Some(prepare) = scenario.prepare {
                prepare(&bundle.rootfs());
            }
        }
        std::fs::create_dir_all(bundle.dir.join("out")).expect("create the bundle's out/");
        std::fs::create_dir_all(bundle.state_root()).expect("create the runtime state root");
        bundle.write_hook_config_with(scenario.host, extras);
        if scenario.runtime.is_podman() {
            bundle.write_hooks_dir(scenario.hook);
        } else {
            let config = bundle.config_json_with(scenario, extras);
            std::fs::write(
                bundle.dir.join("config.json"),
                serde_json::to_vec_pretty(&config).unwrap(),
            )
            .expect("write config.json");
        }
        bundle
    }

    fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }
    fn state_root(&self) -> PathBuf {
        self.dir.join("state")
    }
    fn hooks_dir(&self) -> PathBuf {
        self.dir.join("hooks.d")
    }
    fn hook_config(&self) -> PathBuf {
        self.dir.join("hook-config.toml")
    }
    fn hook_log(&self) -> PathBuf {
        self.dir.join("hook.log")
    }

    /// The simulated host's config plus a debug log file in the bundle:
    /// runtimes swallow a successful hook's stderr (and crun even a failing
    /// one's), so the log file is the only way to see what the hook did.
    fn write_hook_config_with(&self, host: &SimHost, extras: &BundleExtras) {
        let base = std::fs::read_to_string(&host.config).expect("read the simhost config");
        let log = extras.hook_log.clone().unwrap_or_else(|| self.hook_log());
        let config = format!(
            "{base}\n[log]\nlevel = {}\nfile = {}\n",
            toml_string(extras.log_level.unwrap_or("debug")),
            toml_string(&path_str(&log))
        );
        std::fs::write(self.hook_config(), config).expect("write the hook config");
    }

    fn hook_args(&self) -> Vec<String> {
        vec![
            "oci-nvidia-hook".into(),
            "--config".into(),
            path_str(&self.hook_config()),
            "prestart".into(),
        ]
    }

    /// The project's own hooks.d file with only the binary and its arguments
    /// rewritten, so podman is tested with the `when`/`stages` we ship.
    fn write_hooks_dir(&self, hook: Hook) {
        std::fs::create_dir_all(self.hooks_dir()).expect("create the hooks dir");
        if hook == Hook::Absent {
            return; // an empty hooks dir: podman then runs no hook at all
        }
        let shipped = repo().join("hooks.d/oci-nvidia-hook.json");
        let mut file: Value = serde_json::from_slice(
            &std::fs::read(&shipped).unwrap_or_else(|e| panic!("{}: {e}", shipped.display())),
        )
        .expect("hooks.d file is JSON");
        file["hook"]["path"] = json!(path_str(hook_binary()));
        file["hook"]["args"] = json!(self.hook_args());
        std::fs::write(
            self.hooks_dir().join("oci-nvidia-hook.json"),
            serde_json::to_vec_pretty(&file).unwrap(),
        )
        .expect("write the hooks.d file");
    }

    /// `runc spec --rootless=false`'s defaults, written out, with what the
    /// tests need: no terminal, a writable rootfs (as Docker and podman
    /// give), the checker script, the NVIDIA_* env, /out and the hook.
    fn config_json_with(&self, scenario: &Scenario, extras: &BundleExtras) -> Value {
        let mut env = vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
            "TERM=xterm".to_string(),
        ];
        env.extend(scenario.env.iter().map(|(k, v)| format!("{k}={v}")));
        let caps = json!(["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]);
        let mut config = json!({
            "ociVersion": "1.0.2-dev",
            "process": {
                "terminal": false,
                "user": {"uid": 0, "gid": 0},
                "args": ["/bin/sh", "-c", CONTAINER_SCRIPT],
                "env": env,
                "cwd": "/",
                "capabilities": {
                    "bounding": caps, "effective": caps, "permitted": caps, "ambient": caps
                },
                "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
                "noNewPrivileges": true
            },
            "root": {"path": "rootfs", "readonly": false},
            "hostname": scenario.name.replace('_', "-"),
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
                 "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
                {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
                 "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
                {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
                 "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
                {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
                 "options": ["nosuid", "noexec", "nodev"]},
                {"destination": "/sys", "type": "sysfs", "source": "sysfs",
                 "options": ["nosuid", "noexec", "nodev", "ro"]},
                {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
                 "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]},
                {"destination": "/out", "type": "bind", "source": path_str(&self.dir.join("out")),
                 "options": ["rbind", "rw", "nosuid", "nodev"]}
            ],
            "linux": {
                // Deny everything; the runtime adds its defaults (/dev/null…)
                // and the hook must add the GPU's.
                "resources": {"devices": [{"allow": false, "access": "rwm"}]},
                "namespaces": [
                    {"type": "pid"}, {"type": "network"}, {"type": "ipc"},
                    {"type": "uts"}, {"type": "mount"}
                ],
                "maskedPaths": [
                    "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
                    "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
                    "/proc/sched_debug", "/sys/firmware", "/proc/scsi"
                ],
                "readonlyPaths": [
                    "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"
                ]
            }
        });
        if !scenario.decoy_minors.is_empty() {
            let decoys: Vec<Value> = scenario
                .decoy_minors
                .iter()
                .map(|minor| {
                    json!({"path": format!("/dev/nvidia{minor}"), "type": "c",
                           "major": NVIDIA_MAJOR, "minor": minor,
                           "fileMode": 0o666, "uid": 0, "gid": 0})
                })
                .collect();
            config["linux"]["devices"] = json!(decoys);
        }
        if let Some(args) = &extras.args {
            config["process"]["args"] = json!(args);
        }
        for (source, destination) in &extras.binds {
            config["mounts"]
                .as_array_mut()
                .expect("mounts is an array")
                .push(json!({"destination": destination, "type": "bind",
                             "source": path_str(source),
                             "options": ["rbind", "rw", "nosuid", "nodev"]}));
        }
        if scenario.hook == Hook::Prestart {
            config["hooks"] = json!({
                "prestart": [{
                    "path": path_str(hook_binary()),
                    "args": self.hook_args(),
                    "env": [HOOK_PATH_ENV],
                    // The runtime kills a hung hook and says so, well before
                    // RUN_LIMIT kills the runtime.
                    "timeout": 30
                }]
            });
        }
        config
    }

    /// The runtime's command line for this bundle.
    fn runtime_argv(&self, scenario: &Scenario, id: &str) -> Vec<String> {
        let runtime = scenario.runtime;
        let state = path_str(&self.state_root());
        let bundle = path_str(&self.dir);
        match runtime {
            Runtime::RuncV1 | Runtime::RuncV2 => {
                strings(&["runc", "--root", &state, "run", "--bundle", &bundle, id])
            }
            Runtime::CrunV1 => strings(&["crun", "--root", &state, "run", "--bundle", &bundle, id]),
            Runtime::Podman | Runtime::PodmanCrunV1 => {
                let mut argv = runtime.podman_globals(&self.hooks_dir());
                argv.extend(strings(&[
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
                    &format!("{}:/out", path_str(&self.dir.join("out"))),
                ]));
                for (k, v) in scenario.env {
                    argv.push("--env".into());
                    argv.push(format!("{k}={v}"));
                }
                argv.extend(strings(&[
                    "--rootfs",
                    &path_str(&self.rootfs()),
                    "/bin/sh",
                    "-c",
                    CONTAINER_SCRIPT,
                ]));
                argv
            }
        }
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A TOML basic string (the paths here never need more than these escapes).
fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Removes the container and its runtime state even when the test failed or
/// the run was killed: `delete -f` / `rm -f` of something already gone is a
/// harmless error, so its output is ignored.
struct Cleanup {
    runtime: Runtime,
    id: String,
    state_root: PathBuf,
    hooks_dir: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let state = path_str(&self.state_root);
        let argv = match self.runtime {
            Runtime::RuncV1 | Runtime::RuncV2 => {
                strings(&["runc", "--root", &state, "delete", "-f", &self.id])
            }
            Runtime::CrunV1 => strings(&["crun", "--root", &state, "delete", "-f", &self.id]),
            Runtime::Podman | Runtime::PodmanCrunV1 => {
                let mut argv = self.runtime.podman_globals(&self.hooks_dir);
                argv.extend(strings(&["rm", "-f", "--ignore", &self.id]));
                argv
            }
        };
        // The same namespace as the run: runc v2 must see the cgroup2 mount
        // to remove the container's cgroup.
        let mut cmd = self.runtime.in_namespace(argv);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        let _ = run_bounded(cmd, Duration::from_secs(30));
        if !self.runtime.is_podman() {
            remove_leftover_cgroups(&self.id);
        }
    }
}

/// A runtime killed before it saved its state (say, while its hook hung)
/// leaves the container's cgroups behind, and `delete -f` then knows nothing
/// of them. runc and crun name them after the container id (no
/// cgroupsPath is set), which is unique to this test process: remove the
/// empty ones. The depth covers a controller whose root is nested (here
/// `memory/process_api/<hash>/<id>`).
fn remove_leftover_cgroups(id: &str) {
    fn visit(dir: &Path, id: &str, depth: u32) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if entry.file_name() == id {
                let _ = std::fs::remove_dir(&path); // rmdir: only if empty
            } else if depth > 0 {
                visit(&path, id, depth - 1);
            }
        }
    }
    visit(Path::new("/sys/fs/cgroup"), id, 3);
}

// ---------------------------------------------------------------- bounded processes

/// A finished (or killed) process's status and output.
pub struct Finished {
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` in its own process group, killing the whole group at `limit`.
/// Output is drained by threads so a chatty child never blocks on a full
/// pipe; output still held open by a stray descendant after the process
/// ended is given up on rather than waited for.
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
    let deadline = Instant::now() + limit;
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            timed_out = true;
            let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // Pipes reach EOF as soon as the last writer exits; one still open
    // seconds after the process ended is held by a stray descendant (a
    // daemonized helper), and waiting for it would hang the test.
    let grace = if timed_out {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(5)
    };
    Finished {
        status,
        timed_out,
        stdout: collect(stdout, grace),
        stderr: collect(stderr, grace),
    }
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    rx
}

fn collect(rx: std::sync::mpsc::Receiver<Vec<u8>>, wait: Duration) -> String {
    match rx.recv_timeout(wait) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => "(output not collected: still held open by a leftover process)".into(),
    }
}

// ---------------------------------------------------------------- checker report

/// One device node the checker found under /dev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// `c`, `b`, `d`, `f`, `l`, ...
    pub kind: char,
    /// (major, minor) for device nodes.
    pub numbers: Option<(u32, u32)>,
    pub mode: String,
    /// `ok` or the errno name; None when it was not opened (not a device).
    pub open: Option<String>,
}

/// An injected regular file and the flags of the mount it is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFacts {
    pub size: u64,
    pub read_only: bool,
    pub nosuid: bool,
    pub nodev: bool,
    pub noexec: bool,
}

/// The `cuda` or `nvml` line: what dlopen of the SONAME gave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Library {
    /// The loaded file's path, or the SONAME when dlopen failed.
    pub path: String,
    pub loaded: bool,
    pub fields: BTreeMap<String, String>,
    pub msg: Option<String>,
}

impl Library {
    pub fn field(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }
}

/// The checker's output, parsed (see the format in integration/checker.c),
/// plus what nvidia-smi printed after it.
#[derive(Debug, Clone, Default)]
pub struct CheckerReport {
    /// The `checker done` line was seen.
    pub complete: bool,
    pub nodes: BTreeMap<String, Node>,
    /// `ok` or the errno name of opening /dev/null.
    pub devnull: Option<String>,
    pub files: BTreeMap<String, FileFacts>,
    /// Symlinks in the library and binary directories: path → target.
    pub links: BTreeMap<String, String>,
    pub cuda: Option<Library>,
    pub nvml: Option<Library>,
    /// The `ldcache` line's fields (`libcuda.so.1` → `yes`, ...).
    pub ldcache: BTreeMap<String, String>,
    /// `ld.so.conf.d` file → its lines.
    pub ldconf: BTreeMap<String, Vec<String>>,
    pub procnv: Vec<String>,
    pub mounts: Vec<String>,
    /// nvidia-smi's stdout (after the checker's) and the run's stderr.
    pub smi_output: String,
    pub smi_exit: Option<i32>,
}

/// A line split into its kind, subject, positional words, `key=value`
/// fields and a trailing free-text field (`msg=` or `line=`, which run to
/// the end of the line).
struct Fact<'a> {
    kind: &'a str,
    subject: &'a str,
    words: Vec<&'a str>,
    fields: BTreeMap<String, String>,
    msg: Option<String>,
}

/// The fields whose value is free text to the end of the line.
const FREE_TEXT_KEYS: [&str; 2] = ["msg", "line"];

impl<'a> Fact<'a> {
    fn parse(line: &'a str) -> Option<Fact<'a>> {
        let free_text = FREE_TEXT_KEYS
            .iter()
            .filter_map(|key| {
                let marker = format!(" {key}=");
                line.find(&marker).map(|at| (at, at + marker.len(), *key))
            })
            .min();
        let (head, free) = match free_text {
            Some((at, value, key)) => (&line[..at], Some((key, line[value..].to_string()))),
            None => (line, None),
        };
        let mut tokens = head.split(' ');
        let kind = tokens.next()?;
        let subject = tokens.next()?;
        let mut words = Vec::new();
        let mut fields = BTreeMap::new();
        for token in tokens {
            match token.split_once('=') {
                Some((k, v)) => {
                    fields.insert(k.to_string(), v.to_string());
                }
                None => words.push(token),
            }
        }
        let mut msg = None;
        match free {
            Some(("msg", text)) => msg = Some(text),
            Some((key, text)) => {
                fields.insert(key.to_string(), text);
            }
            None => {}
        }
        Some(Fact {
            kind,
            subject,
            words,
            fields,
            msg,
        })
    }

    fn flag(&self, key: &str) -> bool {
        self.fields.get(key).map(String::as_str) == Some("1")
    }
}

impl CheckerReport {
    /// Parses the container's stdout; `stderr` joins nvidia-smi's output
    /// (the shell's "not found" goes there).
    pub fn parse(stdout: &str, stderr: &str) -> CheckerReport {
        let mut report = CheckerReport::default();
        let mut smi = String::new();
        for line in stdout.lines() {
            if report.complete {
                match line.strip_prefix("smi_exit=") {
                    Some(code) => report.smi_exit = code.trim().parse().ok(),
                    None => {
                        smi.push_str(line);
                        smi.push('\n');
                    }
                }
                continue;
            }
            if line == "checker done" {
                report.complete = true;
                continue;
            }
            if let Some(fact) = Fact::parse(line) {
                report.add(fact);
            }
        }
        smi.push_str(stderr);
        report.smi_output = smi;
        report
    }

    fn add(&mut self, fact: Fact) {
        let subject = fact.subject.to_string();
        match fact.kind {
            "node" => {
                let kind = fact.words.first().and_then(|w| w.chars().next());
                let numbers = fact.words.get(1).and_then(|n| {
                    let (major, minor) = n.split_once(':')?;
                    Some((major.parse().ok()?, minor.parse().ok()?))
                });
                self.nodes.insert(
                    subject,
                    Node {
                        kind: kind.unwrap_or('?'),
                        numbers,
                        mode: fact.fields.get("mode").cloned().unwrap_or_default(),
                        open: fact.fields.get("open").cloned(),
                    },
                );
            }
            "devnull" => self.devnull = fact.fields.get("open").cloned(),
            "file" => {
                let facts = FileFacts {
                    size: fact
                        .fields
                        .get("size")
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0),
                    read_only: fact.flag("ro"),
                    nosuid: fact.flag("nosuid"),
                    nodev: fact.flag("nodev"),
                    noexec: fact.flag("noexec"),
                };
                self.files.insert(subject, facts);
            }
            "link" => {
                let target = fact.fields.get("target").cloned().unwrap_or_default();
                self.links.insert(subject, target);
            }
            "cuda" | "nvml" => {
                let library = Library {
                    path: subject,
                    loaded: fact.fields.get("dlopen").map(String::as_str) == Some("ok"),
                    fields: fact.fields,
                    msg: fact.msg,
                };
                if fact.kind == "cuda" {
                    self.cuda = Some(library);
                } else {
                    self.nvml = Some(library);
                }
            }
            "ldcache" => self.ldcache = fact.fields,
            "ldconf" => {
                let line = fact.fields.get("line").cloned().unwrap_or_default();
                self.ldconf.entry(subject).or_default().push(line);
            }
            "procnv" => self.procnv.push(format!("{subject} {:?}", fact.fields)),
            "mount" => self.mounts.push(format!("{subject} {:?}", fact.fields)),
            _ => {}
        }
    }

    /// `/dev/nvidiaN` nodes, by N: the GPU nodes, not nvidiactl or uvm.
    pub fn gpu_nodes(&self) -> BTreeMap<u32, &Node> {
        self.nodes
            .iter()
            .filter_map(|(path, node)| {
                let n = path.strip_prefix("/dev/nvidia")?.parse().ok()?;
                Some((n, node))
            })
            .collect()
    }
}

// ---------------------------------------------------------------- ld.so.cache

// ---------------------------------------------------------------- host state

/// Panics if anything is mounted under `dir` in the host's namespace: a hook
/// that mounted there leaked out of the container's mount namespace, and
/// deleting `dir` could then delete the driver files behind the mount.
pub fn assert_no_mounts_under(dir: &Path) {
    let prefix = format!("{}/", path_str(dir).trim_end_matches('/'));
    let leaked: Vec<String> = host_mounts()
        .into_iter()
        .filter(|m| m.starts_with(&prefix))
        .collect();
    assert!(
        leaked.is_empty(),
        "mounts leaked into the host's namespace under {}: {leaked:#?}",
        dir.display()
    );
}

/// Deletes a bundle left by an earlier run, refusing if anything is mounted
/// under it (`remove_dir_all` would follow a bind mount into the host tree).
fn remove_tree_safely(dir: &Path) {
    if !dir.exists() {
        return;
    }
    assert_no_mounts_under(dir);
    std::fs::remove_dir_all(dir).unwrap_or_else(|e| panic!("remove {}: {e}", dir.display()));
}

/// Every entry under `root` with its type, mode, owner, size, mtime, ctime,
/// device number and link target: any write, chmod, chown, rename, mknod or
/// unlink by the hook changes the listing (atime, which reads change, is
/// left out).
pub fn tree_listing(root: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let meta = std::fs::symlink_metadata(&path)
                .unwrap_or_else(|e| panic!("lstat {}: {e}", path.display()));
            let ft = meta.file_type();
            let kind = if ft.is_symlink() {
                format!("link->{}", std::fs::read_link(&path).unwrap().display())
            } else if ft.is_dir() {
                "dir".into()
            } else if ft.is_char_device() {
                format!("char {}", meta.rdev())
            } else if ft.is_block_device() {
                format!("block {}", meta.rdev())
            } else if ft.is_socket() {
                "socket".into()
            } else if ft.is_fifo() {
                "fifo".into()
            } else {
                "file".into()
            };
            let facts = format!(
                "{kind} mode={:o} uid={} gid={} size={} mtime={}.{} ctime={}.{}",
                meta.mode(),
                meta.uid(),
                meta.gid(),
                meta.size(),
                meta.mtime(),
                meta.mtime_nsec(),
                meta.ctime(),
                meta.ctime_nsec()
            );
            out.insert(path.strip_prefix(root).unwrap().to_path_buf(), facts);
            if ft.is_dir() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// The differences between two listings, one line each, for messages.
pub fn listing_diff(
    before: &BTreeMap<PathBuf, String>,
    after: &BTreeMap<PathBuf, String>,
) -> Vec<String> {
    let mut diff = Vec::new();
    for (path, facts) in before {
        match after.get(path) {
            None => diff.push(format!("removed {}: {facts}", path.display())),
            Some(now) if now != facts => {
                diff.push(format!("changed {}: {facts} -> {now}", path.display()))
            }
            Some(_) => {}
        }
    }
    for (path, facts) in after {
        if !before.contains_key(path) {
            diff.push(format!("added {}: {facts}", path.display()));
        }
    }
    diff
}

// ---------------------------------------------------------------- host.json

/// A GPU as `host.json` describes it.
#[derive(Debug, Clone)]
pub struct Gpu {
    pub index: u32,
    pub minor: u32,
    pub uuid: String,
    pub bus: String,
}

pub fn gpus(host: &SimHost) -> Vec<Gpu> {
    host.host["gpus"]
        .as_array()
        .expect("host.json gpus")
        .iter()
        .map(|g| Gpu {
            index: g["index"].as_u64().unwrap() as u32,
            minor: g["minor"].as_u64().unwrap() as u32,
            uuid: g["uuid"].as_str().unwrap().to_string(),
            bus: g["bus"].as_str().unwrap().to_string(),
        })
        .collect()
}

pub fn uvm_major(host: &SimHost) -> u32 {
    host.host["uvm_major"]
        .as_u64()
        .expect("host.json uvm_major") as u32
}

pub fn cuda_version(host: &SimHost) -> i64 {
    host.host["cuda_version"]
        .as_i64()
        .expect("host.json cuda_version")
}

pub fn driver_version(host: &SimHost) -> String {
    crate::common::s(&host.host, "/driver_version").to_string()
}

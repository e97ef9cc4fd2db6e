//! Bundles: a fresh copy of the template rootfs (built once per test binary
//! by `integration/rootfs`), its `config.json` (oci_config.rs), the hook's
//! config and log, Podman's hooks dir, `out/` (bind-mounted at /out) and
//! the runtime's state root. Kept after the test for post-mortems; the next
//! run of the same test replaces it, never deleting through a mount.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use super::cleanup::remove_tree_safely;
use super::oci_config::{config_json, hooks_d_file, path_str, ContainerConfig, CONTAINER_SCRIPT};
use super::runtimes::{podman_run_args, Runtime};
use crate::project::{hook_binary, repo};
use crate::simhost::SimHost;

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
    /// The runtime that runs it.
    pub runtime: Runtime,
    /// The simulated host the hook is pointed at.
    pub host: &'a SimHost,
    /// The container's NVIDIA_* variables.
    pub env: &'a [(&'a str, &'a str)],
    /// Whether the hook runs.
    pub hook: Hook,
    /// Minors of `/dev/nvidiaN` nodes the runtime itself creates (OCI
    /// `linux.devices`) without a device-cgroup rule: controls that must
    /// open with EPERM, proving that the cgroup is enforced and that the
    /// hook allowed only what was asked for. Not for podman (its
    /// `--device` also allows the node).
    pub decoy_minors: &'a [u32],
    /// Other nodes made without a device-cgroup rule, which must open with
    /// EPERM: by the runtime (`linux.devices`) for runc and crun, by the
    /// container's script for Podman (whose `--device` would allow them).
    pub decoys: &'a [Decoy<'a>],
    /// Run on the rootfs an earlier run of the same name left, as a
    /// restarted container does, instead of a fresh copy of the template.
    pub reuse_rootfs: bool,
    /// Changes the fresh rootfs before the run (an image with extra files).
    pub prepare: Option<&'a dyn Fn(&Path)>,
}

/// A character device node a container has without a device-cgroup rule
/// (see [`Scenario::decoys`]).
#[derive(Debug, Clone, Copy)]
pub struct Decoy<'a> {
    /// Its path in the container.
    pub path: &'a str,
    /// Its major number.
    pub major: u32,
    /// Its minor number.
    pub minor: u32,
}

impl<'a> Scenario<'a> {
    /// A container asking with `env`, the hook as `hook` says, on a fresh
    /// rootfs, with the runtime's `/dev/nvidiaN` decoys of `decoy_minors`.
    pub fn asking(
        name: &'a str,
        runtime: Runtime,
        host: &'a SimHost,
        env: &'a [(&'a str, &'a str)],
        hook: Hook,
        decoy_minors: &'a [u32],
    ) -> Scenario<'a> {
        Scenario {
            name,
            runtime,
            host,
            env,
            hook,
            decoy_minors,
            decoys: &[],
            reuse_rootfs: false,
            prepare: None,
        }
    }

    /// A container whose only hooks a test gives ([`Bundle::run_with_hooks`]),
    /// on a fresh rootfs that `prepare` changes first.
    pub fn hooks_only(
        name: &'a str,
        runtime: Runtime,
        host: &'a SimHost,
        prepare: &'a dyn Fn(&Path),
    ) -> Scenario<'a> {
        Scenario {
            name,
            runtime,
            host,
            env: &[],
            hook: Hook::Absent,
            decoy_minors: &[],
            decoys: &[],
            reuse_rootfs: false,
            prepare: Some(prepare),
        }
    }
}

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
    /// Top-level keys put before the simulated host's in the hook config.
    pub config_head: Option<String>,
}

/// Where this binary keeps its bundles (in `bundles/`), its template and
/// any other scratch files of its tests.
pub fn work_root() -> PathBuf {
    crate::project::target_tmpdir().join("runtimes")
}

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

/// Copies the template rootfs to `rootfs` (`cp -a` keeps its links,
/// modes and ownership).
pub fn copy_template(host: &SimHost, rootfs: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(template_rootfs(host))
        .arg(rootfs)
        .status()
        .expect("run cp");
    assert!(status.success(), "cp -a of the template rootfs failed");
}

/// Writes the hook's config at `config`: the simulated host's, plus a log
/// file at `log` with `level`. Runtimes swallow a successful hook's stderr
/// (and crun even a failing one's), so the log file is the only way to see
/// what the hook did.
pub fn write_hook_config(host: &SimHost, config: &Path, log: &Path, level: &str) {
    let base = std::fs::read_to_string(&host.config).expect("read the simhost config");
    let text = format!(
        "{base}\n[log]\nlevel = {}\nfile = {}\n",
        toml_string(level),
        toml_string(&path_str(log))
    );
    std::fs::write(config, text).expect("write the hook config");
}

/// A fresh `work_root()/name` holding a hook config for `host` that logs
/// at debug: the directory, the config and its log file.
pub fn fresh_work_dir(host: &SimHost, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let work = work_root().join(name);
    remove_tree_safely(&work);
    std::fs::create_dir_all(&work).expect("create the work directory");
    let (config, log) = (work.join("hook.toml"), work.join("hook.log"));
    write_hook_config(host, &config, &log, "debug");
    (work, config, log)
}

/// The hook's argv with the hook config `config`.
pub fn hook_args(config: &Path) -> Vec<String> {
    vec![
        "oci-nvidia-hook".into(),
        "--config".into(),
        path_str(config),
        "prestart".into(),
    ]
}

/// Writes into `hooks_dir` the project's own hooks.d file for the hook
/// under test with `config` (see [`hooks_d_file`]).
pub fn write_hooks_dir(hooks_dir: &Path, config: &Path) {
    std::fs::create_dir_all(hooks_dir).expect("create the hooks dir");
    let shipped = repo().join("hooks.d/oci-nvidia-hook.json");
    let shipped: Value = serde_json::from_slice(
        &std::fs::read(&shipped).unwrap_or_else(|e| panic!("{}: {e}", shipped.display())),
    )
    .expect("hooks.d file is JSON");
    let file = hooks_d_file(shipped, hook_binary(), &hook_args(config));
    std::fs::write(
        hooks_dir.join("oci-nvidia-hook.json"),
        serde_json::to_vec_pretty(&file).unwrap(),
    )
    .expect("write the hooks.d file");
}

/// A TOML basic string (the paths here never need more than these escapes).
fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A bundle directory, see the module's doc.
pub struct Bundle {
    /// The bundle directory itself.
    pub dir: PathBuf,
}

impl Bundle {
    /// Makes the bundle of `scenario` with the changes `extras` asks for.
    pub fn create(scenario: &Scenario, extras: &BundleExtras) -> Bundle {
        let dir = work_root().join("bundles").join(scenario.name);
        let bundle = Bundle { dir };
        if scenario.reuse_rootfs && bundle.rootfs().is_dir() {
            // A restart: the rootfs keeps what earlier runs left in it; the
            // rest is this run's own.
            for stale in [bundle.out_dir(), bundle.state_root()] {
                remove_tree_safely(&stale);
            }
            let _ = std::fs::remove_file(bundle.hook_log());
        } else {
            remove_tree_safely(&bundle.dir);
            std::fs::create_dir_all(&bundle.dir).expect("create the bundle");
            copy_template(scenario.host, &bundle.rootfs());
            if let Some(prepare) = scenario.prepare {
                prepare(&bundle.rootfs());
            }
        }
        std::fs::create_dir_all(bundle.out_dir()).expect("create the bundle's out/");
        std::fs::create_dir_all(bundle.state_root()).expect("create the runtime state root");
        let log = extras.hook_log.clone().unwrap_or_else(|| bundle.hook_log());
        let level = extras.log_level.unwrap_or("debug");
        write_hook_config(scenario.host, &bundle.hook_config(), &log, level);
        if let Some(head) = &extras.config_head {
            let config =
                std::fs::read_to_string(bundle.hook_config()).expect("read the hook config");
            std::fs::write(bundle.hook_config(), format!("{head}\n{config}"))
                .expect("write the hook config");
        }
        if scenario.runtime.is_podman() {
            std::fs::create_dir_all(bundle.hooks_dir()).expect("create the hooks dir");
            // An empty hooks dir: podman then runs no hook at all.
            if scenario.hook == Hook::Prestart {
                write_hooks_dir(&bundle.hooks_dir(), &bundle.hook_config());
            }
        } else {
            let config = bundle.config_json(scenario, extras);
            std::fs::write(
                bundle.dir.join("config.json"),
                serde_json::to_vec_pretty(&config).unwrap(),
            )
            .expect("write config.json");
        }
        bundle
    }

    /// The container's root filesystem.
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }
    /// The runtime's `--root`.
    pub fn state_root(&self) -> PathBuf {
        self.dir.join("state")
    }
    /// Podman's `--hooks-dir`.
    pub fn hooks_dir(&self) -> PathBuf {
        self.dir.join("hooks.d")
    }
    /// Mounted at /out: where the checker leaves a copy of the loader cache.
    pub fn out_dir(&self) -> PathBuf {
        self.dir.join("out")
    }
    fn hook_config(&self) -> PathBuf {
        self.dir.join("hook-config.toml")
    }
    /// Where the hook logs unless [`BundleExtras::hook_log`] says otherwise.
    pub fn hook_log(&self) -> PathBuf {
        self.dir.join("hook.log")
    }

    fn config_json(&self, scenario: &Scenario, extras: &BundleExtras) -> Value {
        let hook_args = hook_args(&self.hook_config());
        config_json(&ContainerConfig {
            hostname: &scenario.name.replace('_', "-"),
            env: scenario.env,
            args: extras.args.as_deref(),
            out_dir: &self.out_dir(),
            binds: &extras.binds,
            decoy_minors: scenario.decoy_minors,
            decoys: scenario.decoys,
            hook: (scenario.hook == Hook::Prestart).then_some((hook_binary(), &hook_args[..])),
        })
    }

    /// The bundle of `scenario`, its process `sh -c 'exit 0'`: a container
    /// that only its hooks do anything in.
    pub fn exiting(scenario: &Scenario) -> Bundle {
        Bundle::create(
            scenario,
            &BundleExtras {
                args: Some(vec!["/bin/sh".into(), "-c".into(), "exit 0".into()]),
                ..BundleExtras::default()
            },
        )
    }

    /// Runs this bundle (runc or crun) as container `id` with `hooks` (an
    /// OCI `hooks` object) as its only hooks, the rest of its `config.json`
    /// changed by `edit` first; cleans the container up. Returns whether
    /// the runtime succeeded, and its stderr.
    pub fn run_with_hooks(
        &self,
        scenario: &Scenario,
        id: &str,
        hooks: Value,
        edit: impl FnOnce(&mut Value),
    ) -> (bool, String) {
        assert!(
            !scenario.runtime.is_podman(),
            "run_with_hooks takes config.json"
        );
        let config_path = self.dir.join("config.json");
        let mut config: Value =
            serde_json::from_slice(&std::fs::read(&config_path).expect("read config.json"))
                .expect("parse config.json");
        edit(&mut config);
        config["hooks"] = hooks;
        std::fs::write(&config_path, serde_json::to_vec_pretty(&config).unwrap())
            .expect("write config.json");
        let guard = super::cleanup::Cleanup {
            runtime: scenario.runtime,
            id: id.to_string(),
            state_root: self.state_root(),
            hooks_dir: self.hooks_dir(),
        };
        let mut cmd = scenario
            .runtime
            .in_namespace(self.runtime_argv(scenario, id));
        cmd.current_dir(self.rootfs());
        let finished = super::process::run_bounded(cmd, super::run::RUN_LIMIT);
        drop(guard);
        (
            finished.status.is_some_and(|s| s.success()),
            finished.stderr,
        )
    }

    /// The runtime's command line that runs this bundle as container `id`.
    pub fn runtime_argv(&self, scenario: &Scenario, id: &str) -> Vec<String> {
        let runtime = scenario.runtime;
        if !runtime.is_podman() {
            return runtime.run_argv(&self.state_root(), &self.dir, id);
        }
        let mut argv = runtime.podman_globals(&self.hooks_dir());
        // Podman's default rules allow mknod; its default capabilities do not.
        let extra: Vec<String> = if scenario.decoys.is_empty() {
            Vec::new()
        } else {
            vec!["--cap-add".into(), "MKNOD".into()]
        };
        let mut script = String::new();
        for d in scenario.decoys {
            script.push_str(&format!(
                "mkdir -p \"$(dirname {0})\"; mknod {0} c {1} {2}; chmod 666 {0}; ",
                d.path, d.major, d.minor
            ));
        }
        script.push_str(CONTAINER_SCRIPT);
        argv.extend(podman_run_args(
            id,
            &self.out_dir(),
            scenario.env,
            &extra,
            &self.rootfs(),
            &["/bin/sh", "-c", &script],
        ));
        argv
    }
}

/// Gives a prepared bundle's container a user namespace whose ids
/// `0..count` are host ids `root..root+count`, and hands its rootfs and
/// `out/` to the container's root, as a root runtime's user-namespaced
/// container has them.
pub fn into_user_namespace(bundle: &Path, rootfs: &Path, root: u32, count: u32) {
    let path = bundle.join("config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let linux = &mut config["linux"];
    linux["namespaces"]
        .as_array_mut()
        .expect("namespaces")
        .push(serde_json::json!({"type": "user"}));
    let map = serde_json::json!([{"containerID": 0, "hostID": root, "size": count}]);
    linux["uidMappings"] = map.clone();
    linux["gidMappings"] = map;
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    chown_tree(rootfs, root, root);
    chown_tree(&bundle.join("out"), root, root);
}

/// `chown -hR uid:gid dir`, never following a symlink (the image's links
/// point at host paths such as /bin/busybox).
pub fn chown_tree(dir: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid))
        .unwrap_or_else(|e| panic!("chown {}: {e}", dir.display()));
    let meta = std::fs::symlink_metadata(dir).unwrap();
    if meta.is_dir() {
        for entry in std::fs::read_dir(dir).unwrap() {
            chown_tree(&entry.unwrap().path(), uid, gid);
        }
    }
}

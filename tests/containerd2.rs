//! containerd 2.x, as fleets run it now: Debian sid's containerd 2.1
//! (config version 3, `io.containerd.cri.v1.runtime`, CDI on by default)
//! and runc 1.3, from a root made once by debootstrap into
//! `/var/cache/oci-nvidia-hook/sid` (harness::debroot), driven through its
//! CRI as the kubelet drives it (harness::runtime::cri).
//!
//! One namespace and one containerd state for the whole suite; containerd
//! is restarted on each config, as an administrator restarts it after
//! `nvidia-ctk runtime configure --runtime=containerd`, which runs inside
//! the namespace on NVIDIA's default paths (`/etc/containerd/config.toml`
//! and `conf.d/99-nvidia.toml`, in the namespace's own `/etc`):
//!
//! - plain, on containerd's own default config (`containerd config
//!   default`) whose runc table lacks `runtime_type`, as an administrator's
//!   config often does: our runtime gets the runc v2 shim's (else every pod
//!   of the handler fails, "container.Runtime.Name must be set"); the
//!   drop-in holds our runtime alone, so the main config's later
//!   `enable_cdi = false` still applies; an envvar pod through the
//!   `nvidia` handler and a CDI-device pod (CRI `CDIDevices`);
//! - `--cdi.enabled --set-as-default`, then `--set-as-default=false`
//!   (ours no longer the default);
//! - `--drop-in-config` elsewhere, with its own `imports` pattern;
//! - `--config-source=command`: the settings copied from containerd's
//!   `config dump` (its built-in runc); an envvar pod.
//!
//! Each config: containerd starts on it, its CRI plugins load, and
//! `containerd config dump` shows our runtime as meant. Each pod: the
//! allocated GPU opens (ENXIO), a decoy is denied (EPERM), libcuda
//! answers, and the runtime lists nothing once the pod is removed; at the
//! end no cgroup, mount or file of the host is left.
//!
//! Needs root and debootstrap (integration/install-deps); the first run
//! makes the root: `cargo test --features _test_as_root --test containerd2`.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use harness::debroot::sid;
use harness::mounts::host_mounts;
use harness::runtime::bundle::{template_rootfs, work_root, write_hook_config};
use harness::runtime::cleanup::{assert_left_as_found, remove_tree_safely};
use harness::runtime::cri::{
    ensure_cri_api, import_pod_images, run_pod_leaving_nothing, PodRequest, PAUSE_IMAGE,
};
use harness::runtime::daemons::{checker_script, DaemonSetup, Daemons};
use harness::runtime::host_state::tree_listing;
use harness::runtime::injected::{assert_gpus, gpu};
use harness::runtime::oci_config::path_str;
use harness::runtime::process::{run_bounded, Finished};
use harness::runtime::run::{serial, Run, RUN_LIMIT};
use harness::simhost::{require_root, Fixture, SimHost};

/// The test image: the template rootfs, imported into containerd.
const IMAGE: &str = "docker.io/library/onh-gpu:test";
/// containerd's and NVIDIA's default paths, inside the namespace.
const CONFIG: &str = "/etc/containerd/config.toml";
const DROP_IN: &str = "/etc/containerd/conf.d/99-nvidia.toml";
/// The CRI runtime plugin of a version 3 config.
const CRI: &str = "io.containerd.cri.v1.runtime";
/// The shim a runtime needs a name for.
const RUNC_V2: &str = "io.containerd.runc.v2";

/// The namespace, its containerd, and what the host looked like before.
struct Node {
    daemons: Daemons,
    hook_log: PathBuf,
    runtime_path: String,
}

impl Node {
    /// `nvidia-ctk runtime configure --runtime=containerd ARGS` (this
    /// binary under that name) inside the namespace, which must succeed.
    fn configure(&self, args: &[&str]) {
        let mut cmd = self.in_namespace(&path_str(&self.daemons.dir.join("bin/nvidia-ctk")));
        cmd.args(["runtime", "configure", "--runtime=containerd"])
            .arg(format!("--nvidia-runtime-path={}", self.runtime_path))
            .args(args);
        let out = run_bounded(cmd, RUN_LIMIT);
        assert!(
            out.status.is_some_and(|s| s.success()),
            "nvidia-ctk runtime configure {args:?}: {}{}",
            out.stdout,
            out.stderr
        );
    }

    /// `program` in the namespace with a bare environment.
    fn in_namespace(&self, program: &str) -> std::process::Command {
        let mut cmd = self.daemons.in_namespace(program);
        cmd.env_clear().env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        cmd
    }

    /// `containerd ARGS` in the namespace, which must succeed; its stdout.
    fn containerd(&self, args: &[&str]) -> String {
        let mut cmd = self.in_namespace("containerd");
        cmd.args(args);
        let out: Finished = run_bounded(cmd, RUN_LIMIT);
        assert!(
            out.status.is_some_and(|s| s.success()),
            "containerd {args:?}: {}{}",
            out.stdout,
            out.stderr
        );
        out.stdout
    }

    /// What containerd makes of its config, imports merged.
    fn dump(&self) -> toml::Table {
        let text = self.containerd(&["--config", CONFIG, "config", "dump"]);
        toml::from_str(&text).unwrap_or_else(|e| panic!("config dump: {e}\n{text}"))
    }

    /// A file of the namespace's `/etc`, read or written from here.
    fn etc(&self, path: &str) -> PathBuf {
        self.daemons.ns_path(path)
    }

    /// Restarts containerd on [`CONFIG`] and checks its CRI plugins loaded.
    fn restart(&mut self) {
        self.daemons.stop_containerd();
        self.daemons.start_containerd(Path::new(CONFIG));
        let plugins = self.daemons.ctr("k8s.io", &["plugins", "ls"]);
        for (kind, id) in [
            ("io.containerd.grpc.v1", "cri"),
            ("io.containerd.cri.v1", "runtime"),
        ] {
            assert!(
                plugins.stdout.lines().any(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    f.first() == Some(&kind) && f.get(1) == Some(&id) && f.last() == Some(&"ok")
                }),
                "{kind} {id} did not load:\n{}\n{}",
                plugins.stdout,
                self.daemons.logs()
            );
        }
    }

    /// One pod whose container runs the checker (decoys at `decoys`),
    /// through `handler`, with `envs` and `cdi_devices`.
    fn pod(
        &self,
        name: &str,
        decoys: &[u32],
        handler: &str,
        envs: &[(&str, &str)],
        cdi_devices: &[&str],
    ) -> Run {
        let script = checker_script(decoys);
        run_pod_leaving_nothing(
            &self.daemons,
            &PodRequest {
                name,
                image: IMAGE,
                command: &["/bin/sh", "-c", &script],
                runtime_handler: handler,
                envs,
                mounts: &[],
                annotations: &[],
                cdi_devices,
            },
            &self.hook_log,
        )
        .run
    }
}

/// `text` with `from` replaced by `to` once; fails when `from` is not there.
fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} not in:\n{text}");
    text.replacen(from, to, 1)
}

/// The CRI runtime plugin's section of a config.
fn cri(config: &toml::Table) -> &toml::Value {
    &config["plugins"][CRI]
}

/// Every case on one namespace and one containerd state.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn containerd_2_runs_gpu_pods_on_what_nvidia_ctk_writes() {
    require_root();
    let _serial = serial();
    let started = Instant::now();
    let root = sid();
    ensure_cri_api(&root);
    let host = SimHost::shared(Fixture::real(4));
    let work = work_root().join("containerd2");
    remove_tree_safely(&work);
    fs::create_dir_all(&work).unwrap();
    let (mounts_before, driver_before) = (host_mounts(), tree_listing(&host.dir));
    let hook_config = work.join("hook.toml");
    let hook_log = work.join("hook.log");
    write_hook_config(&host, &hook_config, &hook_log, "debug");
    let spec = work.join("nvidia.yaml");
    fs::write(&spec, host.stdout(&["cdi", "generate", "--output", "-"])).unwrap();
    let dir = work.join("node");
    let daemons = Daemons::hold(
        &dir,
        &DaemonSetup {
            hook_config: &hook_config,
            links: &["nvidia-container-runtime", "nvidia-cdi-hook", "nvidia-ctk"],
            runtimes: &[],
            default_runtime: None,
            docker_config: None,
            cdi_dir: None,
            etc_files: &[("cdi/nvidia.yaml", &spec)],
            root: Some(&root),
            cri: None,
        },
    );
    let mut node = Node {
        runtime_path: path_str(&dir.join("bin/nvidia-container-runtime")),
        daemons,
        hook_log,
    };

    // containerd 2.x's own default config, on this node's paths. No
    // CAP_SYS_RESOURCE here: runc may not lower oom_score_adj (TESTBED.md).
    let default = node.containerd(&["config", "default"]);
    assert!(default.starts_with("version = 3\n"), "{default}");
    let default = edit(
        &default,
        "root = '/var/lib/containerd'",
        &format!("root = '{}'", path_str(&dir.join("ctd-root"))),
    );
    let default = edit(
        &default,
        "state = '/run/containerd'",
        &format!("state = '{}'", path_str(&dir.join("ctd-state"))),
    );
    let default = edit(
        &default,
        "address = '/run/containerd/containerd.sock'",
        &format!(
            "address = '{}'",
            path_str(&node.daemons.containerd_socket())
        ),
    );
    let default = edit(
        &default,
        "sandbox = 'registry.k8s.io/pause:3.10'",
        &format!("sandbox = '{PAUSE_IMAGE}'"),
    );
    let default = edit(
        &default,
        "restrict_oom_score_adj = false",
        "restrict_oom_score_adj = true",
    );
    // An administrator's runc table, as guides write it: its options, no
    // runtime_type (containerd's built-in runc still has one).
    let admin = edit(&default, &format!("runtime_type = '{RUNC_V2}'\n"), "");
    fs::create_dir_all(node.etc("/etc/containerd")).unwrap();
    fs::write(node.etc(CONFIG), &admin).unwrap();

    // Plain.
    node.configure(&[]);
    let drop_in: toml::Table =
        toml::from_str(&fs::read_to_string(node.etc(DROP_IN)).unwrap()).unwrap();
    let runtimes = cri(&drop_in)["containerd"]["runtimes"].as_table().unwrap();
    assert_eq!(
        runtimes.keys().collect::<Vec<_>>(),
        ["nvidia"],
        "the drop-in holds our runtime alone: {drop_in:?}"
    );
    let main = fs::read_to_string(node.etc(CONFIG)).unwrap();
    assert_eq!(
        main,
        edit(
            &admin,
            "imports = []",
            "imports = [\"/etc/containerd/conf.d/*.toml\"]"
        )
    );
    let dump = node.dump();
    let nvidia = &cri(&dump)["containerd"]["runtimes"]["nvidia"];
    assert_eq!(nvidia["runtime_type"].as_str(), Some(RUNC_V2), "{nvidia:?}");
    assert_eq!(
        nvidia["options"]["BinaryName"].as_str(),
        Some(node.runtime_path.as_str())
    );
    assert_eq!(
        cri(&dump)["containerd"]["default_runtime_name"].as_str(),
        Some("runc")
    );
    node.restart();
    import_pod_images(
        &node.daemons,
        &template_rootfs(&host),
        IMAGE,
        &work.join("images"),
    );
    let (uuid, minor) = (|i| gpu(&host, i).uuid, |i| gpu(&host, i).minor);
    let value = uuid(1);
    let run = node.pod(
        "envvar",
        &[minor(0)],
        "nvidia",
        &[("NVIDIA_VISIBLE_DEVICES", &value)],
        &[],
    );
    assert_gpus(&run, &host, &[1], &[minor(0)]);
    let name = format!("nvidia.com/gpu={}", uuid(3));
    let run = node.pod("cdi-cri", &[minor(1)], "", &[], &[&name]);
    assert_gpus(&run, &host, &[3], &[minor(1)]);
    // The administrator's later edit to the main config still applies: the
    // drop-in carries no copy of the CRI section to override it.
    let main = edit(&main, "enable_cdi = true", "enable_cdi = false");
    fs::write(node.etc(CONFIG), &main).unwrap();
    assert_eq!(cri(&node.dump())["enable_cdi"].as_bool(), Some(false));

    // --cdi.enabled and --set-as-default, then ours no longer the default.
    node.configure(&["--cdi.enabled", "--set-as-default"]);
    let dump = node.dump();
    assert_eq!(cri(&dump)["enable_cdi"].as_bool(), Some(true));
    assert_eq!(
        cri(&dump)["containerd"]["default_runtime_name"].as_str(),
        Some("nvidia")
    );
    node.restart();
    node.configure(&["--set-as-default=false"]);
    let dump = node.dump();
    assert_eq!(
        cri(&dump)["containerd"]["default_runtime_name"].as_str(),
        Some("runc")
    );
    assert_eq!(
        cri(&dump)["enable_cdi"].as_bool(),
        Some(false),
        "the main config's own setting again"
    );

    // --drop-in-config elsewhere, on containerd's default config.
    fs::remove_dir_all(node.etc("/etc/containerd/conf.d")).unwrap();
    fs::write(node.etc(CONFIG), &default).unwrap();
    node.configure(&["--drop-in-config=/etc/containerd/runtimes.d/nvidia.toml"]);
    let main = fs::read_to_string(node.etc(CONFIG)).unwrap();
    assert!(
        main.contains("imports = [\"/etc/containerd/runtimes.d/*.toml\"]"),
        "{main}"
    );
    let dump = node.dump();
    assert_eq!(
        cri(&dump)["containerd"]["runtimes"]["nvidia"]["runtime_type"].as_str(),
        Some(RUNC_V2)
    );
    node.restart();

    // --config-source=command: the settings from the dump, which has
    // containerd's built-in runc (its runtime_type and sandboxer).
    fs::remove_dir_all(node.etc("/etc/containerd/runtimes.d")).unwrap();
    fs::write(node.etc(CONFIG), &admin).unwrap();
    node.configure(&["--config-source=command"]);
    let drop_in: toml::Table =
        toml::from_str(&fs::read_to_string(node.etc(DROP_IN)).unwrap()).unwrap();
    let ours = &cri(&drop_in)["containerd"]["runtimes"]["nvidia"];
    assert_eq!(ours["runtime_type"].as_str(), Some(RUNC_V2), "{ours:?}");
    assert_eq!(ours["sandboxer"].as_str(), Some("podsandbox"), "{ours:?}");
    node.restart();
    let value = uuid(2);
    let run = node.pod(
        "command-envvar",
        &[minor(3)],
        "nvidia",
        &[("NVIDIA_VISIBLE_DEVICES", &value)],
        &[],
    );
    assert_gpus(&run, &host, &[2], &[minor(3)]);

    let tag = node.daemons.tag.clone();
    drop(node);
    assert_left_as_found(
        &tag,
        &mounts_before,
        &host.dir,
        &driver_before,
        "after containerd stopped",
    );
    remove_tree_safely(&work);
    eprintln!(
        "containerd 2.x suite: {:.0} s",
        started.elapsed().as_secs_f64()
    );
}

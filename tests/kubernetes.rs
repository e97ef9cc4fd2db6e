//! A Kubernetes node's path to GPUs: containerd 1.7's CRI plugin (from the
//! trixie root, harness::debroot) with `enable_cdi` and the `nvidia`
//! runtime handler written by our `nvidia-ctk runtime configure
//! --runtime=containerd --cdi.enabled`, driven by a CRI client exactly as
//! the kubelet drives it (RunPodSandbox, CreateContainer, StartContainer,
//! then the removals: harness::runtime::cri). Each container is built the
//! way the NVIDIA device plugin's Allocate answer makes the kubelet build
//! it (NVIDIA/k8s-device-plugin, `internal/plugin/server.go`):
//!
//! - `envvar`: `NVIDIA_VISIBLE_DEVICES=<uuid>` under the `nvidia` handler;
//! - `volume-mounts`: `/dev/null` at `/var/run/nvidia-container-devices/<uuid>`
//!   under the `nvidia` handler, with `accept-volume-mounts`;
//! - `cdi-annotations`: `cdi.k8s.io/nvidia-device-plugin_<uuid>` naming the device;
//! - `cdi-cri`: the same name in the CRI `CDIDevices` field;
//!
//! the last two with our spec, and with the plugin's own spec (kind
//! `k8s.device-plugin.nvidia.com/gpu`, hooks calling `nvidia-cdi-hook`) in
//! `/var/run/cdi`. For each, only the allocated GPU is usable (ENXIO;
//! a decoy node gives EPERM), libcuda answers 12020, and once the pod is
//! removed the runtime lists nothing and no cgroup, mount or file of the
//! host is left. Also the GPU Operator's layout: the driver root at
//! `/run/nvidia/driver` with its device nodes.
//!
//! Run as root: `make test`, or
//! `cargo test --features _test_as_root --test kubernetes -- --nocapture`.

use std::fs;
use std::path::{Path, PathBuf};

use harness::debroot::trixie;
use harness::runtime::bundle::{template_rootfs, work_root, write_hook_config};
use harness::runtime::cleanup::remove_tree_safely;
use harness::runtime::cri::{
    device_plugin_spec_for, ensure_cri_api, import_pod_images, run_checker_pod, PluginHooks,
    PodOutcome, Shape, PAUSE_IMAGE,
};
use harness::runtime::daemons::{CriSetup, DaemonSetup, Daemons};
use harness::runtime::host_state::NodeBefore;
use harness::runtime::injected::{assert_gpus, assert_gpus_any_layout, gpu};
use harness::runtime::oci_config::path_str;
use harness::simhost::{require_root, Fixture, SimHost};

/// The test image: the template rootfs, imported into containerd.
const IMAGE: &str = "docker.io/library/onh-gpu:test";
/// The device plugin's CDI kind.
const PLUGIN_KIND: &str = "k8s.device-plugin.nvidia.com/gpu";

/// One node: containerd with the CRI plugin in the trixie root, the
/// images imported, the host's state recorded to compare at the end.
struct Node {
    daemons: Daemons,
    hook_log: PathBuf,
    work: PathBuf,
    before: NodeBefore,
}

impl Node {
    /// Starts a node named `name` for `host`, whose hook config is
    /// `hook_config` (written by the caller into `work`), with `spec`
    /// (ours), when given, in its `/etc/cdi`.
    fn start(name: &str, host: &SimHost, hook_config: &Path, spec: Option<&Path>) -> Node {
        require_root();
        let root = trixie();
        ensure_cri_api(&root);
        let work = work_root().join("k8s").join(name);
        let before = NodeBefore::take(&host.dir);
        let dir = work.join("node");
        let runtime_path = format!(
            "--nvidia-runtime-path={}",
            path_str(&dir.join("bin/nvidia-container-runtime"))
        );
        let daemons = Daemons::start(
            &dir,
            &DaemonSetup {
                hook_config,
                links: &["nvidia-container-runtime", "nvidia-cdi-hook"],
                runtimes: &[],
                default_runtime: None,
                docker_config: None,
                cdi_dir: None,
                etc_files: &spec
                    .map(|s| ("cdi/nvidia.yaml", s))
                    .into_iter()
                    .collect::<Vec<_>>(),
                root: Some(&root),
                cri: Some(CriSetup {
                    sandbox_image: PAUSE_IMAGE,
                    configure: &[&runtime_path, "--cdi.enabled"],
                }),
            },
        );
        import_pod_images(
            &daemons,
            &template_rootfs(host),
            IMAGE,
            &work.join("images"),
        );
        Node {
            daemons,
            hook_log: work.join("hook.log"),
            work,
            before,
        }
    }

    /// One pod whose container runs the checker (after making `decoys`).
    fn pod(&self, name: &str, decoys: &[u32], shape: Shape) -> PodOutcome {
        run_checker_pod(&self.daemons, name, IMAGE, decoys, shape, &self.hook_log)
    }

    /// Stops containerd and checks the host is as it was.
    fn finish(self) {
        let tag = self.daemons.tag.clone();
        drop(self.daemons);
        self.before.assert_left_alone(&tag);
        remove_tree_safely(&self.work);
    }
}

/// The hook config for `host` (logging to `log`) with `accept-volume-mounts`,
/// and our spec for it, both in `work`.
fn config_and_spec(host: &SimHost, work: &Path) -> (PathBuf, PathBuf) {
    remove_tree_safely(work);
    fs::create_dir_all(work).unwrap();
    let config = work.join("hook.toml");
    write_hook_config(host, &config, &work.join("hook.log"), "debug");
    let text = fs::read_to_string(&config).unwrap();
    fs::write(&config, format!("accept-volume-mounts = true\n{text}")).unwrap();
    let spec = work.join("nvidia.yaml");
    fs::write(&spec, host.stdout(&["cdi", "generate", "--output", "-"])).unwrap();
    (config, spec)
}

fn host() -> SimHost {
    SimHost::shared(Fixture::real(4))
}

/// The four strategies with our binary alone: envvar and volume-mounts
/// under the `nvidia` handler, cdi-annotations and cdi-cri with our spec.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn device_plugin_strategies_through_the_cri() {
    let _serial = harness::runtime::run::serial();
    let host = host();
    let work = work_root().join("k8s").join("strategies");
    let (config, spec) = config_and_spec(&host, &work);
    let node = Node::start("strategies", &host, &config, Some(&spec));
    let (uuid, minor) = (|i| gpu(&host, i).uuid, |i| gpu(&host, i).minor);

    let value = uuid(1);
    let envvar = node.pod(
        "envvar",
        &[minor(0)],
        Shape {
            handler: "nvidia",
            envs: &[("NVIDIA_VISIBLE_DEVICES", &value)],
            ..Shape::default()
        },
    );
    assert_gpus(&envvar.run, &host, &[1], &[minor(0)]);

    let at = format!("/var/run/nvidia-container-devices/{}", uuid(2));
    let mounts = [("/dev/null", at.as_str())];
    let volumes = node.pod("volume-mounts", &[minor(3)], Shape::volume_mounts(&mounts));
    assert_gpus(&volumes.run, &host, &[2], &[minor(3)]);

    let key = format!("cdi.k8s.io/nvidia-device-plugin_{}", uuid(0));
    let name = format!("nvidia.com/gpu={}", uuid(0));
    let annotations = node.pod(
        "cdi-annotations",
        &[minor(2)],
        Shape {
            annotations: &[(&key, &name)],
            ..Shape::default()
        },
    );
    assert_gpus(&annotations.run, &host, &[0], &[minor(2)]);

    let name = format!("nvidia.com/gpu={}", uuid(3));
    let cri = node.pod(
        "cdi-cri",
        &[minor(1)],
        Shape {
            cdi_devices: &[&name],
            ..Shape::default()
        },
    );
    assert_gpus(&cri.run, &host, &[3], &[minor(1)]);
    node.finish();
}

/// cdi-annotations and cdi-cri with the device plugin's own spec in
/// `/var/run/cdi`, whose hooks call `nvidia-cdi-hook` (this binary under
/// that name).
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn device_plugin_spec_through_the_cri() {
    let _serial = harness::runtime::run::serial();
    let host = host();
    let work = work_root().join("k8s").join("plugin-spec");
    let (config, spec) = config_and_spec(&host, &work);
    let node = Node::start("plugin-spec", &host, &config, Some(&spec));
    let plugin = device_plugin_spec_for(
        &host,
        PluginHooks::CdiHook(&node.daemons.dir.join("bin/nvidia-cdi-hook")),
    );
    // /var/run is a link to /run: named by its target, since the link
    // would resolve against this host's root from outside the namespace.
    let dir = node.daemons.ns_path("/run/cdi");
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join("k8s.device-plugin.nvidia.com-gpu.json"),
        serde_json::to_vec_pretty(&plugin).unwrap(),
    )
    .unwrap();
    let (uuid, minor) = (|i| gpu(&host, i).uuid, |i| gpu(&host, i).minor);

    let key = format!("cdi.k8s.io/nvidia-device-plugin_{}", uuid(2));
    let name = format!("{PLUGIN_KIND}={}", uuid(2));
    let annotations = node.pod(
        "plugin-cdi-annotations",
        &[minor(1)],
        Shape {
            annotations: &[(&key, &name)],
            ..Shape::default()
        },
    );
    // NVIDIA's layout, not ours: the driver's files at their host paths.
    assert_gpus_any_layout(&annotations.run, &host, &[2], &[minor(1)]);

    let name = format!("{PLUGIN_KIND}={}", uuid(1));
    let cri = node.pod(
        "plugin-cdi-cri",
        &[minor(2)],
        Shape {
            cdi_devices: &[&name],
            ..Shape::default()
        },
    );
    assert_gpus_any_layout(&cri.run, &host, &[1], &[minor(2)]);
    node.finish();
}

/// The GPU Operator's layout: the driver container's root at
/// `/run/nvidia/driver`, its device nodes under it, and the hook config
/// and our spec naming that root. The simulated host's driver tree and
/// device nodes are bound there inside the node's namespace only.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn gpu_operator_driver_root_through_the_cri() {
    const DRIVER: &str = "/run/nvidia/driver";
    let _serial = harness::runtime::run::serial();
    let host = host();
    let work = work_root().join("k8s").join("operator");
    let (config, _) = config_and_spec(&host, &work);
    let text = fs::read_to_string(&config).unwrap();
    let text = text
        .replace(&path_str(&host.dir.join("driver")), DRIVER)
        .replace(&path_str(&host.dir.join("devroot")), DRIVER);
    assert!(text.contains(&format!("root = \"{DRIVER}\"")), "{text}");
    fs::write(&config, text).unwrap();
    let node = Node::start("operator", &host, &config, None);
    // The driver container's root: a tmpfs holding the driver tree's
    // directories and the device nodes' /dev.
    const LAYOUT: &str = r#"set -e
driver=$1 devroot=$2 at=$3
mkdir -p "$at"
mount -t tmpfs -o mode=0755 operator "$at"
for e in "$driver"/*; do
  mkdir "$at/${e##*/}"
  mount --rbind "$e" "$at/${e##*/}"
done
mkdir "$at/dev"
mount --rbind "$devroot/dev" "$at/dev"
mkdir -p /run/cdi"#;
    let mut layout = node.daemons.in_namespace("sh");
    layout
        .args(["-c", LAYOUT, "sh"])
        .arg(host.dir.join("driver"))
        .arg(host.dir.join("devroot"))
        .arg(DRIVER);
    let out = harness::runtime::process::run_bounded(layout, std::time::Duration::from_secs(30));
    assert!(out.status.is_some_and(|s| s.success()), "{}", out.stderr);
    // Our spec for that root, made where the root is.
    let mut generate = node
        .daemons
        .in_namespace(&path_str(harness::project::hook_binary()));
    generate.arg("--config").arg(&config).args([
        "cdi",
        "generate",
        "--output",
        "/run/cdi/nvidia.yaml",
    ]);
    let out = harness::runtime::process::run_bounded(generate, std::time::Duration::from_secs(30));
    assert!(out.status.is_some_and(|s| s.success()), "{}", out.stderr);
    let spec = fs::read_to_string(node.daemons.ns_path("/run/cdi/nvidia.yaml")).unwrap();
    assert!(
        spec.contains(&format!("hostPath: {DRIVER}/dev/nvidia")),
        "{spec}"
    );
    let (uuid, minor) = (|i| gpu(&host, i).uuid, |i| gpu(&host, i).minor);

    let value = uuid(2);
    let envvar = node.pod(
        "operator-envvar",
        &[minor(0)],
        Shape {
            handler: "nvidia",
            envs: &[("NVIDIA_VISIBLE_DEVICES", &value)],
            ..Shape::default()
        },
    );
    assert_gpus(&envvar.run, &host, &[2], &[minor(0)]);
    let name = format!("nvidia.com/gpu={}", uuid(1));
    let cri = node.pod(
        "operator-cdi-cri",
        &[minor(3)],
        Shape {
            cdi_devices: &[&name],
            ..Shape::default()
        },
    );
    assert_gpus(&cri.run, &host, &[1], &[minor(3)]);
    node.finish();
}

//! The Kubernetes GPU flows on containerd 2.x (Debian sid's containerd
//! 2.1, runc 1.3: harness::runtime::containerd2), driven through its CRI as
//! the kubelet drives it, on containerd's own default config with our
//! `nvidia-ctk runtime configure --runtime=containerd --cdi.enabled` run on
//! NVIDIA's default paths:
//!
//! - the device plugin's `volume-mounts` strategy under the `nvidia`
//!   handler: `/dev/null` at `/var/run/nvidia-container-devices/<uuid>`,
//!   accepted by NVIDIA's own key
//!   `accept-nvidia-visible-devices-as-volume-mounts` in
//!   `/etc/nvidia-container-runtime/config.toml`;
//! - the device plugin's `cdi-annotations` and `cdi-cri` strategies with
//!   its own spec in `/var/run/cdi`, in NVIDIA v1.20's shape: hooks through
//!   `/usr/bin/nvidia-ctk hook …` (the plugin's default
//!   `--nvidia-cdi-hook-path`), `enable-cuda-compat` and
//!   `disable-device-node-modification` among them; `/usr/bin/nvidia-ctk`
//!   is this binary, on an overlay of the namespace's `/usr/bin`;
//! - the GPU Operator's management flow: its pods ask for
//!   `management.nvidia.com/gpu=all` through a
//!   `nvidia.cdi.k8s.io/container.<name>` annotation, with our runtime in
//!   `cdi` mode and that annotation prefix (NVIDIA's keys
//!   `nvidia-container-runtime.mode` and
//!   `….modes.cdi.annotation-prefixes`), the runtime's
//!   `container_annotations` passing the prefix through (as NVIDIA's
//!   installer writes it for the prefix), and the spec of
//!   `nvidia-ctk cdi generate --mode management`.
//!
//! Each pod: the allocated GPUs open (ENXIO), an unallocated one is denied
//! (EPERM), libcuda answers, and the runtime lists nothing once the pod is
//! removed; at the end no cgroup, mount or file of the host is left.
//!
//! Needs root and the sid root (made by the first run of
//! `cargo test --features _test_as_root --test containerd2_k8s`).

use std::fs;
use std::path::Path;

use harness::runtime::containerd2::{cri, Node, Suite, CONFIG, DROP_IN};
use harness::runtime::cri::{device_plugin_spec_for, PluginHooks, Shape};
use harness::runtime::injected::{assert_gpus, assert_gpus_any_layout, gpu};
use harness::runtime::oci_config::path_str;
use harness::runtime::process::run_bounded;
use harness::runtime::run::RUN_LIMIT;

/// The test image: the template rootfs, imported into containerd.
const IMAGE: &str = "docker.io/library/onh-gpu:test";
/// The device plugin's CDI kind.
const PLUGIN_KIND: &str = "k8s.device-plugin.nvidia.com/gpu";
/// Where the device plugin's spec names `nvidia-ctk`.
const CTK: &str = "/usr/bin/nvidia-ctk";
/// The GPU Operator's annotation prefix and its management device.
const OPERATOR_PREFIX: &str = "nvidia.cdi.k8s.io/";
const MANAGEMENT_ALL: &str = "management.nvidia.com/gpu=all";
/// NVIDIA's config: the device plugin's volume mounts accepted.
const NVIDIA_CONFIG: &str = "accept-nvidia-visible-devices-as-volume-mounts = true\n";

/// `/usr/bin/nvidia-ctk` in the node's namespace: an overlay of its
/// `/usr/bin` (upper and work directories in `dir`) holding a link to this
/// binary; the sid root itself is left alone.
fn install_ctk(node: &Node, dir: &Path) {
    let (upper, work) = (dir.join("usr-bin-upper"), dir.join("usr-bin-work"));
    fs::create_dir_all(&upper).unwrap();
    fs::create_dir_all(&work).unwrap();
    std::os::unix::fs::symlink(harness::project::hook_binary(), upper.join("nvidia-ctk")).unwrap();
    let mut cmd = node.in_namespace("mount");
    cmd.args(["-t", "overlay", "onh-usr-bin", "-o"])
        .arg(format!(
            "lowerdir=/usr/bin,upperdir={},workdir={}",
            path_str(&upper),
            path_str(&work)
        ))
        .arg("/usr/bin");
    let out = run_bounded(cmd, RUN_LIMIT);
    assert!(out.status.is_some_and(|s| s.success()), "{}", out.stderr);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn containerd_2_serves_the_device_plugin_and_the_gpu_operator() {
    let mut suite = Suite::start(
        "containerd2-k8s",
        &[("nvidia-container-runtime/config.toml", NVIDIA_CONFIG)],
    );
    let (host, work, node) = (&suite.host, &suite.work, &mut suite.node);
    let dir = work.join("node");
    // The management spec, made as the operator's toolkit makes it, by
    // `nvidia-ctk cdi generate --mode management` on the node.
    let mut generate = node.in_namespace(&path_str(&dir.join("bin/nvidia-ctk")));
    generate.args([
        "cdi",
        "generate",
        "--mode",
        "management",
        "--output",
        "/etc/cdi/management.yaml",
    ]);
    let out = run_bounded(generate, RUN_LIMIT);
    assert!(out.status.is_some_and(|s| s.success()), "{}", out.stderr);
    let text = fs::read_to_string(node.etc("/etc/cdi/management.yaml")).unwrap();
    assert!(text.contains("kind: management.nvidia.com/gpu"), "{text}");
    fs::write(node.etc(CONFIG), &node.default_config).unwrap();
    node.configure(&["--cdi.enabled"]);
    node.restart();
    node.import_images(host, IMAGE, &work.join("images"));
    let (uuid, minor) = (|i| gpu(host, i).uuid, |i| gpu(host, i).minor);

    // volume-mounts, under the nvidia handler.
    let at = format!("/var/run/nvidia-container-devices/{}", uuid(2));
    let mounts = [("/dev/null", at.as_str())];
    let run = node
        .pod(
            "volume-mounts",
            IMAGE,
            &[minor(3)],
            Shape::volume_mounts(&mounts),
        )
        .run;
    assert_gpus(&run, host, &[2], &[minor(3)]);

    // The device plugin's own spec, v1.20's shape, hooks through nvidia-ctk.
    install_ctk(node, &dir);
    let plugin = device_plugin_spec_for(
        host,
        PluginHooks::Ctk {
            path: Path::new(CTK),
            driver_version: &host.facts.driver_version,
        },
    );
    let hooks = plugin["containerEdits"]["hooks"].as_array().unwrap();
    let names: Vec<&str> = hooks
        .iter()
        .map(|h| {
            assert_eq!(h["path"], CTK, "{h}");
            assert_eq!(h["args"][0], "nvidia-ctk", "{h}");
            assert_eq!(h["args"][1], "hook", "{h}");
            h["args"][2].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        names,
        [
            "create-symlinks",
            "enable-cuda-compat",
            "update-ldcache",
            "disable-device-node-modification"
        ]
    );
    // /var/run is a link to /run: named by its target, since the link
    // would resolve against this host's root from outside the namespace.
    let run_cdi = node.daemons.ns_path("/run/cdi");
    fs::create_dir_all(&run_cdi).unwrap();
    fs::write(
        run_cdi.join("k8s.device-plugin.nvidia.com-gpu.json"),
        serde_json::to_vec_pretty(&plugin).unwrap(),
    )
    .unwrap();
    let key = format!("cdi.k8s.io/nvidia-device-plugin_{}", uuid(1));
    let name = format!("{PLUGIN_KIND}={}", uuid(1));
    let run = node
        .pod(
            "plugin-cdi-annotations",
            IMAGE,
            &[minor(0)],
            Shape {
                annotations: &[(&key, &name)],
                ..Shape::default()
            },
        )
        .run;
    // NVIDIA's layout, not ours: the driver's files at their host paths;
    // libcuda answers only if the hooks made its link and the loader cache.
    assert_gpus_any_layout(&run, host, &[1], &[minor(0)]);
    let name = format!("{PLUGIN_KIND}={}", uuid(3));
    let run = node
        .pod(
            "plugin-cdi-cri",
            IMAGE,
            &[minor(2)],
            Shape {
                cdi_devices: &[&name],
                ..Shape::default()
            },
        )
        .run;
    assert_gpus_any_layout(&run, host, &[3], &[minor(2)]);

    // The GPU Operator's management flow: the runtime in cdi mode with the
    // operator's prefix, containerd passing the prefix's annotations on.
    fs::write(
        node.etc("/etc/nvidia-container-runtime/config.toml"),
        format!(
            "{NVIDIA_CONFIG}\n[nvidia-container-runtime]\nmode = \"cdi\"\n\n\
             [nvidia-container-runtime.modes.cdi]\nannotation-prefixes = [\"{OPERATOR_PREFIX}\"]\n"
        ),
    )
    .unwrap();
    // Our runtime's table (copied from runc's, so it already has the key):
    // its container_annotations set to the prefix's pattern.
    let drop_in = fs::read_to_string(node.etc(DROP_IN)).unwrap();
    let mut in_ours = false;
    let mut set = 0;
    let lines: Vec<String> = drop_in
        .lines()
        .map(|line| {
            if line.starts_with('[') {
                in_ours = line.starts_with("[plugins.") && line.ends_with(".runtimes.nvidia]");
            } else if in_ours && line.trim_start().starts_with("container_annotations") {
                set += 1;
                return format!("container_annotations = [\"{OPERATOR_PREFIX}*\"]");
            }
            line.to_string()
        })
        .collect();
    assert_eq!(set, 1, "one container_annotations in our table:\n{drop_in}");
    let drop_in = lines.join("\n") + "\n";
    fs::write(node.etc(DROP_IN), drop_in).unwrap();
    assert_eq!(
        cri(&node.dump())["containerd"]["runtimes"]["nvidia"]["container_annotations"]
            .as_array()
            .map(|a| a.len()),
        Some(1)
    );
    node.restart();
    let all: Vec<u32> = host.facts.gpus.iter().map(|g| g.index).collect();
    let decoy = host.facts.gpus.iter().map(|g| g.minor).max().unwrap() + 1;
    let key = format!("{OPERATOR_PREFIX}container.checker");
    let run = node
        .pod(
            "operator-management",
            IMAGE,
            &[decoy],
            Shape {
                handler: "nvidia",
                annotations: &[(&key, MANAGEMENT_ALL)],
                ..Shape::default()
            },
        )
        .run;
    assert_gpus(&run, host, &all, &[decoy]);

    suite.finish();
}

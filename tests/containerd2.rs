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

use harness::runtime::containerd2::{cri, edit, Node, Suite, CONFIG, DROP_IN, RUNC_V2};
use harness::runtime::cri::Shape;
use harness::runtime::injected::{assert_gpus, gpu};
use harness::runtime::run::Run;

/// The test image: the template rootfs, imported into containerd.
const IMAGE: &str = "docker.io/library/onh-gpu:test";

/// One pod whose container runs the checker (decoys at `decoys`),
/// through `handler`, with `envs` and `cdi_devices`.
fn pod(
    node: &Node,
    name: &str,
    decoys: &[u32],
    handler: &str,
    envs: &[(&str, &str)],
    cdi_devices: &[&str],
) -> Run {
    let shape = Shape {
        handler,
        envs,
        cdi_devices,
        ..Shape::default()
    };
    node.pod(name, IMAGE, decoys, shape).run
}

/// Every case on one namespace and one containerd state.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn containerd_2_runs_gpu_pods_on_what_nvidia_ctk_writes() {
    let mut suite = Suite::start("containerd2", &[]);
    let (host, work, node) = (&suite.host, &suite.work, &mut suite.node);
    // containerd 2.x's own default config, on this node's paths.
    let default = node.default_config.clone();
    // An administrator's runc table, as guides write it: its options, no
    // runtime_type (containerd's built-in runc still has one).
    let admin = edit(&default, &format!("runtime_type = '{RUNC_V2}'\n"), "");
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
    node.import_images(host, IMAGE, &work.join("images"));
    let (uuid, minor) = (|i| gpu(host, i).uuid, |i| gpu(host, i).minor);
    let value = uuid(1);
    let run = pod(
        node,
        "envvar",
        &[minor(0)],
        "nvidia",
        &[("NVIDIA_VISIBLE_DEVICES", &value)],
        &[],
    );
    assert_gpus(&run, host, &[1], &[minor(0)]);
    let name = format!("nvidia.com/gpu={}", uuid(3));
    let run = pod(node, "cdi-cri", &[minor(1)], "", &[], &[&name]);
    assert_gpus(&run, host, &[3], &[minor(1)]);
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
    let run = pod(
        node,
        "command-envvar",
        &[minor(3)],
        "nvidia",
        &[("NVIDIA_VISIBLE_DEVICES", &value)],
        &[],
    );
    assert_gpus(&run, host, &[2], &[minor(3)]);

    suite.finish();
}

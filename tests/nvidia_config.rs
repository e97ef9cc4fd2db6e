//! A host set up by NVIDIA's config file (`/etc/nvidia-container-runtime/
//! config.toml`): its keys hold when our hook runs, through Podman's
//! hooks.d entry and through runc's prestart hook, with our own file
//! silent on them. The file is the one NVIDIA's documentation hardens
//! multi-tenant hosts with, plus `no-cgroups` from its rootless Docker
//! instructions; each case has its control, the same run without NVIDIA's
//! file, so a key that stopped being read fails the test.
//!
//! Run as root: `make test`, or
//! `cargo test --features _test_as_root --test nvidia_config`.

use std::path::PathBuf;

use harness::runtime::bundle::{work_root, BundleExtras, Hook, Scenario};
use harness::runtime::container::run_with;
use harness::runtime::expected::node_specs;
use harness::runtime::injected::{assert_every_gpu_injected, assert_injected, Expected};
use harness::runtime::run::{serial, Run};
use harness::runtime::runtimes::Runtime;
use harness::simhost::{Fixture, SimHost};

fn host() -> SimHost {
    SimHost::shared(Fixture::real(4))
}

/// NVIDIA's multi-tenant hardening, as its documentation gives it.
const HARDENED: &str = "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n\
                        accept-nvidia-visible-devices-as-volume-mounts = true\n";

/// Writes NVIDIA's file for case `name` and returns the head of our config
/// that points at it (or at none, for the control).
fn nvidia_file(name: &str, text: Option<&str>) -> String {
    let Some(text) = text else {
        return "nvidia-config = \"\"\n".into();
    };
    let dir = work_root().join("nvidia-config");
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    format!("nvidia-config = \"{}\"\n", path.display())
}

fn run_case(
    name: &str,
    runtime: Runtime,
    env: &[(&str, &str)],
    nvidia: Option<&str>,
    binds: Vec<(PathBuf, String)>,
) -> Run {
    let serial = serial();
    let host = host();
    let name = format!(
        "{name}-{}",
        if nvidia.is_some() {
            "nvidia"
        } else {
            "control"
        }
    );
    run_with(
        &serial,
        &Scenario {
            name: &name,
            runtime,
            host: &host,
            env,
            hook: Hook::Prestart,
            decoy_minors: &[],
            decoys: &[],
            reuse_rootfs: false,
            prepare: None,
        },
        &BundleExtras {
            binds,
            config_head: Some(nvidia_file(&name, nvidia)),
            ..BundleExtras::default()
        },
    )
}

fn has_gpu_nodes(run: &Run) -> bool {
    run.report.nodes.keys().any(|path| {
        path.strip_prefix("/dev/nvidia")
            .is_some_and(|n| n.parse::<u32>().is_ok())
    })
}

/// Podman's hooks.d entry passes our default config; NVIDIA's hardening
/// key then stops an unprivileged image's `NVIDIA_VISIBLE_DEVICES=all`.
/// A key whose request is not done here is logged on the first start.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn nvidias_hardening_holds_through_the_hooks_d_entry() {
    let env = [("NVIDIA_VISIBLE_DEVICES", "all")];
    let text = format!("{HARDENED}swarm-resource = \"DOCKER_RESOURCE_GPU\"\n");
    let control = run_case("hooksd-env", Runtime::Podman, &env, None, Vec::new());
    assert_every_gpu_injected(&control, &host());

    let run = run_case("hooksd-env", Runtime::Podman, &env, Some(&text), Vec::new());
    run.assert_completed();
    assert!(
        !has_gpu_nodes(&run),
        "the image's variable was honoured:{}",
        run.describe()
    );
    let log = run.hook_log.clone().unwrap_or_default();
    assert!(
        log.contains("ignoring NVIDIA_VISIBLE_DEVICES") || log.contains("unprivileged"),
        "the hook did not say why:\n{log}"
    );
    assert!(
        log.contains("swarm-resource = \"DOCKER_RESOURCE_GPU\" is not honoured"),
        "the unhonoured key was not logged:\n{log}"
    );
}

/// With NVIDIA's volume-mount key, the device plugin's `/dev/null` mounts
/// choose the GPU, under runc.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn nvidias_volume_mount_key_selects_gpus_by_mount() {
    let host = host();
    let gpu = host
        .facts
        .gpus
        .iter()
        .find(|g| g.index == 1)
        .unwrap()
        .clone();
    let env = [(
        "NVIDIA_VISIBLE_DEVICES",
        "/var/run/nvidia-container-devices",
    )];
    let binds = vec![(
        PathBuf::from("/dev/null"),
        "/var/run/nvidia-container-devices/1".to_string(),
    )];
    // Without the key the mounts do not count, and the variable, which
    // names their directory, is no device list (NVIDIA's cli refuses it too).
    let control = run_case("mounts", Runtime::RuncV2, &env, None, binds.clone());
    assert!(
        !control.succeeded() && control.stderr.contains("malformed device list"),
        "mounts counted without the key:{}",
        control.describe()
    );

    let run = run_case("mounts", Runtime::RuncV2, &env, Some(HARDENED), binds);
    assert_injected(
        &run,
        &host,
        &Expected {
            nodes: &node_specs(&host, &[gpu.minor]),
            real_libraries: true,
        },
    );
    let others: Vec<&String> = run
        .report
        .nodes
        .keys()
        .filter(|p| {
            p.strip_prefix("/dev/nvidia")
                .is_some_and(|n| n.parse::<u32>().is_ok_and(|m| m != gpu.minor))
        })
        .collect();
    assert!(
        others.is_empty(),
        "GPUs not mounted: {others:?}{}",
        run.describe()
    );
}

/// `nvidia-container-cli.no-cgroups = true`: the nodes come, the device
/// cgroup is left to the runtime, which granted nothing (EPERM).
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn nvidias_no_cgroups_leaves_the_device_cgroup_alone() {
    let host = host();
    let env = [("NVIDIA_VISIBLE_DEVICES", "0")];
    let no_cgroups = "[nvidia-container-cli]\nno-cgroups = true\n";
    let run = run_case(
        "no-cgroups",
        Runtime::RuncV2,
        &env,
        Some(no_cgroups),
        Vec::new(),
    );
    run.assert_completed();
    let path = format!(
        "/dev/nvidia{}",
        host.facts.gpus.iter().find(|g| g.index == 0).unwrap().minor
    );
    let node = run
        .report
        .nodes
        .get(&path)
        .unwrap_or_else(|| panic!("{path} missing:{}", run.describe()));
    assert_eq!(
        node.open.as_deref(),
        Some("EPERM"),
        "{path}:{}",
        run.describe()
    );
    let control = run_case("no-cgroups", Runtime::RuncV2, &env, None, Vec::new());
    let node = control.report.nodes.get(&path).cloned();
    assert_eq!(
        node.and_then(|n| n.open),
        Some("ENXIO".to_string()),
        "{path}:{}",
        control.describe()
    );
}

//! The request side through a real runtime (runc on cgroup v1): MIG devices
//! on the MIG-flavoured simulated host with its mock NVML, NVIDIA_REQUIRE_*
//! refusals and passes, and CUDA forward-compatibility libraries.

use harness::compat::add_compat_libcuda;
use std::collections::BTreeSet;
use std::path::Path;

use harness::runtime::bundle::{Hook, Scenario};
use harness::runtime::container::run;
use harness::runtime::run::{serial, Run};
use harness::runtime::runtimes::Runtime;
use harness::simhost::{Fixture, MigFacts, SimHost};
use serde_json::Value;

/// Runs a container through the hook, then checks that `list --bundle`
/// agrees with what the hook did: the plan the hook logged and applied, or
/// the same refusal.
fn run_on(
    host: &SimHost,
    name: &str,
    env: &[(&str, &str)],
    prepare: Option<&dyn Fn(&Path)>,
) -> Run {
    let run = run_only(host, name, env, prepare);
    assert_list_agrees(&run);
    run
}

fn run_only(
    host: &SimHost,
    name: &str,
    env: &[(&str, &str)],
    prepare: Option<&dyn Fn(&Path)>,
) -> Run {
    let serial = serial();
    run(
        &serial,
        &Scenario {
            name,
            runtime: Runtime::RuncV1,
            host,
            env,
            hook: Hook::Prestart,
            decoy_minors: &[],
            decoys: &[],
            reuse_rootfs: false,
            prepare,
        },
    )
}

/// The message of the hook's log lines at `level` whose message starts with `prefix`.
fn logged<'a>(run: &'a Run, level: &str, prefix: &str) -> Vec<&'a str> {
    let marker = format!("]: {level}: ");
    run.hook_log
        .as_deref()
        .unwrap_or_default()
        .lines()
        .filter_map(|line| Some(line.split_once(&marker)?.1))
        .filter(|message| message.starts_with(prefix))
        .collect()
}

/// `list --json --bundle` for the run's bundle and hook config equals the
/// plan the hook logged, whose device nodes are exactly those the
/// container saw; when the hook refused, `list` refuses with its reason.
fn assert_list_agrees(run: &Run) {
    // The hook's config less its debug log to the bundle's log file.
    let hook_config = std::fs::read_to_string(run.bundle.join("hook-config.toml")).unwrap();
    let config = run.bundle.join("list-config.toml");
    let base = hook_config.split("\n[log]").next().unwrap_or_default();
    std::fs::write(&config, base).unwrap();
    let bundle = run.bundle.to_str().expect("UTF-8 bundle path");
    let args = ["list", "--json", "--bundle", bundle];
    let out = harness::cli::hook(&config, &args);
    if !run.succeeded() {
        let listed = harness::refusal::failure(out, &args);
        let reason = listed
            .split_once("error: ")
            .map_or(listed.as_str(), |(_, r)| r)
            .trim_end();
        let refusals = logged(run, "error", "");
        assert!(
            refusals.iter().any(|r| r.ends_with(reason)),
            "list refused with {listed:?}, the hook with {refusals:?}"
        );
        return;
    }
    assert!(
        out.status.success(),
        "list --bundle failed where the hook succeeded: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).expect("list --json output");
    let plans = logged(run, "debug", "container ");
    let applied: Vec<Value> = plans
        .iter()
        .filter_map(|m| m.split_once(": planned ").map(|(_, json)| json))
        .map(|json| serde_json::from_str(json).expect("the hook's logged plan"))
        .collect();
    assert_eq!(applied.len(), 1, "one plan logged:{}", run.describe());
    assert_eq!(
        listed, applied[0],
        "list --bundle differs from the hook's plan"
    );
    let planned: BTreeSet<&str> = listed["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| d["path"].as_str().expect("device path"))
        .collect();
    let seen: BTreeSet<&str> = run
        .report
        .nodes
        .iter()
        .filter(|(_, n)| n.kind == 'c')
        .map(|(path, _)| path.as_str())
        .filter(|path| path.starts_with("/dev/nvidia"))
        .collect();
    assert_eq!(
        planned,
        seen,
        "planned nodes against the container's:{}",
        run.describe()
    );
}

/// The nvidia nodes the container has, and what opening each gave.
/// A device node: path, numbers, what opening it gave.
type NodeFact = (String, Option<(u32, u32)>, String);

fn nodes(run: &Run) -> BTreeSet<NodeFact> {
    run.report
        .nodes
        .iter()
        .filter(|(_, n)| n.kind == 'c')
        .map(|(path, n)| (path.clone(), n.numbers, n.open.clone().unwrap_or_default()))
        .collect()
}

fn expected_mig_nodes(host: &SimHost, mig: &MigFacts) -> BTreeSet<NodeFact> {
    let uvm = host.facts.uvm_major;
    let caps = host.facts.caps_major;
    let gpu_minor = mig.gpu_minor;
    let gi = mig.gi_access_minor;
    let ci = mig.ci_access_minor;
    [
        ("/dev/nvidiactl".to_string(), (195, 255)),
        ("/dev/nvidia-uvm".to_string(), (uvm, 0)),
        ("/dev/nvidia-uvm-tools".to_string(), (uvm, 1)),
        (format!("/dev/nvidia{gpu_minor}"), (195, gpu_minor)),
        (format!("/dev/nvidia-caps/nvidia-cap{gi}"), (caps, gi)),
        (format!("/dev/nvidia-caps/nvidia-cap{ci}"), (caps, ci)),
    ]
    .into_iter()
    .map(|(path, numbers)| (path, Some(numbers), "ENXIO".to_string()))
    .collect()
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn mig_device_by_uuid_brings_its_caps_nodes_and_nothing_else() {
    let host = SimHost::shared(Fixture::synthetic(4).mig());
    let mig = &host.facts.mig[0];
    let uuid = mig.uuid.as_str();
    let run = run_on(&host, "mig-uuid", &[("NVIDIA_VISIBLE_DEVICES", uuid)], None);
    run.assert_completed();
    assert_eq!(
        nodes(&run),
        expected_mig_nodes(&host, mig),
        "{}",
        run.describe()
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn mig_device_by_position() {
    let host = SimHost::shared(Fixture::synthetic(4).mig());
    let mig = host
        .facts
        .mig
        .iter()
        .find(|m| m.gpu == 1 && m.mig_index == 1)
        .expect("GPU 1 has a second MIG device");
    let run = run_on(
        &host,
        "mig-position",
        &[("NVIDIA_VISIBLE_DEVICES", "1:1")],
        None,
    );
    run.assert_completed();
    assert_eq!(
        nodes(&run),
        expected_mig_nodes(&host, mig),
        "{}",
        run.describe()
    );
}

/// NVIDIA's `all` selects every GPU and then every MIG device, and each
/// MIG device brings its GPU and compute instance caps nodes with their
/// cgroup rules (libnvidia-container src/cli/common.c:144-154,
/// src/cli/configure.c:371-384, src/nvc_mount.c
/// `nvc_mig_device_access_caps_mount`). Ours finds them in procfs: the
/// mock NVML is made to fail, and `all` must not notice.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn all_on_the_mig_host_brings_every_mig_devices_caps_nodes() {
    let host = SimHost::fresh("mig-all", Fixture::synthetic(4).mig());
    host.fail_nvml_init();
    let run = run_on(&host, "mig-all", &[("NVIDIA_VISIBLE_DEVICES", "all")], None);
    run.assert_completed();
    let migs = &host.facts.mig;
    assert!(migs.len() >= 2, "the MIG host has MIG devices");
    let mut expected: BTreeSet<NodeFact> = migs
        .iter()
        .flat_map(|mig| expected_mig_nodes(&host, mig))
        .collect();
    for gpu in &host.facts.gpus {
        let minor = gpu.minor;
        expected.insert((
            format!("/dev/nvidia{minor}"),
            Some((195, minor)),
            "ENXIO".to_string(),
        ));
    }
    assert_eq!(nodes(&run), expected, "{}", run.describe());
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn whole_gpu_requests_never_load_nvml() {
    let host = SimHost::fresh("nvml-broken", Fixture::synthetic(2).mig());
    // An NVML that fails to initialise: a whole-GPU request must not notice.
    let conf = host.fail_nvml_init();

    // The mock appends a line to this file on every load, init or not.
    let loads = conf.with_file_name("nvml-mock.loads");
    std::fs::write(&loads, "").unwrap();

    let gpu = &host.facts.gpus[0];
    for (name, device) in [
        ("nvml-index", "0".to_string()),
        ("nvml-uuid", gpu.uuid.clone()),
        ("nvml-bus", gpu.bus.clone()),
        ("nvml-all", "all".to_string()),
    ] {
        run_on(&host, name, &[("NVIDIA_VISIBLE_DEVICES", &device)], None).assert_completed();
    }
    // A CUDA image's rule: brand alternatives after one that holds are never
    // reached, so NVML is not asked for them.
    run_on(
        &host,
        "nvml-cuda-image-rule",
        &[
            ("NVIDIA_VISIBLE_DEVICES", "0"),
            (
                "NVIDIA_REQUIRE_CUDA",
                "cuda>=12.0 brand=tesla,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471",
            ),
        ],
        None,
    )
    .assert_completed();
    assert_eq!(
        std::fs::read_to_string(&loads).unwrap(),
        "",
        "a whole-GPU request, or a rule whose brand terms are never reached, loaded libnvidia-ml"
    );
    let run = run_on(
        &host,
        "nvml-mig",
        &[("NVIDIA_VISIBLE_DEVICES", "0:0")],
        None,
    );
    assert!(!run.succeeded(), "{}", run.describe());
    assert!(
        run.failure_text().contains("NVML: driver not loaded"),
        "{}",
        run.describe()
    );
    // The check above can fail: a MIG request does load it.
    assert!(
        !std::fs::read_to_string(&loads).unwrap().is_empty(),
        "the mock did not record the MIG request's load"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn requirement_above_the_driver_refuses_with_the_remedies() {
    let host = SimHost::shared(Fixture::real(4));
    let run = run_on(
        &host,
        "require-cuda-12-4",
        &[
            ("NVIDIA_VISIBLE_DEVICES", "0"),
            ("NVIDIA_REQUIRE_CUDA", "cuda>=12.4"),
        ],
        None,
    );
    assert!(!run.succeeded(), "{}", run.describe());
    let text = run.failure_text();
    for needle in ["cuda>=12.4", "535.261.03", "12.2"] {
        assert!(text.contains(needle), "{needle} missing:{}", run.describe());
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn requirements_that_hold_start_the_container() {
    let host = SimHost::shared(Fixture::real(4));
    for (name, env) in [
        (
            "require-or-group",
            vec![("NVIDIA_REQUIRE_CUDA", "cuda>=12.4 driver>=535")],
        ),
        (
            "require-disabled",
            vec![
                ("NVIDIA_REQUIRE_CUDA", "cuda>=12.4"),
                ("NVIDIA_DISABLE_REQUIRE", "true"),
            ],
        ),
        (
            "require-driver-and",
            vec![("NVIDIA_REQUIRE_DRIVER", "driver>=535.100,driver<536")],
        ),
        // As NVIDIA's CLI: the first alternative holds, so the rest is never read.
        (
            "require-lazy-or",
            vec![("NVIDIA_REQUIRE_CUDA", "cuda>=12.0 foo=bar")],
        ),
    ] {
        let mut env = env;
        env.push(("NVIDIA_VISIBLE_DEVICES", "0"));
        run_on(&host, name, &env, None).assert_completed();
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn legacy_cuda_image_newer_than_the_driver_refuses() {
    let host = SimHost::shared(Fixture::real(4));
    let run = run_on(&host, "legacy-cuda", &[("CUDA_VERSION", "12.6.1")], None);
    assert!(!run.succeeded(), "{}", run.describe());
    assert!(
        run.failure_text().contains("cuda>=12.6"),
        "{}",
        run.describe()
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn legacy_cuda_image_with_a_version_nvidia_rejects_refuses() {
    // NVIDIA's hook fails such a container: `9.0.bar` is no semver.
    let host = SimHost::shared(Fixture::real(4));
    let run = run_on(
        &host,
        "legacy-bad-version",
        &[("CUDA_VERSION", "9.0.bar")],
        None,
    );
    assert!(!run.succeeded(), "{}", run.describe());
    assert!(
        run.failure_text()
            .contains("CUDA_VERSION \"9.0.bar\" is not a version"),
        "{}",
        run.describe()
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn brand_and_arch_come_from_nvml() {
    let host = SimHost::shared(Fixture::synthetic(4).mig());
    let brand = host.facts.gpus[2].brand.clone();
    let cc = host.facts.gpus[2].cc.clone();
    let ok = format!("brand={brand},arch>={cc}");
    run_on(
        &host,
        "brand-ok",
        &[
            ("NVIDIA_VISIBLE_DEVICES", "2"),
            ("NVIDIA_REQUIRE_BRAND", &ok),
        ],
        None,
    )
    .assert_completed();
    let run = run_on(
        &host,
        "brand-refused",
        &[
            ("NVIDIA_VISIBLE_DEVICES", "2"),
            ("NVIDIA_REQUIRE_BRAND", "brand=geforce"),
        ],
        None,
    );
    assert!(!run.succeeded(), "{}", run.describe());
    assert!(
        run.failure_text().contains("brand=geforce"),
        "{}",
        run.describe()
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn newer_compat_libraries_are_preferred_and_satisfy_cuda_requirements() {
    let host = SimHost::shared(Fixture::real(4));
    let run = run_on(
        &host,
        "compat",
        &[
            ("NVIDIA_VISIBLE_DEVICES", "0"),
            ("NVIDIA_REQUIRE_CUDA", "cuda>=12.4"),
        ],
        Some(&add_compat_libcuda),
    );
    run.assert_completed();
    let cuda = run.report.cuda.as_ref().expect("cuda line");
    assert_eq!(cuda.field("version"), Some("12040"), "{}", run.describe());
    assert!(
        cuda.path.starts_with("/usr/local/cuda/compat/"),
        "{}",
        run.describe()
    );
    // The image's file was used in place, never mounted.
    assert!(
        !run.report
            .mounts
            .iter()
            .any(|m| m.contains("/usr/local/cuda")),
        "{}",
        run.describe()
    );
}

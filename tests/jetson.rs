//! Jetson (L4T) hosts, simulated (`harness::jetson`: NVIDIA's CSV mount
//! specs, the files they list built with `cc`, nodes made with mknod, no
//! `/proc/driver/nvidia`). A container asking for the integrated GPU
//! (`all` or `0`) gets every listed node, allowed by its device cgroup
//! (ENXIO on open, ENODEV for the misc driver's `nvmap`: allowed, no
//! driver), every listed file, link and directory read-only at its path,
//! a loader cache that finds the listed libcuda and a libcuda that answers;
//! through the prestart hook under runc (cgroup v1 and v2) and Podman
//! (hooks.d), and through the runtime wrapper in front of runc. A
//! container asking for nothing gets nothing; another device is refused.
//! `info`, `list`, `doctor`, `cdi generate --mode csv` and `nvidia-ctk cdi
//! generate --mode=csv` know the host. Podman applying the CSV spec is in
//! tests/cdi_podman.rs, beside its kind.
//!
//! Not tested: a real Jetson (its nvgpu/nvmap drivers answering, aarch64).
//!
//! Run as root: `cargo test --features _test_as_root --test jetson`.

use std::process::Command;

use harness::cli::assert_auto_is_mode_and_nvml_refused;
use harness::jetson::{
    assert_csv_spec, assert_ctk_reads_the_csv_files_named, assert_jetson_injected,
    assert_lists_the_jetson, host_path, jetson, CSV_DIR, RELEASE,
};
use harness::nvidia_cli::nvidia_cli;
use harness::project::hook_binary;
use harness::runtime::bundle::{work_root, Hook, Scenario};
use harness::runtime::cleanup::remove_tree_safely;
use harness::runtime::container::{run, run_through_wrapper};
use harness::runtime::oci_config::path_str;
use harness::runtime::run::{serial, Run};
use harness::runtime::runtimes::Runtime;
use harness::simhost::SimHost;

/// The runtime's `/dev/nvidia0`, made without a cgroup rule: it must be denied.
const DECOYS: &[u32] = &[0];

fn scenario<'a>(
    name: &'a str,
    runtime: Runtime,
    host: &'a SimHost,
    env: &'a [(&'a str, &'a str)],
    hook: Hook,
) -> Scenario<'a> {
    let decoys: &[u32] = if runtime.is_podman() { &[] } else { DECOYS };
    Scenario::asking(name, runtime, host, env, hook, decoys)
}

fn prestart(runtime: Runtime, env: &[(&str, &str)]) -> Run {
    let serial = serial();
    let (host, _) = jetson();
    let name = format!("jetson-{}", runtime.name());
    run(
        &serial,
        &scenario(&name, runtime, &host, env, Hook::Prestart),
    )
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn the_prestart_hook_under_runc_v1_gives_every_listed_node_file_link_and_directory() {
    let (_, facts) = jetson();
    let run = prestart(Runtime::RuncV1, &[("NVIDIA_VISIBLE_DEVICES", "all")]);
    assert_jetson_injected(&run, &facts, DECOYS);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn gpu_0_under_runc_v2_gets_the_nodes_through_the_bpf_device_filter() {
    let (_, facts) = jetson();
    let run = prestart(Runtime::RuncV2, &[("NVIDIA_VISIBLE_DEVICES", "0")]);
    assert_jetson_injected(&run, &facts, DECOYS);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn podman_with_the_hooks_d_hook_gives_the_same() {
    let (_, facts) = jetson();
    let run = prestart(Runtime::Podman, &[("NVIDIA_VISIBLE_DEVICES", "all")]);
    assert_jetson_injected(&run, &facts, DECOYS);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn nothing_appears_without_a_request() {
    let run = prestart(Runtime::RuncV1, &[]);
    run.assert_completed();
    let (_, facts) = jetson();
    let ctx = run.describe();
    for (path, _, _) in &facts.nodes {
        assert!(!run.report.nodes.contains_key(path), "{path}:{ctx}");
    }
    for path in facts.files.iter().chain([&facts.dir_file]) {
        assert!(!run.report.files.contains_key(path), "{path}:{ctx}");
    }
    let cuda = run.report.cuda.as_ref().expect("a cuda line");
    assert!(!cuda.loaded, "no libcuda without a request:{ctx}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn another_gpu_is_refused_in_one_line_naming_all_and_0() {
    let run = prestart(Runtime::RuncV1, &[("NVIDIA_VISIBLE_DEVICES", "1")]);
    let ctx = run.describe();
    assert!(!run.succeeded(), "a Jetson has no GPU 1:{ctx}");
    let log = run.hook_log.as_deref().unwrap_or_default();
    assert!(
        log.contains("error: unknown device \"1\"; this host has: all or 0"),
        "the refusal names the device and what there is:{ctx}"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn the_runtime_wrapper_in_front_of_runc_writes_the_csv_edits() {
    let serial = serial();
    let (host, facts) = jetson();
    let env = [("NVIDIA_VISIBLE_DEVICES", "all")];
    for mode in ["auto", "csv"] {
        let name = format!("jetson-wrapper-{mode}");
        let scenario = scenario(&name, Runtime::RuncV1, &host, &env, Hook::Absent);
        let run = run_through_wrapper(&serial, &scenario, &format!("mode = \"{mode}\"\n"));
        assert_jetson_injected(&run, &facts, DECOYS);
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn info_list_and_doctor_know_the_jetson() {
    let (host, facts) = jetson();
    let info = host.stdout(&["info"]);
    assert!(
        info.contains(&format!("Driver version: {RELEASE}")),
        "{info}"
    );
    assert!(info.contains("Host:           Jetson/Tegra"), "{info}");
    assert!(info.contains("CUDA version:   12.6"), "{info}");
    assert!(info.contains(&format!("{CSV_DIR}/drivers.csv")), "{info}");
    assert!(!info.contains("cuda.csv"), "only the base files: {info}");
    assert!(
        info.contains(&format!("SKIPPED dev    {}", facts.missing_node)),
        "{info}"
    );
    let list = host.stdout(&["list", "--device", "all"]);
    assert_lists_the_jetson(&list, &host, &facts);
    let none = host.stdout(&["list", "--device", "none"]);
    assert!(!none.contains("/dev/nvmap"), "none gets no nodes:\n{none}");
    let cuda_csv_file = host_path(&host, &facts.only_in_cuda_csv);
    let cuda_csv_file = path_str(&cuda_csv_file);
    assert!(
        !list.contains(&cuda_csv_file),
        "only the base files:\n{list}"
    );
    let all = host.stdout(&["list", "--device", "all", "--jetpack", "csv-mounts=all"]);
    assert_lists_the_jetson(&all, &host, &facts);
    assert!(
        all.lines().any(|l| l == cuda_csv_file),
        "--jetpack csv-mounts=all lists cuda.csv's file:\n{all}"
    );
    let out = host.run(&["doctor"]);
    let report = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(report.contains("ok Jetson/Tegra host"), "{report}");
    assert!(report.contains("ok device nodes"), "{report}");
    assert!(
        report.contains(&format!("warn CSV entries: {} nodes", facts.nodes.len()))
            && report.contains(&facts.missing_node),
        "{report}"
    );
    assert!(report.contains("supports CUDA 12.6"), "{report}");
    assert!(!report.contains("kernel module"), "{report}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn cdi_generate_mode_csv_gives_nvidias_device_names_and_validates() {
    let (host, facts) = jetson();
    let dir = work_root().join("jetson-cdi");
    remove_tree_safely(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = path_str(&dir.join("nvidia.json"));
    host.stdout(&["cdi", "generate", "--mode", "csv", "--output", &file]);
    let spec: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_csv_spec(&spec, &facts);
    let hook = spec["containerEdits"]["hooks"][0]["args"].to_string();
    assert!(
        hook.contains("--csv-host"),
        "the hook reads a CSV host: {hook}"
    );
    host.stdout(&["cdi", "validate", &file]);
    // auto takes the CSV host; nvml refuses it, by name.
    assert_auto_is_mode_and_nvml_refused(&host, "csv");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn nvidia_ctk_mode_csv_takes_nvidias_csv_flags() {
    let (host, facts) = jetson();
    // No config: the roots are named, and the driver root says it is a Jetson.
    let root = &host.facts.driver_root;
    let ctk = |args: &[&str]| -> serde_json::Value {
        let out = Command::new(hook_binary())
            .arg0_as("nvidia-ctk")
            .args(["cdi", "generate"])
            .args(args)
            .args(["--format", "json", "--driver-root", root])
            .args(["--dev-root", &host.facts.dev_root])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "nvidia-ctk {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // --csv.file names the files read, as host paths.
    let named = assert_ctk_reads_the_csv_files_named(&ctk, root, &facts);
    let cuda_csv = format!("{root}{CSV_DIR}/cuda.csv");
    let drivers_csv = format!("{root}{CSV_DIR}/drivers.csv");
    let devices_csv = format!("{root}{CSV_DIR}/devices.csv");
    let hook = named["containerEdits"]["hooks"][0]["args"].to_string();
    assert!(
        hook.contains(&cuda_csv),
        "the hook reads the same files: {hook}"
    );
    // --csv.ignore-pattern leaves `sym` entries out, as NVIDIA's does.
    let ignored = ctk(&[
        "--mode=csv",
        &format!("--csv.file={drivers_csv}"),
        &format!("--csv.file={devices_csv}"),
        "--csv.ignore-pattern=**/libcuda.so",
    ]);
    let hook = ignored["containerEdits"]["hooks"][0]["args"].to_string();
    assert!(hook.contains("**/libcuda.so"), "{hook}");
}

/// `Command::arg0` for the binary's NVIDIA names.
trait Arg0 {
    fn arg0_as(&mut self, name: &str) -> &mut Self;
}

impl Arg0 for Command {
    fn arg0_as(&mut self, name: &str) -> &mut Self {
        std::os::unix::process::CommandExt::arg0(self, name)
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn jetpack_csv_mounts_all_brings_every_csv_file_through_the_hook_and_the_wrapper() {
    let (host, facts) = jetson();
    let env = [
        ("NVIDIA_VISIBLE_DEVICES", "all"),
        ("NVIDIA_REQUIRE_JETPACK", "csv-mounts=all"),
    ];
    let run = prestart(Runtime::RuncV1, &env);
    run.assert_completed();
    let ctx = run.describe();
    let file = run.report.files.get(&facts.only_in_cuda_csv);
    assert!(file.is_some_and(|f| f.read_only), "cuda.csv's file:{ctx}");
    // The wrapper's spec hook reads the same files for the loader cache.
    let serial = serial();
    let scenario = scenario(
        "jetson-wrapper-all",
        Runtime::RuncV1,
        &host,
        &env,
        Hook::Absent,
    );
    let run = run_through_wrapper(&serial, &scenario, "");
    let ctx = run.describe();
    assert!(
        run.report.files.contains_key(&facts.only_in_cuda_csv),
        "cuda.csv's file through the wrapper:{ctx}"
    );
    let cache = run.ld_cache.as_deref().unwrap_or_default();
    assert!(
        cache.iter().any(|e| e.soname == "libcudnn_stub.so"),
        "the spec hook's loader cache names cuda.csv's library: {cache:?}:{ctx}"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn nvidia_container_cli_info_and_list_know_the_jetson() {
    let (host, facts) = jetson();
    let out = nvidia_cli(&host.config, &["info"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains(RELEASE) && stdout.contains("12.6"),
        "{stdout}"
    );
    assert!(stderr.contains("Jetson/Tegra host"), "{stderr}");
    let out = nvidia_cli(&host.config, &["list"]);
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{list}");
    assert_lists_the_jetson(&list, &host, &facts);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_cuda_images_requirement_is_judged_by_the_jetsons_libcuda() {
    let (_, facts) = jetson();
    // NVIDIA's CUDA 12.6 image's rule: its first alternative needs CUDA 12.6.
    let rule = "cuda>=12.6 brand=unknown,driver>=470,driver<471 brand=tesla,driver>=535,driver<536";
    let run = prestart(
        Runtime::RuncV1,
        &[
            ("NVIDIA_VISIBLE_DEVICES", "all"),
            ("NVIDIA_REQUIRE_CUDA", rule),
        ],
    );
    assert_jetson_injected(&run, &facts, DECOYS);
    let newer = prestart(
        Runtime::RuncV1,
        &[
            ("NVIDIA_VISIBLE_DEVICES", "all"),
            ("NVIDIA_REQUIRE_CUDA", "cuda>=12.8"),
        ],
    );
    let ctx = newer.describe();
    assert!(
        !newer.succeeded(),
        "CUDA 12.8 is more than the Jetson's 12.6:{ctx}"
    );
    let log = newer.hook_log.as_deref().unwrap_or_default();
    assert!(
        log.contains("cuda>=12.8"),
        "the refusal names the rule:{ctx}"
    );
}

//! WSL2 hosts, simulated (`integration/simhost --wsl`: NVIDIA's real 535
//! libraries placed as WSL has them, `/dev/dxg` made with mknod, no
//! `/proc/driver/nvidia`). A container asking for `all` gets `/dev/dxg`,
//! allowed by its device cgroup (ENXIO on open: allowed, no driver), the
//! driver store's and `/usr/lib/wsl/lib`'s files at their own paths, a
//! loader cache that finds them and a libcuda that answers, through the
//! prestart hook under runc (cgroup v1 and v2) and through the runtime
//! wrapper in front of runc; `info`, `list`, `cdi generate --mode wsl`,
//! `cdi validate` and `doctor` know the layout. Podman applying the WSL
//! spec, and `nvidia-ctk cdi generate --mode wsl`, are in tests/cdi_podman.rs
//! and tests/ctk.rs, beside their kind.
//!
//! Not tested: a real WSL2 kernel (dxgkrnl) and Windows' driver behind it.
//!
//! Run as root: `cargo test --features _test_as_root --test wsl`.

use harness::cli::assert_auto_is_mode_and_nvml_refused;
use harness::runtime::bundle::{work_root, Hook, Scenario};
use harness::runtime::cleanup::remove_tree_safely;
use harness::runtime::container::{run, run_through_wrapper};
use harness::runtime::injected::assert_wsl_injected;
use harness::runtime::oci_config::path_str;
use harness::runtime::run::{serial, Run, Serial};
use harness::runtime::runtimes::Runtime;
use harness::simhost::{Fixture, SimHost};

fn host() -> SimHost {
    SimHost::shared(Fixture::wsl())
}

/// The runtime's `/dev/nvidia0`, made without a cgroup rule: it must be denied.
const DECOYS: &[u32] = &[0];

fn scenario<'a>(
    name: &'a str,
    runtime: Runtime,
    host: &'a SimHost,
    env: &'a [(&'a str, &'a str)],
    hook: Hook,
) -> Scenario<'a> {
    let decoys: &[u32] = DECOYS;
    Scenario::asking(name, runtime, host, env, hook, decoys)
}

fn prestart(serial: &Serial, runtime: Runtime, env: &[(&str, &str)]) -> Run {
    let host = host();
    let name = format!("wsl-{}", runtime.name());
    run(
        serial,
        &scenario(&name, runtime, &host, env, Hook::Prestart),
    )
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn the_prestart_hook_under_runc_v1_gives_dxg_the_files_and_a_working_libcuda() {
    let serial = serial();
    let run = prestart(
        &serial,
        Runtime::RuncV1,
        &[("NVIDIA_VISIBLE_DEVICES", "all")],
    );
    assert_wsl_injected(&run, &host(), DECOYS);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn the_prestart_hook_under_runc_v2_gives_dxg_through_the_bpf_device_filter() {
    let serial = serial();
    let run = prestart(
        &serial,
        Runtime::RuncV2,
        &[("NVIDIA_VISIBLE_DEVICES", "all")],
    );
    assert_wsl_injected(&run, &host(), DECOYS);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_gpu_by_index_is_refused_in_one_line_naming_all() {
    let serial = serial();
    let run = prestart(&serial, Runtime::RuncV1, &[("NVIDIA_VISIBLE_DEVICES", "0")]);
    let ctx = run.describe();
    assert!(
        !run.succeeded(),
        "a WSL2 host cannot give GPU 0 alone:{ctx}"
    );
    let log = run.hook_log.as_deref().unwrap_or_default();
    assert!(
        log.contains("error: unknown device \"0\"; this host has: all") && log.contains("/dev/dxg"),
        "the refusal names the device and what there is:{ctx}"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn the_runtime_wrapper_in_front_of_runc_writes_the_wsl_edits() {
    let serial = serial();
    let host = host();
    let env = [("NVIDIA_VISIBLE_DEVICES", "all")];
    // No hook in config.json: the wrapper writes the plan's edits into it.
    let scenario = scenario("wsl-wrapper", Runtime::RuncV1, &host, &env, Hook::Absent);
    let run = run_through_wrapper(&serial, &scenario, "");
    assert_wsl_injected(&run, &host, DECOYS);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn info_list_and_doctor_know_the_wsl_layout() {
    let host = host();
    let wsl = host.facts.wsl.as_ref().unwrap();
    let info = host.stdout(&["info"]);
    assert!(info.contains("Host:           WSL2"), "{info}");
    assert!(
        info.contains(&format!("Driver store:   {}", wsl.store)),
        "{info}"
    );
    assert!(info.contains("CUDA version:   12.2"), "{info}");
    let list = host.stdout(&["list", "--device", "all"]);
    let dxg = format!("{}/dev/dxg", host.facts.dev_root);
    assert_eq!(list.lines().next(), Some(dxg.as_str()), "{list}");
    for path in host
        .facts
        .libraries
        .values()
        .chain(host.facts.binaries.values())
    {
        assert!(
            list.lines().any(|l| l == path),
            "{path} not listed:\n{list}"
        );
    }
    let none = host.stdout(&["list", "--device", "none"]);
    assert!(!none.contains("/dev/dxg"), "none gets no dxg:\n{none}");
    let out = host.run(&["doctor"]);
    // Doctor wraps its lines: judged with the wrapping undone.
    let report = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(report.contains("ok WSL2 host"), "{report}");
    assert!(report.contains("ok device nodes"), "{report}");
    for missing in &wsl.missing {
        assert!(
            report.contains(missing.as_str()),
            "doctor names the missing {missing}:\n{report}"
        );
    }
    assert!(report.contains("supports CUDA 12.2"), "{report}");
    assert!(
        !report.contains("kernel module"),
        "no kernel module on WSL2:\n{report}"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn cdi_generate_mode_wsl_gives_one_device_all_with_dxg_and_validates() {
    let host = host();
    let wsl = host.facts.wsl.as_ref().unwrap();
    let dir = work_root().join("wsl-cdi");
    remove_tree_safely(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("nvidia.json");
    let file = path_str(&file);
    host.stdout(&["cdi", "generate", "--mode", "wsl", "--output", &file]);
    let spec: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let devices = spec["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1, "{spec:#}");
    assert_eq!(devices[0]["name"], "all");
    let nodes = &devices[0]["containerEdits"]["deviceNodes"];
    assert_eq!(nodes[0]["path"], "/dev/dxg", "{spec:#}");
    assert_eq!(nodes[0]["major"], wsl.dxg_major);
    assert_eq!(nodes[0]["minor"], wsl.dxg_minor);
    let mounts: Vec<&str> = spec["containerEdits"]["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["containerPath"].as_str().unwrap())
        .collect();
    assert!(
        mounts.contains(&format!("{}/libcuda.so.1.1", wsl.store).as_str()),
        "{mounts:?}"
    );
    assert!(
        mounts.contains(&format!("{}/libdxcore.so", wsl.lib_dir).as_str()),
        "{mounts:?}"
    );
    host.stdout(&["cdi", "validate", &file]);
    // auto takes WSL on a WSL host; nvml refuses it, by name.
    assert_auto_is_mode_and_nvml_refused(&host, "wsl");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn mode_wsl_is_refused_on_a_native_host() {
    let native = SimHost::shared(Fixture::real(1));
    let err = native.failure(&["cdi", "generate", "--mode", "wsl", "--output", "-"]);
    assert!(
        err.contains("--mode=wsl") && err.contains("nvml host"),
        "{err}"
    );
}

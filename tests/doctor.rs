//! `doctor` on simulated hosts with one fault each: the check that fails,
//! and the remedy it names; a healthy host all ok with exit status 0; and
//! `--run` starting a real runc container through the installed hook on
//! cgroup v1 and v2, leaving nothing behind (also when the hook refuses,
//! and when doctor is interrupted). Every check reads the real files the
//! tests make; nothing of the product is mocked.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use harness::host_root::{checks_with, Check, HostRoot, HOOKS_D};
use harness::project::hook_binary;
use harness::simhost::{Fixture, SimHost};

/// A 2-GPU synthetic host whose loader finds the running driver first.
const GPU_HOST: Fixture = Fixture::synthetic(2).stale_last();

/// A [`GPU_HOST`] of its own, named `name`.
fn gpu_host(name: &str) -> SimHost {
    SimHost::fresh(name, GPU_HOST)
}

/// A healthy host root `name` on a GPU host of its own, for a test that
/// breaks the GPU host.
fn host(name: &str) -> HostRoot {
    HostRoot::healthy(gpu_host(name), name)
}

/// A healthy host root `name` on the GPU host the tests that leave it as
/// it is share.
fn shared_host(name: &str) -> HostRoot {
    HostRoot::healthy(SimHost::shared(GPU_HOST), name)
}

/// The one failing check of `report`, as (layer, name, found, remedy);
/// panics unless exactly one check fails.
fn the_failure(report: &Value) -> (String, String, String, String) {
    let failed = checks_with(report, "fail");
    assert_eq!(failed.len(), 1, "one failing check expected: {failed:#?}");
    let Check {
        layer,
        name,
        found,
        remedy,
    } = failed.into_iter().next().unwrap();
    (layer, name, found, remedy)
}

/// Asserts `text` holds every one of `needles`.
fn holds(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} not in {text:?}");
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_healthy_host_is_all_ok_and_exits_0() {
    let host = shared_host("healthy");
    let (report, code) = host.report(&[]);
    assert!(checks_with(&report, "fail").is_empty(), "{report:#}");
    assert!(checks_with(&report, "warn").is_empty(), "{report:#}");
    assert_eq!(code, 0);
    assert_eq!(report["summary"]["fault_layer"], Value::Null);
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for name in [
        "kernel module",
        "GPUs",
        "device nodes",
        "libraries",
        "loader cache",
        "CUDA version",
        "persistence",
        "config",
        "hooks.d",
        "docker --gpus",
        "CDI",
        "wired",
    ] {
        assert!(names.contains(&name), "no {name:?} check in {names:?}");
    }

    // The same as text: grouped by layer, 80 columns, no colour off a
    // terminal, and the summary last.
    let out = host.doctor(&[], &[]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for line in text.lines() {
        assert!(line.chars().count() <= 80, "too wide: {line:?}");
    }
    assert!(!text.contains('\x1b'), "colour off a terminal: {text}");
    assert!(text.starts_with("host driver\n"), "{text}");
    assert!(text.contains("\nruntime wiring\n"), "{text}");
    let last = text.lines().last().unwrap();
    assert!(
        last.starts_with("doctor: all ") && last.ends_with(" checks ok"),
        "{last}"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn kernel_module_not_loaded_fails_naming_modprobe() {
    let host = host("no-module");
    fs::remove_file(host.sim.path("proc/driver/nvidia/version")).unwrap();
    let (report, code) = host.report(&[]);
    assert_eq!(code, 1);
    let (layer, name, found, remedy) = the_failure(&report);
    assert_eq!((layer.as_str(), name.as_str()), ("host", "kernel module"));
    holds(&found, &["not loaded", "driver/nvidia/version"]);
    holds(&remedy, &["modprobe nvidia"]);
    assert_eq!(report["summary"]["fault_layer"], "host");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn missing_nvidia_uvm_node_fails_naming_nvidia_modprobe() {
    let host = host("no-uvm");
    fs::remove_file(host.sim.path("devroot/dev/nvidia-uvm")).unwrap();
    let (report, code) = host.report(&[]);
    assert_eq!(code, 1);
    let (layer, name, found, remedy) = the_failure(&report);
    assert_eq!((layer.as_str(), name.as_str()), ("host", "/dev/nvidia-uvm"));
    holds(&found, &["nvidia-uvm is missing"]);
    holds(&remedy, &["nvidia-modprobe -u -c=0"]);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn node_with_the_wrong_major_fails_naming_both_numbers() {
    let host = host("wrong-major");
    let minor = host.sim.facts.gpus[0].minor;
    let node = host.sim.path(&format!("devroot/dev/nvidia{minor}"));
    fs::remove_file(&node).unwrap();
    let status = Command::new("mknod")
        .arg(&node)
        .args(["c", "1", &minor.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let (report, code) = host.report(&[]);
    assert_eq!(code, 1);
    let (_, name, found, remedy) = the_failure(&report);
    assert_eq!(name, format!("/dev/nvidia{minor}"));
    holds(
        &found,
        &[&format!(
            "is character device 1:{minor}, expected 195:{minor}"
        )],
    );
    holds(
        &remedy,
        &["remove it", &format!("nvidia-modprobe -c={minor}")],
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn missing_libcuda_fails_naming_the_driver_to_install() {
    let host = host("no-libcuda");
    let libcuda = host.sim.facts.libraries["libcuda.so.1"].clone();
    fs::remove_file(&libcuda).unwrap();
    let (report, code) = host.report(&[]);
    assert_eq!(code, 1);
    let (layer, name, found, remedy) = the_failure(&report);
    assert_eq!(
        (layer.as_str(), name.as_str()),
        ("host", "libcuda.so library")
    );
    holds(&found, &["no libcuda.so of driver 535.261.03", "compute"]);
    holds(&remedy, &["535.261.03", "ldconfig"]);
    // Its CUDA version cannot be asked; that is a consequence, not a second fault.
    let warned = checks_with(&report, "warn");
    assert!(
        warned.iter().any(|w| w.name == "CUDA version"),
        "{warned:?}"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn stale_470_nvml_first_in_the_cache_fails_the_loader_check() {
    // simhost's default: the 470 driver's libraries listed first.
    let host = HostRoot::healthy(SimHost::shared(Fixture::synthetic(2)), "stale-first");
    let (report, code) = host.report(&[]);
    assert_eq!(code, 1);
    let (layer, name, found, remedy) = the_failure(&report);
    assert_eq!((layer.as_str(), name.as_str()), ("host", "loader cache"));
    holds(
        &found,
        &[
            "libnvidia-ml.so.1",
            "tesla-470",
            "driver 470.256.02",
            "version mismatch",
        ],
    );
    holds(&remedy, &["ldconfig", "535.261.03"]);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn hooks_d_file_pointing_at_a_missing_binary_fails() {
    let host = shared_host("hook-missing-binary");
    fs::remove_file(host.path("usr/local/bin/oci-nvidia-hook")).unwrap();
    // Docker's link now dangles too: keep this host to the one fault.
    fs::remove_dir_all(host.path("proc/812")).unwrap();
    let (report, code) = host.report(&[]);
    assert_eq!(code, 1);
    let failed = checks_with(&report, "fail");
    let hooks: Vec<_> = failed.iter().filter(|f| f.name == "hooks.d").collect();
    assert_eq!(hooks.len(), 1, "{failed:#?}");
    let Check {
        layer,
        found,
        remedy,
        ..
    } = hooks[0];
    assert_eq!(layer, "wiring");
    holds(
        found,
        &["oci-nvidia-hook.json", "/usr/local/bin/oci-nvidia-hook"],
    );
    holds(remedy, &["make install"]);
    // Nothing else reaches the hook now: that follows from the same fault.
    assert!(
        failed
            .iter()
            .all(|f| f.name == "hooks.d" || f.name == "wired"),
        "{failed:#?}"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn nvidias_hooks_d_file_beside_ours_fails_as_a_second_injector() {
    let host = shared_host("second-injector");
    // NVIDIA's file, as its toolkit installs it (ANCHORS.md).
    let nvidia: Value = serde_json::json!({
        "version": "1.0.0",
        "hook": {
            "path": "/usr/bin/nvidia-container-runtime-hook",
            "args": ["nvidia-container-runtime-hook", "prestart"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
        },
        "when": {"always": true, "commands": [".*"]},
        "stages": ["prestart"]
    });
    host.write_json(&format!("{HOOKS_D}/oci-nvidia-hook-nvidia.json"), &nvidia);
    let (report, code) = host.report(&[]);
    assert_eq!(code, 1);
    let (layer, name, found, remedy) = the_failure(&report);
    assert_eq!(
        (layer.as_str(), name.as_str()),
        ("wiring", "second injector")
    );
    holds(&found, &["oci-nvidia-hook-nvidia.json", "twice"]);
    holds(&remedy, &["remove", "oci-nvidia-hook-nvidia.json"]);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn cdi_spec_made_for_another_driver_fails_naming_cdi_generate() {
    let host = shared_host("stale-cdi");
    let spec = host.cdi_spec("etc/cdi/nvidia.yaml");
    let text = fs::read_to_string(&spec).unwrap();
    assert!(text.contains("535.261.03"), "{text}");
    fs::write(&spec, text.replace("535.261.03", "470.256.02")).unwrap();
    let (report, code) = host.report(&[]);
    assert_eq!(code, 1);
    let (layer, name, found, remedy) = the_failure(&report);
    assert_eq!((layer.as_str(), name.as_str()), ("wiring", "CDI"));
    holds(
        &found,
        &[
            "nvidia.yaml",
            "made for driver 470.256.02",
            "runs 535.261.03",
        ],
    );
    holds(
        &remedy,
        &["oci-nvidia-hook cdi generate --output", "nvidia.yaml"],
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn two_specs_defining_gpu_0_fail_as_conflicting() {
    let host = shared_host("cdi-twice");
    let first = host.cdi_spec("etc/cdi/a.yaml");
    fs::copy(&first, host.path("etc/cdi/b.yaml")).unwrap();
    let (report, code) = host.report(&[]);
    assert_eq!(code, 1);
    let (layer, name, found, remedy) = the_failure(&report);
    assert_eq!((layer.as_str(), name.as_str()), ("wiring", "CDI"));
    holds(
        &found,
        &["nvidia.com/gpu=0", "a.yaml", "b.yaml", "conflicting device"],
    );
    holds(&remedy, &["remove one of the specs"]);
}

/// An image rootfs whose CUDA runtime is `version` (version.json and libcudart).
fn cuda_image(host: &HostRoot, name: &str, version: &str, cudart: &str) -> PathBuf {
    let rootfs = host.dir.join(name);
    let cuda = rootfs.join(format!("usr/local/cuda-{}", &version[..4]));
    fs::create_dir_all(cuda.join("targets/x86_64-linux/lib")).unwrap();
    fs::create_dir_all(rootfs.join("etc")).unwrap();
    fs::write(rootfs.join("etc/debian_version"), "12.8\n").unwrap();
    std::os::unix::fs::symlink(
        format!("/usr/local/cuda-{}", &version[..4]),
        rootfs.join("usr/local/cuda"),
    )
    .unwrap();
    fs::write(
        cuda.join("version.json"),
        format!(
            r#"{{"cuda": {{"name": "CUDA SDK", "version": "{version}"}},
                "cuda_cudart": {{"name": "CUDA Runtime (cudart)", "version": "{cudart}"}}}}"#
        ),
    )
    .unwrap();
    fs::write(
        cuda.join(format!("targets/x86_64-linux/lib/libcudart.so.{cudart}")),
        b"",
    )
    .unwrap();
    rootfs
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn cuda_12_6_image_on_the_535_host_names_the_driver_it_needs() {
    let host = shared_host("cuda-12-6");
    let rootfs = cuda_image(&host, "image-12.6", "12.6.3", "12.6.77");
    // An OCI image config as NVIDIA's legacy-style images carry it.
    let config = host.dir.join("image-12.6.json");
    fs::write(
        &config,
        r#"{"architecture": "amd64", "os": "linux",
            "config": {"Env": ["PATH=/usr/local/cuda/bin:/usr/bin:/bin",
                               "CUDA_VERSION=12.6.3"]}}"#,
    )
    .unwrap();
    let (report, code) = host.report(&[
        "--image-rootfs",
        rootfs.to_str().unwrap(),
        "--image-config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    // The container does not start: CUDA_VERSION implies cuda>=12.6.
    let (layer, name, found, remedy) = the_failure(&report);
    assert_eq!((layer.as_str(), name.as_str()), ("image", "starts"));
    holds(&found, &["cuda>=12.6", "CUDA 12.2"]);
    holds(
        &remedy,
        &[
            "CUDA 12.2 or older",
            "560.28.03",
            "535.261.03",
            "forward",
            "cuda-compat-12-6",
            "is one",
        ],
    );
    // The ceiling: a newer minor, which minor version compatibility runs.
    let warned = checks_with(&report, "warn");
    let ceiling: Vec<_> = warned.iter().filter(|w| w.name == "CUDA ceiling").collect();
    assert_eq!(ceiling.len(), 1, "{warned:#?}");
    holds(
        &ceiling[0].found,
        &["12.6", "cuda_cudart 12.6.77", "535.261.03", "CUDA 12.2"],
    );
    holds(&ceiling[0].remedy, &["560.28.03", "forward compatibility"]);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn cuda_13_image_fails_the_ceiling() {
    let host = shared_host("cuda-13");
    let rootfs = cuda_image(&host, "image-13.0", "13.0.1", "13.0.88");
    let (report, code) = host.report(&["--image-rootfs", rootfs.to_str().unwrap()]);
    assert_eq!(code, 1);
    let (layer, name, found, remedy) = the_failure(&report);
    assert_eq!((layer.as_str(), name.as_str()), ("image", "CUDA ceiling"));
    holds(
        &found,
        &["CUDA 13.0", "CUDA 12.2", "driver version is insufficient"],
    );
    holds(&remedy, &["580.65.06", "cuda-compat-13-0"]);
    // Stated directly, the same answer.
    let (report, _) = host.report(&["--cuda", "13.0"]);
    assert_eq!(the_failure(&report).1, "CUDA ceiling");
    // And an image within the ceiling passes.
    let (report, code) = host.report(&["--cuda", "12.2"]);
    assert_eq!(code, 0, "{report:#}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn dockerd_without_the_hook_on_its_path_fails_docker_gpus() {
    let host = shared_host("docker-path");
    fs::remove_dir_all(host.path("proc/812")).unwrap();
    host.dockerd(813, "/usr/sbin:/usr/bin");
    let (report, code) = host.report(&[]);
    assert_eq!(code, 1);
    let (_, name, found, remedy) = the_failure(&report);
    assert_eq!(name, "docker --gpus");
    holds(&found, &["pid 813", "could not select device driver"]);
    holds(&remedy, &["make install", "restart docker"]);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_broken_config_is_a_finding_and_the_rest_still_runs() {
    let host = shared_host("bad-config");
    let bad = host.dir.join("bad.toml");
    fs::write(&bad, "no-such-key = 1\n").unwrap();
    let out = Command::new(hook_binary())
        .env_clear()
        .args([
            "--config",
            bad.to_str().unwrap(),
            "doctor",
            "--json",
            "--host-root",
        ])
        .arg(&host.dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let failed = checks_with(&report, "fail");
    let config: Vec<_> = failed.iter().filter(|f| f.name == "config").collect();
    assert_eq!(config.len(), 1, "{failed:#?}");
    holds(&config[0].found, &["bad.toml", "no-such-key"]);
    // The wiring layer still ran.
    assert!(report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == "hooks.d"));
}

/// The TMPDIR a live run is given: empty, and a name the host root's
/// fixtures never make (they mirror host paths, and this checkout may be
/// under /tmp, as a CI clone is).
fn scratch_tmpdir(host: &HostRoot) -> PathBuf {
    let tmp = host.dir.join("doctor-tmpdir");
    fs::create_dir_all(&tmp).unwrap();
    tmp
}

/// What a live run must leave as it found: nothing under its TMPDIR, no
/// cgroup of its name in any hierarchy, no mount of its scratch directory.
fn assert_nothing_left(tmp: &Path, doctor_pid: u32) {
    let left: Vec<_> = fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    let name = format!("oci-nvidia-hook-doctor-{doctor_pid}");
    for hierarchy in fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        let dir = hierarchy.path().join(&name);
        assert!(!dir.exists(), "cgroup left: {}", dir.display());
    }
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(tmp.to_str().unwrap()),
        "a mount of {} is left",
        tmp.display()
    );
}

/// Runs `doctor --run --json` (inside a private namespace with cgroup2 on
/// /sys/fs/cgroup when `v2`), with TMPDIR `tmp`; the report, its exit code
/// and doctor's pid.
fn run_live(host: &HostRoot, v2: bool, tmp: &Path) -> (Value, i32, u32) {
    let mut cmd = if v2 {
        let mut cmd = Command::new("unshare");
        cmd.args(["-m", "--propagation", "private", "sh", "-c"])
            .arg("mount -t cgroup2 none /sys/fs/cgroup && exec \"$@\"")
            .arg("sh")
            .arg(hook_binary());
        cmd
    } else {
        Command::new(hook_binary())
    };
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("TMPDIR", tmp)
        .arg("--config")
        .arg(&host.sim.config)
        .args(["doctor", "--json", "--run", "--host-root"])
        .arg(&host.dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("run doctor --run");
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON ({e}): {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (report, out.status.code().unwrap_or(-1), pid)
}

/// The live layer's checks by name: (status, found).
fn live(report: &Value) -> Vec<(String, String, String)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["layer"] == "live")
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("name"), s("status"), s("found"))
        })
        .collect()
}

/// `--run` on a healthy host: the container sees every node (ENXIO: the
/// cgroup allows them, no GPU answers), loads the driver's libcuda through
/// its cache, and nothing is left.
fn run_sees_the_gpus_and_leaves_nothing(name: &str, v2: bool) {
    let host = shared_host(name);
    let tmp = scratch_tmpdir(&host);
    let (report, code, pid) = run_live(&host, v2, &tmp);
    let checks = live(&report);
    let get = |n: &str| {
        checks
            .iter()
            .find(|c| c.0 == n)
            .unwrap_or_else(|| panic!("no live {n:?} check: {checks:#?}"))
    };
    let cgroup = if v2 { "cgroup v2" } else { "cgroup v1" };
    assert_eq!(get("container").1, "ok", "{checks:#?}");
    holds(
        &get("container").2,
        &["runc", cgroup, "oci-nvidia-hook.json", "prestart"],
    );
    assert_eq!(get("device nodes").1, "ok", "{checks:#?}");
    let mut nodes = vec!["nvidiactl ENXIO".to_string(), "nvidia-uvm ENXIO".into()];
    for gpu in &host.sim.facts.gpus {
        nodes.push(format!("nvidia{} ENXIO", gpu.minor));
    }
    for node in &nodes {
        holds(&get("device nodes").2, &[node]);
    }
    assert_eq!(get("libcuda").1, "ok", "{checks:#?}");
    holds(&get("libcuda").2, &["cuDriverGetVersion = 12020"]);
    // The synthetic host's NVML serves its GPUs only where its config
    // sits beside it: in the container it reports no driver.
    assert_eq!(get("NVML").1, "warn", "{checks:#?}");
    assert_eq!(get("clean-up").1, "ok", "{checks:#?}");
    assert_eq!(code, 0, "{report:#}");
    assert_nothing_left(&tmp, pid);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn run_on_cgroup_v1_sees_the_gpus_and_leaves_nothing() {
    run_sees_the_gpus_and_leaves_nothing("run-v1", false);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn run_on_cgroup_v2_sees_the_gpus_and_leaves_nothing() {
    run_sees_the_gpus_and_leaves_nothing("run-v2", true);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn run_with_a_refusing_hook_reports_its_message_and_leaves_nothing() {
    let host = host("run-refused");
    fs::remove_file(host.sim.path("devroot/dev/nvidia-uvm")).unwrap();
    let tmp = scratch_tmpdir(&host);
    let (report, code, pid) = run_live(&host, false, &tmp);
    assert_eq!(code, 1);
    let checks = live(&report);
    let container = checks.iter().find(|c| c.0 == "container").unwrap();
    assert_eq!(container.1, "fail", "{checks:#?}");
    holds(&container.2, &["failed to start a container", "nvidia-uvm"]);
    let clean = checks.iter().find(|c| c.0 == "clean-up").unwrap();
    assert_eq!(clean.1, "ok", "{checks:#?}");
    assert_nothing_left(&tmp, pid);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn run_interrupted_by_sigterm_stops_the_container_and_leaves_nothing() {
    let host = shared_host("run-interrupted");
    // A hook named as ours that hangs: doctor is stopped while runc waits on it.
    let hook = host.path("usr/local/bin/oci-nvidia-hook");
    fs::remove_file(&hook).unwrap();
    fs::write(&hook, "#!/bin/sh\nexec sleep 3599\n").unwrap();
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();
    let tmp = scratch_tmpdir(&host);
    let child = Command::new(hook_binary())
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("TMPDIR", &tmp)
        .arg("--config")
        .arg(&host.sim.config)
        .args(["doctor", "--json", "--run", "--host-root"])
        .arg(&host.dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Wait until runc has the container (its state directory exists).
    let started = Instant::now();
    let state = loop {
        let found = fs::read_dir(&tmp)
            .unwrap()
            .flatten()
            .map(|e| {
                e.path()
                    .join("state")
                    .join(format!("oci-nvidia-hook-doctor-{pid}"))
            })
            .find(|p| p.exists());
        if let Some(found) = found {
            break found;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "runc never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = live(&report);
    let container = checks.iter().find(|c| c.0 == "container").unwrap();
    assert_eq!(container.1, "fail", "{checks:#?}");
    holds(&container.2, &["interrupted"]);
    assert_eq!(checks.iter().find(|c| c.0 == "clean-up").unwrap().1, "ok");
    assert!(!state.exists());
    assert_nothing_left(&tmp, pid);
    // The hanging hook went with runc.
    let hanging = fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| fs::read(e.path().join("cmdline")).ok())
        .any(|c| c.split(|b| *b == 0).any(|a| a == b"3599"));
    assert!(!hanging, "the hook's sleep 3599 still runs");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn systemd_with_a_hook_warns_about_daemon_reload_and_names_cdi() {
    let host = shared_host("systemd");
    host.process(1, "systemd");
    let (report, code) = host.report(&[]);
    assert_eq!(code, 0, "a warning is not a failure: {report:#}");
    let warned = checks_with(&report, "warn");
    assert_eq!(warned.len(), 1, "{warned:#?}");
    let Check {
        layer,
        name,
        found,
        remedy,
    } = &warned[0];
    assert_eq!((layer.as_str(), name.as_str()), ("wiring", "systemd"));
    holds(found, &["daemon-reload", "Failed to initialize NVML"]);
    holds(remedy, &["cdi generate", "nvidia.com/gpu=all"]);
    assert_eq!(report["summary"]["warn_layer"], "wiring");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn containerd_without_enable_cdi_warns_when_specs_exist() {
    let host = shared_host("containerd");
    let config = host.path("etc/containerd/config.toml");
    fs::create_dir_all(config.parent().unwrap()).unwrap();
    fs::write(
        &config,
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"pause\"\n",
    )
    .unwrap();
    host.cdi_spec("var/run/cdi/nvidia.yaml");
    let (report, _) = host.report(&[]);
    let warned = checks_with(&report, "warn");
    let containerd: Vec<_> = warned.iter().filter(|w| w.name == "containerd").collect();
    assert_eq!(containerd.len(), 1, "{warned:#?}");
    holds(&containerd[0].remedy, &["enable_cdi = true"]);
    // Set, it passes.
    fs::write(
        &config,
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = true\n",
    )
    .unwrap();
    let (report, code) = host.report(&[]);
    assert_eq!(code, 0, "{report:#}");
    assert!(checks_with(&report, "warn").is_empty(), "{report:#}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn host_smi_runs_the_hosts_nvidia_smi_and_fails_with_its_message() {
    let host = host("host-smi");
    let (report, code) = host.report(&["--host-smi"]);
    assert_eq!(code, 0, "{report:#}");
    let smi: Vec<_> = checks_with(&report, "ok")
        .into_iter()
        .filter(|c| c.name == "nvidia-smi -L")
        .collect();
    assert_eq!(smi.len(), 1, "{report:#}");
    holds(&smi[0].found, &["nvidia-smi ran"]);
    // The synthetic host's nvidia-smi is the real file behind its
    // alternatives link; an ELF that fails stands in for a broken one.
    let real = host.sim.facts.binaries["nvidia-smi"].clone();
    fs::remove_file(&real).unwrap();
    fs::copy("/bin/false", &real).unwrap();
    let (report, code) = host.report(&["--host-smi"]);
    assert_eq!(code, 1);
    let (layer, name, found, remedy) = the_failure(&report);
    assert_eq!((layer.as_str(), name.as_str()), ("host", "nvidia-smi -L"));
    holds(&found, &["failed"]);
    holds(&remedy, &["dmesg"]);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn colour_on_a_terminal_and_never_with_no_color() {
    let host = shared_host("colour");
    // util-linux's script(1) gives doctor a terminal.
    let on_tty = |no_color: Option<&str>| {
        let command = format!(
            "{} --config {} doctor --host-root {}",
            hook_binary().display(),
            host.sim.config.display(),
            host.dir.display()
        );
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &command, "/dev/null"])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("TERM", "xterm");
        if let Some(value) = no_color {
            cmd.env("NO_COLOR", value);
        }
        let out = cmd.output().expect("run script(1): install util-linux");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let coloured = on_tty(None);
    assert!(coloured.contains("\x1b[32mok\x1b[0m"), "{coloured:?}");
    let plain = on_tty(Some("1"));
    assert!(plain.contains("ok"), "{plain:?}");
    assert!(!plain.contains('\x1b'), "{plain:?}");
}

/// A Kubernetes node as the setup guides leave it, with the engines' own
/// files: containerd 1.7's `containerd config default` (from the Debian 13
/// root) and Docker 26's daemon.json, both changed by our `nvidia-ctk
/// runtime configure --cdi.enabled` at their default paths (containerd's
/// runtime in the drop-in that `imports` loads), a CRI-O drop-in as
/// `--runtime=crio` writes it, our CDI spec and the device plugin's own.
/// doctor names, per engine, each way it reaches GPUs, as containerd's own
/// `config dump` of the same files does for containerd.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_node_configured_by_our_nvidia_ctk_reaches_gpus_every_way_per_engine() {
    use harness::debroot::{trixie, Entry};
    use harness::runtime::cri::{device_plugin_spec_for, PluginHooks};
    use harness::runtime::process::run_bounded;

    let host = shared_host("k8s-node");
    let bin = host.path("usr/local/bin");
    for name in ["nvidia-container-runtime", "nvidia-cdi-hook", "nvidia-ctk"] {
        std::os::unix::fs::symlink("oci-nvidia-hook", bin.join(name)).unwrap();
    }
    for dir in ["etc/containerd", "etc/docker", "etc/crio/crio.conf.d"] {
        fs::create_dir_all(host.path(dir)).unwrap();
    }
    let hr = host.dir.to_str().unwrap();
    // In the root's own namespace, the host root's /etc/containerd and
    // /etc/docker bound over the root's: the tools write their default paths.
    let script = r#"set -e
hr=$0 bin=$1
mount --bind "$hr/etc/containerd" /etc/containerd
mount --bind "$hr/etc/docker" /etc/docker
containerd config default > /etc/containerd/config.toml
"$hr/usr/local/bin/nvidia-ctk" runtime configure --runtime=containerd --cdi.enabled \
  --nvidia-runtime-path=/usr/local/bin/nvidia-container-runtime
"$hr/usr/local/bin/nvidia-ctk" runtime configure --runtime=docker --cdi.enabled \
  --nvidia-runtime-path=/usr/local/bin/nvidia-container-runtime
"$hr/usr/local/bin/nvidia-ctk" runtime configure --runtime=crio \
  --config="$hr/etc/crio/crio.conf" --drop-in-config="$hr/etc/crio/crio.conf.d/99-nvidia.conf" \
  --nvidia-runtime-path=/usr/local/bin/nvidia-container-runtime
containerd config dump > "$hr/containerd-dump.toml"
"#;
    let entry = Entry::binding(&[&host.dir, hook_binary()]);
    let cmd = trixie().command(
        &entry,
        &["sh", "-c", script, hr, hook_binary().to_str().unwrap()],
    );
    let out = run_bounded(cmd, Duration::from_secs(120));
    assert!(
        out.status.is_some_and(|s| s.success()),
        "configuring in the trixie root failed: {}{}",
        out.stdout,
        out.stderr
    );
    let main = fs::read_to_string(host.path("etc/containerd/config.toml")).unwrap();
    holds(
        &main,
        &["version = 2", "imports", "/etc/containerd/conf.d/*.toml"],
    );
    assert!(host.path("etc/containerd/conf.d/99-nvidia.toml").is_file());
    // containerd's own reading of the same files.
    let dump = fs::read_to_string(host.dir.join("containerd-dump.toml")).unwrap();
    holds(
        &dump,
        &[
            "enable_cdi = true",
            "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]",
            "BinaryName = \"/usr/local/bin/nvidia-container-runtime\"",
        ],
    );
    assert!(host.path("etc/crio/crio.conf.d/99-nvidia.conf").is_file());
    host.cdi_spec("etc/cdi/nvidia.yaml");
    let plugin = device_plugin_spec_for(
        &host.sim,
        PluginHooks::CdiHook(Path::new("/usr/local/bin/nvidia-cdi-hook")),
    );
    host.write_json("var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json", &plugin);

    let (report, code) = host.report(&[]);
    assert_eq!(code, 0, "{report:#}");
    assert!(checks_with(&report, "warn").is_empty(), "{report:#}");
    let found = |name: &str| -> String {
        let checks = report["checks"].as_array().unwrap();
        let check = checks
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no {name:?} check in {report:#}"));
        check["found"].as_str().unwrap().to_string()
    };
    holds(
        &found("Docker reaches GPUs"),
        &["--gpus", "--runtime nvidia", "--device nvidia.com/gpu"],
    );
    holds(
        &found("containerd reaches GPUs"),
        &["runtime handler \"nvidia\"", "CDIDevices", "cdi.k8s.io"],
    );
    holds(
        &found("containerd"),
        &["99-nvidia.toml", "version 2", "CDI enabled"],
    );
    holds(&found("containerd runtime"), &["(oci-nvidia-hook)"]);
    holds(
        &found("CRI-O runtime"),
        &["\"nvidia\"", "(oci-nvidia-hook)"],
    );
    holds(
        &found("CRI-O reaches GPUs"),
        &["hooks.d", "runtime handler \"nvidia\"", "CDI"],
    );
    holds(
        &found("device plugin CDI"),
        &[
            "k8s.device-plugin.nvidia.com/gpu",
            "nvidia-cdi-hook",
            "(oci-nvidia-hook)",
        ],
    );
    // The device plugin's hook program gone: its pods fail, and doctor says so.
    fs::remove_file(bin.join("nvidia-cdi-hook")).unwrap();
    let (report, code) = host.report(&[]);
    assert_eq!(code, 1);
    let (_, name, found, remedy) = the_failure(&report);
    assert_eq!(name, "device plugin CDI");
    holds(&found, &["/usr/local/bin/nvidia-cdi-hook", "every pod"]);
    holds(&remedy, &["make install"]);
}

/// A PyTorch image as pip builds it: no CUDA toolkit, no `CUDA_VERSION`,
/// the runtime in NVIDIA's wheel under site-packages (`nvidia/cu13/lib/
/// libcudart.so.13` and its `nvidia_cuda_runtime-13.0.96.dist-info`, as
/// the `nvidia-cuda-runtime` wheel installs them), beside torch's own
/// libraries, a venv's links and a link out of the rootfs to a host
/// directory with a newer runtime name, which is never followed.
fn pytorch_image(host: &HostRoot, name: &str, wheel: (&str, &str, &str)) -> PathBuf {
    let (dir, dist_info, cudart) = wheel;
    let rootfs = host.dir.join(name);
    let site = rootfs.join("usr/local/lib/python3.12/site-packages");
    let files = [
        "etc/debian_version".to_string(),
        "usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33".into(),
        "usr/local/bin/python3.12".into(),
        "torch/lib/libtorch_cuda.so".into(),
        "torch/lib/libc10_cuda.so".into(),
        "torch/__init__.py".into(),
        format!("nvidia/{dir}/lib/{cudart}"),
        "nvidia/cublas/lib/libcublas.so.13".into(),
        "nvidia/cudnn/lib/libcudnn.so.9".into(),
        "torch-2.9.0.dist-info/METADATA".into(),
        format!("{dist_info}/METADATA"),
    ];
    for file in &files {
        let path = if file.starts_with("etc/") || file.starts_with("usr/") {
            rootfs.join(file)
        } else {
            site.join(file)
        };
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, b"").unwrap();
    }
    for i in 0..200 {
        let module = site.join(format!("torch/_modules/m{i:03}"));
        fs::create_dir_all(&module).unwrap();
        fs::write(module.join("__init__.py"), b"").unwrap();
    }
    std::os::unix::fs::symlink("python3.12", rootfs.join("usr/local/bin/python3")).unwrap();
    let outside = host.dir.join(format!("{name}-outside"));
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("libcudart.so.14.0.1"), b"").unwrap();
    std::os::unix::fs::symlink(&outside, site.join("nvidia/escape")).unwrap();
    std::os::unix::fs::symlink("/", rootfs.join("usr/local/lib/loop")).unwrap();
    rootfs
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_pytorch_image_with_the_cuda_13_wheel_fails_the_ceiling_named_from_the_wheel() {
    let host = shared_host("pytorch");
    let cu13 = (
        "cu13",
        "nvidia_cuda_runtime-13.0.96.dist-info",
        "libcudart.so.13",
    );
    let rootfs = pytorch_image(&host, "image-torch-cu13", cu13);
    let (report, code) = host.report(&["--image-rootfs", rootfs.to_str().unwrap()]);
    assert_eq!(code, 1, "{report:#}");
    let (layer, name, found, remedy) = the_failure(&report);
    assert_eq!((layer.as_str(), name.as_str()), ("image", "CUDA ceiling"));
    holds(
        &found,
        &[
            "CUDA 13.0",
            "pip wheel",
            "/usr/local/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13",
            "nvidia_cuda_runtime-13.0.96.dist-info",
            "CUDA 12.2",
            "CUDA driver version is insufficient for CUDA runtime version",
        ],
    );
    assert!(
        !found.contains("14.0"),
        "a link out of the rootfs was followed: {found}"
    );
    holds(&remedy, &["580.65.06", "cuda-compat-13-0"]);

    // The cu12 wheel of CUDA 12.2 runs on this 535 (CUDA 12.2) driver.
    let cu12 = (
        "cuda_runtime",
        "nvidia_cuda_runtime_cu12-12.2.140.dist-info",
        "libcudart.so.12",
    );
    let rootfs = pytorch_image(&host, "image-torch-cu12", cu12);
    let (report, code) = host.report(&["--image-rootfs", rootfs.to_str().unwrap()]);
    assert_eq!(code, 0, "{report:#}");
    let ceiling = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "CUDA ceiling")
        .unwrap();
    holds(
        ceiling["found"].as_str().unwrap(),
        &[
            "CUDA 12.2",
            "nvidia_cuda_runtime_cu12-12.2.140.dist-info",
            "runs on driver",
        ],
    );
}

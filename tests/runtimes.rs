//! End-to-end: real containers under runc (cgroup v1 and v2), crun (v1) and
//! podman (with runc, and with crun on v1), with `oci-nvidia-hook prestart`
//! as their hook, on a simulated 4-GPU host carrying NVIDIA's real 535
//! user-space files. Inside each container `/checker` (integration/checker.c)
//! reports the device nodes and what opening them gives (ENXIO: the device
//! cgroup allows the node; EPERM: it denies it), the libraries and their
//! mounts, what `dlopen("libcuda.so.1")` and `cuDriverGetVersion` give, and
//! then nvidia-smi runs.
//!
//! Run as root: `make test`, or
//! `cargo test --features _test_as_root --test runtimes -- --nocapture`
//! (`--nocapture` shows each container run's duration). The first run builds
//! the simulated host (a few seconds once NVIDIA's packages are cached) and
//! the template rootfs (about a second).

use std::collections::BTreeSet;
use std::path::Path;

use harness::mounts::{assert_mounts_unchanged, host_mounts};
use harness::runtime::bundle::{template_rootfs, Hook, Scenario};
use harness::runtime::container::run;
use harness::runtime::expected::{node_specs, LIB_DIR};
use harness::runtime::host_state::{listing_diff, tree_listing};
use harness::runtime::injected::{assert_injected, Expected};
use harness::runtime::run::{serial, Run, Serial};
use harness::runtime::runtimes::Runtime;
use harness::simhost::{Fixture, GpuFacts, SimHost};

const ALL_RUNTIMES: [Runtime; 5] = [
    Runtime::RuncV1,
    Runtime::RuncV2,
    Runtime::CrunV1,
    Runtime::Podman,
    Runtime::PodmanCrunV1,
];

fn host() -> SimHost {
    SimHost::shared(Fixture::real(4))
}

/// One container run of `scenario` with `runtime`.
fn run_container(
    serial: &Serial,
    host: &SimHost,
    scenario: &str,
    runtime: Runtime,
    env: &[(&str, &str)],
    hook: Hook,
) -> Run {
    run_with_decoys(serial, host, scenario, runtime, env, hook, &[])
}

/// The same, with decoy GPU nodes (see [`Scenario::decoy_minors`]).
fn run_with_decoys(
    serial: &Serial,
    host: &SimHost,
    scenario: &str,
    runtime: Runtime,
    env: &[(&str, &str)],
    hook: Hook,
    decoy_minors: &[u32],
) -> Run {
    let name = format!("{scenario}-{}", runtime.name());
    run(
        serial,
        &Scenario {
            name: &name,
            runtime,
            host,
            env,
            hook,
            decoy_minors,
            decoys: &[],
            reuse_rootfs: false,
            prepare: None,
        },
    )
}

/// The decoys are there and denied: the device cgroup is enforced in this
/// container, so the ENXIO of the requested nodes is the hook's doing, and
/// the hook did not allow more than it was asked for (`c 195:* rwm`).
fn assert_decoys_denied(run: &Run, decoy_minors: &[u32]) {
    let ctx = run.describe();
    let gpu_nodes = run.report.gpu_nodes();
    for minor in decoy_minors {
        let node = gpu_nodes
            .get(minor)
            .unwrap_or_else(|| panic!("the runtime's decoy /dev/nvidia{minor} is missing:{ctx}"));
        assert_eq!(
            node.open.as_deref(),
            Some("EPERM"),
            "decoy /dev/nvidia{minor} (no cgroup rule) must be denied:{ctx}"
        );
    }
}

// ---------------------------------------------------------------- assertions

/// The container saw exactly `selected` GPUs (plus nvidiactl and the UVM
/// nodes, for compute), the device cgroup allowed them and denies every
/// other GPU's node it has, and the driver's libraries and nvidia-smi work
/// through the image's own loader.
fn assert_gpus_injected(run: &Run, host: &SimHost, selected: &[&GpuFacts]) {
    let minors: Vec<u32> = selected.iter().map(|g| g.minor).collect();
    let nodes = node_specs(host, &minors);
    assert_injected(
        run,
        host,
        &Expected {
            nodes: &nodes,
            real_libraries: true,
        },
    );
    let wanted: BTreeSet<u32> = minors.into_iter().collect();
    let ctx = run.describe();
    for (minor, node) in &run.report.gpu_nodes() {
        if !wanted.contains(minor) {
            // Best is absent; present is tolerable only if the cgroup denies it.
            assert_eq!(
                node.open.as_deref(),
                Some("EPERM"),
                "/dev/nvidia{minor} was not requested, yet the device cgroup allows it:{ctx}"
            );
        }
    }
}

/// A container the hook must leave alone: no nodes, no libraries, the
/// image's cache and library directory untouched.
fn assert_nothing_injected(run: &Run, template: &Path) {
    run.assert_completed();
    let report = &run.report;
    let ctx = run.describe();
    assert!(
        report.nodes.is_empty(),
        "nvidia nodes in a non-GPU container: {:#?}{ctx}",
        report.nodes
    );
    assert!(
        report.files.is_empty() && report.links.is_empty(),
        "NVIDIA files in a non-GPU container: {:#?} {:#?}{ctx}",
        report.files,
        report.links
    );
    assert_eq!(report.devnull.as_deref(), Some("ok"), "/dev/null:{ctx}");
    let cuda = report.cuda.as_ref().expect("a cuda line");
    assert!(!cuda.loaded, "libcuda loaded in a non-GPU container:{ctx}");
    assert_eq!(
        report.smi_exit,
        Some(127),
        "nvidia-smi should be absent:{ctx}"
    );
    assert!(
        report.smi_output.contains("not found"),
        "nvidia-smi should be absent:{ctx}"
    );
    assert_eq!(
        report.ldcache.get("libcuda.so.1").map(String::as_str),
        Some("no"),
        "{ctx}"
    );
    // Nothing written into the image either.
    let cache = std::fs::read(run.rootfs.join("etc/ld.so.cache")).unwrap();
    let original = std::fs::read(template.join("etc/ld.so.cache")).unwrap();
    assert!(
        cache == original,
        "the image's ld.so.cache was rewritten:{ctx}"
    );
    let lib_dir: Vec<_> = std::fs::read_dir(run.rootfs.join("usr/lib/x86_64-linux-gnu"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        lib_dir.is_empty(),
        "files added to {LIB_DIR}: {lib_dir:?}{ctx}"
    );
    let conf_d: Vec<_> = std::fs::read_dir(run.rootfs.join("etc/ld.so.conf.d"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        conf_d,
        ["x86_64-linux-gnu.conf"],
        "files added to /etc/ld.so.conf.d:{ctx}"
    );
}

// ---------------------------------------------------------------- scenarios

/// No hook at all: proves each runtime's plumbing (and the checker) on its
/// own, so a failure elsewhere is the hook's.
fn without_hook(runtime: Runtime) {
    let serial = serial();
    let host = host();
    let run = run_container(
        &serial,
        &host,
        "without-hook",
        runtime,
        &[("NVIDIA_VISIBLE_DEVICES", "1")],
        Hook::Absent,
    );
    let template = template_rootfs(&host);
    assert_nothing_injected(&run, &template);
}

/// `NVIDIA_VISIBLE_DEVICES=1`: GPU index 1, whose device minor is not 1.
fn gpu_by_index(runtime: Runtime) {
    let serial = serial();
    let host = host();
    let gpus = host.facts.gpus.clone();
    let gpu = gpus.iter().find(|g| g.index == 1).expect("GPU index 1");
    assert_ne!(
        gpu.minor, 1,
        "the simulated host should give index 1 another minor"
    );
    // Every other GPU's node as a decoy, where the runtime can make them.
    let decoys: Vec<u32> = match runtime {
        Runtime::Podman | Runtime::PodmanCrunV1 => vec![],
        _ => gpus
            .iter()
            .map(|g| g.minor)
            .filter(|m| *m != gpu.minor)
            .collect(),
    };
    let run = run_with_decoys(
        &serial,
        &host,
        "gpu-by-index",
        runtime,
        &[("NVIDIA_VISIBLE_DEVICES", "1")],
        Hook::Prestart,
        &decoys,
    );
    assert_gpus_injected(&run, &host, &[gpu]);
    assert_decoys_denied(&run, &decoys);
}

/// `NVIDIA_VISIBLE_DEVICES` unset: not a GPU container.
fn visible_devices_unset(runtime: Runtime) {
    let serial = serial();
    let host = host();
    let run = run_container(&serial, &host, "unset", runtime, &[], Hook::Prestart);
    assert_nothing_injected(&run, &template_rootfs(&host));
}

/// `NVIDIA_VISIBLE_DEVICES=void`: not a GPU container.
fn visible_devices_void(runtime: Runtime) {
    let serial = serial();
    let host = host();
    let run = run_container(
        &serial,
        &host,
        "void",
        runtime,
        &[("NVIDIA_VISIBLE_DEVICES", "void")],
        Hook::Prestart,
    );
    assert_nothing_injected(&run, &template_rootfs(&host));
}

/// `NVIDIA_VISIBLE_DEVICES=all`: every GPU.
fn all_gpus(runtime: Runtime) {
    let serial = serial();
    let host = host();
    let gpus = host.facts.gpus.clone();
    let run = run_container(
        &serial,
        &host,
        "all-gpus",
        runtime,
        &[("NVIDIA_VISIBLE_DEVICES", "all")],
        Hook::Prestart,
    );
    let all: Vec<&GpuFacts> = gpus.iter().collect();
    assert_eq!(all.len(), 4);
    assert_gpus_injected(&run, &host, &all);
}

/// One run per runtime test: `$scenario::<runtime>`, so that e.g.
/// `cargo test --test runtimes gpu_by_index` or `-- podman` selects them.
macro_rules! per_runtime {
    ($scenario:ident: $($test:ident => $runtime:ident),+ $(,)?) => {
        mod $scenario {
            use super::*;
            $(
                #[test]
                #[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
                fn $test() {
                    super::$scenario(Runtime::$runtime)
                }
            )+
        }
    };
    ($scenario:ident) => {
        per_runtime!($scenario:
            runc_v1 => RuncV1,
            runc_v2 => RuncV2,
            crun_v1 => CrunV1,
            podman => Podman,
            podman_crun_v1 => PodmanCrunV1,
        );
    };
}

per_runtime!(without_hook);
per_runtime!(gpu_by_index);
per_runtime!(visible_devices_unset);
per_runtime!(visible_devices_void);
// v1 rules are one write per node; v2's BPF program needs one rule per node:
// both are worth a many-GPU run.
per_runtime!(all_gpus: runc_v1 => RuncV1, runc_v2 => RuncV2);

// ---------------------------------------------------------------- other requests

/// A comma list of a UUID and a PCI bus id selects those two GPUs.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn uuid_and_bus_id_runc_v1() {
    let serial = serial();
    let host = host();
    let gpus = host.facts.gpus.clone();
    let (by_uuid, by_bus) = (&gpus[2], &gpus[3]);
    let list = format!("{},{}", by_uuid.uuid, by_bus.bus);
    let run = run_container(
        &serial,
        &host,
        "uuid-and-bus-id",
        Runtime::RuncV1,
        &[("NVIDIA_VISIBLE_DEVICES", &list)],
        Hook::Prestart,
    );
    assert_gpus_injected(&run, &host, &[by_uuid, by_bus]);
}

/// An unknown device fails the container's start, and the hook's error,
/// naming the devices that exist, reaches the user through the runtime.
fn unknown_device(runtime: Runtime) {
    let serial = serial();
    let host = host();
    let run = run_container(
        &serial,
        &host,
        "unknown-device",
        runtime,
        &[("NVIDIA_VISIBLE_DEVICES", "7")],
        Hook::Prestart,
    );
    let ctx = run.describe();
    assert!(!run.succeeded(), "the container started anyway:{ctx}");
    assert!(
        !run.report.complete,
        "the container's process ran although its hook failed:{ctx}"
    );
    let log = run.hook_log.as_deref().unwrap_or("");
    assert!(
        log.contains("unknown device") || run.stderr.contains("unknown device"),
        "the hook's error should name the unknown device:{ctx}"
    );
}

per_runtime!(unknown_device: runc_v1 => RuncV1, crun_v1 => CrunV1, podman => Podman);

/// A restarted container (`docker restart`, `podman start` again) runs the
/// hook again on the rootfs the first run wrote its mount points, links,
/// loader cache and ld.so.conf.d entry into: the second run must work the
/// same, and the image's cache must not grow duplicate entries.
fn restart_on_same_rootfs(runtime: Runtime) {
    let serial = serial();
    let host = host();
    let gpus = host.facts.gpus.clone();
    let gpu = gpus.iter().find(|g| g.index == 1).expect("GPU index 1");
    let mut runs = Vec::new();
    for attempt in 0..2 {
        let name = format!("restart-{}", runtime.name());
        let run = run(
            &serial,
            &Scenario {
                name: &name,
                runtime,
                host: &host,
                env: &[("NVIDIA_VISIBLE_DEVICES", "1")],
                hook: Hook::Prestart,
                decoy_minors: &[],
                decoys: &[],
                reuse_rootfs: attempt > 0,
                prepare: None,
            },
        );
        assert_gpus_injected(&run, &host, &[gpu]);
        runs.push(run);
    }
    let (first, second) = (&runs[0], &runs[1]);
    assert_eq!(
        first.ld_cache,
        second.ld_cache,
        "the loader cache differs after a restart:{}{}",
        first.describe(),
        second.describe()
    );
    assert_eq!(
        first.report.ldconf,
        second.report.ldconf,
        "ld.so.conf.d differs after a restart:{}",
        second.describe()
    );
}

per_runtime!(restart_on_same_rootfs: runc_v1 => RuncV1, podman => Podman);

// ---------------------------------------------------------------- host invariants

/// The hook changes nothing on the host: the host's mount table, its /dev
/// nvidia entries and the whole simulated driver tree (driver root, dev root,
/// proc tree) are the same after GPU containers ran under every runtime.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn host_unchanged_after_runs() {
    let serial = serial();
    let host = host();
    let host_dev_nodes = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir("/dev")
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("nvidia"))
            .collect();
        names.sort();
        names
    };
    // Podman's first run may set up its storage (its own mounts): warm up
    // every runtime once before taking the snapshot.
    for runtime in ALL_RUNTIMES {
        run_container(&serial, &host, "warm-up", runtime, &[], Hook::Absent);
    }

    let mounts = host_mounts();
    let tree = tree_listing(&host.dir);
    let dev = host_dev_nodes();
    let mut runs = Vec::new();
    for runtime in ALL_RUNTIMES {
        for devices in ["1", "all"] {
            let scenario = format!("host-unchanged-{devices}");
            let run = run_container(
                &serial,
                &host,
                &scenario,
                runtime,
                &[("NVIDIA_VISIBLE_DEVICES", devices)],
                Hook::Prestart,
            );
            runs.push(format!(
                "{} {}: {:?}",
                runtime.name(),
                devices,
                run.status.map(|s| s.to_string())
            ));
        }
    }

    assert_mounts_unchanged(&mounts, &format!(" (runs: {runs:#?})"));
    let diff = listing_diff(&tree, &tree_listing(&host.dir));
    assert!(
        diff.is_empty(),
        "the simulated host's tree changed: {diff:#?} (runs: {runs:#?})"
    );
    assert_eq!(
        dev,
        host_dev_nodes(),
        "the host's /dev nvidia entries changed"
    );
}

// ---------------------------------------------------------------- the harness itself

/// A hung run is killed at its limit, with its whole process group, and
/// the test goes on: a hang fails instead of blocking CI.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn harness_kills_a_hung_run() {
    let started = std::time::Instant::now();
    let mut cmd = std::process::Command::new("sh");
    // The background sleep holds the pipes too: the kill must reach it.
    cmd.args(["-c", "echo started; sleep 30 & sleep 30"]);
    let finished =
        harness::runtime::process::run_bounded(cmd, std::time::Duration::from_millis(500));
    assert!(finished.timed_out);
    assert!(finished.status.is_none());
    assert_eq!(finished.stdout, "started\n");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

/// The checker's line format, parsed.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn harness_parses_checker_output() {
    let stdout = "\
node /dev/nvidia-caps d - mode=0755
node /dev/nvidia2 c 195:2 mode=0666 open=ENXIO
node /dev/nvidia3 c 195:3 mode=0666 open=EPERM
node /dev/nvidiactl c 195:255 mode=0666 open=ENXIO
devnull /dev/null open=ok
file /usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03 size=29000000 ro=1 nosuid=1 nodev=1 noexec=0
link /usr/lib/x86_64-linux-gnu/libcuda.so.1 target=libcuda.so.535.261.03
ldcache /etc/ld.so.cache size=900 libc.so.6=yes libcuda.so.1=yes libnvidia-ml.so.1=yes copied=/out/ld.so.cache
ldconf /etc/ld.so.conf.d/x86_64-linux-gnu.conf line=# Multiarch support
cuda /usr/lib/x86_64-linux-gnu/libcuda.so.1 dlopen=ok rc=0 version=12020
nvml libnvidia-ml.so.1 dlopen=error msg=libnvidia-ml.so.1: cannot open shared object file: No such file or directory
checker done
NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.
smi_exit=9
";
    let report = harness::runtime::report::CheckerReport::parse(stdout, "");
    assert!(report.complete);
    let gpu_nodes = report.gpu_nodes();
    assert_eq!(gpu_nodes.keys().copied().collect::<Vec<_>>(), [2, 3]);
    assert_eq!(gpu_nodes[&2].numbers, Some((195, 2)));
    assert_eq!(gpu_nodes[&3].open.as_deref(), Some("EPERM"));
    assert_eq!(report.nodes["/dev/nvidia-caps"].kind, 'd');
    assert_eq!(report.nodes["/dev/nvidia-caps"].open, None);
    assert_eq!(report.devnull.as_deref(), Some("ok"));
    let file = &report.files["/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03"];
    assert!(file.read_only && file.nosuid && file.nodev && !file.noexec);
    assert_eq!(
        report.links["/usr/lib/x86_64-linux-gnu/libcuda.so.1"],
        "libcuda.so.535.261.03"
    );
    assert_eq!(report.ldcache["copied"], "/out/ld.so.cache");
    assert_eq!(
        report.ldconf["/etc/ld.so.conf.d/x86_64-linux-gnu.conf"],
        ["# Multiarch support"]
    );
    let cuda = report.cuda.unwrap();
    assert!(cuda.loaded);
    assert_eq!(cuda.field("version"), Some("12020"));
    let nvml = report.nvml.unwrap();
    assert!(!nvml.loaded);
    assert_eq!(
        nvml.msg.as_deref(),
        Some("libnvidia-ml.so.1: cannot open shared object file: No such file or directory")
    );
    assert_eq!(report.smi_exit, Some(9));
    assert!(report.smi_output.contains("couldn't communicate"));
}

/// What NVIDIA's spec hooks leave in a container whose image carries CUDA
/// compat libraries of driver `compat_version`, run through `runtime` at
/// createContainer (as NVIDIA's specs run them) with GPU minor 1 given:
/// (our compat `ld.so.conf.d` entry, the container's loader cache as
/// `ldconfig -p` prints it, the application profile).
fn compat_and_profile(
    runtime: Runtime,
    compat_version: &str,
) -> (Option<String>, String, Option<String>) {
    compat_and_profile_with(runtime, compat_version, None, None, &[])
}

/// [`compat_and_profile`], `enable-cuda-compat` given `compat_args` (its
/// `--host-driver-version` of the host's driver when `None`), the compat
/// libcuda carrying NVIDIA's note naming CUDA `note_cuda` (and branch 535)
/// when given, and the hooks of `newer` (a newer tool's spec: hooks and
/// flags this binary does not know) before the others.
fn compat_and_profile_with(
    runtime: Runtime,
    compat_version: &str,
    compat_args: Option<&[&str]>,
    note_cuda: Option<&str>,
    newer: &[&[&str]],
) -> (Option<String>, String, Option<String>) {
    use harness::runtime::bundle::{Bundle, BundleExtras};
    use harness::runtime::oci_config::path_str;

    let host = SimHost::shared(Fixture::synthetic(2));
    let libcuda = host.facts.libraries["libcuda.so.1"].clone();
    let compat_file = format!("libcuda.so.{compat_version}");
    let note_cuda = note_cuda.map(str::to_string);
    let prepare = move |root: &Path| {
        let compat = root.join("usr/local/cuda/compat");
        std::fs::create_dir_all(&compat).unwrap();
        std::fs::copy(&libcuda, compat.join(&compat_file)).unwrap();
        if let Some(cuda) = &note_cuda {
            harness::compat::add_fwd_note(&compat.join(&compat_file), cuda, &[535]);
        }
        std::os::unix::fs::symlink(&compat_file, compat.join("libcuda.so.1")).unwrap();
    };
    // Each form its own bundle: the CUDA version given, digits only.
    let form: String = compat_args
        .unwrap_or_default()
        .concat()
        .chars()
        .filter(char::is_ascii_digit)
        .take(8)
        .collect();
    let name = format!(
        "compat-{}-{}{}{form}",
        runtime.name().to_lowercase(),
        compat_version.replace('.', "-"),
        if newer.is_empty() { "" } else { "-newer" }
    );
    let scenario = Scenario::hooks_only(&name, runtime, &host, &prepare);
    let script = "cp /etc/ld.so.cache /out/ld.so.cache; \
                  cp /etc/ld.so.conf.d/00-compat-oci-nvidia-hook.conf /out/compat.conf; \
                  cp /etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf /out/profile; \
                  exit 0";
    let bundle = Bundle::create(
        &scenario,
        &BundleExtras {
            args: Some(vec!["/bin/sh".into(), "-c".into(), script.into()]),
            ..BundleExtras::default()
        },
    );
    let binary = path_str(harness::project::hook_binary());
    let hook = |args: &[&str]| {
        let mut argv = vec!["nvidia-cdi-hook"];
        argv.extend(args);
        serde_json::json!({"path": binary, "args": argv})
    };
    let by_driver = ["--host-driver-version", host.facts.driver_version.as_str()];
    let mut compat = vec!["enable-cuda-compat"];
    compat.extend(compat_args.unwrap_or(&by_driver));
    let mut list: Vec<serde_json::Value> = newer.iter().map(|args| hook(args)).collect();
    list.extend([
        hook(&compat),
        hook(&["update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"]),
        hook(&["update-application-profile"]),
    ]);
    let hooks = serde_json::json!({ "createContainer": list });
    let id = format!("onh-{name}-{}", std::process::id());
    let (ok, stderr) = bundle.run_with_hooks(&scenario, &id, hooks, |config| {
        config["linux"]["devices"] = serde_json::json!([
            {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1},
        ]);
    });
    assert!(ok, "{name}: {stderr}");
    let out = bundle.out_dir();
    let cache = std::process::Command::new("ldconfig")
        .args(["-p", "-C"])
        .arg(out.join("ld.so.cache"))
        .output()
        .expect("run ldconfig -p");
    assert!(cache.status.success(), "{name}: ldconfig -p: {cache:?}");
    (
        std::fs::read_to_string(out.join("compat.conf")).ok(),
        String::from_utf8_lossy(&cache.stdout).into_owned(),
        std::fs::read_to_string(out.join("profile")).ok(),
    )
}

/// `enable-cuda-compat` and `update-application-profile` as NVIDIA's specs
/// run them, through runc and crun: compat libraries of a driver newer than
/// the host's get our `ld.so.conf.d` entry and come first in the loader
/// cache `update-ldcache` writes, older ones neither; the profile limits
/// EGL to the container's GPU (minor 1: mask 0x2).
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn nvidia_cdi_hook_compat_and_application_profile_through_runc_and_crun() {
    let _serial = serial();
    for runtime in [Runtime::RuncV1, Runtime::CrunV1] {
        runtime.require_tools();
        let (conf, cache, profile) = compat_and_profile(runtime, "550.54.15");
        let what = format!("{}: newer compat\n{cache}", runtime.name());
        assert_eq!(conf.as_deref(), Some("/usr/local/cuda/compat\n"), "{what}");
        let first = cache
            .lines()
            .find(|l| l.trim_start().starts_with("libcuda.so.1 "))
            .unwrap_or_else(|| panic!("no libcuda.so.1 in the cache: {what}"));
        assert!(first.contains("=> /usr/local/cuda/compat/"), "{what}");
        let profile = profile.unwrap_or_else(|| panic!("no application profile: {what}"));
        assert!(
            profile.contains("\"EGLVisibleDGPUDevices\",0x2"),
            "{what}: {profile}"
        );

        let (conf, cache, _) = compat_and_profile(runtime, "470.256.02");
        let what = format!("{}: older compat\n{cache}", runtime.name());
        assert_eq!(conf, None, "{what}");
        assert!(!cache.contains("/usr/local/cuda/compat"), "{what}");
    }
}

/// A spec written by a newer tool than this binary: hooks it does not know
/// (a newer NVIDIA's, none at all), a flag a known hook lacks, and 1.19's
/// `enable-cuda-compat --host-cuda-version` form. Through runc and crun the
/// container starts, as under NVIDIA's forward-compatible hooks, and the
/// compat libraries whose note names a newer CUDA than the host's are
/// preferred; without the note, none are, as NVIDIA's 1.20 hook decides.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_newer_tools_hooks_start_the_container_through_runc_and_crun() {
    let _serial = serial();
    let newer: &[&[&str]] = &[
        &["apply-cuda-memory-limits", "--memory-limit", "1G"],
        &[],
        &["update-nvidia-params"],
        &["create-symlinks", "--link", "a::/b", "--a-newer-flag"],
    ];
    for runtime in [Runtime::RuncV1, Runtime::CrunV1] {
        runtime.require_tools();
        // The compat driver's note says CUDA 12.4: newer than 12.2.
        let (conf, cache, _) = compat_and_profile_with(
            runtime,
            "550.54.15",
            Some(&[
                "--host-cuda-version=12.2",
                "--cuda-compat-container-root=/usr/local/cuda/compat",
            ]),
            Some("12.4"),
            newer,
        );
        let what = format!("{}: newer tool's spec\n{cache}", runtime.name());
        assert_eq!(conf.as_deref(), Some("/usr/local/cuda/compat\n"), "{what}");
        // Not newer than 12.4: nothing is preferred; the container starts.
        let (conf, _, _) = compat_and_profile_with(
            runtime,
            "550.54.15",
            Some(&["--host-cuda-version=12.4"]),
            Some("12.4"),
            newer,
        );
        assert_eq!(conf, None, "{}", runtime.name());
        // No note: a host CUDA version takes nothing.
        let (conf, _, _) = compat_and_profile_with(
            runtime,
            "550.54.15",
            Some(&["--host-cuda-version=12.1"]),
            None,
            newer,
        );
        assert_eq!(conf, None, "{}: no note", runtime.name());
    }
}

//! "Injection worked", judged from what the checker saw inside a container:
//! the expected device nodes allowed by the device cgroup, the driver's
//! libraries mounted read-only and found through the image's own loader
//! cache, and, on the real-535 host, libcuda answering and nvidia-smi
//! reaching its "no driver" failure. One judgement for every suite that
//! runs the checker and nvidia-smi (runtimes.rs, rootless.rs); each adds
//! what is particular to it (decoys, bind mounts, the hook's log).

use super::expected::{node_specs, NodeSpec, LIB_DIR};
use super::run::Run;
use crate::simhost::{GpuFacts, SimHost};

/// nvidia-smi's message when it found libnvidia-ml but no kernel driver:
/// proof that the injected binary and library work together.
const SMI_NO_DRIVER: &str = "couldn't communicate with the NVIDIA driver";
/// nvidia-smi's exit code for that failure.
const SMI_NO_DRIVER_EXIT: i32 = 9;

/// What a container must show.
pub struct Expected<'a> {
    /// These nodes, each a char device with these numbers that opens with
    /// ENXIO: the device cgroup allows it, and no driver answers.
    pub nodes: &'a [NodeSpec],
    /// The host has NVIDIA's real libraries (not the MIG host's stand-ins):
    /// libcuda answers and nvidia-smi runs to its "no driver" failure.
    pub real_libraries: bool,
}

/// [`assert_injected`] for a container given every GPU of `host`, which
/// has NVIDIA's real libraries.
pub fn assert_every_gpu_injected(run: &Run, host: &SimHost) {
    let minors: Vec<u32> = host.facts.gpus.iter().map(|g| g.minor).collect();
    assert_injected(
        run,
        host,
        &Expected {
            nodes: &node_specs(host, &minors),
            real_libraries: true,
        },
    );
}

/// The container ran to the end and got what `expected` says, plus the
/// driver's libcuda mounted read-only under its host file name, its SONAME
/// link, and a loader cache that finds it and still holds the image's own
/// libc.
pub fn assert_injected(run: &Run, host: &SimHost, expected: &Expected) {
    run.assert_completed();
    let report = &run.report;
    let ctx = run.describe();

    for (path, numbers) in expected.nodes {
        let node = report
            .nodes
            .get(path)
            .unwrap_or_else(|| panic!("{path} is missing in the container:{ctx}"));
        assert_eq!(node.kind, 'c', "{path} is not a char device:{ctx}");
        assert_eq!(node.numbers, Some(*numbers), "{path} numbers:{ctx}");
        assert_eq!(
            node.open.as_deref(),
            Some("ENXIO"),
            "{path}: the device cgroup should allow it (ENXIO: allowed, no driver), got {:?}:{ctx}",
            node.open
        );
    }
    assert_eq!(
        report.devnull.as_deref(),
        Some("ok"),
        "/dev/null must still open: the runtime's own device rules were lost:{ctx}"
    );

    // Libraries: mounted read-only under the host's file name, SONAME link,
    // loadable through the image's loader.
    let version = &host.facts.driver_version;
    let libcuda = format!("{LIB_DIR}/libcuda.so.{version}");
    let file = report
        .files
        .get(&libcuda)
        .unwrap_or_else(|| panic!("{libcuda} is missing:{ctx}"));
    assert!(
        file.read_only,
        "{libcuda} must be on a read-only mount:{ctx}"
    );
    assert!(
        file.nosuid && file.nodev,
        "{libcuda} must be mounted nosuid,nodev: {file:?}:{ctx}"
    );
    assert_eq!(
        report.links.get(&format!("{LIB_DIR}/libcuda.so.1")),
        Some(&format!("libcuda.so.{version}")),
        "libcuda.so.1 SONAME link:{ctx}"
    );

    // The image's cache: written by the hook, still holding the image's own
    // libraries, read by glibc's own ldconfig -p.
    assert_eq!(
        report.ldcache.get("libcuda.so.1").map(String::as_str),
        Some("yes"),
        "the container's /etc/ld.so.cache lacks libcuda.so.1:{ctx}"
    );
    let cache = run
        .ld_cache
        .as_ref()
        .unwrap_or_else(|| panic!("the checker left no copy of the cache:{ctx}"));
    let has = |soname: &str, dir: &str| {
        cache
            .iter()
            .any(|e| e.soname == soname && e.tag == "libc6,x86-64" && e.path.starts_with(dir))
    };
    assert!(
        has("libcuda.so.1", LIB_DIR),
        "ldconfig -p of the container's cache has no x86-64 libcuda.so.1 in {LIB_DIR}: {cache:#?}{ctx}"
    );
    assert!(
        has("libc.so.6", "/lib/x86_64-linux-gnu/"),
        "the image's own libc.so.6 entry was lost from its cache: {cache:#?}{ctx}"
    );
    if expected.real_libraries {
        assert_real_libraries_work(run, host);
    }
}

/// NVIDIA's real libcuda answers from the image's library directory,
/// libnvidia-ml loads, and nvidia-smi, found, fails only for lack of a
/// kernel driver.
fn assert_real_libraries_work(run: &Run, host: &SimHost) {
    let report = &run.report;
    let ctx = run.describe();
    let libcuda = format!("{LIB_DIR}/libcuda.so.{}", host.facts.driver_version);
    let file = &report.files[&libcuda];
    assert!(
        file.size > 1_000_000,
        "{libcuda} is too small: {file:?}{ctx}"
    );
    assert_libcuda_and_nvml_load(run, host, LIB_DIR);
    let cache = run.ld_cache.as_ref().expect("checked by assert_injected");
    assert!(
        cache.iter().any(|e| e.soname == "libnvidia-ml.so.1"
            && e.tag == "libc6,x86-64"
            && e.path.starts_with(LIB_DIR)),
        "ldconfig -p of the container's cache has no libnvidia-ml.so.1 in {LIB_DIR}: {cache:#?}{ctx}"
    );
    assert!(
        report.files.contains_key("/usr/bin/nvidia-smi"),
        "/usr/bin/nvidia-smi is missing:{ctx}"
    );
    assert_smi_reached_the_driver_check(run);
}

/// The real libcuda, found through the image's loader, loaded from under
/// `from` and answered cuDriverGetVersion as `host` says; libnvidia-ml loaded.
fn assert_libcuda_and_nvml_load(run: &Run, host: &SimHost, from: &str) {
    let report = &run.report;
    let ctx = run.describe();
    let cuda = report.cuda.as_ref().expect("a cuda line");
    assert!(cuda.loaded, "dlopen(libcuda.so.1) failed: {cuda:?}:{ctx}");
    assert!(
        cuda.path.starts_with(from),
        "libcuda loaded from {} instead of {from}:{ctx}",
        cuda.path
    );
    assert_eq!(cuda.field("rc"), Some("0"), "cuDriverGetVersion:{ctx}");
    assert_eq!(
        cuda.field("version"),
        Some(host.facts.cuda_version.to_string().as_str()),
        "cuDriverGetVersion:{ctx}"
    );
    let nvml = report.nvml.as_ref().expect("an nvml line");
    assert!(
        nvml.loaded,
        "dlopen(libnvidia-ml.so.1) failed: {nvml:?}:{ctx}"
    );
}

/// nvidia-smi, found, failed only for lack of a kernel driver.
fn assert_smi_reached_the_driver_check(run: &Run) {
    let report = &run.report;
    let ctx = run.describe();
    assert!(
        report.smi_output.contains(SMI_NO_DRIVER),
        "nvidia-smi did not reach the driver check:{ctx}"
    );
    assert_eq!(
        report.smi_exit,
        Some(SMI_NO_DRIVER_EXIT),
        "nvidia-smi exit code:{ctx}"
    );
}

/// GPU `index` of `host`.
pub fn gpu(host: &SimHost, index: u32) -> GpuFacts {
    host.facts
        .gpus
        .clone()
        .into_iter()
        .find(|g| g.index == index)
        .unwrap_or_else(|| panic!("no GPU {index}"))
}

/// Exactly the GPUs of `indices` (plus nvidiactl and UVM for compute),
/// allowed by the cgroup, libcuda 12020 and nvidia-smi; every decoy denied.
pub fn assert_gpus(run: &Run, host: &SimHost, indices: &[u32], decoys: &[u32]) {
    let minors: Vec<u32> = indices.iter().map(|i| gpu(host, *i).minor).collect();
    assert_injected(
        run,
        host,
        &Expected {
            nodes: &node_specs(host, &minors),
            real_libraries: true,
        },
    );
    assert_decoys_denied(run, &minors, decoys);
}

/// A utility-only request (`capabilities=utility`) for every GPU of
/// `host`: each GPU node and nvidia-smi, which reaches its "no driver"
/// failure; no UVM node and no libcuda, which are compute's.
pub fn assert_utility_only(run: &Run, host: &SimHost) {
    run.assert_completed();
    let ctx = run.describe();
    let uvm = host.facts.uvm_major;
    assert!(
        run.report
            .nodes
            .values()
            .all(|n| n.numbers.map(|(m, _)| m) != Some(uvm)),
        "utility brings no UVM node:{ctx}"
    );
    assert_eq!(run.report.gpu_nodes().len(), host.facts.gpus.len(), "{ctx}");
    assert!(
        run.report.cuda.as_ref().is_none_or(|c| !c.loaded),
        "utility brings no libcuda:{ctx}"
    );
    assert!(run.stdout.contains(SMI_NO_DRIVER), "{ctx}");
}

/// Every GPU node but `minors` is one of `decoys`, each there and denied
/// by the device cgroup (EPERM).
pub fn assert_decoys_denied(run: &Run, minors: &[u32], decoys: &[u32]) {
    let ctx = run.describe();
    let nodes = run.report.gpu_nodes();
    for (minor, node) in &nodes {
        if minors.contains(minor) {
            continue;
        }
        assert!(
            decoys.contains(minor),
            "/dev/nvidia{minor} was not asked for:{ctx}"
        );
        assert_eq!(
            node.open.as_deref(),
            Some("EPERM"),
            "decoy /dev/nvidia{minor}: the device cgroup must deny it:{ctx}"
        );
    }
    for minor in decoys {
        assert!(
            nodes.contains_key(minor),
            "the decoy /dev/nvidia{minor} is missing:{ctx}"
        );
    }
}

/// For a spec laid out by someone else (NVIDIA's CDI library mounts the
/// driver's files at their paths in the driver root, not ours): exactly
/// the GPUs of `indices` allowed by the cgroup (ENXIO), every decoy
/// denied (EPERM), no other GPU node, and the mounted libcuda answering
/// `cuDriverGetVersion` with the host's CUDA version.
pub fn assert_gpus_any_layout(run: &Run, host: &SimHost, indices: &[u32], decoys: &[u32]) {
    let ctx = run.describe();
    let minors: Vec<u32> = indices.iter().map(|i| gpu(host, *i).minor).collect();
    let nodes = run.report.gpu_nodes();
    for minor in &minors {
        let node = nodes
            .get(minor)
            .unwrap_or_else(|| panic!("/dev/nvidia{minor} is missing:{ctx}"));
        assert_eq!(
            node.open.as_deref(),
            Some("ENXIO"),
            "/dev/nvidia{minor}: the device cgroup must allow it:{ctx}"
        );
    }
    assert_decoys_denied(run, &minors, decoys);
    let cuda = run.report.cuda.as_ref().expect("a cuda line");
    assert_eq!(cuda.field("rc"), Some("0"), "cuDriverGetVersion:{ctx}");
    assert_eq!(
        cuda.field("version"),
        Some(host.facts.cuda_version.to_string().as_str()),
        "cuDriverGetVersion:{ctx}"
    );
}

/// A container given `all` on a WSL2 host (`Fixture::wsl`) ran to the end
/// and got `/dev/dxg`, allowed by the device cgroup (ENODEV: the misc
/// driver, which no dxg registered with here, answered), with no `/dev/nvidia*` of the hook's (`decoys`, nodes the
/// runtime made without a rule, must open with EPERM: the cgroup is
/// enforced); every WSL file mounted read-only, nosuid and nodev at its
/// own path; the loader cache finding libcuda.so.1 and libdxcore.so in the
/// driver store and `/usr/lib/wsl/lib`, and the conf naming both; the real
/// libcuda answering from the driver store, libnvidia-ml loading, and
/// `/usr/bin/nvidia-smi`, linked to the store's, failing only for lack of
/// a kernel driver.
pub fn assert_wsl_injected(run: &Run, host: &SimHost, decoys: &[u32]) {
    run.assert_completed();
    let report = &run.report;
    let ctx = run.describe();
    let wsl = host.facts.wsl.as_ref().expect("a WSL2 host (Fixture::wsl)");
    let dxg = report
        .nodes
        .get("/dev/dxg")
        .unwrap_or_else(|| panic!("/dev/dxg is missing in the container:{ctx}"));
    assert_eq!(dxg.kind, 'c', "/dev/dxg is not a char device:{ctx}");
    assert_eq!(
        dxg.numbers,
        Some((wsl.dxg_major, wsl.dxg_minor)),
        "/dev/dxg numbers:{ctx}"
    );
    // Major 10 is the misc driver's, which answers a minor it does not
    // serve with ENODEV: the open got past the device cgroup (EPERM there).
    assert_eq!(
        dxg.open.as_deref(),
        Some("ENODEV"),
        "/dev/dxg: the device cgroup should allow it (ENODEV from the misc driver), got {:?}:{ctx}",
        dxg.open
    );
    // No /dev/nvidiaN of the hook's: every one there is a denied decoy.
    assert_decoys_denied(run, &[], decoys);
    assert_eq!(
        report.devnull.as_deref(),
        Some("ok"),
        "/dev/null must still open:{ctx}"
    );

    let root = &host.facts.driver_root;
    let inner = |host_path: &str| {
        host_path
            .strip_prefix(root.as_str())
            .unwrap_or(host_path)
            .to_string()
    };
    let store_lib = |name: &str| format!("{}/{name}", wsl.store);
    let mut expected: Vec<String> = host.facts.libraries.values().map(|p| inner(p)).collect();
    expected.extend(host.facts.binaries.values().map(|p| inner(p)));
    expected.extend(wsl.data.iter().map(|p| inner(p)));
    for path in &expected {
        let file = report
            .files
            .get(path)
            .unwrap_or_else(|| panic!("{path} is not in the container:{ctx}"));
        assert!(
            file.read_only && file.nosuid && file.nodev,
            "{path} must be mounted ro,nosuid,nodev: {file:?}:{ctx}"
        );
    }
    assert_eq!(
        report.links.get("/usr/bin/nvidia-smi"),
        Some(&store_lib("nvidia-smi")),
        "/usr/bin/nvidia-smi must link to the driver store's, as NVIDIA's wsl mode links it:{ctx}"
    );

    let cache = run
        .ld_cache
        .as_ref()
        .unwrap_or_else(|| panic!("the checker left no copy of the cache:{ctx}"));
    let entry = |soname: &str| {
        cache
            .iter()
            .find(|e| e.soname == soname && e.tag == "libc6,x86-64")
            .map(|e| e.path.clone())
    };
    assert_eq!(
        entry("libcuda.so.1").as_deref(),
        Some(store_lib("libcuda.so.1.1").as_str()),
        "the cache's libcuda.so.1: {cache:#?}{ctx}"
    );
    assert_eq!(
        entry("libdxcore.so").as_deref(),
        Some(format!("{}/libdxcore.so", wsl.lib_dir).as_str()),
        "the cache's libdxcore.so: {cache:#?}{ctx}"
    );
    assert!(
        entry("libc.so.6").is_some(),
        "the image's own libc.so.6 entry was lost: {cache:#?}{ctx}"
    );
    let conf: Vec<&String> = report.ldconf.values().flatten().collect();
    for dir in [&wsl.store, &wsl.lib_dir] {
        assert!(
            conf.iter().any(|line| line == &dir),
            "no ld.so.conf.d line names {dir}: {:?}:{ctx}",
            report.ldconf
        );
    }

    assert_libcuda_and_nvml_load(run, host, &store_lib("libcuda.so.1.1"));
    assert_smi_reached_the_driver_check(run);
}

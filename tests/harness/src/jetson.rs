//! A simulated Jetson (L4T) host, built by the tests themselves: NVIDIA's
//! CSV mount specs in `/etc/nvidia-container-runtime/host-files-for-container.d`
//! (a `devices.csv`, `drivers.csv` and `l4t.csv` as L4T r36 ships them,
//! and a `cuda.csv` that only `csv-mounts=all` or `--csv.file` reads), a
//! driver root holding what they list (real ELF libraries built with `cc`,
//! with their SONAMEs: a `libcuda.so.1.1` whose `cuDriverGetVersion`
//! answers CUDA 12.6, an `nvrm` library beside it; the links L4T makes;
//! CUDA's tree behind `/usr/local/cuda`; `/etc/nv_tegra_release`), and the
//! nodes made with `mknod`: `/dev/nvmap` on the misc major as on a real
//! Jetson, `/dev/nvhost-*` and `/dev/nvgpu/igpu0/*` on free dynamic
//! majors, so an allowed open answers ENXIO (ENODEV from the misc driver).
//! No `/proc/driver/nvidia`. One entry of each CSV file names a file the
//! host lacks, as real L4T files do across releases.
//!
//! x86-64 only: the libraries are built by the host's `cc`.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::runtime::injected::assert_decoys_denied;
use crate::runtime::oci_config::path_str;
use crate::runtime::run::Run;
use crate::simhost::{CacheFormat, Flavour, HostFacts, NvmlFacts, SimHost};

/// L4T's library directory (its `nvidia/` below the triplet's).
pub const LIB: &str = "/usr/lib/x86_64-linux-gnu/nvidia";
/// The CSV directory.
pub const CSV_DIR: &str = "/etc/nvidia-container-runtime/host-files-for-container.d";
/// The CUDA version the simulated libcuda answers.
pub const CUDA: u32 = 12060;
/// The L4T release, as `info` shows it.
pub const RELEASE: &str = "R36.4.3";

/// What a simulated Jetson has, for the tests to expect.
#[derive(Debug, Clone)]
pub struct JetsonFacts {
    /// Each listed node's path in the container, and its numbers.
    pub nodes: Vec<(String, u32, u32)>,
    /// A node the CSV files list that the host lacks.
    pub missing_node: String,
    /// The listed files, as paths in the container.
    pub files: Vec<String>,
    /// The links `sym` entries recreate: path, target.
    pub links: Vec<(String, String)>,
    /// The listed directory, at the path listed (the host's is a link).
    pub dir: String,
    /// A file inside it.
    pub dir_file: String,
    /// A file only `cuda.csv` lists, which the base files leave out.
    pub only_in_cuda_csv: String,
}

/// The shared Jetson host of this test binary, built the first time.
pub fn jetson() -> (SimHost, JetsonFacts) {
    static BUILT: OnceLock<(SimHost, JetsonFacts)> = OnceLock::new();
    BUILT
        .get_or_init(|| build(&crate::project::target_tmpdir().join("simhosts/jetson")))
        .clone()
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn link(path: &Path, target: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    symlink(target, path).unwrap();
}

/// A shared object of SONAME `soname` from C source `code`, at `path`.
fn cc(path: &Path, soname: &str, code: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let src = path.with_extension("c");
    fs::write(&src, code).unwrap();
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", &format!("-Wl,-soname,{soname}"), "-o"])
        .arg(path)
        .arg(&src)
        .status()
        .expect("run cc (the Jetson host's libraries are built with it)");
    assert!(status.success(), "cc failed for {}", path.display());
    fs::remove_file(src).unwrap();
}

/// Character-device majors nothing on this machine uses, from 500 down.
fn free_majors(n: usize) -> Vec<u32> {
    let devices = fs::read_to_string("/proc/devices").unwrap();
    let used: Vec<u32> = devices
        .lines()
        .take_while(|l| !l.starts_with("Block"))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    let free: Vec<u32> = (384..=500)
        .rev()
        .filter(|m| !used.contains(m))
        .take(n)
        .collect();
    assert_eq!(
        free.len(),
        n,
        "not enough free char majors in /proc/devices"
    );
    free
}

/// A misc minor `/proc/misc` does not list.
fn free_misc_minor() -> u32 {
    let misc = fs::read_to_string("/proc/misc").unwrap();
    let used: Vec<u32> = misc
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    (130..250)
        .find(|m| !used.contains(m))
        .expect("a free misc minor")
}

fn mknod(path: &Path, major: u32, minor: u32) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let status = Command::new("mknod")
        .args(["-m", "666"])
        .arg(path)
        .args(["c", &major.to_string(), &minor.to_string()])
        .status()
        .expect("run mknod");
    assert!(status.success(), "mknod {}", path.display());
}

/// Builds the host in `dir`, afresh.
pub fn build(dir: &Path) -> (SimHost, JetsonFacts) {
    crate::simhost::require_root();
    crate::runtime::cleanup::remove_tree_safely(dir);
    let root = dir.join("driver");
    let dev_root = dir.join("devroot");
    let at = |inner: &str| root.join(inner.trim_start_matches('/'));
    // The libraries, with L4T's links: nvidia/libcuda.so -> libcuda.so.1.1,
    // and the triplet directory's libcuda.so -> nvidia/libcuda.so.
    let libcuda = format!("{LIB}/libcuda.so.1.1");
    cc(
        &at(&libcuda),
        "libcuda.so.1",
        &format!("int cuDriverGetVersion(int *v) {{ *v = {CUDA}; return 0; }}\n"),
    );
    let nvrm = format!("{LIB}/libnvrm_gpu.so");
    cc(
        &at(&nvrm),
        "libnvrm_gpu.so",
        "int NvRmGpuLibOpen(void) { return 0; }\n",
    );
    link(&at(&format!("{LIB}/libcuda.so")), "libcuda.so.1.1");
    link(
        &at("/usr/lib/x86_64-linux-gnu/libcuda.so"),
        "nvidia/libcuda.so",
    );
    let icd = format!("{LIB}/nvidia_icd.json");
    write(&at(&icd), "{\"file_format_version\": \"1.0.0\"}\n");
    // CUDA's tree, behind the link L4T's cuda package makes.
    write(
        &at("/usr/local/cuda-12.6/bin/cuda-stub"),
        "#!/bin/sh\necho cuda 12.6\n",
    );
    // The container sees it at the path listed, as NVIDIA mounts it.
    let dir_file = "/usr/local/cuda/bin/cuda-stub".to_string();
    link(&at("/usr/local/cuda"), "cuda-12.6");
    let only_in_cuda_csv = format!("{LIB}/libcudnn_stub.so");
    cc(
        &at(&only_in_cuda_csv),
        "libcudnn_stub.so",
        "int cudnnStub(void) { return 0; }\n",
    );
    write(
        &at("/etc/nv_tegra_release"),
        "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: x86_64, DATE: Wed Jan  8 01:49:37 UTC 2025\n",
    );
    // The nodes.
    let majors = free_majors(2);
    let misc_minor = free_misc_minor();
    let nodes = vec![
        ("/dev/nvmap".to_string(), 10, misc_minor),
        ("/dev/nvhost-ctrl-gpu".to_string(), majors[0], 0),
        ("/dev/nvhost-gpu".to_string(), majors[0], 1),
        ("/dev/nvgpu/igpu0/ctrl".to_string(), majors[1], 0),
    ];
    for (path, major, minor) in &nodes {
        mknod(&dev_root.join(path.trim_start_matches('/')), *major, *minor);
    }
    let missing_node = "/dev/nvhost-prof-gpu".to_string();
    // The CSV files, as L4T ships them: `TYPE, PATH`.
    let mut devices: String = nodes
        .iter()
        .map(|(p, _, _)| format!("dev, {p}\n"))
        .collect();
    devices.push_str(&format!("dev, {missing_node}\n"));
    write(&at(&format!("{CSV_DIR}/devices.csv")), &devices);
    write(
        &at(&format!("{CSV_DIR}/drivers.csv")),
        &format!(
            "lib, {libcuda}\nlib, {nvrm}\nlib, {icd}\nsym, {LIB}/libcuda.so\n\
             sym, /usr/lib/x86_64-linux-gnu/libcuda.so\nlib, {LIB}/libnvidia-absent.so.1\n"
        ),
    );
    write(
        &at(&format!("{CSV_DIR}/l4t.csv")),
        "dir, /usr/local/cuda\ndir, /usr/share/absent\n",
    );
    write(
        &at(&format!("{CSV_DIR}/cuda.csv")),
        &format!("lib, {only_in_cuda_csv}\n"),
    );
    for sub in ["proc", "sys"] {
        fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let config = dir.join("config.toml");
    write(
        &config,
        &format!(
            "[driver]\nroot = \"{}\"\ndev-root = \"{}\"\nproc-root = \"{}\"\nsys-root = \"{}\"\nsnapshot-dir = \"\"\n",
            path_str(&root),
            path_str(&dev_root),
            path_str(&dir.join("proc")),
            path_str(&dir.join("sys")),
        ),
    );
    let host_path = |inner: &str| path_str(&at(inner));
    let facts = HostFacts {
        flavour: Flavour::Synthetic,
        driver_version: RELEASE.into(),
        cuda_version: CUDA,
        stale_driver_version: String::new(),
        cache_format: CacheFormat::New,
        uvm_major: 0,
        caps_major: 0,
        driver_root: path_str(&root),
        dev_root: path_str(&dev_root),
        proc_root: path_str(&dir.join("proc")),
        config: path_str(&config),
        gpus: Vec::new(),
        mig: Vec::new(),
        mig_minors: String::new(),
        nvml: NvmlFacts {
            library: String::new(),
            mock: false,
            conf: None,
        },
        libraries: [
            ("libcuda.so.1".to_string(), host_path(&libcuda)),
            ("libnvrm_gpu.so".to_string(), host_path(&nvrm)),
        ]
        .into_iter()
        .collect(),
        libraries32: Default::default(),
        stale_libraries: Vec::new(),
        binaries: Default::default(),
        alternatives: Default::default(),
        firmware: Vec::new(),
        sockets: Vec::new(),
        mps_pipe_dir: String::new(),
        ld_so_cache: String::new(),
        sys_root: path_str(&dir.join("sys")),
        extras: None,
        wsl: None,
    };
    let jetson = JetsonFacts {
        nodes,
        missing_node,
        files: vec![libcuda, nvrm, icd, "/etc/nv_tegra_release".into()],
        links: vec![
            (format!("{LIB}/libcuda.so.1"), "libcuda.so.1.1".into()),
            (format!("{LIB}/libcuda.so"), "libcuda.so.1".into()),
            (
                "/usr/lib/x86_64-linux-gnu/libcuda.so".into(),
                "nvidia/libcuda.so".into(),
            ),
        ],
        dir: "/usr/local/cuda".into(),
        dir_file,
        only_in_cuda_csv,
    };
    let host = SimHost {
        dir: dir.to_path_buf(),
        config,
        facts,
    };
    (host, jetson)
}

/// Every listed node of the Jetson, allowed; every listed file, link and
/// directory at its path, read-only; libcuda found through the loader
/// cache, answering; the runtime's `/dev/nvidiaN` `decoys` denied (none
/// under Podman).
pub fn assert_jetson_injected(run: &Run, facts: &JetsonFacts, decoys: &[u32]) {
    run.assert_completed();
    let report = &run.report;
    let ctx = run.describe();
    for (path, major, minor) in &facts.nodes {
        let node = report
            .nodes
            .get(path)
            .unwrap_or_else(|| panic!("{path} is missing in the container:{ctx}"));
        assert_eq!(node.kind, 'c', "{path} is not a char device:{ctx}");
        assert_eq!(node.numbers, Some((*major, *minor)), "{path} numbers:{ctx}");
        // The misc driver answers a minor it does not serve with ENODEV;
        // no driver has the dynamic majors: ENXIO. Either is past the cgroup.
        let allowed = if *major == 10 { "ENODEV" } else { "ENXIO" };
        assert_eq!(
            node.open.as_deref(),
            Some(allowed),
            "{path}: the device cgroup should allow it:{ctx}"
        );
    }
    assert!(
        !report.nodes.contains_key(&facts.missing_node),
        "{} is listed but not on the host: skipped:{ctx}",
        facts.missing_node
    );
    if run.runtime.is_podman() {
        assert!(report.gpu_nodes().is_empty(), "no /dev/nvidiaN:{ctx}");
    } else {
        assert_decoys_denied(run, &[], decoys);
    }
    assert_eq!(report.devnull.as_deref(), Some("ok"), "/dev/null:{ctx}");
    for path in facts.files.iter().chain([&facts.dir_file]) {
        let file = report
            .files
            .get(path)
            .unwrap_or_else(|| panic!("{path} is not in the container:{ctx}"));
        assert!(
            file.read_only && file.nosuid && file.nodev,
            "{path} must be mounted ro,nosuid,nodev: {file:?}:{ctx}"
        );
    }
    for (link, target) in &facts.links {
        assert_eq!(
            report.links.get(link),
            Some(target),
            "{link} -> {target}:{ctx}"
        );
    }
    assert!(
        !report.files.contains_key(&facts.only_in_cuda_csv),
        "cuda.csv is not a base file: {} must not come:{ctx}",
        facts.only_in_cuda_csv
    );
    let cuda = report.cuda.as_ref().expect("a cuda line");
    assert!(cuda.loaded, "dlopen(libcuda.so.1) failed: {cuda:?}:{ctx}");
    assert!(
        cuda.path.starts_with(LIB),
        "libcuda loaded from {} instead of {LIB}:{ctx}",
        cuda.path
    );
    assert_eq!(
        cuda.field("version"),
        Some(CUDA.to_string().as_str()),
        "{ctx}"
    );
    assert_eq!(
        report.ldcache.get("libcuda.so.1").map(String::as_str),
        Some("yes"),
        "the loader cache names libcuda.so.1:{ctx}"
    );
}

/// The host path of `inner` in the Jetson's driver root.
pub fn host_path(host: &SimHost, inner: &str) -> PathBuf {
    Path::new(&host.facts.driver_root).join(inner.trim_start_matches('/'))
}

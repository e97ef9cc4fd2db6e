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
//! Built for x86-64 ([`jetson`]: its libraries built by the host's `cc`)
//! or for arm64 ([`jetson_arm64`]: AArch64 shared objects assembled and
//! linked by binutils-aarch64-linux-gnu, for the arm64 binary under
//! qemu-user; its `drivers.csv` also lists an x86-64 library, which an
//! arm64 host must refuse).

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::runtime::injected::assert_decoys_denied;
use crate::runtime::oci_config::path_str;
use crate::runtime::run::Run;
use crate::simhost::{CacheFormat, Flavour, HostFacts, NvmlFacts, SimHost};

/// L4T's library directory (its `nvidia/` below the triplet's) on the
/// x86-64 host.
pub const LIB: &str = "/usr/lib/x86_64-linux-gnu/nvidia";
/// The CSV directory.
pub const CSV_DIR: &str = "/etc/nvidia-container-runtime/host-files-for-container.d";
/// The CUDA version the simulated libcuda answers.
pub const CUDA: u32 = 12060;
/// The L4T release, as `info` shows it.
pub const RELEASE: &str = "R36.4.3";

/// The instruction set a simulated Jetson's libraries are built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// This machine's: built with `cc`.
    X86_64,
    /// A real Jetson's: assembled with `aarch64-linux-gnu-as`.
    Aarch64,
}

impl Isa {
    /// The Debian multiarch triplet of its library directory.
    pub fn triplet(self) -> &'static str {
        match self {
            Isa::X86_64 => "x86_64-linux-gnu",
            Isa::Aarch64 => "aarch64-linux-gnu",
        }
    }
}

/// What a simulated Jetson has, for the tests to expect.
#[derive(Debug, Clone)]
pub struct JetsonFacts {
    /// L4T's library directory on this host.
    pub lib_dir: String,
    /// An x86-64 library `drivers.csv` lists on the arm64 host (a path in
    /// the container), which must be skipped; `None` on the x86-64 host.
    pub foreign_library: Option<String>,
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
        .get_or_init(|| {
            build(
                &crate::project::target_tmpdir().join("simhosts/jetson"),
                Isa::X86_64,
            )
        })
        .clone()
}

/// The shared arm64 Jetson host of this test binary, built the first time.
pub fn jetson_arm64() -> (SimHost, JetsonFacts) {
    static BUILT: OnceLock<(SimHost, JetsonFacts)> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            build(
                &crate::project::target_tmpdir().join("simhosts/jetson-arm64"),
                Isa::Aarch64,
            )
        })
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

/// An AArch64 shared object of SONAME `soname` at `path`, defining the
/// function `symbol`, which returns 0 (and, given `answer`, first stores it
/// through its pointer argument, as `cuDriverGetVersion` does); assembled
/// and linked by binutils-aarch64-linux-gnu, needing no C library.
fn aarch64_object(path: &Path, soname: &str, symbol: &str, answer: Option<u32>) {
    let tool = |name: &str| {
        crate::runtime::runtimes::find_tool(name).unwrap_or_else(|| {
            panic!(
                "`{name}` is not on PATH: install binutils-aarch64-linux-gnu \
                 (integration/install-deps); the arm64 Jetson's libraries are built with it"
            )
        })
    };
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let store = answer
        .map(|v| format!("    mov w1, #{v}\n    str w1, [x0]\n"))
        .unwrap_or_default();
    let src = path.with_extension("s");
    let object = path.with_extension("o");
    fs::write(
        &src,
        format!(
            ".text\n.globl {symbol}\n.type {symbol}, %function\n{symbol}:\n{store}    mov w0, #0\n    ret\n"
        ),
    )
    .unwrap();
    let run = |cmd: &mut Command| {
        let status = cmd.status().expect("run binutils-aarch64-linux-gnu");
        assert!(status.success(), "{cmd:?} failed for {}", path.display());
    };
    run(Command::new(tool("aarch64-linux-gnu-as"))
        .arg("-o")
        .arg(&object)
        .arg(&src));
    run(Command::new(tool("aarch64-linux-gnu-ld"))
        .args(["-shared", "-soname", soname, "-o"])
        .arg(path)
        .arg(&object));
    fs::remove_file(src).unwrap();
    fs::remove_file(object).unwrap();
}

/// A shared object for `isa` of SONAME `soname` at `path`, defining
/// `symbol` (returning 0, storing `answer` first when given).
fn shared_object(isa: Isa, path: &Path, soname: &str, symbol: &str, answer: Option<u32>) {
    match isa {
        Isa::X86_64 => {
            let body = answer
                .map(|v| format!("int {symbol}(int *v) {{ *v = {v}; return 0; }}\n"))
                .unwrap_or_else(|| format!("int {symbol}(void) {{ return 0; }}\n"));
            cc(path, soname, &body)
        }
        Isa::Aarch64 => aarch64_object(path, soname, symbol, answer),
    }
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

/// Builds the host for `isa` in `dir`, afresh.
pub fn build(dir: &Path, isa: Isa) -> (SimHost, JetsonFacts) {
    crate::simhost::require_root();
    crate::runtime::cleanup::remove_tree_safely(dir);
    let root = dir.join("driver");
    let dev_root = dir.join("devroot");
    let at = |inner: &str| root.join(inner.trim_start_matches('/'));
    let triplet = isa.triplet();
    let lib_dir = format!("/usr/lib/{triplet}/nvidia");
    let lib = lib_dir.as_str();
    // The libraries, with L4T's links: nvidia/libcuda.so -> libcuda.so.1.1,
    // and the triplet directory's libcuda.so -> nvidia/libcuda.so.
    let libcuda = format!("{lib}/libcuda.so.1.1");
    shared_object(
        isa,
        &at(&libcuda),
        "libcuda.so.1",
        "cuDriverGetVersion",
        Some(CUDA),
    );
    let nvrm = format!("{lib}/libnvrm_gpu.so");
    shared_object(isa, &at(&nvrm), "libnvrm_gpu.so", "NvRmGpuLibOpen", None);
    link(&at(&format!("{lib}/libcuda.so")), "libcuda.so.1.1");
    link(
        &at(&format!("/usr/lib/{triplet}/libcuda.so")),
        "nvidia/libcuda.so",
    );
    // On the arm64 host, an x86-64 library in L4T's directory, listed.
    let foreign_library = (isa == Isa::Aarch64).then(|| {
        let path = format!("{lib}/libnvidia-amd64.so.1");
        shared_object(
            Isa::X86_64,
            &at(&path),
            "libnvidia-amd64.so.1",
            "amd64",
            None,
        );
        path
    });
    let icd = format!("{lib}/nvidia_icd.json");
    write(&at(&icd), "{\"file_format_version\": \"1.0.0\"}\n");
    // CUDA's tree, behind the link L4T's cuda package makes.
    write(
        &at("/usr/local/cuda-12.6/bin/cuda-stub"),
        "#!/bin/sh\necho cuda 12.6\n",
    );
    // The container sees it at the path listed, as NVIDIA mounts it.
    let dir_file = "/usr/local/cuda/bin/cuda-stub".to_string();
    link(&at("/usr/local/cuda"), "cuda-12.6");
    let only_in_cuda_csv = format!("{lib}/libcudnn_stub.so");
    shared_object(
        isa,
        &at(&only_in_cuda_csv),
        "libcudnn_stub.so",
        "cudnnStub",
        None,
    );
    let eabi = triplet.split('-').next().unwrap_or(triplet);
    write(
        &at("/etc/nv_tegra_release"),
        &format!("# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: {eabi}, DATE: Wed Jan  8 01:49:37 UTC 2025\n"),
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
    let mut drivers = format!(
        "lib, {libcuda}\nlib, {nvrm}\nlib, {icd}\nsym, {lib}/libcuda.so\n\
         sym, /usr/lib/{triplet}/libcuda.so\nlib, {lib}/libnvidia-absent.so.1\n"
    );
    if let Some(foreign) = &foreign_library {
        drivers.push_str(&format!("lib, {foreign}\n"));
    }
    write(&at(&format!("{CSV_DIR}/drivers.csv")), &drivers);
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
        lib_dir: lib_dir.clone(),
        foreign_library,
        nodes,
        missing_node,
        files: vec![libcuda, nvrm, icd, "/etc/nv_tegra_release".into()],
        links: vec![
            (format!("{lib}/libcuda.so.1"), "libcuda.so.1.1".into()),
            (format!("{lib}/libcuda.so"), "libcuda.so.1".into()),
            (
                format!("/usr/lib/{triplet}/libcuda.so"),
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
        cuda.path.starts_with(&facts.lib_dir),
        "libcuda loaded from {} instead of {}:{ctx}",
        cuda.path,
        facts.lib_dir
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

/// The mounts' container paths of a CDI spec.
pub fn spec_mounts(spec: &serde_json::Value) -> Vec<String> {
    spec["containerEdits"]["mounts"]
        .as_array()
        .expect("the spec's mounts")
        .iter()
        .map(|m| m["containerPath"].as_str().unwrap().to_string())
        .collect()
}

/// A CSV spec of the Jetson `facts` describes: NVIDIA's device names `0`
/// and `all`, every listed node, file and the directory, none of
/// `cuda.csv`'s files; on the arm64 host, no x86-64 path and not the
/// x86-64 library its `drivers.csv` lists.
pub fn assert_csv_spec(spec: &serde_json::Value, facts: &JetsonFacts) {
    let names: Vec<&str> = spec["devices"]
        .as_array()
        .expect("the spec's devices")
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["0", "all"], "NVIDIA's csv names:{spec:#}");
    let nodes: Vec<&str> = spec["devices"][0]["containerEdits"]["deviceNodes"]
        .as_array()
        .expect("the device's nodes")
        .iter()
        .map(|n| n["path"].as_str().unwrap())
        .collect();
    let listed: Vec<&str> = facts.nodes.iter().map(|(p, _, _)| p.as_str()).collect();
    assert_eq!(nodes, listed, "{spec:#}");
    let mounts = spec_mounts(spec);
    for path in facts.files.iter().chain([&facts.dir]) {
        assert!(mounts.contains(path), "{path}: {mounts:?}");
    }
    assert!(!mounts.contains(&facts.only_in_cuda_csv), "{mounts:?}");
    if let Some(foreign) = &facts.foreign_library {
        assert!(!mounts.contains(foreign), "{mounts:?}");
        let text = spec.to_string();
        assert!(!text.contains("x86_64"), "{spec:#}");
        assert!(!text.contains("libnvidia-amd64"), "{spec:#}");
    }
}

/// `nvidia-ctk cdi generate --mode=csv` through `ctk` (which names the
/// roots and asks for JSON) on the Jetson whose driver root is `root`: the
/// base files' spec ([`assert_csv_spec`]), then `--csv.file` naming
/// `devices.csv` and `cuda.csv` as host paths: `cuda.csv`'s file comes,
/// `drivers.csv`'s do not. Returns that second spec.
pub fn assert_ctk_reads_the_csv_files_named(
    ctk: &dyn Fn(&[&str]) -> serde_json::Value,
    root: &str,
    facts: &JetsonFacts,
) -> serde_json::Value {
    assert_csv_spec(&ctk(&["--mode=csv"]), facts);
    let cuda_csv = format!("{root}{CSV_DIR}/cuda.csv");
    let devices_csv = format!("{root}{CSV_DIR}/devices.csv");
    let named = ctk(&[
        "--mode=csv",
        &format!("--csv.file={devices_csv}"),
        &format!("--csv.file={cuda_csv}"),
    ]);
    let mounts = spec_mounts(&named);
    assert!(mounts.contains(&facts.only_in_cuda_csv), "{named:#}");
    assert!(
        !mounts.contains(&facts.files[0]),
        "no drivers.csv: {named:#}"
    );
    named
}

/// `list`'s output names every listed node and library of the Jetson
/// (and, on the arm64 host, not the x86-64 library).
pub fn assert_lists_the_jetson(list: &str, host: &SimHost, facts: &JetsonFacts) {
    for (path, _, _) in &facts.nodes {
        let node = format!("{}{path}", host.facts.dev_root);
        assert!(
            list.lines().any(|l| l == node),
            "{node} not listed:\n{list}"
        );
    }
    for lib in host.facts.libraries.values() {
        assert!(list.lines().any(|l| l == lib), "{lib} not listed:\n{list}");
    }
    if let Some(foreign) = &facts.foreign_library {
        assert!(
            !list.contains(foreign.as_str()),
            "{foreign} listed:\n{list}"
        );
    }
}

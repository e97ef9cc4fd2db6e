//! The binary answering as `nvidia-container-cli` (a link of that name):
//! `info` and `list` on simulated hosts, compared field by field with the
//! formats NVIDIA's CLI prints (libnvidia-container `src/cli/info.c`,
//! `list.c`); and `configure` run against real runc containers exactly as
//! its callers run it: NVIDIA's hook in legacy mode (a prestart hook that
//! reads the pid from the OCI state and execs the CLI) and containerd 1.6's
//! `ctr run --gpus` (all six capability flags, empty stdin, the bundle as
//! working directory). Inside the container `/checker` shows the nodes
//! (ENXIO: allowed, no driver; EPERM: denied), libcuda answers 12020 and
//! nvidia-smi reaches its "no driver" failure.
//!
//! NVIDIA's CLI has no config option, so the tests put the simulated host's
//! config at the default path with an overlay on `/etc` in a private mount
//! namespace (harness::nvidia_cli); the host's `/etc` is untouched.
//!
//! Run as root: `cargo test --features _test_as_root --test nvidia_cli`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::Value;

use harness::mounts::{assert_mounts_unchanged, host_mounts};
use harness::nvidia_cli::{cli_link, etc_layer, nvidia_cli, nvidia_cli_stdout, over_etc};
use harness::refusal::failure;
use harness::runtime::bundle::{template_rootfs, write_hook_config, BundleExtras, Hook, Scenario};
use harness::runtime::expected::{node_specs, LIB_DIR};
use harness::runtime::host_state::{listing_diff, tree_listing};
use harness::runtime::injected::{assert_every_gpu_injected, assert_injected, Expected};
use harness::runtime::oci_config::{path_str, NVIDIA_MAJOR};
use harness::runtime::prepared::{prepare, Prepared};
use harness::runtime::process::run_bounded;
use harness::runtime::run::{serial, Run, Serial, RUN_LIMIT};
use harness::runtime::runtimes::Runtime;
use harness::simhost::{Fixture, GpuFacts, SimHost};

fn real_host() -> SimHost {
    SimHost::shared(Fixture::real(4))
}

// ------------------------------------------------------------------ info

/// NVIDIA's labels, in its order (info.c).
const GPU_LABELS: [&str; 7] = [
    "Device Index",
    "Device Minor",
    "Model",
    "Brand",
    "GPU UUID",
    "Bus Location",
    "Architecture",
];

/// The CUDA version as NVIDIA prints NVML's number (driver.c: `%u.%u` of
/// `v / 1000` and `v % 100 / 10`).
fn cuda_text(host: &SimHost) -> String {
    let v = host.facts.cuda_version;
    format!("{}.{}", v / 1000, v % 100 / 10)
}

/// A bus id as NVIDIA prints it (driver.c: `%08x:%02x:%02x.0`).
fn nvidia_bus(bus: &str) -> String {
    let (rest, _) = bus.rsplit_once('.').expect("a function");
    let parts: Vec<u32> = rest
        .split(':')
        .map(|p| u32::from_str_radix(p, 16).expect("hex"))
        .collect();
    format!("{:08x}:{:02x}:{:02x}.0", parts[0], parts[1], parts[2])
}

/// Each GPU's seven values in NVIDIA's order, from `host.json`, with the
/// brand and architecture `facts` gives for its index.
fn expected_rows(host: &SimHost, facts: impl Fn(usize) -> (String, String)) -> Vec<Vec<String>> {
    host.facts
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let (brand, arch) = facts(i);
            vec![
                g.index.to_string(),
                g.minor.to_string(),
                g.model.clone(),
                brand,
                g.uuid.clone(),
                nvidia_bus(&g.bus),
                arch,
            ]
        })
        .collect()
}

/// Checks `info`'s text against NVIDIA's layout: `%-15s %s` lines, the two
/// driver lines, then a blank line and seven labelled lines per GPU.
fn assert_info_text(out: &str, host: &SimHost, rows: &[Vec<String>]) {
    let mut expected = vec![
        (
            "NVRM version:".to_string(),
            host.facts.driver_version.clone(),
        ),
        ("CUDA version:".to_string(), cuda_text(host)),
    ];
    let lines: Vec<&str> = out.lines().collect();
    for row in rows {
        expected.push((String::new(), String::new()));
        for (label, value) in GPU_LABELS.iter().zip(row) {
            expected.push((format!("{label}:"), value.clone()));
        }
    }
    assert_eq!(lines.len(), expected.len(), "{out}");
    for (line, (label, value)) in lines.iter().zip(&expected) {
        if label.is_empty() {
            assert_eq!(*line, "", "a blank line before each GPU:\n{out}");
            continue;
        }
        // The label padded to 15 columns, one space, the value.
        assert_eq!(&line[..15].trim_end(), label, "{line:?}\n{out}");
        assert_eq!(&line[15..16], " ", "{line:?}");
        assert_eq!(&line[16..], value, "{label} in {line:?}\n{out}");
    }
}

/// Checks `info --csv` against NVIDIA's two tables.
fn assert_info_csv(out: &str, host: &SimHost, rows: &[Vec<String>]) {
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "NVRM version,CUDA version", "{out}");
    assert_eq!(
        lines[1],
        format!("{},{}", host.facts.driver_version, cuda_text(host))
    );
    assert_eq!(lines[2], "");
    assert_eq!(lines[3], GPU_LABELS.join(","));
    let got: Vec<Vec<String>> = lines[4..]
        .iter()
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    assert_eq!(got, rows, "{out}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn info_on_the_real_535_host_is_nvidias_layout_with_unknown_nvml_facts() {
    let host = real_host();
    // NVIDIA's real libnvidia-ml finds no kernel driver here: NVML's two
    // facts are unknown, everything else is the driver's.
    let rows = expected_rows(&host, |_| ("Unknown".into(), "Unknown".into()));
    let out = nvidia_cli(&host.config, &["info"]);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("brand and architecture shown as Unknown"),
        "the missing NVML is said on stderr: {stderr}"
    );
    assert_info_text(&String::from_utf8(out.stdout).unwrap(), &host, &rows);
    assert_info_csv(
        &nvidia_cli_stdout(&host.config, &["info", "--csv"]),
        &host,
        &rows,
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn info_on_a_host_whose_nvml_answers_names_brand_and_architecture_as_nvidia_does() {
    let host = SimHost::fresh("nvml-brands", Fixture::synthetic(2).mig());
    // GPU 1 a Tesla-branded Ampere board; GPU 0 stays an H100, whose NVML
    // brand (NVIDIA) NVIDIA's 1.17 CLI prints as `Nvidia` (seen beside it
    // on the same simulated host).
    let conf = find_file(&host.path("driver"), "nvml-mock.conf");
    let text = fs::read_to_string(&conf).unwrap();
    let edited: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with("gpu 1 ") {
                l.replace("brand=nvidia", "brand=tesla")
                    .replace("arch=hopper", "arch=ampere")
                    .replace("cc=9.0", "cc=8.0")
            } else {
                l.to_string()
            }
        })
        .collect();
    fs::write(&conf, edited.join("\n") + "\n").unwrap();

    let rows = expected_rows(&host, |i| match i {
        1 => ("Tesla".into(), "8.0".into()),
        _ => ("Nvidia".into(), "9.0".into()),
    });
    let out = nvidia_cli(&host.config, &["info"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "nothing to warn about: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_info_text(&String::from_utf8(out.stdout).unwrap(), &host, &rows);
    assert_info_csv(
        &nvidia_cli_stdout(&host.config, &["info", "--csv"]),
        &host,
        &rows,
    );
}

/// The file named `name` under `dir`.
fn find_file(dir: &Path, name: &str) -> PathBuf {
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let kind = entry.file_type().unwrap();
        if kind.is_file() && entry.file_name() == name {
            return path;
        }
        if kind.is_dir() {
            let found = find_file(&path, name);
            if !found.as_os_str().is_empty() {
                return found;
            }
        }
    }
    PathBuf::new()
}

// ------------------------------------------------------------------ list

/// NVIDIA's `list` sections, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Section {
    Devices,
    Binaries,
    Libraries,
    Libraries32,
    Ipcs,
    Firmwares,
}

/// The libraries NVIDIA's CLI lists, by name up to `.so` (libnvidia-
/// container `src/nvc_info.c`: utility, compute, video, graphics with
/// GLVND, ngx): the host has others that it never lists.
const NVIDIA_LIBRARIES: [&str; 34] = [
    "libnvidia-ml",
    "libnvidia-cfg",
    "libnvidia-nscq",
    "libcuda",
    "libcudadebugger",
    "libnvidia-opencl",
    "libnvidia-gpucomp",
    "libnvidia-ptxjitcompiler",
    "libnvidia-fatbinaryloader",
    "libnvidia-allocator",
    "libnvidia-compiler",
    "libnvidia-pkcs11",
    "libnvidia-pkcs11-openssl3",
    "libnvidia-nvvm",
    "libnvidia-tileiras",
    "libvdpau_nvidia",
    "libnvidia-encode",
    "libnvidia-opticalflow",
    "libnvcuvid",
    "libnvidia-eglcore",
    "libnvidia-glcore",
    "libnvidia-tls",
    "libnvidia-glsi",
    "libnvidia-fbc",
    "libnvidia-ifr",
    "libnvidia-rtcore",
    "libnvoptix",
    "libGLX_nvidia",
    "libEGL_nvidia",
    "libGLESv2_nvidia",
    "libGLESv1_CM_nvidia",
    "libnvidia-glvkspirv",
    "libnvidia-cbl",
    "libnvidia-ngx",
];

/// Whether NVIDIA's CLI lists the library at `path`.
fn nvidia_lists(path: &str) -> bool {
    let file = Path::new(path).file_name().unwrap().to_str().unwrap();
    NVIDIA_LIBRARIES.contains(&file.split(".so").next().unwrap())
}

/// The driver's libraries beyond NVIDIA's lists that ours lists too: every
/// `lib*.so.<driver version>` beside the running libcuda whose family
/// NVIDIA's lists lack (discovery takes what the driver ships).
fn beyond_nvidias_lists(host: &SimHost) -> BTreeSet<String> {
    let facts = &host.facts;
    let Some(libcuda) = facts
        .libraries
        .values()
        .find(|p| p.contains("/libcuda.so."))
    else {
        return BTreeSet::new();
    };
    let dir = Path::new(libcuda).parent().unwrap();
    let suffix = format!(".so.{}", facts.driver_version);
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .filter(|p| {
            let name = Path::new(p).file_name().unwrap().to_str().unwrap();
            name.starts_with("lib") && name.ends_with(&suffix) && !nvidia_lists(p)
        })
        .collect()
}

/// What `host.json` says each section holds on `host`, as NVIDIA lists it,
/// and the driver's libraries beyond NVIDIA's lists.
fn sections(host: &SimHost) -> Vec<(Section, BTreeSet<String>)> {
    let facts = &host.facts;
    let values = |paths: &BTreeMap<String, String>| -> BTreeSet<String> {
        paths.values().cloned().collect()
    };
    let mut ipcs: BTreeSet<String> = facts.sockets.iter().cloned().collect();
    ipcs.insert(facts.mps_pipe_dir.clone());
    vec![
        (Section::Devices, device_paths(host, &host.facts.gpus)),
        (Section::Binaries, values(&facts.binaries)),
        (
            Section::Libraries,
            values(&facts.libraries)
                .into_iter()
                .filter(|p| nvidia_lists(p))
                .chain(beyond_nvidias_lists(host))
                .collect(),
        ),
        (
            Section::Libraries32,
            values(&facts.libraries32)
                .into_iter()
                .filter(|p| nvidia_lists(p))
                .collect(),
        ),
        (Section::Ipcs, ipcs),
        (Section::Firmwares, facts.firmware.iter().cloned().collect()),
    ]
}

/// The host paths of the driver's control nodes and of `selected`'s nodes.
fn device_paths(host: &SimHost, selected: &[GpuFacts]) -> BTreeSet<String> {
    let dev = format!("{}/dev", host.facts.dev_root);
    let mut paths: BTreeSet<String> = [
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-uvm-tools",
        "nvidia-modeset",
    ]
    .iter()
    .map(|n| format!("{dev}/{n}"))
    .collect();
    paths.extend(selected.iter().map(|g| format!("{dev}/nvidia{}", g.minor)));
    paths
}

/// Checks that `out` lists exactly the `wanted` sections of `host`, each
/// whole, in NVIDIA's order, one absolute path a line.
fn assert_listing(out: &str, host: &SimHost, wanted: &[(Section, BTreeSet<String>)]) {
    let all = sections(host);
    let section_of = |line: &str| {
        wanted
            .iter()
            .chain(&all)
            .find(|(_, paths)| paths.contains(line))
            .map(|(section, _)| *section)
            .unwrap_or_else(|| panic!("{line} is in no section of the host:\n{out}"))
    };
    let lines: Vec<&str> = out.lines().collect();
    let order: Vec<Section> = lines.iter().map(|l| section_of(l)).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted, "sections out of NVIDIA's order:\n{out}");
    for (section, paths) in wanted {
        let listed: BTreeSet<String> = lines
            .iter()
            .filter(|l| section_of(l) == *section)
            .map(|l| l.to_string())
            .collect();
        assert_eq!(&listed, paths, "{section:?}:\n{out}");
    }
    let named: BTreeSet<Section> = wanted.iter().map(|(s, _)| *s).collect();
    assert!(
        order.iter().all(|s| named.contains(s)),
        "a section not asked for:\n{out}"
    );
    for line in lines {
        assert!(Path::new(line).is_absolute(), "{line}");
    }
}

fn only(host: &SimHost, wanted: &[Section]) -> Vec<(Section, BTreeSet<String>)> {
    sections(host)
        .into_iter()
        .filter(|(s, _)| wanted.contains(s))
        .collect()
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn list_without_options_is_every_component_in_nvidias_order() {
    let host = real_host();
    let out = nvidia_cli_stdout(&host.config, &["list"]);
    assert_listing(&out, &host, &sections(&host));
    // Control nodes first, then the GPUs in index order.
    let dev = format!("{}/dev", host.facts.dev_root);
    let lines: Vec<&str> = out.lines().collect();
    let mut nodes = vec![
        format!("{dev}/nvidiactl"),
        format!("{dev}/nvidia-uvm"),
        format!("{dev}/nvidia-uvm-tools"),
        format!("{dev}/nvidia-modeset"),
    ];
    let mut in_order = host.facts.gpus.clone();
    in_order.sort_by_key(|g| g.index);
    nodes.extend(in_order.iter().map(|g| format!("{dev}/nvidia{}", g.minor)));
    assert_eq!(lines[..nodes.len()], nodes[..], "{out}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn list_options_name_the_sections_and_devices_listed() {
    let host = real_host();
    let all = host.facts.gpus.clone();
    let gpu = &all[2];
    let uuid = gpu.uuid.clone();
    let out = nvidia_cli_stdout(&host.config, &["list", &format!("--device={uuid}")]);
    assert_listing(
        &out,
        &host,
        &[(
            Section::Devices,
            device_paths(&host, std::slice::from_ref(gpu)),
        )],
    );
    let out = nvidia_cli_stdout(&host.config, &["list", "--libraries"]);
    assert_listing(&out, &host, &only(&host, &[Section::Libraries]));
    let out = nvidia_cli_stdout(&host.config, &["list", "-l", "--compat32"]);
    assert_listing(
        &out,
        &host,
        &only(&host, &[Section::Libraries, Section::Libraries32]),
    );
    let out = nvidia_cli_stdout(&host.config, &["list", "-b", "--ipcs", "--firmwares"]);
    assert_listing(
        &out,
        &host,
        &only(
            &host,
            &[Section::Binaries, Section::Ipcs, Section::Firmwares],
        ),
    );
    let out = nvidia_cli_stdout(
        &host.config,
        &["list", "--device", "0,1", "--device=3", "-b"],
    );
    let selected = [all[0].clone(), all[1].clone(), all[3].clone()];
    let mut wanted = only(&host, &[Section::Binaries]);
    wanted.insert(0, (Section::Devices, device_paths(&host, &selected)));
    assert_listing(&out, &host, &wanted);
}

/// Filters alone list what they select, never nothing: `--compute`
/// alone gives the control nodes and compute's files; our CDI kind's
/// names are the devices they name.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn list_with_only_filters_lists_what_they_select() {
    let host = real_host();
    let all = host.facts.gpus.clone();
    let dev = format!("{}/dev", host.facts.dev_root);
    let out = nvidia_cli_stdout(&host.config, &["list", "--compute"]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines.contains(&format!("{dev}/nvidiactl").as_str()),
        "{out}"
    );
    assert!(
        lines.iter().any(|l| l.ends_with("/libcuda.so.535.261.03")),
        "{out}"
    );
    assert!(
        !lines.iter().any(|l| l.ends_with("/nvidia-smi")),
        "nvidia-smi is utility's, not compute's:\n{out}"
    );
    let by_kind = nvidia_cli_stdout(
        &host.config,
        &["list", "--device=nvidia.com/gpu=1", "--utility"],
    );
    let lines: Vec<&str> = by_kind.lines().collect();
    assert!(
        lines.contains(&format!("{dev}/nvidia{}", all[1].minor).as_str())
            && !lines.contains(&format!("{dev}/nvidia{}", all[0].minor).as_str()),
        "{by_kind}"
    );
    assert!(
        lines.iter().any(|l| l.ends_with("/nvidia-smi")),
        "{by_kind}"
    );
    assert!(
        !lines.iter().any(|l| l.ends_with("/libcuda.so.535.261.03")),
        "libcuda is compute's:\n{by_kind}"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn list_of_a_mig_device_adds_its_capability_nodes_and_access_files() {
    let host = SimHost::shared(Fixture::synthetic(2).mig());
    let mig = host
        .facts
        .mig
        .iter()
        .find(|m| m.gpu == 0 && m.mig_index == 1)
        .expect("MIG device 0:1")
        .clone();
    let gpu = &host.facts.gpus[0];
    let out = nvidia_cli_stdout(&host.config, &["list", "--device=0:1"]);
    let dev = format!("{}/dev", host.facts.dev_root);
    let expected: Vec<String> = vec![
        format!("{dev}/nvidiactl"),
        format!("{dev}/nvidia-uvm"),
        format!("{dev}/nvidia-uvm-tools"),
        format!("{dev}/nvidia-modeset"),
        format!("{dev}/nvidia{}", gpu.minor),
        mig.gi_access_node.clone(),
        mig.ci_access_node.clone(),
        mig.gi_access_path.clone(),
        mig.ci_access_path.clone(),
    ];
    assert_eq!(out.lines().collect::<Vec<_>>(), expected, "{out}");
}

// ------------------------------------------------------------------ refusals

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn refusals_are_one_line_naming_the_cause() {
    let host = real_host();
    let refused = |args: &[&str]| failure(nvidia_cli(&host.config, args), args);
    let line = refused(&["list", "--device=7"]);
    assert!(
        line.contains("unknown device \"7\"") && line.contains("this host has"),
        "{line}"
    );
    let line = refused(&["configure", "--gpus=all", "--pid=1", "/r"]);
    assert!(
        line.contains("unknown option --gpus") && line.contains("--pid=PID (-p)"),
        "{line}"
    );
    let line = refused(&["--load-kmods", "launch"]);
    assert!(line.contains("unknown command \"launch\""), "{line}");
    // Without --pid, configure acts on its caller's namespaces: a caller
    // in another mount namespace (here the test, which starts it through
    // unshare) is refused, as NVIDIA's would configure the caller's.
    let rootfs = tempfile::tempdir().expect("a rootfs directory");
    let path = rootfs.path().to_str().expect("UTF-8 rootfs");
    let line = refused(&["configure", "--no-cgroups", "--utility", path]);
    assert!(
        line.contains("runs in another mount namespace") && line.contains("--pid=PID"),
        "{line}"
    );
    // A caller in its own (a shell that forks it), as host root outside
    // any user namespace and without --no-cgroups: no container process to
    // grant the device cgroup of, refused before the rootfs changes.
    let args = ["configure", "--device=0", "--utility", path];
    let mut argv: Vec<String> = ["sh", "-c", "\"$0\" \"$@\""]
        .iter()
        .map(|s| s.to_string())
        .collect();
    argv.push(cli_link().to_str().expect("UTF-8 link").to_string());
    argv.extend(args.iter().map(|a| a.to_string()));
    let argv = over_etc(&etc_layer(&host.config), &argv);
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .expect("run unshare");
    let line = failure(out, &args);
    assert!(
        line.contains("no device cgroup to grant")
            && line.contains("--no-cgroups")
            && line.contains("--pid=PID"),
        "{line}"
    );
    assert_eq!(fs::read_dir(rootfs.path()).unwrap().count(), 0, "{line}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn configure_refuses_a_pid_that_is_not_a_container_being_created() {
    let host = real_host();
    let rootfs = template_rootfs(&host);
    let rootfs_arg = path_str(&rootfs);
    // A process that has changed its root, as a running container has.
    let mut chrooted = Command::new("chroot")
        .arg(&rootfs)
        .args(["/bin/busybox", "sleep", "60"])
        .stdin(Stdio::null())
        .spawn()
        .expect("run chroot");
    wait_for_root_change(chrooted.id());
    let before = tree_listing(&rootfs);
    let pid = format!("--pid={}", chrooted.id());
    let args = ["configure", "--device=all", "--compute", &pid, &rootfs_arg];
    let line = failure(nvidia_cli(&host.config, &args), &args);
    let _ = chrooted.kill();
    let _ = chrooted.wait();
    assert!(
        line.contains(&format!(
            "process {} is not a container being created",
            chrooted.id()
        )),
        "{line}"
    );
    // A process that is gone.
    let mut gone = Command::new("true").spawn().expect("run true");
    gone.wait().unwrap();
    let pid = format!("--pid={}", gone.id());
    let args = ["configure", "--utility", &pid, &rootfs_arg];
    let line = failure(nvidia_cli(&host.config, &args), &args);
    assert!(
        line.contains(&format!("container process {} does not exist", gone.id())),
        "{line}"
    );
    assert!(
        listing_diff(&before, &tree_listing(&rootfs)).is_empty(),
        "the rootfs changed"
    );
}

/// Waits until process `pid` runs under another root than ours.
fn wait_for_root_change(pid: u32) {
    let ours = fs::metadata("/proc/self/root/").unwrap();
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    loop {
        use std::os::unix::fs::MetadataExt;
        let theirs = fs::metadata(format!("/proc/{pid}/root/")).unwrap();
        if (theirs.dev(), theirs.ino()) != (ours.dev(), ours.ino()) {
            return;
        }
        assert!(Instant::now() < deadline, "chroot did not change its root");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

// ------------------------------------------------------------------ configure

/// How the prestart hook calls the CLI.
struct Caller<'a> {
    /// The CLI's arguments before `--pid=PID ROOTFS`.
    args: &'a [&'a str],
    /// With stdin empty, as containerd's `oci-hook` runs it; otherwise
    /// after the state was read from it, as NVIDIA's hook execs the CLI.
    /// Either way from the bundle directory: containerd's shim and runc
    /// both run hooks there.
    containerd: bool,
    /// The hook's `[log] level`.
    log_level: &'a str,
}

/// A runc container on `host` whose prestart hook is a small script doing
/// what NVIDIA's legacy hook (or containerd's `oci-hook`) does: take the
/// container's pid from the OCI state, then exec `nvidia-container-cli
/// ARGS --pid=PID ROOTFS` with the test config at the default path.
fn prepare_cli_container(
    serial: &Serial,
    name: &str,
    host: &SimHost,
    env: &[(&str, &str)],
    decoy_minors: &[u32],
    caller: &Caller,
) -> Prepared {
    let prepared = prepare(
        serial,
        &Scenario {
            name,
            runtime: Runtime::RuncV1,
            host,
            env,
            hook: Hook::Prestart,
            decoy_minors,
            decoys: &[],
            reuse_rootfs: false,
            prepare: None,
        },
        &BundleExtras::default(),
    );
    // The CLI's config: the host's, logging to the bundle's hook log.
    let config = prepared.bundle.join("nvidia-cli-config.toml");
    write_hook_config(host, &config, &prepared.hook_log, caller.log_level);
    let mut argv = vec![path_str(&cli_link())];
    argv.extend(caller.args.iter().map(|a| a.to_string()));
    let exec: Vec<String> = over_etc(&etc_layer(&config), &argv)
        .iter()
        .map(|a| sh_quote(a))
        .collect();
    let rootfs = sh_quote(&path_str(&prepared.rootfs));
    let cd = format!("cd {}\n", sh_quote(&path_str(&prepared.bundle)));
    let stdin = if caller.containerd { " </dev/null" } else { "" };
    let script = format!(
        "#!/bin/sh\n\
         # The container's pid, from the OCI state runc writes on stdin.\n\
         pid=$(sed -n 's/.*\"pid\": *\\([0-9][0-9]*\\).*/\\1/p')\n\
         [ -n \"$pid\" ] || {{ echo 'no pid in the OCI state' >&2; exit 1; }}\n\
         {cd}exec {} \"--pid=$pid\" {rootfs}{stdin}\n",
        exec.join(" ")
    );
    let script_path = prepared.bundle.join("nvidia-cli-hook");
    fs::write(&script_path, script).unwrap();
    fs::set_permissions(&script_path, fs::Permissions::from_mode(0o755)).unwrap();

    let config_json = prepared.bundle.join("config.json");
    let mut spec: Value = serde_json::from_slice(&fs::read(&config_json).unwrap()).unwrap();
    let entry = &mut spec["hooks"]["prestart"][0];
    entry["path"] = Value::from(path_str(&script_path));
    entry["args"] = Value::from(vec![Value::from("nvidia-cli-hook")]);
    fs::write(&config_json, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
    prepared
}

/// Runs a prepared container to its end.
fn run_prepared(prepared: &Prepared) -> Run {
    let started = Instant::now();
    let finished = run_bounded(prepared.command(), RUN_LIMIT);
    prepared.finish(finished, started.elapsed())
}

/// `s` as one shell word.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// GPU nodes the container has but was not given must be denied.
fn assert_denied(run: &Run, minors: &[u32]) {
    let ctx = run.describe();
    let nodes = run.report.gpu_nodes();
    for minor in minors {
        let node = nodes
            .get(minor)
            .unwrap_or_else(|| panic!("decoy /dev/nvidia{minor} is missing:{ctx}"));
        assert_eq!(
            node.open.as_deref(),
            Some("EPERM"),
            "/dev/nvidia{minor} was not asked for, yet the device cgroup allows it:{ctx}"
        );
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn nvidias_legacy_hook_command_line_configures_a_runc_container() {
    let host = real_host();
    let mounts_before = host_mounts();
    let serial = serial();
    let prepared = prepare_cli_container(
        &serial,
        "cli-legacy",
        &host,
        &[],
        &[],
        &Caller {
            args: &[
                "--load-kmods",
                "configure",
                "--ldconfig=@/sbin/ldconfig.real",
                "--device=all",
                "--compute",
                "--utility",
                "--require=cuda>=12.0",
            ],
            containerd: false,
            log_level: "debug",
        },
    );
    let run = run_prepared(&prepared);
    assert_every_gpu_injected(&run, &host);
    let log = run.hook_log.clone().unwrap_or_default();
    let ctx = run.describe();
    assert!(
        log.contains("--load-kmods ignored")
            && log.contains("--ldconfig=@/sbin/ldconfig.real ignored"),
        "the options we never act on are logged:{ctx}"
    );
    assert!(log.contains("injected"), "{ctx}");
    drop(prepared);
    assert_mounts_unchanged(&mounts_before, "after the container");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn containerds_command_line_configures_a_runc_container_from_argv_alone() {
    let host = real_host();
    let all = host.facts.gpus.clone();
    let selected = [all[1].minor, all[3].minor];
    let others = [all[0].minor, all[2].minor];
    // The environment says something else; the command line decides.
    let serial = serial();
    let prepared = prepare_cli_container(
        &serial,
        "cli-containerd",
        &host,
        &[
            ("NVIDIA_VISIBLE_DEVICES", "0"),
            ("NVIDIA_DRIVER_CAPABILITIES", "utility"),
        ],
        &others,
        &Caller {
            args: &[
                "--load-kmods",
                "configure",
                "--device=1,3",
                "--compute",
                "--compat32",
                "--graphics",
                "--utility",
                "--video",
                "--display",
            ],
            containerd: true,
            log_level: "debug",
        },
    );
    let run = run_prepared(&prepared);
    let mut nodes = node_specs(&host, &selected);
    // display brings nvidia-modeset.
    nodes.push(("/dev/nvidia-modeset".into(), (NVIDIA_MAJOR, 254)));
    assert_injected(
        &run,
        &host,
        &Expected {
            nodes: &nodes,
            real_libraries: true,
        },
    );
    assert_denied(&run, &others);
    let ctx = run.describe();
    let version = host.facts.driver_version.as_str();
    assert!(
        run.report
            .files
            .contains_key(&format!("{LIB_DIR}/libGLX_nvidia.so.{version}")),
        "graphics libraries:{ctx}"
    );
    assert!(
        run.rootfs
            .join(format!("usr/lib/i386-linux-gnu/libcuda.so.{version}"))
            .exists(),
        "compat32 placed the i386 libcuda:{ctx}"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn an_unmet_require_option_refuses_the_container_on_one_line() {
    let host = real_host();
    let serial = serial();
    let prepared = prepare_cli_container(
        &serial,
        "cli-require",
        &host,
        &[],
        &[],
        &Caller {
            args: &[
                "--load-kmods",
                "configure",
                "--device=all",
                "--compute",
                "--utility",
                "--require=cuda>=13.0",
            ],
            containerd: true,
            log_level: "info",
        },
    );
    let before = tree_listing(&prepared.rootfs);
    let run = run_prepared(&prepared);
    let ctx = run.describe();
    assert!(!run.succeeded(), "the container must not start:{ctx}");
    let log = run.hook_log.clone().unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 1, "one line:{ctx}");
    assert!(
        lines[0].contains("error: --require \"cuda>=13.0\": GPU 0")
            && lines[0].contains("unsatisfied condition: cuda>=13.0 is false")
            && lines[0].contains("supports CUDA 12.2"),
        "{ctx}"
    );
    assert!(
        run.stderr.contains(
            "unsatisfied condition: cuda>=13.0 is false: driver 535.261.03 supports CUDA 12.2"
        ),
        "runc shows it:{ctx}"
    );
    // runc itself makes the mount point of the bundle's /out.
    let diff: Vec<String> = listing_diff(&before, &tree_listing(&prepared.rootfs))
        .into_iter()
        .filter(|d| !d.starts_with("added out: dir"))
        .collect();
    assert!(diff.is_empty(), "the image changed: {diff:#?}{ctx}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn no_devbind_and_no_cgroups_leave_their_step_to_the_runtime() {
    let host = real_host();
    let gpu = host.facts.gpus[1].clone();
    let node = format!("/dev/nvidia{}", gpu.minor);
    let serial = serial();

    // --no-devbind: the runtime makes the GPU's node (a decoy with no
    // cgroup rule); the CLI creates none but grants it.
    let prepared = prepare_cli_container(
        &serial,
        "cli-no-devbind",
        &host,
        &[],
        &[gpu.minor],
        &Caller {
            args: &["configure", "--no-devbind", "--device=1", "--utility"],
            containerd: true,
            log_level: "debug",
        },
    );
    let run = run_prepared(&prepared);
    run.assert_completed();
    let ctx = run.describe();
    assert_eq!(
        run.report.nodes.get(&node).and_then(|n| n.open.as_deref()),
        Some("ENXIO"),
        "the runtime's node is granted:{ctx}"
    );
    assert!(
        !run.report.nodes.contains_key("/dev/nvidiactl"),
        "no node is created:{ctx}"
    );
    drop(prepared);

    // --no-cgroups: the nodes are created, the device cgroup is the runtime's.
    let prepared = prepare_cli_container(
        &serial,
        "cli-no-cgroups",
        &host,
        &[],
        &[],
        &Caller {
            args: &["configure", "--no-cgroups", "--device=1", "--utility"],
            containerd: true,
            log_level: "debug",
        },
    );
    let run = run_prepared(&prepared);
    run.assert_completed();
    let ctx = run.describe();
    for path in [node.as_str(), "/dev/nvidiactl"] {
        assert_eq!(
            run.report.nodes.get(path).and_then(|n| n.open.as_deref()),
            Some("EPERM"),
            "{path} is created but not granted:{ctx}"
        );
    }
}

/// `configure --imex-channel=1` on the `--extras` host: the channel asked
/// for is made and allowed; the host's channel 0, not asked for, is absent.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn configure_imex_channel_gives_exactly_that_channel() {
    let host = SimHost::shared(Fixture::synthetic(2).extras());
    let extras = host.facts.extras.as_ref().expect("an --extras host");
    let serial = serial();
    let prepared = prepare_cli_container(
        &serial,
        "cli-imex",
        &host,
        &[],
        &[],
        &Caller {
            args: &["configure", "--device=0", "--utility", "--imex-channel=1"],
            containerd: false,
            log_level: "debug",
        },
    );
    let run = run_prepared(&prepared);
    let ctx = run.describe();
    let channel = |n: u32| {
        run.report
            .nodes
            .get(&format!("/dev/nvidia-caps-imex-channels/channel{n}"))
            .map(|node| (node.numbers, node.open.clone()))
    };
    assert_eq!(
        channel(1),
        Some((Some((extras.imex_major, 1)), Some("ENXIO".to_string()))),
        "{ctx}"
    );
    assert_eq!(channel(0), None, "{ctx}");
}

//! CDI end to end: real Podman 4.3.1 takes GPUs from the spec
//! `oci-nvidia-hook cdi generate` wrote for a simulated host, with
//! `--device nvidia.com/gpu=…`. Podman creates the nodes and grants the
//! device cgroup itself, bind-mounts the driver's files, and runs the
//! spec's one `createRuntime` hook (`cdi-hook`), which writes the loader
//! cache and the links and masks `/proc/driver/nvidia`. Inside each
//! container `/checker` reports what it sees (TESTBED.md: ENXIO means the
//! device cgroup allows a node). One more test gives Podman our runtime
//! wrapper (`nvidia-container-runtime`) as its runtime: the same edits,
//! written into the spec by the wrapper rather than by Podman from CDI.
//!
//! The spec is put where Podman 4.3 reads specs (`/run/cdi`; it has no
//! setting for another directory), but only inside a private mount
//! namespace in which a tmpfs covers `/run/cdi` and `/etc/cdi`: the host's
//! own specs are hidden from the test and ours never reaches the host.
//!
//! Run as root: `make test`, or
//! `cargo test --features _test_as_root --test cdi_podman -- --nocapture`.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use harness::mounts::{assert_mounts_unchanged, host_mounts};
use harness::project::hook_binary;
use harness::runtime::bundle::{copy_template, work_root, write_hook_config, write_hooks_dir};
use harness::runtime::cleanup::{remove_tree_safely, Cleanup};
use harness::runtime::expected::{node_specs, NodeSpec};
use harness::runtime::host_state::{listing_diff, tree_listing};
use harness::runtime::injected::{assert_injected, assert_wsl_injected, Expected};
use harness::runtime::oci_config::{path_str, CONTAINER_SCRIPT};
use harness::runtime::process::run_bounded;
use harness::runtime::run::{serial, Run, RunFiles, RUN_LIMIT};
use harness::runtime::runtimes::{podman_run_args, Runtime};
use harness::simhost::{Fixture, Flavour, SimHost};

#[path = "cdi_podman/nvidia_ctk.rs"]
mod nvidia_ctk;

/// Where Podman 4.3 reads transient specs; covered by a tmpfs in the run's namespace.
const SPEC_DIR: &str = "/run/cdi";

/// Which hooks.d files Podman is given beside the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HooksDir {
    /// None: the spec alone.
    Empty,
    /// Ours and one shaped as NVIDIA's toolkit ships it, both of which
    /// would inject every GPU into an image that sets
    /// `NVIDIA_VISIBLE_DEVICES=all`, were it not for the spec's `void`.
    OursAndNvidias,
}

/// A rewrite of the generated spec, given the run's directory.
type Reshape<'a> = dyn Fn(&mut serde_json::Value, &Path) + 'a;

/// One Podman run with CDI devices.
struct CdiRun<'a> {
    name: &'a str,
    host: &'a SimHost,
    /// The names after `nvidia.com/gpu=`.
    devices: &'a [&'a str],
    /// The image's own variables.
    env: &'a [(&'a str, &'a str)],
    hooks: HooksDir,
    /// The names after `nvidia.com/imex-channel=`.
    imex: &'a [&'a str],
    /// Podman's runtime is our wrapper (`nvidia-container-runtime`), which
    /// writes the GPUs into the spec, instead of runc with a CDI spec.
    wrapper: bool,
    /// Rewrites our generated spec (given the run's directory) before Podman reads it.
    reshape: Option<&'a Reshape<'a>>,
    /// The spec made by `nvidia-ctk cdi generate` instead of our own command.
    ctk: Option<CtkGenerate<'a>>,
}

/// How `nvidia-ctk cdi generate` makes a run's spec, reading the run's
/// config as its default config file (as the spec's hook then does).
struct CtkGenerate<'a> {
    /// Its flags after `cdi generate --output SPEC`.
    args: &'a [&'a str],
    /// The config's driver root and dev root are an empty directory
    /// instead of the host's: the spec works only on the roots its flags named.
    roots_elsewhere: bool,
}

/// `/run/cdi` must exist to be covered; made here if the host lacks it,
/// and removed again (if still empty) when dropped.
struct SpecDirMountpoint {
    created: bool,
}

impl SpecDirMountpoint {
    fn ensure() -> SpecDirMountpoint {
        let created = !Path::new(SPEC_DIR).is_dir();
        if created {
            std::fs::create_dir_all(SPEC_DIR).expect("create /run/cdi");
        }
        SpecDirMountpoint { created }
    }
}

impl Drop for SpecDirMountpoint {
    fn drop(&mut self) {
        if self.created {
            let _ = std::fs::remove_dir(SPEC_DIR);
        }
    }
}

/// Generates the spec for `host` with the hook config `config`, into `spec`.
fn generate(config: &Path, spec: &Path) {
    let out = Command::new(hook_binary())
        .env_clear()
        .arg("--config")
        .arg(config)
        .args(["cdi", "generate", "--output"])
        .arg(spec)
        .output()
        .expect("run oci-nvidia-hook cdi generate");
    assert!(
        out.status.success(),
        "cdi generate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes a hooks.d file shaped as NVIDIA's toolkit ships it (ANCHORS.md);
/// NVIDIA's toolkit is not in Debian, so our binary stands in for
/// `nvidia-container-runtime-hook`, reading the default config path as
/// NVIDIA's does.
fn write_nvidias_hooks_d_file(hooks_dir: &Path) {
    let file = serde_json::json!({
        "version": "1.0.0",
        "hook": {
            "path": path_str(hook_binary()),
            "args": ["nvidia-container-runtime-hook", "prestart"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
        },
        "when": {"always": true, "commands": [".*"]},
        "stages": ["prestart"]
    });
    std::fs::write(
        hooks_dir.join("nvidia-container-toolkit.json"),
        serde_json::to_vec_pretty(&file).unwrap(),
    )
    .unwrap();
}

/// Runs the container; checks that the host's mounts and driver tree are
/// as they were.
fn run_cdi(case: &CdiRun) -> Run {
    Runtime::Podman.require_tools();
    let _serial = serial();
    let dir = work_root()
        .join("bundles")
        .join(format!("cdi-{}", case.name));
    remove_tree_safely(&dir);
    std::fs::create_dir_all(dir.join("out")).unwrap();
    let rootfs = dir.join("rootfs");
    copy_template(case.host, &rootfs);
    let config = dir.join("hook-config.toml");
    let log = dir.join("hook.log");
    write_hook_config(case.host, &config, &log, "debug");
    if case.ctk.as_ref().is_some_and(|ctk| ctk.roots_elsewhere) {
        nvidia_ctk::roots_elsewhere(&config, &dir.join("no-driver"));
    }
    // The wrapper and `nvidia-ctk` read the default config: an overlay on
    // /etc in the run's namespace carries it, leaving the host's /etc as it is.
    let etc = dir.join("etc");
    std::fs::create_dir_all(etc.join("upper/oci-nvidia-hook")).unwrap();
    std::fs::create_dir_all(etc.join("work")).unwrap();
    std::fs::copy(&config, etc.join("upper/oci-nvidia-hook/config.toml")).unwrap();
    let spec = dir.join("nvidia.yaml");
    if case.wrapper {
        // No spec: an empty file keeps the namespace set-up the same.
        std::fs::write(&spec, "").unwrap();
    } else if let Some(ctk) = &case.ctk {
        nvidia_ctk::generate(&dir, &etc, &spec, ctk.args);
    } else {
        generate(&config, &spec);
    }
    if let Some(reshape) = case.reshape {
        let mut value: serde_json::Value =
            serde_yaml::from_slice(&std::fs::read(&spec).unwrap()).unwrap();
        reshape(&mut value, &dir);
        // JSON is YAML: Podman reads it under the same name.
        std::fs::write(&spec, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
    }
    let link = dir.join("nvidia-container-runtime");
    std::os::unix::fs::symlink(hook_binary(), &link).unwrap();
    let hooks_dir = dir.join("hooks.d");
    std::fs::create_dir_all(&hooks_dir).unwrap();
    if case.hooks == HooksDir::OursAndNvidias {
        write_hooks_dir(&hooks_dir, &config);
        write_nvidias_hooks_d_file(&hooks_dir);
    }

    let id = format!("onh-cdi-{}-{}", case.name, std::process::id());
    let mut argv = Runtime::Podman.podman_globals(&hooks_dir);
    if case.wrapper {
        let at = argv.iter().position(|a| a == "--runtime").unwrap() + 1;
        argv[at] = path_str(&link);
    }
    let mut extra = Vec::new();
    for device in case.devices {
        extra.push("--device".to_string());
        // A name of another kind comes qualified.
        extra.push(match device.contains('=') {
            true => device.to_string(),
            false => format!("nvidia.com/gpu={device}"),
        });
    }
    for channel in case.imex {
        extra.push("--device".to_string());
        extra.push(format!("nvidia.com/imex-channel={channel}"));
    }
    argv.extend(podman_run_args(
        &id,
        &dir.join("out"),
        case.env,
        &extra,
        &rootfs,
        &["/bin/sh", "-c", CONTAINER_SCRIPT],
    ));
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(
            "mount -t tmpfs -o mode=0755 cdi /run/cdi && \
             { [ ! -d /etc/cdi ] || mount -t tmpfs -o mode=0755 cdi /etc/cdi; } && \
             { [ ! -s \"$0\" ] || cp \"$0\" /run/cdi/nvidia.yaml; } && \
             { [ ! -s \"$2\" ] || cp \"$2\" /run/cdi/nvidia-imex-channel.yaml; } && \
             mount -t overlay onh-etc -o \"lowerdir=/etc,upperdir=$1/upper,workdir=$1/work\" /etc && \
             shift 2 && exec \"$@\"",
        )
        .arg(&spec)
        .arg(&etc)
        .arg(dir.join("nvidia-imex-channel.yaml"))
        .args(&argv);

    let mounts_before = host_mounts();
    let driver_before = tree_listing(&case.host.dir);
    let mountpoint = SpecDirMountpoint::ensure();
    let guard = Cleanup {
        runtime: Runtime::Podman,
        id,
        state_root: dir.join("state"),
        hooks_dir: hooks_dir.clone(),
    };
    let started = Instant::now();
    let finished = run_bounded(cmd, RUN_LIMIT);
    let elapsed = started.elapsed();
    drop(guard);
    drop(mountpoint);

    let run = Run::collect(
        Runtime::Podman,
        case.name,
        finished,
        elapsed,
        RunFiles {
            bundle: &dir,
            rootfs: &rootfs,
            hook_log: &log,
        },
    );
    eprintln!("{}: podman run took {} ms", case.name, elapsed.as_millis());
    assert_mounts_unchanged(&mounts_before, &run.describe());
    let changed = listing_diff(&driver_before, &tree_listing(&case.host.dir));
    assert!(
        changed.is_empty(),
        "the simulated host changed: {changed:?}{}",
        run.describe()
    );
    run
}

fn host() -> SimHost {
    SimHost::shared(Fixture::real(4))
}

/// The container got exactly the GPUs of `minors` (plus the control and
/// UVM nodes), each allowed by the cgroup Podman wrote from the spec, with
/// libcuda answering 12020 through the loader cache and nvidia-smi
/// reaching for the driver (see `assert_injected`); no other GPU's node is
/// there; and the spec's hook ran at createRuntime.
fn assert_cdi_gpus(run: &Run, host: &SimHost, minors: &[u32], extra_nodes: &[NodeSpec]) {
    let mut nodes = node_specs(host, minors);
    nodes.extend_from_slice(extra_nodes);
    assert_injected(
        run,
        host,
        &Expected {
            nodes: &nodes,
            real_libraries: host.facts.flavour == Flavour::Real,
        },
    );
    let seen: Vec<u32> = run.report.gpu_nodes().keys().copied().collect();
    let mut want = minors.to_vec();
    want.sort_unstable();
    assert_eq!(seen, want, "GPU nodes in the container:{}", run.describe());
    let log = run.hook_log.as_deref().unwrap_or_default();
    assert!(
        log.contains("CDI:"),
        "the spec's createRuntime hook did not run:{}",
        run.describe()
    );
}

fn minor_of_index(host: &SimHost, index: u32) -> u32 {
    host.facts
        .gpus
        .clone()
        .into_iter()
        .find(|g| g.index == index)
        .unwrap_or_else(|| panic!("no GPU {index}"))
        .minor
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn podman_takes_a_gpu_by_index() {
    let host = host();
    let run = run_cdi(&CdiRun {
        name: "index",
        host: &host,
        devices: &["0"],
        env: &[],
        hooks: HooksDir::Empty,
        imex: &[],
        wrapper: false,
        reshape: None,
        ctk: None,
    });
    assert_cdi_gpus(&run, &host, &[minor_of_index(&host, 0)], &[]);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn podman_takes_a_gpu_by_uuid() {
    let host = host();
    let gpu = host.facts.gpus.iter().find(|g| g.index == 2).unwrap();
    let run = run_cdi(&CdiRun {
        name: "uuid",
        host: &host,
        devices: &[&gpu.uuid],
        env: &[],
        hooks: HooksDir::Empty,
        imex: &[],
        wrapper: false,
        reshape: None,
        ctk: None,
    });
    assert_cdi_gpus(&run, &host, &[gpu.minor], &[]);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn podman_takes_all_gpus() {
    let host = host();
    all_gpus(&host, "all", None);
}

/// Podman runs `nvidia.com/gpu=all` from our spec (`reshape`d, if given),
/// giving every GPU.
fn all_gpus(host: &SimHost, name: &str, reshape: Option<&Reshape>) -> Run {
    let run = run_cdi(&CdiRun {
        name,
        host,
        devices: &["all"],
        env: &[],
        hooks: HooksDir::Empty,
        imex: &[],
        wrapper: false,
        reshape,
        ctk: None,
    });
    if reshape.is_none() {
        let minors: Vec<u32> = host.facts.gpus.iter().map(|g| g.minor).collect();
        assert_cdi_gpus(&run, host, &minors, &[]);
    }
    run
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn podman_takes_two_devices_named_two_ways() {
    let host = host();
    let third = host.facts.gpus.iter().find(|g| g.index == 3).unwrap();
    let run = run_cdi(&CdiRun {
        name: "two",
        host: &host,
        devices: &["1", &third.uuid],
        env: &[],
        hooks: HooksDir::Empty,
        imex: &[],
        wrapper: false,
        reshape: None,
        ctk: None,
    });
    assert_cdi_gpus(&run, &host, &[minor_of_index(&host, 1), third.minor], &[]);
}

/// A MIG device by its NVML UUID (the mock NVML's on the MIG host): its
/// GPU's node and its two `nvidia-caps` nodes, and the mask shows its
/// access files, which the hook found from procfs without NVML.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn podman_takes_a_mig_device() {
    let host = SimHost::shared(Fixture::synthetic(2).mig());
    let mig = &host.facts.mig[0];
    let uuid = mig.uuid.as_str();
    let parent = mig.gpu;
    let caps_major = host.facts.caps_major;
    let caps: Vec<NodeSpec> = [mig.gi_access_minor, mig.ci_access_minor]
        .into_iter()
        .map(|minor| {
            (
                format!("/dev/nvidia-caps/nvidia-cap{minor}"),
                (caps_major, minor),
            )
        })
        .collect();
    let run = run_cdi(&CdiRun {
        name: "mig",
        host: &host,
        devices: &[uuid],
        env: &[],
        hooks: HooksDir::Empty,
        imex: &[],
        wrapper: false,
        reshape: None,
        ctk: None,
    });
    assert_cdi_gpus(&run, &host, &[minor_of_index(&host, parent)], &caps);
    let log = run.hook_log.as_deref().unwrap_or_default();
    let (gi, ci) = (u64::from(mig.gi), u64::from(mig.ci));
    assert!(
        log.contains(&format!("mig/gi{gi}/access"))
            && log.contains(&format!("mig/gi{gi}/ci{ci}/access")),
        "the mask holds the MIG device's access files:{}",
        run.describe()
    );
}

/// The spec appends `NVIDIA_VISIBLE_DEVICES=void`: with our hooks.d hook
/// and one shaped as NVIDIA's installed too, an image asking for `all`
/// still gets only the CDI device, and both hooks do nothing.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn hooks_d_hooks_do_not_inject_a_second_time() {
    let host = host();
    let run = run_cdi(&CdiRun {
        name: "double",
        host: &host,
        devices: &["0"],
        env: &[("NVIDIA_VISIBLE_DEVICES", "all")],
        hooks: HooksDir::OursAndNvidias,
        imex: &[],
        wrapper: false,
        reshape: None,
        ctk: None,
    });
    assert_cdi_gpus(&run, &host, &[minor_of_index(&host, 0)], &[]);
    let log = run.hook_log.as_deref().unwrap_or_default();
    assert!(
        log.contains("unset or void, nothing to do"),
        "our hooks.d hook saw the spec's void:{}",
        run.describe()
    );
}

/// Podman with our runtime wrapper as its runtime: the image's
/// `NVIDIA_VISIBLE_DEVICES=1` becomes device entries, cgroup rules, mounts
/// and the createRuntime hook in the spec, and runc does the rest.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn podman_with_the_runtime_wrapper_takes_a_gpu() {
    let host = host();
    let run = run_cdi(&CdiRun {
        name: "wrapper",
        host: &host,
        devices: &[],
        env: &[("NVIDIA_VISIBLE_DEVICES", "1")],
        hooks: HooksDir::Empty,
        imex: &[],
        wrapper: true,
        reshape: None,
        ctk: None,
    });
    assert_cdi_gpus(&run, &host, &[minor_of_index(&host, 1)], &[]);
    let log = run.hook_log.as_deref().unwrap_or_default();
    assert!(
        log.contains("written for the runtime"),
        "the wrapper edited the spec:{}",
        run.describe()
    );
}

/// The IMEX channel spec beside the GPU spec: Podman gives exactly the
/// channel named (`nvidia.com/imex-channel=1`), allowed; the GPU's device
/// brings its DRM nodes (the spec has every capability), allowed, and the
/// spec's hook their by-path links; the other GPU's and channel's are absent.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn podman_takes_an_imex_channel_and_a_gpus_drm_nodes() {
    let host = SimHost::shared(Fixture::synthetic(2).extras());
    let extras = host.facts.extras.as_ref().expect("an --extras host");
    let run = run_cdi(&CdiRun {
        name: "imex",
        host: &host,
        devices: &["0"],
        env: &[],
        hooks: HooksDir::Empty,
        imex: &["1"],
        wrapper: false,
        reshape: None,
        ctk: None,
    });
    run.assert_completed();
    let node = |path: &str| {
        run.report
            .nodes
            .get(path)
            .map(|n| (n.kind, n.numbers, n.open.clone()))
    };
    let allowed = |numbers| Some(('c', Some(numbers), Some("ENXIO".to_string())));
    assert_eq!(
        node("/dev/nvidia-caps-imex-channels/channel1"),
        allowed((extras.imex_major, 1)),
        "{}",
        run.describe()
    );
    assert_eq!(
        node("/dev/nvidia-caps-imex-channels/channel0"),
        None,
        "{}",
        run.describe()
    );
    let gpu = &host.facts.gpus[0];
    let drm = extras.drm_of(&gpu.bus);
    assert_eq!(node(&drm.card), allowed((226, 1)), "{}", run.describe());
    assert_eq!(node(&drm.render), allowed((226, 128)), "{}", run.describe());
    let other = extras
        .drm
        .iter()
        .find(|d| d.bus != gpu.bus)
        .expect("GPU 1's DRM nodes");
    assert_eq!(node(&other.card), None, "{}", run.describe());
    let link = format!("/dev/dri/by-path/pci-{}-card", gpu.bus.to_ascii_lowercase());
    assert_eq!(node(&link).map(|n| n.0), Some('l'), "{}", run.describe());
    // The spec's mounts bring the files beyond the libraries; its hook the
    // GBM backend link and the application profile of the GPU Podman gave.
    for path in [
        "/usr/lib/xorg/modules/drivers/nvidia_drv.so",
        "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so",
        "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
        "/etc/OpenCL/vendors/nvidia.icd",
    ] {
        let file = run.report.files.get(path);
        assert!(
            file.is_some_and(|f| f.read_only && f.nodev),
            "{path}: {file:?}{}",
            run.describe()
        );
    }
    assert_eq!(
        run.report
            .links
            .get("/usr/lib/x86_64-linux-gnu/gbm/nvidia-drm_gbm.so")
            .map(String::as_str),
        Some("../libnvidia-allocator.so.1"),
        "{}",
        run.describe()
    );
    let profile = "etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf";
    let written = std::fs::read_to_string(run.rootfs.join(profile))
        .unwrap_or_else(|e| panic!("{profile}: {e}{}", run.describe()));
    let mask = format!("\"EGLVisibleDGPUDevices\",{:#x}]", 1u64 << gpu.minor);
    assert!(written.contains(&mask), "{written}");
}

/// Turns our spec into the shape NVIDIA's `nvidia-ctk cdi generate` writes
/// (its `pkg/nvcdi`): the same device nodes and mounts, but instead of our
/// `cdi-hook`, `createContainer` hooks without `env` calling
/// `nvidia-cdi-hook` (here a link named so to this binary):
/// `create-symlinks --link TARGET::LINK…`, `update-ldcache --folder DIR…`,
/// `enable-cuda-compat`, `disable-device-node-modification` and `chmod`,
/// then NVIDIA v1.19's and v1.20's newer forms.
fn nvidias_shape(spec: &mut serde_json::Value, dir: &Path, links: &[String], driver: &str) {
    let hook_path = dir.join("nvidia-cdi-hook");
    let _ = std::fs::remove_file(&hook_path);
    std::os::unix::fs::symlink(hook_binary(), &hook_path).unwrap();
    let mut folders: Vec<String> = Vec::new();
    let mut all: Vec<&mut serde_json::Value> = Vec::new();
    for (key, value) in spec.as_object_mut().unwrap().iter_mut() {
        match key.as_str() {
            "containerEdits" => all.push(value),
            "devices" => all.extend(
                value
                    .as_array_mut()
                    .unwrap()
                    .iter_mut()
                    .map(|d| &mut d["containerEdits"]),
            ),
            _ => {}
        }
    }
    for edits in all {
        if let Some(map) = edits.as_object_mut() {
            map.remove("hooks");
        }
        for mount in edits["mounts"].as_array().into_iter().flatten() {
            let path = Path::new(mount["containerPath"].as_str().unwrap());
            if path.file_name().unwrap().to_string_lossy().contains(".so") {
                let folder = path.parent().unwrap().to_string_lossy().into_owned();
                if !folders.contains(&folder) {
                    folders.push(folder);
                }
            }
        }
    }
    let hook = |args: Vec<String>| {
        let mut argv = vec!["nvidia-cdi-hook".to_string()];
        argv.extend(args);
        serde_json::json!({"hookName": "createContainer", "path": path_str(&hook_path), "args": argv})
    };
    let mut symlinks = vec!["create-symlinks".to_string()];
    for link in links {
        symlinks.extend(["--link".to_string(), link.clone()]);
    }
    let mut ldcache = vec!["update-ldcache".to_string()];
    for folder in &folders {
        ldcache.extend(["--folder".to_string(), folder.clone()]);
    }
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    spec["containerEdits"]["hooks"] = serde_json::json!([
        hook(words(&[
            "enable-cuda-compat",
            "--host-driver-version",
            driver
        ])),
        hook(symlinks),
        hook(ldcache),
        hook(words(&["disable-device-node-modification"])),
        hook(words(&["chmod", "--mode", "755", "--path", "/dev/dri"])),
        // v1.19's and v1.20's forms: enable-cuda-compat without a version
        // and with Orin's flags, the application profile, and what a newer
        // tool may write (an unknown hook, an unknown flag, noop): each
        // warns or does nothing, and the container starts.
        hook(words(&["enable-cuda-compat"])),
        hook(words(&[
            "enable-cuda-compat",
            "--host-cuda-version=12.4",
            "--cuda-compat-container-root=/usr/local/cuda/compat-orin",
        ])),
        hook(words(&["update-application-profile"])),
        hook(words(&["check-requirements", "--cuda=12"])),
        hook(words(&[
            "disable-device-node-modification",
            "--some-new-flag"
        ])),
        hook(words(&["noop"])),
    ]);
}

/// A spec in NVIDIA's format, its hooks calling our `nvidia-cdi-hook` at
/// createContainer, gives the container the same nodes, libraries, loader
/// cache and links as our own spec does.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn podman_runs_a_spec_in_nvidias_format_through_nvidia_cdi_hook() {
    let host = host();
    let ours = all_gpus(&host, "ours-for-nvidia", None);
    let minors: Vec<u32> = host.facts.gpus.iter().map(|g| g.minor).collect();
    // The links NVIDIA's spec names (the development `.so` names); the
    // SONAME links are update-ldcache's, as ldconfig's are for NVIDIA.
    let version = host.facts.driver_version.clone();
    let links: Vec<String> = ours
        .report
        .links
        .iter()
        .filter(|(link, _)| link.ends_with(".so"))
        .map(|(link, target)| format!("{target}::{link}"))
        .collect();
    let driver = version.clone();
    let reshape =
        |spec: &mut serde_json::Value, dir: &Path| nvidias_shape(spec, dir, &links, &driver);
    let run = all_gpus(&host, "nvidias-format", Some(&reshape));
    let mut nodes = node_specs(&host, &minors);
    nodes.sort();
    assert_injected(
        &run,
        &host,
        &Expected {
            nodes: &nodes,
            real_libraries: host.facts.flavour == Flavour::Real,
        },
    );
    let log = run.hook_log.as_deref().unwrap_or_default();
    assert!(
        log.contains("update-ldcache:")
            && log.contains("create-symlinks:")
            && !log.contains("CDI:"),
        "nvidia-cdi-hook ran at createContainer, our cdi-hook did not:{}",
        run.describe()
    );
    assert!(
        log.contains("Unsupported CDI hook: check-requirements")
            && log.contains("Unsupported flag --some-new-flag"),
        "the newer hooks were not warned about:{}",
        run.describe()
    );
    let keys = |r: &harness::runtime::run::Run| r.report.nodes.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&run), keys(&ours), "device nodes:{}", run.describe());
    assert_eq!(
        run.report.links,
        ours.report.links,
        "links:{}",
        run.describe()
    );
    let entries = |r: &harness::runtime::run::Run| {
        r.ld_cache
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.soname, e.tag, e.path))
            .collect::<std::collections::BTreeSet<_>>()
    };
    let missing: Vec<_> = entries(&ours).difference(&entries(&run)).cloned().collect();
    assert!(
        missing.is_empty(),
        "the loader cache lacks what our spec gives: {missing:?}{}",
        run.describe()
    );
}

/// A WSL2 host (`Fixture::wsl`): Podman takes `nvidia.com/gpu=all` from
/// the spec `cdi generate` wrote there (its mode auto-detected): `/dev/dxg`
/// allowed, the WSL files at their paths, and the spec's hook writing the
/// loader cache and the nvidia-smi link, libcuda answering.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn podman_applies_the_wsl_spec() {
    let host = SimHost::shared(Fixture::wsl());
    let run = run_cdi(&CdiRun {
        name: "wsl",
        host: &host,
        devices: &["all"],
        env: &[],
        hooks: HooksDir::Empty,
        imex: &[],
        wrapper: false,
        reshape: None,
        ctk: None,
    });
    assert_wsl_injected(&run, &host, &[]);
}

/// The same WSL2 host through Podman with our runtime wrapper as its runtime.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn podman_with_the_runtime_wrapper_on_a_wsl_host() {
    let host = SimHost::shared(Fixture::wsl());
    let run = run_cdi(&CdiRun {
        name: "wsl-wrapper",
        host: &host,
        devices: &[],
        env: &[("NVIDIA_VISIBLE_DEVICES", "all")],
        hooks: HooksDir::Empty,
        imex: &[],
        wrapper: true,
        reshape: None,
        ctk: None,
    });
    assert_wsl_injected(&run, &host, &[]);
}

/// A Jetson (`harness::jetson`): Podman takes `nvidia.com/gpu=0` from the
/// spec `cdi generate` wrote there (its mode auto-detected from the CSV
/// files): every listed node allowed, the listed files, links and CUDA's
/// directory read-only at their paths, and the spec's hook writing the
/// loader cache, libcuda answering.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn podman_applies_the_jetson_csv_spec() {
    let (host, facts) = harness::jetson::jetson();
    let run = run_cdi(&CdiRun {
        name: "jetson",
        host: &host,
        devices: &["0"],
        env: &[],
        hooks: HooksDir::Empty,
        imex: &[],
        wrapper: false,
        reshape: None,
        ctk: None,
    });
    harness::jetson::assert_jetson_injected(&run, &facts, &[]);
}

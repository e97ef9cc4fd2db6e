//! User namespaces, end to end: GPU containers whose root is not host root,
//! with `oci-nvidia-hook prestart` as their hook, on the simulated 4-GPU
//! host of tests/runtimes.rs (NVIDIA's real 535 user-space files).
//!
//! Two shapes, which the hook tells apart (src/inject/userns.rs):
//!
//! - **A root runtime with a user namespace** (`config.json` with a `user`
//!   namespace and uid/gid mappings; root Podman's `--uidmap`; Kubernetes
//!   user namespaces). The container's /dev is a tmpfs of its user
//!   namespace, where no device node can be opened, so the hook bind-mounts
//!   the host's nodes instead of mknod. The hook itself is host root, so it
//!   still grants the nodes in the device cgroup the runtime made (without
//!   that rule they open with EPERM, and CUDA fails). Files it creates in
//!   the container belong to the container's root (host id
//!   [`CONTAINER_ROOT`] here), not to host root, which the container's user
//!   namespace cannot represent.
//! - **Rootless Podman**, run here as `nobody`: Podman, the runtime and the
//!   hook all run in the user's own user namespace, and `config.json` has no
//!   `user` namespace at all. No device cgroup exists (cgroup v1, no
//!   privileges) and none can be written: the hook says so in one info line,
//!   bind-mounts the nodes and injects the libraries as usual.
//!
//! In every case the container must see the GPU's nodes (a MIG device's
//! capability nodes too) bind-mounted with the right numbers, open them with
//! ENXIO (allowed; no driver answers), find the libraries through its own
//! loader cache, and, on the real host, load libcuda (`cuDriverGetVersion`
//! = 12020) and run nvidia-smi to its "no driver" failure. The hook's files
//! in the rootfs must belong to the container's root.
//!
//! The rootless runs need the hook binary and the simulated host (both under
//! the target directory) readable by `nobody`; a probe says so loudly first.
//!
//! Run as root: `make test`, or
//! `cargo test --features _test_as_root --test rootless -- --nocapture`.
//! Needs runc, crun, podman, unshare, umount, mount, setpriv and the user
//! `nobody`; any missing one fails the test, naming it.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harness::project::hook_binary;
use harness::runtime::bundle::{
    self, chown_tree, copy_template, template_rootfs, write_hook_config, write_hooks_dir,
    BundleExtras, Hook, Scenario,
};
use harness::runtime::cleanup::assert_no_mounts_under;
use harness::runtime::expected::{node_specs, NodeSpec};
use harness::runtime::injected::{assert_injected, Expected};
use harness::runtime::oci_config::CONTAINER_SCRIPT;
use harness::runtime::prepared::prepare;
use harness::runtime::process::run_bounded;
use harness::runtime::run::{serial, Run, RunFiles, Serial, RUN_LIMIT};
use harness::runtime::runtimes::{podman_run_args, require_tool, Runtime};
use harness::simhost::{Fixture, GpuFacts, MigFacts, SimHost};
use serde_json::{json, Value};

/// The host uid and gid of the container's root in the root-run user
/// namespace scenarios (container ids 0..65536 → host 200000..265536);
/// apart from the 100000 range `useradd` gives the first regular user.
const CONTAINER_ROOT: u32 = 200_000;
const ID_COUNT: u32 = 65_536;

/// The unprivileged user rootless Podman runs as: it exists everywhere and
/// needs no /etc/subuid entry (Podman then maps it alone, as the
/// container's root).
const ROOTLESS_USER: &str = "nobody";

/// The hook's info lines (src/hook/mod.rs).
const SKIP_LINE: &str = "user namespace: skipping the device cgroup, bind-mounting device nodes";
const BIND_LINE: &str = "user namespace: bind-mounting device nodes";

fn host() -> SimHost {
    let host = SimHost::shared(Fixture::real(4));
    // The template image is built once per test binary with the driver root
    // of the first host asking: let that be the real one, whose nvidia-smi
    // and libcuda need their system libraries copied in.
    template_rootfs(&host);
    host
}

/// The MIG-flavoured host (mock NVML, stand-in libraries) and its first
/// MIG device (GPU 0's), with the image built for the real host.
fn mig_host() -> (SimHost, MigFacts) {
    host();
    let host = SimHost::shared(Fixture::synthetic(4).mig());
    let mig = host
        .facts
        .mig
        .first()
        .cloned()
        .unwrap_or_else(|| panic!("the MIG host lists no MIG device: {:?}", host.facts));
    (host, mig)
}

/// GPU index 1 (its minor is not 1) and, as a decoy, GPU index 0.
fn gpu_and_decoy(host: &SimHost) -> (GpuFacts, GpuFacts) {
    let gpus = host.facts.gpus.clone();
    let pick = |index| {
        gpus.iter()
            .find(|g| g.index == index)
            .unwrap_or_else(|| panic!("no GPU index {index} on the simulated host"))
            .clone()
    };
    (pick(1), pick(0))
}

// ---------------------------------------------------------------- ownership

/// The owner (uid, gid) of `path` itself, not of what a link points to.
fn owner(path: &Path) -> (u32, u32) {
    let meta =
        std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("lstat {}: {e}", path.display()));
    (meta.uid(), meta.gid())
}

/// The files the hook creates in the rootfs (the loader cache, its
/// ld.so.conf.d entry, a SONAME link and a mount target) belong to the
/// container's root, host ids `root`.
fn assert_created_by(run: &Run, root: (u32, u32)) {
    let ctx = run.describe();
    for rel in [
        "etc/ld.so.cache",
        "etc/ld.so.conf.d/000-oci-nvidia-hook.conf",
        "usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "usr/bin/nvidia-smi",
    ] {
        assert_eq!(
            owner(&run.rootfs.join(rel)),
            root,
            "/{rel} should belong to the container's root:{ctx}"
        );
    }
}

// ---------------------------------------------------------------- assertions

/// How the device cgroup was handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cgroup {
    /// A root runtime's container: the hook granted its nodes.
    Granted,
    /// Rootless: there is none to write, and the hook says so.
    Skipped,
}

/// What a run must show.
struct Expect {
    /// Exactly these nodes, bind-mounted, opening with ENXIO.
    nodes: Vec<NodeSpec>,
    /// A GPU node the runtime bound without a cgroup rule: EPERM.
    decoy: Option<u32>,
    cgroup: Cgroup,
    /// The host has NVIDIA's real libraries (not the MIG host's stand-ins):
    /// libcuda answers and nvidia-smi runs to its "no driver" failure.
    real_libraries: bool,
}

/// A MIG device's nodes: its parent GPU's, and its GPU and compute
/// instances' access capabilities under /dev/nvidia-caps.
fn mig_node_specs(host: &SimHost, mig: &MigFacts) -> Vec<NodeSpec> {
    let caps = host.facts.caps_major;
    let mut nodes = node_specs(host, &[mig.gpu_minor]);
    for minor in [mig.gi_access_minor, mig.ci_access_minor] {
        nodes.push((format!("/dev/nvidia-caps/nvidia-cap{minor}"), (caps, minor)));
    }
    nodes
}

/// The container got what [`assert_injected`] judges, with the expected
/// nodes as bind-mounted host nodes (not made: a user namespace's /dev
/// cannot have its own), no other node but the decoy, denied; the hook's
/// log says what it did about the user namespace and the cgroup, once.
fn assert_injected_in_user_namespace(run: &Run, host: &SimHost, expect: &Expect) {
    assert_injected(
        run,
        host,
        &Expected {
            nodes: &expect.nodes,
            real_libraries: expect.real_libraries,
        },
    );
    let report = &run.report;
    let ctx = run.describe();
    for (path, _) in &expect.nodes {
        // Bound, not made: a mount of its own, usable (not nodev).
        let mount = report
            .mounts
            .iter()
            .find(|m| m.starts_with(&format!("{path} ")))
            .unwrap_or_else(|| panic!("{path} is not a bind mount:{ctx}"));
        assert!(
            !mount.contains("nodev"),
            "{path} is mounted nodev: {mount}{ctx}"
        );
    }
    let decoy = expect.decoy.map(|minor| format!("/dev/nvidia{minor}"));
    for (path, node) in &report.nodes {
        if node.kind != 'c' || expect.nodes.iter().any(|(p, _)| p == path) {
            continue;
        }
        assert_eq!(Some(path), decoy.as_ref(), "{path} was not requested:{ctx}");
        assert_eq!(
            node.open.as_deref(),
            Some("EPERM"),
            "the decoy {path} has no cgroup rule and must be denied:{ctx}"
        );
    }
    if let Some(decoy) = &decoy {
        assert!(
            report.nodes.contains_key(decoy),
            "the runtime's decoy {decoy} is missing:{ctx}"
        );
    }
    assert_hook_log(run, expect);
}

/// The hook logged once what it did about the user namespace and the
/// device cgroup, and its summary names the expected nodes.
fn assert_hook_log(run: &Run, expect: &Expect) {
    let ctx = run.describe();
    let log = run
        .hook_log
        .as_deref()
        .unwrap_or_else(|| panic!("the hook wrote no log:{ctx}"));
    let count = |needle: &str| log.lines().filter(|l| l.contains(needle)).count();
    let (line, absent) = match expect.cgroup {
        Cgroup::Skipped => (SKIP_LINE, BIND_LINE),
        Cgroup::Granted => (BIND_LINE, SKIP_LINE),
    };
    assert_eq!(count(line), 1, "the hook should log {line:?} once:{ctx}");
    assert_eq!(count(absent), 0, "the hook logged {absent:?}:{ctx}");
    let granted = count("device cgroup: V");
    match expect.cgroup {
        Cgroup::Granted => assert_eq!(granted, 1, "no device cgroup was granted:{ctx}"),
        Cgroup::Skipped => assert_eq!(granted, 0, "a device cgroup was written:{ctx}"),
    }
    let summary = format!("injected {} device nodes", expect.nodes.len());
    assert!(
        log.lines()
            .any(|l| l.contains("info:") && l.contains(&summary)),
        "no summary line {summary:?}:{ctx}"
    );
}

// ---------------------------------------------------------------- root runtimes, user namespace

/// Turns a prepared bundle's container into one with a user namespace: the
/// mappings, the rootfs and /out owned by the container's root, and a decoy
/// GPU node bind-mounted by the runtime (no mknod in a user namespace)
/// without a device-cgroup rule.
fn into_user_namespace(bundle: &Path, rootfs: &Path, decoy: &Path) {
    bundle::into_user_namespace(bundle, rootfs, CONTAINER_ROOT, ID_COUNT);
    let path = bundle.join("config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let decoy_name = decoy.file_name().unwrap().to_str().unwrap();
    config["mounts"].as_array_mut().expect("mounts").push(
        json!({"destination": format!("/dev/{decoy_name}"), "type": "bind",
                     "source": decoy, "options": ["bind", "nosuid", "noexec"]}),
    );
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
}

/// A root runtime's run of a bundle turned into a user namespace's
/// (`config.json` with mappings), `restarts` more runs on the same rootfs.
fn user_namespace(
    runtime: Runtime,
    host: &SimHost,
    name: &str,
    env: &[(&str, &str)],
    expect: &Expect,
    restarts: u32,
) {
    let serial = serial();
    let name = format!("userns-{name}-{}", runtime.name());
    let prepared = prepare(
        &serial,
        &Scenario {
            name: &name,
            runtime,
            host,
            env,
            hook: Hook::Prestart,
            decoy_minors: &[],
            decoys: &[],
            reuse_rootfs: false,
            prepare: None,
        },
        &BundleExtras::default(),
    );
    let decoy = expect.decoy.expect("a decoy GPU node");
    let decoy_node = PathBuf::from(&host.facts.dev_root).join(format!("dev/nvidia{decoy}"));
    into_user_namespace(&prepared.bundle, &prepared.rootfs, &decoy_node);

    for attempt in 0..=restarts {
        let id = format!("{}-{attempt}", prepared.id);
        let _ = std::fs::remove_file(&prepared.hook_log);
        let started = Instant::now();
        let finished = run_bounded(prepared.command_for(&id), RUN_LIMIT);
        prepared.delete(&id);
        let run = prepared.finish(finished, started.elapsed());
        eprintln!(
            "{name} run {attempt}: container run took {} ms",
            run.elapsed.as_millis()
        );
        assert_injected_in_user_namespace(&run, host, expect);
        assert_created_by(&run, (CONTAINER_ROOT, CONTAINER_ROOT));
    }
}

/// `NVIDIA_VISIBLE_DEVICES=1` (GPU index 1, whose minor is 2) with GPU
/// index 0's node as the decoy.
fn gpu_in_user_namespace(runtime: Runtime, restarts: u32) {
    let host = host();
    let (gpu, decoy) = gpu_and_decoy(&host);
    let expect = Expect {
        nodes: node_specs(&host, &[gpu.minor]),
        decoy: Some(decoy.minor),
        cgroup: Cgroup::Granted,
        real_libraries: true,
    };
    let env = [("NVIDIA_VISIBLE_DEVICES", "1")];
    user_namespace(runtime, &host, "gpu", &env, &expect, restarts);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn user_namespace_runc_v1() {
    // Twice: the second run finds the first one's targets, links and cache.
    gpu_in_user_namespace(Runtime::RuncV1, 1);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn user_namespace_runc_v2() {
    gpu_in_user_namespace(Runtime::RuncV2, 0);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn user_namespace_crun_v1() {
    gpu_in_user_namespace(Runtime::CrunV1, 0);
}

/// A MIG device by UUID: its access-capability nodes are bound under
/// /dev/nvidia-caps too (a directory the hook creates in the container's
/// /dev as its root), and NVML (the mock) runs in the hook's child.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn user_namespace_mig_runc_v1() {
    let (host, mig) = mig_host();
    let gpu_minor = mig.gpu_minor;
    let decoy = host
        .facts
        .gpus
        .iter()
        .map(|g| g.minor)
        .find(|m| *m != gpu_minor)
        .expect("another GPU");
    let expect = Expect {
        nodes: mig_node_specs(&host, &mig),
        decoy: Some(decoy),
        cgroup: Cgroup::Granted,
        real_libraries: false,
    };
    let env = [("NVIDIA_VISIBLE_DEVICES", mig.uuid.as_str())];
    user_namespace(Runtime::RuncV1, &host, "mig", &env, &expect, 0);
}

// ---------------------------------------------------------------- podman

/// How Podman runs.
struct Podman<'a> {
    name: &'a str,
    /// [`Runtime::Podman`] (runc), or [`Runtime::PodmanCrunV1`] (crun, in
    /// the pure cgroup v1 namespace crun needs).
    runtime: Runtime,
    /// Rootless as this (uid, gid), or `None`: as root with `--uidmap`
    /// giving the container a user namespace ([`CONTAINER_ROOT`]).
    rootless: Option<(u32, u32)>,
    /// The container's NVIDIA_* variables.
    env: &'a [(&'a str, &'a str)],
}

/// `nobody`'s uid and gid, loudly.
fn rootless_user() -> (u32, u32) {
    let user = nix::unistd::User::from_name(ROOTLESS_USER)
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("no user `{ROOTLESS_USER}` to run rootless Podman as"));
    (user.uid.as_raw(), user.gid.as_raw())
}

/// Where Podman's bundles live: apart from tests/runtimes.rs's.
fn podman_dir(name: &str) -> PathBuf {
    harness::project::target_tmpdir()
        .join("rootless")
        .join(name)
}

/// The rootless Podman's XDG_RUNTIME_DIR: short, because with a long one
/// (say, under the target directory) conmon's exit and attach paths
/// overflow and every run waits out Podman's 20 s conmon timeout. Named by
/// the test alone, so that the next run removes what a failed one left
/// (conmon's own cleanup may still be writing there after a failed start).
fn podman_runtime_dir(name: &str) -> PathBuf {
    PathBuf::from(format!("/tmp/onh-{name}"))
}

/// A Podman command line: rootless ones run as the user, with a clean
/// environment, a HOME in `dir` and an XDG_RUNTIME_DIR of their own (so
/// Podman's storage and its pause process are this test's alone), through
/// `setpriv` so that the runtime's private mount namespace can be made as
/// root first.
fn podman_command(spec: &Podman, dir: &Path, args: &[String]) -> Command {
    let mut argv: Vec<String> = Vec::new();
    if let Some((uid, gid)) = spec.rootless {
        argv.extend([
            "setpriv".into(),
            format!("--reuid={uid}"),
            format!("--regid={gid}"),
            "--clear-groups".into(),
            "env".into(),
            "-i".into(),
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            format!("HOME={}", dir.join("home").display()),
            format!(
                "XDG_RUNTIME_DIR={}",
                podman_runtime_dir(spec.name).display()
            ),
        ]);
    }
    argv.extend(spec.runtime.podman_globals(&dir.join("hooks.d")));
    argv.extend(args.iter().cloned());
    let mut cmd = spec.runtime.in_namespace(argv);
    cmd.current_dir("/");
    cmd
}

/// Removes the container, then ends the rootless Podman's pause process
/// (it holds the user namespace; its pid file is in this run's
/// XDG_RUNTIME_DIR, so it is this test's own) and removes that directory,
/// even when the test failed.
struct PodmanCleanup<'a> {
    spec: &'a Podman<'a>,
    dir: PathBuf,
    id: String,
}

impl Drop for PodmanCleanup<'_> {
    fn drop(&mut self) {
        let args = ["rm", "-f", "--ignore", &self.id].map(String::from);
        let mut cmd = podman_command(self.spec, &self.dir, &args);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        let _ = run_bounded(cmd, Duration::from_secs(30));
        let Some((uid, _)) = self.spec.rootless else {
            return;
        };
        let runtime_dir = podman_runtime_dir(self.spec.name);
        let pid = std::fs::read_to_string(runtime_dir.join("libpod/tmp/pause.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok());
        // Only a live process of the rootless user (not a recycled pid).
        let ours = |pid: i32| {
            std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == uid)
                && std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.contains("catatonit") || c.contains("podman"))
        };
        if let Some(pid) = pid.filter(|pid| ours(*pid)) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        if runtime_dir.exists() {
            assert_no_mounts_under(&runtime_dir);
            let _ = std::fs::remove_dir_all(&runtime_dir);
        }
        // Podman's per-user scratch directory, when it is empty (rmdir).
        let scratch = PathBuf::from(format!("/tmp/containers-user-{uid}"));
        let _ = std::fs::remove_dir(scratch.join("containers"));
        let _ = std::fs::remove_dir(scratch);
    }
}

/// Makes Podman's run directory `dir` afresh: `out/`, `home/`, a copy of
/// the template rootfs, the hook's config and log, and the hooks dir with
/// the project's hooks.d file (the binary and its config rewritten).
/// Returns the hook's config.
fn podman_run_dir(host: &SimHost, dir: &Path) -> PathBuf {
    if dir.exists() {
        assert_no_mounts_under(dir);
        std::fs::remove_dir_all(dir).unwrap_or_else(|e| panic!("remove {}: {e}", dir.display()));
    }
    for sub in ["out", "home"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    copy_template(host, &dir.join("rootfs"));
    let hook_config = dir.join("hook-config.toml");
    write_hook_config(host, &hook_config, &dir.join("hook.log"), "debug");
    write_hooks_dir(&dir.join("hooks.d"), &hook_config);
    hook_config
}

/// Makes a rootless run's files the user's (Podman's storage, the image,
/// the hook's log) and its XDG_RUNTIME_DIR, then checks, loudly, that the
/// hook run as the user reaches its binary and the simulated host.
fn prepare_rootless(spec: &Podman, host: &SimHost, dir: &Path, hook_config: &Path) {
    let Some((uid, gid)) = spec.rootless else {
        return;
    };
    chown_tree(dir, uid, gid);
    let runtime_dir = podman_runtime_dir(spec.name);
    if runtime_dir.exists() {
        assert_no_mounts_under(&runtime_dir);
        std::fs::remove_dir_all(&runtime_dir).unwrap();
    }
    std::fs::create_dir(&runtime_dir)
        .unwrap_or_else(|e| panic!("create {}: {e}", runtime_dir.display()));
    std::fs::set_permissions(&runtime_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    chown_tree(&runtime_dir, uid, gid);
    let mut probe = Command::new(hook_binary());
    probe
        .args(["--config", &hook_config.display().to_string(), "info"])
        .env_clear()
        .uid(uid)
        .gid(gid);
    let probed = run_bounded(probe, Duration::from_secs(30));
    assert!(
        probed.status.is_some_and(|s| s.success()),
        "as {ROOTLESS_USER}, `{} info` fails: the hook binary or the simulated host under {} \
         is not readable by unprivileged users:\n{}{}",
        hook_binary().display(),
        host.dir.display(),
        probed.stdout,
        probed.stderr
    );
}

/// Runs `/checker` and nvidia-smi in a Podman container through the hook
/// (the project's hooks.d file, with the binary and its config rewritten).
fn run_podman(_serial: &Serial, host: &SimHost, spec: &Podman) -> Run {
    spec.runtime.require_tools();
    require_tool("setpriv");
    let dir = podman_dir(spec.name);
    let hook_config = podman_run_dir(host, &dir);
    let rootfs = dir.join("rootfs");
    let mut extra = Vec::new();
    match spec.rootless {
        Some(_) => prepare_rootless(spec, host, &dir, &hook_config),
        None => {
            let map = format!("0:{CONTAINER_ROOT}:{ID_COUNT}");
            extra.extend(["--uidmap".into(), map.clone(), "--gidmap".into(), map]);
            chown_tree(&rootfs, CONTAINER_ROOT, CONTAINER_ROOT);
            chown_tree(&dir.join("out"), CONTAINER_ROOT, CONTAINER_ROOT);
        }
    }
    let id = format!("onh-{}-{}", spec.name, std::process::id());
    let args = podman_run_args(
        &id,
        &dir.join("out"),
        spec.env,
        &extra,
        &rootfs,
        &["/bin/sh", "-c", CONTAINER_SCRIPT],
    );

    let guard = PodmanCleanup {
        spec,
        dir: dir.clone(),
        id,
    };
    let started = Instant::now();
    let finished = run_bounded(podman_command(spec, &dir, &args), RUN_LIMIT);
    let elapsed = started.elapsed();
    drop(guard);

    let run = Run::collect(
        spec.runtime,
        spec.name,
        finished,
        elapsed,
        RunFiles {
            bundle: &dir,
            rootfs: &rootfs,
            hook_log: &dir.join("hook.log"),
        },
    );
    eprintln!(
        "{}: container run took {} ms",
        run.name,
        run.elapsed.as_millis()
    );
    run
}

fn rootless_podman(runtime: Runtime) {
    let serial = serial();
    let host = host();
    let (gpu, _) = gpu_and_decoy(&host);
    let user = rootless_user();
    let oci = if runtime == Runtime::PodmanCrunV1 {
        "crun"
    } else {
        "runc"
    };
    let name = format!("rootless-podman-{oci}");
    let spec = Podman {
        name: &name,
        runtime,
        rootless: Some(user),
        env: &[("NVIDIA_VISIBLE_DEVICES", "1")],
    };
    let run = run_podman(&serial, &host, &spec);
    let expect = Expect {
        nodes: node_specs(&host, &[gpu.minor]),
        decoy: None,
        cgroup: Cgroup::Skipped,
        real_libraries: true,
    };
    assert_injected_in_user_namespace(&run, &host, &expect);
    // Podman maps the user alone: the container's root is the user.
    assert_created_by(&run, user);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn rootless_podman_runc() {
    rootless_podman(Runtime::Podman);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn rootless_podman_crun_v1() {
    rootless_podman(Runtime::PodmanCrunV1);
}

/// A MIG device, rootless: the hook runs NVML (the mock) unprivileged.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn rootless_podman_mig() {
    let serial = serial();
    let (host, mig) = mig_host();
    let user = rootless_user();
    let spec = Podman {
        name: "rootless-podman-mig",
        runtime: Runtime::Podman,
        rootless: Some(user),
        env: &[("NVIDIA_VISIBLE_DEVICES", mig.uuid.as_str())],
    };
    let run = run_podman(&serial, &host, &spec);
    let expect = Expect {
        nodes: mig_node_specs(&host, &mig),
        decoy: None,
        cgroup: Cgroup::Skipped,
        real_libraries: false,
    };
    assert_injected_in_user_namespace(&run, &host, &expect);
    assert_created_by(&run, user);
}

/// Root Podman with `--uidmap`: a user namespace the runtime was told about
/// on the command line, the hook still host root.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn user_namespace_podman_uidmap() {
    let serial = serial();
    let host = host();
    let (gpu, _) = gpu_and_decoy(&host);
    let spec = Podman {
        name: "userns-podman-uidmap",
        runtime: Runtime::Podman,
        rootless: None,
        env: &[("NVIDIA_VISIBLE_DEVICES", "1")],
    };
    let run = run_podman(&serial, &host, &spec);
    let expect = Expect {
        nodes: node_specs(&host, &[gpu.minor]),
        decoy: None,
        cgroup: Cgroup::Granted,
        real_libraries: true,
    };
    assert_injected_in_user_namespace(&run, &host, &expect);
    assert_created_by(&run, (CONTAINER_ROOT, CONTAINER_ROOT));
}

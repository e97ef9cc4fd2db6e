//! The shipped binary (`make build`: linked for glibc 2.17, docs/install.md)
//! on an old system: a Debian 11 (bullseye, glibc 2.31) root made once by
//! `debootstrap` (with runc) into `/var/cache/oci-nvidia-hook/bullseye` and
//! entered with `pivot_root` in a private mount namespace, as
//! harness::debroot makes and enters every Debian root. There,
//! on a simulated real-535 host bound in at its own path:
//!
//! - `--version`, `info`, `list`, `cdi generate` and `doctor` run;
//! - bullseye's own runc (1.0.0-rc93) starts a container with the binary as
//!   its prestart hook, and the container gets its nodes, the loader cache
//!   and a libcuda that answers (the checker, as tests/runtimes.rs judges).
//!
//! The container's rootfs and its checker are the other suites' (built on
//! this host by integration/rootfs): what is old here is the system the hook
//! and runc run on. The fixtures build on bullseye too: integration/rootfs
//! (and the checker it compiles) runs there with bullseye's gcc and glibc. Every mount lives in the namespace and vanishes with
//! it. Needs root, debootstrap (integration/install-deps) and the shipped
//! binary (`make build`; `make test` builds it first):
//! `cargo test --features _test_as_root --test bullseye`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use harness::debroot::{DebRoot, Entry};
use harness::glibc;
use harness::mounts::{assert_mounts_unchanged, host_mounts};
use harness::project::{hook_binary, repo, target_tmpdir};
use harness::runtime::bundle::{Hook, Scenario};
use harness::runtime::container::run_through;
use harness::runtime::injected::assert_every_gpu_injected;
use harness::runtime::oci_config::path_str;
use harness::runtime::process::{run_bounded, Finished};
use harness::runtime::run::serial;
use harness::runtime::runtimes::Runtime;
use harness::simhost::{require_root, Fixture, SimHost};

/// The binary `make build` ships, checked to need no newer glibc than the floor.
fn shipped_binary() -> PathBuf {
    glibc::shipped_binary("x86_64-unknown-linux-musl", "build")
}

/// The bullseye root with runc, and what integration/rootfs needs to
/// build a test image there (made by debootstrap the first time).
fn bullseye_root() -> DebRoot {
    DebRoot::ensure("bullseye", &["runc", "gcc", "libc6-dev", "busybox-static"])
}

/// The command that runs `argv` inside the bullseye root: the repository's
/// target directory (simulated hosts, bundles) at its own path, the
/// shipped binary over the test binary's path (which bundles name as
/// their hook).
fn in_bullseye(shipped: &Path, argv: &[&str]) -> Command {
    let target = hook_binary()
        .ancestors()
        .nth(2)
        .expect("the target directory above target/debug/oci-nvidia-hook");
    let mut entry = Entry::binding(&[target]);
    entry
        .file_binds
        .push((shipped.to_path_buf(), hook_binary().to_path_buf()));
    bullseye_root().command(&entry, argv)
}

/// Runs `argv` in the bullseye root, bounded in time.
fn run_in_bullseye(shipped: &Path, argv: &[&str]) -> Finished {
    let finished = run_bounded(in_bullseye(shipped, argv), Duration::from_secs(60));
    assert!(!finished.timed_out, "{argv:?} in bullseye was killed");
    finished
}

/// The shipped binary's command in bullseye (at the test binary's path,
/// where the setup bound it), with the host's config; stdout on success.
fn hook_in_bullseye(shipped: &Path, host: &SimHost, args: &[&str]) -> Finished {
    let (bin, config) = (path_str(hook_binary()), path_str(&host.config));
    let mut argv = vec![bin.as_str(), "--config", config.as_str()];
    argv.extend(args);
    run_in_bullseye(shipped, &argv)
}

/// The root really is bullseye (glibc 2.31, runc 1.0.0-rc93), and the
/// shipped binary's commands run there and answer as on this host.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn commands_run_on_bullseye() {
    require_root();
    let _serial = serial();
    let shipped = shipped_binary();
    bullseye_root();
    let host = SimHost::shared(Fixture::real(4));
    let before = host_mounts();

    let os =
        run_in_bullseye(&shipped, &["cat", "/etc/debian_version"]).succeeded("cat in bullseye");
    assert!(os.starts_with("11."), "not bullseye: {os}");
    let libc = run_in_bullseye(&shipped, &["/lib/x86_64-linux-gnu/libc.so.6"]);
    assert!(
        libc.stdout.contains("release version 2.31"),
        "{}",
        libc.stdout
    );
    let runc =
        run_in_bullseye(&shipped, &["runc", "--version"]).succeeded("runc --version in bullseye");
    assert!(
        runc.contains("1.0.0~rc93") || runc.contains("1.0.0-rc93"),
        "{runc}"
    );

    let version =
        hook_in_bullseye(&shipped, &host, &["--version"]).succeeded("--version in bullseye");
    assert!(version.starts_with("oci-nvidia-hook "), "{version}");
    let info = hook_in_bullseye(&shipped, &host, &["info", "--json"]).succeeded("info in bullseye");
    let info: serde_json::Value = serde_json::from_str(&info).expect("info --json");
    assert_eq!(
        info,
        host.json(&["info", "--json"]),
        "info differs from this host's"
    );
    let list = hook_in_bullseye(&shipped, &host, &["list"]).succeeded("list in bullseye");
    assert_eq!(
        list,
        host.stdout(&["list"]),
        "list differs from this host's"
    );
    let cdi = hook_in_bullseye(&shipped, &host, &["cdi", "generate", "--output", "-"])
        .succeeded("cdi generate in bullseye");
    assert!(cdi.contains("nvidia.com/gpu"), "{cdi}");
    assert_eq!(
        cdi,
        host.stdout(&["cdi", "generate", "--output", "-"]),
        "the CDI spec differs from this host's"
    );
    let doctor = hook_in_bullseye(&shipped, &host, &["doctor"]);
    let code = doctor.status.and_then(|s| s.code());
    assert!(
        matches!(code, Some(0 | 1)) && !doctor.stdout.is_empty(),
        "doctor in bullseye: {code:?}\n{}\n{}",
        doctor.stdout,
        doctor.stderr
    );
    assert!(!doctor.stderr.contains("GLIBC_"), "{}", doctor.stderr);
    assert_mounts_unchanged(&before, "the bullseye commands");
}

/// Bullseye's runc runs the shipped binary as a prestart hook: the
/// container gets its four GPUs' nodes, the loader cache and libcuda.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn bullseye_runc_runs_the_prestart_hook() {
    let serial = serial();
    let shipped = shipped_binary();
    bullseye_root();
    let host = SimHost::shared(Fixture::real(4));
    let before = host_mounts();
    let scenario = Scenario {
        name: "bullseye_prestart",
        runtime: Runtime::RuncV1,
        host: &host,
        env: &[("NVIDIA_VISIBLE_DEVICES", "all")],
        hook: Hook::Prestart,
        decoy_minors: &[],
        decoys: &[],
        reuse_rootfs: false,
        prepare: None,
    };
    // runc's state is under the bundle, the same path inside and out: the
    // harness's drop guard deletes what is left with this host's runc.
    let run = run_through(&serial, &scenario, |argv| {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        in_bullseye(&shipped, &argv)
    });
    assert_every_gpu_injected(&run, &host);
    drop(serial);
    assert_mounts_unchanged(&before, "the bullseye container");
}

/// The test image builds on glibc 2.31: integration/rootfs runs in the
/// bullseye root with bullseye's gcc (the checker needs `-ldl` there and
/// has no `strerrorname_np`; bullseye's ldconfig lists ABI tags), and its
/// checker runs under the image's own loader.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn the_test_image_builds_on_bullseye() {
    require_root();
    let _serial = serial();
    let root = bullseye_root();
    // The image's parent is bound in: integration/rootfs replaces the image
    // directory itself, which a mount point would not let it.
    let parent = target_tmpdir().join("bullseye-rootfs");
    let _ = std::fs::remove_dir_all(&parent);
    std::fs::create_dir_all(&parent).expect("create the image's directory");
    let out = parent.join("image");
    let integration = repo().join("integration");
    let script = path_str(&integration.join("rootfs"));
    let image = path_str(&out);
    let built = run_bounded(
        root.command(
            &Entry::binding(&[&integration, &parent]),
            &[&script, &image],
        ),
        Duration::from_secs(120),
    );
    assert!(
        !built.timed_out,
        "integration/rootfs in bullseye was killed"
    );
    let status = built.status.and_then(|s| s.code());
    assert_eq!(
        status,
        Some(0),
        "integration/rootfs in bullseye failed:\n{}\n{}",
        built.stdout,
        built.stderr
    );
    assert!(
        built.stderr.contains("rootfs: done"),
        "integration/rootfs in bullseye did not finish: {}",
        built.stderr
    );
    let checker = std::fs::read(out.join("checker")).expect("the checker built in bullseye");
    assert!(
        !checker
            .windows(b"GLIBC_2.34".len())
            .any(|w| w == b"GLIBC_2.34"),
        "the checker built in bullseye names glibc 2.34"
    );
    std::fs::remove_dir_all(&parent).expect("remove the bullseye-built image");
}

//! The engines hosts run now, from a Debian 13 (trixie) root made once by
//! debootstrap into `/var/cache/oci-nvidia-hook/trixie` and entered with
//! `pivot_root` (harness::debroot): Docker 26 and Podman 5 on a simulated
//! 4-GPU host with NVIDIA's real 535 libraries.
//!
//! - Docker 26: `--gpus all` and `--gpus '"device=1"'` (this binary as
//!   `nvidia-container-runtime-hook` on dockerd's PATH); `--device
//!   nvidia.com/gpu=all` and `=1` from our spec, with `features.cdi` set by
//!   our `nvidia-ctk runtime configure --runtime=docker --cdi.enabled`;
//!   `--runtime nvidia` (our wrapper, as our `nvidia-ctk runtime configure
//!   --runtime=docker` registers it) in legacy mode (`NVIDIA_VISIBLE_DEVICES=1`)
//!   and in CDI mode (`NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=2`, from our spec).
//! - Podman 5: the hooks.d hook and CDI on runc; crun 1.21 on cgroup v2.
//!
//! Each container's `/checker` reports the nodes (ENXIO: the device cgroup
//! allows; EPERM: it denies), libcuda's answer and nvidia-smi's. Needs
//! root and debootstrap (integration/install-deps); the first run makes
//! the root (about a minute and a half here):
//! `cargo test --features _test_as_root --test trixie`.

use std::fs;
use std::time::{Duration, Instant};

use harness::debroot::{trixie, Cgroups, Entry};
use harness::mounts::{assert_mounts_unchanged, host_mounts};
use harness::project::{hook_binary, repo};
use harness::runtime::bundle::write_hooks_dir;
use harness::runtime::bundle::{
    copy_template, fresh_work_dir, template_rootfs, work_root, write_hook_config,
};
use harness::runtime::cleanup::{assert_left_as_found, remove_tree_safely};
use harness::runtime::daemons::{checker_script, collect_run, docker_with_cdi, our_spec};
use harness::runtime::host_state::{listing_diff, tree_listing};
use harness::runtime::injected::{assert_gpus, gpu};
use harness::runtime::oci_config::path_str;
use harness::runtime::process::run_bounded;
use harness::runtime::run::{serial, Run, RUN_LIMIT};
use harness::runtime::runtimes::podman_run_args;
use harness::simhost::{require_root, Fixture, SimHost};

/// The image the Docker containers run: the template rootfs, imported.
const IMAGE: &str = "onh-trixie:test";

fn host() -> SimHost {
    SimHost::shared(Fixture::real(4))
}

/// Every way Docker 26 reaches GPUs, on one pair of trixie daemons.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn docker_26_gpus_cdi_and_runtime() {
    require_root();
    let _serial = serial();
    let root = trixie();
    let host = host();
    let (mounts_before, driver_before) = (host_mounts(), tree_listing(&host.dir));
    let (work, hook_config, hook_log) = fresh_work_dir(&host, "trixie-docker");
    let daemon_json = work.join("daemon.json");
    fs::write(&daemon_json, "{\"log-level\": \"info\"}\n").unwrap();
    let daemons = docker_with_cdi(&work, &hook_config, &daemon_json, &host, &root);
    let written: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&daemon_json).unwrap()).unwrap();
    assert_eq!(written["features"]["cdi"], true, "{written}");
    daemons.assert_server("26.", true);
    daemons.import_rootfs(&template_rootfs(&host), IMAGE);
    let minor = |i| gpu(&host, i).minor;
    let run = |name: &str, args: &[&str], decoys: &[u32]| {
        daemons.checker_run(name, args, IMAGE, decoys, &hook_log)
    };

    assert_gpus(
        &run("gpus-all", &["--gpus", "all"], &[]),
        &host,
        &[0, 1, 2, 3],
        &[],
    );
    let one = run("gpus-device-1", &["--gpus", "\"device=1\""], &[minor(0)]);
    assert_gpus(&one, &host, &[1], &[minor(0)]);
    let cdi_all = run("cdi-all", &["--device", "nvidia.com/gpu=all"], &[]);
    assert_gpus(&cdi_all, &host, &[0, 1, 2, 3], &[]);
    let cdi_one = run("cdi-1", &["--device", "nvidia.com/gpu=1"], &[minor(2)]);
    assert_gpus(&cdi_one, &host, &[1], &[minor(2)]);
    let wrapper = run(
        "runtime-nvidia",
        &["--runtime", "nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=1"],
        &[minor(3)],
    );
    assert_gpus(&wrapper, &host, &[1], &[minor(3)]);
    // The runtime daemon.json names (our nvidia-ctk wrote it) in its two
    // modes: legacy for a device index, CDI for a CDI name (`auto`), each
    // seen in what the wrapper logged.
    let logged = |run: &Run| run.hook_log.clone().unwrap_or_default();
    let legacy = logged(&wrapper);
    assert!(
        legacy.contains("mounts written for the runtime") && !legacy.contains("CDI devices"),
        "the wrapper's legacy mode: {legacy}"
    );
    let wrapper_cdi = run(
        "runtime-nvidia-cdi",
        &[
            "--runtime",
            "nvidia",
            "-e",
            "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=2",
        ],
        &[minor(1)],
    );
    assert_gpus(&wrapper_cdi, &host, &[2], &[minor(1)]);
    let cdi_log = logged(&wrapper_cdi);
    assert!(
        cdi_log.contains("CDI devices nvidia.com/gpu=2"),
        "the wrapper's CDI mode: {cdi_log}"
    );

    let tag = daemons.tag.clone();
    drop(daemons);
    assert_left_as_found(
        &tag,
        &mounts_before,
        &host.dir,
        &driver_before,
        "after the trixie daemons stopped",
    );
    remove_tree_safely(&work);
}

/// One Podman 5 run in the trixie root: its storage under the run's
/// directory (the cached root is never written), the spec (when given) in
/// the namespace's `/run/cdi`.
struct PodmanRun<'a> {
    name: &'a str,
    oci: &'a str,
    cgroups: Cgroups,
    env: &'a [(&'a str, &'a str)],
    devices: &'a [&'a str],
    hooks: bool,
    decoys: &'a [u32],
}

fn podman(host: &SimHost, case: &PodmanRun) -> Run {
    let dir = work_root().join("trixie-podman").join(case.name);
    remove_tree_safely(&dir);
    fs::create_dir_all(dir.join("out")).unwrap();
    let rootfs = dir.join("rootfs");
    copy_template(host, &rootfs);
    let (config, log) = (dir.join("hook.toml"), dir.join("hook.log"));
    write_hook_config(host, &config, &log, "debug");
    let spec = our_spec(host, &dir);
    let hooks_dir = dir.join("hooks.d");
    fs::create_dir_all(&hooks_dir).unwrap();
    if case.hooks {
        write_hooks_dir(&hooks_dir, &config);
    }
    let mut argv: Vec<String> = [
        "podman",
        "--runtime",
        case.oci,
        "--cgroup-manager=cgroupfs",
        "--events-backend=file",
        "--root",
        &path_str(&dir.join("storage")),
        "--runroot",
        &path_str(&dir.join("runroot")),
        "--hooks-dir",
        &path_str(&hooks_dir),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Podman 5 drops CAP_MKNOD by default; the decoys need it.
    let mut extra = vec!["--cap-add".to_string(), "MKNOD".into()];
    if case.cgroups == Cgroups::V2 {
        // Here cgroup2 has no controller (v1 holds them all): no pids limit.
        extra.push("--pids-limit=0".into());
    }
    for device in case.devices {
        extra.push("--device".to_string());
        extra.push(format!("nvidia.com/gpu={device}"));
    }
    let script = checker_script(case.decoys);
    let id = format!("onh-trixie-{}-{}", case.name, std::process::id());
    argv.extend(podman_run_args(
        &id,
        &dir.join("out"),
        case.env,
        &extra,
        &rootfs,
        &["/bin/sh", "-c", &script],
    ));
    let mut full = vec![
        "sh".to_string(),
        "-c".into(),
        "mkdir -p /run/cdi && cp \"$0\" /run/cdi/nvidia.yaml && exec \"$@\"".into(),
        path_str(&spec),
    ];
    full.extend(argv);
    let full: Vec<&str> = full.iter().map(String::as_str).collect();
    let mut entry = Entry::binding(&[repo()]);
    entry.cgroups = case.cgroups;
    let cmd = trixie().command(&entry, &full);
    let started = Instant::now();
    let finished = run_bounded(cmd, RUN_LIMIT);
    let elapsed = started.elapsed();
    eprintln!("{}: podman run took {} ms", case.name, elapsed.as_millis());
    let run = collect_run(case.name, finished, elapsed, &dir.join("out"), &log);
    // Podman's storage holds overlay state owned by root: removed by path.
    let _ = std::process::Command::new("rm")
        .arg("-rf")
        .arg(dir.join("storage"))
        .arg(dir.join("runroot"))
        .status();
    run
}

/// Podman 5 with the hooks.d hook and with CDI, on runc and on crun 1.21
/// (cgroup v2: crun refuses the hybrid layout).
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn podman_5_hooks_and_cdi_on_runc_and_crun() {
    require_root();
    let _serial = serial();
    let _ = hook_binary();
    let host = host();
    let (mounts_before, driver_before) = (host_mounts(), tree_listing(&host.dir));
    let version = run_bounded(
        trixie().command(&Entry::binding(&[]), &["podman", "--version"]),
        Duration::from_secs(60),
    );
    assert!(version.stdout.contains("version 5."), "{}", version.stdout);
    let minor = |i| gpu(&host, i).minor;
    for (oci, cgroups) in [("runc", Cgroups::Host), ("crun", Cgroups::V2)] {
        let hooks = podman(
            &host,
            &PodmanRun {
                name: &format!("{oci}-hooks"),
                oci,
                cgroups,
                env: &[("NVIDIA_VISIBLE_DEVICES", "2")],
                devices: &[],
                hooks: true,
                decoys: &[minor(0)],
            },
        );
        assert_gpus(&hooks, &host, &[2], &[minor(0)]);
        let cdi = podman(
            &host,
            &PodmanRun {
                name: &format!("{oci}-cdi"),
                oci,
                cgroups,
                env: &[],
                devices: &["1"],
                hooks: false,
                decoys: &[minor(3)],
            },
        );
        assert_gpus(&cdi, &host, &[1], &[minor(3)]);
    }
    assert_mounts_unchanged(&mounts_before, "after the Podman runs");
    let changed = listing_diff(&driver_before, &tree_listing(&host.dir));
    assert!(
        changed.is_empty(),
        "the simulated host changed: {changed:?}"
    );
    remove_tree_safely(&work_root().join("trixie-podman"));
}

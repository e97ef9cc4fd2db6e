//! `systemctl daemon-reload` under the systemd cgroup driver: NVIDIA's
//! most-reported issue ("Failed to initialize NVML: Unknown Error"), on a
//! real systemd. These machines do not run systemd, so systemd 262 is
//! booted as pid 1 of Debian sid's root (harness::booted, as
//! shared/TESTBED.md describes it), with its containerd 2.1, runc 1.3 and
//! Docker 28.5 as their packaged units start them, Docker on the systemd
//! cgroup driver (each container a `docker-<id>.scope` of systemd's).
//!
//! On a simulated 4-GPU host, one container per path, each running:
//! - the prestart hook (`docker run --gpus device=0`: Docker 28's
//!   `nvidia-container-runtime-hook`, our binary);
//! - the runtime wrapper (`--runtime nvidia`, `NVIDIA_VISIBLE_DEVICES=1`:
//!   the nodes go into the spec);
//! - CDI (`--device nvidia.com/gpu=2`, our spec in `/etc/cdi`);
//! - containerd alone (`ctr run --gpus 1 --runc-systemd-cgroup`, scope
//!   `onh-ctr-gpu.scope`): its prestart hook runs our
//!   `nvidia-container-cli configure`;
//! - the control: the hook path again (`--gpus device=3`) with
//!   `systemd-device-allow = false`, as NVIDIA's hook behaves.
//!
//! (`--cpu-shares 0` for ctr: this cgroup2 tree has no cpu controller, the
//! host's v1 holds it.) Each opens its GPU (ENXIO: the device cgroup allows
//! it, no driver answers) and is denied a decoy node of another GPU
//! (EPERM); the hook's log names the two scopes it told (Docker's and
//! ctr's), over systemd's private socket. Then `systemctl daemon-reload`,
//! after which systemd has attached new device programs to every scope: the
//! four still open their GPU and are still denied the decoy, and the control
//! is denied its own GPU: EPERM, the reproduced issue, which shows the check
//! can fail. systemd's record says why: the hook-path scope's `DeviceAllow`
//! lists its GPU, the control's does not. `doctor`, run inside, warns under
//! the control's config and says the hook reaches systemd under ours. At the end no
//! cgroup, mount or file of the host is left, the host's `/etc` (units,
//! Docker's, containerd's, CDI's and the hook's places) and `/dev/char` are
//! as they were, and the simulated host is unchanged.
//!
//! Needs root and debootstrap (integration/install-deps); the first run
//! makes the sid root: `cargo test --features _test_as_root --test daemon_reload`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use harness::booted::{BootSetup, Booted};
use harness::debroot::sid;
use harness::host_root::checks_with;
use harness::mounts::host_mounts;
use harness::project::{hook_binary, repo};
use harness::runtime::bundle::{copy_template, template_rootfs, work_root, write_hook_config};
use harness::runtime::cleanup::{assert_left_as_found, remove_tree_safely};
use harness::runtime::host_state::tree_listing;
use harness::runtime::injected::gpu;
use harness::runtime::oci_config::{path_str, NVIDIA_MAJOR};
use harness::runtime::run::serial;
use harness::simhost::{require_root, Fixture, SimHost};

/// The image the containers run: the template rootfs, imported.
const IMAGE: &str = "onh-reload:test";
/// Where the hook reads its config inside (Docker's `--gpus` passes none).
const HOOK_CONFIG: &str = "/etc/oci-nvidia-hook/config.toml";

/// How a command runs in a container.
enum Exec {
    /// `docker exec` (its id is the container's).
    Docker,
    /// `ctr task exec` of this task.
    Ctr(&'static str),
}

/// One running container: how it was started, its GPU and a decoy.
struct Container {
    name: &'static str,
    id: String,
    gpu_minor: u32,
    decoy_minor: u32,
    exec: Exec,
}

/// What the checker in `container` says opening `/dev/nvidia<minor>` gives.
fn open_result(booted: &Booted, container: &Container, minor: u32) -> String {
    let out = match container.exec {
        Exec::Docker => booted.ok(&["docker", "exec", &container.id, "/checker"]),
        Exec::Ctr(task) => booted.ok(&[
            "ctr",
            "task",
            "exec",
            "--exec-id",
            "check",
            task,
            "/checker",
        ]),
    };
    let node = format!("node /dev/nvidia{minor} c {NVIDIA_MAJOR}:{minor} ");
    let line = out
        .lines()
        .find(|l| l.starts_with(&node))
        .unwrap_or_else(|| panic!("{}: no {node:?} in:\n{out}", container.name));
    line.rsplit("open=").next().unwrap_or_default().to_string()
}

/// Asserts `container` opens its GPU with `gpu` and its decoy with EPERM
/// (the hook's log, at `log`, shown if not).
fn assert_opens(booted: &Booted, log: &Path, container: &Container, gpu: &str, when: &str) {
    assert_eq!(
        open_result(booted, container, container.gpu_minor),
        gpu,
        "{} {when}: its GPU (minor {})\nhook log:\n{}",
        container.name,
        container.gpu_minor,
        fs::read_to_string(log).unwrap_or_default()
    );
    assert_eq!(
        open_result(booted, container, container.decoy_minor),
        "EPERM",
        "{} {when}: the decoy of another GPU (minor {})",
        container.name,
        container.decoy_minor
    );
}

/// The hook config: the simulated host's, logging to the scratch
/// directory, with `systemd-device-allow` as given.
fn hook_config(host: &SimHost, scratch: &Path, tell: bool) -> String {
    let base = scratch.join("base.toml");
    write_hook_config(host, &base, &scratch.join("hook.log"), "debug");
    format!(
        "systemd-device-allow = {tell}\n{}",
        fs::read_to_string(&base).unwrap()
    )
}

/// The host's own places the booted root has its versions of (its units,
/// Docker's and the hook's config, CDI specs) and `/dev/char`, listed
/// whole; `None` for one that does not exist.
fn host_paths() -> Vec<(&'static str, Option<BTreeMap<PathBuf, String>>)> {
    [
        "/etc/systemd/system",
        "/etc/docker",
        "/etc/cdi",
        "/etc/oci-nvidia-hook",
        "/etc/containerd",
        "/dev/char",
    ]
    .into_iter()
    .map(|dir| {
        (
            dir,
            Path::new(dir)
                .is_dir()
                .then(|| tree_listing(Path::new(dir))),
        )
    })
    .collect()
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn gpus_survive_daemon_reload_under_the_systemd_cgroup_driver() {
    require_root();
    let _serial = serial();
    let started = Instant::now();
    let root = sid();
    let host = SimHost::shared(Fixture::real(4));
    let work = work_root().join("daemon-reload");
    remove_tree_safely(&work);
    fs::create_dir_all(&work).unwrap();
    let (mounts_before, driver_before) = (host_mounts(), tree_listing(&host.dir));
    let host_before = host_paths();
    let scratch = work.join("booted");
    let log = work.join("hook.log");
    let spec = host.stdout(&["cdi", "generate", "--output", "-"]);
    let daemon_json = serde_json::json!({
        "iptables": false,
        "ip6tables": false,
        "bridge": "none",
        "storage-driver": "overlay2",
        "exec-opts": ["native.cgroupdriver=systemd"],
        "features": {"cdi": true},
        "runtimes": {"nvidia": {"path": "/usr/local/bin/nvidia-container-runtime"}},
    });
    let tar = work.join("rootfs.tar");
    let status = std::process::Command::new("tar")
        .arg("-C")
        .arg(template_rootfs(&host))
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .unwrap();
    assert!(status.success(), "tar of the template rootfs");
    let booted = Booted::boot(
        &root,
        &scratch,
        &BootSetup {
            binds: &[repo()],
            etc_files: &[
                (
                    "oci-nvidia-hook/config.toml",
                    hook_config(&host, &work, true),
                ),
                ("docker/daemon.json", daemon_json.to_string()),
                ("cdi/nvidia.yaml", spec),
            ],
            links: &[
                (
                    "/usr/local/bin/nvidia-container-runtime-hook",
                    hook_binary(),
                ),
                ("/usr/local/bin/nvidia-container-runtime", hook_binary()),
                ("/usr/local/bin/nvidia-container-cli", hook_binary()),
            ],
            nested: false,
        },
    );
    let booted_at = started.elapsed();
    let info = booted.ok(&[
        "docker",
        "info",
        "--format",
        "{{.ServerVersion}} {{.CgroupDriver}}",
    ]);
    assert!(
        info.starts_with("28.") && info.trim().ends_with(" systemd"),
        "{info}"
    );
    booted.ok(&[
        "docker",
        "import",
        "-c",
        "ENV PATH=/usr/bin:/bin",
        &path_str(&tar),
        IMAGE,
    ]);

    let minor = |i| gpu(&host, i).minor;
    let run = |name: &'static str, args: &[&str], index: u32, decoy: u32| {
        let script = format!(
            "mknod /dev/nvidia{m} c {NVIDIA_MAJOR} {m}; exec sleep 600",
            m = minor(decoy)
        );
        let mut argv = vec!["docker", "run", "-d", "--network", "none"];
        argv.extend_from_slice(args);
        argv.extend_from_slice(&[IMAGE, "/bin/sh", "-c", &script]);
        let out = booted.run(&argv);
        assert!(
            out.status.is_some_and(|s| s.success()),
            "{name}: docker run {args:?}: {}{}\nhook log:\n{}\n{}",
            out.stdout,
            out.stderr,
            fs::read_to_string(work.join("hook.log")).unwrap_or_default(),
            booted.journal("docker.service")
        );
        Container {
            name,
            id: out.stdout.trim().to_string(),
            gpu_minor: minor(index),
            decoy_minor: minor(decoy),
            exec: Exec::Docker,
        }
    };
    let hook = run("hook", &["--gpus", "device=0"], 0, 3);
    let wrapper = run(
        "wrapper",
        &["--runtime", "nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=1"],
        1,
        0,
    );
    let cdi = run("cdi", &["--device", "nvidia.com/gpu=2"], 2, 1);
    // The control: NVIDIA's behaviour, systemd not told.
    fs::write(booted.path(HOOK_CONFIG), hook_config(&host, &work, false)).unwrap();
    let control = run("control", &["--gpus", "device=3"], 3, 2);
    fs::write(booted.path(HOOK_CONFIG), hook_config(&host, &work, true)).unwrap();
    // containerd alone, runc on the systemd cgroup driver: `ctr run --gpus`
    // runs `nvidia-container-cli configure` (ours) as its prestart hook.
    let rootfs = work.join("ctr-rootfs");
    copy_template(&host, &rootfs);
    let script = format!(
        "mknod /dev/nvidia{m} c {NVIDIA_MAJOR} {m}; exec sleep 600",
        m = minor(2)
    );
    let argv = [
        "env",
        "PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ctr",
        "run",
        "-d",
        "--runc-systemd-cgroup",
        // No cpu controller in this cgroup2 tree (the host's v1 has it).
        "--cpu-shares",
        "0",
        "--cgroup",
        "system.slice:onh:ctr-gpu",
        "--gpus",
        "1",
        "--rootfs",
        &path_str(&rootfs),
        "ctr-gpu",
        "/bin/sh",
        "-c",
        &script,
    ];
    let out = booted.run(&argv);
    assert!(
        out.status.is_some_and(|s| s.success()),
        "ctr run --gpus 1: {}{}\nhook log:\n{}\n{}",
        out.stdout,
        out.stderr,
        fs::read_to_string(&log).unwrap_or_default(),
        booted.journal("containerd.service")
    );
    let ctr = Container {
        name: "ctr",
        id: String::new(),
        gpu_minor: minor(1),
        decoy_minor: minor(2),
        exec: Exec::Ctr("ctr-gpu"),
    };
    let all = [&hook, &wrapper, &cdi, &control, &ctr];
    for container in all {
        assert_opens(&booted, &log, container, "ENXIO", "before the reload");
    }
    let scope = |c: &Container| format!("docker-{}.scope", c.id);
    let device_allow =
        |c: &Container| booted.ok(&["systemctl", "show", "--property", "DeviceAllow", &scope(c)]);
    let node = |c: &Container| format!("/dev/char/{NVIDIA_MAJOR}:{} rw", c.gpu_minor);
    assert!(
        device_allow(&hook).contains(&node(&hook)),
        "{}",
        device_allow(&hook)
    );
    assert!(
        !device_allow(&control).contains(&node(&control)),
        "{}",
        device_allow(&control)
    );

    // The hook told systemd at once, and only where it was asked to.
    let logged = fs::read_to_string(&log).unwrap();
    let told: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("DeviceAllow"))
        .collect();
    assert_eq!(told.len(), 2, "{logged}");
    assert!(
        told[0].contains(&scope(&hook)) && told[0].contains("Private"),
        "{logged}"
    );
    assert!(told[1].contains("onh-ctr-gpu.scope"), "{logged}");
    assert!(!logged.contains("systemd was not told"), "{logged}");
    eprintln!("{}", told.join("\n"));

    let reload = Instant::now();
    booted.ok(&["systemctl", "daemon-reload"]);
    let reload = reload.elapsed();
    for container in [&hook, &wrapper, &cdi, &ctr] {
        assert_opens(&booted, &log, container, "ENXIO", "after daemon-reload");
    }
    // Without our DeviceAllow, the reload took the hook's grant away.
    assert_opens(&booted, &log, &control, "EPERM", "after daemon-reload");

    // doctor, inside, as root there: with the control's config it warns,
    // naming the setting; with ours, the hook reaches systemd.
    let doctor_systemd = |status: &str| {
        let doctor = booted.run(&[&path_str(hook_binary()), "doctor", "--json"]);
        let report: serde_json::Value = serde_json::from_str(&doctor.stdout)
            .unwrap_or_else(|e| panic!("doctor --json: {e}: {}{}", doctor.stdout, doctor.stderr));
        checks_with(&report, status)
            .into_iter()
            .find(|c| c.name == "systemd")
            .unwrap_or_else(|| panic!("no {status} systemd check: {report:#}"))
    };
    fs::write(booted.path(HOOK_CONFIG), hook_config(&host, &work, false)).unwrap();
    let warned = doctor_systemd("warn");
    assert!(
        warned.found.contains("systemd-device-allow = false")
            && warned.found.contains("daemon-reload"),
        "{}",
        warned.found
    );
    fs::write(booted.path(HOOK_CONFIG), hook_config(&host, &work, true)).unwrap();
    let ok = doctor_systemd("ok");
    assert!(
        ok.found.contains("/run/systemd/private") && ok.found.contains("daemon-reload"),
        "{}",
        ok.found
    );

    drop(booted);
    assert_left_as_found(
        "onh-booted-",
        &mounts_before,
        &host.dir,
        &driver_before,
        "after the booted root stopped",
    );
    assert_eq!(host_paths(), host_before, "the host's /etc or /dev changed");
    remove_tree_safely(&work);
    eprintln!(
        "daemon-reload suite: {:.0} s (boot {:.0} s, reload {} ms)",
        started.elapsed().as_secs_f64(),
        booted_at.as_secs_f64(),
        reload.as_millis()
    );
}

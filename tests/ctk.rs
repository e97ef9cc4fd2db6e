//! `nvidia-ctk runtime configure` against the real engines: dockerd 20.10
//! and containerd 1.6 (Debian's docker.io) start on the files it writes.
//! dockerd, given the written `daemon.json` (`--config-file`), lists the
//! `nvidia` runtime and runs a GPU container through it on a simulated
//! 4-GPU host; containerd starts on the written `config.toml`, whose
//! `imports` load the drop-in, and its `config dump` shows the runtime.
//!
//! Run as root: `make test`, or
//! `cargo test --features _test_as_root --test ctk -- --nocapture`.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use harness::project::hook_binary;
use harness::runtime::bundle::{template_rootfs, work_root, write_hook_config};
use harness::runtime::cleanup::remove_tree_safely;
use harness::runtime::daemons::{nvidia_ctk, DaemonSetup, Daemons};
use harness::runtime::injected::assert_every_gpu_injected;
use harness::runtime::oci_config::path_str;
use harness::runtime::process::run_bounded;
use harness::runtime::run::{serial, RUN_LIMIT};
use harness::runtime::runtimes::require_tool;
use harness::simhost::{require_root, Fixture, SimHost};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The image the Docker test runs.
const IMAGE: &str = "onh-ctk:test";

/// The daemon.json NVIDIA's tool writes, and dockerd 20.10 runs GPU
/// containers through the runtime it names.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn dockerd_runs_the_runtime_runtime_configure_registered() {
    require_root();
    let _serial = serial();
    let host = SimHost::shared(Fixture::real(4));
    let work = work_root().join("ctk").join("docker");
    remove_tree_safely(&work);
    fs::create_dir_all(&work).unwrap();
    let daemon_json = work.join("daemon.json");
    // Settings of the host's own, which must survive.
    fs::write(
        &daemon_json,
        "{\n  \"log-level\": \"info\",\n  \"default-ulimits\": {}\n}\n",
    )
    .unwrap();
    let configure = |extra: &str| {
        nvidia_ctk(
            &work,
            &[
                "runtime",
                "configure",
                "--runtime=docker",
                &format!("--config={}", path_str(&daemon_json)),
                extra,
            ],
        )
    };
    let expected = |path: &str| {
        serde_json::json!({
            "log-level": "info",
            "default-ulimits": {},
            "runtimes": {"nvidia": {"args": [], "path": path}},
        })
    };
    // NVIDIA's default: the name, which dockerd's containerd looks up on its PATH.
    let printed: serde_json::Value = serde_json::from_str(&configure("--dry-run")).unwrap();
    assert_eq!(printed, expected("nvidia-container-runtime"));
    assert!(
        fs::read_to_string(&daemon_json)
            .unwrap()
            .starts_with("{\n  \"log-level\""),
        "--dry-run writes nothing"
    );
    // Here our link is on no daemon's PATH: name it.
    let daemons_dir = work.join("daemons");
    let link = daemons_dir.join("bin/nvidia-container-runtime");
    configure(&format!("--nvidia-runtime-path={}", path_str(&link)));
    let written: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&daemon_json).unwrap()).unwrap();
    assert_eq!(written, expected(&path_str(&link)));

    let hook_log = work.join("hook.log");
    let hook_config = work.join("hook.toml");
    write_hook_config(&host, &hook_config, &hook_log, "debug");
    let daemons = Daemons::start(
        &daemons_dir,
        &DaemonSetup {
            hook_config: &hook_config,
            links: &["nvidia-container-runtime"],
            runtimes: &[],
            default_runtime: None,
            docker_config: Some(&daemon_json),
            cdi_dir: None,
            etc_files: &[],
            root: None,
            cri: None,
        },
    );
    let info = daemons.docker(&["info", "--format", "{{json .Runtimes}}"]);
    let runtimes: serde_json::Value = serde_json::from_str(info.stdout.trim())
        .unwrap_or_else(|e| panic!("docker info: {e}: {}{}", info.stdout, info.stderr));
    assert_eq!(
        runtimes["nvidia"]["path"].as_str(),
        Some(path_str(&link).as_str()),
        "docker info lists the runtime: {runtimes}"
    );

    daemons.import_rootfs(&template_rootfs(&host), IMAGE);
    let run = daemons.checker_run(
        "ctk-docker",
        &["--runtime", "nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=all"],
        IMAGE,
        &[],
        &hook_log,
    );
    assert_every_gpu_injected(&run, &host);
    drop(daemons);
    remove_tree_safely(&work);
}

/// containerd, stopped by pid when dropped, with what it left in /run.
struct Containerd {
    child: Child,
    run_dir_existed: bool,
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !self.run_dir_existed {
            let _ = fs::remove_dir_all("/run/containerd");
        }
    }
}

/// A TOML basic string for `path`.
fn toml_str(path: &Path) -> String {
    format!("{:?}", path_str(path))
}

/// The config.toml and drop-in NVIDIA's tool writes, and containerd 1.6
/// starts on them, its CRI plugin holding the runtime.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn containerd_starts_on_the_config_runtime_configure_wrote() {
    require_root();
    for tool in ["containerd", "ctr", "unshare"] {
        require_tool(tool);
    }
    let _serial = serial();
    let work = work_root().join("ctk").join("containerd");
    remove_tree_safely(&work);
    fs::create_dir_all(work.join("bin")).unwrap();
    let runtime = work.join("bin/nvidia-container-runtime");
    symlink(hook_binary(), &runtime).unwrap();
    let config = work.join("config.toml");
    let drop_in = work.join("conf.d/99-nvidia.toml");
    let socket = work.join("ctd.sock");
    // The host's settings, with a comment, which must survive.
    let original = format!(
        "# the host's own settings\nversion = 2\nroot = {}\nstate = {}\n\n[grpc]\n  address = {}\n\n\
         [ttrpc]\n  address = {}\n\n\
         [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  \
         runtime_type = \"io.containerd.runc.v2\"\n  \
         [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n    \
         SystemdCgroup = false # cgroupfs here\n",
        toml_str(&work.join("root")),
        toml_str(&work.join("state")),
        toml_str(&socket),
        toml_str(&work.join("ttrpc.sock")),
    );
    fs::write(&config, &original).unwrap();
    nvidia_ctk(
        &work,
        &[
            "runtime",
            "configure",
            "--runtime=containerd",
            &format!("--config={}", path_str(&config)),
            &format!("--drop-in-config={}", path_str(&drop_in)),
            &format!("--nvidia-runtime-path={}", path_str(&runtime)),
            "--nvidia-set-as-default",
            "--cdi.enabled",
        ],
    );
    let main = fs::read_to_string(&config).unwrap();
    assert_eq!(
        main,
        original.replacen(
            "\n\n[grpc]",
            &format!(
                "\nimports = [{}]\n\n[grpc]",
                toml_str(&work.join("conf.d/*.toml"))
            ),
            1
        ),
        "the main config gains the import and nothing else"
    );
    let nvidia: toml::Table = toml::from_str(&fs::read_to_string(&drop_in).unwrap()).unwrap();
    let cri = &nvidia["plugins"]["io.containerd.grpc.v1.cri"];
    assert_eq!(cri["enable_cdi"].as_bool(), Some(true));

    let dump = Command::new("containerd")
        .arg("--config")
        .arg(&config)
        .args(["config", "dump"])
        .output()
        .expect("run containerd config dump");
    assert!(
        dump.status.success(),
        "containerd config dump: {}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let dumped: toml::Table = toml::from_str(&String::from_utf8_lossy(&dump.stdout)).unwrap();
    let containerd = &dumped["plugins"]["io.containerd.grpc.v1.cri"]["containerd"];
    assert_eq!(containerd["default_runtime_name"].as_str(), Some("nvidia"));
    let ours = &containerd["runtimes"]["nvidia"];
    assert_eq!(ours["runtime_type"].as_str(), Some("io.containerd.runc.v2"));
    assert_eq!(
        ours["options"]["BinaryName"].as_str(),
        Some(path_str(&runtime).as_str())
    );
    assert_eq!(
        ours["options"]["SystemdCgroup"].as_bool(),
        Some(false),
        "runc's options are copied"
    );

    let log = work.join("containerd.log");
    let log_file = fs::File::create(&log).unwrap();
    let child = Command::new("unshare")
        .args(["-m", "--propagation", "private", "containerd", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .spawn()
        .expect("start containerd");
    let containerd = Containerd {
        child,
        run_dir_existed: Path::new("/run/containerd").exists(),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let plugins = loop {
        let mut ctr = Command::new("ctr");
        ctr.arg("-a").arg(&socket).args(["plugins", "ls"]);
        let out = run_bounded(ctr, RUN_LIMIT);
        if out.status.is_some_and(|s| s.success()) {
            break out.stdout;
        }
        assert!(
            Instant::now() < deadline,
            "containerd does not answer: {}",
            fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let cri: Vec<&str> = plugins
        .lines()
        .find(|l| l.contains("io.containerd.grpc.v1") && l.contains(" cri "))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    assert_eq!(
        cri.last().copied(),
        Some("ok"),
        "the CRI plugin loaded the config: {plugins}\n{}",
        fs::read_to_string(&log).unwrap_or_default()
    );
    drop(containerd);
    remove_tree_safely(&work);
}

/// `program ARGS` run as `name` (a link to our binary in `dir`) in a private
/// mount namespace whose `/etc` overlay holds `config` as the default
/// config file; its stdout, after it succeeded.
fn with_default_config(dir: &Path, config: &Path, name: &str, args: &[&str]) -> String {
    let out = run_with_default_config(dir, config, name, args);
    assert!(
        out.status.is_some_and(|s| s.success()),
        "{name} {args:?}: {}{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

/// [`with_default_config`]'s run, however it ended.
fn run_with_default_config(
    dir: &Path,
    config: &Path,
    name: &str,
    args: &[&str],
) -> harness::runtime::process::Finished {
    fs::create_dir_all(dir.join("upper/oci-nvidia-hook")).unwrap();
    fs::create_dir_all(dir.join("work")).unwrap();
    fs::copy(config, dir.join("upper/oci-nvidia-hook/config.toml")).unwrap();
    let link = dir.join(name);
    let _ = fs::remove_file(&link);
    symlink(hook_binary(), &link).unwrap();
    let mut cmd = Command::new("unshare");
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(
            "mount -t overlay onh-etc -o lowerdir=/etc,upperdir=\"$1\",workdir=\"$2\" /etc \
             && shift 2 && exec \"$@\"",
        )
        .arg("sh")
        .arg(dir.join("upper"))
        .arg(dir.join("work"))
        .arg(&link)
        .args(args);
    run_bounded(cmd, RUN_LIMIT)
}

/// A fresh work directory `ctk/NAME` and a config for `host` in it, as the
/// default config file the commands under test read: (the directory, the config).
fn fresh_work(host: &SimHost, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let work = work_root().join("ctk").join(name);
    remove_tree_safely(&work);
    fs::create_dir_all(&work).unwrap();
    let config = work.join("hook.toml");
    write_hook_config(host, &config, &work.join("hook.log"), "info");
    (work, config)
}

/// `nvidia-ctk cdi generate` writes the spec our own `cdi generate` writes
/// for the same names, and `cdi list` prints its devices.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn cdi_generate_is_our_spec_and_cdi_list_names_its_devices() {
    require_root();
    let _serial = serial();
    let host = SimHost::shared(Fixture::real(4));
    let (work, config) = fresh_work(&host, "cdi");
    let ours = with_default_config(
        &work,
        &config,
        "oci-nvidia-hook",
        &[
            "cdi",
            "generate",
            "--output",
            "-",
            "--device-name-strategy",
            "index,uuid",
        ],
    );
    let specs = work.join("specs");
    fs::create_dir_all(&specs).unwrap();
    let output = specs.join("nvidia.json");
    let printed = with_default_config(
        &work,
        &config,
        "nvidia-ctk",
        &[
            "cdi",
            "generate",
            &format!("--output={}", path_str(&output)),
            // NVIDIA's default names: index and uuid, as ours asked for them.
            "--format=yaml",
            "--nvidia-cdi-hook-path=/usr/bin/nvidia-cdi-hook",
        ],
    );
    assert_eq!(printed, "", "the spec goes to --output");
    assert_eq!(fs::read_to_string(&output).unwrap(), ours, "the same spec");
    let listed = with_default_config(
        &work,
        &config,
        "nvidia-ctk",
        &["cdi", "list", &format!("--spec-dir={}", path_str(&specs))],
    );
    let mut expected: Vec<String> = host
        .facts
        .gpus
        .iter()
        .flat_map(|g| {
            [
                format!("nvidia.com/gpu={}", g.index),
                format!("nvidia.com/gpu={}", g.uuid),
            ]
        })
        .chain(["nvidia.com/gpu=all".to_string()])
        .collect();
    expected.sort();
    assert_eq!(listed.lines().collect::<Vec<_>>(), expected);
    // NVIDIA 1.19's `--no-all-device`: every device but `all`.
    fs::remove_file(&output).unwrap();
    with_default_config(
        &work,
        &config,
        "nvidia-ctk",
        &[
            "cdi",
            "generate",
            &format!("--output={}", path_str(&output)),
            "--no-all-device",
        ],
    );
    let listed = with_default_config(
        &work,
        &config,
        "nvidia-ctk",
        &["cdi", "list", &format!("--spec-dir={}", path_str(&specs))],
    );
    expected.retain(|name| name != "nvidia.com/gpu=all");
    assert_eq!(listed.lines().collect::<Vec<_>>(), expected);
    remove_tree_safely(&work);
}

/// `nvidia-ctk cdi generate --mode=wsl` on a WSL2 host (`Fixture::wsl`)
/// writes the spec our own `cdi generate --mode wsl` writes: one device,
/// `all`, with `/dev/dxg`.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn cdi_generate_mode_wsl_is_our_wsl_spec() {
    require_root();
    let _serial = serial();
    let host = SimHost::shared(Fixture::wsl());
    let (work, config) = fresh_work(&host, "cdi-wsl");
    let ours = with_default_config(
        &work,
        &config,
        "oci-nvidia-hook",
        &["cdi", "generate", "--mode", "wsl", "--output", "-"],
    );
    let nvidias = with_default_config(
        &work,
        &config,
        "nvidia-ctk",
        &["cdi", "generate", "--mode=wsl", "--format=yaml"],
    );
    assert_eq!(nvidias, ours, "the same spec");
    assert!(
        ours.contains("name: all") && ours.contains("path: /dev/dxg"),
        "{ours}"
    );
}

/// `nvidia-ctk system create-dev-char-symlinks` (NVIDIA's remedy for GPUs
/// lost on `systemctl daemon-reload`): each node the driver made gets its
/// `MAJOR:MINOR` link to the node, a second run keeps them, and a name the
/// host already uses for something else is left alone.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn system_create_dev_char_symlinks_links_the_drivers_nodes() {
    require_root();
    let _serial = serial();
    let host = SimHost::shared(Fixture::synthetic(2));
    let (work, config) = fresh_work(&host, "dev-char");
    let char_dir = work.join("char");
    fs::create_dir_all(&char_dir).unwrap();
    // Someone else's link under a name ours would take.
    symlink("/nowhere", char_dir.join("195:255")).unwrap();
    let dev = Path::new(&host.facts.dev_root).join("dev");
    let args = [
        "system",
        "create-dev-char-symlinks",
        "--dev-char-path",
        &path_str(&char_dir),
        "--load-kernel-modules",
    ];
    for _ in 0..2 {
        with_default_config(&work, &config, "nvidia-ctk", &args);
        for gpu in &host.facts.gpus {
            let link = char_dir.join(format!("195:{}", gpu.minor));
            assert_eq!(
                fs::read_link(&link).unwrap(),
                dev.join(format!("nvidia{}", gpu.minor)),
                "{}",
                link.display()
            );
        }
        assert_eq!(
            fs::read_link(char_dir.join(format!("{}:0", host.facts.uvm_major))).unwrap(),
            dev.join("nvidia-uvm")
        );
        assert_eq!(
            fs::read_link(char_dir.join("195:255")).unwrap(),
            Path::new("/nowhere"),
            "the host's own link is kept"
        );
    }
    // --dry-run prints and makes nothing.
    let fresh = work.join("char-dry");
    let printed = with_default_config(
        &work,
        &config,
        "nvidia-ctk",
        &[
            "system",
            "create-dev-char-symlinks",
            "--dev-char-path",
            &path_str(&fresh),
            "--dry-run",
        ],
    );
    assert!(printed.contains(":0 -> "), "{printed}");
    assert!(!fresh.exists());
    remove_tree_safely(&work);
}

/// `nvidia-ctk system create-device-nodes --control-devices` (the GPU
/// Operator's MIG manager's call), into a dev root of its own, never the
/// host's `/dev`: the four control nodes with the simulated host's majors
/// and NVIDIA's mode, kept as they are on a second run, and a file of
/// another kind at a node's name refused on one line and left alone.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn system_create_device_nodes_makes_the_control_nodes_in_the_dev_root() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    require_root();
    let _serial = serial();
    let host = SimHost::shared(Fixture::synthetic(2));
    let (work, config) = fresh_work(&host, "device-nodes");
    let root = work.join("root");
    let dev = root.join("dev");
    fs::create_dir_all(&dev).unwrap();
    let uvm = host.facts.uvm_major;
    let expected: [(&str, u32, u32); 4] = [
        ("nvidiactl", 195, 255),
        ("nvidia-modeset", 195, 254),
        ("nvidia-uvm", uvm, 0),
        ("nvidia-uvm-tools", uvm, 1),
    ];
    let args = [
        "system",
        "create-device-nodes",
        "--control-devices",
        "--dev-root",
        &path_str(&root),
    ];
    // A node already there with its numbers is kept, mode and all.
    let ctl = dev.join("nvidiactl");
    let mknod = Command::new("mknod")
        .args(["-m", "0600"])
        .arg(&ctl)
        .args(["c", "195", "255"])
        .status()
        .unwrap();
    assert!(mknod.success());
    let kept = fs::symlink_metadata(&ctl).unwrap().ino();
    let mut inodes = Vec::new();
    for run in 0..2 {
        with_default_config(&work, &config, "nvidia-ctk", &args);
        let mut now = Vec::new();
        for (name, major, minor) in expected {
            let meta = fs::symlink_metadata(dev.join(name)).unwrap();
            assert!(meta.file_type().is_char_device(), "{name}");
            let rdev = meta.rdev();
            assert_eq!(
                (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev)),
                (u64::from(major), u64::from(minor)),
                "{name}"
            );
            let mode = if name == "nvidiactl" { 0o600 } else { 0o666 };
            assert_eq!(meta.mode() & 0o7777, mode, "{name}, run {run}");
            now.push(meta.ino());
        }
        assert_eq!(now[0], kept, "the host's own nvidiactl is kept");
        inodes.push(now);
    }
    assert_eq!(inodes[0], inodes[1], "a second run keeps every node");

    // Another kind of file at a node's name: refused, on one line, untouched.
    let tools = dev.join("nvidia-uvm-tools");
    fs::remove_file(&tools).unwrap();
    fs::write(&tools, b"not a node").unwrap();
    let out = run_with_default_config(&work, &config, "nvidia-ctk", &args);
    assert_eq!(out.status.and_then(|s| s.code()), Some(1), "{}", out.stderr);
    let line = out.stderr.trim();
    assert!(
        !line.contains('\n')
            && line.contains(&format!(
                "refusing to replace {}: it is a regular file, not a character device",
                tools.display()
            )),
        "{line}"
    );
    assert_eq!(fs::read(&tools).unwrap(), b"not a node");

    // --dry-run prints the mknods and makes nothing.
    let fresh = work.join("fresh");
    fs::create_dir_all(fresh.join("dev")).unwrap();
    let printed = with_default_config(
        &work,
        &config,
        "nvidia-ctk",
        &[
            "system",
            "create-device-nodes",
            "--control-devices",
            "--driver-root",
            &path_str(&fresh),
            "--dry-run",
        ],
    );
    assert_eq!(
        printed,
        format!(
            "mknod --mode=0666 {0}/nvidiactl c 195 255\nmknod --mode=0666 {0}/nvidia-modeset c 195 254\n\
             mknod --mode=0666 {0}/nvidia-uvm c {1} 0\nmknod --mode=0666 {0}/nvidia-uvm-tools c {1} 1\n",
            fresh.join("dev").display(),
            uvm
        )
    );
    assert_eq!(fs::read_dir(fresh.join("dev")).unwrap().count(), 0);
    remove_tree_safely(&work);
}

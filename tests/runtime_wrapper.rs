//! The runtime wrapper (`oci-nvidia-hook runtime`, `nvidia-container-runtime`)
//! on its own: what it does to a bundle's `config.json` and what it hands
//! the real runtime. The real runtime here is a small recording script
//! named in the config's `[runtime] runtimes`, so that the exact argv it
//! receives can be compared; Docker and Podman run the wrapper in front of
//! real runc in tests/docker.rs and tests/cdi_podman.rs.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output};

use harness::project::hook_binary;
use harness::simhost::{Fixture, SimHost};

/// A bundle, a config pointing at the simulated host with a recording
/// runtime, and where that runtime writes its argv.
struct Setup {
    dir: tempfile::TempDir,
    config: PathBuf,
}

impl Setup {
    fn new(sim: &SimHost, env: &[&str]) -> Setup {
        Setup::with_runtime(sim, env, "")
    }

    /// [`Setup::new`], `runtime` more lines of the config's `[runtime]`.
    fn with_runtime(sim: &SimHost, env: &[&str], runtime_lines: &str) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let runtime = dir.path().join("real-runtime");
        fs::write(
            &runtime,
            format!(
                "#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" > {}\n",
                dir.path().join("argv").display()
            ),
        )
        .unwrap();
        fs::set_permissions(&runtime, fs::Permissions::from_mode(0o755)).unwrap();
        let config = dir.path().join("config.toml");
        let base = fs::read_to_string(&sim.config).unwrap();
        fs::write(
            &config,
            format!(
                "{base}\n[runtime]\nruntimes = [\"{}\"]\n{runtime_lines}",
                runtime.display()
            ),
        )
        .unwrap();
        let bundle = dir.path().join("bundle");
        fs::create_dir_all(bundle.join("rootfs/etc")).unwrap();
        fs::write(bundle.join("rootfs/etc/debian_version"), "12\n").unwrap();
        let env: Vec<String> = env.iter().map(|e| format!("\"{e}\"")).collect();
        fs::write(
            bundle.join("config.json"),
            format!(
                r#"{{"ociVersion":"1.0.2","process":{{"cwd":"/","args":["sh"],"user":{{"uid":0,"gid":0}},"env":[{}]}},"root":{{"path":"rootfs"}},"x-unknown":{{"b":1,"a":[2,3]}},"linux":{{"namespaces":[{{"type":"mount"}}]}}}}"#,
                env.join(",")
            ),
        )
        .unwrap();
        Setup { dir, config }
    }

    fn bundle(&self) -> PathBuf {
        self.dir.path().join("bundle")
    }

    fn spec(&self) -> Vec<u8> {
        fs::read(self.bundle().join("config.json")).unwrap()
    }

    /// `oci-nvidia-hook --config C runtime ARGS`, with a cleared environment.
    fn wrapper(&self, args: &[&str]) -> Output {
        Command::new(hook_binary())
            .env_clear()
            .arg("--config")
            .arg(&self.config)
            .arg("runtime")
            .args(args)
            .output()
            .unwrap()
    }

    /// What the recording runtime received, `argv[0]` first; `None` if it never ran.
    fn received(&self) -> Option<Vec<String>> {
        let text = fs::read_to_string(self.dir.path().join("argv")).ok()?;
        Some(text.lines().map(str::to_string).collect())
    }
}

fn sim() -> SimHost {
    SimHost::shared(Fixture::synthetic(2))
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_string()).collect()
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_gpu_spec_is_edited_once_and_the_runtime_gets_the_arguments_unchanged() {
    let sim = sim();
    let setup = Setup::new(&sim, &["NVIDIA_VISIBLE_DEVICES=1"]);
    let bundle = setup.bundle();
    let b = bundle.to_str().unwrap();
    let args = [
        "--root",
        "/run/x",
        "--log",
        "/dev/null",
        "create",
        "--bundle",
        b,
        "--pid-file",
        "/p",
        "id",
    ];
    let out = setup.wrapper(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut expected = vec![setup.dir.path().join("real-runtime").display().to_string()];
    expected.extend(strings(&args));
    assert_eq!(setup.received(), Some(expected));

    let edited = setup.spec();
    let spec: serde_json::Value = serde_json::from_slice(&edited).unwrap();
    let minor = sim.facts.gpus[1].minor;
    assert!(
        spec["linux"]["devices"]
            .to_string()
            .contains(&format!("\"/dev/nvidia{minor}\"")),
        "{spec}"
    );
    assert!(
        spec["hooks"]["createRuntime"]
            .to_string()
            .contains("cdi-hook"),
        "{spec}"
    );
    // Fields we do not touch keep their place and content.
    let text = String::from_utf8_lossy(&edited);
    assert!(
        text.starts_with(r#"{"ociVersion":"1.0.2","process""#)
            && text.contains(r#""x-unknown":{"b":1,"a":[2,3]}"#),
        "{text}"
    );
    // Again: the spec is ours already and is left as it is.
    let out = setup.wrapper(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        setup.spec(),
        edited,
        "the second create edited the spec again"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_spec_without_gpus_and_other_commands_are_passed_through_untouched() {
    let sim = sim();
    let setup = Setup::new(&sim, &["PATH=/bin"]);
    let before = setup.spec();
    let b = setup.bundle();
    let out = setup.wrapper(&["run", "-b", b.to_str().unwrap(), "id"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(setup.spec(), before, "a non-GPU spec was rewritten");
    for args in [
        &["--root", "/r", "state", "id"][..],
        &["delete", "--force", "id"],
        &["--version"],
    ] {
        let out = setup.wrapper(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            setup.received().unwrap()[1..],
            strings(args)[..],
            "{args:?}"
        );
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_refusal_stops_before_the_runtime_in_one_line_and_writes_its_log() {
    let sim = sim();
    let setup = Setup::new(&sim, &["NVIDIA_VISIBLE_DEVICES=7"]);
    let before = setup.spec();
    let log = setup.dir.path().join("log.json");
    let b = setup.bundle();
    let out = setup.wrapper(&[
        "--log",
        log.to_str().unwrap(),
        "--log-format",
        "json",
        "create",
        "--bundle",
        b.to_str().unwrap(),
        "id",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("unknown device \"7\""), "{stderr}");
    assert_eq!(setup.received(), None, "the real runtime ran");
    assert_eq!(setup.spec(), before, "the spec changed");
    let logged = fs::read_to_string(&log).unwrap();
    let line: serde_json::Value = serde_json::from_str(logged.trim()).unwrap();
    assert_eq!(line["level"], "error");
    assert!(
        line["msg"].as_str().unwrap().contains("unknown device"),
        "{logged}"
    );
    let leftovers: Vec<_> = fs::read_dir(&b)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        leftovers.len(),
        2,
        "only config.json and rootfs: {leftovers:?}"
    );
}

/// A symbolic or a hard link to this binary is this binary: running it
/// would loop.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_config_naming_the_wrapper_itself_is_refused() {
    let sim = sim();
    let setup = Setup::new(&sim, &[]);
    // A hard link must be on the binary's file system.
    let beside = tempfile::tempdir_in(hook_binary().parent().unwrap()).unwrap();
    let symlink = setup.dir.path().join("nvidia-container-runtime");
    std::os::unix::fs::symlink(hook_binary(), &symlink).unwrap();
    let hardlink = beside.path().join("runc");
    fs::hard_link(hook_binary(), &hardlink).unwrap();
    let base = fs::read_to_string(&sim.config).unwrap();
    for link in [&symlink, &hardlink] {
        fs::write(
            &setup.config,
            format!("{base}\n[runtime]\nruntimes = [\"{}\"]\n", link.display()),
        )
        .unwrap();
        let out = setup.wrapper(&["state", "id"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", link.display());
        assert!(
            stderr.contains("it is this wrapper itself"),
            "{}: {stderr}",
            link.display()
        );
    }
}

/// The binary run as `nvidia-container-runtime` takes runc's command line
/// whole: `--version` is the real runtime's (runc, by the default config).
#[test]
fn the_nvidia_name_passes_runcs_command_line_whole() {
    // The GPU Operator's runtime classes call the `.cdi` and `.legacy` names.
    for name in [
        "nvidia-container-runtime",
        "nvidia-container-runtime.cdi",
        "nvidia-container-runtime.legacy",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let link: PathBuf = dir.path().join(name);
        std::os::unix::fs::symlink(hook_binary(), &link).unwrap();
        let out = Command::new(&link)
            .env_clear()
            .arg("--version")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("runc version") || stdout.contains("crun version"),
            "{name}: {stdout}"
        );
    }
}

/// NVIDIA's `jit-cdi` mode (its default since 1.18) and its device names
/// `runtime.nvidia.com/gpu=<id>`: in `jit-cdi` and in `auto` mode the
/// named GPU's node is written into the spec, as for a bare `1`.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn jit_cdi_mode_and_its_names_write_the_gpus_named() {
    let sim = sim();
    let minor = sim.facts.gpus[1].minor;
    let other = sim.facts.gpus[0].minor;
    for (mode, name) in [
        ("jit-cdi", "runtime.nvidia.com/gpu=1"),
        ("jit-cdi", "1"),
        ("auto", "runtime.nvidia.com/gpu=1"),
    ] {
        let env = format!("NVIDIA_VISIBLE_DEVICES={name}");
        let setup = Setup::with_runtime(&sim, &[&env], &format!("mode = \"{mode}\"\n"));
        let bundle = setup.bundle();
        let out = setup.wrapper(&["create", "--bundle", bundle.to_str().unwrap(), "id"]);
        assert!(
            out.status.success(),
            "{mode} {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let spec: serde_json::Value = serde_json::from_slice(&setup.spec()).unwrap();
        let devices = spec["linux"]["devices"].to_string();
        assert!(
            devices.contains(&format!("\"/dev/nvidia{minor}\"")),
            "{mode} {name}: {spec}"
        );
        assert!(
            !devices.contains(&format!("\"/dev/nvidia{other}\"")),
            "{mode} {name}: {spec}"
        );
    }
}

/// The devices beyond the GPU through the wrapper (issue 27): on the
/// `--extras` host, the IMEX channel asked for and GDRCopy's node come
/// into `config.json` with their device-cgroup rules; the channel nobody
/// asked for gets neither, and the gated devices not enabled stay out.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn imex_channels_and_gated_devices_are_written_as_asked_and_no_more() {
    let sim = SimHost::shared(Fixture::synthetic(2).extras());
    let extras = sim.facts.extras.as_ref().expect("an --extras host");
    assert_eq!(extras.imex_channels, [0, 1]);
    let setup = Setup::new(
        &sim,
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_IMEX_CHANNELS=1",
            "NVIDIA_GDRCOPY=enabled",
        ],
    );
    let bundle = setup.bundle();
    let out = setup.wrapper(&["create", "--bundle", bundle.to_str().unwrap(), "id"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spec: serde_json::Value = serde_json::from_slice(&setup.spec()).unwrap();
    let devices = spec["linux"]["devices"].as_array().expect("linux.devices");
    let node = |path: &str| devices.iter().find(|d| d["path"] == path);
    let channel = node("/dev/nvidia-caps-imex-channels/channel1").unwrap_or_else(|| {
        panic!("no channel1 in {spec}");
    });
    assert!(
        channel["major"] == extras.imex_major && channel["minor"] == 1,
        "channel1's numbers: {spec}"
    );
    assert!(
        node("/dev/nvidia-caps-imex-channels/channel0").is_none(),
        "a channel nobody asked for: {spec}"
    );
    for gdr in &extras.gdrcopy {
        assert!(node(gdr).is_some(), "no {gdr} in {spec}");
    }
    for other in extras
        .nvswitch
        .iter()
        .chain(&extras.gds)
        .chain(&extras.mofed)
    {
        assert!(node(other).is_none(), "{other} was not enabled: {spec}");
    }
    let rules = spec["linux"]["resources"]["devices"]
        .as_array()
        .expect("linux.resources.devices");
    let allows = |major: u32, minor: u32| {
        rules.iter().any(|r| {
            r["allow"] == true && r["type"] == "c" && r["major"] == major && r["minor"] == minor
        })
    };
    assert!(allows(extras.imex_major, 1), "channel1's rule: {spec}");
    assert!(!allows(extras.imex_major, 0), "channel0's rule: {spec}");
}

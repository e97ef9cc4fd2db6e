//! `list` against simulated GPU hosts: what a container would receive.

use std::path::Path;

use harness::cli::hook;
use harness::json::s;
use harness::project::hook_binary;
use harness::refusal::failure;
use harness::simhost::{Fixture, SimHost};

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn default_list_is_devices_then_binaries_libraries_firmware() {
    let sim = SimHost::shared(Fixture::synthetic(4));
    let out = sim.stdout(&["list"]);
    let lines: Vec<&str> = out.lines().collect();
    let dev = sim.path("devroot/dev").display().to_string();
    let mut expected_devices = vec![
        format!("{dev}/nvidiactl"),
        format!("{dev}/nvidia-uvm"),
        format!("{dev}/nvidia-uvm-tools"),
    ];
    for gpu in &sim.facts.gpus {
        expected_devices.push(format!("{dev}/nvidia{}", gpu.minor));
    }
    assert_eq!(lines[..expected_devices.len()], expected_devices[..]);

    // Then binaries, libraries, firmware, each line an absolute host path that exists.
    let top = format!("{}/", sim.dir.display());
    let rank = |line: &str| {
        let rel = line
            .strip_prefix(&top)
            .unwrap_or_else(|| panic!("{line} is outside the fixture"));
        if rel.starts_with("devroot/") {
            0
        } else if rel.starts_with("driver/lib/firmware/") {
            3
        } else if rel.contains(".so.") {
            2
        } else if rel.starts_with("driver/run/") || rel.starts_with("driver/tmp/") {
            4
        } else {
            1
        }
    };
    let ranks: Vec<u8> = lines.iter().map(|l| rank(l)).collect();
    let mut sorted = ranks.clone();
    sorted.sort();
    assert_eq!(ranks, sorted, "{out}");
    for line in &lines {
        assert!(
            Path::new(line).is_absolute() && Path::new(line).exists(),
            "{line}"
        );
    }
    // Default capabilities are utility and compute: nvidia-smi and libcuda, no video or graphics.
    assert!(
        out.contains(sim.facts.binaries["nvidia-smi"].as_str()),
        "{out}"
    );
    assert!(
        out.contains(sim.facts.libraries["libcuda.so.1"].as_str()),
        "{out}"
    );
    assert!(
        out.contains(sim.facts.libraries["libnvidia-ml.so.1"].as_str()),
        "{out}"
    );
    assert!(!out.contains("libnvcuvid"), "{out}");
    assert!(!out.contains("libnvidia-glcore"), "{out}");
    assert!(!out.contains("i386"), "{out}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn device_by_index_uuid_and_bus_picks_the_right_node() {
    let sim = SimHost::shared(Fixture::synthetic(4));
    for gpu in &sim.facts.gpus {
        let node = sim
            .path(&format!("devroot/dev/nvidia{}", gpu.minor))
            .display()
            .to_string();
        for id in [
            gpu.index.to_string(),
            gpu.uuid.clone(),
            gpu.bus[5..].to_string(),
        ] {
            let out = sim.stdout(&["list", "--device", &id, "--capabilities", "utility"]);
            let gpu_nodes: Vec<&str> = out
                .lines()
                .filter(|l| {
                    l.rsplit('/').next().unwrap().starts_with("nvidia")
                        && l.contains("/devroot/dev/nvidia")
                        && !l.ends_with("ctl")
                })
                .collect();
            assert_eq!(gpu_nodes, [node.as_str()], "--device {id}");
        }
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn json_gives_destinations_options_and_cgroup_rules() {
    let sim = SimHost::shared(Fixture::synthetic(4));
    let plan = sim.json(&[
        "list",
        "--device",
        "1",
        "--capabilities",
        "compute,utility,compat32",
        "--json",
    ]);
    let minor = sim.facts.gpus[1].minor;
    let devices: Vec<&str> = plan["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| s(d, "/path"))
        .collect();
    assert_eq!(
        devices,
        [
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            &format!("/dev/nvidia{minor}")
        ]
    );
    let rules: Vec<String> = plan["cgroup_rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {}:{} {}",
                s(r, "/type"),
                r["major"],
                r["minor"],
                s(r, "/access")
            )
        })
        .collect();
    let uvm = &sim.facts.uvm_major;
    assert_eq!(
        rules,
        [
            "c 195:255 rw".to_string(),
            format!("c {uvm}:0 rw"),
            format!("c {uvm}:1 rw"),
            format!("c 195:{minor} rw")
        ]
    );

    let mounts = plan["mounts"].as_array().unwrap();
    let find = |dest: &str| {
        mounts
            .iter()
            .find(|m| m["destination"] == dest)
            .unwrap_or_else(|| panic!("no mount at {dest}"))
    };
    let libcuda = find("/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03");
    assert_eq!(libcuda["source"], sim.facts.libraries["libcuda.so.1"]);
    assert_eq!(
        libcuda["options"],
        serde_json::json!(["ro", "nosuid", "nodev"])
    );
    let libcuda32 = find("/usr/lib/i386-linux-gnu/libcuda.so.535.261.03");
    assert_eq!(libcuda32["source"], sim.facts.libraries32["libcuda.so.1"]);
    assert_eq!(
        find("/usr/bin/nvidia-smi")["source"],
        sim.facts.binaries["nvidia-smi"]
    );
    let socket = find("/run/nvidia-persistenced/socket");
    assert_eq!(
        socket["options"],
        serde_json::json!(["rw", "nosuid", "nodev", "noexec"])
    );

    let links = plan["symlinks"].as_array().unwrap();
    assert!(links
        .iter()
        .any(|l| l["path"] == "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
            && l["target"] == "libcuda.so.535.261.03"));
    assert!(links
        .iter()
        .any(|l| l["path"] == "/usr/lib/x86_64-linux-gnu/libcuda.so"
            && l["target"] == "libcuda.so.1"));
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn rpm_layout_puts_libraries_in_lib64() {
    let sim = SimHost::shared(Fixture::synthetic(4));
    let plan = sim.json(&["list", "--layout", "rpm", "--json"]);
    assert!(plan["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["destination"] == "/usr/lib64/libcuda.so.535.261.03"));
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn none_gives_driver_files_without_gpu_nodes() {
    let sim = SimHost::shared(Fixture::synthetic(4));
    let out = sim.stdout(&["list", "--device", "none"]);
    assert!(
        !out.lines().any(|l| l
            .rsplit('/')
            .next()
            .unwrap()
            .trim_start_matches("nvidia")
            .parse::<u32>()
            .is_ok()),
        "{out}"
    );
    assert!(
        out.contains("nvidiactl") && out.contains("libcuda.so.535.261.03"),
        "{out}"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn every_capability_is_listable_on_the_real_host() {
    let sim = SimHost::shared(Fixture::real(4));
    let out = sim.stdout(&["list", "--capabilities", "all"]);
    for name in [
        "libnvidia-ml.so.535",
        "libcuda.so.535",
        "libnvcuvid.so.535",
        "nvidia-smi",
        "gsp_ga10x.bin",
    ] {
        assert!(out.contains(name), "{name} missing from {out}");
    }
    assert!(!out.contains("470."), "stale 470 library listed: {out}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn bad_requests_are_one_line_errors() {
    let sim = SimHost::shared(Fixture::synthetic(4));
    let err = sim.failure(&["list", "--device", "9"]);
    assert!(
        err.contains("unknown device \"9\"") && err.contains(sim.facts.gpus[0].uuid.as_str()),
        "{err}"
    );
    let err = sim.failure(&["list", "--device", "junk!"]);
    assert!(err.contains("malformed device list"), "{err}");
    let err = sim.failure(&["list", "--capabilities", "compute,cuda"]);
    assert!(
        err.contains("unknown driver capability \"cuda\"") && err.contains("utility"),
        "{err}"
    );
}

#[test]
fn missing_explicit_config_names_the_file() {
    let out = hook(Path::new("/nonexistent/oci-nvidia-hook.toml"), &["list"]);
    let err = failure(out, &["list"]);
    assert!(err.contains("/nonexistent/oci-nvidia-hook.toml"), "{err}");
}

#[test]
fn invalid_config_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[driver]\nroot = \"/\"\nbogus-key = 1\n").unwrap();
    let err = failure(hook(&config, &["info"]), &["info"]);
    assert!(
        err.contains(&config.display().to_string()) && err.contains("line 3"),
        "{err}"
    );
}

#[test]
fn log_file_receives_the_error_too() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let log = dir.path().join("hook.log");
    std::fs::write(
        &config,
        format!(
            "[driver]\nproc-root = \"{}\"\n[log]\nfile = \"{}\"\n",
            dir.path().join("noproc").display(),
            log.display()
        ),
    )
    .unwrap();
    let err = failure(hook(&config, &["info"]), &["info"]);
    assert!(err.contains("NVIDIA kernel module not loaded"), "{err}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert_eq!(logged, err, "the log file gets the same line");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_reader_that_went_away_is_not_a_failure() {
    // `list | head`: the hook's output pipe has no reader. That ends the
    // listing quietly, with success, not with an error or a fatal SIGPIPE.
    let sim = SimHost::shared(Fixture::synthetic(4));
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    let out = std::process::Command::new(hook_binary())
        .env_clear()
        .arg("--config")
        .arg(&sim.config)
        .arg("list")
        .stdout(std::process::Stdio::from(write))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{:?}: {stderr}", out.status);
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_mig_device_lists_with_compute_alone_as_the_hook_takes_it() {
    // NVML is a utility library: list once failed here for want of it.
    let sim = SimHost::shared(Fixture::synthetic(4).mig());
    let mig = &sim.facts.mig[0];
    let position = format!("{}:{}", mig.gpu, mig.mig_index);
    let plan = sim.json(&[
        "list",
        "--device",
        &position,
        "--capabilities",
        "compute",
        "--json",
    ]);
    let devices: Vec<&str> = plan["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    for minor in [mig.gi_access_minor, mig.ci_access_minor] {
        let cap = format!("/dev/nvidia-caps/nvidia-cap{minor}");
        assert!(devices.contains(&cap.as_str()), "{cap} in {devices:?}");
    }
    assert_eq!(s(&plan, "/selected/0/mig"), mig.uuid);
    // Utility was looked for, not given.
    assert!(
        !plan["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| s(m, "/source").contains("libnvidia-ml")),
        "{plan:#}"
    );
}

/// The shipped static binary (`make build`) asks NVML through its embedded
/// helper, run from a memfd: a MIG device, which only NVML knows, lists
/// with its UUID and instance ids as the test build lists it.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn the_shipped_binary_lists_a_mig_device_through_its_helper() {
    let sim = SimHost::shared(Fixture::synthetic(4).mig());
    let mig = &sim.facts.mig[0];
    let position = format!("{}:{}", mig.gpu, mig.mig_index);
    let args = ["list", "--device", &position, "--json"];
    let shipped = harness::glibc::shipped_binary("x86_64-unknown-linux-musl", "build");
    let out = std::process::Command::new(&shipped)
        .env_clear()
        .arg("--config")
        .arg(&sim.config)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} {args:?}: {}",
        shipped.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s(&plan, "/selected/0/mig"), mig.uuid, "{plan:#}");
    assert_eq!(plan["selected"], sim.json(&args)["selected"]);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn unsupported_capabilities_are_not_listed() {
    let sim = SimHost::shared(Fixture::synthetic(4));
    let config = sim.path("utility-only.toml");
    let base = std::fs::read_to_string(&sim.config).unwrap();
    std::fs::write(
        &config,
        format!("supported-capabilities = \"utility\"\n{base}"),
    )
    .unwrap();
    let out = hook(&config, &["list", "--capabilities", "compute,utility"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(!listed.contains("nvidia-uvm"), "{listed}");
    assert!(!listed.contains("libcuda"), "{listed}");
    assert!(listed.contains("libnvidia-ml"), "{listed}");
}

/// The devices and files beyond the GPU on the real host's `--extras`
/// (Debian's X server, EGL platform and OpenCL packages): each listed
/// under the flag that selects it, and only then; another GPU's DRM nodes
/// and an unasked channel never.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn the_devices_and_files_beyond_the_gpu_list_under_their_flags() {
    let sim = SimHost::shared(Fixture::real(2).extras());
    let extras = sim.facts.extras.as_ref().expect("an --extras host");
    let dev = sim.path("devroot/dev").display().to_string();
    let (gpu, other) = (&sim.facts.gpus[1], &sim.facts.gpus[0]);
    let drm = |bus: &str| {
        let d = extras.drm.iter().find(|d| d.bus == bus).expect("DRM nodes");
        [d.card.clone(), d.render.clone()].map(|p| format!("{dev}{}", &p[4..]))
    };
    let device = gpu.index.to_string();
    let out = sim.stdout(&[
        "list",
        "--device",
        &device,
        "--capabilities",
        "display,compute,utility",
        "--imex-channels",
        "1",
        "--enable",
        "gds",
        "--enable",
        "nvswitch",
    ]);
    let lines: Vec<&str> = out.lines().collect();
    let mut want: Vec<String> = vec![
        format!("{dev}/nvidia-caps-imex-channels/channel1"),
        extras.xorg_driver.clone(),
        extras.glx_server.clone(),
        extras.opencl_icd.clone(),
        extras.udev.clone(),
        extras.cufile.clone(),
        extras.fabricmanager_socket.clone(),
    ];
    want.extend(drm(&gpu.bus));
    want.extend(extras.egl_platforms.iter().cloned());
    want.extend(
        extras
            .nvswitch
            .iter()
            .chain(&extras.gds)
            .map(|p| format!("{dev}{}", &p[4..])),
    );
    for path in &want {
        assert!(lines.contains(&path.as_str()), "{path} missing from {out}");
    }
    let mut never: Vec<String> = vec![format!("{dev}/nvidia-caps-imex-channels/channel0")];
    never.extend(drm(&other.bus));
    never.extend(
        extras
            .mofed
            .iter()
            .chain(&extras.gdrcopy)
            .map(|p| format!("{dev}{}", &p[4..])),
    );
    for path in &never {
        assert!(!lines.contains(&path.as_str()), "{path} listed: {out}");
    }
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.ends_with("nvidia-fabricmanager/socket"))
            .count(),
        1,
        "{out}"
    );
    // Without the flags, none of them.
    let plain = sim.stdout(&["list", "--device", &device, "--capabilities", "utility"]);
    for path in want
        .iter()
        .filter(|p| !p.ends_with("nvidia-fabricmanager/socket"))
    {
        assert!(!plain.lines().any(|l| l == path), "{path} listed: {plain}");
    }
    // NVIDIA's command line: the channel under --imex-channel, the DRM
    // nodes under --graphics, each among the devices.
    let cli = harness::nvidia_cli::nvidia_cli_stdout(
        &sim.config,
        &[
            "list",
            &format!("--device={device}"),
            "--graphics",
            "--imex-channel=1",
        ],
    );
    let cli_lines: Vec<&str> = cli.lines().collect();
    for path in drm(&gpu.bus)
        .iter()
        .chain([&format!("{dev}/nvidia-caps-imex-channels/channel1")])
    {
        assert!(
            cli_lines.contains(&path.as_str()),
            "{path} missing from {cli}"
        );
    }
    for path in drm(&other.bus) {
        assert!(!cli_lines.contains(&path.as_str()), "{path} listed: {cli}");
    }
}

//! The devices beyond the GPU through real runtimes (runc on cgroup v1 and
//! v2, Podman) on the `--extras` simulated host: IMEX channels, the
//! feature-gated NVSwitch, GDS, MOFED and GDRCopy nodes, and the selected
//! GPUs' DRM nodes; the files beyond the libraries (the X server's modules,
//! the EGL platforms, OpenCL's ICD, the GBM backend link, the application
//! profile, GDS's and the fabric manager's files). Opening an injected node
//! inside the container shows what the device cgroup allows (ENXIO allowed,
//! EPERM denied: see shared/TESTBED.md); what was not asked for must be
//! absent, and a decoy the container has without asking (an unrequested
//! IMEX channel, another GPU's DRM nodes) denied.

use std::collections::BTreeMap;

use harness::runtime::bundle::{Decoy, Hook, Scenario};
use harness::runtime::container::run;
use harness::runtime::run::{serial, Run};
use harness::runtime::runtimes::Runtime;
use harness::simhost::{Fixture, SimHost};

const RUNTIMES: [Runtime; 4] = [
    Runtime::RuncV1,
    Runtime::RuncV2,
    Runtime::Podman,
    Runtime::CrunV1,
];

fn host() -> SimHost {
    SimHost::shared(Fixture::synthetic(2).extras())
}

fn run_with(host: &SimHost, name: &str, runtime: Runtime, env: &[(&str, &str)]) -> Run {
    run_with_decoys(host, name, runtime, env, &[])
}

fn run_with_decoys(
    host: &SimHost,
    name: &str,
    runtime: Runtime,
    env: &[(&str, &str)],
    decoys: &[Decoy<'_>],
) -> Run {
    let serial = serial();
    let run = run(
        &serial,
        &Scenario {
            name,
            runtime,
            host,
            env,
            hook: Hook::Prestart,
            decoy_minors: &[],
            decoys,
            reuse_rootfs: false,
            prepare: None,
        },
    );
    run.assert_completed();
    run
}

fn denied(paths: &[&str]) -> BTreeMap<String, (char, String)> {
    paths
        .iter()
        .map(|p| (p.to_string(), ('c', "EPERM".to_string())))
        .collect()
}

/// The container's nodes outside the GPU driver's own: path to (type, what opening gave).
fn extra_nodes(run: &Run) -> BTreeMap<String, (char, String)> {
    let gpu_driver = |p: &str| {
        p == "/dev/nvidiactl"
            || p.starts_with("/dev/nvidia-uvm")
            || p == "/dev/nvidia-modeset"
            || p.strip_prefix("/dev/nvidia")
                .is_some_and(|n| n.parse::<u32>().is_ok())
            || p.starts_with("/dev/nvidia-caps/")
            || p == "/dev/nvidia-caps"
    };
    run.report
        .nodes
        .iter()
        .filter(|(path, _)| !gpu_driver(path))
        .map(|(path, n)| (path.clone(), (n.kind, n.open.clone().unwrap_or_default())))
        .collect()
}

fn allowed(paths: &[String]) -> BTreeMap<String, (char, String)> {
    paths
        .iter()
        .map(|p| (p.clone(), ('c', "ENXIO".to_string())))
        .collect()
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn imex_channels_asked_for_are_made_and_allowed_and_no_other() {
    let host = host();
    let extras = host.facts.extras.as_ref().expect("an --extras host");
    assert_eq!(extras.imex_channels, [0, 1]);
    for runtime in RUNTIMES {
        // Channel 1 is the host's; channel 5 is not, and is made all the
        // same. Channel 0, the host's too, is not asked for: the container
        // has it as a decoy, which the cgroup must deny.
        let name = format!("imex-{}", runtime.name());
        let decoy = "/dev/nvidia-caps-imex-channels/channel0";
        let run = run_with_decoys(
            &host,
            &name,
            runtime,
            &[
                ("NVIDIA_VISIBLE_DEVICES", "0"),
                ("NVIDIA_IMEX_CHANNELS", "1,5"),
            ],
            &[Decoy {
                path: decoy,
                major: extras.imex_major,
                minor: 0,
            }],
        );
        let mut want = allowed(&[
            "/dev/nvidia-caps-imex-channels/channel1".into(),
            "/dev/nvidia-caps-imex-channels/channel5".into(),
        ]);
        want.extend(denied(&[decoy]));
        want.insert(
            "/dev/nvidia-caps-imex-channels".into(),
            ('d', String::new()),
        );
        assert_eq!(extra_nodes(&run), want, "{runtime:?}:{}", run.describe());
        let numbers = run.report.nodes["/dev/nvidia-caps-imex-channels/channel5"].numbers;
        assert_eq!(numbers, Some((extras.imex_major, 5)), "{}", run.describe());
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn gated_devices_come_when_enabled_and_are_allowed() {
    let host = host();
    let extras = host.facts.extras.as_ref().expect("an --extras host");
    for runtime in RUNTIMES {
        let name = format!("gated-none-{}", runtime.name());
        let run = run_with(&host, &name, runtime, &[("NVIDIA_VISIBLE_DEVICES", "0")]);
        assert_eq!(extra_nodes(&run), BTreeMap::new(), "{}", run.describe());

        let name = format!("gated-all-{}", runtime.name());
        let run = run_with(
            &host,
            &name,
            runtime,
            &[
                ("NVIDIA_VISIBLE_DEVICES", "0"),
                ("NVIDIA_GDS", "enabled"),
                ("NVIDIA_MOFED", "enabled"),
                ("NVIDIA_NVSWITCH", "enabled"),
                ("NVIDIA_GDRCOPY", "enabled"),
            ],
        );
        let paths: Vec<String> = [
            &extras.nvswitch,
            &extras.gds,
            &extras.mofed,
            &extras.gdrcopy,
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
        assert_eq!(
            extra_nodes(&run),
            allowed(&paths),
            "{runtime:?}:{}",
            run.describe()
        );
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn graphics_brings_the_selected_gpus_drm_nodes_only() {
    let host = host();
    let extras = host.facts.extras.as_ref().expect("an --extras host");
    let gpu = &host.facts.gpus[1];
    let drm = extras.drm_of(&gpu.bus);
    // GPU 0's DRM nodes, which the container has without asking: denied.
    let other = extras.drm_of(&host.facts.gpus[0].bus);
    let number = |path: &str| -> u32 {
        path.trim_start_matches(|c: char| !c.is_ascii_digit())
            .parse()
            .expect("a DRM node's number")
    };
    let decoys = [
        Decoy {
            path: &other.card,
            major: 226,
            minor: number(&other.card),
        },
        Decoy {
            path: &other.render,
            major: 226,
            minor: number(&other.render),
        },
    ];
    for runtime in RUNTIMES {
        let name = format!("drm-{}", runtime.name());
        let run = run_with_decoys(
            &host,
            &name,
            runtime,
            &[
                ("NVIDIA_VISIBLE_DEVICES", "1"),
                ("NVIDIA_DRIVER_CAPABILITIES", "graphics,utility"),
            ],
            &decoys,
        );
        let got = extra_nodes(&run);
        let mut want = allowed(&[drm.card.clone(), drm.render.clone()]);
        want.extend(denied(&[&other.card, &other.render]));
        let bus = gpu.bus.to_ascii_lowercase();
        want.insert("/dev/dri/by-path".into(), ('d', String::new()));
        for kind in ["card", "render"] {
            want.insert(
                format!("/dev/dri/by-path/pci-{bus}-{kind}"),
                ('l', String::new()),
            );
        }
        assert_eq!(got, want, "{runtime:?}:{}", run.describe());
        // Compute alone brings no DRM node.
        let name = format!("drm-compute-{}", runtime.name());
        let run = run_with(&host, &name, runtime, &[("NVIDIA_VISIBLE_DEVICES", "1")]);
        assert_eq!(extra_nodes(&run), BTreeMap::new(), "{}", run.describe());
    }
}

/// The files beyond the libraries, through every runtime: display's X
/// server modules, graphics' EGL platforms, the GBM backend link and the
/// application profile naming the container's GPU, compute's OpenCL ICD;
/// GDS's udev database and cufile.json, the fabric manager's socket.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn the_files_beyond_the_libraries_come_with_what_selects_them() {
    let host = host();
    let extras = host.facts.extras.as_ref().expect("an --extras host");
    let gpu = &host.facts.gpus[1];
    let size = |path: &str| std::fs::metadata(path).expect("a host file").len();
    let egl: Vec<(String, u64)> = extras
        .egl_platforms
        .iter()
        .map(|p| {
            let name = std::path::Path::new(p)
                .file_name()
                .unwrap()
                .to_string_lossy();
            (
                format!("/usr/share/egl/egl_external_platform.d/{name}"),
                size(p),
            )
        })
        .collect();
    assert_eq!(egl.len(), 2, "{egl:?}");
    let mut want: Vec<(String, u64)> = vec![
        (
            "/usr/lib/xorg/modules/drivers/nvidia_drv.so".into(),
            size(&extras.xorg_driver),
        ),
        (
            "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so".into(),
            size(&extras.glx_server),
        ),
        (
            "/etc/OpenCL/vendors/nvidia.icd".into(),
            size(&extras.opencl_icd),
        ),
        ("/etc/cufile.json".into(), size(&extras.cufile)),
    ];
    want.extend(egl);
    let profile = "/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf";
    for runtime in RUNTIMES {
        let name = format!("files-{}", runtime.name());
        let run = run_with(
            &host,
            &name,
            runtime,
            &[
                ("NVIDIA_VISIBLE_DEVICES", "1"),
                ("NVIDIA_DRIVER_CAPABILITIES", "display,compute,utility"),
                ("NVIDIA_GDS", "enabled"),
                ("NVIDIA_NVSWITCH", "enabled"),
            ],
        );
        let ctx = run.describe();
        for (path, size) in &want {
            let file = run
                .report
                .files
                .get(path)
                .unwrap_or_else(|| panic!("{runtime:?}: {path} missing:{ctx}"));
            assert_eq!(file.size, *size, "{runtime:?}: {path}:{ctx}");
            assert!(file.read_only && file.nosuid && file.nodev, "{path}:{ctx}");
        }
        let udev = &run.report.files["/run/udev"];
        assert!(udev.read_only && udev.noexec, "/run/udev:{ctx}");
        assert!(
            run.report
                .files
                .contains_key("/run/nvidia-fabricmanager/socket"),
            "{runtime:?}: the fabric manager's socket:{ctx}"
        );
        assert_eq!(
            run.report
                .links
                .get("/usr/lib/x86_64-linux-gnu/gbm/nvidia-drm_gbm.so")
                .map(String::as_str),
            Some("../libnvidia-allocator.so.1"),
            "{runtime:?}: the GBM backend link:{ctx}"
        );
        // Ours, written, not mounted: it outlives the container in its rootfs.
        let written = std::fs::read_to_string(run.rootfs.join(&profile[1..]))
            .unwrap_or_else(|e| panic!("{runtime:?}: {profile}: {e}:{ctx}"));
        let mask = format!("\"EGLVisibleDGPUDevices\",{:#x}]", 1u64 << gpu.minor);
        assert!(written.contains(&mask), "{runtime:?}: {written}");
        // Compute alone: none of graphics' and display's files, nor GDS's.
        let name = format!("files-compute-{}", runtime.name());
        let run = run_with(&host, &name, runtime, &[("NVIDIA_VISIBLE_DEVICES", "1")]);
        let files: Vec<&String> = run.report.files.keys().collect();
        assert!(
            run.report
                .files
                .contains_key("/etc/OpenCL/vendors/nvidia.icd"),
            "{files:?}"
        );
        for absent in [
            "/usr/lib/xorg/modules/drivers/nvidia_drv.so",
            "/etc/cufile.json",
            "/run/udev",
            profile,
        ] {
            assert!(
                !run.report.files.contains_key(absent),
                "{absent}: {files:?}"
            );
        }
    }
}

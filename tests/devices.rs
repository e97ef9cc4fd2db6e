//! The devices beyond the GPU through real runtimes (runc on cgroup v1 and
//! v2, Podman) on the `--extras` simulated host: IMEX channels, the
//! feature-gated NVSwitch, GDS, MOFED and GDRCopy nodes, and the selected
//! GPUs' DRM nodes. Opening an injected node inside the container shows
//! what the device cgroup allows (ENXIO allowed, EPERM denied: see
//! shared/TESTBED.md); what was not asked for must be absent.

use std::collections::BTreeMap;

use harness::runtime::bundle::{Hook, Scenario};
use harness::runtime::container::run;
use harness::runtime::run::{serial, Run};
use harness::runtime::runtimes::Runtime;
use harness::simhost::{Fixture, SimHost};

const RUNTIMES: [Runtime; 3] = [Runtime::RuncV1, Runtime::RuncV2, Runtime::Podman];

fn host() -> SimHost {
    SimHost::shared(Fixture::synthetic(2).extras())
}

fn run_with(host: &SimHost, name: &str, runtime: Runtime, env: &[(&str, &str)]) -> Run {
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
            reuse_rootfs: false,
            prepare: None,
        },
    );
    run.assert_completed();
    run
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
        // Channel 1 is the host's; channel 5 is not, and is made all the same.
        let name = format!("imex-{}", runtime.name());
        let run = run_with(
            &host,
            &name,
            runtime,
            &[
                ("NVIDIA_VISIBLE_DEVICES", "0"),
                ("NVIDIA_IMEX_CHANNELS", "1,5"),
            ],
        );
        let mut want = allowed(&[
            "/dev/nvidia-caps-imex-channels/channel1".into(),
            "/dev/nvidia-caps-imex-channels/channel5".into(),
        ]);
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
    let drm = extras
        .drm
        .iter()
        .find(|d| d.bus == gpu.bus)
        .expect("GPU 1 has DRM nodes");
    for runtime in RUNTIMES {
        let name = format!("drm-{}", runtime.name());
        let run = run_with(
            &host,
            &name,
            runtime,
            &[
                ("NVIDIA_VISIBLE_DEVICES", "1"),
                ("NVIDIA_DRIVER_CAPABILITIES", "graphics,utility"),
            ],
        );
        let got = extra_nodes(&run);
        let mut want = allowed(&[drm.card.clone(), drm.render.clone()]);
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

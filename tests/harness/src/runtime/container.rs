//! Running one container from a [`Scenario`], start to end: real runc,
//! crun or Podman with `oci-nvidia-hook` as its prestart hook, on a
//! simulated GPU host (shared/TESTBED.md says how each runtime runs on
//! these machines). The run is bounded in time (run.rs), and the container
//! is removed by a drop guard (cleanup.rs) even when the test fails.

use std::time::Instant;

use super::bundle::{Bundle, BundleExtras, Scenario};
use super::cleanup::Cleanup;
use super::process::run_bounded;
use super::run::{Run, RunFiles, Serial, RUN_LIMIT};

/// Runs one container and returns what happened. Panics on a missing tool,
/// a bundle that cannot be made, and as [`Run::collect`] does.
pub fn run(serial: &Serial, scenario: &Scenario) -> Run {
    run_with(serial, scenario, &BundleExtras::default())
}

/// [`run`] with the bundle changes `extras` asks for.
pub fn run_with(serial: &Serial, scenario: &Scenario, extras: &BundleExtras) -> Run {
    scenario.runtime.require_tools();
    run_extras_through(serial, scenario, extras, |argv| {
        scenario.runtime.in_namespace(argv)
    })
}

/// [`run`], with the runtime's command line run by the command `wrap`
/// makes of it (tests/bullseye.rs: inside another system's root); the
/// runtime's tools are the wrapper's to provide.
pub fn run_through(
    serial: &Serial,
    scenario: &Scenario,
    wrap: impl FnOnce(Vec<String>) -> std::process::Command,
) -> Run {
    run_extras_through(serial, scenario, &BundleExtras::default(), wrap)
}

fn run_extras_through(
    _serial: &Serial,
    scenario: &Scenario,
    extras: &BundleExtras,
    wrap: impl FnOnce(Vec<String>) -> std::process::Command,
) -> Run {
    assert!(
        scenario.decoy_minors.is_empty() || !scenario.runtime.is_podman(),
        "decoy nodes need a runtime that takes config.json, not podman"
    );
    let bundle = Bundle::create(scenario, extras);
    let id = format!("onh-{}-{}", scenario.name, std::process::id());
    let argv = bundle.runtime_argv(scenario, &id);

    let guard = Cleanup {
        runtime: scenario.runtime,
        id,
        state_root: bundle.state_root(),
        hooks_dir: bundle.hooks_dir(),
    };
    let dev_before = host_dev_nvidia();
    let started = Instant::now();
    let finished = run_bounded(wrap(argv), RUN_LIMIT);
    let elapsed = started.elapsed();
    drop(guard);
    // Driver code (NVML, libcuda) the hook ran makes nothing in the
    // machine's own /dev (NVIDIA's libnvidia-ml, as root, would make
    // /dev/nvidiactl there unconfined).
    assert_eq!(
        host_dev_nvidia(),
        dev_before,
        "{}: the machine's /dev gained or lost NVIDIA entries",
        scenario.name
    );

    let run = Run::collect(
        scenario.runtime,
        scenario.name,
        finished,
        elapsed,
        RunFiles {
            bundle: &bundle.dir,
            rootfs: &bundle.rootfs(),
            hook_log: &bundle.hook_log(),
        },
    );
    eprintln!(
        "{} [{}]: container run took {} ms",
        run.name,
        run.runtime.name(),
        run.elapsed.as_millis()
    );
    run
}

/// The machine's own `/dev` entries named `nvidia*`.
fn host_dev_nvidia() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/dev")
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("nvidia"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

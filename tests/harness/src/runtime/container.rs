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

/// [`run`] of a scenario without our hook (`Hook::Absent`), through our
/// runtime wrapper in front of runc: its config is the scenario host's
/// hook config plus `[runtime]` with `runtime_keys` and runc as the
/// runtime, written at `work_root()/name/wrapper.toml` (logging beside it).
pub fn run_through_wrapper(serial: &Serial, scenario: &Scenario, runtime_keys: &str) -> Run {
    let runc =
        super::runtimes::find_tool("runc").expect("runc is not on PATH (integration/install-deps)");
    let dir = super::bundle::work_root().join(scenario.name);
    super::cleanup::remove_tree_safely(&dir);
    std::fs::create_dir_all(&dir).expect("create the wrapper's directory");
    let config = dir.join("wrapper.toml");
    super::bundle::write_hook_config(scenario.host, &config, &dir.join("wrapper.log"), "debug");
    let mut text = std::fs::read_to_string(&config).expect("read the wrapper config");
    text.push_str(&format!(
        "\n[runtime]\n{runtime_keys}runtimes = [\"{}\"]\n",
        super::oci_config::path_str(&runc)
    ));
    std::fs::write(&config, text).expect("write the wrapper config");
    run_through(serial, scenario, |argv| {
        let mut cmd = std::process::Command::new(crate::project::hook_binary());
        cmd.arg("--config")
            .arg(&config)
            .arg("runtime")
            .args(&argv[1..]);
        cmd
    })
}

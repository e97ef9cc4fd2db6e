//! Docker 28, as fleets run it now: Debian sid's docker.io 28.5 with its
//! containerd 2.1 and runc 1.3, from the root made once by debootstrap
//! into `/var/cache/oci-nvidia-hook/sid` (harness::debroot), on a
//! simulated 4-GPU host with NVIDIA's real 535 libraries.
//!
//! One dockerd per CDI setting, every case sharing it: `features.cdi` on
//! (our `nvidia-ctk runtime configure --runtime=docker --cdi.enabled`) and
//! off (`false` in daemon.json, which our plain `runtime configure` keeps).
//! With each, `--gpus all`, `--gpus '"device=1"'`, `--gpus
//! device=GPU-<uuid>`, `--gpus 'all,"capabilities=utility"'`, `--device
//! nvidia.com/gpu=all` (our spec in `/etc/cdi`; refused with CDI off) and
//! `--runtime nvidia` (our wrapper), each giving exactly what was asked:
//! the allocated GPUs open (ENXIO: the device cgroup allows them), decoys
//! of the others are denied (EPERM), libcuda answers for compute. Which
//! path `--gpus` took is read from a running container's `config.json`:
//! NVIDIA's prestart hook, or CDI edits (Docker 29 takes CDI where
//! `nvidia-cdi-hook` exists, moby PR 50228; Debian's 28.5 does not).
//! With CDI on, the spec is then removed: Docker refuses the CDI name with
//! its own message, `--gpus` still works through the hook, and doctor
//! names the command that makes a spec; it does so too with `features.cdi`
//! unset (on by default for this Docker, whose version doctor reads from
//! dpkg's database) and an `nvidia-cdi-hook` on dockerd's PATH.
//!
//! Needs root and debootstrap (integration/install-deps); the first run
//! makes or completes the root: `cargo test --features _test_as_root --test docker28`.

use std::fs;
use std::path::PathBuf;

use harness::debroot::sid;
use harness::host_root::checks_with;
use harness::mounts::{assert_mounts_unchanged, host_mounts};
use harness::project::hook_binary;
use harness::runtime::bundle::{fresh_work_dir, template_rootfs};
use harness::runtime::cleanup::{cgroup_dirs, remove_tree_safely};
use harness::runtime::daemons::{docker_configured, Daemons};
use harness::runtime::host_state::{listing_diff, tree_listing};
use harness::runtime::injected::{assert_gpus, assert_utility_only, gpu};
use harness::runtime::process::{run_bounded, Finished};
use harness::runtime::run::{serial, Run, RUN_LIMIT};
use harness::simhost::{Fixture, SimHost};

/// The image the containers run: the template rootfs, imported.
const IMAGE: &str = "onh-docker28:test";

/// How dockerd sent a `--gpus` request to the container.
#[derive(Debug, PartialEq, Eq)]
enum GpusPath {
    /// NVIDIA's prestart hook in the spec, no GPU node: the hook injects.
    Hook,
    /// GPU nodes in the spec and no such hook: CDI edits.
    Cdi,
}

/// A Docker 28 daemon on one CDI setting, and the host as it was before.
struct Engine {
    daemons: Daemons,
    host: SimHost,
    work: PathBuf,
    hook_log: PathBuf,
    mounts_before: Vec<String>,
    driver_before: std::collections::BTreeMap<PathBuf, String>,
}

impl Engine {
    /// dockerd 28 from the sid root with `features.cdi` set to `cdi` in
    /// daemon.json, configured by our `nvidia-ctk`; checks that it is
    /// Docker 28 and that CDI is as set.
    fn start(cdi: bool) -> Engine {
        let root = sid();
        let host = SimHost::shared(Fixture::real(4));
        let (mounts_before, driver_before) = (host_mounts(), tree_listing(&host.dir));
        let setting = if cdi { "on" } else { "off" };
        let (work, hook_config, hook_log) =
            fresh_work_dir(&host, &format!("docker28-cdi-{setting}"));
        let daemon_json = work.join("daemon.json");
        // CDI off is said outright: Docker 28.5 turns it on unless told.
        let start = if cdi {
            "{}"
        } else {
            "{\"features\": {\"cdi\": false}}"
        };
        fs::write(&daemon_json, format!("{start}\n")).unwrap();
        let configure: &[&str] = if cdi { &["--cdi.enabled"] } else { &[] };
        let daemons = docker_configured(&work, &hook_config, &daemon_json, &host, &root, configure);
        let written: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&daemon_json).unwrap()).unwrap();
        assert_eq!(written["features"]["cdi"], cdi, "{written}");
        assert_eq!(
            written["runtimes"]["nvidia"]["path"]
                .as_str()
                .map(|p| p.ends_with("/nvidia-container-runtime")),
            Some(true),
            "{written}"
        );
        daemons.assert_server("28.", cdi);
        daemons.import_rootfs(&template_rootfs(&host), IMAGE);
        Engine {
            daemons,
            host,
            work,
            hook_log,
            mounts_before,
            driver_before,
        }
    }

    /// `docker run --rm ARGS IMAGE` with the checker, decoys for `decoys`.
    fn run(&self, name: &str, args: &[&str], decoys: &[u32]) -> Run {
        self.daemons
            .checker_run(name, args, IMAGE, decoys, &self.hook_log)
    }

    /// The minor number of GPU `index`.
    fn minor(&self, index: u32) -> u32 {
        gpu(&self.host, index).minor
    }

    /// `docker run ARGS IMAGE /bin/true`, which must fail; what it printed.
    fn refused(&self, args: &[&str]) -> String {
        let mut argv = vec!["run", "--rm", "--network", "none"];
        argv.extend_from_slice(args);
        argv.extend_from_slice(&[IMAGE, "/bin/true"]);
        let out = self.daemons.docker(&argv);
        assert!(
            out.status.is_some_and(|s| !s.success()),
            "docker run {args:?} should fail: {}{}",
            out.stdout,
            out.stderr
        );
        out.stderr
    }

    /// The path `--gpus all` takes, read from a running container's
    /// `config.json` in containerd's state, the container then removed.
    fn gpus_path(&self) -> GpusPath {
        let id = self.daemons.run_detached(&["--gpus", "all"], IMAGE);
        let config = fs::read(self.daemons.task_config(&id));
        let removed = self.daemons.docker(&["rm", "-f", &id]);
        assert!(
            removed.status.is_some_and(|s| s.success()),
            "{}",
            removed.stderr
        );
        let spec: serde_json::Value =
            serde_json::from_slice(&config.expect("config.json")).expect("config.json is JSON");
        let hook = spec["hooks"]["prestart"].as_array().is_some_and(|hooks| {
            hooks
                .iter()
                .any(|h| h["args"][0] == "nvidia-container-runtime-hook")
        });
        let nodes = spec["linux"]["devices"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["path"] == "/dev/nvidiactl"));
        match (hook, nodes) {
            (true, false) => GpusPath::Hook,
            (false, true) => GpusPath::Cdi,
            _ => panic!("--gpus all: neither path alone (hook {hook}, nodes {nodes}): {spec:#}"),
        }
    }

    /// Stops the daemons; the host must be as it was: mounts, the
    /// simulated driver, no cgroup of theirs.
    fn finish(self) {
        let tag = self.daemons.tag.clone();
        drop(self.daemons);
        let left = cgroup_dirs(|n| n.to_str().is_some_and(|n| n.starts_with(&tag)));
        assert!(left.is_empty(), "cgroups left behind: {left:?}");
        assert_mounts_unchanged(&self.mounts_before, "after the Docker 28 daemons stopped");
        let changed = listing_diff(&self.driver_before, &tree_listing(&self.host.dir));
        assert!(
            changed.is_empty(),
            "the simulated host changed: {changed:?}"
        );
        remove_tree_safely(&self.work);
    }
}

/// The `--gpus` forms and `--runtime nvidia`, the same under either CDI
/// setting: each gives exactly the GPUs asked for.
fn gpus_and_runtime(engine: &Engine) {
    let host = &engine.host;
    let all = engine.run("gpus-all", &["--gpus", "all"], &[]);
    assert_gpus(&all, host, &[0, 1, 2, 3], &[]);
    let decoy = engine.minor(0);
    let one = engine.run("gpus-device-1", &["--gpus", "\"device=1\""], &[decoy]);
    assert_gpus(&one, host, &[1], &[decoy]);
    let uuid = format!("device={}", gpu(host, 3).uuid);
    let decoy = engine.minor(1);
    let by_uuid = engine.run("gpus-uuid", &["--gpus", &uuid], &[decoy]);
    assert_gpus(&by_uuid, host, &[3], &[decoy]);
    let utility = engine.run(
        "gpus-utility",
        &["--gpus", "all,\"capabilities=utility\""],
        &[],
    );
    assert_utility_only(&utility, host);
    let decoy = engine.minor(3);
    let wrapper = engine.run(
        "runtime-nvidia",
        &["--runtime", "nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=1"],
        &[decoy],
    );
    assert_gpus(&wrapper, host, &[1], &[decoy]);
}

/// `oci-nvidia-hook doctor --json` in the daemons' namespace (their `/etc`
/// with daemon.json and the hook's config): its warnings, as `(name,
/// found, remedy)`.
fn doctor_warnings(daemons: &Daemons) -> Vec<(String, String, String)> {
    let mut cmd = daemons.in_namespace(&hook_binary().to_string_lossy());
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .args(["doctor", "--json"]);
    let out: Finished = run_bounded(cmd, RUN_LIMIT);
    let report: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor printed no JSON ({e}): {}{}", out.stdout, out.stderr));
    checks_with(&report, "warn")
        .into_iter()
        .map(|c| (c.name, c.found, c.remedy))
        .collect()
}

/// `features.cdi` on: the `--gpus` forms through the hook, `--device
/// nvidia.com/gpu=all` from our spec; then, the spec gone, Docker refuses
/// the CDI name, `--gpus` still works, and doctor names `cdi generate`.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn docker_28_with_cdi_on() {
    let _serial = serial();
    let engine = Engine::start(true);
    let path = engine.gpus_path();
    eprintln!("Docker 28, features.cdi on: --gpus took {path:?}");
    assert_eq!(
        path,
        GpusPath::Hook,
        "Debian's Docker 28.5 has no moby PR 50228"
    );
    gpus_and_runtime(&engine);
    let cdi_all = engine.run("cdi-all", &["--device", "nvidia.com/gpu=all"], &[]);
    assert_gpus(&cdi_all, &engine.host, &[0, 1, 2, 3], &[]);

    fs::remove_file(engine.daemons.ns_path("/etc/cdi/nvidia.yaml")).expect("remove our spec");
    let said = engine.refused(&["--device", "nvidia.com/gpu=all"]);
    eprintln!("Docker 28, features.cdi on, no spec: {said}");
    assert!(
        said.contains("unresolvable CDI devices nvidia.com/gpu=all"),
        "Docker's own message: {said}"
    );
    let hook = engine.run("gpus-all-no-spec", &["--gpus", "all"], &[]);
    assert_gpus(&hook, &engine.host, &[0, 1, 2, 3], &[]);
    let warnings = doctor_warnings(&engine.daemons);
    assert!(
        warnings
            .iter()
            .any(|(name, found, remedy)| name == "Docker CDI"
                && found.contains("no CDI spec")
                && remedy.contains("oci-nvidia-hook cdi generate")),
        "doctor names the command that makes a spec: {warnings:#?}"
    );
    // features.cdi left unset, which this Docker (28.5, dpkg's database in
    // the sid root says) takes as on, and an nvidia-cdi-hook on dockerd's
    // PATH: Docker 29 would send `--gpus` through CDI and find no spec.
    let daemon_json = engine.daemons.ns_path("/etc/docker/daemon.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&daemon_json).unwrap()).unwrap();
    json.as_object_mut().unwrap().remove("features");
    fs::write(&daemon_json, json.to_string()).unwrap();
    std::os::unix::fs::symlink(
        hook_binary(),
        engine.daemons.dir.join("bin/nvidia-cdi-hook"),
    )
    .unwrap();
    let warnings = doctor_warnings(&engine.daemons);
    assert!(
        warnings
            .iter()
            .any(|(name, found, remedy)| name == "Docker CDI"
                && found.contains("the default from Docker 28.2")
                && found.contains("nvidia-cdi-hook")
                && remedy.contains("oci-nvidia-hook cdi generate")),
        "doctor takes an unset features.cdi as on for Docker 28.5: {warnings:#?}"
    );
    engine.finish();
}

/// `features.cdi` off: the `--gpus` forms through the hook as with it on,
/// and Docker refuses `--device nvidia.com/gpu=all` though our spec is in
/// `/etc/cdi`.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn docker_28_with_cdi_off() {
    let _serial = serial();
    let engine = Engine::start(false);
    let path = engine.gpus_path();
    eprintln!("Docker 28, features.cdi off: --gpus took {path:?}");
    assert_eq!(path, GpusPath::Hook);
    gpus_and_runtime(&engine);
    let said = engine.refused(&["--device", "nvidia.com/gpu=all"]);
    eprintln!("Docker 28, features.cdi off: --device nvidia.com/gpu=all: {said}");
    assert!(
        said.contains("could not select device driver \"cdi\""),
        "Docker's own message: {said}"
    );
    engine.finish();
}

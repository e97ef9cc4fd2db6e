//! Load: many containers through `oci-nvidia-hook prestart` at once, and one
//! container restarted hundreds of times, on a synthetic 24-GPU simulated
//! host, with runc on cgroup v1 and v2.
//!
//! - 24 runc containers start concurrently, each asking for its own GPU.
//!   Each container's process waits at a barrier until every one of the 24
//!   is running (so every hook has run), and only then looks: it must see
//!   exactly its own `/dev/nvidia<minor>` (plus `nvidiactl`, `nvidia-uvm`,
//!   `nvidia-uvm-tools`), each opening with ENXIO (the device cgroup allows
//!   it), `/dev/null` must open, and the synthetic `libcuda` must load
//!   through the rewritten cache. While they wait, the host reads each
//!   container's device cgroup (v1 `devices.list`, v2 the attached BPF
//!   programs). All 24 hooks log to ONE file at `info`: it must hold exactly
//!   one intact `injected` line per container. On cgroup v2 every other
//!   GPU's node is a runc "decoy" (created without a cgroup rule), which
//!   must open with EPERM: no container's program allows another's GPU.
//! - 500 sequential runc (v1) starts of `/bin/true` with
//!   `NVIDIA_VISIBLE_DEVICES=all`, reusing one bundle and rootfs (a
//!   restarting container), and 100 on cgroup v2; then nothing may be left:
//!   the host's mount table, the simulated host's tree, cgroup directories,
//!   BPF programs, processes, runtime state; and the image's rewritten
//!   `ld.so.cache` must be the same after the last start as after the first.
//!
//! Run as root: `make test`, or
//! `cargo test --features _test_as_root --test load -- --nocapture`
//! (`--nocapture` shows the timings).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde_json::Value;

use harness::mounts::{assert_mounts_unchanged, host_mounts};
use harness::project::hook_binary;
use harness::runtime::bundle::{work_root, BundleExtras, Hook, Scenario};
use harness::runtime::cleanup::cgroup_dirs;
use harness::runtime::container::run;
use harness::runtime::expected::{node_specs, LIB_DIR};
use harness::runtime::host_state::{listing_diff, tree_listing};
use harness::runtime::oci_config::{path_str, NVIDIA_MAJOR};
use harness::runtime::prepared::{prepare, Prepared};
use harness::runtime::process::{run_bounded, Finished};
use harness::runtime::run::{serial, Run, Serial};
use harness::runtime::runtimes::{require_tool, Runtime};
use harness::simhost::{Fixture, GpuFacts, SimHost};

/// GPUs on the simulated host, and containers started at once.
const GPUS: u32 = 24;
/// One concurrent container's run, barrier wait included.
const CONCURRENT_RUN_LIMIT: Duration = Duration::from_secs(50);
/// How long the 24 may take to be all running.
const ALL_RUNNING_LIMIT: Duration = Duration::from_secs(40);
/// One sequential start of `/bin/true`: ~50 ms here.
const START_LIMIT: Duration = Duration::from_secs(20);
/// The whole sequential loop, so a slow machine fails instead of dragging on.
const SEQUENTIAL_LIMIT: Duration = Duration::from_secs(150);
/// How long freed cgroups may take to release their BPF programs (the
/// kernel does it from a workqueue after the cgroup is gone).
const BPF_SETTLE: Duration = Duration::from_secs(10);
/// What our v2 device programs are called (`bpftool prog` shows it).
const PROG_NAME: &str = "oci_nvidia_dev";

fn host() -> SimHost {
    SimHost::shared(Fixture::synthetic(GPUS))
}

// ================================================================ 24 at once

/// What each container runs: say it is running, wait (bounded) until the
/// test says every container is, then report.
const WAIT_THEN_CHECK: &str = r#": > "/sync/running-$1"
i=0
while [ ! -e /sync/go ]; do
  i=$((i+1))
  if [ "$i" -gt 800 ]; then echo "load: no go signal within 40 s" >&2; exit 3; fi
  sleep 0.05
done
exec /checker"#;

/// Creates `/sync/go` when dropped: containers are released even when the
/// test panics while they wait.
struct Go(PathBuf);

impl Drop for Go {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, b"go\n");
    }
}

/// What the host saw of one container's device cgroup while all 24 ran.
#[derive(Debug, Default)]
struct CgroupView {
    /// v1: the `c 195:N` minors its `devices.list` allows ("*" as u32::MAX).
    nvidia_minors: BTreeSet<u32>,
    /// v1: `a *:* rwm` is listed (everything allowed).
    allows_all: bool,
    /// v2: the BPF programs attached to its cgroup: (id, name).
    programs: Vec<(u64, String)>,
}

/// The 24 containers of one concurrent run, made but not started, each
/// asking for its own GPU; on v2 every other GPU's node is a runc decoy.
struct Fleet {
    /// Bind-mounted at /sync in every container: its `running-<name>`
    /// files and the `go` signal.
    sync: PathBuf,
    /// The one log file every hook appends to.
    log: PathBuf,
    /// The containers' names, in GPU order.
    names: Vec<String>,
    /// Dropped (containers deleted, cgroups removed) last, even on failure.
    prepared: Vec<Prepared>,
}

/// Makes the scratch directories and the bundles of the 24 containers.
fn prepare_fleet(serial: &Serial, runtime: Runtime, host: &SimHost, gpus: &[GpuFacts]) -> Fleet {
    let v2 = runtime == Runtime::RuncV2;
    let scratch = work_root().join(format!("load-{}", runtime.name()));
    let sync = scratch.join("sync");
    let log = scratch.join("hook.log");
    if sync.exists() {
        std::fs::remove_dir_all(&sync).expect("remove the old sync dir");
    }
    std::fs::create_dir_all(&sync).expect("create the sync dir");
    let _ = std::fs::remove_file(&log);

    let names: Vec<String> = gpus
        .iter()
        .map(|g| format!("load-{}-{:02}", runtime.name(), g.index))
        .collect();
    let made = Instant::now();
    let prepared: Vec<Prepared> = gpus
        .iter()
        .zip(&names)
        .map(|(gpu, name)| {
            let index = gpu.index.to_string();
            // On v2, every other GPU's node is there, made by runc without a rule.
            let decoys: Vec<u32> = gpus
                .iter()
                .filter(|g| v2 && g.index != gpu.index)
                .map(|g| g.minor)
                .collect();
            let extras = BundleExtras {
                args: Some(
                    ["/bin/sh", "-c", WAIT_THEN_CHECK, "sh", name]
                        .map(String::from)
                        .to_vec(),
                ),
                binds: vec![(sync.clone(), "/sync".into())],
                hook_log: Some(log.clone()),
                log_level: Some("info"),
                config_head: None,
            };
            prepare(
                serial,
                &Scenario {
                    name,
                    runtime,
                    host,
                    env: &[("NVIDIA_VISIBLE_DEVICES", &index)],
                    hook: Hook::Prestart,
                    decoy_minors: &decoys,
                    decoys: &[],
                    reuse_rootfs: false,
                    prepare: None,
                },
                &extras,
            )
        })
        .collect();
    eprintln!(
        "{}: {} bundles made in {} ms",
        runtime.name(),
        prepared.len(),
        made.elapsed().as_millis()
    );
    Fleet {
        sync,
        log,
        names,
        prepared,
    }
}

/// What happened when the fleet ran.
struct Concurrent {
    /// Each container's run, in GPU order.
    runs: Vec<Run>,
    /// When all of them were running; `None` if they never all were.
    all_running: Option<Duration>,
    /// Each container's device cgroup, read while all of them ran.
    views: Vec<Result<CgroupView, String>>,
    /// From the first start to the last exit.
    total: Duration,
}

/// Starts every container of the fleet at once (a barrier), waits until
/// all are running (so every hook has run), reads their device cgroups,
/// then lets them look and collects their runs.
fn start_all_at_once(fleet: &Fleet, v2: bool) -> Concurrent {
    let barrier = Barrier::new(fleet.prepared.len() + 1);
    let exited = AtomicUsize::new(0);
    let started = Instant::now();
    let (outcomes, all_running, views) = std::thread::scope(|scope| {
        let go = Go(fleet.sync.join("go"));
        let handles: Vec<_> = fleet
            .prepared
            .iter()
            .map(|p| {
                let (barrier, exited) = (&barrier, &exited);
                scope.spawn(move || {
                    let cmd = p.command();
                    barrier.wait();
                    let t = Instant::now();
                    let finished = run_bounded(cmd, CONCURRENT_RUN_LIMIT);
                    exited.fetch_add(1, Ordering::SeqCst);
                    (finished, t.elapsed())
                })
            })
            .collect();
        barrier.wait();
        let all_running = wait_all_running(fleet, &exited, started);
        // Every hook has run: look at each container's device cgroup now.
        let views: Vec<Result<CgroupView, String>> =
            fleet.prepared.iter().map(|p| cgroup_view(p, v2)).collect();
        drop(go);
        let outcomes: Vec<(Finished, Duration)> = handles
            .into_iter()
            .map(|h| h.join().expect("a runner thread panicked"))
            .collect();
        (outcomes, all_running, views)
    });
    let total = started.elapsed();
    let runs = fleet
        .prepared
        .iter()
        .zip(outcomes)
        .map(|(p, (finished, elapsed))| p.finish(finished, elapsed))
        .collect();
    Concurrent {
        runs,
        all_running,
        views,
        total,
    }
}

/// How long after `started` every container said it was running; `None`
/// once one exited before the go signal (it failed to start) or after
/// [`ALL_RUNNING_LIMIT`].
fn wait_all_running(fleet: &Fleet, exited: &AtomicUsize, started: Instant) -> Option<Duration> {
    let running = |name: &String| fleet.sync.join(format!("running-{name}")).exists();
    loop {
        let count = fleet.names.iter().filter(|n| running(n)).count();
        if count == fleet.names.len() {
            return Some(started.elapsed());
        }
        if exited.load(Ordering::SeqCst) > 0 || started.elapsed() > ALL_RUNNING_LIMIT {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn print_concurrent_timings(runtime: Runtime, outcome: &Concurrent) {
    let mut elapsed: Vec<Duration> = outcome.runs.iter().map(|r| r.elapsed).collect();
    elapsed.sort();
    eprintln!(
        "{}: {} containers at once: all running after {}, all done after {} ms; \
         per container median {} ms, max {} ms",
        runtime.name(),
        outcome.runs.len(),
        outcome
            .all_running
            .map_or("never".to_string(), |d| format!("{} ms", d.as_millis())),
        outcome.total.as_millis(),
        elapsed[elapsed.len() / 2].as_millis(),
        elapsed[elapsed.len() - 1].as_millis(),
    );
}

fn concurrent(runtime: Runtime) {
    let serial = serial();
    let v2 = runtime == Runtime::RuncV2;
    if v2 {
        require_tool("bpftool");
    }
    let host = host();
    let gpus = host.facts.gpus.clone();
    assert_eq!(gpus.len(), GPUS as usize, "host.json GPUs");
    let mounts_before = host_mounts();
    let bpf_before = bpf_snapshot();
    let fleet = prepare_fleet(&serial, runtime, &host, &gpus);

    let outcome = start_all_at_once(&fleet, v2);
    print_concurrent_timings(runtime, &outcome);

    // Each container: ran, and saw its own GPU and nothing else.
    for (run, gpu) in outcome.runs.iter().zip(&gpus) {
        assert_own_gpu(run, &host, gpu, &gpus, v2);
    }
    assert!(
        outcome.all_running.is_some(),
        "not all {} containers were running within {ALL_RUNNING_LIMIT:?}",
        outcome.runs.len()
    );
    let program_ids = assert_own_device_cgroups(&outcome.views, &gpus, &fleet.prepared, v2);
    let ids: Vec<String> = fleet.prepared.iter().map(|p| p.id.clone()).collect();
    check_shared_log(&fleet.log, &ids);

    // Cleanup: delete every container, then nothing may remain.
    let prefix = format!("onh-load-{}-", runtime.name());
    drop(outcome);
    drop(fleet);
    assert_nothing_left(&prefix, &mounts_before, &bpf_before, &program_ids);
}

/// Reads the device cgroup of a waiting container from the host.
fn cgroup_view(p: &Prepared, v2: bool) -> Result<CgroupView, String> {
    let state_file = p.state_root.join(&p.id).join("state.json");
    let state: Value = serde_json::from_slice(
        &std::fs::read(&state_file).map_err(|e| format!("{}: {e}", state_file.display()))?,
    )
    .map_err(|e| format!("{}: {e}", state_file.display()))?;
    let pid = state["init_process_pid"]
        .as_u64()
        .ok_or_else(|| format!("no init_process_pid in {}", state_file.display()))?;
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map_err(|e| format!("/proc/{pid}/cgroup: {e}"))?;
    let path_of = |wanted: &dyn Fn(&str) -> bool| {
        cgroups.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            wanted(controllers).then(|| path.to_string())
        })
    };
    let mut view = CgroupView::default();
    if v2 {
        let path = path_of(&|c| c.is_empty())
            .ok_or_else(|| format!("pid {pid} has no v2 cgroup: {cgroups}"))?;
        let dir = format!("/sys/fs/cgroup/unified{path}");
        let out = Command::new("bpftool")
            .args(["-j", "cgroup", "show", &dir])
            .output()
            .map_err(|e| format!("bpftool: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "bpftool cgroup show {dir}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let progs: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Array(vec![]));
        for prog in progs.as_array().into_iter().flatten() {
            view.programs.push((
                prog["id"].as_u64().unwrap_or(0),
                prog["name"].as_str().unwrap_or("").to_string(),
            ));
        }
    } else {
        let path = path_of(&|c| c.split(',').any(|c| c == "devices"))
            .ok_or_else(|| format!("pid {pid} has no devices cgroup: {cgroups}"))?;
        let file = format!("/sys/fs/cgroup/devices{path}/devices.list");
        let list = std::fs::read_to_string(&file).map_err(|e| format!("{file}: {e}"))?;
        for line in list.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                ["a", ..] => view.allows_all = true,
                ["c", numbers, _] => {
                    if let Some(minor) = numbers.strip_prefix(&format!("{NVIDIA_MAJOR}:")) {
                        view.nvidia_minors.insert(minor.parse().unwrap_or(u32::MAX));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(view)
}

/// The device cgroups, seen from the host while all 24 ran: on v2 each
/// container has exactly one device program, ours, of its own; on v1 its
/// `devices.list` allows its own GPU and nvidiactl only. Returns the v2
/// programs' ids.
fn assert_own_device_cgroups(
    views: &[Result<CgroupView, String>],
    gpus: &[GpuFacts],
    prepared: &[Prepared],
    v2: bool,
) -> BTreeSet<u64> {
    let mut program_ids = BTreeMap::new();
    for ((view, gpu), p) in views.iter().zip(gpus).zip(prepared) {
        let view = view
            .as_ref()
            .unwrap_or_else(|e| panic!("container {} (GPU {}): {e}", p.id, gpu.index));
        if v2 {
            let names: Vec<&str> = view.programs.iter().map(|(_, n)| n.as_str()).collect();
            assert_eq!(
                names,
                [PROG_NAME],
                "container {} (GPU {}) should have exactly one device program, ours \
                 (runc's, extended): {:?}",
                p.id,
                gpu.index,
                view.programs
            );
            let id = view.programs[0].0;
            if let Some(other) = program_ids.insert(id, p.id.clone()) {
                panic!("containers {other} and {} share device program {id}", p.id);
            }
        } else {
            assert!(
                !view.allows_all,
                "container {} (GPU {}): its devices.list allows everything",
                p.id, gpu.index
            );
            let expected = BTreeSet::from([gpu.minor, 255]);
            assert_eq!(
                view.nvidia_minors, expected,
                "container {} (GPU {}, minor {}): devices.list should allow 195:{} and \
                 nvidiactl (195:255) only",
                p.id, gpu.index, gpu.minor, gpu.minor
            );
        }
    }
    program_ids.into_keys().collect()
}

/// A node as the checker saw it: type, (major, minor), what opening gave.
type NodeFacts<'a> = (char, Option<(u32, u32)>, Option<&'a str>);

/// The nodes a container asking for GPU `own` must see: its GPU's and the
/// control nodes, allowed (ENXIO), and with `decoys`, every other GPU's,
/// denied (EPERM).
fn expected_nodes(
    host: &SimHost,
    own: &GpuFacts,
    all: &[GpuFacts],
    decoys: bool,
) -> BTreeMap<String, NodeFacts<'static>> {
    let mut expected: BTreeMap<String, NodeFacts> = node_specs(host, &[own.minor])
        .into_iter()
        .map(|(path, numbers)| (path, ('c', Some(numbers), Some("ENXIO"))))
        .collect();
    if decoys {
        for gpu in all.iter().filter(|g| g.index != own.index) {
            expected.insert(
                format!("/dev/nvidia{}", gpu.minor),
                ('c', Some((NVIDIA_MAJOR, gpu.minor)), Some("EPERM")),
            );
        }
    }
    expected
}

/// The container saw its own GPU node and the control nodes, all allowed,
/// no other GPU (or, on v2, only decoys, all denied), and the driver's
/// libcuda through the image's rewritten cache.
fn assert_own_gpu(run: &Run, host: &SimHost, own: &GpuFacts, all: &[GpuFacts], decoys: bool) {
    let ctx = run.describe();
    assert!(run.succeeded(), "the container failed:{ctx}");
    let report = &run.report;
    assert!(report.complete, "the checker did not finish:{ctx}");
    let seen: BTreeMap<String, NodeFacts> = report
        .nodes
        .iter()
        .map(|(path, node)| {
            (
                path.clone(),
                (node.kind, node.numbers, node.open.as_deref()),
            )
        })
        .collect();
    assert_eq!(
        seen,
        expected_nodes(host, own, all, decoys),
        "GPU index {} (minor {}): the container's nvidia nodes (ENXIO: the device cgroup \
         allows it; EPERM: it denies it{}):{ctx}",
        own.index,
        own.minor,
        if decoys {
            "; other GPUs are runc's decoys, made without a rule"
        } else {
            ""
        }
    );
    assert_eq!(report.devnull.as_deref(), Some("ok"), "/dev/null:{ctx}");
    let cuda = report.cuda.as_ref().expect("a cuda line");
    assert!(cuda.loaded, "dlopen(libcuda.so.1) failed: {cuda:?}:{ctx}");
    assert!(
        cuda.path.starts_with(LIB_DIR),
        "libcuda loaded from {} instead of {LIB_DIR}:{ctx}",
        cuda.path
    );
    // The stale 470 libcuda (listed first in the host's cache) answers 11040.
    assert_eq!(
        cuda.field("version"),
        Some(host.facts.cuda_version.to_string().as_str()),
        "cuDriverGetVersion:{ctx}"
    );
    let version = host.facts.driver_version.clone();
    let cache = run
        .ld_cache
        .as_ref()
        .unwrap_or_else(|| panic!("the checker left no copy of the cache:{ctx}"));
    let libcuda: Vec<&str> = cache
        .iter()
        .filter(|e| e.soname == "libcuda.so.1" && e.tag == "libc6,x86-64")
        .map(|e| e.path.as_str())
        .collect();
    assert_eq!(
        libcuda,
        [format!("{LIB_DIR}/libcuda.so.1")],
        "the rewritten cache's libcuda.so.1 (driver {version}):{ctx}"
    );
}

/// Every line of the shared log is whole (`oci-nvidia-hook[PID]: LEVEL:
/// text`), and each container has exactly one `injected` line, all with
/// the same counts (each got one GPU).
fn check_shared_log(log: &Path, ids: &[String]) {
    let text = std::fs::read_to_string(log)
        .unwrap_or_else(|e| panic!("the shared hook log {}: {e}", log.display()));
    assert!(
        text.ends_with('\n'),
        "the shared log ends mid-line:\n{text}"
    );
    let mut injected: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut pids = BTreeSet::new();
    for line in text.lines() {
        let parsed = (|| {
            let rest = line.strip_prefix("oci-nvidia-hook[")?;
            let (pid, rest) = rest.split_once("]: ")?;
            let pid: u32 = pid.parse().ok()?;
            let (level, message) = rest.split_once(": ")?;
            ["error", "warn", "info", "debug"]
                .contains(&level)
                .then_some((pid, level, message))
        })();
        let (pid, level, message) =
            parsed.unwrap_or_else(|| panic!("torn or foreign line {line:?} in:\n{text}"));
        assert!(
            !message.contains("oci-nvidia-hook["),
            "two records on one line {line:?} in:\n{text}"
        );
        assert_ne!(level, "error", "an error was logged: {line:?} in:\n{text}");
        assert_ne!(level, "debug", "debug line at level info: {line:?}");
        if let Some((id, summary)) = message
            .strip_prefix("container ")
            .and_then(|m| m.split_once(": injected "))
        {
            assert_eq!(level, "info", "{line:?}");
            injected.entry(id).or_default().push(summary);
            pids.insert(pid);
        }
    }
    for id in ids {
        let lines = injected.get(id.as_str()).map_or(0, Vec::len);
        assert_eq!(
            lines, 1,
            "container {id}: {lines} `injected` lines in the shared log:\n{text}"
        );
    }
    let foreign: Vec<&&str> = injected
        .keys()
        .filter(|id| !ids.iter().any(|i| i == *id))
        .collect();
    assert!(
        foreign.is_empty(),
        "lines of unknown containers {foreign:?}:\n{text}"
    );
    assert_eq!(
        pids.len(),
        ids.len(),
        "one hook process per container:\n{text}"
    );
    let summaries: BTreeSet<&str> = injected.values().flatten().copied().collect();
    assert_eq!(
        summaries.len(),
        1,
        "every container got one GPU, so every summary should be the same: {summaries:#?}"
    );
    eprintln!(
        "shared log: {} lines, {} containers: injected {}",
        text.lines().count(),
        ids.len(),
        summaries.iter().next().unwrap()
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn twenty_four_containers_at_once_runc_cgroup_v1() {
    concurrent(Runtime::RuncV1);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn twenty_four_containers_at_once_runc_cgroup_v2() {
    concurrent(Runtime::RuncV2);
}

// ================================================================ restarts

/// Deletes the container currently starting if the test stops mid-loop.
struct Current<'a> {
    prepared: &'a Prepared,
    id: Option<String>,
}

impl Drop for Current<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.prepared.delete(&id);
        }
    }
}

/// The host as it was before the restarts, to compare with after.
struct HostBefore {
    mounts: Vec<String>,
    simhost: BTreeMap<PathBuf, String>,
    bpf: BpfSnapshot,
    strays: BTreeSet<String>,
}

/// Takes the host's state, and checks no cgroup of these containers exists yet.
fn host_before(host: &SimHost, prefix: &str) -> HostBefore {
    let before = HostBefore {
        mounts: host_mounts(),
        simhost: tree_listing(&host.dir),
        bpf: bpf_snapshot(),
        strays: stray_entries(prefix),
    };
    assert!(
        cgroup_dirs_named(prefix).is_empty(),
        "cgroups named {prefix}* exist before the test"
    );
    before
}

/// The image after the first start: its cache's bytes and its paths.
struct AfterFirst {
    cache: Vec<u8>,
    paths: BTreeSet<PathBuf>,
}

/// Starts `prepared` `starts` times in a row as `<prefix>0`, `<prefix>1`,
/// …, each bounded by [`START_LIMIT`] and all by [`SEQUENTIAL_LIMIT`];
/// panics at the first failure. Returns each start's time and the image
/// as the first start left it.
fn start_repeatedly(
    prepared: &Prepared,
    prefix: &str,
    starts: usize,
) -> (Vec<Duration>, AfterFirst) {
    let mut times = Vec::with_capacity(starts);
    let mut after_first = None;
    let began = Instant::now();
    let mut current = Current { prepared, id: None };
    for i in 0..starts {
        let id = format!("{prefix}{i}");
        current.id = Some(id.clone());
        let t = Instant::now();
        let finished = run_bounded(prepared.command_for(&id), START_LIMIT);
        times.push(t.elapsed());
        let output = format!("{}{}", finished.stdout, finished.stderr);
        match finished.status {
            Some(s) if s.success() => {}
            Some(s) => panic!("start {i} ({id}) failed: {s}:\n{output}"),
            None => panic!("start {i} ({id}) was killed after {START_LIMIT:?}:\n{output}"),
        }
        // `runc run` deletes the container when it exits.
        current.id = None;
        if i == 0 {
            after_first = Some(AfterFirst {
                cache: std::fs::read(image_cache(prepared)).expect("the image's cache"),
                paths: tree_listing(&prepared.rootfs).into_keys().collect(),
            });
        }
        assert!(
            began.elapsed() < SEQUENTIAL_LIMIT,
            "{} starts took over {SEQUENTIAL_LIMIT:?}: too slow",
            i + 1
        );
    }
    (times, after_first.expect("a first start"))
}

/// The image's `/etc/ld.so.cache`, which the hook rewrites at every start.
fn image_cache(prepared: &Prepared) -> PathBuf {
    prepared.rootfs.join("etc/ld.so.cache")
}

fn print_restart_timings(runtime: Runtime, times: &[Duration], total: Duration) {
    let starts = times.len();
    let mut sorted = times.to_vec();
    sorted.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "{}: {starts} starts of /bin/true with NVIDIA_VISIBLE_DEVICES=all ({GPUS} GPUs) in \
         {:.1} s: per start median {:.1} ms, p90 {:.1} ms, min {:.1} ms, max {:.1} ms \
         (first {:.1} ms, last {:.1} ms)",
        runtime.name(),
        total.as_secs_f64(),
        ms(sorted[starts / 2]),
        ms(sorted[starts * 9 / 10]),
        ms(sorted[0]),
        ms(sorted[starts - 1]),
        ms(times[0]),
        ms(times[starts - 1]),
    );
}

/// The hook's log: no error, one `injected` line for each of `starts`
/// starts, and on v2 one replaced device program per start (none on v1).
/// Returns the ids of the programs replaced and loaded.
fn assert_each_start_injected_once(log: &Path, starts: usize, runtime: Runtime) -> BTreeSet<u64> {
    let log = std::fs::read_to_string(log).expect("the hook's log");
    let mut injected: BTreeMap<&str, usize> = BTreeMap::new();
    let mut replaced = Vec::new();
    for line in log.lines() {
        assert!(
            !line.contains(": error: "),
            "the hook logged an error: {line}"
        );
        if let Some(id) = line
            .split_once(": container ")
            .and_then(|(_, m)| m.split_once(": injected "))
            .map(|(id, _)| id)
        {
            *injected.entry(id).or_default() += 1;
        }
        // v2: "<dir>: device program OLD replaced by NEW (...)"
        if let Some((_, rest)) = line.split_once(": device program ") {
            let mut words = rest.split(' ');
            let old = words.next().and_then(|w| w.parse::<u64>().ok());
            let new = words.nth(2).and_then(|w| w.parse::<u64>().ok());
            if let (Some(old), Some(new)) = (old, new) {
                replaced.push((old, new));
            }
        }
    }
    assert_eq!(
        injected.len(),
        starts,
        "`injected` lines for {} of {starts} starts",
        injected.len()
    );
    assert!(
        injected.values().all(|&n| n == 1),
        "a start was injected twice: {injected:?}"
    );
    if runtime == Runtime::RuncV2 {
        assert_eq!(
            replaced.len(),
            starts,
            "each v2 start should replace runc's one device program: {replaced:?}"
        );
    } else {
        assert!(
            replaced.is_empty(),
            "BPF programs replaced on v1: {replaced:?}"
        );
    }
    replaced.iter().flat_map(|&(a, b)| [a, b]).collect()
}

/// The image after the last start is as after the first: the cache is
/// rewritten to the same bytes, no file accumulates.
fn assert_image_as_after_first(prepared: &Prepared, first: &AfterFirst, starts: usize) {
    let last_cache = std::fs::read(image_cache(prepared)).expect("the image's cache");
    assert!(
        first.cache == last_cache,
        "the image's ld.so.cache changed between the first start ({} bytes) and start {starts} \
         ({} bytes)",
        first.cache.len(),
        last_cache.len()
    );
    let last_paths: BTreeSet<PathBuf> = tree_listing(&prepared.rootfs).into_keys().collect();
    assert_eq!(
        first
            .paths
            .symmetric_difference(&last_paths)
            .collect::<Vec<_>>(),
        Vec::<&PathBuf>::new(),
        "files came or went in the rootfs between the first and the last start"
    );
}

/// Nothing left on the host: no runtime state, the simulated host's tree
/// unchanged, no new stray files, and [`assert_nothing_left`].
fn assert_host_as_before(
    prepared: &Prepared,
    host: &SimHost,
    prefix: &str,
    before: &HostBefore,
    program_ids: &BTreeSet<u64>,
) {
    let leftover_state: Vec<_> = std::fs::read_dir(&prepared.state_root)
        .expect("the runtime's state root")
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        leftover_state.is_empty(),
        "runtime state left behind: {leftover_state:?}"
    );
    let simhost_diff = listing_diff(&before.simhost, &tree_listing(&host.dir));
    assert!(
        simhost_diff.is_empty(),
        "the simulated host's tree changed: {simhost_diff:#?}"
    );
    let strays: Vec<String> = stray_entries(prefix)
        .difference(&before.strays)
        .cloned()
        .collect();
    assert!(strays.is_empty(), "new host files: {strays:#?}");
    assert_nothing_left(prefix, &before.mounts, &before.bpf, program_ids);
}

/// The restarted image still works: the checker, once, on it, sees every
/// GPU allowed and loads the driver's libcuda.
fn assert_restarted_image_works(
    serial: &Serial,
    scenario: &Scenario,
    host: &SimHost,
    starts: usize,
) {
    let last = run(serial, scenario);
    assert!(
        last.succeeded(),
        "the checker run failed:{}",
        last.describe()
    );
    let gpus = host.facts.gpus.clone();
    let nodes = last.report.gpu_nodes();
    for gpu in &gpus {
        let node = nodes.get(&gpu.minor).unwrap_or_else(|| {
            panic!(
                "/dev/nvidia{} missing after restarts:{}",
                gpu.minor,
                last.describe()
            )
        });
        assert_eq!(node.open.as_deref(), Some("ENXIO"), "{}", last.describe());
    }
    assert_eq!(nodes.len(), gpus.len(), "{}", last.describe());
    let cuda = last.report.cuda.as_ref().expect("a cuda line");
    assert!(
        cuda.loaded && cuda.field("version") == Some(host.facts.cuda_version.to_string().as_str()),
        "libcuda after {starts} restarts: {cuda:?}{}",
        last.describe()
    );
}

fn restarts(runtime: Runtime, starts: usize) {
    let serial = serial();
    require_tool("bpftool");
    let host = host();
    let name = format!("load-restart-{}", runtime.name());
    let env = [("NVIDIA_VISIBLE_DEVICES", "all")];
    let scenario = |reuse_rootfs| Scenario {
        name: &name,
        runtime,
        host: &host,
        env: &env,
        hook: Hook::Prestart,
        decoy_minors: &[],
        decoys: &[],
        reuse_rootfs,
        prepare: None,
    };
    let prepared = prepare(
        &serial,
        &scenario(false),
        &BundleExtras {
            args: Some(vec!["/bin/true".into()]),
            ..BundleExtras::default()
        },
    );
    let prefix = format!("{}-", prepared.id);
    let before = host_before(&host, &prefix);

    let began = Instant::now();
    let (times, after_first) = start_repeatedly(&prepared, &prefix, starts);
    print_restart_timings(runtime, &times, began.elapsed());

    let program_ids = assert_each_start_injected_once(&prepared.hook_log, starts, runtime);
    assert_image_as_after_first(&prepared, &after_first, starts);
    assert_host_as_before(&prepared, &host, &prefix, &before, &program_ids);
    drop(prepared);
    assert_restarted_image_works(&serial, &scenario(true), &host, starts);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn five_hundred_restarts_runc_cgroup_v1_leave_nothing() {
    restarts(Runtime::RuncV1, 500);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn hundred_restarts_runc_cgroup_v2_leave_nothing() {
    restarts(Runtime::RuncV2, 100);
}

// ================================================================ leftovers

/// Loaded BPF programs and where cgroup programs are attached.
#[derive(Debug, Clone, Default)]
struct BpfSnapshot {
    /// id → (type, name) of every loaded program.
    programs: BTreeMap<u64, (String, String)>,
    /// program id → the cgroups it is attached to (v2 hierarchy).
    attached: BTreeMap<u64, Vec<String>>,
    /// Pinned objects under /sys/fs/bpf, when mounted.
    pins: BTreeSet<PathBuf>,
}

fn bpftool_json(args: &[&str]) -> Value {
    let out = Command::new("bpftool")
        .arg("-j")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run bpftool: {e} (integration/install-deps)"));
    assert!(
        out.status.success(),
        "bpftool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if out.stdout.iter().all(u8::is_ascii_whitespace) {
        return Value::Array(vec![]);
    }
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("bpftool {args:?} JSON: {e}"))
}

fn bpf_snapshot() -> BpfSnapshot {
    let mut snap = BpfSnapshot::default();
    for prog in bpftool_json(&["prog", "show"])
        .as_array()
        .into_iter()
        .flatten()
    {
        let id = prog["id"].as_u64().expect("bpftool prog id");
        snap.programs.insert(
            id,
            (
                prog["type"].as_str().unwrap_or("").to_string(),
                prog["name"].as_str().unwrap_or("").to_string(),
            ),
        );
    }
    // `cgroup tree` prints one array per cgroup that has programs.
    let tree = bpftool_json(&["cgroup", "tree", "/sys/fs/cgroup/unified"]);
    let mut visit = |entry: &Value| {
        let cgroup = entry["cgroup"].as_str().unwrap_or("?").to_string();
        for prog in entry["programs"].as_array().into_iter().flatten() {
            if let Some(id) = prog["id"].as_u64() {
                snap.attached.entry(id).or_default().push(cgroup.clone());
            }
        }
    };
    for item in tree.as_array().into_iter().flatten() {
        match item.as_array() {
            Some(entries) => entries.iter().for_each(&mut visit),
            None => visit(item),
        }
    }
    if is_mounted("/sys/fs/bpf") {
        fn walk(dir: &Path, out: &mut BTreeSet<PathBuf>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    walk(&path, out);
                }
                out.insert(path);
            }
        }
        walk(Path::new("/sys/fs/bpf"), &mut snap.pins);
    }
    snap
}

fn is_mounted(point: &str) -> bool {
    host_mounts()
        .iter()
        .any(|m| m.split(' ').next() == Some(point))
}

/// Names under the usual scratch places of the host that mention these
/// containers or NVIDIA: what a hook or runtime might leave outside the
/// bundle. (Other files there belong to others and are not judged.)
fn stray_entries(prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for top in ["/run", "/tmp", "/var/tmp", "/dev/shm", "/run/runc", "/etc"] {
        for entry in std::fs::read_dir(top).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.contains(prefix) || name.contains("nvidia") || name.starts_with("onh-") {
                out.insert(format!("{top}/{name}"));
            }
        }
    }
    out
}

/// After every container is gone: the host's mount table is as before, no
/// cgroup named `prefix…` exists in any hierarchy, no process of ours is
/// left, and no BPF program made meanwhile survives unattached, attached to
/// one of our cgroups, or among `program_ids` (those the hooks loaded or
/// replaced), once the kernel had `BPF_SETTLE` to free them.
fn assert_nothing_left(
    prefix: &str,
    mounts_before: &[String],
    bpf_before: &BpfSnapshot,
    program_ids: &BTreeSet<u64>,
) {
    assert_mounts_unchanged(mounts_before, "");

    let cgroups = cgroup_dirs_named(prefix);
    assert!(cgroups.is_empty(), "cgroups left behind: {cgroups:#?}");

    let processes = processes_mentioning(&[prefix, &path_str(hook_binary())]);
    assert!(
        processes.is_empty(),
        "processes left behind: {processes:#?}"
    );

    let newest_before = bpf_before.programs.keys().max().copied().unwrap_or(0);
    let deadline = Instant::now() + BPF_SETTLE;
    let settled = Instant::now();
    loop {
        let now = bpf_snapshot();
        let mut leaks = String::new();
        for (id, (kind, name)) in &now.programs {
            let ours = program_ids.contains(id);
            let new = *id > newest_before;
            let where_ = now.attached.get(id);
            let attached_to_ours = where_.is_some_and(|c| c.iter().any(|c| c.contains(prefix)));
            let orphan = new && kind == "cgroup_device" && where_.is_none();
            if ours || attached_to_ours || orphan {
                let _ = writeln!(
                    leaks,
                    "program {id} ({kind} {name}) attached to {where_:?}{}",
                    if ours {
                        ", loaded or replaced by a hook"
                    } else {
                        ""
                    }
                );
            }
        }
        let new_pins: Vec<_> = now.pins.difference(&bpf_before.pins).collect();
        if !new_pins.is_empty() {
            let _ = writeln!(leaks, "new BPF pins: {new_pins:?}");
        }
        if leaks.is_empty() {
            let count = |s: &BpfSnapshot| {
                s.programs
                    .values()
                    .filter(|(kind, _)| kind == "cgroup_device")
                    .count()
            };
            eprintln!(
                "BPF: {} hook-touched programs all freed after {} ms; cgroup_device \
                 programs loaded before {}, after {}",
                program_ids.len(),
                settled.elapsed().as_millis(),
                count(bpf_before),
                count(&now)
            );
            return;
        }
        if Instant::now() > deadline {
            panic!("BPF programs left behind after {BPF_SETTLE:?}:\n{leaks}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Live processes whose command line contains any of `needles`.
fn processes_mentioning(needles: &[&str]) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) || name == me {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        if needles.iter().any(|n| cmdline.contains(n)) {
            found.push(format!("{name}: {cmdline}"));
        }
    }
    found
}

/// Every cgroup directory named `<prefix>…`, in any hierarchy: what
/// containers whose ids start with `prefix` left behind.
fn cgroup_dirs_named(prefix: &str) -> Vec<PathBuf> {
    cgroup_dirs(|name| name.to_string_lossy().starts_with(prefix))
}

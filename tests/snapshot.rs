//! The start path under host-side faults (issue 28): the driver snapshot
//! replaced, truncated, tampered with or turned into a fifo while 16
//! containers start at once through runc, and host files that would block
//! a start (the driver root's cache or a procfs file turned into a fifo, a
//! log file that is a fifo nobody reads, a procfs file whose read does not
//! return). Every start either is correct or
//! fails with one clear line, within the deadline; none hangs, and a start
//! that fails leaves the rootfs as it was.
//!
//! Run as root: `make test`, or
//! `cargo test --features _test_as_root --test snapshot -- --nocapture`.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use harness::mounts::{assert_mounts_unchanged, host_mounts};
use harness::runtime::bundle::{BundleExtras, Hook, Scenario};
use harness::runtime::host_state::{listing_diff, tree_listing};
use harness::runtime::prepared::{prepare, Prepared};
use harness::runtime::process::run_bounded;
use harness::runtime::run::{serial, Run, Serial, RUN_LIMIT};
use harness::runtime::runtimes::Runtime;
use harness::simhost::{Fixture, SimHost};
use harness::stuck::StuckFile;

/// Containers started at once while the snapshot is sabotaged.
const STARTS: usize = 16;

/// The deadline the hook runs under in the blocking cases.
const DEADLINE: Duration = Duration::from_millis(2000);

/// A fresh simulated host (its snapshot directory is this test's alone)
/// whose config sets `deadline-ms`, settled so that a hook may leave a
/// snapshot of it.
fn host(name: &str, deadline: Duration) -> SimHost {
    let host = SimHost::fresh(name, Fixture::synthetic(2));
    let config = fs::read_to_string(&host.config).unwrap();
    // A top-level key: before the first table.
    fs::write(
        &host.config,
        format!("deadline-ms = {}\n{config}", deadline.as_millis()),
    )
    .unwrap();
    // Snapshots are written only of what has not changed for 2 s.
    std::thread::sleep(Duration::from_millis(2100));
    host
}

/// The host's snapshot directory, from its config.
fn snapshot_dir(host: &SimHost) -> PathBuf {
    let config = fs::read_to_string(&host.config).unwrap();
    let line = config
        .lines()
        .find_map(|l| l.strip_prefix("snapshot-dir = "))
        .expect("the simulated host names a snapshot dir");
    PathBuf::from(line.trim_matches('"'))
}

fn scenario<'a>(name: &'a str, host: &'a SimHost) -> Scenario<'a> {
    Scenario {
        name,
        runtime: Runtime::RuncV1,
        host,
        env: &[("NVIDIA_VISIBLE_DEVICES", "0")],
        hook: Hook::Prestart,
        decoy_minors: &[],
        decoys: &[],
        reuse_rootfs: false,
        prepare: None,
    }
}

/// Runs `prepared` once, bounded; with the time it took.
fn start(prepared: &Prepared) -> Run {
    let started = Instant::now();
    let finished = run_bounded(prepared.command(), RUN_LIMIT);
    prepared.finish(finished, started.elapsed())
}

/// The hook's error lines in a run's log.
fn error_lines(run: &Run) -> Vec<String> {
    run.hook_log
        .as_deref()
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("oci-nvidia-hook") && l.contains("error: "))
        .map(String::from)
        .collect()
}

/// What is in `rootfs`, once the mount target runc makes for `/out` is
/// there: what the hook must leave as it was when it fails.
fn rootfs_listing(rootfs: &Path) -> std::collections::BTreeMap<PathBuf, String> {
    fs::create_dir_all(rootfs.join("out")).unwrap();
    tree_listing(rootfs)
}

/// Panics unless `run` got a GPU and a working libcuda.
fn assert_correct(run: &Run) {
    run.assert_completed();
    let gpu = run.report.nodes.keys().any(|n| {
        n.strip_prefix("/dev/nvidia")
            .is_some_and(|minor| minor.parse::<u32>().is_ok())
    });
    assert!(gpu, "no /dev/nvidia<minor>:{}", run.describe());
    let cuda = run.report.cuda.as_ref();
    assert!(
        cuda.is_some_and(|c| c.loaded),
        "libcuda did not load:{}",
        run.describe()
    );
}

/// FNV-1a, as the snapshot's checksum line: a tampered snapshot that a
/// writer who knows the format sealed again.
fn sealed(body: &[u8]) -> Vec<u8> {
    let sum = body.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut data = body.to_vec();
    data.extend_from_slice(format!("\n{sum:016x}\n").as_bytes());
    data
}

/// One way of breaking the snapshot at `path`, whose good content is `good`.
fn sabotage(round: usize, path: &Path, good: &[u8], tampered: &[u8]) {
    let temp = path.with_extension("sabotage");
    let _ = fs::remove_file(&temp);
    match round % 6 {
        // Replaced, whole, by a good one.
        0 => {
            fs::write(&temp, good).unwrap();
            let _ = fs::rename(&temp, path);
        }
        // Replaced by one whose library paths climb out of the root.
        1 => {
            fs::write(&temp, tampered).unwrap();
            let _ = fs::rename(&temp, path);
        }
        // Truncated in place.
        2 => {
            let _ = fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(path)
                .and_then(|mut f| std::io::Write::write_all(&mut f, &good[..good.len() / 3]));
        }
        // A fifo at its name.
        3 => {
            let _ = fs::remove_file(path);
            let _ = nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600));
        }
        // A link at its name, to the good content.
        4 => {
            fs::write(&temp, good).unwrap();
            let _ = fs::remove_file(path);
            let _ = std::os::unix::fs::symlink(&temp, path);
        }
        // A directory at its name.
        _ => {
            let _ = fs::remove_file(path);
            let _ = fs::create_dir(path);
            std::thread::sleep(Duration::from_millis(3));
            let _ = fs::remove_dir(path);
        }
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn sixteen_starts_while_the_snapshot_is_replaced_truncated_or_a_fifo_are_all_correct() {
    let serial = serial();
    let host = host("snapshot-race", Duration::from_secs(15));
    let dir = snapshot_dir(&host);
    // A first start leaves the snapshot the others race over.
    let first = prepare(
        &serial,
        &scenario("snapshot-first", &host),
        &Default::default(),
    );
    assert_correct(&start(&first));
    let names: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(names.len(), 1, "one snapshot: {names:?}");
    let snapshot = names[0].clone();
    let good = fs::read(&snapshot).unwrap();
    let body = &good[..good.len() - 18];
    let root = host.dir.join("driver").display().to_string();
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert!(text.contains(&root), "the snapshot names the driver root");
    let tampered = sealed(
        text.replace(
            &format!("{root}/usr"),
            &format!("{root}/../../../../../usr"),
        )
        .as_bytes(),
    );

    let names: Vec<String> = (0..STARTS)
        .map(|i| format!("snapshot-race-{i:02}"))
        .collect();
    let fleet: Vec<Prepared> = names
        .iter()
        .map(|name| prepare(&serial, &scenario(name, &host), &BundleExtras::default()))
        .collect();
    let before: Vec<_> = fleet.iter().map(|p| rootfs_listing(&p.rootfs)).collect();
    let mounts_before = host_mounts();
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(STARTS + 1);
    let (runs, rounds) = std::thread::scope(|scope| {
        let saboteur = scope.spawn(|| {
            barrier.wait();
            let mut round = 0;
            while !stop.load(Ordering::SeqCst) {
                sabotage(round, &snapshot, &good, &tampered);
                round += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            round
        });
        let handles: Vec<_> = fleet
            .iter()
            .map(|p| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let cmd = p.command();
                    barrier.wait();
                    let started = Instant::now();
                    let finished = run_bounded(cmd, RUN_LIMIT);
                    p.finish(finished, started.elapsed())
                })
            })
            .collect();
        let runs: Vec<Run> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        stop.store(true, Ordering::SeqCst);
        (runs, saboteur.join().unwrap())
    });
    assert_mounts_unchanged(&mounts_before, "");
    eprintln!("{STARTS} starts against {rounds} sabotages of the snapshot");

    let mut refused = 0;
    for ((run, p), before) in runs.iter().zip(&fleet).zip(&before) {
        if run.succeeded() {
            assert_correct(run);
        } else {
            let errors = error_lines(run);
            assert_eq!(errors.len(), 1, "one clear line:{}", run.describe());
            let diff = listing_diff(before, &tree_listing(&p.rootfs));
            assert!(
                diff.is_empty(),
                "a failed start changed the rootfs: {diff:#?}"
            );
        }
        let log = run.hook_log.clone().unwrap_or_default();
        refused += log.matches("inventory snapshot: refusing").count();
        refused += log.matches("inventory snapshot: cannot").count();
        // Refusals name the tampered paths; plans never hold them.
        assert!(
            !log.lines()
                .any(|l| l.contains(": planned ") && l.contains("/../")),
            "a path out of the driver root was planned:{}",
            run.describe()
        );
    }
    eprintln!("snapshots refused: {refused}");
    assert!(
        refused > 0,
        "no start met a broken snapshot: the race did not race"
    );
    // Every failed start would have said why; most do not fail at all, as a
    // refused snapshot only means live discovery.
    let succeeded = runs.iter().filter(|r| r.succeeded()).count();
    assert!(succeeded > 0, "no start succeeded");

    // What the saboteur left (even a fifo or a directory) does not stop the next start.
    let last = prepare(
        &serial,
        &scenario("snapshot-last", &host),
        &Default::default(),
    );
    assert_correct(&start(&last));
    let _ = fs::remove_file(snapshot.with_extension("sabotage"));
}

/// Starts a container on `host` whose hook then fails; checks that it
/// failed within [`DEADLINE`] with one line that contains every one of
/// `said`, and that the rootfs is unchanged; how long it took. `extras`
/// may point the log elsewhere; `before_start` runs once the bundle is made.
fn assert_fails_within_the_deadline(
    serial: &Serial,
    host: &SimHost,
    name: &str,
    extras: &BundleExtras,
    before_start: impl FnOnce(&Prepared),
    said: &[&str],
) -> Duration {
    let prepared = prepare(serial, &scenario(name, host), extras);
    before_start(&prepared);
    let rootfs_before = rootfs_listing(&prepared.rootfs);
    let driver_before = tree_listing(&host.dir.join("driver"));
    let mounts_before = host_mounts();
    let started = Instant::now();
    let finished = run_bounded(prepared.command(), RUN_LIMIT);
    let elapsed = started.elapsed();
    // The log may be a fifo: put a file there before the run is read.
    if extras.hook_log.is_some() {
        let _ = fs::remove_file(&prepared.hook_log);
        fs::write(&prepared.hook_log, b"").unwrap();
    }
    let run = prepared.finish(finished, elapsed);
    assert_mounts_unchanged(&mounts_before, "");
    assert!(!run.succeeded(), "the start must fail:{}", run.describe());
    assert!(
        !run.report.complete,
        "the container's program must not run:{}",
        run.describe()
    );
    // The hook's bound, plus runc's own start and teardown.
    assert!(
        elapsed < DEADLINE + Duration::from_secs(5),
        "took {elapsed:?}, the deadline is {DEADLINE:?}:{}",
        run.describe()
    );
    // The runtime shows the hook's stderr; the log has it too, when it could be opened.
    let text = run.failure_text();
    assert!(
        text.lines().any(|l| said.iter().all(|s| l.contains(s))),
        "no line saying {said:?}:{}",
        run.describe()
    );
    let diff = listing_diff(&rootfs_before, &tree_listing(&prepared.rootfs));
    assert!(diff.is_empty(), "the rootfs changed: {diff:#?}");
    let diff = listing_diff(&driver_before, &tree_listing(&host.dir.join("driver")));
    assert!(diff.is_empty(), "the driver root changed: {diff:#?}");
    elapsed
}

/// Puts a fifo in the place of `path`.
fn fifo_at(path: &Path) {
    fs::remove_file(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_driver_root_cache_or_procfs_file_that_is_a_fifo_fails_the_start_at_once() {
    let serial = serial();
    let host = host("snapshot-fifos", DEADLINE);
    let cache = host.dir.join("driver/etc/ld.so.cache");
    let saved = fs::read(&cache).unwrap();
    fifo_at(&cache);
    assert_fails_within_the_deadline(
        &serial,
        &host,
        "fifo-cache",
        &BundleExtras::default(),
        |_| {},
        &["ld.so.cache", "a fifo, not a regular file"],
    );
    fs::remove_file(&cache).unwrap();
    fs::write(&cache, saved).unwrap();
    let version = host.dir.join("proc/driver/nvidia/version");
    fifo_at(&version);
    assert_fails_within_the_deadline(
        &serial,
        &host,
        "fifo-proc",
        &BundleExtras::default(),
        |_| {},
        &["driver/nvidia/version", "a fifo, not a regular file"],
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_procfs_read_that_does_not_return_fails_the_start_at_its_deadline() {
    let serial = serial();
    let host = host("snapshot-stuck-proc", DEADLINE);
    // A regular file whose read blocks: the type check lets it through,
    // and only the deadline ends the wait.
    let version = host.dir.join("proc/driver/nvidia/version");
    let stuck = StuckFile::over(&version);
    let elapsed = assert_fails_within_the_deadline(
        &serial,
        &host,
        "stuck-proc",
        &BundleExtras::default(),
        |_| {},
        &[
            "prestart: gave up after 2000 ms (deadline-ms) waiting for reading",
            "proc/driver/nvidia/version",
        ],
    );
    assert!(
        elapsed >= DEADLINE,
        "it failed before the deadline: not the deadline's doing"
    );
    drop(stuck);
    // The file back, the host starts containers again.
    let prepared = prepare(
        &serial,
        &scenario("stuck-proc-after", &host),
        &Default::default(),
    );
    assert_correct(&start(&prepared));
}

/// A read only a fatal signal ends (the request never taken, as on a hard
/// NFS mount that stopped answering): the alarm's handler cannot run, and
/// the backstop's `SIGKILL` ends the hook one second after the deadline.
/// No line of ours can be written then: runc names the hook killed.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_read_only_a_fatal_signal_ends_is_killed_after_the_deadline() {
    let serial = serial();
    let host = host("snapshot-deaf-proc", DEADLINE);
    let version = host.dir.join("proc/driver/nvidia/version");
    let stuck = StuckFile::deaf_over(&version);
    let elapsed = assert_fails_within_the_deadline(
        &serial,
        &host,
        "deaf-proc",
        &BundleExtras::default(),
        |_| {},
        &["signal: killed"],
    );
    assert!(
        elapsed >= DEADLINE + Duration::from_secs(1),
        "it ended before the backstop ({elapsed:?}): not the backstop's doing"
    );
    drop(stuck);
    let prepared = prepare(
        &serial,
        &scenario("deaf-proc-after", &host),
        &Default::default(),
    );
    assert_correct(&start(&prepared));
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn nvidia_cdi_hook_and_nvidia_ctk_hook_are_bounded_by_the_deadline() {
    use std::process::Command;

    let dir = tempfile::tempdir().unwrap();
    // The OCI state read from a file whose read does not return.
    let state = dir.path().join("state.json");
    fs::write(&state, b"").unwrap();
    let stuck = StuckFile::over(&state);
    let hook = harness::project::hook_binary();
    for name in ["nvidia-cdi-hook", "nvidia-ctk"] {
        std::os::unix::fs::symlink(hook, dir.path().join(name)).unwrap();
    }
    let spec = format!("--container-spec={}", state.display());
    let cases = [
        ("nvidia-cdi-hook", vec!["update-ldcache", spec.as_str()]),
        (
            "nvidia-ctk hook",
            vec!["hook", "update-ldcache", spec.as_str()],
        ),
    ];
    // Both at once: each waits out the default config's bound.
    let dir_path = dir.path();
    let runs: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = cases
            .iter()
            .map(|(entry, args)| {
                scope.spawn(move || {
                    let name = entry.split(' ').next().unwrap_or(entry);
                    let mut cmd = Command::new(dir_path.join(name));
                    cmd.args(args);
                    let started = Instant::now();
                    let finished = run_bounded(cmd, Duration::from_secs(60));
                    (*entry, finished, started.elapsed())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (entry, finished, elapsed) in runs {
        let stderr = &finished.stderr;
        assert!(!finished.timed_out, "{entry}: hung past 60 s: {stderr}");
        assert_eq!(
            finished.status.and_then(|s| s.code()),
            Some(1),
            "{entry}: {stderr}"
        );
        let head = format!("error: {entry}: gave up after ");
        let line = stderr
            .lines()
            .find(|l| l.contains(&head))
            .unwrap_or_else(|| panic!("{entry}: no deadline line: {stderr}"));
        assert!(
            line.ends_with(&format!(
                "ms (deadline-ms) waiting for reading {}",
                state.display()
            )),
            "{entry}: {line}"
        );
        let millis: u64 = line
            .split(&head)
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{entry}: no bound in {line}"));
        let bound = Duration::from_millis(millis);
        assert!(
            elapsed >= bound && elapsed < bound + Duration::from_secs(3),
            "{entry}: {elapsed:?} for a bound of {bound:?}"
        );
    }
    drop(stuck);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_hook_that_blocks_is_stopped_by_its_deadline_with_a_line_naming_the_wait() {
    let serial = serial();
    let host = host("snapshot-blocks", DEADLINE);
    // A log file that is a fifo no one reads: opening it blocks.
    let scratch = harness::runtime::bundle::work_root().join("snapshot-blocks");
    fs::create_dir_all(&scratch).unwrap();
    let log = scratch.join("hook.log");
    let _ = fs::remove_file(&log);
    let extras = BundleExtras {
        hook_log: Some(log.clone()),
        ..BundleExtras::default()
    };
    let elapsed = assert_fails_within_the_deadline(
        &serial,
        &host,
        "blocked-log",
        &extras,
        |_| nix::unistd::mkfifo(&log, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap(),
        &[
            "prestart: gave up after 2000 ms (deadline-ms) waiting for the log file",
            "hook.log",
        ],
    );
    assert!(
        elapsed >= DEADLINE,
        "it failed before the deadline: not the deadline's doing"
    );
    let _ = fs::remove_file(&log);
}

#[test]
fn every_entry_point_a_runtime_waits_for_is_bounded_by_the_deadline() {
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir().unwrap();
    // Opening a log file that is a fifo no one reads blocks: only the
    // deadline ends it.
    let log = dir.path().join("log.fifo");
    nix::unistd::mkfifo(&log, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let config = dir.path().join("config.toml");
    fs::write(
        &config,
        format!("deadline-ms = 300\n[log]\nfile = \"{}\"\n", log.display()),
    )
    .unwrap();
    let names = dir.path().join("bin");
    fs::create_dir(&names).unwrap();
    let hook = harness::project::hook_binary();
    for name in ["nvidia-container-runtime-hook", "nvidia-container-cli"] {
        std::os::unix::fs::symlink(hook, names.join(name)).unwrap();
    }
    let config = config.display().to_string();
    let ours = |args: &[&str]| {
        let mut argv = vec![
            hook.display().to_string(),
            "--config".into(),
            config.clone(),
        ];
        argv.extend(args.iter().map(|a| a.to_string()));
        argv
    };
    let cdi_hook = [
        "cdi-hook",
        "createRuntime",
        "--driver-version",
        "535.261.03",
        "--capabilities",
        "utility",
        "--layout",
        "debian",
    ];
    let cases: Vec<(Vec<String>, &str, Duration)> = vec![
        (ours(&["prestart"]), "prestart", Duration::from_millis(300)),
        (
            ours(&["create-runtime"]),
            "createRuntime",
            Duration::from_millis(300),
        ),
        (ours(&cdi_hook), "cdi-hook", Duration::from_millis(300)),
        (
            ours(&["runtime", "state", "onh-none"]),
            "the runtime wrapper",
            Duration::from_millis(300),
        ),
        (
            vec![
                names
                    .join("nvidia-container-runtime-hook")
                    .display()
                    .to_string(),
                "-config".into(),
                config.clone(),
                "prestart".into(),
            ],
            "prestart",
            Duration::from_millis(300),
        ),
        // NVIDIA's CLI reads the default config (none here: defaults),
        // so it runs under the default bound.
        (
            vec![
                names.join("nvidia-container-cli").display().to_string(),
                format!("--debug={}", log.display()),
                "configure".into(),
                "--pid=1".into(),
                "--compute".into(),
                dir.path().display().to_string(),
            ],
            "nvidia-container-cli configure",
            Duration::from_secs(15),
        ),
    ];
    for (argv, entry, bound) in cases {
        let started = Instant::now();
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Stdin stays open (as a runtime's would), so nothing ends but the deadline.
        let stdin = child.stdin.take();
        let out = child.wait_with_output().unwrap();
        let elapsed = started.elapsed();
        drop(stdin);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let line = format!(
            "error: {entry}: gave up after {} ms (deadline-ms) waiting for the log file {}",
            bound.as_millis(),
            log.display()
        );
        assert_eq!(out.status.code(), Some(1), "{argv:?}: {stderr}");
        assert!(stderr.contains(&line), "{argv:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{argv:?}: one line: {stderr}");
        assert!(
            elapsed >= bound && elapsed < bound + Duration::from_secs(3),
            "{argv:?}: {elapsed:?} for a bound of {bound:?}"
        );
    }
}

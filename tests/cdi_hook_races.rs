//! `nvidia-cdi-hook`'s subcommands at `createContainer`, raced (issue 40).
//!
//! NVIDIA's CDI specs run these subcommands inside the container's mount
//! namespace just before it starts, where a process sharing the
//! container's volumes can change the rootfs under them. Here a thread
//! swaps the directories each subcommand works in for links to a canary
//! directory outside the rootfs (a host victim) and back, as fast as it
//! can, while runc and crun start the container again and again with the
//! subcommand as its only hook, as NVIDIA's specs have it. After every
//! start nothing outside the rootfs has changed (the canary, the host's
//! mount table; the simulated driver after each case), and the start either
//! succeeded or failed in one line of ours.
//!
//! crun run without a pid namespace (the host's pids) hands hooks a state
//! whose pid is 0; each subcommand must still work there, raced or not.
//!
//! Run as root: `make test`, or
//! `cargo test --features _test_as_root --test cdi_hook_races -- --nocapture`.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use harness::compat::add_compat_libcuda;
use harness::mounts::{assert_mounts_unchanged, host_mounts};
use harness::runtime::bundle::{work_root, Bundle, Scenario};
use harness::runtime::host_state::{listing_diff, tree_listing};
use harness::runtime::oci_config::path_str;
use harness::runtime::runtimes::Runtime;
use harness::simhost::{require_root, Fixture, SimHost};

/// Starts of each subcommand per runtime and pid mode, raced.
const STARTS: usize = 12;

/// One subcommand, the rootfs directories swapped under it, and how the
/// image is made ready for it.
struct Race {
    args: &'static [&'static str],
    swapped: &'static [&'static str],
    prepare: fn(&Path),
    /// What an unraced start leaves in the rootfs, where it shows.
    done: Option<fn(&Path) -> bool>,
}

/// The image's library directory, as NVIDIA's specs name it.
const LIB: &str = "usr/lib/x86_64-linux-gnu";

fn races() -> [Race; 6] {
    [
        Race {
            args: &["update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"],
            swapped: &[LIB, "etc"],
            prepare: add_library,
            done: Some(|root| {
                let cache = fs::read(root.join("etc/ld.so.cache")).unwrap_or_default();
                let entry = b"/usr/lib/x86_64-linux-gnu/libm.so.6";
                cache.windows(entry.len()).any(|w| w == entry)
            }),
        },
        Race {
            args: &[
                "create-soname-symlinks",
                "--folder",
                "/usr/lib/x86_64-linux-gnu",
            ],
            swapped: &[LIB],
            prepare: add_library,
            done: Some(|root| {
                fs::read_link(root.join(LIB).join("libm.so.6"))
                    .is_ok_and(|target| target == Path::new("libm-race.so"))
            }),
        },
        Race {
            args: &[
                "create-symlinks",
                "--link",
                "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
            ],
            swapped: &[LIB],
            prepare: |_| {},
            done: Some(|root| fs::read_link(root.join(LIB).join("libcuda.so")).is_ok()),
        },
        Race {
            args: &["enable-cuda-compat", "--host-driver-version", "470.1"],
            swapped: &["usr/local/cuda/compat", "etc/ld.so.conf.d"],
            prepare: add_compat_libcuda,
            done: Some(|root| {
                fs::read_dir(root.join("etc/ld.so.conf.d")).is_ok_and(|dir| {
                    dir.flatten().any(|e| {
                        fs::read_to_string(e.path())
                            .is_ok_and(|conf| conf.contains("/usr/local/cuda/compat"))
                    })
                })
            }),
        },
        Race {
            args: &["chmod", "--mode", "777", "--path", "/etc/passwd"],
            swapped: &["etc"],
            prepare: |root| fs::write(root.join("etc/passwd"), "root:x:0:0::/:/bin/sh\n").unwrap(),
            done: Some(|root| {
                use std::os::unix::fs::PermissionsExt;
                fs::metadata(root.join("etc/passwd"))
                    .is_ok_and(|m| m.permissions().mode() & 0o777 == 0o777)
            }),
        },
        Race {
            args: &["update-application-profile"],
            swapped: &["etc/nvidia", "etc"],
            prepare: |root| fs::create_dir_all(root.join("etc/nvidia")).unwrap(),
            done: Some(|root| {
                root.join("etc/nvidia/nvidia-application-profiles-rc.d")
                    .read_dir()
                    .is_ok_and(|mut dir| dir.next().is_some())
            }),
        },
    ]
}

/// Puts a real library of the machine's (SONAME `libm.so.6`) in the
/// image's library directory as `libm-race.so`.
fn add_library(root: &Path) {
    let dir = root.join(LIB);
    fs::create_dir_all(&dir).unwrap();
    let host = Path::new("/lib/x86_64-linux-gnu/libm.so.6");
    fs::copy(host, dir.join("libm-race.so"))
        .unwrap_or_else(|e| panic!("copy {}: {e}", host.display()));
}

/// A directory outside every rootfs that the swapped links point at.
fn canary() -> PathBuf {
    let canary = work_root().join("race-canary");
    let _ = fs::remove_dir_all(&canary);
    fs::create_dir_all(canary.join("nvidia/nvidia-application-profiles-rc.d")).unwrap();
    fs::create_dir_all(canary.join("ld.so.conf.d")).unwrap();
    fs::write(canary.join("passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    fs::write(canary.join("ld.so.cache"), "host cache\n").unwrap();
    fs::write(canary.join("libcuda.so.999.1"), "a host file\n").unwrap();
    canary
}

/// Swaps each of `dirs` (paths of `rootfs`) for a link to `canary` and back
/// until `stop`; returns how many swaps it made.
fn swapper(
    rootfs: PathBuf,
    dirs: &'static [&'static str],
    canary: PathBuf,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut swaps = 0;
        while !stop.load(Ordering::Relaxed) {
            for dir in dirs {
                let path = rootfs.join(dir);
                let aside = rootfs.join(format!("{dir}.aside"));
                if fs::rename(&path, &aside).is_ok() {
                    let _ = symlink(&canary, &path);
                    let _ = fs::remove_file(&path);
                    let _ = fs::rename(&aside, &path);
                    swaps += 1;
                }
            }
        }
        swaps
    })
}

/// Whether `stderr` of a failed start is the hook's one line of ours, or a
/// failure of the container itself (its program, raced away), not of the
/// hook.
fn failed_well(runtime: Runtime, stderr: &str) -> bool {
    if stderr.contains("panicked") {
        return false;
    }
    match runtime {
        // crun does not pass a hook's stderr on.
        Runtime::CrunV1 => true,
        _ => !stderr.contains("hook") || stderr.contains("oci-nvidia-hook["),
    }
}

/// Each race through `runtime`, with its pid namespace or without.
fn run_races(sim: &SimHost, runtime: Runtime, host_pids: bool) {
    runtime.require_tools();
    let canary = canary();
    let mode = if host_pids { "host-pids" } else { "pid-ns" };
    let mut seen = Vec::new();
    for (n, race) in races().into_iter().enumerate() {
        let name = format!("race-{}-{mode}-{n}", runtime.name().to_lowercase());
        let prepare = race.prepare;
        let prepare = move |root: &Path| prepare(root);
        let scenario = Scenario::hooks_only(&name, runtime, sim, &prepare);
        let bundle = Bundle::exiting(&scenario);
        let mut args = vec!["nvidia-cdi-hook"];
        args.extend(race.args);
        let hooks = serde_json::json!({"createContainer": [
            {"path": path_str(harness::project::hook_binary()), "args": args}
        ]});
        let what = format!("{} ({}, {mode})", race.args[0], runtime.name());
        // A GPU's node, as a CDI spec has the runtime make it: the
        // application profile names it.
        let without_pid_ns = |config: &mut serde_json::Value| {
            config["linux"]["devices"] = serde_json::json!([
                {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}
            ]);
            if host_pids {
                let namespaces = config["linux"]["namespaces"].as_array_mut().unwrap();
                namespaces.retain(|ns| ns["type"] != "pid");
            }
        };
        let canary_before = tree_listing(&canary);
        let driver_before = tree_listing(&sim.dir);
        let mounts_before = host_mounts();

        // Unraced first: the subcommand works.
        let id = format!("onh-{name}-{}", std::process::id());
        let (ok, stderr) = bundle.run_with_hooks(&scenario, &id, hooks.clone(), without_pid_ns);
        assert!(ok, "{what}, unraced: {stderr}");
        if let Some(done) = race.done {
            assert!(
                done(&bundle.rootfs()),
                "{what}, unraced: nothing done in the rootfs"
            );
        }

        let stop = Arc::new(AtomicBool::new(false));
        let racer = swapper(bundle.rootfs(), race.swapped, canary.clone(), stop.clone());
        let mut outcomes = BTreeMap::new();
        for start in 0..STARTS {
            let id = format!("onh-{name}-{start}-{}", std::process::id());
            let (ok, stderr) = bundle.run_with_hooks(&scenario, &id, hooks.clone(), without_pid_ns);
            let changed = listing_diff(&canary_before, &tree_listing(&canary));
            assert!(
                changed.is_empty(),
                "{what}: the canary changed: {changed:?}\n{stderr}"
            );
            assert_mounts_unchanged(&mounts_before, &what);
            assert!(ok || failed_well(runtime, &stderr), "{what}: {stderr}");
            *outcomes.entry(ok).or_insert(0) += 1;
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = racer.join().unwrap();
        assert!(swaps > 0, "{what}: the racer never swapped");
        let changed = listing_diff(&driver_before, &tree_listing(&sim.dir));
        assert!(
            changed.is_empty(),
            "{what}: the driver changed: {changed:?}"
        );
        seen.push(format!("{what}: {outcomes:?} over {swaps} swaps"));
    }
    eprintln!("{}", seen.join("\n"));
    let _ = fs::remove_dir_all(&canary);
}

fn sim() -> SimHost {
    SimHost::shared(Fixture::synthetic(2))
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn subcommands_raced_under_runc_stay_inside_the_rootfs() {
    require_root();
    let _serial = harness::runtime::run::serial();
    run_races(&sim(), Runtime::RuncV1, false);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn subcommands_raced_under_crun_stay_inside_the_rootfs() {
    require_root();
    let _serial = harness::runtime::run::serial();
    run_races(&sim(), Runtime::CrunV1, false);
}

/// crun without a pid namespace: its hooks' state says pid 0.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn subcommands_work_under_crun_with_the_hosts_pids() {
    require_root();
    let _serial = harness::runtime::run::serial();
    run_races(&sim(), Runtime::CrunV1, true);
}

/// runc without a pid namespace: its hooks' state has the init's host pid.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn subcommands_work_under_runc_with_the_hosts_pids() {
    require_root();
    let _serial = harness::runtime::run::serial();
    run_races(&sim(), Runtime::RuncV1, true);
}

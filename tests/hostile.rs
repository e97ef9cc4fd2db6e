//! Hostile images: every path is resolved inside the rootfs, or the hook
//! refuses clearly. In no case may a file outside the rootfs be created,
//! changed or mounted over. Each case points the image's paths at a canary
//! directory outside the rootfs and checks it is untouched afterwards.

/// The shared pieces of the integration tests (tests/common/) this suite uses.
mod common {
    pub mod mounts;
    pub mod project;
    pub mod simhost;
}
mod direct_support;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::mounts::{assert_mounts_unchanged, host_mounts};
use common::simhost::SimHost;
use direct_support::{bundle, hook_with_stdin, state, Namespaced};

/// What a directory tree holds: path → kind, size, mtime, contents hash.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = fs::symlink_metadata(&path).unwrap();
        let contents = if meta.is_file() {
            format!(
                "{:x}",
                fs::read(&path)
                    .unwrap()
                    .iter()
                    .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(*b as u64))
            )
        } else {
            String::new()
        };
        out.insert(
            path.clone(),
            format!(
                "{:o} {} {} {contents}",
                meta.mode(),
                meta.len(),
                meta.mtime_nsec()
            ),
        );
        if meta.is_dir() {
            for entry in fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
        }
    }
    out
}

/// A canary tree outside the rootfs that a hostile image points at.
struct Case {
    dir: tempfile::TempDir,
    bundle: PathBuf,
}

impl Case {
    fn new() -> Case {
        let dir = tempfile::tempdir().unwrap();
        let bundle = bundle(
            dir.path(),
            &[
                "NVIDIA_VISIBLE_DEVICES=0",
                "NVIDIA_DRIVER_CAPABILITIES=utility,compute",
            ],
        );
        let canary = dir.path().join("canary");
        fs::create_dir_all(canary.join("nvidia")).unwrap();
        fs::write(canary.join("passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
        fs::write(canary.join("ld.so.cache"), "host cache\n").unwrap();
        Case { dir, bundle }
    }

    fn rootfs(&self) -> PathBuf {
        self.bundle.join("rootfs")
    }

    fn canary(&self) -> PathBuf {
        self.dir.path().join("canary")
    }

    /// Creates `rel` in the rootfs as a symlink to `target`, making its parent.
    fn link(&self, rel: &str, target: impl AsRef<Path>) {
        let path = self.rootfs().join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let _ = fs::remove_dir_all(&path);
        let _ = fs::remove_file(&path);
        symlink(target, path).unwrap();
    }

    /// Runs the hook on this image; checks the canary, the host's mounts and
    /// the driver tree are untouched, and that a failure is one clear line.
    fn run(&self, sim: &SimHost) -> Output {
        let before = snapshot(&self.canary());
        let driver_before = snapshot(&sim.dir);
        let mounts_before = host_mounts();
        let container = Namespaced::start();
        let out = hook_with_stdin(
            &sim.config,
            &["prestart"],
            &state(container.pid(), &self.bundle),
        );
        assert_eq!(
            snapshot(&self.canary()),
            before,
            "the canary outside the rootfs changed"
        );
        assert_mounts_unchanged(&mounts_before, "");
        assert_eq!(
            snapshot(&sim.dir),
            driver_before,
            "the simulated driver tree changed"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        if !out.status.success() {
            assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        }
        out
    }
}

/// The simulated host, and this binary's lock: the tests compare the host's
/// mount table, so they run one at a time.
fn sim() -> (SimHost, std::sync::MutexGuard<'static, ()>) {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    (SimHost::shared("synthetic", 2, "new"), guard)
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn directories_linked_out_of_the_rootfs_stay_inside_or_are_refused() {
    let (sim, _serial) = sim();
    for rel in [
        "usr/lib/x86_64-linux-gnu",
        "usr/bin",
        "etc",
        "etc/ld.so.conf.d",
        "lib/firmware",
        "proc/driver",
        "dev",
    ] {
        // Absolute links are re-rooted: the canary path does not exist inside, so
        // this is a refusal or an injection elsewhere inside the rootfs.
        let case = Case::new();
        case.link(rel, case.canary());
        let out = case.run(&sim);
        eprintln!(
            "{rel} -> absolute: success={} {}",
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).trim()
        );

        // Relative links climbing out are clamped at the rootfs.
        let case = Case::new();
        let up = "../".repeat(40);
        case.link(rel, format!("{up}{}", case.canary().display()));
        let out = case.run(&sim);
        eprintln!(
            "{rel} -> relative: success={} {}",
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn image_files_linked_to_host_files_are_replaced_not_followed() {
    let (sim, _serial) = sim();
    let case = Case::new();
    case.link("etc/ld.so.cache", case.canary().join("ld.so.cache"));
    case.link(
        "usr/lib/x86_64-linux-gnu/libcuda.so.1",
        case.canary().join("passwd"),
    );
    case.link(
        "usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03",
        case.canary().join("passwd"),
    );
    case.link("usr/bin/nvidia-smi", case.canary().join("passwd"));
    let out = case.run(&sim);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lib = case.rootfs().join("usr/lib/x86_64-linux-gnu");
    assert!(fs::symlink_metadata(case.rootfs().join("etc/ld.so.cache"))
        .unwrap()
        .is_file());
    assert_eq!(
        fs::read_link(lib.join("libcuda.so.1")).unwrap(),
        Path::new("libcuda.so.535.261.03")
    );
    assert!(fs::symlink_metadata(lib.join("libcuda.so.535.261.03"))
        .unwrap()
        .is_file());
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn directories_fifos_and_devices_at_targets_are_refused() {
    let (sim, _serial) = sim();
    type Make = fn(&Path);
    let makers: [(&str, Make); 3] = [
        ("directory", |p| fs::create_dir_all(p).unwrap()),
        ("fifo", |p| {
            nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap()
        }),
        ("character device", |p| {
            nix::sys::stat::mknod(
                p,
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::from_bits_truncate(0o666),
                nix::sys::stat::makedev(1, 3),
            )
            .unwrap()
        }),
    ];
    for target in [
        "usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03",
        "usr/bin/nvidia-smi",
    ] {
        for (kind, make) in makers {
            let case = Case::new();
            let path = case.rootfs().join(target);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            make(&path);
            let out = case.run(&sim);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success(),
                "{target} as a {kind} must be refused"
            );
            assert!(
                err.contains(target.rsplit('/').next().unwrap()) && err.contains(kind),
                "{kind}: {err}"
            );
        }
    }
    // A directory where a SONAME link goes.
    let case = Case::new();
    fs::create_dir_all(case.rootfs().join("usr/lib/x86_64-linux-gnu/libcuda.so.1")).unwrap();
    let out = case.run(&sim);
    assert!(!out.status.success());
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn symlink_loops_and_long_paths_are_refused_or_resolved_inside() {
    let (sim, _serial) = sim();
    let case = Case::new();
    case.link("usr/lib/x86_64-linux-gnu", "loop-b");
    case.link("usr/lib/loop-b", "x86_64-linux-gnu");
    let out = case.run(&sim);
    assert!(
        !out.status.success(),
        "a symlink loop cannot be a library directory"
    );

    // A very deep directory the library directory links to: resolved inside.
    let case = Case::new();
    let deep: PathBuf = std::iter::repeat_n("d", 150).collect();
    fs::create_dir_all(case.rootfs().join(&deep)).unwrap();
    case.link("usr/lib/x86_64-linux-gnu", Path::new("/").join(&deep));
    let out = case.run(&sim);
    eprintln!(
        "deep: success={} {}",
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    if out.status.success() {
        assert!(case
            .rootfs()
            .join(&deep)
            .join("libcuda.so.535.261.03")
            .is_file());
    }

    // A link whose target nearly fills PATH_MAX, dangling.
    let case = Case::new();
    case.link("usr/lib/x86_64-linux-gnu", "x/".repeat(2000));
    let out = case.run(&sim);
    assert!(
        !out.status.success(),
        "a dangling over-long link cannot be a library directory"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn compat_directory_linked_to_the_host_is_never_used() {
    let (sim, _serial) = sim();
    let case = Case::new();
    // A real ELF shared object in the canary, named as a newer compat libcuda.
    let host_lib = sim.host["libraries"]["libcuda.so.1"].as_str().unwrap();
    fs::copy(host_lib, case.canary().join("libcuda.so.550.54.15")).unwrap();
    case.link("usr/local/cuda/compat", case.canary());
    let out = case.run(&sim);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cache = fs::read(case.rootfs().join("etc/ld.so.cache")).unwrap();
    let cache = String::from_utf8_lossy(&cache);
    assert!(
        !cache.contains("compat"),
        "the host directory was taken as compat libraries"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_rootfs_that_races_never_lets_anything_escape() {
    let (sim, _serial) = sim();
    let case = Case::new();
    let rootfs = case.rootfs();
    let canary = case.canary();
    fs::create_dir_all(rootfs.join("usr/lib/x86_64-linux-gnu")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Swaps the library directory for a symlink to the canary and back, as fast as it can.
    let swapper = {
        let stop = stop.clone();
        let lib = rootfs.join("usr/lib/x86_64-linux-gnu");
        let aside = rootfs.join("usr/lib/aside");
        let abs_target = canary.clone();
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if fs::rename(&lib, &aside).is_ok() {
                    let _ = symlink(&abs_target, &lib);
                    let _ = fs::remove_file(&lib);
                    let _ = fs::rename(&aside, &lib);
                    swaps += 1;
                }
            }
            swaps
        })
    };
    let mut outcomes = BTreeMap::new();
    for _ in 0..40 {
        let out = case.run(&sim);
        *outcomes.entry(out.status.success()).or_insert(0) += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    eprintln!("race: {outcomes:?} over {swaps} swaps");
    assert!(swaps > 0);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_full_rootfs_fails_the_hook_with_a_clear_error() {
    let (sim, _serial) = sim();
    let case = Case::new();
    // The rootfs on a tiny tmpfs, filled so that writing the loader cache fails.
    let rootfs = case.rootfs();
    let tmpfs = rootfs.clone();
    fs::remove_dir_all(&rootfs).unwrap();
    fs::create_dir(&tmpfs).unwrap();
    nix::mount::mount(
        Some("tmpfs"),
        &tmpfs,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=256k"),
    )
    .unwrap();
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
        }
    }
    let _unmount = Unmount(tmpfs.clone());
    for sub in [
        "etc",
        "dev",
        "usr/lib/x86_64-linux-gnu",
        "usr/bin",
        "lib/firmware",
        "run",
        "tmp",
    ] {
        fs::create_dir_all(tmpfs.join(sub)).unwrap();
    }
    fs::write(tmpfs.join("etc/debian_version"), "12.11\n").unwrap();
    let mut filler = fs::File::create(tmpfs.join("filler")).unwrap();
    while std::io::Write::write_all(&mut filler, &[0u8; 4096]).is_ok() {}
    drop(filler);

    let out = case.run(&sim);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a full rootfs cannot take the loader cache"
    );
    assert!(err.contains("No space left on device"), "{err}");
    // The image's own files are intact and no temporary file is left.
    assert!(fs::read_dir(tmpfs.join("etc"))
        .unwrap()
        .flatten()
        .all(|e| !e.file_name().to_string_lossy().contains("oci-nvidia-hook.")));
}

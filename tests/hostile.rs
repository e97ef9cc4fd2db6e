//! Hostile images: every path is resolved inside the rootfs, or the hook
//! refuses clearly. In no case may a file outside the rootfs be created,
//! changed or mounted over. Each case points the image's paths at a canary
//! directory outside the rootfs and checks afterwards, from the test's own
//! mount namespace and from the stand-in container's (where the hook's
//! mounts live), that the canary is untouched and that every mount the hook
//! added has its mount point inside the rootfs.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use harness::direct::{bundle, hook_with_stdin_on, named_with_stdin_on, state, Namespaced};
use harness::mounts::{assert_mounts_unchanged, host_mounts, mount_table};
use harness::old_kernel::{OldKernel, OLD_KERNELS};
use harness::simhost::{Fixture, SimHost};

/// What a directory tree holds: path (relative to `dir`) → kind, size,
/// mtime, contents hash. Relative, so that one tree seen through two
/// mount namespaces compares equal.
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
            path.strip_prefix(dir).unwrap().to_path_buf(),
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
    /// The hook's arguments after `--config`; for `nvidia-cdi-hook`, its
    /// name and arguments (it takes no `--config`).
    args: Vec<String>,
    /// Whether a success must show mounts of the hook's (not for the
    /// `nvidia-cdi-hook` subcommands that make none).
    mounts: bool,
    /// The old kernel the hook runs on, if any.
    kernel: Option<OldKernel>,
}

impl Case {
    /// A GPU container for the prestart hook.
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
        Case {
            dir,
            bundle,
            args: vec!["prestart".into()],
            mounts: true,
            kernel: None,
        }
    }

    /// This case, with the hook run on `kernel`.
    fn on(mut self, kernel: OldKernel) -> Case {
        self.kernel = Some(kernel);
        self
    }

    /// A container a runtime created from our CDI spec with GPU index 0:
    /// its node in `linux.devices`, `NVIDIA_VISIBLE_DEVICES=void` appended,
    /// and our `cdi-hook` at createRuntime. The runtime's mounts are not
    /// there (no runtime ran): the hook's own work is what is tested.
    fn cdi(sim: &SimHost) -> Case {
        let mut case = Case::new();
        let gpu0 = &sim.facts.gpus[0];
        let config = case.bundle.join("config.json");
        let mut spec: serde_json::Value =
            serde_json::from_slice(&fs::read(&config).unwrap()).unwrap();
        spec["process"]["env"]
            .as_array_mut()
            .unwrap()
            .push("NVIDIA_VISIBLE_DEVICES=void".into());
        spec["linux"]["devices"] = serde_json::json!([
            {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255},
            {"path": format!("/dev/nvidia{}", gpu0.minor), "type": "c", "major": 195, "minor": gpu0.minor},
        ]);
        fs::write(&config, serde_json::to_vec(&spec).unwrap()).unwrap();
        case.args = [
            "cdi-hook",
            "createRuntime",
            "--driver-version",
            sim.facts.driver_version.as_str(),
            "--capabilities",
            "utility,compute",
            "--layout",
            "debian",
        ]
        .map(String::from)
        .to_vec();
        case
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
    /// the driver tree are untouched, that the hook's mounts in the
    /// container stay inside the rootfs, and that a failure is one clear
    /// line.
    fn run(&self, sim: &SimHost) -> Output {
        self.run_seeing_mounts(sim).0
    }

    /// [`Case::run`], also returning the mounts the hook added in the
    /// stand-in container's namespace ("mount-point fs-type source").
    fn run_seeing_mounts(&self, sim: &SimHost) -> (Output, Vec<String>) {
        let before = snapshot(&self.canary());
        let driver_before = snapshot(&sim.dir);
        let mounts_before = host_mounts();
        let container = Namespaced::start();
        let pid = container.pid().to_string();
        let container_mounts_before = mount_table(&pid);
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let stdin = state(container.pid(), &self.bundle);
        let out = match args.split_first() {
            Some((&"nvidia-cdi-hook", rest)) => {
                named_with_stdin_on(self.kernel, "nvidia-cdi-hook", rest, &stdin)
            }
            _ => hook_with_stdin_on(self.kernel, &sim.config, &args, &stdin),
        };

        // Seen from the test's own mount namespace: the host.
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
        // Seen from the container's mount namespace, where a bind mount over
        // a host path would show and the host's view would not.
        let added = self.assert_mounts_inside_rootfs(&pid, &container_mounts_before, &out);
        let canary_in_container = Path::new("/proc")
            .join(&pid)
            .join("root")
            .join(self.canary().strip_prefix("/").unwrap());
        assert_eq!(
            snapshot(&canary_in_container),
            before,
            "the canary, seen from the container's mount namespace, changed"
        );

        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        if !out.status.success() {
            assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        }
        (out, added)
    }

    /// The mounts the hook added to the stand-in container's namespace
    /// (pid `pid`, whose table was `before`): every one has its mount point
    /// inside the rootfs, none went away, and a hook that succeeded has
    /// added some (else this looked at the wrong namespace). Returns them.
    fn assert_mounts_inside_rootfs(
        &self,
        pid: &str,
        before: &[String],
        out: &Output,
    ) -> Vec<String> {
        let after = mount_table(pid);
        let added = multiset_minus(&after, before);
        let removed = multiset_minus(before, &after);
        let rootfs = fs::canonicalize(self.rootfs()).unwrap();
        let inside = format!("{}/", rootfs.display());
        let outside: Vec<&String> = added.iter().filter(|m| !m.starts_with(&inside)).collect();
        assert!(
            outside.is_empty(),
            "the hook mounted outside the rootfs {} in the container's namespace: \
             {outside:#?}\nall it added: {added:#?}",
            rootfs.display()
        );
        assert!(
            removed.is_empty(),
            "mounts went away in the container's namespace: {removed:#?}"
        );
        assert!(
            !out.status.success() || !self.mounts || !added.is_empty(),
            "the hook succeeded, yet pid {pid}'s mount table shows none of its mounts"
        );
        added
    }
}

/// The lines of `a` not in `b`, counting repeats: a mount stacked on an
/// identical one is a new mount too.
fn multiset_minus(a: &[String], b: &[String]) -> Vec<String> {
    let mut left: BTreeMap<&String, usize> = BTreeMap::new();
    for line in b {
        *left.entry(line).or_default() += 1;
    }
    a.iter()
        .filter(|line| match left.get_mut(line) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .cloned()
        .collect()
}

/// The simulated host, and this binary's lock: the tests compare the host's
/// mount table, so they run one at a time.
fn sim() -> (SimHost, std::sync::MutexGuard<'static, ()>) {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    (SimHost::shared(Fixture::synthetic(2)), guard)
}

/// `rel` in a fresh image, linked out of the rootfs to the canary: with an
/// absolute link (re-rooted: the canary's path does not exist inside, so
/// the link dangles) and with a relative one climbing out (clamped at the
/// rootfs, to the same dangling path).
fn linked_out(rel: &str) -> [(&'static str, Case); 2] {
    linked_out_with(rel, Case::new)
}

/// [`linked_out`] for the cases `new` makes.
fn linked_out_with(rel: &str, new: impl Fn() -> Case) -> [(&'static str, Case); 2] {
    let absolute = new();
    absolute.link(rel, absolute.canary());
    let relative = new();
    let up = "../".repeat(40);
    relative.link(rel, format!("{up}{}", relative.canary().display()));
    [("absolute", absolute), ("relative", relative)]
}

/// A directory the hook must create things in, linked out of the rootfs,
/// is refused: the hook will not create it through the link (nor follow
/// it out), and says which directory, before or while injecting, with
/// everything it did inside the rootfs (Case::run checks the rest).
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn directories_linked_out_of_the_rootfs_are_refused() {
    let (sim, _serial) = sim();
    for rel in [
        "usr/lib/x86_64-linux-gnu",
        "usr/bin",
        "etc",
        "etc/ld.so.conf.d",
        "lib/firmware",
        "dev",
    ] {
        assert_linked_out_dir_refused(&sim, rel, Case::new);
    }
}

/// `rel`, linked out of the rootfs of cases `new` makes (both ways), is
/// refused in one line naming it, nothing made outside (Case::run).
fn assert_linked_out_dir_refused(sim: &SimHost, rel: &str, new: impl Fn() -> Case) {
    for (how, case) in linked_out_with(rel, new) {
        let out = case.run(sim);
        let err = String::from_utf8_lossy(&out.stderr);
        let hook = &case.args[0];
        assert!(
            !out.status.success(),
            "{hook}: {rel} linked out ({how}) must be refused: {err}"
        );
        assert!(
            err.contains(&format!("refusing /{rel} in the container"))
                && err.contains("it exists as a symlink, expected a directory"),
            "{hook}: {rel} linked out ({how}): the refusal names the directory: {err}"
        );
    }
}

/// `/proc/driver` linked out of the rootfs leaves no `/proc/driver/nvidia`
/// directory inside it to mask: the hook masks nothing there, mounts
/// nothing under it, and injects everything else inside the rootfs.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn proc_driver_linked_out_of_the_rootfs_is_not_masked_and_the_rest_lands_inside() {
    let (sim, _serial) = sim();
    for (how, case) in linked_out("proc/driver") {
        let link = fs::read_link(case.rootfs().join("proc/driver")).unwrap();
        let (out, added) = case.run_seeing_mounts(&sim);
        assert!(
            out.status.success(),
            "proc/driver linked out ({how}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rootfs = fs::canonicalize(case.rootfs()).unwrap();
        let library = format!(
            "{}/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03 ",
            rootfs.display()
        );
        assert!(
            added.iter().any(|m| m.starts_with(&library)),
            "proc/driver linked out ({how}): libcuda is not mounted inside the rootfs: {added:#?}"
        );
        let proc_driver = format!("{}/proc/driver", rootfs.display());
        let masked: Vec<&String> = added
            .iter()
            .filter(|m| m.starts_with(&proc_driver))
            .collect();
        assert!(
            masked.is_empty(),
            "proc/driver linked out ({how}): mounted under it: {masked:#?}"
        );
        assert_eq!(
            fs::read_link(case.rootfs().join("proc/driver")).unwrap(),
            link,
            "proc/driver linked out ({how}): the image's link was changed"
        );
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn image_files_linked_to_host_files_are_replaced_not_followed() {
    let (sim, _serial) = sim();
    assert_host_links_replaced(&sim, Case::new());
}

/// The image's loader cache, SONAME link, library and binary, linked to
/// host files, are replaced inside the rootfs, never followed out.
fn assert_host_links_replaced(sim: &SimHost, case: Case) {
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
    let out = case.run(sim);
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

/// The CDI spec's createRuntime hook writes into the same image
/// directories as the prestart hook (library links, the loader cache, its
/// `ld.so.conf.d` entry): linked out, each is refused the same way.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn cdi_hook_refuses_directories_linked_out_of_the_rootfs() {
    let (sim, _serial) = sim();
    for rel in ["usr/lib/x86_64-linux-gnu", "etc", "etc/ld.so.conf.d"] {
        assert_linked_out_dir_refused(&sim, rel, || Case::cdi(&sim));
    }
}

/// Pre-planted links at the loader cache and at a SONAME link are
/// replaced, never followed, by the CDI hook too; and it masks
/// `/proc/driver/nvidia` with the granted GPU only.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn cdi_hook_replaces_planted_links_and_masks_proc_with_the_granted_gpu() {
    let (sim, _serial) = sim();
    let case = Case::cdi(&sim);
    case.link("etc/ld.so.cache", case.canary().join("ld.so.cache"));
    case.link(
        "usr/lib/x86_64-linux-gnu/libcuda.so.1",
        case.canary().join("passwd"),
    );
    case.link(
        "usr/lib/x86_64-linux-gnu/libnvidia-ml.so",
        case.canary().join("passwd"),
    );
    let (out, added) = case.run_seeing_mounts(&sim);
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
    assert_eq!(
        fs::read_link(lib.join("libnvidia-ml.so")).unwrap(),
        Path::new("libnvidia-ml.so.1")
    );
    // No bind mount of a driver file: the runtime owns those.
    let rootfs = fs::canonicalize(case.rootfs()).unwrap();
    let proc = format!("{}/proc/driver/nvidia", rootfs.display());
    let (masks, others): (Vec<&String>, Vec<&String>) =
        added.iter().partition(|m| m.starts_with(&proc));
    assert!(others.is_empty(), "cdi-hook mounted {others:#?}");
    let bus = sim.facts.gpus[0].bus.as_str().to_lowercase();
    let gpus: Vec<&&String> = masks.iter().filter(|m| m.contains("/gpus/")).collect();
    assert_eq!(gpus.len(), 1, "one GPU shown in the mask: {masks:#?}");
    assert!(gpus[0].contains(&bus), "GPU 0 ({bus}) shown: {masks:#?}");
}

/// A spec made for another driver: its mounts name files of that driver,
/// so the hook refuses in one line naming both versions, and changes nothing.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn cdi_hook_refuses_a_spec_made_for_another_driver() {
    let (sim, _serial) = sim();
    let mut case = Case::cdi(&sim);
    case.args[3] = "470.256.02".into();
    let before = snapshot(&case.rootfs());
    let out = case.run(&sim);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("generated for driver 470.256.02")
            && err.contains("runs driver 535.261.03")
            && err.contains("cdi generate"),
        "{err}"
    );
    assert_eq!(snapshot(&case.rootfs()), before, "the image changed");
}

/// A spec made before the host's MIG layout changed: its MIG devices name
/// instances that are gone or are others now, so the hook its runtime runs
/// at container start refuses it in one line naming both layouts and the
/// command that regenerates it, and changes nothing. The hook's arguments
/// are the generated spec's own.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn cdi_hook_refuses_a_spec_made_on_another_mig_layout() {
    let _serial = sim().1;
    let sim = SimHost::fresh("mig-layout", Fixture::synthetic(2).mig());
    let spec: serde_yaml::Value =
        serde_yaml::from_str(&sim.stdout(&["cdi", "generate", "--output", "-"])).unwrap();
    let mut args: Vec<String> = spec["containerEdits"]["hooks"][0]["args"]
        .as_sequence()
        .expect("the spec's hook")
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    // Its program name, and its --config (Case::run gives the fixture's).
    args.remove(0);
    let at = args.iter().position(|a| a == "--config").expect("--config");
    args.drain(at..at + 2);
    let layout = args[args
        .iter()
        .position(|a| a == "--mig-layout")
        .expect("recorded")
        + 1]
    .clone();
    // The MIG devices' instances, in GPU then id order, leaving out `gone`.
    let layout_of = |gone: Option<(u32, u32)>| {
        let mut ids: Vec<(u32, u32, u32)> = sim
            .facts
            .mig
            .iter()
            .filter(|m| Some((m.gpu, m.gi)) != gone)
            .map(|m| (m.gpu, m.gi, m.ci))
            .collect();
        ids.sort_unstable();
        let words: Vec<String> = ids.iter().map(|(g, i, c)| format!("{g}:{i}:{c}")).collect();
        words.join(",")
    };
    assert_eq!(layout, layout_of(None), "{:?}", sim.facts.mig);
    let case = || {
        let mut case = Case::cdi(&sim);
        case.args = args.clone();
        case
    };
    let out = case().run(&sim);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // GPU 0's second GPU instance is destroyed: the driver removes its directory.
    let gi = sim
        .facts
        .mig
        .iter()
        .find(|m| m.gpu == 0 && m.gi == 2)
        .expect("GPU 0's GPU instance 2");
    fs::remove_dir_all(Path::new(&gi.gi_access_path).parent().unwrap()).unwrap();
    let case = case();
    let before = snapshot(&case.rootfs());
    let out = case.run(&sim);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("generated for MIG layout {layout}"))
            && err.contains(&format!(
                "MIG layout is now {}",
                layout_of(Some((0, gi.gi)))
            ))
            && err.contains("oci-nvidia-hook cdi generate"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert_eq!(snapshot(&case.rootfs()), before, "the image changed");
}

/// Only createRuntime: at createContainer the hook would run inside the
/// container with its environment (CVE-2025-23266), so any other stage
/// named in the spec is refused before anything is read.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn cdi_hook_refuses_any_stage_but_create_runtime() {
    let (sim, _serial) = sim();
    for stage in ["createContainer", "prestart", "startContainer", "poststart"] {
        let mut case = Case::cdi(&sim);
        case.args[1] = stage.into();
        let before = snapshot(&case.rootfs());
        let out = case.run(&sim);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stage}: {err}");
        assert!(
            err.contains(&format!("CDI hook at stage \"{stage}\""))
                && err.contains("only at createRuntime"),
            "{stage}: {err}"
        );
        assert_eq!(
            snapshot(&case.rootfs()),
            before,
            "{stage}: the image changed"
        );
    }
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
    let host_lib = sim.facts.libraries["libcuda.so.1"].as_str();
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
    race(&sim, Case::new(), 40);
}

/// Runs `case` `runs` times while a thread swaps its library directory for
/// a link to the canary and back; [`Case::run`] checks each.
fn race(sim: &SimHost, case: Case, runs: u32) {
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
    for _ in 0..runs {
        let out = case.run(sim);
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

/// An image with a fifo at `/etc/fifo`.
fn fifo_at_etc(case: &Case) {
    fs::create_dir_all(case.rootfs().join("etc")).unwrap();
    nix::unistd::mkfifo(
        &case.rootfs().join("etc/fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
}

/// A case for `nvidia-cdi-hook ARGS` (the state on stdin), the image
/// changed by `prepare` first.
fn cdi_hook_case(args: &[&str], prepare: impl Fn(&Case)) -> Case {
    let mut case = Case::new();
    case.args = std::iter::once("nvidia-cdi-hook")
        .chain(args.iter().copied())
        .map(String::from)
        .collect();
    case.mounts = false;
    prepare(&case);
    case
}

/// Every `nvidia-cdi-hook` subcommand against an image whose paths point
/// out of the rootfs, or hold a fifo or a directory where a file or link
/// goes: each either finds nothing inside the rootfs (and does nothing) or
/// refuses in one line naming the path; nothing outside changes (Case::run).
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn nvidia_cdi_hook_subcommands_stay_inside_the_rootfs() {
    let (sim, _serial) = sim();
    let lib = "usr/lib/x86_64-linux-gnu";
    let gpu_node = |case: &Case| {
        let dev = case.rootfs().join("dev");
        fs::create_dir_all(&dev).unwrap();
        nix::sys::stat::mknod(
            &dev.join("nvidia0"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(195, 0),
        )
        .unwrap();
    };
    // (what, arguments, image, refused naming this path or done)
    type Prepare = Box<dyn Fn(&Case)>;
    let cases: Vec<(&str, Vec<&str>, Prepare, Option<&str>)> = vec![
        (
            "update-ldcache, the folder linked out",
            vec!["update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"],
            Box::new(move |c: &Case| c.link(lib, c.canary())),
            None,
        ),
        (
            "create-symlinks, the link's directory linked out",
            vec![
                "create-symlinks",
                "--link",
                "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
            ],
            Box::new(move |c: &Case| c.link(lib, c.canary())),
            Some("/usr/lib/x86_64-linux-gnu"),
        ),
        (
            "create-symlinks, a fifo at the link",
            vec!["create-symlinks", "--link", "x::/etc/fifo"],
            Box::new(fifo_at_etc),
            Some("/etc/fifo"),
        ),
        (
            "chmod, a path linked to a host file",
            vec!["chmod", "--mode", "777", "--path", "/etc/passwd"],
            Box::new(|c: &Case| c.link("etc/passwd", c.canary().join("passwd"))),
            None,
        ),
        (
            "chmod, a fifo",
            vec!["chmod", "--mode", "777", "--path", "/etc/fifo"],
            Box::new(fifo_at_etc),
            Some("/etc/fifo"),
        ),
        (
            "update-application-profile, /etc linked out",
            vec!["update-application-profile"],
            Box::new(move |c: &Case| {
                gpu_node(c);
                c.link("etc", c.canary());
            }),
            Some("/etc"),
        ),
        (
            "update-application-profile, a directory at the profile",
            vec!["update-application-profile"],
            Box::new(move |c: &Case| {
                gpu_node(c);
                fs::create_dir_all(
                    c.rootfs()
                        .join("etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf"),
                )
                .unwrap();
            }),
            Some("10-container.conf"),
        ),
        (
            "enable-cuda-compat, the compat directory linked out",
            vec!["enable-cuda-compat", "--host-driver-version", "470.1"],
            Box::new(|c: &Case| c.link("usr/local/cuda/compat", c.canary())),
            None,
        ),
        (
            "disable-device-node-modification, /proc/driver linked out",
            vec!["disable-device-node-modification"],
            Box::new(|c: &Case| c.link("proc/driver", c.canary())),
            None,
        ),
    ];
    for (what, args, prepare, refused) in cases {
        let case = cdi_hook_case(&args, prepare);
        let out = case.run(&sim);
        let err = String::from_utf8_lossy(&out.stderr);
        match refused {
            Some(path) => assert!(
                !out.status.success() && err.contains(path),
                "{what}: must be refused naming {path}: {err}"
            ),
            None => assert!(out.status.success(), "{what}: {err}"),
        }
    }
}

/// A hostile image for one `nvidia-cdi-hook` subcommand run by a runtime:
/// what it is, the hook's arguments, how the image is changed (given its
/// rootfs and the canary directory outside it), and the path its refusal
/// must name (`None`: it may succeed, or refuse in one line of ours).
struct RuntimeCase {
    what: &'static str,
    args: &'static [&'static str],
    prepare: fn(&Path, &Path),
    refused: Option<&'static str>,
}

/// The image's library directory, as NVIDIA's specs name it.
const IMAGE_LIB: &str = "usr/lib/x86_64-linux-gnu";

/// Replaces `rel` in `rootfs` by a symlink to `target`.
fn plant_link(rootfs: &Path, rel: &str, target: &Path) {
    let path = rootfs.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let _ = fs::remove_dir_all(&path);
    let _ = fs::remove_file(&path);
    symlink(target, &path).unwrap();
}

/// A relative link at `rel` climbing out of the rootfs to `target`.
fn plant_climbing_link(rootfs: &Path, rel: &str, target: &Path) {
    let up = "../".repeat(rel.matches('/').count() + 12);
    plant_link(
        rootfs,
        rel,
        &PathBuf::from(format!("{up}{}", target.display())),
    );
}

/// A fifo at `rel` in `rootfs`.
fn plant_fifo(rootfs: &Path, rel: &str) {
    let path = rootfs.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let _ = fs::remove_file(&path);
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
}

/// A character device (1:3, as /dev/null) at `rel` in `rootfs`.
fn plant_device(rootfs: &Path, rel: &str) {
    let path = rootfs.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let _ = fs::remove_file(&path);
    nix::sys::stat::mknod(
        &path,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 3),
    )
    .unwrap();
}

/// Every subcommand, against links out of the rootfs at each path it
/// touches, directories swapped for links, and fifos or devices at targets.
fn runtime_cases() -> Vec<RuntimeCase> {
    let update = &["update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"];
    let soname = &[
        "create-soname-symlinks",
        "--folder",
        "/usr/lib/x86_64-linux-gnu",
    ];
    let link = &[
        "create-symlinks",
        "--link",
        "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
    ];
    let compat = &["enable-cuda-compat", "--host-driver-version", "470.1"];
    let chmod = &["chmod", "--mode", "777", "--path", "/etc/passwd"];
    let profile = &["update-application-profile"];
    vec![
        RuntimeCase {
            what: "update-ldcache, the folder linked out",
            args: update,
            prepare: |r, c| plant_link(r, IMAGE_LIB, c),
            refused: None,
        },
        RuntimeCase {
            what: "update-ldcache, the folder climbing out",
            args: update,
            prepare: |r, c| plant_climbing_link(r, IMAGE_LIB, c),
            refused: None,
        },
        RuntimeCase {
            what: "update-ldcache, /etc linked out",
            args: update,
            prepare: |r, c| plant_link(r, "etc", c),
            refused: None,
        },
        RuntimeCase {
            what: "update-ldcache, the cache linked to a host file",
            args: update,
            prepare: |r, c| plant_link(r, "etc/ld.so.cache", &c.join("ld.so.cache")),
            refused: None,
        },
        RuntimeCase {
            what: "update-ldcache, a fifo at the cache",
            args: update,
            prepare: |r, _| plant_fifo(r, "etc/ld.so.cache"),
            refused: None,
        },
        RuntimeCase {
            what: "create-soname-symlinks, the folder linked out",
            args: soname,
            prepare: |r, c| plant_link(r, IMAGE_LIB, c),
            refused: None,
        },
        RuntimeCase {
            what: "create-soname-symlinks, a library's SONAME link swapped for a host link",
            args: soname,
            prepare: |r, c| {
                fs::write(r.join(IMAGE_LIB).join("libfoo.so.1.0"), b"not elf").unwrap();
                plant_link(r, &format!("{IMAGE_LIB}/libfoo.so.1"), &c.join("passwd"));
            },
            refused: None,
        },
        RuntimeCase {
            what: "create-symlinks, the link's directory linked out",
            args: link,
            prepare: |r, c| plant_link(r, IMAGE_LIB, c),
            refused: Some("/usr/lib/x86_64-linux-gnu"),
        },
        RuntimeCase {
            what: "create-symlinks, the link's directory swapped for a link inside",
            args: link,
            prepare: |r, c| {
                plant_link(r, "usr/lib/elsewhere", c);
                plant_link(r, IMAGE_LIB, Path::new("elsewhere"));
            },
            refused: Some("/usr/lib/x86_64-linux-gnu"),
        },
        RuntimeCase {
            what: "create-symlinks, a fifo at the link",
            args: &["create-symlinks", "--link", "x::/etc/fifo"],
            prepare: |r, _| plant_fifo(r, "etc/fifo"),
            refused: Some("/etc/fifo"),
        },
        RuntimeCase {
            what: "create-symlinks, a device at the link",
            args: &["create-symlinks", "--link", "x::/etc/dev0"],
            prepare: |r, _| plant_device(r, "etc/dev0"),
            refused: Some("/etc/dev0"),
        },
        RuntimeCase {
            what: "enable-cuda-compat, the compat directory linked out",
            args: compat,
            prepare: |r, c| plant_link(r, "usr/local/cuda/compat", c),
            refused: None,
        },
        RuntimeCase {
            what: "enable-cuda-compat, the compat directory climbing out",
            args: compat,
            prepare: |r, c| plant_climbing_link(r, "usr/local/cuda/compat", c),
            refused: None,
        },
        RuntimeCase {
            what: "enable-cuda-compat, /etc/ld.so.conf.d linked out",
            args: compat,
            prepare: |r, c| {
                fs::create_dir_all(r.join("usr/local/cuda/compat")).unwrap();
                fs::write(r.join("usr/local/cuda/compat/libcuda.so.999.1"), b"not elf").unwrap();
                plant_link(r, "etc/ld.so.conf.d", c);
            },
            refused: None,
        },
        RuntimeCase {
            what: "chmod, a path linked to a host file",
            args: chmod,
            prepare: |r, c| plant_link(r, "etc/passwd", &c.join("passwd")),
            refused: None,
        },
        RuntimeCase {
            what: "chmod, a path climbing out",
            args: chmod,
            prepare: |r, c| plant_climbing_link(r, "etc/passwd", &c.join("passwd")),
            refused: None,
        },
        RuntimeCase {
            what: "chmod, a fifo",
            args: &["chmod", "--mode", "777", "--path", "/etc/fifo"],
            prepare: |r, _| plant_fifo(r, "etc/fifo"),
            refused: Some("/etc/fifo"),
        },
        RuntimeCase {
            what: "chmod, /etc linked out",
            args: chmod,
            prepare: |r, c| plant_link(r, "etc", c),
            refused: None,
        },
        RuntimeCase {
            what: "disable-device-node-modification, /proc/driver/nvidia absent",
            args: &["disable-device-node-modification"],
            prepare: |r, c| plant_link(r, "etc", c),
            refused: None,
        },
        RuntimeCase {
            what: "update-application-profile, /etc linked out",
            args: profile,
            prepare: |r, c| plant_link(r, "etc", c),
            refused: None,
        },
        RuntimeCase {
            what: "update-application-profile, the profile directory linked out",
            args: profile,
            prepare: |r, c| plant_link(r, "etc/nvidia", c),
            refused: None,
        },
        RuntimeCase {
            what: "update-application-profile, a fifo at the profile",
            args: profile,
            prepare: |r, _| {
                plant_fifo(
                    r,
                    "etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf",
                )
            },
            refused: None,
        },
    ]
}

/// The subcommands as NVIDIA's specs run them (a `createContainer` hook
/// without `env`), through runc and crun, each against the hostile images
/// of [`runtime_cases`]: nothing outside the rootfs changes (the canary,
/// the simulated driver, the host's mounts), and each either succeeds or
/// fails in one line of ours (naming the path where the case says; crun
/// does not pass a hook's stderr on, so there only the failure shows).
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn nvidia_cdi_hook_subcommands_stay_inside_the_rootfs_through_runc_and_crun() {
    use harness::runtime::bundle::{work_root, Bundle, Scenario};
    use harness::runtime::oci_config::path_str;
    use harness::runtime::runtimes::Runtime;

    let (sim, _serial) = sim();
    let _runtimes = harness::runtime::run::serial();
    let canary = work_root().join("hostile-canary");
    let _ = fs::remove_dir_all(&canary);
    fs::create_dir_all(canary.join("nvidia")).unwrap();
    fs::write(canary.join("passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    fs::write(canary.join("ld.so.cache"), "host cache\n").unwrap();
    fs::write(canary.join("libcuda.so.999.1"), "a host file\n").unwrap();
    let mut seen = Vec::new();
    for runtime in [Runtime::RuncV1, Runtime::CrunV1] {
        runtime.require_tools();
        for (n, case) in runtime_cases().into_iter().enumerate() {
            let name = format!("hostile-{}-{n}", runtime.name().to_lowercase());
            let canary_at = canary.clone();
            let prepare = move |root: &Path| (case.prepare)(root, &canary_at);
            let scenario = Scenario::hooks_only(&name, runtime, &sim, &prepare);
            let bundle = Bundle::exiting(&scenario);
            let mut args = vec!["nvidia-cdi-hook"];
            args.extend(case.args);
            let hooks = serde_json::json!({"createContainer": [
                {"path": path_str(harness::project::hook_binary()), "args": args}
            ]});
            let canary_before = snapshot(&canary);
            let driver_before = snapshot(&sim.dir);
            let mounts_before = host_mounts();
            let id = format!("onh-{name}-{}", std::process::id());
            let (ok, stderr) = bundle.run_with_hooks(&scenario, &id, hooks, |_| {});
            let what = format!("{} ({}): {stderr}", case.what, runtime.name());
            assert_eq!(
                snapshot(&canary),
                canary_before,
                "the canary changed: {what}"
            );
            assert_eq!(
                snapshot(&sim.dir),
                driver_before,
                "the driver changed: {what}"
            );
            assert_mounts_unchanged(&mounts_before, &what);
            // runc passes a failing hook's stderr on; crun only says that
            // the hook failed.
            let ours = |path: &str| match runtime {
                Runtime::CrunV1 => stderr.contains("error executing hook"),
                _ => stderr.contains("oci-nvidia-hook[") && stderr.contains(path),
            };
            match case.refused {
                Some(path) => assert!(!ok && ours(path), "must be refused naming {path}: {what}"),
                None => assert!(
                    ok || ours(""),
                    "neither done nor refused in a line of ours: {what}"
                ),
            }
            seen.push(format!(
                "{} {}: {}",
                runtime.name(),
                case.what,
                if ok { "done" } else { "refused" }
            ));
        }
    }
    eprintln!("{}", seen.join("\n"));
    let _ = fs::remove_dir_all(&canary);
}

/// Old kernels, played by a seccomp filter that fails the newer system
/// calls with `ENOSYS` (harness::old_kernel): no `openat2` (paths resolve
/// by `pathrs`'s emulation), no `statx` (no mount-root attribute), no new
/// mount API (binds by path), no pidfds (the container's init held by its
/// start time), and all of them at once. On each, a GPU container is still
/// injected inside the rootfs, directories linked out are refused, image
/// links to host files are replaced, never followed, `nvidia-cdi-hook`'s
/// path works, a racing rootfs lets nothing escape, and a mount target
/// that already is the host file's inode still gets the read-only mount:
/// where the kernel cannot say it is mounted, it is mounted again.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn old_kernels_keep_every_protection() {
    let (sim, _serial) = sim();
    for kernel in OLD_KERNELS {
        let name = kernel.name;
        let (out, added) = Case::new().on(kernel).run_seeing_mounts(&sim);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {err}");
        assert!(
            added
                .iter()
                .any(|m| m.contains("/usr/lib/x86_64-linux-gnu/libcuda.so.")),
            "{name}: libcuda is not mounted: {added:#?}"
        );
        for rel in ["usr/lib/x86_64-linux-gnu", "etc", "dev"] {
            assert_linked_out_dir_refused(&sim, rel, || Case::new().on(kernel));
        }
        assert_host_links_replaced(&sim, Case::new().on(kernel));
        let out = Case::cdi(&sim).on(kernel).run(&sim);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{name}: nvidia-cdi-hook's path: {err}"
        );
        race(&sim, Case::new().on(kernel), 8);
        assert_host_inode_at_target_is_mounted_over(&sim, Case::new().on(kernel));
    }
}

/// The image holds, at libcuda's mount target, a hard link to the host's
/// own libcuda (the same inode, writable through the link): the hook must
/// still mount the host file read-only over it, whether or not the kernel
/// tells a mount root from a plain inode.
fn assert_host_inode_at_target_is_mounted_over(sim: &SimHost, case: Case) {
    let host_lib = find_file(&sim.dir, "libcuda.so.535.261.03")
        .unwrap_or_else(|| panic!("no libcuda.so.535.261.03 under {}", sim.dir.display()));
    let lib_dir = case.rootfs().join("usr/lib/x86_64-linux-gnu");
    fs::create_dir_all(&lib_dir).unwrap();
    let target = lib_dir.join("libcuda.so.535.261.03");
    fs::hard_link(&host_lib, &target).unwrap_or_else(|e| {
        panic!(
            "hard-link {} to {}: the test needs both on one filesystem: {e}",
            host_lib.display(),
            target.display()
        )
    });
    let (out, added) = case.run_seeing_mounts(sim);
    let _ = fs::remove_file(&target);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let rootfs = fs::canonicalize(case.rootfs()).unwrap();
    let point = format!(
        "{}/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03 ",
        rootfs.display()
    );
    assert!(
        added.iter().any(|m| m.starts_with(&point)),
        "the host's inode at the target was taken as mounted: {added:#?}"
    );
}

/// The first regular file named `name` below `dir`.
fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = fs::symlink_metadata(&path).ok()?;
        if meta.is_dir() {
            for entry in fs::read_dir(&path).ok()? {
                stack.push(entry.ok()?.path());
            }
        } else if meta.is_file() && path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
    }
    None
}

/// An image loader cache far under any size cap whose entries all point at
/// one long string: it describes far more text than it holds.
fn amplifying_cache(entries: usize, string_len: usize) -> Vec<u8> {
    const HEADER: usize = 48;
    const ENTRY: usize = 24;
    let mut data = b"glibc-ld.so.cache1.1".to_vec();
    data.resize(HEADER, 0);
    data[20..24].copy_from_slice(&(entries as u32).to_le_bytes());
    data[28] = 2; // little-endian
    let strings = (HEADER + entries * ENTRY) as u32;
    for _ in 0..entries {
        let mut entry = [0u8; ENTRY];
        entry[..4].copy_from_slice(&0x0303i32.to_le_bytes()); // libc6, x86-64
        entry[4..8].copy_from_slice(&strings.to_le_bytes());
        entry[8..12].copy_from_slice(&strings.to_le_bytes());
        data.extend_from_slice(&entry);
    }
    data.extend(std::iter::repeat_n(b'a', string_len));
    data.push(0);
    data
}

/// `count` empty files named by `name` in the rootfs directory `rel`.
fn fill(case: &Case, rel: &str, count: usize, name: impl Fn(usize) -> String) {
    let dir = case.rootfs().join(rel);
    fs::create_dir_all(&dir).unwrap();
    for n in 0..count {
        fs::write(dir.join(name(n)), b"").unwrap();
    }
}

/// Inputs built to amplify what the hook reads of the image, through the
/// prestart hook and `nvidia-cdi-hook`: a loader cache whose entries share
/// one long string, a compat directory and a library folder of more
/// entries than the listing bound, a folder of more would-be libraries
/// than one scan reads. Each is refused in one line naming the file and
/// the bound, with nothing changed outside the rootfs (Case::run).
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn inputs_built_to_amplify_are_refused_at_their_bound() {
    let (sim, _serial) = sim();
    let case = Case::new();
    fs::create_dir_all(case.rootfs().join("etc")).unwrap();
    fs::write(
        case.rootfs().join("etc/ld.so.cache"),
        amplifying_cache(1000, 4096),
    )
    .unwrap();
    let out = case.run(&sim);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the amplifying cache was taken: {err}"
    );
    assert!(
        err.contains("ld.so.cache") && err.contains("4194304"),
        "the refusal names the cache and the bound: {err}"
    );

    let many = 40_000;
    let case = Case::new();
    fill(&case, "usr/local/cuda/compat", many, |n| {
        format!("libcuda.so.{n}.{}", "9".repeat(40))
    });
    let out = case.run(&sim);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the compat listing was read whole: {err}"
    );
    assert!(
        err.contains("/usr/local/cuda/compat") && err.contains("more than"),
        "{err}"
    );

    let folder = "usr/lib/x86_64-linux-gnu";
    let update = ["update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"];
    let case = cdi_hook_case(&update, |case| {
        fill(case, folder, many, |n| {
            format!("lib{n}.so.{}", "1".repeat(20))
        })
    });
    let out = case.run(&sim);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the folder listing was read whole: {err}"
    );
    assert!(
        err.contains("/usr/lib/x86_64-linux-gnu") && err.contains("32768 entries"),
        "{err}"
    );

    let case = cdi_hook_case(&update, |case| {
        fill(case, folder, 9000, |n| format!("lib{n}.so.1"))
    });
    let out = case.run(&sim);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "every file was read as a library: {err}"
    );
    assert!(err.contains("8192 shared objects"), "{err}");
}

//! A failed injection leaves the rootfs as it was: each privileged call is
//! refused in turn (of the fake, and, as root, of the real syscalls in a
//! private mount namespace), and the image refuses steps halfway; the tree
//! (paths, types, link targets, content hashes) and the mount table are
//! compared before and after.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::hash::{Hash, Hasher};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::stat::Mode;

use super::{FakeSys, World};
use crate::apply::inject::{Error, LinuxSys, NodeMade, Place, Result, Source, Sys, CONF_NAME};
use crate::planning::plan::MountOptions;
use crate::sys::process::Hold;

/// What the wrapper's refusal says, to tell it from other errors.
const INJECTED: &str = "injected fault";

/// Makes `inner`'s privileged calls, but refuses the one numbered
/// `fail_at` (from 0) of those that change the container: mknod,
/// clone_in_host, bind_mount, mount_tmpfs, remount_read_only. Or, with a
/// `stall`, makes that one only after sleeping that long (a hung mount).
struct Faulty<S> {
    inner: S,
    fail_at: usize,
    stall: Option<Duration>,
    calls: Cell<usize>,
}

impl<S: Sys> Faulty<S> {
    fn new(inner: S, fail_at: usize) -> Faulty<S> {
        Faulty {
            inner,
            fail_at,
            stall: None,
            calls: Cell::new(0),
        }
    }

    /// Counts a call; the `fail_at`-th is refused, or stalled.
    fn call(&self, what: &'static str, path: &Path) -> Result<()> {
        let n = self.calls.get();
        self.calls.set(n + 1);
        if n == self.fail_at {
            if let Some(stall) = self.stall {
                std::thread::sleep(stall);
                return Ok(());
            }
            return Err(Error::Mount {
                target: path.to_path_buf(),
                what,
                source: io::Error::other(INJECTED),
            });
        }
        Ok(())
    }
}

impl<S: Sys> Sys for Faulty<S> {
    fn enter_mount_namespace(&self, proc: &Path, pid: u32, hold: Hold<'_>) -> Result<()> {
        self.inner.enter_mount_namespace(proc, pid, hold)
    }
    fn mknod(&self, place: Place<'_>, mode: u32, major: u32, minor: u32) -> Result<NodeMade> {
        self.call("mknod", place.path)?;
        self.inner.mknod(place, mode, major, minor)
    }
    fn clone_mount(
        &self,
        path: &Path,
        source: BorrowedFd<'_>,
        options: MountOptions,
    ) -> Result<Option<OwnedFd>> {
        self.inner.clone_mount(path, source, options)
    }
    fn clone_in_host(&self, sources: &mut [(String, Source)], options: MountOptions) -> Result<()> {
        self.call("clone in the host", Path::new("/proc/driver/nvidia/gpus"))?;
        self.inner.clone_in_host(sources, options)
    }
    fn bind_mount(
        &self,
        source: &Source,
        target: BorrowedFd<'_>,
        place: Place<'_>,
        options: MountOptions,
    ) -> Result<()> {
        self.call("bind", place.path)?;
        self.inner.bind_mount(source, target, place, options)
    }
    fn mount_tmpfs(&self, dir: BorrowedFd<'_>, path: &Path) -> Result<()> {
        self.call("tmpfs", path)?;
        self.inner.mount_tmpfs(dir, path)
    }
    fn remount_read_only(&self, dir: BorrowedFd<'_>, path: &Path) -> Result<()> {
        self.call("read-only remount", path)?;
        self.inner.remount_read_only(dir, path)
    }
    fn unmount(&self, mounted: BorrowedFd<'_>, path: &Path) -> Result<()> {
        self.inner.unmount(mounted, path)
    }
}

/// Every entry below `root`, by path: its type and permissions, a link's
/// target, a file's content hash, a node's numbers. Not times: undoing
/// touches the directories.
pub(super) fn tree(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = fs::symlink_metadata(&path).unwrap();
        let kind = meta.file_type();
        let what = if kind.is_symlink() {
            format!("link -> {}", fs::read_link(&path).unwrap().display())
        } else if kind.is_file() {
            let mut hash = std::hash::DefaultHasher::new();
            fs::read(&path).unwrap().hash(&mut hash);
            format!("file {:o} {:x}", meta.mode() & 0o7777, hash.finish())
        } else if kind.is_dir() {
            for entry in fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
            format!("dir {:o}", meta.mode() & 0o7777)
        } else if kind.is_char_device() {
            format!("char {}:{}", meta.rdev() >> 8, meta.rdev() & 0xff)
        } else {
            format!("other {:o}", meta.mode())
        };
        out.insert(path.strip_prefix(root).unwrap().to_path_buf(), what);
    }
    out
}

/// Gives the image entries of its own where injection goes: a symlink at a
/// mount target, a link and a file where SONAME links go, a stale conf file
/// of ours, and the driver's procfs directory (so that it is masked).
fn in_the_way(root: &Path) {
    let lib = root.join("usr/lib/x86_64-linux-gnu");
    fs::create_dir_all(&lib).unwrap();
    fs::create_dir_all(root.join("usr/bin")).unwrap();
    symlink("/bin/busybox", root.join("usr/bin/nvidia-smi")).unwrap();
    symlink("libcuda.so.470.256.02", lib.join("libcuda.so.1")).unwrap();
    fs::write(lib.join("libcuda.so"), b"the image's own").unwrap();
    fs::create_dir_all(root.join("etc/ld.so.conf.d")).unwrap();
    fs::write(
        root.join("etc/ld.so.conf.d").join(CONF_NAME),
        "/elsewhere\n",
    )
    .unwrap();
    fs::create_dir_all(root.join("proc/driver/nvidia")).unwrap();
}

/// Entries with our hidden names: staged files or image entries put aside.
fn hidden(root: &Path) -> Vec<PathBuf> {
    tree(root)
        .into_keys()
        .filter(|p| p.to_string_lossy().contains(".oci-nvidia-hook."))
        .collect()
}

/// The fake's mounts, the latest first: the order undoing must detach them in.
fn mounted_latest_first(sys: &FakeSys) -> Vec<PathBuf> {
    sys.mounted.borrow().iter().rev().cloned().collect()
}

#[test]
fn a_refused_privileged_call_at_any_step_leaves_the_rootfs_as_it_was() {
    type Shape = fn(&Path);
    let shapes: [(&str, Shape); 2] = [
        ("a fresh image", |root| {
            fs::create_dir_all(root.join("proc/driver/nvidia")).unwrap()
        }),
        ("an image with entries in the way", in_the_way),
    ];
    for (shape, make) in shapes {
        let mut fail_at = 0;
        loop {
            let world = World::new();
            make(&world.rootfs());
            let before = tree(&world.rootfs());
            let sys = Faulty::new(FakeSys::default(), fail_at);
            let err = match world.apply(&sys) {
                Err(err) => err,
                Ok(_) => {
                    assert_eq!(hidden(&world.rootfs()), [] as [PathBuf; 0], "{shape}");
                    assert!(sys.inner.unmounts.borrow().is_empty());
                    break;
                }
            };
            let step = format!("{shape}, call {fail_at} refused ({err})");
            assert!(matches!(err, Error::Mount { .. }), "undone: {step}");
            assert!(err.to_string().contains(INJECTED), "{step}");
            assert_eq!(tree(&world.rootfs()), before, "{step}");
            assert_eq!(
                *sys.inner.unmounts.borrow(),
                mounted_latest_first(&sys.inner),
                "{step}: every mount detached, the latest first"
            );
            fail_at += 1;
        }
        // mknod, two binds, the host clones, the tmpfs, a GPU's bind, the
        // read-only remount: each was refused once.
        assert_eq!(fail_at, 7, "{shape}");
    }
}

#[test]
fn a_refusal_of_the_image_halfway_leaves_the_rootfs_as_it_was() {
    type Shape = fn(&Path);
    let cases: [(&str, Shape, &str); 3] = [
        (
            "a fifo at the second mount target",
            |root| {
                let target = root.join("usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03");
                nix::unistd::mkfifo(&target, Mode::from_bits_truncate(0o644)).unwrap();
            },
            "fifo",
        ),
        (
            "a directory where the second SONAME link goes",
            |root| {
                let link = root.join("usr/lib/x86_64-linux-gnu/libcuda.so");
                fs::remove_file(&link).unwrap();
                fs::create_dir(&link).unwrap();
            },
            "libcuda.so in",
        ),
        (
            "a file where ld.so.conf.d goes, found last",
            |root| {
                fs::remove_dir_all(root.join("etc/ld.so.conf.d")).unwrap();
                fs::write(root.join("etc/ld.so.conf.d"), "").unwrap();
            },
            "/etc/ld.so.conf.d",
        ),
    ];
    for (case, make, named) in cases {
        let world = World::new();
        in_the_way(&world.rootfs());
        make(&world.rootfs());
        let before = tree(&world.rootfs());
        let sys = FakeSys::default();
        let err = world.apply(&sys).unwrap_err();
        assert!(err.to_string().contains(named), "{case}: {err}");
        assert_eq!(tree(&world.rootfs()), before, "{case}: {err}");
        assert!(!sys.mounted.borrow().is_empty(), "{case}: failed halfway");
        assert_eq!(*sys.unmounts.borrow(), mounted_latest_first(&sys), "{case}");
    }
}

#[test]
fn without_rename_exchange_an_image_entry_is_still_kept_until_the_end() {
    use std::rc::Rc;

    use super::journal::{Change, Journal};
    use super::slot::Slot;
    use super::staged::Staged;

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("libcuda.so.1");
    let slot = || Slot {
        dir: Rc::new(OwnedFd::from(File::open(dir.path()).unwrap())),
        name: "libcuda.so.1".into(),
        path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1".into(),
    };
    let ours = Path::new("libcuda.so.535.261.03");
    for succeeds in [false, true] {
        fs::write(&file, "the image's own").unwrap();
        let before = tree(dir.path());
        let staged = Staged::symlink(slot(), ours).unwrap();
        let aside = staged
            .put_by_link()
            .unwrap()
            .expect("the image's file kept");
        assert_eq!(fs::read_link(&file).unwrap(), ours);
        assert_eq!(
            fs::read(dir.path().join(&aside)).unwrap(),
            b"the image's own"
        );
        let mut journal = Journal::default();
        journal.record(Change::Replaced {
            slot: slot(),
            aside,
            ours_is_dir: false,
        });
        if succeeds {
            journal.finish();
            assert_eq!(fs::read_link(&file).unwrap(), ours);
            assert_eq!(hidden(dir.path()), [] as [PathBuf; 0]);
        } else {
            let root = pathrs::Root::open(dir.path()).unwrap();
            assert!(journal.undo(&FakeSys::default(), &root).is_empty());
            assert_eq!(tree(dir.path()), before);
        }
        let _ = fs::remove_file(&file);
    }
}

#[test]
fn the_last_change_replaces_the_image_file_outright_and_cannot_be_undone() {
    use std::rc::Rc;

    use super::journal::Journal;
    use super::slot::Slot;
    use super::staged::Staged;

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ld.so.cache");
    fs::write(&file, "the image's own").unwrap();
    let slot = Slot {
        dir: Rc::new(OwnedFd::from(File::open(dir.path()).unwrap())),
        name: "ld.so.cache".into(),
        path: "/etc/ld.so.cache".into(),
    };
    let mut journal = Journal::default();
    Staged::file(slot, b"ours")
        .unwrap()
        .install_last(&mut journal)
        .unwrap();
    assert_eq!(fs::read(&file).unwrap(), b"ours");
    assert_eq!(hidden(dir.path()), [] as [PathBuf; 0], "nothing kept aside");
    let root = pathrs::Root::open(dir.path()).unwrap();
    let failed = journal.undo(&FakeSys::default(), &root);
    assert!(
        matches!(&failed[..], [Error::Overwritten { path }] if path == Path::new("/etc/ld.so.cache")),
        "{failed:?}"
    );
    assert_eq!(fs::read(&file).unwrap(), b"ours");
}

/// `chattr +i` on a path for as long as it lives.
struct Immutable(PathBuf);

impl Immutable {
    fn set(path: &Path) -> Immutable {
        chattr("+i", path);
        Immutable(path.to_path_buf())
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        chattr("-i", &self.0);
    }
}

fn chattr(flag: &str, path: &Path) {
    let status = std::process::Command::new("chattr")
        .arg(flag)
        .arg(path)
        .status()
        .expect("chattr (e2fsprogs) is needed");
    assert!(status.success(), "chattr {flag} {}", path.display());
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn an_image_entry_that_refuses_a_change_halfway_leaves_the_rootfs_as_it_was() {
    let cases = [
        ("the image's cache, swapped in last", "etc/ld.so.cache"),
        ("the library directory", "usr/lib/x86_64-linux-gnu"),
    ];
    for (case, immutable) in cases {
        let world = World::new();
        let root = world.rootfs();
        in_the_way(&root);
        // Already there: the mount target is reused, the first link refused.
        fs::write(
            root.join("usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03"),
            "",
        )
        .unwrap();
        let before = tree(&root);
        let sys = FakeSys::default();
        let err = {
            let _immutable = Immutable::set(&root.join(immutable));
            world.apply(&sys).unwrap_err()
        };
        assert_eq!(
            io_source(&err).and_then(io::Error::raw_os_error),
            Some(nix::libc::EPERM),
            "{case}: {err}"
        );
        assert_eq!(tree(&root), before, "{case}: {err}");
        assert_eq!(*sys.unmounts.borrow(), mounted_latest_first(&sys), "{case}");
    }
}

/// The system error under an injection error.
fn io_source(err: &Error) -> Option<&io::Error> {
    std::error::Error::source(err)?.downcast_ref::<io::Error>()
}

/// The calling thread's mount table.
fn mountinfo() -> String {
    fs::read_to_string("/proc/thread-self/mountinfo").unwrap()
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_refused_mount_or_node_leaves_no_mount_and_no_file_behind() {
    // In a private mount namespace of this thread only, gone when it ends:
    // the last, successful, injection's mounts with it.
    let (world, refused) = std::thread::spawn(|| {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).unwrap();
        nix::mount::mount(
            None::<&str>,
            "/",
            None::<&str>,
            nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .unwrap();
        let mut fail_at = 0;
        loop {
            let world = World::new();
            in_the_way(&world.rootfs());
            let before = (tree(&world.rootfs()), mountinfo());
            let sys = Faulty::new(LinuxSys::default(), fail_at);
            match world.apply(&sys) {
                Ok(_) => return (world, fail_at),
                Err(err) => {
                    assert!(err.to_string().contains(INJECTED), "{err}");
                    let after = (tree(&world.rootfs()), mountinfo());
                    assert_eq!(after, before, "call {fail_at} refused ({err})");
                }
            }
            fail_at += 1;
        }
    })
    .join()
    .unwrap();
    assert_eq!(refused, 7, "every privileged call was refused once");
    let node = fs::symlink_metadata(world.rootfs().join("dev/nvidia0")).unwrap();
    assert!(node.file_type().is_char_device(), "the real mknod ran");
}

#[test]
fn a_change_that_cannot_be_undone_is_told_in_the_same_error() {
    let world = World::new();
    let lib = world.rootfs().join("usr/lib/x86_64-linux-gnu");
    fs::create_dir_all(lib.join("libcuda.so")).unwrap();
    let sys = FakeSys {
        unmount_fails: true,
        ..FakeSys::default()
    };
    let err = world.apply(&sys).unwrap_err();
    let Error::Undo { cause, count, .. } = &err else {
        panic!("{err}");
    };
    assert!(matches!(**cause, Error::Exists { .. }), "{err}");
    assert_eq!(*count, 2, "both binds stay: {err}");
    assert_eq!(err.to_string().lines().count(), 1, "{err}");
    assert!(
        err.to_string()
            .contains("libcuda.so in the container: it exists as a directory"),
        "the cause comes first: {err}"
    );
}

#[test]
fn a_deadline_that_runs_out_halfway_stops_and_undoes_the_injection() {
    let world = World::new();
    fs::create_dir_all(world.rootfs().join("proc/driver/nvidia")).unwrap();
    let before = tree(&world.rootfs());
    // The deadline is the process's own: armed in a child, so that no other
    // test's injection sees it. The third change stalls past the bound; the
    // alarm, held off during injection, only marks the time as run out.
    let outcome =
        crate::host::driver_child::query("a deadline halfway", Duration::from_secs(20), || {
            let mut sys = Faulty::new(FakeSys::default(), 2);
            sys.stall = Some(Duration::from_millis(300));
            crate::util::deadline::arm("prestart", Duration::from_millis(100), Instant::now());
            let result = world.apply(&sys);
            crate::util::deadline::disarm();
            let undone_latest_first =
                *sys.inner.unmounts.borrow() == mounted_latest_first(&sys.inner);
            Ok(match result {
                Err(Error::Deadline(expired)) => (expired.to_string(), undone_latest_first),
                Err(other) => (format!("another error: {other}"), false),
                Ok(_) => ("injected whole".to_string(), false),
            })
        })
        .unwrap();
    let (said, undone_latest_first) = outcome;
    assert!(said.contains("prestart"), "stopped by the deadline: {said}");
    assert!(
        undone_latest_first,
        "every mount detached, the latest first: {said}"
    );
    assert_eq!(tree(&world.rootfs()), before, "{said}");
}

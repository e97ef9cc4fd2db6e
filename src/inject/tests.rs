//! Injection against a real directory tree as rootfs, with the privileged
//! syscalls recorded by a fake: runs without root. What a failed injection
//! leaves behind is checked in `rollback`.

use std::cell::{Cell, RefCell};
use std::ffi::OsStr;
use std::fs::{self, File};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

use super::*;
use crate::ldcache::{Format, LdCache, LdCacheEntry, FLAG_ELF_LIBC6, FLAG_X8664_LIB64};
use crate::plan::{
    DeviceNode, LoaderEntry, Mount, MountOptions, NodeMode, ProcCopy, ProcFile, ProcMask, Symlink,
    WrittenFile,
};

const X86: i32 = FLAG_ELF_LIBC6 | FLAG_X8664_LIB64;

/// Records each privileged call by kind, with its arguments. Its `mknod`
/// leaves an empty file where the node goes, so that a node left behind
/// shows in the rootfs; with no tmpfs, what is written in one lands in the
/// directory it would cover, and its unmount takes that away, as the real
/// one would.
#[derive(Default)]
struct FakeSys {
    mknods: RefCell<Vec<(PathBuf, u32, u32, u32)>>,
    binds: RefCell<Vec<(PathBuf, MountOptions)>>,
    tmpfs: RefCell<Vec<PathBuf>>,
    read_only: RefCell<Vec<PathBuf>>,
    /// Every bind and tmpfs mount, in order.
    mounted: RefCell<Vec<PathBuf>>,
    /// Every unmount, in order.
    unmounts: RefCell<Vec<PathBuf>>,
    /// Calls of `clone_in_host`.
    host_clones: Cell<usize>,
    /// Refuse every unmount, as a mount made busy would.
    unmount_fails: bool,
}

impl Sys for FakeSys {
    fn enter_mount_namespace(
        &self,
        _proc: &Path,
        _pid: u32,
        _pidfd: Option<BorrowedFd<'_>>,
    ) -> Result<()> {
        Ok(())
    }
    fn mknod(&self, place: Place<'_>, mode: u32, major: u32, minor: u32) -> Result<NodeMade> {
        self.mknods
            .borrow_mut()
            .push((place.path.to_path_buf(), mode, major, minor));
        match openat(
            place.dir,
            place.name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        ) {
            Ok(_) => Ok(NodeMade::Created),
            Err(Errno::EEXIST) => Ok(NodeMade::Existed),
            Err(errno) => Err(Error::Mknod {
                path: place.path.to_path_buf(),
                major,
                minor,
                source: errno.into(),
            }),
        }
    }
    fn clone_mount(
        &self,
        _path: &Path,
        source: BorrowedFd<'_>,
        _options: MountOptions,
    ) -> Result<Option<OwnedFd>> {
        Ok(Some(source.try_clone_to_owned().unwrap()))
    }
    fn clone_in_host(&self, sources: &mut [(String, Source)], options: MountOptions) -> Result<()> {
        for (_, source) in sources {
            source.tree = self.clone_mount(&source.path, source.file.as_fd(), options)?;
        }
        self.host_clones.set(self.host_clones.get() + 1);
        Ok(())
    }
    fn bind_mount(
        &self,
        _source: &Source,
        _target: BorrowedFd<'_>,
        place: Place<'_>,
        options: MountOptions,
    ) -> Result<()> {
        self.binds
            .borrow_mut()
            .push((place.path.to_path_buf(), options));
        self.mounted.borrow_mut().push(place.path.to_path_buf());
        Ok(())
    }
    fn mount_tmpfs(&self, _dir: BorrowedFd<'_>, path: &Path) -> Result<()> {
        self.tmpfs.borrow_mut().push(path.to_path_buf());
        self.mounted.borrow_mut().push(path.to_path_buf());
        Ok(())
    }
    fn remount_read_only(&self, _dir: BorrowedFd<'_>, path: &Path) -> Result<()> {
        self.read_only.borrow_mut().push(path.to_path_buf());
        Ok(())
    }
    fn unmount(&self, mounted: BorrowedFd<'_>, path: &Path) -> Result<()> {
        if self.unmount_fails {
            return Err(Error::Mount {
                target: path.to_path_buf(),
                what: "detach",
                source: Errno::EBUSY.into(),
            });
        }
        self.unmounts.borrow_mut().push(path.to_path_buf());
        if self.tmpfs.borrow().iter().any(|t| t == path) {
            let dir = PathBuf::from(format!("/proc/self/fd/{}", mounted.as_raw_fd()));
            for entry in fs::read_dir(&dir).unwrap() {
                let entry = entry.unwrap().path();
                match entry.is_dir() {
                    true => fs::remove_dir_all(entry).unwrap(),
                    false => fs::remove_file(entry).unwrap(),
                }
            }
        }
        Ok(())
    }
}

/// A host directory with driver files, a Debian-like rootfs beside it, and a
/// plan joining them.
struct World {
    dir: tempfile::TempDir,
    plan: Plan,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("host");
        let rootfs = dir.path().join("rootfs");
        fs::create_dir_all(host.join("proc/gpus/0000:3b:00.0")).unwrap();
        fs::write(host.join("libcuda.so.535.261.03"), b"\x7fELF").unwrap();
        fs::write(host.join("nvidia-smi"), b"\x7fELF").unwrap();
        fs::write(
            host.join("proc/params"),
            b"ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\n",
        )
        .unwrap();
        fs::write(
            host.join("proc/version"),
            b"NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03\n",
        )
        .unwrap();
        fs::create_dir_all(rootfs.join("etc")).unwrap();
        fs::create_dir_all(rootfs.join("dev")).unwrap();
        fs::write(rootfs.join("etc/debian_version"), b"12.11\n").unwrap();
        let image_cache = LdCache {
            format: Format::New,
            entries: vec![LdCacheEntry {
                flags: X86,
                soname: "libc.so.6".into(),
                path: "/lib/x86_64-linux-gnu/libc.so.6".into(),
                hwcap: 0,
            }],
        };
        fs::write(rootfs.join("etc/ld.so.cache"), image_cache.to_bytes()).unwrap();
        let lib_dir = PathBuf::from("/usr/lib/x86_64-linux-gnu");
        let plan = Plan {
            selected: Vec::new(),
            node_mode: NodeMode::Mknod,
            devices: vec![DeviceNode {
                host_path: "/dev/null".into(),
                path: "/dev/nvidia0".into(),
                major: 195,
                minor: 0,
                mode: 0o666,
            }],
            mounts: vec![
                Mount {
                    kind: MountKind::Binary,
                    source: host.join("nvidia-smi"),
                    destination: "/usr/bin/nvidia-smi".into(),
                    options: MountKind::Binary.options(),
                },
                Mount {
                    kind: MountKind::Library,
                    source: host.join("libcuda.so.535.261.03"),
                    destination: lib_dir.join("libcuda.so.535.261.03"),
                    options: MountKind::Library.options(),
                },
            ],
            symlinks: vec![
                Symlink {
                    path: lib_dir.join("libcuda.so.1"),
                    target: "libcuda.so.535.261.03".into(),
                },
                Symlink {
                    path: lib_dir.join("libcuda.so"),
                    target: "libcuda.so.1".into(),
                },
            ],
            cgroup_rules: Vec::new(),
            loader_entries: vec![LoaderEntry {
                soname: "libcuda.so.1".into(),
                path: lib_dir.join("libcuda.so.1"),
                arch: "x86_64",
                flags: X86,
            }],
            loader_dirs: vec![lib_dir],
            proc_mask: Some(ProcMask {
                path: "/proc/driver/nvidia".into(),
                files: [
                    ("params", ProcCopy::ModifyDeviceFilesOff),
                    ("version", ProcCopy::Verbatim),
                    ("registry", ProcCopy::IfPresent),
                ]
                .into_iter()
                .map(|(n, copy)| ProcFile {
                    path: PathBuf::from(n),
                    source: host.join("proc").join(n),
                    copy,
                })
                .collect(),
                gpus: vec![("0000:3b:00.0".into(), host.join("proc/gpus/0000:3b:00.0"))],
            }),
            files: vec![WrittenFile {
                path: crate::plan::APPLICATION_PROFILE.into(),
                data: crate::plan::application_profile([0]).unwrap(),
            }],
        };
        World { dir, plan }
    }

    fn rootfs(&self) -> PathBuf {
        self.dir.path().join("rootfs")
    }

    fn apply(&self, sys: &impl Sys) -> Result<Summary> {
        let mut sources = Sources::open(sys, &self.plan)?;
        apply(sys, &self.plan, &mut sources, &self.rootfs())
    }
}

#[test]
#[cfg_attr(
    not(feature = "_test_as_root"),
    ignore = "linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH: run `make test`"
)]
fn file_mount_targets_made_in_one_injection_share_one_inode() {
    use std::os::unix::fs::MetadataExt;

    let world = World::new();
    world.apply(&FakeSys::default()).unwrap();
    let root = world.rootfs();
    let smi = fs::metadata(root.join("usr/bin/nvidia-smi")).unwrap();
    let lib = fs::metadata(root.join("usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03")).unwrap();
    assert_eq!((smi.dev(), smi.ino()), (lib.dev(), lib.ino()));
    assert_eq!(smi.nlink(), 2, "one inode, two names");
    assert_eq!(smi.len(), 0);
}

#[test]
fn injects_nodes_mounts_links_and_loader_cache() {
    let world = World::new();
    let sys = FakeSys::default();
    let summary = world.apply(&sys).unwrap();
    assert_eq!(
        summary,
        Summary {
            devices: 1,
            mounts: 2,
            symlinks: 2,
            loader_entries: 1
        }
    );
    assert_eq!(
        *sys.mknods.borrow(),
        [(PathBuf::from("/dev/nvidia0"), 0o666, 195, 0)]
    );
    let binds = sys.binds.borrow();
    assert_eq!(binds[0].0, Path::new("/usr/bin/nvidia-smi"));
    assert_eq!(
        binds[1].0,
        Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03")
    );
    assert!(binds[1].1.read_only && binds[1].1.nosuid && binds[1].1.nodev);

    let root = world.rootfs();
    let lib = root.join("usr/lib/x86_64-linux-gnu");
    assert!(
        lib.join("libcuda.so.535.261.03")
            .metadata()
            .unwrap()
            .is_file(),
        "mount target made"
    );
    assert_eq!(
        fs::read_link(lib.join("libcuda.so.1")).unwrap(),
        Path::new("libcuda.so.535.261.03")
    );
    assert_eq!(
        fs::read_link(lib.join("libcuda.so")).unwrap(),
        Path::new("libcuda.so.1")
    );

    let cache = LdCache::parse(&fs::read(root.join("etc/ld.so.cache")).unwrap()).unwrap();
    let names: Vec<&str> = cache.entries.iter().map(|e| e.soname.as_str()).collect();
    assert_eq!(
        names,
        ["libcuda.so.1", "libc.so.6"],
        "image entries kept, ours added"
    );
    let conf = fs::read_to_string(root.join("etc/ld.so.conf.d").join(CONF_NAME)).unwrap();
    assert!(conf.contains("\n/usr/lib/x86_64-linux-gnu\n"), "{conf}");
    // No temporary files left behind.
    let leftovers: Vec<_> = fs::read_dir(root.join("etc"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("oci-nvidia-hook."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Inode numbers of what injection writes into the rootfs.
fn written_inodes(root: &Path) -> Vec<u64> {
    use std::os::unix::fs::MetadataExt;
    let lib = root.join("usr/lib/x86_64-linux-gnu");
    [
        lib.join("libcuda.so.1"),
        lib.join("libcuda.so"),
        root.join("etc/ld.so.cache"),
        root.join("etc/ld.so.conf.d").join(CONF_NAME),
    ]
    .iter()
    .map(|p| fs::symlink_metadata(p).unwrap().ino())
    .collect()
}

#[test]
fn reused_rootfs_keeps_what_is_already_right() {
    let world = World::new();
    world.apply(&FakeSys::default()).unwrap();
    let root = world.rootfs();
    let first = written_inodes(&root);
    let cache = fs::read(root.join("etc/ld.so.cache")).unwrap();
    world.apply(&FakeSys::default()).unwrap();
    assert_eq!(written_inodes(&root), first, "nothing recreated");
    assert_eq!(fs::read(root.join("etc/ld.so.cache")).unwrap(), cache);
}

#[test]
fn reused_rootfs_with_wrong_links_and_stale_files_is_rewritten() {
    let world = World::new();
    world.apply(&FakeSys::default()).unwrap();
    let root = world.rootfs();
    let lib = root.join("usr/lib/x86_64-linux-gnu");
    let conf = root.join("etc/ld.so.conf.d").join(CONF_NAME);
    fs::remove_file(lib.join("libcuda.so.1")).unwrap();
    symlink("/etc/shadow", lib.join("libcuda.so.1")).unwrap();
    fs::write(&conf, "/elsewhere\n").unwrap();
    // The image's cache is a link to a file with exactly our content: the
    // link is still replaced, never kept.
    fs::rename(root.join("etc/ld.so.cache"), root.join("etc/cache.copy")).unwrap();
    symlink("cache.copy", root.join("etc/ld.so.cache")).unwrap();
    world.apply(&FakeSys::default()).unwrap();
    assert_eq!(
        fs::read_link(lib.join("libcuda.so.1")).unwrap(),
        Path::new("libcuda.so.535.261.03")
    );
    assert!(fs::read_to_string(&conf)
        .unwrap()
        .contains("\n/usr/lib/x86_64-linux-gnu\n"));
    let cache = fs::symlink_metadata(root.join("etc/ld.so.cache")).unwrap();
    assert!(cache.is_file(), "{cache:?}");
    assert_eq!(
        fs::read(root.join("etc/ld.so.cache")).unwrap(),
        fs::read(root.join("etc/cache.copy")).unwrap()
    );
}

#[test]
fn masks_proc_driver_nvidia_when_the_container_has_one() {
    let world = World::new();
    let sys = FakeSys::default();
    world.apply(&sys).unwrap();
    assert!(
        sys.tmpfs.borrow().is_empty(),
        "no /proc/driver/nvidia: nothing to mask"
    );
    assert_eq!(sys.host_clones.get(), 0, "nor anything cloned for it");

    let world = World::new();
    fs::create_dir_all(world.rootfs().join("proc/driver/nvidia")).unwrap();
    let sys = FakeSys::default();
    world.apply(&sys).unwrap();
    assert_eq!(*sys.tmpfs.borrow(), [PathBuf::from("/proc/driver/nvidia")]);
    assert_eq!(
        sys.host_clones.get(),
        1,
        "the GPUs' directories cloned once"
    );
    assert_eq!(
        *sys.read_only.borrow(),
        [PathBuf::from("/proc/driver/nvidia")]
    );
    let masked = world.rootfs().join("proc/driver/nvidia");
    let params = fs::read_to_string(masked.join("params")).unwrap();
    assert!(
        params.contains("ModifyDeviceFiles: 0") && !params.contains("ModifyDeviceFiles: 1"),
        "{params}"
    );
    assert!(fs::read_to_string(masked.join("version"))
        .unwrap()
        .contains("535.261.03"));
    assert!(
        !masked.join("registry").exists(),
        "missing registry is skipped"
    );
    assert!(sys
        .binds
        .borrow()
        .iter()
        .any(|(t, o)| t == Path::new("/proc/driver/nvidia/gpus/0000:3b:00.0") && o.read_only));
}

#[test]
fn library_dir_symlinked_to_the_host_stays_inside_the_rootfs() {
    let world = World::new();
    let outside = world.dir.path().join("host-lib");
    fs::create_dir_all(&outside).unwrap();
    fs::create_dir_all(world.rootfs().join("usr/lib")).unwrap();
    symlink(&outside, world.rootfs().join("usr/lib/x86_64-linux-gnu")).unwrap();
    // Re-rooted, the link dangles: a clear refusal, nothing outside touched.
    let err = world.apply(&FakeSys::default()).unwrap_err();
    assert!(
        err.to_string().contains("/usr/lib/x86_64-linux-gnu"),
        "{err}"
    );
    assert_eq!(
        fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing created outside the rootfs"
    );

    // Where the re-rooted target exists, the files go there, inside the rootfs.
    let rerooted = world.rootfs().join(outside.strip_prefix("/").unwrap());
    fs::create_dir_all(&rerooted).unwrap();
    world.apply(&FakeSys::default()).unwrap();
    assert_eq!(
        fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing created outside the rootfs"
    );
    assert!(rerooted.join("libcuda.so.535.261.03").is_file());
}

#[test]
fn relative_escape_of_the_library_dir_is_clamped_to_the_rootfs() {
    let world = World::new();
    fs::create_dir_all(world.rootfs().join("usr/lib")).unwrap();
    symlink(
        "../../../../../../../../etc",
        world.rootfs().join("usr/lib/x86_64-linux-gnu"),
    )
    .unwrap();
    world.apply(&FakeSys::default()).unwrap();
    assert!(world.rootfs().join("etc/libcuda.so.535.261.03").is_file());
    assert!(!Path::new("/etc/libcuda.so.535.261.03").exists());
}

#[test]
fn image_ld_so_cache_symlink_to_a_host_file_is_replaced_not_followed() {
    let world = World::new();
    let host_file = world.dir.path().join("host-ld.so.cache");
    fs::write(&host_file, b"host data").unwrap();
    fs::remove_file(world.rootfs().join("etc/ld.so.cache")).unwrap();
    symlink(&host_file, world.rootfs().join("etc/ld.so.cache")).unwrap();
    world.apply(&FakeSys::default()).unwrap();
    assert_eq!(fs::read(&host_file).unwrap(), b"host data");
    let meta = fs::symlink_metadata(world.rootfs().join("etc/ld.so.cache")).unwrap();
    assert!(meta.is_file(), "the image's link was replaced by our cache");
}

#[test]
fn existing_symlink_at_a_mount_target_is_replaced() {
    let world = World::new();
    let host_file = world.dir.path().join("host-passwd");
    fs::write(&host_file, b"root:x:0:0").unwrap();
    fs::create_dir_all(world.rootfs().join("usr/bin")).unwrap();
    symlink(&host_file, world.rootfs().join("usr/bin/nvidia-smi")).unwrap();
    world.apply(&FakeSys::default()).unwrap();
    assert!(
        fs::symlink_metadata(world.rootfs().join("usr/bin/nvidia-smi"))
            .unwrap()
            .is_file()
    );
    assert_eq!(fs::read(&host_file).unwrap(), b"root:x:0:0");
}

#[test]
fn directory_or_fifo_at_a_mount_target_is_refused() {
    let world = World::new();
    fs::create_dir_all(world.rootfs().join("usr/bin/nvidia-smi")).unwrap();
    let err = world.apply(&FakeSys::default()).unwrap_err();
    assert!(
        err.to_string().contains("/usr/bin/nvidia-smi") && err.to_string().contains("directory"),
        "{err}"
    );

    let world = World::new();
    fs::create_dir_all(world.rootfs().join("usr/lib/x86_64-linux-gnu")).unwrap();
    nix::unistd::mkfifo(
        &world
            .rootfs()
            .join("usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let err = world.apply(&FakeSys::default()).unwrap_err();
    assert!(err.to_string().contains("fifo"), "{err}");
}

#[test]
fn directory_at_a_soname_link_is_refused() {
    let world = World::new();
    fs::create_dir_all(world.rootfs().join("usr/lib/x86_64-linux-gnu/libcuda.so.1")).unwrap();
    let err = world.apply(&FakeSys::default()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Exists {
                found: "directory",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn corrupt_image_cache_is_an_error_naming_it() {
    let world = World::new();
    fs::write(
        world.rootfs().join("etc/ld.so.cache"),
        b"glibc-ld.so.cache1.1garbage",
    )
    .unwrap();
    let before = rollback::tree(&world.rootfs());
    let sys = FakeSys::default();
    let err = world.apply(&sys).unwrap_err();
    assert!(err.to_string().contains("/etc/ld.so.cache"), "{err}");
    assert!(
        sys.mknods.borrow().is_empty() && sys.mounted.borrow().is_empty(),
        "refused before anything was made"
    );
    assert_eq!(rollback::tree(&world.rootfs()), before);
}

#[test]
fn source_of_the_wrong_kind_is_refused_before_entering() {
    let mut world = World::new();
    world.plan.mounts[0].source = world.dir.path().join("host");
    let err = Sources::open(&FakeSys::default(), &world.plan).unwrap_err();
    assert!(
        matches!(
            err,
            Error::SourceKind {
                found: "directory",
                ..
            }
        ),
        "{err}"
    );
    let link = world.dir.path().join("link-to-lib");
    symlink(&world.plan.mounts[1].source, &link).unwrap();
    world.plan.mounts[0].source = link;
    assert!(matches!(
        Sources::open(&FakeSys::default(), &world.plan),
        Err(Error::SourceKind {
            found: "symlink",
            ..
        })
    ));
}

#[test]
fn params_are_masked() {
    let masked = mask_params(b"A: 1\nModifyDeviceFiles: 1\nB: 2\n");
    assert_eq!(masked, b"A: 1\nModifyDeviceFiles: 0\nB: 2\n");
    assert_eq!(mask_params(b"A: 1\n"), b"A: 1\nModifyDeviceFiles: 0\n");
}

#[test]
fn user_namespace_binds_host_nodes_instead_of_mknod() {
    let mut world = World::new();
    // /dev/null (1:3) stands in for the host node: the numbers are checked.
    world.plan.devices[0].major = 1;
    world.plan.devices[0].minor = 3;
    world.plan.node_mode = NodeMode::Bind;
    let sys = FakeSys::default();
    let mut sources = Sources::open(&sys, &world.plan).unwrap();
    apply(&sys, &world.plan, &mut sources, &world.rootfs()).unwrap();
    assert!(sys.mknods.borrow().is_empty());
    assert_eq!(
        sys.binds.borrow()[0],
        (PathBuf::from("/dev/nvidia0"), DEVICE_OPTIONS)
    );
    assert!(
        world
            .rootfs()
            .join("dev/nvidia0")
            .metadata()
            .unwrap()
            .is_file(),
        "bind target made"
    );

    // A host node with other numbers than planned is refused before entering.
    world.plan.devices[0].minor = 5;
    let err = Sources::open(&sys, &world.plan).unwrap_err();
    assert!(matches!(err, Error::NodeMismatch { .. }), "{err}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_source_without_a_clone_is_bound_by_path_only_while_it_is_the_same_inode() {
    use std::os::unix::fs::MetadataExt;

    let dir = tempfile::tempdir().unwrap();
    let (checked, other, target) = (
        dir.path().join("checked"),
        dir.path().join("other"),
        dir.path().join("target"),
    );
    for d in [&checked, &other, &target] {
        fs::create_dir(d).unwrap();
    }
    fs::write(checked.join("information"), "Bus Location: 0000:3b:00.0\n").unwrap();
    let source = |id_of: &Path| {
        let meta = fs::metadata(id_of).unwrap();
        Source {
            path: checked.clone(),
            file: File::open(&checked).unwrap(),
            id: (meta.dev(), meta.ino()),
            tree: None,
        }
    };
    let (good, swapped) = (source(&checked), source(&other));
    // In a private mount namespace of this thread only, gone when it ends.
    let seen = std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).unwrap();
            nix::mount::mount(
                None::<&str>,
                "/",
                None::<&str>,
                nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_PRIVATE,
                None::<&str>,
            )
            .unwrap();
            let parent = File::open(dir.path()).unwrap();
            let place = Place {
                dir: parent.as_fd(),
                name: OsStr::new("target"),
                path: Path::new("/proc/driver/nvidia/gpus/0000:3b:00.0"),
            };
            let target = File::open(&target).unwrap();
            let (target, options) = (target.as_fd(), sources::PROC_OPTIONS);
            let sys = LinuxSys::default();
            let refused = sys.bind_mount(&swapped, target, place, options);
            let bound = sys.bind_mount(&good, target, place, options);
            let content = fs::read_to_string(dir.path().join("target/information"));
            let write = fs::write(dir.path().join("target/x"), "x");
            (refused, bound, content, write)
        })
        .join()
        .unwrap()
    });
    let (refused, bound, content, write) = seen;
    assert!(
        matches!(refused, Err(Error::SourceKind { .. })),
        "{refused:?}"
    );
    bound.unwrap();
    assert_eq!(content.unwrap(), "Bus Location: 0000:3b:00.0\n");
    assert_eq!(
        write.unwrap_err().raw_os_error(),
        Some(nix::libc::EROFS),
        "bound read-only"
    );
    assert_eq!(fs::read_dir(&target).unwrap().count(), 0, "not on the host");
}

mod rollback;

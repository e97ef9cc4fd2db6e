//! Injection against a real directory tree as rootfs, with the privileged
//! syscalls recorded by a fake: runs without root. What a failed injection
//! leaves behind is checked in `rollback`.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::os::fd::AsFd;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use nix::sys::stat::Mode;

use super::fake::{FakeSys, World};
use super::*;
use crate::host::ldcache::LdCache;
use crate::planning::plan::{ModeChange, NodeMode, WrittenFile};

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
            loader_entries: 1,
            files: 1,
            modes: 0,
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
    apply(&sys, &world.plan, &mut sources, &world.rootfs(), None).unwrap();
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

/// Applies a plan of only `modes` and `files` to `rootfs`, as
/// `nvidia-cdi-hook chmod` and `enable-cuda-compat` do.
fn apply_edits(rootfs: &Path, modes: Vec<ModeChange>, files: Vec<WrittenFile>) -> Result<Summary> {
    let plan = Plan {
        modes,
        files,
        ..Plan::default()
    };
    let sys = FakeSys::default();
    let mut sources = Sources::open(&sys, &plan)?;
    apply(&sys, &plan, &mut sources, rootfs, None)
}

#[test]
fn modes_skip_what_is_absent_refuse_fifos_and_are_put_back_on_failure() {
    use std::os::unix::fs::PermissionsExt;

    let root = tempfile::tempdir().unwrap();
    fs::create_dir(root.path().join("d")).unwrap();
    fs::set_permissions(root.path().join("d"), fs::Permissions::from_mode(0o700)).unwrap();
    nix::unistd::mkfifo(&root.path().join("f"), Mode::from_bits_truncate(0o600)).unwrap();
    let modes = |paths: &[&str], mode: u32| {
        paths
            .iter()
            .map(|p| ModeChange {
                path: p.into(),
                mode,
            })
            .collect::<Vec<_>>()
    };
    let summary = apply_edits(root.path(), modes(&["/d", "/gone"], 0o755), vec![]).unwrap();
    assert_eq!(summary.modes, 1);
    let mode = |p: &str| {
        fs::metadata(root.path().join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("d"), 0o755);
    let err = apply_edits(root.path(), modes(&["/d", "/f"], 0o711), vec![]).unwrap_err();
    assert!(
        err.to_string().contains("/f") && err.to_string().contains("fifo"),
        "{err}"
    );
    assert_eq!(mode("d"), 0o755);
    assert_eq!(mode("f"), 0o600);
}

#[test]
fn files_are_written_inside_the_root_never_through_a_link_pointing_out() {
    use std::os::unix::fs::MetadataExt;

    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    symlink(outside.path(), root.path().join("etc")).unwrap();
    let file = |path: &str| {
        vec![WrittenFile {
            path: path.into(),
            data: "a\n".into(),
        }]
    };
    // The link resolves inside the root, to nothing: never created through.
    let err = apply_edits(root.path(), vec![], file("/etc/x/y.conf")).unwrap_err();
    assert!(err.to_string().contains("/etc"), "{err}");
    assert!(fs::read_dir(outside.path()).unwrap().next().is_none());
    fs::remove_file(root.path().join("etc")).unwrap();
    assert_eq!(
        apply_edits(root.path(), vec![], file("/etc/x/y.conf"))
            .unwrap()
            .files,
        1
    );
    assert_eq!(
        container_files::read_file(root.path(), Path::new("/etc/x/y.conf"))
            .unwrap()
            .unwrap(),
        b"a\n"
    );
    // A file already holding it is left alone.
    let inode = || {
        fs::metadata(root.path().join("etc/x/y.conf"))
            .unwrap()
            .ino()
    };
    let before = inode();
    assert_eq!(
        apply_edits(root.path(), vec![], file("/etc/x/y.conf"))
            .unwrap()
            .files,
        0
    );
    assert_eq!(inode(), before);
    fs::create_dir(root.path().join("dir")).unwrap();
    assert!(apply_edits(root.path(), vec![], file("/dir")).is_err());
}

mod rollback;

/// The container's root as host ids `outside` (uid and gid), its namespace
/// mapping those and, with `also`, one more id.
fn container_root(outside: u32, also: Option<(u32, u32)>) -> MappedRoot {
    use crate::planning::userns::IdRange;
    let range = |outside| IdRange {
        inside: 0,
        outside,
        count: 1,
    };
    let (mut uids, mut gids) = (vec![range(outside)], vec![range(outside)]);
    if let Some((uid, gid)) = also {
        uids.push(IdRange {
            inside: 1,
            ..range(uid)
        });
        gids.push(IdRange {
            inside: 1,
            ..range(gid)
        });
    }
    MappedRoot {
        uid: outside,
        gid: outside,
        uids,
        gids,
    }
}

/// In a user namespace the hook changes only what the container's root
/// could: a rootfs whose directories belong to ids its namespace does not
/// map (a host directory bind-mounted there) is left as it was, with one
/// line naming the first place; mapped, the same rootfs is injected.
#[test]
fn a_user_namespaced_root_changes_only_what_it_could_itself() {
    use std::os::unix::fs::MetadataExt;

    let mut world = World::new();
    // /dev/null (1:3) stands in for the host node: the numbers are checked.
    world.plan.devices[0].major = 1;
    world.plan.devices[0].minor = 3;
    world.plan.node_mode = NodeMode::Bind;
    let root = world.rootfs();
    let owner = fs::metadata(&root).unwrap();
    let (uid, gid) = (owner.uid(), owner.gid());
    let outside = if uid == 100000 { 200000 } else { 100000 };
    let before = rollback::tree(&root);
    let sys = FakeSys::default();
    let mut sources = Sources::open(&sys, &world.plan).unwrap();
    let unmapped = container_root(outside, None);
    let err = apply(&sys, &world.plan, &mut sources, &root, Some(&unmapped)).unwrap_err();
    let line = err.to_string();
    assert!(matches!(err, Error::BeyondContainerRoot { .. }), "{line}");
    assert!(line.contains("/dev/nvidia0"), "{line}");
    assert!(line.contains(&format!("belongs to {uid}:{gid}")), "{line}");
    assert_eq!(rollback::tree(&root), before, "nothing changed");
    assert!(sys.binds.borrow().is_empty());

    let mapped = container_root(outside, Some((uid, gid)));
    let mut sources = Sources::open(&sys, &world.plan).unwrap();
    apply(&sys, &world.plan, &mut sources, &root, Some(&mapped)).unwrap();
    assert!(root.join("etc/ld.so.conf.d").join(CONF_NAME).is_file());
}

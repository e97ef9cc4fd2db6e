//! A fake of [`Sys`] that records each privileged call, and a world of a
//! host directory, a rootfs and a plan joining them: what the unit tests of
//! injection and of the whole apply sequence ([`crate::apply::hook::Target`]) run
//! against, without root.

use std::cell::{Cell, RefCell};
use std::fs;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

use super::*;
use crate::host::ldcache::{Format, LdCache, LdCacheEntry, FLAG_ELF_LIBC6, FLAG_X8664_LIB64};
use crate::planning::plan::{
    DeviceNode, LoaderEntry, Mount, MountOptions, NodeMode, ProcCopy, ProcFile, ProcMask, Symlink,
    WrittenFile,
};
use crate::sys::process::Hold;

const X86: i32 = FLAG_ELF_LIBC6 | FLAG_X8664_LIB64;

/// Records each privileged call by kind, with its arguments. Its `mknod`
/// leaves an empty file where the node goes, so that a node left behind
/// shows in the rootfs; with no tmpfs, what is written in one lands in the
/// directory it would cover, and its unmount takes that away, as the real
/// one would.
#[derive(Default)]
pub(crate) struct FakeSys {
    pub(crate) mknods: RefCell<Vec<(PathBuf, u32, u32, u32)>>,
    pub(crate) binds: RefCell<Vec<(PathBuf, MountOptions)>>,
    pub(crate) tmpfs: RefCell<Vec<PathBuf>>,
    pub(crate) read_only: RefCell<Vec<PathBuf>>,
    /// Every bind and tmpfs mount, in order.
    pub(crate) mounted: RefCell<Vec<PathBuf>>,
    /// Every unmount, in order.
    pub(crate) unmounts: RefCell<Vec<PathBuf>>,
    /// Calls of `clone_in_host`.
    pub(crate) host_clones: Cell<usize>,
    /// Refuse every unmount, as a mount made busy would.
    pub(crate) unmount_fails: bool,
}

impl Sys for FakeSys {
    fn enter_mount_namespace(&self, _proc: &Path, _pid: u32, _hold: Hold<'_>) -> Result<()> {
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
pub(crate) struct World {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) plan: Plan,
}

impl World {
    pub(crate) fn new() -> World {
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
                gid: 0,
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
                path: crate::planning::plan::APPLICATION_PROFILE.into(),
                data: crate::planning::plan::application_profile([0]).unwrap(),
            }],
            modes: Vec::new(),
            additional_gids: Vec::new(),
            systemd_scope: None,
        };
        World { dir, plan }
    }

    pub(crate) fn rootfs(&self) -> PathBuf {
        self.dir.path().join("rootfs")
    }

    pub(crate) fn apply(&self, sys: &impl Sys) -> Result<Summary> {
        let mut sources = Sources::open(sys, &self.plan)?;
        apply(sys, &self.plan, &mut sources, &self.rootfs(), None)
    }
}

//! Applies a plan inside the container's mount namespace, before `pivot_root`.
//!
//! The container image is hostile. Every path inside the rootfs is resolved
//! with `pathrs` (`openat2(RESOLVE_IN_ROOT)`, or its emulation on old
//! kernels), targets are created `O_EXCL|O_NOFOLLOW`, and mounts go onto the
//! resolved descriptor. Nothing is ever executed, nothing from the image is
//! mounted, and sources are host descriptors opened before entering the
//! namespace ([`Sources`]). The privileged syscalls sit behind [`Sys`].

mod loader;
mod sources;
mod sys;

use std::fs::Permissions;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::sys::stat::{fstat, SFlag};
use pathrs::error::ErrorKind;
use pathrs::flags::{OpenFlags, RenameFlags};
use pathrs::{InodeType, Root};
use thiserror::Error;

pub use loader::{conf_file, merged_cache, CONF_NAME};
pub use sources::{mask_params, Sources};
pub use sys::{LinuxSys, Sys};

use crate::ldcache;
use crate::plan::{MountKind, MountOptions, Plan};

/// Largest image `ld.so.cache` we read; real ones are well under 1 MiB.
const MAX_IMAGE_CACHE: u64 = 32 * 1024 * 1024;

/// Why injection failed; each error names the path inside the container or on the host.
#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot open the container rootfs {path}: {source}")]
    OpenRoot {
        path: PathBuf,
        source: pathrs::error::Error,
    },
    #[error("cannot resolve {path} inside the container rootfs: {source}")]
    Resolve {
        path: PathBuf,
        source: pathrs::error::Error,
    },
    #[error("cannot create {path} inside the container rootfs: {source}")]
    Create {
        path: PathBuf,
        source: pathrs::error::Error,
    },
    #[error("refusing {path} in the container: it exists as a {found}, expected a {expected}")]
    Exists {
        path: PathBuf,
        found: &'static str,
        expected: &'static str,
    },
    #[error("cannot write {path} in the container: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("bad loader cache {path} in the container image: {source}")]
    ImageCache {
        path: PathBuf,
        source: ldcache::Error,
    },
    #[error("cannot mknod {path} (c {major}:{minor}) in the container: {source}")]
    Mknod {
        path: PathBuf,
        major: u32,
        minor: u32,
        source: pathrs::error::Error,
    },
    #[error("device node {path} is {found}, expected {expected}")]
    NodeMismatch {
        path: PathBuf,
        expected: String,
        found: String,
    },
    #[error("cannot stat {path}: {source}")]
    Stat { path: PathBuf, source: io::Error },
    #[error("{what} mount onto {target} in the container failed: {source}")]
    Mount {
        target: PathBuf,
        what: &'static str,
        source: io::Error,
    },
    #[error("cannot enter mount namespace {path}: {source}")]
    Namespace { path: PathBuf, source: io::Error },
    #[error("cannot open host source {path}: {source}")]
    Source { path: PathBuf, source: io::Error },
    #[error("host source {path} is a {found}, expected a {expected}")]
    SourceKind {
        path: PathBuf,
        expected: &'static str,
        found: &'static str,
    },
}

/// Result of injection.
pub type Result<T> = std::result::Result<T, Error>;

/// How device nodes reach the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeMode {
    /// `mknod` them: the normal, privileged case.
    Mknod,
    /// Bind-mount the host nodes: in a user namespace mknod is not allowed.
    Bind,
}

/// Counts of what was injected, for the hook's log line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Device nodes created or bound.
    pub devices: usize,
    /// Files and directories bind-mounted.
    pub mounts: usize,
    /// Symlinks created.
    pub symlinks: usize,
    /// Entries added to the loader cache.
    pub loader_entries: usize,
}

/// Injects `plan` into the rootfs at `rootfs`, as seen from the current
/// (container) mount namespace, taking host data from `sources`.
pub fn apply(
    sys: &impl Sys,
    plan: &Plan,
    sources: &Sources,
    rootfs: &Path,
    nodes: NodeMode,
) -> Result<Summary> {
    let root = Root::open(rootfs).map_err(|source| Error::OpenRoot {
        path: rootfs.to_path_buf(),
        source,
    })?;
    let mut summary = Summary::default();

    for (index, node) in plan.devices.iter().enumerate() {
        mkdir_parent(&root, &node.path)?;
        match nodes {
            NodeMode::Mknod => sys.mknod(&root, &node.path, node.mode, node.major, node.minor)?,
            NodeMode::Bind => {
                let source = sources
                    .devices
                    .get(index)
                    .ok_or_else(|| missing_source(&node.host_path))?;
                create_target(&root, &node.path, Target::File)?;
                let options = MountOptions {
                    read_only: false,
                    nosuid: true,
                    nodev: false,
                    noexec: true,
                };
                sys.bind_mount(source.as_fd(), &root, &node.path, options)?;
            }
        }
        summary.devices += 1;
    }

    for (index, mount) in plan.mounts.iter().enumerate() {
        let source = sources
            .mount(index)
            .ok_or_else(|| missing_source(&mount.source))?;
        let target = if mount.kind == MountKind::Directory {
            Target::Directory
        } else {
            Target::File
        };
        mkdir_parent(&root, &mount.destination)?;
        create_target(&root, &mount.destination, target)?;
        sys.bind_mount(source, &root, &mount.destination, mount.options)?;
        summary.mounts += 1;
    }

    for link in &plan.symlinks {
        mkdir_parent(&root, &link.path)?;
        replace_with_symlink(&root, &link.path, &link.target)?;
        summary.symlinks += 1;
    }

    if !plan.loader_entries.is_empty() {
        update_loader(&root, plan)?;
        summary.loader_entries = plan.loader_entries.len();
    }

    if let Some(mask) = &plan.proc_mask {
        mask_proc(sys, &root, &mask.path, sources)?;
    }
    Ok(summary)
}

fn missing_source(path: &Path) -> Error {
    Error::Source {
        path: path.to_path_buf(),
        source: io::Error::other("not opened before entering the container"),
    }
}

fn dir_perm() -> Permissions {
    Permissions::from_mode(0o755)
}

fn mkdir_parent(root: &Root, path: &Path) -> Result<()> {
    let parent = path.parent().unwrap_or(Path::new("/"));
    root.mkdir_all(parent, &dir_perm())
        .map(drop)
        .map_err(|source| Error::Create {
            path: parent.to_path_buf(),
            source,
        })
}

fn is_errno(e: &pathrs::error::Error, errno: i32) -> bool {
    e.kind() == ErrorKind::OsError(Some(errno))
}

/// What is at `path` in the container now, without following a final symlink.
fn existing_kind(root: &Root, path: &Path) -> Result<Option<&'static str>> {
    let handle = match root.resolve_nofollow(path) {
        Ok(h) => h,
        Err(e) if is_errno(&e, nix::libc::ENOENT) => return Ok(None),
        Err(source) => {
            return Err(Error::Resolve {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let stat = fstat(handle.as_fd()).map_err(|errno| Error::Stat {
        path: path.to_path_buf(),
        source: errno.into(),
    })?;
    Ok(Some(
        match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFREG => "regular file",
            SFlag::S_IFDIR => "directory",
            SFlag::S_IFLNK => "symlink",
            SFlag::S_IFCHR => "character device",
            SFlag::S_IFBLK => "block device",
            SFlag::S_IFIFO => "fifo",
            SFlag::S_IFSOCK => "socket",
            _ => "special file",
        },
    ))
}

/// What a mount target must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    File,
    Directory,
}

/// Creates an empty mount target. An existing regular file (or directory) is
/// reused; an image's symlink there is replaced, never followed; anything
/// else is refused.
fn create_target(root: &Root, path: &Path, target: Target) -> Result<()> {
    let create = || match target {
        Target::File => root
            .create_file(
                path,
                OpenFlags::O_WRONLY
                    | OpenFlags::O_EXCL
                    | OpenFlags::O_NOFOLLOW
                    | OpenFlags::O_CLOEXEC,
                &Permissions::from_mode(0o644),
            )
            .map(drop),
        Target::Directory => root.create(path, &InodeType::Directory(dir_perm())),
    };
    let expected = match target {
        Target::File => "regular file",
        Target::Directory => "directory",
    };
    match create() {
        Ok(()) => return Ok(()),
        Err(e) if is_errno(&e, nix::libc::EEXIST) => {}
        Err(source) => {
            return Err(Error::Create {
                path: path.to_path_buf(),
                source,
            })
        }
    }
    match existing_kind(root, path)? {
        Some(found) if found == expected => return Ok(()),
        Some("symlink") => root.remove_file(path).map_err(|source| Error::Create {
            path: path.to_path_buf(),
            source,
        })?,
        Some(found) => {
            return Err(Error::Exists {
                path: path.to_path_buf(),
                found,
                expected,
            })
        }
        None => {}
    }
    create().map_err(|source| Error::Create {
        path: path.to_path_buf(),
        source,
    })
}

/// Creates symlink `path` → `target`, replacing an image's file or link there.
fn replace_with_symlink(root: &Root, path: &Path, target: &Path) -> Result<()> {
    let link = InodeType::Symlink(target.to_path_buf());
    match root.create(path, &link) {
        Ok(()) => return Ok(()),
        Err(e) if is_errno(&e, nix::libc::EEXIST) => {}
        Err(source) => {
            return Err(Error::Create {
                path: path.to_path_buf(),
                source,
            })
        }
    }
    match existing_kind(root, path)? {
        Some("symlink") | Some("regular file") => {}
        Some(found) => {
            return Err(Error::Exists {
                path: path.to_path_buf(),
                found,
                expected: "symlink",
            })
        }
        None => {}
    }
    let _ = root.remove_file(path);
    root.create(path, &link).map_err(|source| Error::Create {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `data` to `path` in the container by creating a fresh file beside
/// it (`O_EXCL|O_NOFOLLOW`) and renaming it over the old one, so an image's
/// symlink at `path` is replaced, never written through.
fn write_replacing(root: &Root, path: &Path, data: &[u8]) -> Result<()> {
    mkdir_parent(root, path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let temp = path.with_file_name(format!(".{name}.oci-nvidia-hook.{}", std::process::id()));
    let mut file = root
        .create_file(
            &temp,
            OpenFlags::O_WRONLY | OpenFlags::O_EXCL | OpenFlags::O_NOFOLLOW | OpenFlags::O_CLOEXEC,
            &Permissions::from_mode(0o644),
        )
        .map_err(|source| Error::Create {
            path: temp.clone(),
            source,
        })?;
    let written = file.write_all(data).and_then(|()| file.sync_all());
    drop(file);
    if let Err(source) = written {
        let _ = root.remove_file(&temp);
        return Err(Error::Write {
            path: path.to_path_buf(),
            source,
        });
    }
    root.rename(&temp, path, RenameFlags::empty())
        .map_err(|source| {
            let _ = root.remove_file(&temp);
            Error::Create {
                path: path.to_path_buf(),
                source,
            }
        })
}

/// Reads a file of the image, following links only inside the rootfs; what
/// they reach must be a regular file.
fn read_image_file(root: &Root, path: &Path, limit: u64) -> Result<Option<Vec<u8>>> {
    let handle = match root.resolve(path) {
        Ok(h) => h,
        Err(e) if is_errno(&e, nix::libc::ENOENT) => return Ok(None),
        Err(source) => {
            return Err(Error::Resolve {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let stat = fstat(handle.as_fd()).map_err(|errno| Error::Stat {
        path: path.to_path_buf(),
        source: errno.into(),
    })?;
    if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Err(Error::Exists {
            path: path.to_path_buf(),
            found: "non-regular file",
            expected: "regular file",
        });
    }
    let file = handle
        .reopen(OpenFlags::O_RDONLY | OpenFlags::O_CLOEXEC)
        .map_err(|source| Error::Resolve {
            path: path.to_path_buf(),
            source,
        })?;
    let mut data = Vec::new();
    file.take(limit)
        .read_to_end(&mut data)
        .map_err(|source| Error::Write {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(Some(data))
}

fn update_loader(root: &Root, plan: &Plan) -> Result<()> {
    let cache_path = Path::new("/etc/ld.so.cache");
    let image = read_image_file(root, cache_path, MAX_IMAGE_CACHE)?;
    let merged = merged_cache(image.as_deref(), &plan.loader_entries).map_err(|source| {
        Error::ImageCache {
            path: cache_path.to_path_buf(),
            source,
        }
    })?;
    write_replacing(root, cache_path, &merged)?;
    let conf = Path::new("/etc/ld.so.conf.d").join(CONF_NAME);
    write_replacing(root, &conf, &conf_file(&plan.loader_dirs))
}

/// Covers the container's `/proc/driver/nvidia`, if the kernel shows one, with
/// a tmpfs holding our copies and the selected GPUs' directories.
fn mask_proc(sys: &impl Sys, root: &Root, path: &Path, sources: &Sources) -> Result<()> {
    if existing_kind(root, path)? != Some("directory") {
        log::debug!(
            "{} does not exist in the container: nothing to mask",
            path.display()
        );
        return Ok(());
    }
    sys.mount_tmpfs(root, path)?;
    for (name, data) in &sources.proc_files {
        write_replacing(root, &path.join(name), data)?;
    }
    for (bus, dir) in &sources.proc_gpus {
        let target = path.join("gpus").join(bus);
        root.mkdir_all(&target, &dir_perm())
            .map_err(|source| Error::Create {
                path: target.clone(),
                source,
            })?;
        let options = MountOptions {
            read_only: true,
            nosuid: true,
            nodev: true,
            noexec: true,
        };
        sys.bind_mount(dir.as_fd(), root, &target, options)?;
    }
    sys.remount_read_only(root, path)
}

#[cfg(test)]
mod tests;

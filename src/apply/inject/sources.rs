//! Opens everything injection takes from the host, before the hook leaves
//! the host's mount namespace. Each source becomes an `O_PATH` descriptor
//! whose type is checked, and, where the kernel has the new mount API, a
//! detached clone of its mount (`open_tree`) that can be attached inside the
//! container's namespace: nothing is looked up on the host by path afterwards.
//! The GPUs' procfs directories are cloned later, from the host's namespace
//! re-entered for that, and only when the container shows the driver.

use std::fs::{self, File};
use std::os::fd::AsFd;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;

use super::Sys;
use super::{Error, Result};
use crate::planning::plan::{DeviceNode, MountKind, MountOptions, NodeMode, Plan, ProcCopy};
use crate::util::reopen::{kind_name, Reopener};

/// Largest procfs file copied into the masked `/proc/driver/nvidia`.
const MAX_PROC_FILE: usize = 64 * 1024;

/// One host file or directory to bind into the container.
#[derive(Debug)]
pub struct Source {
    /// Its host path, for messages and for the fallback without `open_tree`.
    pub path: PathBuf,
    /// `O_PATH` descriptor, opened in the host's namespace.
    pub file: File,
    /// Device and inode it had when checked, to recognise it again.
    pub id: (u64, u64),
    /// A detached clone of its mount, already carrying the mount options;
    /// `None` on kernels without `open_tree`.
    pub tree: Option<OwnedFd>,
}

/// Host sources, opened and checked.
#[derive(Debug)]
pub struct Sources {
    /// One per plan mount, in plan order.
    pub mounts: Vec<Source>,
    /// Host device nodes, in plan order, when nodes are bind-mounted (user namespaces).
    pub devices: Vec<Source>,
    /// Contents for the masked `/proc/driver/nvidia`, by path below it.
    pub proc_files: Vec<(PathBuf, Vec<u8>)>,
    /// The selected GPUs' procfs directories, by bus id.
    pub proc_gpus: Vec<(String, Source)>,
    /// The host's `/proc/self/fd`, through which image files are opened
    /// for reading once their type is checked.
    pub reopener: Reopener,
}

/// Opens `path` as an `O_PATH` descriptor without following a final symlink.
///
/// Not through std's `OpenOptions`: it masks its custom flags with the C
/// library's `O_ACCMODE`, which on musl includes `O_PATH`, so a socket or a
/// fifo would be opened for reading instead (`ENXIO`, or a wait).
pub(super) fn open_path(path: &Path) -> Result<File> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::open(path, flags, rustix::fs::Mode::empty())
        .map(File::from)
        .map_err(|source| Error::Source {
            path: path.to_path_buf(),
            source: source.into(),
        })
}

/// Opens `path` and checks that it is of the kind `accept` takes; returns
/// it with the metadata that was checked.
fn open_checked(
    path: &Path,
    expected: &'static str,
    accept: fn(fs::FileType) -> bool,
) -> Result<(File, fs::Metadata)> {
    let file = open_path(path)?;
    let meta = file.metadata().map_err(|source| Error::Source {
        path: path.to_path_buf(),
        source,
    })?;
    if !accept(meta.file_type()) {
        return Err(Error::SourceKind {
            path: path.to_path_buf(),
            expected,
            found: kind_name(meta.mode()),
        });
    }
    Ok((file, meta))
}

/// Turns a checked descriptor into a [`Source`], cloning its mount with `options`.
fn source(
    sys: &impl Sys,
    path: &Path,
    (file, meta): (File, fs::Metadata),
    options: MountOptions,
) -> Result<Source> {
    let tree = sys.clone_mount(path, file.as_fd(), options)?;
    Ok(Source {
        path: path.to_path_buf(),
        file,
        id: (meta.dev(), meta.ino()),
        tree,
    })
}

fn open_device(node: &DeviceNode) -> Result<(File, fs::Metadata)> {
    let (file, meta) = open_checked(&node.host_path, "character device", |ft| {
        ft.is_char_device()
    })?;
    let rdev = meta.rdev();
    let found = (
        nix::sys::stat::major(rdev) as u32,
        nix::sys::stat::minor(rdev) as u32,
    );
    if found != (node.major, node.minor) {
        return Err(Error::NodeMismatch {
            path: node.host_path.clone(),
            expected: format!("c {}:{}", node.major, node.minor),
            found: format!("c {}:{}", found.0, found.1),
        });
    }
    Ok((file, meta))
}

/// Reads a small procfs file whole, its type checked before it is opened
/// (see [`crate::util::hostfile`]); `None` when it is not there.
fn read_proc_file(path: &Path) -> Result<Option<Vec<u8>>> {
    match crate::util::hostfile::read(path, MAX_PROC_FILE) {
        Ok(data) => Ok(Some(data)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Source {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// `params` with `ModifyDeviceFiles: 0`, so that nothing in the container
/// asks the driver to create device nodes.
pub fn mask_params(params: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(params);
    let mut out = String::with_capacity(text.len() + 24);
    let mut seen = false;
    for line in text.lines() {
        if line.trim_start().starts_with("ModifyDeviceFiles:") {
            out.push_str("ModifyDeviceFiles: 0\n");
            seen = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !seen {
        out.push_str("ModifyDeviceFiles: 0\n");
    }
    out.into_bytes()
}

impl Sources {
    /// Opens the plan's sources; device nodes too when they will be bind-mounted.
    pub fn open(sys: &impl Sys, plan: &Plan) -> Result<Sources> {
        let mounts = plan
            .mounts
            .iter()
            .map(|m| {
                let checked = match m.kind {
                    MountKind::Binary
                    | MountKind::Library
                    | MountKind::Firmware
                    | MountKind::Config => {
                        open_checked(&m.source, "regular file", |ft| ft.is_file())
                    }
                    MountKind::Socket => open_checked(&m.source, "socket", |ft| ft.is_socket()),
                    MountKind::Directory | MountKind::State | MountKind::Tree => {
                        open_checked(&m.source, "directory", |ft| ft.is_dir())
                    }
                }?;
                source(sys, &m.source, checked, m.options)
            })
            .collect::<Result<Vec<_>>>()?;
        let devices = if plan.node_mode == NodeMode::Bind {
            plan.devices
                .iter()
                .map(|node| source(sys, &node.host_path, open_device(node)?, DEVICE_OPTIONS))
                .collect::<Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        let mut proc_files = Vec::new();
        let mut proc_gpus = Vec::new();
        if let Some(mask) = &plan.proc_mask {
            for file in &mask.files {
                match (read_proc_file(&file.source)?, file.copy) {
                    (Some(data), ProcCopy::ModifyDeviceFilesOff) => {
                        proc_files.push((file.path.clone(), mask_params(&data)))
                    }
                    (Some(data), ProcCopy::Verbatim | ProcCopy::IfPresent) => {
                        proc_files.push((file.path.clone(), data))
                    }
                    (None, ProcCopy::IfPresent) => {}
                    (None, ProcCopy::Verbatim | ProcCopy::ModifyDeviceFilesOff) => {
                        return Err(Error::Source {
                            path: file.source.clone(),
                            source: std::io::ErrorKind::NotFound.into(),
                        })
                    }
                }
            }
            // Not cloned yet: only inside the container does it show whether
            // they are needed (does its procfs have /proc/driver/nvidia?), and
            // a clone closed unused is unmounted, which waits for an RCU grace
            // period and leaves work behind. `Sys::clone_in_host` clones them
            // when they are.
            for (bus, dir) in &mask.gpus {
                let (file, meta) = open_checked(dir, "directory", |ft| ft.is_dir())?;
                let source = Source {
                    path: dir.clone(),
                    file,
                    id: (meta.dev(), meta.ino()),
                    tree: None,
                };
                proc_gpus.push((bus.clone(), source));
            }
        }
        Ok(Sources {
            mounts,
            devices,
            proc_files,
            proc_gpus,
            reopener: Reopener::open().map_err(Error::Reopen)?,
        })
    }
}

/// Device nodes bound in a user namespace: usable, but nothing else.
pub const DEVICE_OPTIONS: MountOptions = MountOptions {
    read_only: false,
    nosuid: true,
    nodev: false,
    noexec: true,
};

/// The GPUs' procfs directories: read-only, inert.
pub const PROC_OPTIONS: MountOptions = MountOptions {
    read_only: true,
    nosuid: true,
    nodev: true,
    noexec: true,
};

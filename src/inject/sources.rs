//! Opens everything injection takes from the host, before the hook leaves
//! the host's mount namespace: each source becomes an `O_PATH` descriptor
//! whose type is checked, so nothing the container can influence is ever
//! looked up by path afterwards.

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use nix::libc;

use super::{Error, Result};
use crate::plan::{DeviceNode, MountKind, Plan};

/// Largest procfs file copied into the masked `/proc/driver/nvidia`.
const MAX_PROC_FILE: u64 = 64 * 1024;

/// Host sources, opened and checked.
#[derive(Debug)]
pub struct Sources {
    /// One descriptor per plan mount, in plan order.
    pub mounts: Vec<File>,
    /// Host device nodes, in plan order, when nodes are bind-mounted (user namespaces).
    pub devices: Vec<File>,
    /// Contents for the masked `/proc/driver/nvidia`, by file name.
    pub proc_files: Vec<(String, Vec<u8>)>,
    /// The selected GPUs' procfs directories, by bus id.
    pub proc_gpus: Vec<(String, File)>,
}

/// Opens `path` as an `O_PATH` descriptor without following a final symlink.
fn open_path(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| Error::Source {
            path: path.to_path_buf(),
            source,
        })
}

fn kind_of(ft: fs::FileType) -> &'static str {
    if ft.is_file() {
        "regular file"
    } else if ft.is_dir() {
        "directory"
    } else if ft.is_symlink() {
        "symlink"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_char_device() {
        "character device"
    } else if ft.is_block_device() {
        "block device"
    } else {
        "fifo"
    }
}

/// Opens `path` and checks that it is of the kind `accept` takes.
fn open_checked(
    path: &Path,
    expected: &'static str,
    accept: fn(fs::FileType) -> bool,
) -> Result<File> {
    let file = open_path(path)?;
    let meta = file.metadata().map_err(|source| Error::Source {
        path: path.to_path_buf(),
        source,
    })?;
    if !accept(meta.file_type()) {
        return Err(Error::SourceKind {
            path: path.to_path_buf(),
            expected,
            found: kind_of(meta.file_type()),
        });
    }
    Ok(file)
}

fn open_device(node: &DeviceNode) -> Result<File> {
    let file = open_checked(&node.host_path, "character device", |ft| {
        ft.is_char_device()
    })?;
    let rdev = file
        .metadata()
        .map_err(|source| Error::Source {
            path: node.host_path.clone(),
            source,
        })?
        .rdev();
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
    Ok(file)
}

/// Reads a small procfs file through an already-open descriptor.
fn read_proc_file(path: &Path) -> Result<Option<Vec<u8>>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(Error::Source {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let mut data = Vec::new();
    file.take(MAX_PROC_FILE)
        .read_to_end(&mut data)
        .map_err(|source| Error::Source {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(Some(data))
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
    pub fn open(plan: &Plan, bind_devices: bool) -> Result<Sources> {
        let mounts = plan
            .mounts
            .iter()
            .map(|m| match m.kind {
                MountKind::Binary
                | MountKind::Library
                | MountKind::Firmware
                | MountKind::Config => open_checked(&m.source, "regular file", |ft| ft.is_file()),
                MountKind::Socket => open_checked(&m.source, "socket", |ft| ft.is_socket()),
                MountKind::Directory => open_checked(&m.source, "directory", |ft| ft.is_dir()),
            })
            .collect::<Result<Vec<_>>>()?;
        let devices = if bind_devices {
            plan.devices
                .iter()
                .map(open_device)
                .collect::<Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        let mut proc_files = Vec::new();
        let mut proc_gpus = Vec::new();
        if let Some(mask) = &plan.proc_mask {
            for (name, path) in &mask.files {
                match read_proc_file(path)? {
                    Some(data) if name == "params" => {
                        proc_files.push((name.clone(), mask_params(&data)))
                    }
                    Some(data) => proc_files.push((name.clone(), data)),
                    None if name == "registry" => {}
                    None => {
                        return Err(Error::Source {
                            path: path.clone(),
                            source: std::io::ErrorKind::NotFound.into(),
                        })
                    }
                }
            }
            for (bus, dir) in &mask.gpus {
                proc_gpus.push((
                    bus.clone(),
                    open_checked(dir, "directory", |ft| ft.is_dir())?,
                ));
            }
        }
        Ok(Sources {
            mounts,
            devices,
            proc_files,
            proc_gpus,
        })
    }
}

impl Sources {
    /// The descriptor for plan mount `index`.
    pub fn mount(&self, index: usize) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.mounts.get(index).map(|f| f.as_fd())
    }
}

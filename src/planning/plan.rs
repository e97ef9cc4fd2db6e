//! The plan: exactly what a container receives, as pure data.
//!
//! A plan is computed from the host inventory and the container's request
//! without touching the container. The hook applies it, `list` prints it,
//! `info` describes the host it came from, and CDI generation can serialise
//! it. Building a plan never performs I/O.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use thiserror::Error;

use crate::host::driver::{catalog, Inventory};
use crate::host::elf::Arch;
use crate::planning::image::Image;
use crate::planning::request::{Capability, DeviceSelection, Request};

/// Why a request cannot be satisfied on this host.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum Error {
    #[error("unknown device {item:?}; this host has: {available}")]
    UnknownDevice { item: String, available: String },
    #[error("NVIDIA_MIG_CONFIG_DEVICES or NVIDIA_MIG_MONITOR_DEVICES asked for, but the driver has no MIG capabilities (capabilities/mig/config, monitor)")]
    NoMigCapabilities,
    #[error("{variable}=all is refused beside MIG device {device:?}: managing or monitoring MIG takes whole GPUs or all, never one MIG device")]
    MigManagementBesideMigDevice {
        variable: &'static str,
        device: String,
    },
    #[error("device {item:?} is a MIG device, and MIG devices are only known through NVML, which was not queried")]
    NeedsNvml { item: String },
    #[error("device node {path} cannot be used: {problem}")]
    NodeUnusable { path: PathBuf, problem: String },
    #[error(
        "capability {capability} needs {prefix}, but driver {version} has none in the driver root"
    )]
    CoreLibraryMissing {
        capability: Capability,
        prefix: &'static str,
        version: String,
    },
}

/// Result of planning.
pub type Result<T> = std::result::Result<T, Error>;

/// A device node to create in the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceNode {
    /// The checked node on the host.
    pub host_path: PathBuf,
    /// Where it goes in the container.
    pub path: PathBuf,
    /// Its major number.
    pub major: u32,
    /// Its minor number.
    pub minor: u32,
    /// The host node's permission bits, copied (the planner opens a
    /// group-only node to the container's users).
    pub mode: u32,
    /// The host node's group.
    pub gid: u32,
}

/// What a bind mount carries, which decides its options and its place in listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MountKind {
    /// A driver program.
    Binary,
    /// A driver library.
    Library,
    /// GSP firmware.
    Firmware,
    /// A graphics ICD file.
    Config,
    /// A daemon's unix socket.
    Socket,
    /// A daemon's pipe directory.
    Directory,
    /// A directory of host state read, never written (udev's database, for GDS).
    State,
    /// A directory of the driver's files, read-only, its programs runnable:
    /// what a CSV (Jetson) host's `dir` entries list (`/usr/local/cuda`, …).
    Tree,
}

impl MountKind {
    /// Files are read-only; state is read-only and never executable; sockets
    /// and pipe directories must be writable but never executable.
    pub fn options(self) -> MountOptions {
        match self {
            MountKind::Binary
            | MountKind::Library
            | MountKind::Firmware
            | MountKind::Config
            | MountKind::Tree => MountOptions {
                read_only: true,
                nosuid: true,
                nodev: true,
                noexec: false,
            },
            MountKind::State => MountOptions {
                read_only: true,
                nosuid: true,
                nodev: true,
                noexec: true,
            },
            MountKind::Socket | MountKind::Directory => MountOptions {
                read_only: false,
                nosuid: true,
                nodev: true,
                noexec: true,
            },
        }
    }
}

/// Mount flags of one bind mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountOptions {
    /// `ro`.
    pub read_only: bool,
    /// `nosuid`.
    pub nosuid: bool,
    /// `nodev`.
    pub nodev: bool,
    /// `noexec`.
    pub noexec: bool,
}

impl MountOptions {
    /// The options as `mount(8)` spells them.
    pub fn names(self) -> Vec<&'static str> {
        let mut names = vec![if self.read_only { "ro" } else { "rw" }];
        names.extend(
            [
                (self.nosuid, "nosuid"),
                (self.nodev, "nodev"),
                (self.noexec, "noexec"),
            ]
            .into_iter()
            .filter_map(|(on, name)| on.then_some(name)),
        );
        names
    }
}

impl Serialize for MountOptions {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.names().serialize(s)
    }
}

/// A bind mount of a host file into the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mount {
    /// What it carries.
    pub kind: MountKind,
    /// The host file, inside the driver root.
    pub source: PathBuf,
    /// Where it goes in the container.
    pub destination: PathBuf,
    /// Its flags.
    pub options: MountOptions,
}

/// A symlink to create in the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Symlink {
    /// The link, in the container.
    pub path: PathBuf,
    /// What it points to, relative to the link's directory: a name beside
    /// it, or `../NAME` for the GBM backend.
    pub target: PathBuf,
}

/// A small file of ours written into the container: its content is the
/// plan's, never a host file's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WrittenFile {
    /// Where it goes in the container.
    pub path: PathBuf,
    /// What it holds.
    pub data: String,
}

/// Permission bits to set on an entry of the container, where it has one:
/// a path it lacks is skipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModeChange {
    /// The entry, a directory, regular file or character device.
    pub path: PathBuf,
    /// The permission bits, at most `0o7777`.
    pub mode: u32,
}

/// Where NVIDIA's `update-application-profile` (toolkit 1.20) writes the
/// driver's application profile.
pub const APPLICATION_PROFILE: &str =
    "/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf";

/// The driver application profile that keeps EGL and Vulkan to the GPUs
/// of `minors` (`EGLVisibleDGPUDevices`, a mask of GPU minors below 64), as
/// NVIDIA's hook writes it; none when no minor fits the mask.
pub fn application_profile(minors: impl IntoIterator<Item = u32>) -> Option<String> {
    let mask = minors
        .into_iter()
        .filter(|minor| *minor < 64)
        .fold(0u64, |mask, minor| mask | 1 << minor);
    (mask != 0).then(|| {
        format!(
            "{{\"profiles\":[{{\"name\":\"_container_\",\"settings\":[\"EGLVisibleDGPUDevices\",{mask:#x}]}}],\"rules\":[{{\"pattern\":[],\"profile\":\"_container_\"}}]}}"
        )
    })
}

/// One rule for the container's device cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CgroupRule {
    /// `c` for character devices, the only kind we grant.
    #[serde(rename = "type")]
    pub kind: char,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Access granted: read and write, never mknod.
    pub access: &'static str,
}

impl fmt::Display for CgroupRule {
    /// The `devices.allow` line, e.g. `c 195:0 rw`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}:{} {}",
            self.kind, self.major, self.minor, self.access
        )
    }
}

/// An entry to add to the image's loader cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoaderEntry {
    /// The name programs load, e.g. `libcuda.so.1`.
    pub soname: String,
    /// The path in the container the loader opens.
    pub path: PathBuf,
    /// The library's architecture.
    pub arch: &'static str,
    /// The `ld.so.cache` flags the loader matches: ELF libc6 plus the architecture bits.
    pub flags: i32,
}

/// A masked `/proc/driver/nvidia`: a tmpfs holding copies of the driver's
/// files, so the container sees only its own GPUs and never recreates nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcMask {
    /// The container directory the tmpfs covers.
    pub path: PathBuf,
    /// Host files copied into the tmpfs: `params`, `version`, `registry`,
    /// and the selected MIG devices' `capabilities/…/access` files.
    pub files: Vec<ProcFile>,
    /// The selected GPUs' host `gpus/<bus>` directories, bound read-only under `gpus/`.
    pub gpus: Vec<(String, PathBuf)>,
}

/// One host file copied into the masked `/proc/driver/nvidia`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcFile {
    /// Its path below the mask.
    pub path: PathBuf,
    /// The host file.
    pub source: PathBuf,
    /// How it is copied.
    pub copy: ProcCopy,
}

/// How a host procfs file is copied into the mask: the plan, not the
/// injector, decides what is rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProcCopy {
    /// As it is; it must exist.
    Verbatim,
    /// As it is, where the driver has it (`registry` is absent on some drivers).
    IfPresent,
    /// `params` with `ModifyDeviceFiles: 0`, so nothing in the container
    /// asks the driver to create device nodes.
    ModifyDeviceFilesOff,
}

/// How device nodes reach the container.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeMode {
    /// `mknod` them: the normal, privileged case.
    #[default]
    Mknod,
    /// Bind-mount the host nodes: a user namespace's `/dev` cannot use nodes it creates.
    Bind,
}

/// A device the request selected, recorded so that later checks
/// (requirements, CDI names) never select a second time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SelectedDevice {
    /// The GPU's index, or the MIG device's parent's.
    pub gpu: u32,
    /// The GPU's `GPU-…` UUID.
    pub uuid: String,
    /// The GPU's PCI bus id.
    pub bus: String,
    /// The MIG device's `MIG-…` UUID, for a MIG device.
    pub mig: Option<String>,
}

impl SelectedDevice {
    /// The record of `device`; none for a MIG device `all` took from
    /// procfs, which has no UUID there and comes with its GPU, recorded.
    fn of(device: &Selected<'_>) -> Option<Self> {
        let gpu = device.gpu();
        let mig = match device {
            Selected::Gpu(_) => None,
            Selected::Mig { mig, .. } => Some(mig.uuid.clone()),
            Selected::Instance { .. } => return None,
        };
        Some(SelectedDevice {
            gpu: gpu.index,
            uuid: gpu.uuid.clone(),
            bus: gpu.bus.clone(),
            mig,
        })
    }
}

/// Everything a container receives.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The devices selected, in the order asked, each once; for `all`,
    /// the GPUs (their MIG devices come with them).
    pub selected: Vec<SelectedDevice>,
    /// How the device nodes reach the container.
    pub node_mode: NodeMode,
    /// Device nodes, control nodes first.
    pub devices: Vec<DeviceNode>,
    /// Bind mounts, in [`MountKind`] order.
    pub mounts: Vec<Mount>,
    /// SONAME and development links next to the libraries.
    pub symlinks: Vec<Symlink>,
    /// Device cgroup rules, one per device node.
    pub cgroup_rules: Vec<CgroupRule>,
    /// The systemd scope that is the container's cgroup, told about
    /// `cgroup_rules` too so that a `daemon-reload` keeps them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub systemd_scope: Option<String>,
    /// Loader-cache entries for the injected libraries.
    pub loader_entries: Vec<LoaderEntry>,
    /// Library directories for the image's `/etc/ld.so.conf.d/` entry.
    pub loader_dirs: Vec<PathBuf>,
    /// The masked `/proc/driver/nvidia`.
    pub proc_mask: Option<ProcMask>,
    /// Small files of ours: the driver's application profile for graphics.
    pub files: Vec<WrittenFile>,
    /// Permission bits set on image entries (`nvidia-cdi-hook chmod`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub modes: Vec<ModeChange>,
    /// Groups the container's process joins: those of group-only nodes it
    /// was given (a render node's), for the runtime wrapper's edits.
    pub additional_gids: Vec<u32>,
}

impl Plan {
    /// Plans what a container with `request` receives on the inventoried
    /// host, its device nodes reaching it as `node_mode` says.
    pub fn build(
        inventory: &Inventory,
        request: &Request,
        image: &Image,
        node_mode: NodeMode,
    ) -> Result<Plan> {
        let mut plan = Plan {
            node_mode,
            ..Plan::default()
        };
        if request.devices == DeviceSelection::Void {
            return Ok(plan);
        }
        if let Some(found) = &inventory.wsl {
            wsl::plan(&mut plan, inventory, found, request)?;
            return Ok(plan);
        }
        if let Some(found) = &inventory.csv {
            csv::plan(&mut plan, inventory, found, request)?;
            return Ok(plan);
        }
        check_core_libraries(inventory, request)?;
        mig::refuse_beside_mig_devices(request)?;
        let devices = select(inventory, &request.devices)?;
        let management = mig::plan(inventory, request, &devices)?;
        plan.selected = devices.iter().filter_map(SelectedDevice::of).collect();
        nodes::plan(&mut plan, inventory, request, &devices, &management)?;
        plan.proc_mask = Some(procmask::plan(inventory, &devices, &management));
        files::plan(&mut plan, inventory, request, image);
        if request.capabilities.contains(Capability::Graphics) {
            let minors = devices.iter().map(|d| d.gpu().minor);
            if let Some(data) = application_profile(minors) {
                plan.files.push(WrittenFile {
                    path: PathBuf::from(APPLICATION_PROFILE),
                    data,
                });
            }
        }
        Ok(plan)
    }

    /// Host paths in listing order: devices, then binaries, libraries, firmware and the rest.
    pub fn host_paths(&self) -> impl Iterator<Item = &Path> {
        let mut mounts: Vec<&Mount> = self.mounts.iter().collect();
        mounts.sort_by_key(|m| m.kind);
        self.devices
            .iter()
            .map(|d| d.host_path.as_path())
            .chain(mounts.into_iter().map(|m| m.source.as_path()))
    }
}

fn check_core_libraries(inventory: &Inventory, request: &Request) -> Result<()> {
    let host = Arch::host();
    for spec in catalog::LIBRARIES
        .iter()
        .filter(|s| s.core && request.capabilities.contains(s.capability))
    {
        if !inventory
            .libraries
            .iter()
            .any(|l| l.prefix == spec.prefix && l.arch == host.name)
        {
            return Err(Error::CoreLibraryMissing {
                capability: spec.capability,
                prefix: spec.prefix,
                version: inventory.driver_version.clone(),
            });
        }
    }
    Ok(())
}

mod csv;
mod files;
mod mig;
mod nodes;
mod procmask;
mod select;
mod wsl;

pub use procmask::whole_driver;
pub use select::{select, Selected};

#[cfg(test)]
pub(crate) mod tests;

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

use crate::driver::{catalog, CapFile, Inventory, Library, Node, NodeRole, NodeState};
use crate::elf::Arch;
use crate::image::{Compat, Image};
use crate::ldcache;
use crate::request::{Capability, DeviceSelection, Request};

/// Why a request cannot be satisfied on this host.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum Error {
    #[error("unknown device {item:?}; this host has: {available}")]
    UnknownDevice { item: String, available: String },
    #[error("NVIDIA_MIG_CONFIG_DEVICES or NVIDIA_MIG_MONITOR_DEVICES asked for, but the driver has no MIG capabilities (capabilities/mig/config, monitor)")]
    NoMigCapabilities,
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
    /// The host node's permission bits, copied.
    pub mode: u32,
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
}

impl MountKind {
    /// Files are read-only; sockets and pipe directories must be writable but never executable.
    pub fn options(self) -> MountOptions {
        match self {
            MountKind::Binary | MountKind::Library | MountKind::Firmware | MountKind::Config => {
                MountOptions {
                    read_only: true,
                    nosuid: true,
                    nodev: true,
                    noexec: false,
                }
            }
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
    /// What it points to: a name in the same directory.
    pub target: PathBuf,
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
    /// Host files copied into the tmpfs, by path below it: `params` (with
    /// `ModifyDeviceFiles: 0`), `version`, `registry`, and the selected MIG
    /// devices' `capabilities/…/access` files.
    pub files: Vec<(PathBuf, PathBuf)>,
    /// The selected GPUs' host `gpus/<bus>` directories, bound read-only under `gpus/`.
    pub gpus: Vec<(String, PathBuf)>,
}

/// Everything a container receives.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Device nodes, control nodes first.
    pub devices: Vec<DeviceNode>,
    /// Bind mounts, in [`MountKind`] order.
    pub mounts: Vec<Mount>,
    /// SONAME and development links next to the libraries.
    pub symlinks: Vec<Symlink>,
    /// Device cgroup rules, one per device node.
    pub cgroup_rules: Vec<CgroupRule>,
    /// Loader-cache entries for the injected libraries.
    pub loader_entries: Vec<LoaderEntry>,
    /// Library directories for the image's `/etc/ld.so.conf.d/` entry.
    pub loader_dirs: Vec<PathBuf>,
    /// The masked `/proc/driver/nvidia`.
    pub proc_mask: Option<ProcMask>,
}

impl Plan {
    /// Plans what a container with `request` receives on the inventoried host.
    pub fn build(inventory: &Inventory, request: &Request, image: &Image) -> Result<Plan> {
        let layout = image.layout;
        if request.devices == DeviceSelection::Void {
            return Ok(Plan::default());
        }
        let caps = &request.capabilities;
        check_core_libraries(inventory, request)?;
        let mut plan = Plan::default();

        let mut nodes = vec![required(
            inventory.node(NodeRole::Control),
            "/dev/nvidiactl",
        )?];
        if caps.contains(Capability::Compute) {
            nodes.push(required(inventory.node(NodeRole::Uvm), "/dev/nvidia-uvm")?);
            nodes.push(required(
                inventory.node(NodeRole::UvmTools),
                "/dev/nvidia-uvm-tools",
            )?);
        }
        if caps.contains(Capability::Display) {
            nodes.push(required(
                inventory.node(NodeRole::Modeset),
                "/dev/nvidia-modeset",
            )?);
        }
        let mut files: Vec<(PathBuf, PathBuf)> = ["params", "version", "registry"]
            .into_iter()
            .map(|name| (PathBuf::from(name), inventory.proc_dir.join(name)))
            .collect();
        let mut gpu_dirs: Vec<(String, PathBuf)> = Vec::new();
        for device in select(inventory, &request.devices)? {
            let gpu = device.gpu();
            let path = PathBuf::from(format!("/dev/nvidia{}", gpu.minor));
            nodes.push(required(inventory.node_at(&path), &path.to_string_lossy())?);
            if !gpu_dirs.iter().any(|(bus, _)| *bus == gpu.bus) {
                gpu_dirs.push((
                    gpu.bus.clone(),
                    inventory.proc_dir.join("gpus").join(&gpu.bus),
                ));
            }
            if let Selected::Mig { mig, .. } = device {
                for cap in [&mig.gi_access, &mig.ci_access] {
                    nodes.push(capability_node(inventory, cap)?);
                    files.push((cap.rel.clone(), cap.path.clone()));
                }
            }
        }
        for (wanted, cap) in [
            (request.mig_config, &inventory.mig_config),
            (request.mig_monitor, &inventory.mig_monitor),
        ] {
            if wanted {
                let cap = cap.as_ref().ok_or(Error::NoMigCapabilities)?;
                nodes.push(capability_node(inventory, cap)?);
                files.push((cap.rel.clone(), cap.path.clone()));
            }
        }
        // Two MIG devices of one GPU share its node.
        let mut seen = Vec::new();
        nodes.retain(|(node, _)| {
            let new = !seen.contains(&node.path);
            seen.push(node.path.clone());
            new
        });
        plan.proc_mask = Some(ProcMask {
            path: PathBuf::from("/proc/driver/nvidia"),
            files,
            gpus: gpu_dirs,
        });
        for (node, mode) in nodes {
            plan.cgroup_rules.push(CgroupRule {
                kind: 'c',
                major: node.major,
                minor: node.minor,
                access: "rw",
            });
            plan.devices.push(DeviceNode {
                host_path: node.host_path.clone(),
                path: node.path.clone(),
                major: node.major,
                minor: node.minor,
                mode,
            });
        }

        for file in inventory
            .binaries
            .iter()
            .filter(|f| f.capability.is_some_and(|c| caps.contains(c)))
        {
            plan.mount(MountKind::Binary, &file.path, file.destination.clone());
        }
        let host = Arch::host();
        let archs: Vec<Arch> = [
            Some(host),
            caps.contains(Capability::Compat32)
                .then(|| host.compat32())
                .flatten(),
        ]
        .into_iter()
        .flatten()
        .collect();
        for arch in &archs {
            let dir = layout.lib_dir(*arch);
            let libs = inventory
                .libraries
                .iter()
                .filter(|l| l.arch == arch.name && caps.contains(l.capability));
            for lib in libs {
                plan.add_library(lib, *arch, dir);
            }
            if plan.loader_entries.iter().any(|e| e.arch == arch.name) {
                plan.loader_dirs.push(dir.to_path_buf());
            }
        }
        if let Some(compat) = &image.compat {
            plan.prefer_compat(inventory, caps, compat);
        }
        for file in &inventory.firmware {
            plan.mount(MountKind::Firmware, &file.path, file.destination.clone());
        }
        for file in inventory
            .configs
            .iter()
            .filter(|f| f.capability.is_some_and(|c| caps.contains(c)))
        {
            plan.mount(MountKind::Config, &file.path, file.destination.clone());
        }
        for ipc in inventory
            .ipcs
            .iter()
            .filter(|i| caps.contains(i.capability))
        {
            let kind = match ipc.kind {
                catalog::IpcKind::Socket => MountKind::Socket,
                catalog::IpcKind::Directory => MountKind::Directory,
            };
            plan.mount(kind, &ipc.path, ipc.destination.clone());
        }
        Ok(plan)
    }

    /// Puts the image's newer CUDA forward-compatibility libraries ahead of
    /// the host's in the loader cache and configuration. They stay the
    /// image's files: only their paths are written, nothing is mounted.
    fn prefer_compat(
        &mut self,
        inventory: &Inventory,
        caps: &crate::request::Capabilities,
        compat: &Compat,
    ) {
        let host = Arch::host();
        let entries: Vec<LoaderEntry> = inventory
            .libraries
            .iter()
            .filter(|l| l.arch == host.name && caps.contains(l.capability))
            .filter_map(|lib| {
                let file = format!("{}.{}", lib.prefix, compat.driver_version);
                compat.files.contains(&file).then(|| LoaderEntry {
                    soname: lib.soname.clone(),
                    path: compat.dir.join(&file),
                    arch: host.name,
                    flags: ldcache::FLAG_ELF_LIBC6 | host.cache_flags,
                })
            })
            .collect();
        if entries.is_empty() {
            return;
        }
        // The cache is sorted stably: among equal names, ours listed first win.
        self.loader_entries.splice(0..0, entries);
        self.loader_dirs.insert(0, compat.dir.clone());
    }

    fn mount(&mut self, kind: MountKind, source: &Path, destination: PathBuf) {
        self.mounts.push(Mount {
            kind,
            source: source.to_path_buf(),
            destination,
            options: kind.options(),
        });
    }

    /// Mounts a library under its host basename and links its SONAME and development name to it.
    fn add_library(&mut self, lib: &Library, arch: Arch, dir: &Path) {
        let Some(basename) = lib.path.file_name() else {
            return;
        };
        self.mount(MountKind::Library, &lib.path, dir.join(basename));
        if lib.soname.as_str() != basename {
            self.symlinks.push(Symlink {
                path: dir.join(&lib.soname),
                target: PathBuf::from(basename),
            });
        }
        if lib.prefix != lib.soname {
            self.symlinks.push(Symlink {
                path: dir.join(lib.prefix),
                target: PathBuf::from(&lib.soname),
            });
        }
        self.loader_entries.push(LoaderEntry {
            soname: lib.soname.clone(),
            path: dir.join(&lib.soname),
            arch: lib.arch,
            flags: ldcache::FLAG_ELF_LIBC6 | arch.cache_flags,
        });
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

/// The `nvidia-capN` node a capability file grants.
fn capability_node<'a>(inventory: &'a Inventory, cap: &CapFile) -> Result<(&'a Node, u32)> {
    let path = format!("/dev/nvidia-caps/nvidia-cap{}", cap.minor);
    let node = inventory
        .nodes
        .iter()
        .find(|n| n.role == NodeRole::Capability && n.minor == cap.minor);
    required(node, &path)
}

/// A node that must be usable, with its permission bits.
fn required<'a>(node: Option<&'a Node>, path: &str) -> Result<(&'a Node, u32)> {
    let node = node.ok_or_else(|| Error::NodeUnusable {
        path: PathBuf::from(path),
        problem: "not known to the driver".into(),
    })?;
    match &node.state {
        NodeState::Ok { mode } => Ok((node, *mode)),
        NodeState::Missing => Err(Error::NodeUnusable {
            path: node.host_path.clone(),
            problem: "it does not exist".into(),
        }),
        NodeState::Wrong(problem) => Err(Error::NodeUnusable {
            path: node.host_path.clone(),
            problem: problem.clone(),
        }),
    }
}

mod select;

pub use select::{select, Selected};

#[cfg(test)]
mod tests;

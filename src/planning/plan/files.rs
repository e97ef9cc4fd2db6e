//! Plans the host files a container gets: binaries, libraries (bind
//! mounts, SONAME and development links, loader-cache entries), CUDA
//! compat preference, firmware, graphics configs and daemon sockets, the
//! X server modules and the GBM backend link, the feature-gated devices'
//! files. Every source is a file discovery found inside the driver root.

use std::path::{Path, PathBuf};

use super::{LoaderEntry, Mount, MountKind, Plan, Symlink};
use crate::host::driver::{catalog, Inventory, Library};
use crate::host::elf::Arch;
use crate::host::ldcache;
use crate::planning::device_class::{Class, FileKind};
use crate::planning::image::{Compat, Image};
use crate::planning::request::{Capabilities, Capability, Request};

/// Adds every host file that `request` brings to `plan`, placed for `image`.
pub(super) fn plan(plan: &mut Plan, inventory: &Inventory, request: &Request, image: &Image) {
    let caps = &request.capabilities;
    // A capability's programs come only when it was named: `video` brings
    // compute's libraries but not the MPS programs (NVIDIA's OPT:88-89).
    for file in inventory
        .binaries
        .iter()
        .filter(|f| f.capability.is_some_and(|c| caps.named(c)))
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
        let dir = image.layout.lib_dir(*arch);
        let libs = inventory
            .libraries
            .iter()
            .filter(|l| l.arch == arch.name && l.wanted_by(caps));
        for lib in libs {
            plan.add_library(lib, *arch, dir);
            // GBM loads its backend by this name (NVIDIA's graphics
            // libraries hook): the allocator's SONAME, from `gbm/`.
            if lib.prefix == catalog::ALLOCATOR && caps.contains(Capability::Graphics) {
                plan.symlinks.push(Symlink {
                    path: dir.join(catalog::GBM_BACKEND),
                    target: Path::new("..").join(&lib.soname),
                });
            }
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
        // The X server loads the GLX module by its unversioned name.
        let versioned = format!("{}.{}", catalog::GLX_SERVER, inventory.driver_version);
        if file
            .destination
            .file_name()
            .is_some_and(|n| *n == *versioned)
        {
            plan.symlinks.push(Symlink {
                path: file.destination.with_file_name(catalog::GLX_SERVER),
                target: PathBuf::from(versioned),
            });
        }
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
    // Last: a file the capabilities brought already is not mounted twice.
    gated(plan, inventory, request);
}

/// The files the enabled feature-gated devices bring beside their nodes, as
/// NVIDIA's discoverers add them: GDS's udev database and `cufile.json`,
/// only where the host has a GDS node (gds.go); the fabric manager's socket
/// with NVSwitch.
fn gated(plan: &mut Plan, inventory: &Inventory, request: &Request) {
    let has_node = |class| {
        plan.devices.iter().any(|d| {
            inventory
                .nodes
                .iter()
                .any(|n| n.role.class() == Some(class) && n.path == d.path)
        })
    };
    let enabled = |class: Class| {
        request.gated.contains(class) && (!class.row().files_need_node || has_node(class))
    };
    let files: Vec<_> = inventory
        .gated_files
        .iter()
        .filter(|f| enabled(f.gate))
        .collect();
    for file in files {
        let kind = match file.kind {
            FileKind::Directory => MountKind::State,
            FileKind::File => MountKind::Config,
            FileKind::Socket => MountKind::Socket,
        };
        if !plan
            .mounts
            .iter()
            .any(|m| m.destination == file.destination)
        {
            plan.mount(kind, &file.path, file.destination.clone());
        }
    }
}

impl Plan {
    /// Puts the image's newer CUDA forward-compatibility libraries ahead of
    /// the host's in the loader cache and configuration. They stay the
    /// image's files: only their paths are written, nothing is mounted.
    fn prefer_compat(&mut self, inventory: &Inventory, caps: &Capabilities, compat: &Compat) {
        let host = Arch::host();
        let entries: Vec<LoaderEntry> = inventory
            .libraries
            .iter()
            .filter(|l| l.arch == host.name && l.wanted_by(caps))
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

    pub(super) fn mount(&mut self, kind: MountKind, source: &Path, destination: PathBuf) {
        self.mounts.push(Mount {
            kind,
            source: source.to_path_buf(),
            destination,
            options: kind.options(),
        });
    }

    /// Mounts a library under its host basename and links its SONAME and development name to it.
    pub(super) fn add_library(&mut self, lib: &Library, arch: Arch, dir: &Path) {
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
                path: dir.join(&lib.prefix),
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
}

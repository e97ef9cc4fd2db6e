//! Plans what a container gets on a WSL2 host: `/dev/dxg` with its cgroup
//! rule, every file NVIDIA's `wsl` mode injects mounted at its own path (the
//! driver store's libraries find their siblings there), each library's
//! SONAME in the loader cache, the driver store and `/usr/lib/wsl/lib` in
//! the loader's configuration, and `/usr/bin/nvidia-smi` linked to the
//! driver store's, as NVIDIA's mode does. Windows' driver serves every GPU
//! through the one node: a container gets all of them or, for `none`, the
//! files alone.

use std::path::PathBuf;

use super::nodes::{add_node, required};
use super::{Error, LoaderEntry, Mount, MountKind, Plan, Result, Symlink};
use crate::host::driver::wsl::{self, Wsl, WslKind};
use crate::host::driver::{Inventory, NodeRole};
use crate::host::elf::Arch;
use crate::host::ldcache;
use crate::planning::request::{DeviceSelection, Request};

/// Where NVIDIA's mode links the driver store's `nvidia-smi`.
const SMI_LINK: &str = "/usr/bin/nvidia-smi";

/// Adds a WSL2 host's nodes and files for `request` to `plan`.
pub(super) fn plan(
    plan: &mut Plan,
    inventory: &Inventory,
    found: &Wsl,
    request: &Request,
) -> Result<()> {
    let with_dxg = match &request.devices {
        DeviceSelection::Void | DeviceSelection::None => false,
        DeviceSelection::All => true,
        DeviceSelection::List(ids) => {
            return Err(Error::UnknownDevice {
                item: ids
                    .iter()
                    .map(|id| id.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                available: "all (a WSL2 host shows Linux its GPUs only through /dev/dxg, \
                            which serves every one of them)"
                    .into(),
            })
        }
    };
    check_core(inventory, found, request)?;
    if with_dxg {
        let (node, mode) = required(inventory.node(NodeRole::Dxg), "/dev/dxg")?;
        add_node(plan, node.clone(), mode);
    }
    let host = Arch::host();
    for file in &found.files {
        let kind = match file.kind {
            WslKind::Program => MountKind::Binary,
            WslKind::Library | WslKind::Data => MountKind::Library,
        };
        plan.mounts.push(Mount {
            kind,
            source: file.path.clone(),
            destination: file.destination.clone(),
            options: kind.options(),
        });
        if file.kind == WslKind::Program && file.name == "nvidia-smi" {
            plan.symlinks.push(Symlink {
                path: PathBuf::from(SMI_LINK),
                target: file.destination.clone(),
            });
        }
        if let (WslKind::Library, Some(soname)) = (file.kind, file.soname) {
            plan.loader_entries.push(LoaderEntry {
                soname: soname.to_string(),
                path: file.destination.clone(),
                arch: host.name,
                flags: ldcache::FLAG_ELF_LIBC6 | host.cache_flags,
            });
        }
    }
    plan.loader_dirs.extend(found.loader_dirs());
    Ok(())
}

/// Refuses a request whose capabilities lack a WSL file they cannot work
/// without: libdxcore always, libcuda for compute, libnvidia-ml for utility.
fn check_core(inventory: &Inventory, found: &Wsl, request: &Request) -> Result<()> {
    let caps = &request.capabilities;
    for spec in wsl::FILES.iter().filter(|s| s.core) {
        let needed = spec.name == "libdxcore.so" || caps.contains(spec.capability);
        if needed && found.missing.contains(&spec.name) {
            return Err(Error::CoreLibraryMissing {
                // libdxcore is named for the capability asked, whichever it is.
                capability: if caps.contains(spec.capability) {
                    spec.capability
                } else {
                    caps.iter().next().unwrap_or(spec.capability)
                },
                prefix: spec.prefix,
                version: inventory.driver_version.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::host::driver::wsl::WslFile;
    use crate::host::driver::{Node, NodeProblem, NodeState};
    use crate::planning::image::ImageLayout;
    use crate::planning::plan::tests::{inventory, request};
    use crate::planning::plan::NodeMode;

    const STORE: &str = "/usr/lib/wsl/drivers/nv_dispi.inf_amd64_0123456789abcdef";

    fn file(name: &'static str, kind: WslKind, soname: Option<&'static str>, dir: &str) -> WslFile {
        WslFile {
            name,
            kind,
            soname,
            path: Path::new("/sim/driver").join(&dir[1..]).join(name),
            destination: Path::new(dir).join(name),
        }
    }

    /// A WSL2 host: /dev/dxg (10:61), libcuda and nvidia-smi in the driver
    /// store, libdxcore in /usr/lib/wsl/lib, no libnvidia-ml.
    fn wsl_inventory(dxg: NodeState) -> Inventory {
        let found = Wsl {
            store: STORE.into(),
            files: vec![
                file(
                    "libcuda.so.1.1",
                    WslKind::Library,
                    Some("libcuda.so.1"),
                    STORE,
                ),
                file(
                    "libdxcore.so",
                    WslKind::Library,
                    Some("libdxcore.so"),
                    wsl::LIB_DIR,
                ),
                file("nvcubins.bin", WslKind::Data, None, STORE),
                file("nvidia-smi", WslKind::Program, None, STORE),
            ],
            missing: vec!["libnvidia-ml.so.1"],
        };
        Inventory {
            driver_version: "nv_dispi.inf_amd64_0123456789abcdef".into(),
            gpus: Vec::new(),
            nodes: vec![Node {
                role: NodeRole::Dxg,
                path: "/dev/dxg".into(),
                host_path: "/sim/dev/dxg".into(),
                major: 10,
                minor: 61,
                state: dxg,
            }],
            wsl: Some(found),
            ..inventory()
        }
    }

    fn build(inventory: &Inventory, devices: &str, caps: &str) -> Result<Plan> {
        Plan::build(
            inventory,
            &request(devices, caps),
            &ImageLayout::Debian.into(),
            NodeMode::Mknod,
        )
    }

    #[test]
    fn all_gets_dxg_with_its_rule_and_every_file_at_its_own_path() {
        let inventory = wsl_inventory(NodeState::Ok {
            mode: 0o666,
            gid: 0,
        });
        let plan = build(&inventory, "all", "compute").unwrap();
        let devices: Vec<_> = plan
            .devices
            .iter()
            .map(|d| (d.path.clone(), d.major, d.minor))
            .collect();
        assert_eq!(devices, vec![(PathBuf::from("/dev/dxg"), 10, 61)]);
        assert_eq!(
            plan.cgroup_rules
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>(),
            ["c 10:61 rw"]
        );
        let mounts: Vec<_> = plan
            .mounts
            .iter()
            .map(|m| (m.kind, m.destination.clone()))
            .collect();
        assert_eq!(
            mounts,
            vec![
                (MountKind::Library, Path::new(STORE).join("libcuda.so.1.1")),
                (
                    MountKind::Library,
                    Path::new(wsl::LIB_DIR).join("libdxcore.so")
                ),
                (MountKind::Library, Path::new(STORE).join("nvcubins.bin")),
                (MountKind::Binary, Path::new(STORE).join("nvidia-smi")),
            ]
        );
        let entries: Vec<_> = plan
            .loader_entries
            .iter()
            .map(|e| (e.soname.as_str(), e.path.clone()))
            .collect();
        assert_eq!(
            entries,
            vec![
                ("libcuda.so.1", Path::new(STORE).join("libcuda.so.1.1")),
                ("libdxcore.so", Path::new(wsl::LIB_DIR).join("libdxcore.so")),
            ]
        );
        assert_eq!(
            plan.loader_dirs,
            vec![PathBuf::from(STORE), PathBuf::from(wsl::LIB_DIR)]
        );
        assert_eq!(
            plan.symlinks,
            vec![Symlink {
                path: SMI_LINK.into(),
                target: Path::new(STORE).join("nvidia-smi")
            }]
        );
        assert_eq!(
            plan.proc_mask, None,
            "WSL has no /proc/driver/nvidia to mask"
        );
    }

    #[test]
    fn none_gets_the_files_without_dxg() {
        let plan = build(
            &wsl_inventory(NodeState::Ok {
                mode: 0o666,
                gid: 0,
            }),
            "none",
            "compute",
        )
        .unwrap();
        assert!(
            plan.devices.is_empty() && plan.cgroup_rules.is_empty(),
            "{plan:?}"
        );
        assert_eq!(plan.mounts.len(), 4);
    }

    #[test]
    fn a_gpu_by_index_a_missing_core_file_or_a_bad_dxg_is_refused_by_name() {
        let inventory = wsl_inventory(NodeState::Ok {
            mode: 0o666,
            gid: 0,
        });
        let err = build(&inventory, "0", "compute").unwrap_err();
        assert!(
            matches!(&err, Error::UnknownDevice { item, available } if item == "0" && available.starts_with("all")),
            "{err}"
        );
        let err = build(&inventory, "all", "utility").unwrap_err();
        assert!(
            matches!(
                err,
                Error::CoreLibraryMissing {
                    prefix: "libnvidia-ml.so",
                    capability: crate::planning::request::Capability::Utility,
                    ..
                }
            ),
            "{err}"
        );
        let bad = wsl_inventory(NodeState::Wrong(NodeProblem::NotCharDevice("regular file")));
        let err = build(&bad, "all", "compute").unwrap_err();
        assert!(
            matches!(&err, Error::NodeUnusable { path, .. } if path == Path::new("/sim/dev/dxg")),
            "{err}"
        );
    }
}

use std::path::{Path, PathBuf};

use super::*;
use crate::host::driver::catalog::IpcKind;
use crate::host::driver::{Gpu, HostFile, Ipc, Library, Node, NodeProblem, NodeRole, NodeState};
use crate::planning::device_class::{Class, FileKind};
use crate::planning::image::{Image, ImageLayout};
use crate::planning::request::{Capabilities, ImexChannels};

/// The device class `list --enable` names `name`.
fn class(name: &str) -> Class {
    Class::named(name).expect("a device class")
}

/// The role of a node of the device class `name`.
fn gated(name: &str) -> NodeRole {
    NodeRole::Gated(class(name))
}

fn node(role: NodeRole, name: &str, major: u32, minor: u32, state: NodeState) -> Node {
    Node {
        role,
        path: PathBuf::from("/dev").join(name),
        host_path: PathBuf::from("/sim/dev").join(name),
        major,
        minor,
        state,
    }
}

fn ok() -> NodeState {
    NodeState::Ok {
        mode: 0o666,
        gid: 0,
    }
}

fn lib(capability: Capability, prefix: &'static str, soname: &str, arch: &'static str) -> Library {
    let dir = if arch == "i386" {
        "i386-linux-gnu"
    } else {
        "x86_64-linux-gnu"
    };
    Library {
        capability: Some(capability),
        prefix: prefix.into(),
        soname: soname.into(),
        arch,
        path: PathBuf::from(format!("/sim/driver/usr/lib/{dir}/{prefix}.535.261.03")),
    }
}

/// Three GPUs whose minors differ from their PCI-order indices.
pub(crate) fn inventory() -> Inventory {
    let gpus: Vec<Gpu> = [
        ("0000:1b:00.0", 2),
        ("0000:3b:00.0", 0),
        ("0000:db:00.0", 1),
    ]
    .into_iter()
    .enumerate()
    .map(|(index, (bus, minor))| Gpu {
        index: index as u32,
        minor,
        model: "NVIDIA H100 80GB HBM3".into(),
        uuid: format!("GPU-0000000{index}-0000-0000-0000-000000000000"),
        bus: bus.into(),
    })
    .collect();
    let mut nodes = vec![
        node(NodeRole::Control, "nvidiactl", 195, 255, ok()),
        node(
            NodeRole::Modeset,
            "nvidia-modeset",
            195,
            254,
            NodeState::Missing,
        ),
        node(NodeRole::Uvm, "nvidia-uvm", 511, 0, ok()),
        node(NodeRole::UvmTools, "nvidia-uvm-tools", 511, 1, ok()),
    ];
    for gpu in &gpus {
        nodes.push(node(
            NodeRole::Gpu,
            &format!("nvidia{}", gpu.minor),
            195,
            gpu.minor,
            ok(),
        ));
    }
    Inventory {
        driver_version: "535.261.03".into(),
        gpus,
        nodes,
        libraries: vec![
            lib(
                Capability::Utility,
                "libnvidia-ml.so",
                "libnvidia-ml.so.1",
                "x86_64",
            ),
            lib(Capability::Compute, "libcuda.so", "libcuda.so.1", "x86_64"),
            lib(Capability::Compute, "libcuda.so", "libcuda.so.1", "i386"),
            lib(
                Capability::Graphics,
                "libnvidia-eglcore.so",
                "libnvidia-eglcore.so.535.261.03",
                "x86_64",
            ),
        ],
        missing_libraries: Vec::new(),
        binaries: vec![
            HostFile {
                capability: Some(Capability::Utility),
                path: "/sim/driver/usr/lib/nvidia/current/nvidia-smi".into(),
                destination: "/usr/bin/nvidia-smi".into(),
            },
            HostFile {
                capability: Some(Capability::Compute),
                path: "/sim/driver/usr/bin/nvidia-cuda-mps-control".into(),
                destination: "/usr/bin/nvidia-cuda-mps-control".into(),
            },
        ],
        missing_binaries: Vec::new(),
        firmware: vec![HostFile {
            capability: None,
            path: "/sim/driver/lib/firmware/nvidia/535.261.03/gsp_ga10x.bin".into(),
            destination: "/lib/firmware/nvidia/535.261.03/gsp_ga10x.bin".into(),
        }],
        ipcs: vec![Ipc {
            capability: Capability::Utility,
            kind: IpcKind::Socket,
            path: "/sim/driver/run/nvidia-persistenced/socket".into(),
            destination: "/run/nvidia-persistenced/socket".into(),
        }],
        configs: Vec::new(),
        scope: Capabilities::all(),
        proc_dir: "/sim/proc/driver/nvidia".into(),
        mig: None,
        mig_instances: Vec::new(),
        nvml: None,
        mig_config: None,
        mig_monitor: None,
        imex_major: Some(234),
        drm: Vec::new(),
        gated_files: Vec::new(),
        wsl: None,
        csv: None,
    }
}

pub(crate) fn request(devices: &str, caps: &str) -> Request {
    Request::new(
        DeviceSelection::parse(Some(devices)).unwrap(),
        Capabilities::parse(caps).unwrap(),
    )
}

fn plan(devices: &str, caps: &str) -> Result<Plan> {
    Plan::build(
        &inventory(),
        &request(devices, caps),
        &ImageLayout::Debian.into(),
        NodeMode::Mknod,
    )
}

fn device_paths(plan: &Plan) -> Vec<String> {
    plan.devices
        .iter()
        .map(|d| d.path.display().to_string())
        .collect()
}

#[test]
fn void_request_gets_nothing() {
    let req = Request::new(DeviceSelection::Void, Capabilities::all());
    assert_eq!(
        Plan::build(
            &inventory(),
            &req,
            &ImageLayout::Debian.into(),
            NodeMode::Mknod
        )
        .unwrap(),
        Plan::default()
    );
}

#[test]
fn index_selects_by_pci_order_and_node_by_minor() {
    let plan = plan("0", "utility").unwrap();
    // GPU index 0 is bus 1b, whose device minor is 2.
    assert_eq!(device_paths(&plan), ["/dev/nvidiactl", "/dev/nvidia2"]);
    let rules: Vec<String> = plan.cgroup_rules.iter().map(|r| r.to_string()).collect();
    assert_eq!(rules, ["c 195:255 rw", "c 195:2 rw"]);
}

#[test]
fn uuid_and_bus_select_the_same_gpu_once() {
    let plan = plan(
        "GPU-00000001-0000-0000-0000-000000000000,3b:00.0,1",
        "utility",
    )
    .unwrap();
    assert_eq!(device_paths(&plan), ["/dev/nvidiactl", "/dev/nvidia0"]);
}

#[test]
fn compute_brings_uvm_nodes() {
    let plan = plan("all", "compute").unwrap();
    assert_eq!(
        device_paths(&plan),
        [
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidia2",
            "/dev/nvidia0",
            "/dev/nvidia1"
        ]
    );
    assert!(plan.cgroup_rules.contains(&CgroupRule {
        kind: 'c',
        major: 511,
        minor: 1,
        access: "rw"
    }));
}

#[test]
fn none_gets_control_node_and_files_but_no_gpu() {
    let plan = plan("none", "utility").unwrap();
    assert_eq!(device_paths(&plan), ["/dev/nvidiactl"]);
    assert!(plan.mounts.iter().any(|m| m.kind == MountKind::Library));
}

#[test]
fn unknown_device_lists_what_exists() {
    let err = plan("7", "utility").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("\"7\""), "{text}");
    assert!(
        text.contains("0 (GPU-00000000-0000-0000-0000-000000000000, 0000:1b:00.0)"),
        "{text}"
    );
}

#[test]
fn missing_node_is_an_error_naming_it() {
    let err = plan("all", "display").unwrap_err();
    assert_eq!(
        err,
        Error::NodeUnusable {
            path: "/sim/dev/nvidia-modeset".into(),
            problem: "it does not exist".into()
        }
    );
}

#[test]
fn wrong_gpu_node_is_an_error() {
    let mut inv = inventory();
    inv.nodes[4].state = NodeState::Wrong(NodeProblem::Numbers {
        found_major: 1,
        found_minor: 3,
        major: 195,
        minor: 2,
    });
    let err = Plan::build(
        &inv,
        &request("0", "utility"),
        &ImageLayout::Debian.into(),
        NodeMode::Mknod,
    )
    .unwrap_err();
    assert!(err.to_string().contains("1:3"), "{err}");
}

#[test]
fn missing_core_library_is_an_error_for_its_capability_only() {
    let mut inv = inventory();
    inv.libraries
        .retain(|l| l.prefix != "libcuda.so" || l.arch != "x86_64");
    let err = Plan::build(
        &inv,
        &request("all", "compute"),
        &ImageLayout::Debian.into(),
        NodeMode::Mknod,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::CoreLibraryMissing {
                prefix: "libcuda.so",
                ..
            }
        ),
        "{err}"
    );
    Plan::build(
        &inv,
        &request("all", "utility"),
        &ImageLayout::Debian.into(),
        NodeMode::Mknod,
    )
    .unwrap();
}

#[test]
fn libraries_keep_host_basename_and_get_soname_and_dev_links() {
    let plan = plan("0", "compute").unwrap();
    let libs: Vec<_> = plan
        .mounts
        .iter()
        .filter(|m| m.kind == MountKind::Library)
        .collect();
    assert_eq!(libs.len(), 1);
    assert_eq!(
        libs[0].destination,
        Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03")
    );
    assert_eq!(libs[0].options.names(), ["ro", "nosuid", "nodev"]);
    assert_eq!(
        plan.symlinks,
        [
            Symlink {
                path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1".into(),
                target: "libcuda.so.535.261.03".into()
            },
            Symlink {
                path: "/usr/lib/x86_64-linux-gnu/libcuda.so".into(),
                target: "libcuda.so.1".into()
            },
        ]
    );
    assert_eq!(
        plan.loader_entries,
        [LoaderEntry {
            soname: "libcuda.so.1".into(),
            path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1".into(),
            arch: "x86_64",
            flags: 0x0303,
        }]
    );
    assert_eq!(
        plan.loader_dirs,
        [PathBuf::from("/usr/lib/x86_64-linux-gnu")]
    );
}

#[test]
fn rpm_layout_uses_lib64() {
    let plan = Plan::build(
        &inventory(),
        &request("0", "compute,compat32"),
        &ImageLayout::Rpm.into(),
        NodeMode::Mknod,
    )
    .unwrap();
    let dests: Vec<_> = plan
        .mounts
        .iter()
        .filter(|m| m.kind == MountKind::Library)
        .map(|m| m.destination.display().to_string())
        .collect();
    assert_eq!(
        dests,
        [
            "/usr/lib64/libcuda.so.535.261.03",
            "/usr/lib/libcuda.so.535.261.03"
        ]
    );
}

#[test]
fn compat32_adds_i386_libraries_in_their_own_directory() {
    let plan = plan("0", "compute").unwrap();
    assert!(!plan.loader_entries.iter().any(|e| e.arch == "i386"));
    let plan = self::plan("0", "compute,compat32").unwrap();
    assert!(plan
        .mounts
        .iter()
        .any(|m| m.destination == Path::new("/usr/lib/i386-linux-gnu/libcuda.so.535.261.03")));
    assert_eq!(plan.loader_dirs.len(), 2);
}

#[test]
fn soname_equal_to_basename_gets_only_a_dev_link() {
    let plan = plan("0", "graphics").unwrap();
    assert_eq!(
        plan.symlinks,
        [Symlink {
            path: "/usr/lib/x86_64-linux-gnu/libnvidia-eglcore.so".into(),
            target: "libnvidia-eglcore.so.535.261.03".into()
        }]
    );
}

#[test]
fn host_paths_list_devices_then_binaries_libraries_firmware_and_sockets() {
    let plan = plan("0", "utility").unwrap();
    let paths: Vec<String> = plan.host_paths().map(|p| p.display().to_string()).collect();
    assert_eq!(
        paths,
        [
            "/sim/dev/nvidiactl",
            "/sim/dev/nvidia2",
            "/sim/driver/usr/lib/nvidia/current/nvidia-smi",
            "/sim/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.261.03",
            "/sim/driver/lib/firmware/nvidia/535.261.03/gsp_ga10x.bin",
            "/sim/driver/run/nvidia-persistenced/socket",
        ]
    );
    let socket = plan
        .mounts
        .iter()
        .find(|m| m.kind == MountKind::Socket)
        .unwrap();
    assert_eq!(socket.options.names(), ["rw", "nosuid", "nodev", "noexec"]);
}

#[test]
fn plan_serialises_destinations_and_options() {
    let json = serde_json::to_value(plan("0", "utility").unwrap()).unwrap();
    assert_eq!(json["mounts"][0]["destination"], "/usr/bin/nvidia-smi");
    assert_eq!(
        json["mounts"][0]["options"],
        serde_json::json!(["ro", "nosuid", "nodev"])
    );
    assert_eq!(json["devices"][1]["path"], "/dev/nvidia2");
    assert_eq!(json["cgroup_rules"][1]["type"], "c");
}

#[test]
fn proc_mask_holds_driver_files_and_selected_gpus_only() {
    let plan = plan("2", "utility").unwrap();
    let mask = plan.proc_mask.unwrap();
    assert_eq!(mask.path, Path::new("/proc/driver/nvidia"));
    let names: Vec<&str> = mask
        .files
        .iter()
        .map(|f| f.path.to_str().unwrap())
        .collect();
    assert_eq!(names, ["params", "version", "registry"]);
    assert_eq!(
        mask.files[0].source,
        Path::new("/sim/proc/driver/nvidia/params")
    );
    // The plan, not the injector, decides what is rewritten and what may be absent.
    let copies: Vec<ProcCopy> = mask.files.iter().map(|f| f.copy).collect();
    assert_eq!(
        copies,
        [
            ProcCopy::ModifyDeviceFilesOff,
            ProcCopy::Verbatim,
            ProcCopy::IfPresent
        ]
    );
    assert_eq!(
        mask.gpus,
        [(
            "0000:db:00.0".to_string(),
            PathBuf::from("/sim/proc/driver/nvidia/gpus/0000:db:00.0")
        )]
    );
}

#[test]
fn newer_compat_libraries_come_first_in_the_loader_cache() {
    let image = Image {
        layout: ImageLayout::Debian,
        compat: Some(crate::planning::image::Compat {
            dir: "/usr/local/cuda/compat".into(),
            driver_version: "550.54.15".into(),
            cuda: Some(crate::host::driver::CudaVersion(12040)),
            files: vec!["libcuda.so.550.54.15".into()],
        }),
    };
    let plan = Plan::build(
        &inventory(),
        &request("0", "compute,utility"),
        &image,
        NodeMode::Mknod,
    )
    .unwrap();
    let entries: Vec<(&str, String)> = plan
        .loader_entries
        .iter()
        .map(|e| (e.soname.as_str(), e.path.display().to_string()))
        .collect();
    assert_eq!(
        entries[0],
        (
            "libcuda.so.1",
            "/usr/local/cuda/compat/libcuda.so.550.54.15".to_string()
        )
    );
    assert!(entries[1..].contains(&(
        "libcuda.so.1",
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1".to_string()
    )));
    assert_eq!(plan.loader_dirs[0], Path::new("/usr/local/cuda/compat"));
    // The image's file is never mounted.
    assert!(!plan
        .mounts
        .iter()
        .any(|m| m.source.starts_with("/usr/local/cuda")));
}

/// NVIDIA's management `all` allows the config (or monitor) node and every
/// MIG minor of the selected MIG-capable GPUs, and binds the whole
/// capabilities directory read-only and /dev/nvidia-caps
/// (libnvidia-container src/cli/common.c:358-371, src/nvc_mount.c
/// `nvc_mig_config_global_caps_mount`, `nvc_device_mig_caps_mount`). Here:
/// the capability, then every GPU and compute instance of the selected GPUs
/// with the nodes the host has, read-only in the masked procfs; never the
/// instances of a GPU not selected.
#[test]
fn mig_management_brings_its_capability_and_the_selected_gpus_instances() {
    let inv = mig_host();
    let mut req = request("1", "utility");
    req.mig_config = true;
    let plan = Plan::build(&inv, &req, &ImageLayout::Debian.into(), NodeMode::Mknod).unwrap();
    // GPU instance 3 has no node on the host: it is left out, not an error.
    assert_eq!(cap_minors(&plan), [1, 12, 13, 21, 22]);
    let rules: Vec<String> = plan.cgroup_rules.iter().map(|r| r.to_string()).collect();
    assert!(rules.contains(&"c 508:1 rw".to_string()), "{rules:?}");
    assert_eq!(
        proc_files(&plan),
        [
            "capabilities/mig/config",
            "capabilities/gpu0/mig/gi1/access",
            "capabilities/gpu0/mig/gi1/ci0/access",
            "capabilities/gpu0/mig/gi2/access",
            "capabilities/gpu0/mig/gi2/ci0/access",
            "capabilities/gpu0/mig/gi3/access",
        ]
    );
    let copies = &plan.proc_mask.as_ref().unwrap().files;
    assert!(copies
        .iter()
        .filter(|f| f.path.starts_with("capabilities"))
        .all(|f| f.copy == ProcCopy::Verbatim));
    req.mig_monitor = true;
    let plan = Plan::build(&inv, &req, &ImageLayout::Debian.into(), NodeMode::Mknod).unwrap();
    assert_eq!(cap_minors(&plan), [1, 2, 12, 13, 21, 22]);
    // `all` and management bring the same files and nodes once.
    let mut req = request("all", "utility");
    req.mig_monitor = true;
    let plan = Plan::build(&inv, &req, &ImageLayout::Debian.into(), NodeMode::Mknod).unwrap();
    assert_eq!(cap_minors(&plan), [12, 13, 21, 22, 147, 148, 2]);
    let files = proc_files(&plan);
    assert_eq!(files.len(), 8, "{files:?}");
    assert!(files.contains(&"capabilities/gpu0/mig/gi3/access".to_string()));
    // A GPU without MIG instances brings the capability alone.
    let mut req = request("0", "utility");
    req.mig_config = true;
    let plan = Plan::build(&inv, &req, &ImageLayout::Debian.into(), NodeMode::Mknod).unwrap();
    assert_eq!(cap_minors(&plan), [1]);
}

/// With no GPU selected NVIDIA mounts nothing for management
/// (src/cli/configure.c: `mig_config_devices.ngpus` is 0), and a driver
/// without MIG capabilities cannot grant them to a GPU.
#[test]
fn mig_management_without_a_gpu_brings_nothing_and_needs_the_drivers_capabilities() {
    let mut inv = mig_host();
    let mut req = request("none", "utility");
    req.mig_config = true;
    req.mig_monitor = true;
    let plan = Plan::build(&inv, &req, &ImageLayout::Debian.into(), NodeMode::Mknod).unwrap();
    assert_eq!(device_paths(&plan), ["/dev/nvidiactl"]);
    assert!(proc_files(&plan).is_empty());
    inv.mig_config = None;
    Plan::build(&inv, &req, &ImageLayout::Debian.into(), NodeMode::Mknod).unwrap();
    let mut req = request("0", "utility");
    req.mig_config = true;
    assert_eq!(
        Plan::build(&inv, &req, &ImageLayout::Debian.into(), NodeMode::Mknod).unwrap_err(),
        Error::NoMigCapabilities
    );
}

/// `capabilities/gpu<minor>/mig/<rel>/access` of the synthetic host, with the
/// 535 driver's minor for it.
fn access(gpu_minor: u32, rel: &str, minor: u32) -> crate::host::driver::CapFile {
    let rel = PathBuf::from(format!("capabilities/gpu{gpu_minor}/mig/{rel}/access"));
    crate::host::driver::CapFile {
        path: Path::new("/sim/proc/driver/nvidia").join(&rel),
        rel,
        minor,
    }
}

/// The synthetic host with MIG on GPU index 1 (minor 0: GPU instances 1
/// and 2 with a compute instance each, and GPU instance 3 without any) and
/// on GPU index 2 (minor 1: one MIG device), as procfs lists them, and the
/// `nvidia-capN` node of every access file but GPU instance 3's.
fn mig_host() -> Inventory {
    use crate::host::driver::{ComputeInstance, GpuInstance};
    let mut inv = inventory();
    let gi = |parent: u32, gpu_minor: u32, id: u32, minor: u32, cis: &[(u32, u32)]| GpuInstance {
        parent,
        id,
        access: access(gpu_minor, &format!("gi{id}"), minor),
        compute: cis
            .iter()
            .map(|&(ci, minor)| ComputeInstance {
                id: ci,
                access: access(gpu_minor, &format!("gi{id}/ci{ci}"), minor),
            })
            .collect(),
    };
    inv.mig_instances = vec![
        gi(1, 0, 1, 12, &[(0, 13)]),
        gi(1, 0, 2, 21, &[(0, 22)]),
        gi(1, 0, 3, 30, &[]),
        gi(2, 1, 1, 147, &[(0, 148)]),
    ];
    for minor in [1, 2, 12, 13, 21, 22, 147, 148] {
        inv.nodes.push(node(
            NodeRole::Capability,
            &format!("nvidia-caps/nvidia-cap{minor}"),
            508,
            minor,
            ok(),
        ));
    }
    inv.mig_config = Some(crate::host::driver::CapFile {
        path: "/sim/proc/driver/nvidia/capabilities/mig/config".into(),
        rel: "capabilities/mig/config".into(),
        minor: 1,
    });
    inv.mig_monitor = Some(crate::host::driver::CapFile {
        path: "/sim/proc/driver/nvidia/capabilities/mig/monitor".into(),
        rel: "capabilities/mig/monitor".into(),
        minor: 2,
    });
    inv
}

fn cap_minors(plan: &Plan) -> Vec<u32> {
    plan.devices
        .iter()
        .filter(|d| d.major == 508)
        .map(|d| d.minor)
        .collect()
}

fn proc_files(plan: &Plan) -> Vec<String> {
    plan.proc_mask
        .as_ref()
        .unwrap()
        .files
        .iter()
        .map(|f| f.path.display().to_string())
        .filter(|p| p.starts_with("capabilities/"))
        .collect()
}

/// NVIDIA's `all` selects every GPU and then every MIG device, and mounts
/// each MIG device's GPU and compute instance access files with their
/// `nvidia-capN` nodes and cgroup rules (libnvidia-container
/// src/cli/common.c:144-154, src/cli/configure.c:371-384,
/// src/nvc_mount.c `nvc_mig_device_access_caps_mount`). A GPU instance
/// without a compute instance is no MIG device.
#[test]
fn all_on_a_mig_host_brings_every_mig_devices_caps_and_access_files() {
    let inv = mig_host();
    let plan = Plan::build(
        &inv,
        &request("all", "utility"),
        &ImageLayout::Debian.into(),
        NodeMode::Mknod,
    )
    .unwrap();
    assert_eq!(
        device_paths(&plan)[..4],
        [
            "/dev/nvidiactl",
            "/dev/nvidia2",
            "/dev/nvidia0",
            "/dev/nvidia1"
        ]
    );
    assert_eq!(cap_minors(&plan), [12, 13, 21, 22, 147, 148]);
    let rules: Vec<String> = plan.cgroup_rules.iter().map(|r| r.to_string()).collect();
    for minor in [12, 13, 21, 22, 147, 148] {
        assert!(rules.contains(&format!("c 508:{minor} rw")), "{rules:?}");
    }
    assert_eq!(
        proc_files(&plan),
        [
            "capabilities/gpu0/mig/gi1/access",
            "capabilities/gpu0/mig/gi1/ci0/access",
            "capabilities/gpu0/mig/gi2/access",
            "capabilities/gpu0/mig/gi2/ci0/access",
            "capabilities/gpu1/mig/gi1/access",
            "capabilities/gpu1/mig/gi1/ci0/access",
        ]
    );
    // The MIG devices come with their GPUs, each GPU recorded once.
    let selected: Vec<u32> = plan.selected.iter().map(|d| d.gpu).collect();
    assert_eq!(selected, [0, 1, 2]);
    assert!(plan.selected.iter().all(|d| d.mig.is_none()));
    // Without MIG, `all` is the GPUs alone, as before.
    assert_eq!(
        cap_minors(&plan_all_utility(&inventory())),
        Vec::<u32>::new()
    );
}

fn plan_all_utility(inv: &Inventory) -> Plan {
    Plan::build(
        inv,
        &request("all", "utility"),
        &ImageLayout::Debian.into(),
        NodeMode::Mknod,
    )
    .unwrap()
}

/// NVIDIA fails when a selected MIG device's node is missing (its bind mount
/// stats the host node, src/nvc_mount.c `cap_device_mount`); so does `all`.
#[test]
fn all_on_a_mig_host_refuses_a_missing_mig_node_naming_it() {
    let mut inv = mig_host();
    inv.nodes
        .retain(|n| n.minor != 22 || n.role != NodeRole::Capability);
    let err = Plan::build(
        &inv,
        &request("all", "utility"),
        &ImageLayout::Debian.into(),
        NodeMode::Mknod,
    )
    .unwrap_err();
    assert!(err.to_string().contains("nvidia-cap22"), "{err}");
}

/// NVIDIA refuses MIG management beside a MIG device ("cannot enable
/// mig-config with specific MIG devices selected", libnvidia-container
/// src/cli/common.c:354-357): one MIG device's holder may not reconfigure
/// or watch its whole GPU. `all` is accepted there.
#[test]
fn mig_management_beside_a_mig_device_is_refused_naming_both() {
    let inv = mig_host();
    for (devices, config) in [
        ("1:0", true),
        ("0,MIG-11111111-2222-3333-4444-555555555555", false),
    ] {
        let mut req = request(devices, "utility");
        req.mig_config = config;
        req.mig_monitor = !config;
        let err =
            Plan::build(&inv, &req, &ImageLayout::Debian.into(), NodeMode::Mknod).unwrap_err();
        let text = err.to_string();
        let variable = if config {
            "NVIDIA_MIG_CONFIG_DEVICES"
        } else {
            "NVIDIA_MIG_MONITOR_DEVICES"
        };
        assert!(text.contains(variable), "{text}");
        let device = devices.rsplit(',').next().unwrap();
        assert!(text.contains(&format!("{device:?}")), "{text}");
        assert!(!text.contains('\n'), "one line: {text}");
    }
    let mut req = request("all", "utility");
    req.mig_config = true;
    Plan::build(&inv, &req, &ImageLayout::Debian.into(), NodeMode::Mknod).unwrap();
}

#[test]
fn video_alone_brings_compute_libraries_but_not_the_mps_programs() {
    // NVIDIA: video sets VIDEO_LIBS and COMPUTE_LIBS, never COMPUTE_BINS
    // (libnvidia-container src/options.h:88-89).
    let video = plan("0", "video").unwrap();
    let sources: Vec<String> = video
        .mounts
        .iter()
        .map(|m| m.source.display().to_string())
        .collect();
    assert!(
        sources.iter().any(|s| s.contains("libcuda.so")),
        "{sources:?}"
    );
    assert!(
        !sources.iter().any(|s| s.contains("nvidia-cuda-mps")),
        "{sources:?}"
    );
    assert!(video.devices.iter().any(|d| d.path.ends_with("nvidia-uvm")));
    let compute = plan("0", "compute").unwrap();
    assert!(compute.mounts.iter().any(|m| m
        .source
        .to_string_lossy()
        .contains("nvidia-cuda-mps-control")));
}

#[test]
fn a_host_without_gpus_selects_none_whatever_the_list_names() {
    // NVIDIA's CLI skips device selection on a host with no GPU
    // (libnvidia-container src/cli/configure.c:309-314).
    let mut inv = inventory();
    inv.gpus.clear();
    let plan = Plan::build(
        &inv,
        &request("0,GPU-00000001-0000-0000-0000-000000000000", "utility"),
        &ImageLayout::Debian.into(),
        NodeMode::Mknod,
    )
    .unwrap();
    assert!(plan.selected.is_empty());
    let nodes: Vec<&Path> = plan.devices.iter().map(|d| d.path.as_path()).collect();
    assert_eq!(nodes, [Path::new("/dev/nvidiactl")]);
}

/// `MIG-GPU-<uuid>/<gi>/<ci>` names a GPU and its instance ids, which
/// procfs lists: it resolves without NVML, to that instance's caps, its
/// GPU's node and its access files, and names no instance twice.
#[test]
fn older_mig_name_resolves_from_procfs_without_nvml() {
    let inv = mig_host();
    assert!(inv.mig.is_none());
    let parent = inv.gpus.iter().find(|g| g.index == 1).unwrap();
    let name = format!("MIG-{}/2/0", parent.uuid);
    let plan = Plan::build(
        &inv,
        &request(&format!("{name},{name}"), "utility"),
        &ImageLayout::Debian.into(),
        NodeMode::Mknod,
    )
    .unwrap();
    assert_eq!(cap_minors(&plan), [21, 22]);
    assert!(device_paths(&plan).contains(&format!("/dev/nvidia{}", parent.minor)));
    assert_eq!(
        proc_files(&plan),
        [
            "capabilities/gpu0/mig/gi2/access",
            "capabilities/gpu0/mig/gi2/ci0/access"
        ]
    );
    let unknown = format!("MIG-{}/3/0", parent.uuid);
    let err = Plan::build(
        &inv,
        &request(&unknown, "utility"),
        &ImageLayout::Debian.into(),
        NodeMode::Mknod,
    )
    .unwrap_err();
    assert!(matches!(err, Error::UnknownDevice { .. }), "{err}");
}

/// The synthetic host with IMEX channels 0 and 1 (2 is absent), an
/// NVSwitch, GDS, MOFED and GDRCopy nodes, and DRM nodes for GPUs 0 and 1.
fn extras_host() -> Inventory {
    let mut inv = inventory();
    for n in inv.nodes.iter_mut().filter(|n| n.role == NodeRole::Modeset) {
        n.state = ok();
    }
    for minor in [0, 1] {
        inv.nodes.push(node(
            NodeRole::ImexChannel,
            &format!("nvidia-caps-imex-channels/channel{minor}"),
            234,
            minor,
            ok(),
        ));
    }
    for (role, name, major, minor) in [
        (gated("nvswitch"), "nvidia-nvswitchctl", 236, 255),
        (gated("nvswitch"), "nvidia-nvswitch0", 236, 0),
        (gated("gds"), "nvidia-fs0", 237, 0),
        (gated("mofed"), "infiniband/uverbs0", 231, 192),
        (gated("mofed"), "infiniband/rdma_cm", 10, 58),
        (gated("gdrcopy"), "gdrdrv", 238, 0),
    ] {
        inv.nodes.push(node(role, name, major, minor, ok()));
    }
    inv.drm = inv.gpus[..2]
        .iter()
        .map(|g| crate::host::driver::GpuDrm {
            bus: g.bus.clone(),
            nodes: vec![
                node(
                    NodeRole::DrmCard,
                    &format!("dri/card{}", g.index + 1),
                    226,
                    g.index + 1,
                    ok(),
                ),
                node(
                    NodeRole::DrmRender,
                    &format!("dri/renderD{}", 128 + g.index),
                    226,
                    128 + g.index,
                    ok(),
                ),
            ],
        })
        .collect();
    inv
}

fn plan_extras(req: &Request, mode: NodeMode) -> Result<Plan> {
    Plan::build(&extras_host(), req, &ImageLayout::Debian.into(), mode)
}

fn rules(plan: &Plan) -> Vec<String> {
    plan.cgroup_rules.iter().map(|r| r.to_string()).collect()
}

#[test]
fn imex_channels_asked_for_come_and_no_other() {
    let mut req = request("0", "utility");
    req.imex = ImexChannels::List(vec![1, 2]);
    let plan = plan_extras(&req, NodeMode::Mknod).unwrap();
    let paths = device_paths(&plan);
    assert!(paths.contains(&"/dev/nvidia-caps-imex-channels/channel1".to_string()));
    // The host has no channel2: made all the same, with the driver's major.
    assert!(paths.contains(&"/dev/nvidia-caps-imex-channels/channel2".to_string()));
    assert!(!paths.contains(&"/dev/nvidia-caps-imex-channels/channel0".to_string()));
    let rules = rules(&plan);
    assert!(rules.contains(&"c 234:1 rw".to_string()), "{rules:?}");
    assert!(rules.contains(&"c 234:2 rw".to_string()), "{rules:?}");
    assert!(!rules.contains(&"c 234:0 rw".to_string()), "{rules:?}");
    // `all`: the host's channels.
    req.imex = ImexChannels::All;
    let plan = plan_extras(&req, NodeMode::Mknod).unwrap();
    let imex: Vec<u32> = plan
        .devices
        .iter()
        .filter(|d| d.major == 234)
        .map(|d| d.minor)
        .collect();
    assert_eq!(imex, [0, 1]);
    // Bound into a user namespace, a channel must exist on the host.
    req.imex = ImexChannels::List(vec![2]);
    let err = plan_extras(&req, NodeMode::Bind).unwrap_err();
    assert!(err.to_string().contains("channel2"), "{err}");
    // A driver without the major refuses any channel.
    let mut inv = extras_host();
    inv.imex_major = None;
    let err = Plan::build(&inv, &req, &ImageLayout::Debian.into(), NodeMode::Mknod).unwrap_err();
    assert!(
        err.to_string().contains("nvidia-caps-imex-channels"),
        "{err}"
    );
}

/// gated.go with nvswitch_test, gds_test, mofed_test, gdrcopy_test: each
/// variable brings its own nodes and nothing else.
#[test]
fn gated_devices_come_only_when_enabled() {
    type Enable = fn(&mut crate::planning::request::Gated);
    let table: &[(Enable, &[&str])] = &[
        (|_| {}, &[]),
        (
            |g| g.insert(class("nvswitch")),
            &["/dev/nvidia-nvswitchctl", "/dev/nvidia-nvswitch0"],
        ),
        (|g| g.insert(class("gds")), &["/dev/nvidia-fs0"]),
        (
            |g| g.insert(class("mofed")),
            &["/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"],
        ),
        (|g| g.insert(class("gdrcopy")), &["/dev/gdrdrv"]),
    ];
    let base = device_paths(&plan_extras(&request("none", "utility"), NodeMode::Mknod).unwrap());
    for (enable, want) in table {
        let mut req = request("none", "utility");
        enable(&mut req.gated);
        let plan = plan_extras(&req, NodeMode::Mknod).unwrap();
        let extra: Vec<String> = device_paths(&plan)
            .into_iter()
            .filter(|p| !base.contains(p))
            .collect();
        assert_eq!(extra, *want);
        assert_eq!(plan.cgroup_rules.len(), plan.devices.len());
    }
}

#[test]
fn graphics_brings_the_selected_gpus_drm_nodes_and_links_only() {
    let plan = plan_extras(&request("1", "graphics"), NodeMode::Mknod).unwrap();
    let paths = device_paths(&plan);
    assert!(paths.contains(&"/dev/dri/card2".to_string()), "{paths:?}");
    assert!(
        paths.contains(&"/dev/dri/renderD129".to_string()),
        "{paths:?}"
    );
    assert!(!paths.contains(&"/dev/dri/card1".to_string()), "{paths:?}");
    let rules = rules(&plan);
    assert!(rules.contains(&"c 226:2 rw".to_string()));
    assert!(!rules.contains(&"c 226:1 rw".to_string()));
    let links: Vec<(String, String)> = plan
        .symlinks
        .iter()
        .filter(|l| l.path.starts_with("/dev/dri"))
        .map(|l| (l.path.display().to_string(), l.target.display().to_string()))
        .collect();
    assert_eq!(
        links,
        [
            (
                "/dev/dri/by-path/pci-0000:3b:00.0-card".into(),
                "../card2".into()
            ),
            (
                "/dev/dri/by-path/pci-0000:3b:00.0-render".into(),
                "../renderD129".into()
            ),
        ]
    );
    // Display brings them too; compute does not; GPU 2 has none.
    let display = device_paths(&plan_extras(&request("1", "display"), NodeMode::Mknod).unwrap());
    assert!(display.contains(&"/dev/dri/card2".to_string()));
    let compute = plan_extras(&request("1", "compute"), NodeMode::Mknod).unwrap();
    assert!(!device_paths(&compute)
        .iter()
        .any(|p| p.starts_with("/dev/dri")));
    assert!(compute
        .symlinks
        .iter()
        .all(|l| !l.path.starts_with("/dev/dri")));
    let none = plan_extras(&request("2", "graphics"), NodeMode::Mknod).unwrap();
    assert!(!device_paths(&none)
        .iter()
        .any(|p| p.starts_with("/dev/dri")));
}

/// The extras host with the files beyond the libraries: an EGL platform
/// (graphics), the X server's modules (display; the GLX module under its
/// versioned name), OpenCL's ICD (compute), the allocator library, and the
/// gated devices' files.
fn files_host() -> Inventory {
    let mut inv = extras_host();
    inv.libraries.push(lib(
        Capability::Compute,
        "libnvidia-allocator.so",
        "libnvidia-allocator.so.1",
        "x86_64",
    ));
    let config = |capability, destination: &str| HostFile {
        capability: Some(capability),
        path: PathBuf::from("/sim/driver").join(&destination[1..]),
        destination: destination.into(),
    };
    inv.configs = vec![
        config(
            Capability::Graphics,
            "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
        ),
        config(
            Capability::Display,
            "/usr/lib/xorg/modules/drivers/nvidia_drv.so",
        ),
        config(
            Capability::Display,
            "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.535.261.03",
        ),
        config(Capability::Compute, "/etc/OpenCL/vendors/nvidia.icd"),
    ];
    let gated = |gate, kind, destination: &str| crate::host::driver::GatedFile {
        gate,
        kind,
        path: PathBuf::from("/sim/driver").join(&destination[1..]),
        destination: destination.into(),
    };
    inv.gated_files = vec![
        gated(class("gds"), FileKind::Directory, "/run/udev"),
        gated(class("gds"), FileKind::File, "/etc/cufile.json"),
        gated(
            class("nvswitch"),
            FileKind::Socket,
            "/run/nvidia-fabricmanager/socket",
        ),
    ];
    inv
}

fn mounted(plan: &Plan, kind: MountKind) -> Vec<String> {
    plan.mounts
        .iter()
        .filter(|m| m.kind == kind)
        .map(|m| m.destination.display().to_string())
        .collect()
}

fn link(plan: &Plan, path: &str) -> Option<String> {
    plan.symlinks
        .iter()
        .find(|l| l.path == Path::new(path))
        .map(|l| l.target.display().to_string())
}

/// graphics_test.go (the graphics libraries' hook: the GBM backend link)
/// and the Xorg discoverer (nvidia_drv.so, libglxserver_nvidia.so and its
/// unversioned link, for display); OpenCL's ICD with compute.
#[test]
fn each_capability_brings_its_files_beyond_the_libraries() {
    const GBM: &str = "/usr/lib/x86_64-linux-gnu/gbm/nvidia-drm_gbm.so";
    const GLX: &str = "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so";
    // Capabilities, the config files mounted, the GBM link's and the GLX link's targets.
    type Case = (
        &'static str,
        &'static [&'static str],
        Option<&'static str>,
        Option<&'static str>,
    );
    let table: &[Case] = &[
        ("utility", &[], None, None),
        ("compute", &["/etc/OpenCL/vendors/nvidia.icd"], None, None),
        (
            "graphics",
            &["/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json"],
            // No allocator without compute: no link that would dangle.
            None,
            None,
        ),
        (
            "graphics,compute",
            &[
                "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
                "/etc/OpenCL/vendors/nvidia.icd",
            ],
            Some("../libnvidia-allocator.so.1"),
            None,
        ),
        (
            "display",
            &[
                "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
                "/usr/lib/xorg/modules/drivers/nvidia_drv.so",
                "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.535.261.03",
            ],
            None,
            Some("libglxserver_nvidia.so.535.261.03"),
        ),
    ];
    for (caps, configs, gbm, glx) in table {
        let plan = Plan::build(
            &files_host(),
            &request("0", caps),
            &ImageLayout::Debian.into(),
            NodeMode::Mknod,
        )
        .unwrap();
        assert_eq!(mounted(&plan, MountKind::Config), *configs, "{caps}");
        assert_eq!(link(&plan, GBM).as_deref(), *gbm, "{caps}");
        assert_eq!(link(&plan, GLX).as_deref(), *glx, "{caps}");
    }
}

/// application_profile_test.go: one profile with graphics, naming the
/// container's GPUs by minor; none without graphics.
#[test]
fn graphics_brings_the_application_profile_of_the_selected_gpus() {
    // GPU indices 1 and 2 have minors 0 and 1 (inventory()).
    let table: &[(&str, &str, Option<&str>)] = &[
        ("1,2", "graphics", Some("0x3")),
        ("0", "display", Some("0x4")),
        ("0", "compute,utility", None),
        ("none", "graphics", None),
    ];
    for (devices, caps, mask) in table {
        let plan = Plan::build(
            &files_host(),
            &request(devices, caps),
            &ImageLayout::Debian.into(),
            NodeMode::Mknod,
        )
        .unwrap();
        let want: Vec<WrittenFile> = mask
            .iter()
            .map(|mask| WrittenFile {
                path: APPLICATION_PROFILE.into(),
                data: format!("{{\"profiles\":[{{\"name\":\"_container_\",\"settings\":[\"EGLVisibleDGPUDevices\",{mask}]}}],\"rules\":[{{\"pattern\":[],\"profile\":\"_container_\"}}]}}"),
            })
            .collect();
        assert_eq!(plan.files, want, "{devices} {caps}");
    }
    assert_eq!(application_profile([64, 100]), None, "minors past the mask");
}

/// gds.go: udev's database and cufile.json only where a GDS node is;
/// the fabric manager's socket with NVSwitch.
#[test]
fn gated_devices_bring_their_files() {
    type Enable = fn(&mut crate::planning::request::Gated);
    let table: &[(Enable, bool, &[&str], &[&str])] = &[
        (|_| {}, true, &[], &[]),
        (
            |g| g.insert(class("gds")),
            true,
            &["/run/udev"],
            &["/etc/cufile.json"],
        ),
        (|g| g.insert(class("gds")), false, &[], &[]),
        (|g| g.insert(class("mofed")), true, &[], &[]),
        (|g| g.insert(class("nvswitch")), true, &[], &[]),
    ];
    for (i, (enable, gds_node, state, configs)) in table.iter().enumerate() {
        let mut inv = files_host();
        if !gds_node {
            inv.nodes.retain(|n| n.role.class() != Some(class("gds")));
        }
        let mut req = request("0", "utility");
        enable(&mut req.gated);
        let plan = Plan::build(&inv, &req, &ImageLayout::Debian.into(), NodeMode::Mknod).unwrap();
        assert_eq!(mounted(&plan, MountKind::State), *state, "case {i}");
        assert_eq!(mounted(&plan, MountKind::Config), *configs, "case {i}");
        let fm = mounted(&plan, MountKind::Socket)
            .contains(&"/run/nvidia-fabricmanager/socket".to_string());
        assert_eq!(fm, req.gated.contains(class("nvswitch")), "case {i}");
        // Utility brings the socket too: it is mounted once.
        let mut with_utility = files_host();
        with_utility.ipcs.push(Ipc {
            capability: Capability::Utility,
            kind: IpcKind::Socket,
            path: "/sim/driver/run/nvidia-fabricmanager/socket".into(),
            destination: "/run/nvidia-fabricmanager/socket".into(),
        });
        let plan = Plan::build(
            &with_utility,
            &req,
            &ImageLayout::Debian.into(),
            NodeMode::Mknod,
        )
        .unwrap();
        let sockets = mounted(&plan, MountKind::Socket);
        let fms = sockets
            .iter()
            .filter(|s| s.ends_with("nvidia-fabricmanager/socket"))
            .count();
        assert_eq!(fms, 1, "case {i}: {sockets:?}");
        for m in plan.mounts.iter().filter(|m| m.kind == MountKind::State) {
            assert!(m.options.read_only && m.options.nodev && m.options.noexec);
        }
    }
}

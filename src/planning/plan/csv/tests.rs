use std::path::{Path, PathBuf};

use super::*;
use crate::host::driver::csv::{ListedFile, ListedLink};
use crate::host::driver::{Library, Node, NodeProblem, NodeState};
use crate::planning::image::ImageLayout;
use crate::planning::plan::tests::{inventory, request};
use crate::planning::plan::NodeMode;

const LIB: &str = "/usr/lib/aarch64-linux-gnu/nvidia";

fn node(name: &str, major: u32, minor: u32, state: NodeState) -> Node {
    Node {
        role: NodeRole::Listed,
        path: Path::new("/dev").join(name),
        host_path: Path::new("/sim/dev").join(name),
        major,
        minor,
        state,
    }
}

fn listed(inner: &str, soname: Option<&str>) -> ListedFile {
    ListedFile {
        host: Path::new("/sim/driver").join(&inner[1..]),
        inner: inner.into(),
        soname: soname.map(str::to_string),
    }
}

/// A Jetson: nvmap and nvhost-ctrl-gpu, libcuda (with its SONAME) and an
/// ICD file, a `sym` entry's link, /usr/local/cuda, the release file.
fn csv_inventory(nvmap: NodeState) -> Inventory {
    let ok = NodeState::Ok {
        mode: 0o666,
        gid: 0,
    };
    let libcuda = listed(&format!("{LIB}/libcuda.so.1.1"), Some("libcuda.so.1"));
    let found = Csv {
        files: vec!["/sim/driver/etc/drivers.csv".into()],
        files_listed: vec![
            libcuda.clone(),
            listed(&format!("{LIB}/nvidia_icd.json"), None),
        ],
        links: vec![
            ListedLink {
                path: format!("{LIB}/libcuda.so").into(),
                target: "libcuda.so.1.1".into(),
            },
            ListedLink {
                path: "/usr/lib/aarch64-linux-gnu/libcuda.so".into(),
                target: "nvidia/libcuda.so".into(),
            },
        ],
        dirs: vec![listed("/usr/local/cuda-12.6", None)],
        skipped: Vec::new(),
        release: Some(listed("/etc/nv_tegra_release", None)),
    };
    Inventory {
        driver_version: String::new(),
        gpus: Vec::new(),
        nodes: vec![
            node("nvmap", 10, 121, nvmap),
            node("nvhost-ctrl-gpu", 508, 0, ok),
        ],
        libraries: vec![Library {
            capability: Some(crate::planning::request::Capability::Compute),
            prefix: "libcuda.so".into(),
            soname: "libcuda.so.1".into(),
            arch: Arch::host().name,
            path: libcuda.host,
        }],
        csv: Some(found),
        ..inventory()
    }
}

fn build(inventory: &Inventory, devices: &str) -> Result<Plan> {
    Plan::build(
        inventory,
        &request(devices, "compute,utility"),
        &ImageLayout::Debian.into(),
        NodeMode::Mknod,
    )
}

fn ok() -> NodeState {
    NodeState::Ok {
        mode: 0o660,
        gid: 44,
    }
}

#[test]
fn all_gets_every_listed_node_and_file_at_its_own_path() {
    let plan = build(&csv_inventory(ok()), "all").unwrap();
    let devices: Vec<_> = plan
        .devices
        .iter()
        .map(|d| (d.path.clone(), d.major, d.minor, d.mode))
        .collect();
    assert_eq!(
        devices,
        vec![
            (PathBuf::from("/dev/nvmap"), 10, 121, 0o660),
            (PathBuf::from("/dev/nvhost-ctrl-gpu"), 508, 0, 0o666)
        ]
    );
    let rules: Vec<String> = plan.cgroup_rules.iter().map(|r| r.to_string()).collect();
    assert_eq!(rules, ["c 10:121 rw", "c 508:0 rw"]);
    let mounts: Vec<_> = plan
        .mounts
        .iter()
        .map(|m| {
            (
                m.kind,
                m.destination.to_str().unwrap().to_string(),
                m.options.read_only,
            )
        })
        .collect();
    assert_eq!(
        mounts,
        vec![
            (MountKind::Library, format!("{LIB}/libcuda.so.1.1"), true),
            (MountKind::Library, format!("{LIB}/nvidia_icd.json"), true),
            (MountKind::Tree, "/usr/local/cuda-12.6".into(), true),
            (MountKind::Config, "/etc/nv_tegra_release".into(), true),
        ]
    );
    assert!(!MountKind::Tree.options().noexec, "CUDA's programs run");
    let links: Vec<_> = plan
        .symlinks
        .iter()
        .map(|l| {
            (
                l.path.to_str().unwrap().to_string(),
                l.target.to_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        links,
        vec![
            (format!("{LIB}/libcuda.so.1"), "libcuda.so.1.1".into()),
            (format!("{LIB}/libcuda.so"), "libcuda.so.1".into()),
            (
                "/usr/lib/aarch64-linux-gnu/libcuda.so".into(),
                "nvidia/libcuda.so".into()
            ),
        ],
        "the SONAME's .so link wins over the sym entry's, one link per path"
    );
    let entries: Vec<_> = plan
        .loader_entries
        .iter()
        .map(|e| (e.soname.as_str(), e.path.clone()))
        .collect();
    assert_eq!(
        entries,
        vec![("libcuda.so.1", Path::new(LIB).join("libcuda.so.1"))]
    );
    assert_eq!(plan.loader_dirs, vec![PathBuf::from(LIB)]);
    assert_eq!(
        plan.proc_mask, None,
        "a Tegra host has no /proc/driver/nvidia"
    );
    assert_eq!(
        build(&csv_inventory(ok()), "0").unwrap(),
        plan,
        "0 is the one GPU"
    );
}

#[test]
fn none_gets_the_files_without_the_nodes() {
    let plan = build(&csv_inventory(ok()), "none").unwrap();
    assert!(
        plan.devices.is_empty() && plan.cgroup_rules.is_empty(),
        "{plan:?}"
    );
    assert_eq!(plan.mounts.len(), 4);
}

#[test]
fn another_device_or_an_unusable_node_is_refused_by_name() {
    let inventory = csv_inventory(ok());
    for asked in ["1", "0,1", "GPU-8ab1a4f6-0000-0000-0000-000000000000"] {
        let err = build(&inventory, asked).unwrap_err();
        assert!(
            matches!(&err, Error::UnknownDevice { available, .. } if available.starts_with("all or 0")),
            "{asked}: {err}"
        );
    }
    let bad = csv_inventory(NodeState::Wrong(NodeProblem::NotCharDevice("regular file")));
    let err = build(&bad, "all").unwrap_err();
    assert!(
        matches!(&err, Error::NodeUnusable { path, .. } if path == Path::new("/sim/dev/nvmap")),
        "{err}"
    );
}

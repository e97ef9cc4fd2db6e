//! `info` against simulated GPU hosts: the inventory must match exactly what
//! the fixture builder made, in both flavours.

/// The shared pieces of the integration tests (tests/common/) this suite uses.
mod common {
    pub mod cli;
    pub mod json;
    pub mod project;
    pub mod refusal;
    pub mod simhost;
}

use std::collections::BTreeMap;

use common::json::s;
use common::simhost::SimHost;
use oci_nvidia_hook::driver::catalog;
use serde_json::Value;

fn libraries_by_soname(info: &Value, arch: &str) -> BTreeMap<String, String> {
    info["libraries"]
        .as_array()
        .expect("libraries array")
        .iter()
        .filter(|l| l["arch"] == arch)
        .map(|l| (s(l, "/soname").to_string(), s(l, "/path").to_string()))
        .collect()
}

/// The fixture's libraries that NVIDIA's lists name (a real driver ships a few more).
fn expected_libraries(host: &Value, key: &str) -> BTreeMap<String, String> {
    host[key]
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(soname, _)| catalog::library_for(soname).is_some())
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn check_inventory(sim: &SimHost) {
    let info = sim.json(&["info", "--json"]);
    let host = &sim.host;
    assert_eq!(info["driver_version"], host["driver_version"]);
    assert_eq!(info["cuda_driver_version"], host["cuda_version"]);
    assert_eq!(info["cuda_version"], "12.2");

    // GPUs: index is PCI bus order, and each keeps its own minor, UUID and model.
    let gpus = info["gpus"].as_array().unwrap();
    let want = host["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), want.len());
    for (got, want) in gpus.iter().zip(want) {
        for key in ["index", "minor", "bus", "uuid", "model"] {
            assert_eq!(got[key], want[key], "GPU field {key}");
        }
    }

    // Every node checked and fine, with NVIDIA's majors.
    for node in info["nodes"].as_array().unwrap() {
        assert_eq!(node["state"]["state"], "ok", "{node}");
    }
    let uvm = info["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["path"] == "/dev/nvidia-uvm")
        .unwrap();
    assert_eq!(uvm["major"], host["uvm_major"]);

    // Exactly the running driver's libraries, never the stale ones listed first.
    assert_eq!(
        libraries_by_soname(&info, "x86_64"),
        expected_libraries(host, "libraries")
    );
    assert_eq!(
        libraries_by_soname(&info, "i386"),
        expected_libraries(host, "libraries32")
    );
    let text = info.to_string();
    for stale in host["stale_libraries"].as_array().unwrap() {
        assert!(
            !text.contains(stale.as_str().unwrap()),
            "stale {stale} used"
        );
    }

    // Binaries found through their /etc/alternatives chains, as real files.
    let binaries: Vec<&str> = info["binaries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| s(b, "/path"))
        .collect();
    for (name, path) in host["binaries"].as_object().unwrap() {
        assert!(
            binaries.contains(&path.as_str().unwrap()),
            "{name}: {binaries:?}"
        );
    }
    let firmware: Vec<&str> = info["firmware"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| s(f, "/path"))
        .collect();
    let want_fw: Vec<&str> = host["firmware"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(firmware, want_fw);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn synthetic_host_inventory_matches_fixture() {
    check_inventory(&SimHost::shared("synthetic", 4, "new"));
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn every_cache_format_gives_the_same_inventory() {
    for format in ["old", "compat", "new"] {
        let sim = SimHost::shared("synthetic", 1, format);
        assert_eq!(sim.host["cache_format"], format);
        check_inventory(&sim);
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn sixteen_gpus_are_indexed_in_bus_order() {
    let sim = SimHost::shared("synthetic", 16, "new");
    check_inventory(&sim);
    let info = sim.json(&["info", "--json"]);
    let buses: Vec<&str> = info["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| s(g, "/bus"))
        .collect();
    let mut sorted = buses.clone();
    sorted.sort();
    assert_eq!(buses, sorted);
    let minors: Vec<u64> = info["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["minor"].as_u64().unwrap())
        .collect();
    assert_ne!(
        minors,
        (0..16).collect::<Vec<u64>>(),
        "fixture must not make minors equal indices"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn real_nvidia_535_host_inventory_matches_fixture() {
    let sim = SimHost::shared("real", 4, "new");
    check_inventory(&sim);
    // The CUDA version came from NVIDIA's own libcuda.so.535.261.03.
    let info = sim.json(&["info", "--json"]);
    let libcuda = info["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["soname"] == "libcuda.so.1" && l["arch"] == "x86_64")
        .unwrap();
    assert!(s(libcuda, "/path").ends_with("/libcuda.so.535.261.03"));
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn info_text_names_version_gpus_nodes_and_libraries() {
    let sim = SimHost::shared("synthetic", 4, "new");
    let text = sim.stdout(&["info"]);
    assert!(text.contains("Driver version: 535.261.03"), "{text}");
    assert!(text.contains("CUDA version:   12.2"), "{text}");
    for gpu in sim.host["gpus"].as_array().unwrap() {
        assert!(text.contains(s(gpu, "/uuid")), "{text}");
        assert!(text.contains(s(gpu, "/bus")), "{text}");
    }
    assert!(text.contains("nvidiactl"), "{text}");
    assert!(text.contains("libnvidia-ml.so.535.261.03"), "{text}");
    // Optional libraries the host lacks are listed as missing.
    assert!(text.contains("missing: libnvidia-nscq.so"), "{text}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn driver_not_loaded_is_one_clear_line_naming_the_file() {
    let sim = SimHost::fresh("not-loaded", "synthetic", 1, "new");
    let version = sim.path("proc/driver/nvidia/version");
    std::fs::remove_file(&version).unwrap();
    for args in [&["info"][..], &["list"][..]] {
        let err = sim.failure(args);
        assert!(err.contains("NVIDIA kernel module not loaded"), "{err}");
        assert!(err.contains(&version.display().to_string()), "{err}");
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn unknown_proc_format_is_refused_naming_the_file() {
    let sim = SimHost::fresh("bad-proc", "synthetic", 2, "new");
    let bus = s(&sim.host, "/gpus/0/bus").to_string();
    let info = sim.path(&format!("proc/driver/nvidia/gpus/{bus}/information"));
    std::fs::write(&info, "Model: something\nthis is not the driver's format\n").unwrap();
    let err = sim.failure(&["list"]);
    assert!(
        err.contains(&info.display().to_string()) && err.contains("unknown format"),
        "{err}"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn corrupt_driver_cache_is_an_error_with_its_offset() {
    let sim = SimHost::fresh("bad-cache", "synthetic", 1, "new");
    let cache = sim.path("driver/etc/ld.so.cache");
    let data = std::fs::read(&cache).unwrap();
    std::fs::write(&cache, &data[..100]).unwrap();
    let err = sim.failure(&["list"]);
    assert!(
        err.contains(&cache.display().to_string()) && err.contains("offset"),
        "{err}"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn wrong_node_is_reported_by_info_and_refused_by_list() {
    let sim = SimHost::fresh("wrong-node", "synthetic", 2, "new");
    let minor = sim.host["gpus"][0]["minor"].as_u64().unwrap();
    let node = sim.path(&format!("devroot/dev/nvidia{minor}"));
    std::fs::remove_file(&node).unwrap();
    // 1:3 is /dev/null's number: a node an attacker might swap in.
    nix::sys::stat::mknod(
        &node,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 3),
    )
    .unwrap();
    let text = sim.stdout(&["info"]);
    assert!(
        text.contains("WRONG: is character device 1:3, expected 195:"),
        "{text}"
    );
    let err = sim.failure(&["list", "--device", "0"]);
    assert!(
        err.contains(&node.display().to_string()) && err.contains("1:3"),
        "{err}"
    );
    // The other GPU is still usable.
    sim.stdout(&["list", "--device", "1"]);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn missing_core_library_fails_only_its_capability() {
    let sim = SimHost::fresh("no-libcuda", "synthetic", 1, "new");
    let libcuda = s(&sim.host, "/libraries/libcuda.so.1").to_string();
    std::fs::remove_file(&libcuda).unwrap();
    let err = sim.failure(&["list", "--capabilities", "compute"]);
    assert!(
        err.contains("compute") && err.contains("libcuda.so"),
        "{err}"
    );
    let out = sim.stdout(&["list", "--capabilities", "utility"]);
    assert!(out.contains("libnvidia-ml.so.535.261.03"), "{out}");
    let text = sim.stdout(&["info"]);
    assert!(text.contains("libcuda.so (REQUIRED)"), "{text}");
    assert!(text.contains("CUDA version:   unknown"), "{text}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn the_hooks_snapshot_is_the_live_inventory_until_the_driver_root_changes() {
    use std::os::unix::fs::MetadataExt;

    use oci_nvidia_hook::config::Config;
    use oci_nvidia_hook::driver::{snapshot, Inventory};
    use oci_nvidia_hook::request::Capabilities;

    let sim = SimHost::fresh("snapshot", "synthetic", 2, "new");
    let config = Config::load(Some(&sim.config)).unwrap().driver;
    let dir = config
        .snapshot_dir
        .clone()
        .expect("simhost names a snapshot dir");
    // A snapshot is written only once what it examined has settled.
    let built = std::fs::metadata(&sim.config).unwrap().modified().unwrap();
    let settled = built + std::time::Duration::from_millis(snapshot::SETTLED * 1000 + 1100);
    if let Ok(wait) = settled.duration_since(std::time::SystemTime::now()) {
        std::thread::sleep(wait);
    }
    let scope = Capabilities::all();
    let json = |inventory: Inventory| serde_json::to_value(inventory).unwrap();
    // As the hooks' planner inventories: the snapshot it did not find, left.
    let with_snapshot = || {
        let (inventory, unstored) = Inventory::discover_with_snapshot(&config, &scope).unwrap();
        if let Some(snapshot) = unstored {
            snapshot.store();
        }
        inventory
    };
    let live = json(Inventory::discover(&config, &scope).unwrap());
    assert!(!dir.exists(), "operators' discovery leaves no snapshot");
    let first = json(with_snapshot());
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(files.len(), 1, "one snapshot: {files:?}");
    let written = std::fs::metadata(files[0].path()).unwrap().ino();
    let second = json(with_snapshot());
    assert_eq!(first, live);
    assert_eq!(second, live);
    let read = std::fs::metadata(files[0].path()).unwrap().ino();
    assert_eq!(
        read, written,
        "the second discovery read it, not rewrote it"
    );

    // A library taken away shows at once.
    std::fs::remove_file(s(&sim.host, "/libraries/libnvidia-ml.so.1")).unwrap();
    let live = json(Inventory::discover(&config, &scope).unwrap());
    let after = json(with_snapshot());
    assert_eq!(after, live);
    assert_ne!(after, second);
}

//! `info` against simulated GPU hosts: the inventory must match exactly what
//! the fixture builder made, in both flavours.

use std::collections::BTreeMap;

use harness::info::Info;
use harness::simhost::{CacheFormat, Fixture, SimHost};
use oci_nvidia_hook::host::driver::catalog;

fn libraries_by_soname(info: &Info, arch: &str) -> BTreeMap<String, String> {
    info.libraries
        .iter()
        .filter(|l| l.arch == arch)
        .map(|l| (l.soname.clone(), l.path.clone()))
        .collect()
}

/// The fixture's libraries that NVIDIA's lists name (a real driver ships a few more).
fn expected_libraries(libraries: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    libraries
        .iter()
        .filter(|(soname, _)| catalog::library_for(soname).is_some())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn check_inventory(sim: &SimHost) {
    let info = sim.info();
    let host = &sim.facts;
    assert_eq!(info.driver_version, host.driver_version);
    assert_eq!(info.cuda_driver_version, Some(host.cuda_version));
    assert_eq!(info.cuda_version.as_deref(), Some("12.2"));

    // GPUs: index is PCI bus order, and each keeps its own minor, UUID and model.
    let gpus = &info.gpus;
    let want = &host.gpus;
    assert_eq!(gpus.len(), want.len());
    for (got, want) in gpus.iter().zip(want) {
        assert_eq!(got.index, want.index, "GPU field index");
        assert_eq!(got.minor, want.minor, "GPU field minor");
        assert_eq!(got.bus, want.bus, "GPU field bus");
        assert_eq!(got.uuid, want.uuid, "GPU field uuid");
        assert_eq!(got.model, want.model, "GPU field model");
    }

    // Every node checked and fine, with NVIDIA's majors.
    for node in &info.nodes {
        assert_eq!(node.state.state, "ok", "{node:?}");
    }
    let uvm = info
        .nodes
        .iter()
        .find(|n| n.path == "/dev/nvidia-uvm")
        .unwrap();
    assert_eq!(uvm.major, host.uvm_major);

    // Exactly the running driver's libraries, never the stale ones listed first.
    assert_eq!(
        libraries_by_soname(&info, "x86_64"),
        expected_libraries(&host.libraries)
    );
    assert_eq!(
        libraries_by_soname(&info, "i386"),
        expected_libraries(&host.libraries32)
    );
    let text = &info.text;
    for stale in &host.stale_libraries {
        assert!(!text.contains(stale.as_str()), "stale {stale} used");
    }

    // Binaries found through their /etc/alternatives chains, as real files.
    let binaries: Vec<&str> = info.binaries.iter().map(|b| b.path.as_str()).collect();
    for (name, path) in &host.binaries {
        assert!(binaries.contains(&path.as_str()), "{name}: {binaries:?}");
    }
    let firmware: Vec<&str> = info.firmware.iter().map(|f| f.path.as_str()).collect();
    let want_fw: Vec<&str> = host.firmware.iter().map(String::as_str).collect();
    assert_eq!(firmware, want_fw);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn synthetic_host_inventory_matches_fixture() {
    check_inventory(&SimHost::shared(Fixture::synthetic(4)));
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn every_cache_format_gives_the_same_inventory() {
    for format in [CacheFormat::Old, CacheFormat::Compat, CacheFormat::New] {
        let sim = SimHost::shared(Fixture::synthetic(1).cache_format(format));
        assert_eq!(sim.facts.cache_format, format);
        check_inventory(&sim);
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn sixteen_gpus_are_indexed_in_bus_order() {
    let sim = SimHost::shared(Fixture::synthetic(16));
    check_inventory(&sim);
    let info = sim.info();
    let buses: Vec<&str> = info.gpus.iter().map(|g| g.bus.as_str()).collect();
    let mut sorted = buses.clone();
    sorted.sort();
    assert_eq!(buses, sorted);
    let minors: Vec<u32> = info.gpus.iter().map(|g| g.minor).collect();
    assert_ne!(
        minors,
        (0..16).collect::<Vec<u32>>(),
        "fixture must not make minors equal indices"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn real_nvidia_535_host_inventory_matches_fixture() {
    let sim = SimHost::shared(Fixture::real(4));
    check_inventory(&sim);
    // The CUDA version came from NVIDIA's own libcuda.so.535.261.03.
    let info = sim.info();
    let libcuda = info
        .libraries
        .iter()
        .find(|l| l.soname == "libcuda.so.1" && l.arch == "x86_64")
        .unwrap();
    assert!(libcuda.path.ends_with("/libcuda.so.535.261.03"));
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn info_text_names_version_gpus_nodes_and_libraries() {
    let sim = SimHost::shared(Fixture::synthetic(4));
    let text = sim.stdout(&["info"]);
    assert!(text.contains("Driver version: 535.261.03"), "{text}");
    assert!(text.contains("CUDA version:   12.2"), "{text}");
    for gpu in &sim.facts.gpus {
        assert!(text.contains(&gpu.uuid), "{text}");
        assert!(text.contains(&gpu.bus), "{text}");
    }
    assert!(text.contains("nvidiactl"), "{text}");
    assert!(text.contains("libnvidia-ml.so.535.261.03"), "{text}");
    // Optional libraries the host lacks are listed as missing.
    assert!(text.contains("missing: libnvidia-nscq.so"), "{text}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn driver_not_loaded_is_one_clear_line_naming_the_file() {
    let sim = SimHost::fresh("not-loaded", Fixture::synthetic(1));
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
    let sim = SimHost::fresh("bad-proc", Fixture::synthetic(2));
    let bus = sim.facts.gpus[0].bus.clone();
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
    let sim = SimHost::fresh("bad-cache", Fixture::synthetic(1));
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
    let sim = SimHost::fresh("wrong-node", Fixture::synthetic(2));
    let minor = sim.facts.gpus[0].minor;
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
    let sim = SimHost::fresh("no-libcuda", Fixture::synthetic(1));
    let libcuda = sim.facts.libraries["libcuda.so.1"].clone();
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
    use oci_nvidia_hook::host::driver::{snapshot, Inventory};
    use oci_nvidia_hook::planning::request::Capabilities;

    let sim = SimHost::fresh("snapshot", Fixture::synthetic(2));
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
    std::fs::remove_file(&sim.facts.libraries["libnvidia-ml.so.1"]).unwrap();
    let live = json(Inventory::discover(&config, &scope).unwrap());
    let after = json(with_snapshot());
    assert_eq!(after, live);
    assert_ne!(after, second);
}

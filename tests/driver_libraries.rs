//! Libraries follow the driver (issue #36), on simulated hosts of NVIDIA's
//! real 535 user space: a host whose loader cache lists none of the driver
//! (as Talos's) still gives a runc container a libcuda that answers, and a
//! driver library the catalogue never named is injected for its capability.
//!
//! Run as root: `cargo test --features _test_as_root --test driver_libraries`.

use std::fs;
use std::path::Path;
use std::process::Command;

use harness::runtime::bundle::{Hook, Scenario};
use harness::runtime::container::run;
use harness::runtime::expected::{node_specs, LIB_DIR};
use harness::runtime::injected::{assert_injected, Expected};
use harness::runtime::run::{serial, Run};
use harness::runtime::runtimes::Runtime;
use harness::simhost::{Fixture, SimHost};
use oci_nvidia_hook::host::driver::catalog;
use oci_nvidia_hook::host::ldcache::LdCache;

/// Rewrites the host's loader cache without any entry of NVIDIA's.
fn cache_without_the_driver(sim: &SimHost) {
    let path = sim.path("driver/etc/ld.so.cache");
    let mut cache = LdCache::parse(&fs::read(&path).unwrap()).unwrap();
    cache
        .entries
        .retain(|e| !catalog::may_be_listed(e.soname.as_bytes()) && !e.path.contains("nvidia"));
    fs::write(&path, cache.to_bytes()).unwrap();
    let listed = Command::new("ldconfig")
        .args(["-p", "-C"])
        .arg(&path)
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        !listed.contains("nvidia") && !listed.contains("libcuda"),
        "{listed}"
    );
}

/// A tiny shared object with SONAME `soname` at `inner` in the driver root.
fn shared_object(sim: &SimHost, inner: &str, soname: &str) {
    let out = sim.path(&format!("driver/{inner}"));
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-nostdlib", "-x", "c", "-", "-o"])
        .arg(&out)
        .arg(format!("-Wl,-soname,{soname}"))
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(b"int simhost_extra;\n")?;
            child.wait()
        })
        .unwrap();
    assert!(status.success(), "cc for {soname}");
}

fn run_compute(sim: &SimHost, name: &str, caps: &str) -> Run {
    run(
        &serial(),
        &Scenario {
            name,
            runtime: Runtime::RuncV1,
            host: sim,
            env: &[
                ("NVIDIA_VISIBLE_DEVICES", "0"),
                ("NVIDIA_DRIVER_CAPABILITIES", caps),
            ],
            hook: Hook::Prestart,
            decoy_minors: &[],
            decoys: &[],
            reuse_rootfs: false,
            prepare: None,
        },
    )
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_host_whose_cache_lacks_the_driver_still_gives_runc_a_libcuda_that_answers() {
    let sim = SimHost::fresh("cache-without-driver", Fixture::real(1));
    cache_without_the_driver(&sim);
    let version = &sim.facts.driver_version;
    let current = sim.path("driver/usr/lib/x86_64-linux-gnu/nvidia/current");

    let listed = sim.stdout(&["list"]);
    for lib in [
        "libcuda.so",
        "libnvidia-ml.so",
        "libnvidia-ptxjitcompiler.so",
    ] {
        let path = current.join(format!("{lib}.{version}"));
        assert!(
            listed.lines().any(|l| Path::new(l) == path),
            "{} not listed:\n{listed}",
            path.display()
        );
    }
    // The stale 470 driver's libcuda, beside the searched directories, is not taken.
    assert!(
        !listed.contains(&sim.facts.stale_driver_version),
        "{listed}"
    );

    let run = run_compute(&sim, "cache-without-driver", "compute,utility");
    let gpu = &sim.facts.gpus[0];
    let nodes = node_specs(&sim, &[gpu.minor]);
    assert_injected(
        &run,
        &sim,
        &Expected {
            nodes: &nodes,
            real_libraries: true,
        },
    );
    let cuda = run
        .report
        .cuda
        .as_ref()
        .expect("the checker's libcuda line");
    assert!(cuda.loaded, "{}", run.describe());
    assert_eq!(cuda.field("rc"), Some("0"), "{}", run.describe());
    assert_eq!(
        cuda.field("version"),
        Some(sim.facts.cuda_version.to_string().as_str()),
        "{}",
        run.describe()
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_driver_library_the_catalogue_never_named_is_injected_for_its_capability() {
    let sim = SimHost::fresh("extra-driver-libraries", Fixture::real(1));
    let version = sim.facts.driver_version.clone();
    let current = "usr/lib/x86_64-linux-gnu/nvidia/current";
    // NVVM 7.0 (driver 570+, named without the driver's version) and a
    // library of no known family, as a newer driver would ship them.
    shared_object(
        &sim,
        &format!("{current}/libnvidia-nvvm70.so.4"),
        "libnvidia-nvvm70.so.4",
    );
    let brandnew = format!("{current}/libnvidia-brandnew.so.{version}");
    shared_object(&sim, &brandnew, "libnvidia-brandnew.so.1");
    // A real library of the 535 packages the old catalogue lacked.
    let producer = format!("{current}/libnvidia-vulkan-producer.so.{version}");

    let listed = |caps: &str| sim.stdout(&["list", "--capabilities", caps]);
    let has = |out: &str, inner: &str| {
        let path = sim.path(&format!("driver/{inner}"));
        out.lines().any(|l| Path::new(l) == path)
    };
    let nvvm70 = format!("{current}/libnvidia-nvvm70.so.4");
    let utility = listed("utility");
    assert!(has(&utility, &brandnew), "{utility}");
    assert!(
        !has(&utility, &nvvm70) && !has(&utility, &producer),
        "{utility}"
    );
    let compute = listed("compute");
    assert!(
        has(&compute, &brandnew) && has(&compute, &nvvm70),
        "{compute}"
    );
    assert!(!has(&compute, &producer), "{compute}");
    let graphics = listed("graphics");
    assert!(
        has(&graphics, &producer) && has(&graphics, &brandnew),
        "{graphics}"
    );
    assert!(!has(&graphics, &nvvm70), "{graphics}");

    let run = run_compute(&sim, "extra-driver-libraries", "compute,utility");
    run.assert_completed();
    let cache = run.ld_cache.as_ref().expect("the container's loader cache");
    for (soname, file) in [
        ("libnvidia-nvvm70.so.4", "libnvidia-nvvm70.so.4".to_string()),
        (
            "libnvidia-brandnew.so.1",
            format!("libnvidia-brandnew.so.{version}"),
        ),
    ] {
        assert!(
            cache
                .iter()
                .any(|e| e.soname == soname && e.path == format!("{LIB_DIR}/{soname}")),
            "{soname} not in the container's cache:{}",
            run.describe()
        );
        let path = format!("{LIB_DIR}/{file}");
        let facts = run.report.files.get(&path);
        assert!(
            facts.is_some_and(|f| f.read_only),
            "{path} not mounted read-only: {facts:?}:{}",
            run.describe()
        );
    }
    assert!(
        !cache
            .iter()
            .any(|e| e.soname.starts_with("libnvidia-vulkan-producer")),
        "graphics' library without graphics:{}",
        run.describe()
    );
}

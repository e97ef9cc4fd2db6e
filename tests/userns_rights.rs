//! In a user-namespaced container the hook changes nothing the
//! container's own root could not (issue 40).
//!
//! The hook runs as host root: it switches its file ids to the container
//! root's, but its capabilities stay the host's, which override the
//! permissions of every file. The container's root has its capabilities
//! only over files whose owner and group its user namespace maps. A host
//! directory bind-mounted into the container, owned by host root, is then
//! one the container's root cannot write to, and the hook must not either.
//!
//! Here a host directory owned by root (mode 0755) is the container's
//! `/etc/ld.so.conf.d`, where the hook writes its loader configuration.
//! Under runc and crun the container is refused, with one line naming the
//! file and the owner, and the host directory keeps exactly what it had.
//! Handed to the container's root, the same directory takes the hook's file
//! and the container gets its GPU.
//!
//! Run as root: `make test`, or
//! `cargo test --features _test_as_root --test userns_rights -- --nocapture`.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Instant;

use harness::runtime::bundle::work_root;
use harness::runtime::bundle::{
    chown_tree, into_user_namespace, template_rootfs, BundleExtras, Hook, Scenario,
};
use harness::runtime::cleanup::remove_tree_safely;
use harness::runtime::expected::node_specs;
use harness::runtime::prepared::prepare;
use harness::runtime::process::run_bounded;
use harness::runtime::run::{serial, Run, RUN_LIMIT};
use harness::runtime::runtimes::Runtime;
use harness::simhost::{Fixture, SimHost};

/// The container's root in host ids: apart from the ranges other suites use.
const CONTAINER_ROOT: u32 = 300_000;
const ID_COUNT: u32 = 65_536;
/// The hook's loader configuration file in the container.
const CONF: &str = "000-oci-nvidia-hook.conf";

/// Every entry of `dir`: name, owner and mode.
fn listing(dir: &Path) -> Vec<(String, u32, u32, u32)> {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            (name, meta.uid(), meta.gid(), meta.mode())
        })
        .collect();
    entries.sort();
    entries
}

/// One run of a user-namespaced container asking for GPU index 1, with
/// host directory `conf_dir` as its `/etc/ld.so.conf.d`.
fn run(runtime: Runtime, host: &SimHost, name: &str, conf_dir: &Path) -> Run {
    let serial = serial();
    let prepared = prepare(
        &serial,
        &Scenario {
            name,
            runtime,
            host,
            env: &[("NVIDIA_VISIBLE_DEVICES", "1")],
            hook: Hook::Prestart,
            decoy_minors: &[],
            decoys: &[],
            reuse_rootfs: false,
            prepare: None,
        },
        &BundleExtras {
            binds: vec![(conf_dir.to_path_buf(), "/etc/ld.so.conf.d".into())],
            ..BundleExtras::default()
        },
    );
    into_user_namespace(&prepared.bundle, &prepared.rootfs, CONTAINER_ROOT, ID_COUNT);
    let id = prepared.id.clone();
    let started = Instant::now();
    let finished = run_bounded(prepared.command_for(&id), RUN_LIMIT);
    prepared.delete(&id);
    prepared.finish(finished, started.elapsed())
}

fn refused_then_allowed(runtime: Runtime) {
    let host = SimHost::shared(Fixture::real(4));
    template_rootfs(&host);
    let dir = work_root().join(format!("userns-rights-{}", runtime.name()));
    remove_tree_safely(&dir);
    let conf_dir = dir.join("ld.so.conf.d");
    fs::create_dir_all(&conf_dir).unwrap();
    fs::write(conf_dir.join("libc.conf"), "/usr/local/lib\n").unwrap();
    fs::set_permissions(&conf_dir, fs::Permissions::from_mode(0o755)).unwrap();
    chown_tree(&conf_dir, 0, 0);
    let before = listing(&conf_dir);

    let name = format!("userns-rights-{}", runtime.name());
    let refused = run(runtime, &host, &name, &conf_dir);
    let ctx = refused.describe();
    assert!(
        !refused.status.is_some_and(|s| s.success()),
        "the container started:{ctx}"
    );
    let line = format!(
        "refusing to change /etc/ld.so.conf.d/{CONF}: the container's root (uid {CONTAINER_ROOT}, gid {CONTAINER_ROOT} of the host) could not"
    );
    let said = refused.stderr.contains(&line)
        || refused
            .hook_log
            .as_deref()
            .is_some_and(|log| log.contains(&line));
    assert!(said, "no line naming the refusal:{ctx}");
    assert!(
        refused.stderr.contains("belongs to 0:0") || ctx.contains("belongs to 0:0"),
        "the owner is named:{ctx}"
    );
    assert_eq!(
        listing(&conf_dir),
        before,
        "the host directory changed:{ctx}"
    );
    // The hook undid what it had made before the refusal.
    let lib = refused.rootfs.join("usr/lib/x86_64-linux-gnu");
    assert!(
        !lib.join("libcuda.so.1").exists(),
        "the hook's link was left behind:{ctx}"
    );

    // The same directory, the container root's: as the container would.
    chown_tree(&conf_dir, CONTAINER_ROOT, CONTAINER_ROOT);
    let allowed = run(runtime, &host, &format!("{name}-own"), &conf_dir);
    let ctx = allowed.describe();
    assert!(allowed.status.is_some_and(|s| s.success()), "refused:{ctx}");
    let written = fs::symlink_metadata(conf_dir.join(CONF)).unwrap();
    assert_eq!(
        (written.uid(), written.gid()),
        (CONTAINER_ROOT, CONTAINER_ROOT),
        "{ctx}"
    );
    let gpu = host.facts.gpus.iter().find(|g| g.index == 1).unwrap();
    for (path, _) in node_specs(&host, &[gpu.minor]) {
        let node = allowed
            .report
            .nodes
            .get(&path)
            .unwrap_or_else(|| panic!("{path} missing:{ctx}"));
        assert_eq!(node.open.as_deref(), Some("ENXIO"), "{path}:{ctx}");
    }
    remove_tree_safely(&dir);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn runc_refuses_what_the_container_root_could_not_change() {
    harness::simhost::require_root();
    refused_then_allowed(Runtime::RuncV1);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn crun_refuses_what_the_container_root_could_not_change() {
    harness::simhost::require_root();
    refused_then_allowed(Runtime::CrunV1);
}

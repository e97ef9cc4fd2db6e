//! Faults the hook cannot avoid: the kernel refusing its BPF calls. The
//! outcome must be a clear error and a container that does not start,
//! never a half-configured one that runs anyway.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use harness::mounts::{assert_mounts_unchanged, host_mounts};
use harness::runtime::bundle::{BundleExtras, Hook, Scenario};
use harness::runtime::host_state::{listing_diff, tree_listing};
use harness::runtime::prepared::prepare;
use harness::runtime::process::run_bounded;
use harness::runtime::run::{serial, RUN_LIMIT};
use harness::runtime::runtimes::Runtime;
use harness::simhost::{Fixture, SimHost};
use serde_json::Value;

/// A wrapper that runs a program with `bpf(2)` failing with EPERM (seccomp),
/// as under a security policy that forbids it.
const NO_BPF: &str = r#"
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
int main(int argc, char **argv) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_bpf, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { .len = 4, .filter = filter };
    if (argc < 2 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("no-bpf");
        return 126;
    }
    execv(argv[1], argv + 1);
    perror("no-bpf: execv");
    return 127;
}
"#;

fn build_wrapper(dir: &Path) -> String {
    let source = dir.join("no-bpf.c");
    let binary = dir.join("no-bpf");
    fs::write(&source, NO_BPF).unwrap();
    let status = Command::new("cc")
        .arg("-o")
        .arg(&binary)
        .arg(&source)
        .status()
        .expect("run cc");
    assert!(status.success(), "cannot build the seccomp wrapper");
    binary.display().to_string()
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn refused_bpf_calls_stop_the_container_with_a_clear_error() {
    let serial = serial();
    let host = SimHost::shared(Fixture::synthetic(2));
    let prepared = prepare(
        &serial,
        &Scenario {
            name: "no-bpf",
            runtime: Runtime::RuncV2,
            host: &host,
            env: &[("NVIDIA_VISIBLE_DEVICES", "0")],
            hook: Hook::Prestart,
            decoy_minors: &[],
            decoys: &[],
            reuse_rootfs: false,
            prepare: None,
        },
        &BundleExtras::default(),
    );
    // Run the hook under the wrapper: its cgroup v2 step meets EPERM from bpf(2).
    let wrapper = build_wrapper(&prepared.bundle);
    let config_path = prepared.bundle.join("config.json");
    let mut config: Value = serde_json::from_slice(&fs::read(&config_path).unwrap()).unwrap();
    let entry = &mut config["hooks"]["prestart"][0];
    let hook = entry["path"].as_str().unwrap().to_string();
    let mut args = vec![Value::from(wrapper.clone()), Value::from(hook)];
    args.extend(entry["args"].as_array().unwrap()[1..].iter().cloned());
    entry["path"] = Value::from(wrapper);
    entry["args"] = Value::from(args);
    fs::write(&config_path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();

    let mounts_before = host_mounts();
    let tree_before = tree_listing(&host.dir);
    let started = Instant::now();
    let run = prepared.finish(
        run_bounded(prepared.command(), RUN_LIMIT),
        started.elapsed(),
    );
    assert_mounts_unchanged(&mounts_before, "");
    let tree_diff = listing_diff(&tree_before, &tree_listing(&host.dir));
    assert!(
        tree_diff.is_empty(),
        "the simulated driver tree changed: {tree_diff:#?}"
    );
    assert!(
        !run.succeeded(),
        "the container must not start:{}",
        run.describe()
    );
    assert!(
        !run.report.complete,
        "the container's program must not run:{}",
        run.describe()
    );
    let log = run.hook_log.clone().unwrap_or_default();
    let error: Vec<&str> = log.lines().filter(|l| l.contains(": error: ")).collect();
    assert_eq!(error.len(), 1, "one error line:{}", run.describe());
    assert!(
        error[0].contains("BPF") && error[0].contains("Operation not permitted"),
        "the error names the BPF call and EPERM:{}",
        run.describe()
    );
}

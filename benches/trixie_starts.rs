//! Container starts on the engines hosts run now, from the Debian 13
//! (trixie) root that tests/trixie.rs makes, on a simulated 4-GPU host with
//! NVIDIA's real 535 libraries (integration/bench-trixie runs it; results
//! in docs/benchmarks.md):
//!
//! - Docker 26: `docker run --rm IMAGE /bin/true` with no GPU, with
//!   `--gpus all` (the hook as `nvidia-container-runtime-hook`) and with
//!   `--device nvidia.com/gpu=all` (our spec, `features.cdi` set by our
//!   `nvidia-ctk runtime configure --runtime=docker --cdi.enabled`), each
//!   start timed from the docker CLI's exec to its exit;
//! - Docker 28 (Debian sid's 28.5 with containerd 2.1 and runc 1.3, from
//!   the root tests/docker28.rs makes): the same three starts;
//! - containerd 1.7's CRI, driven through integration/cri-client as the
//!   kubelet drives it: CreateContainer + StartContainer of a `/bin/true`
//!   container with CRI `CDIDevices = ["nvidia.com/gpu=all"]` against one
//!   without (each pod's sandbox started before and removed after, not timed);
//! - containerd 2.1's CRI (Debian sid, runc 1.3: the node
//!   tests/containerd2.rs runs, harness::runtime::containerd2) on its own
//!   default config with `nvidia-ctk runtime configure --cdi.enabled`: the
//!   same two starts.
//!
//! Interleaved: blocks of BENCH_BLOCK (default 10) starts of each variant,
//! whose order rotates, BENCH_RUNS (default 40) of each, after BENCH_WARMUP
//! (default 3). The times are written as hyperfine's JSON
//! (`$BENCH_OUT/bench-trixie/{docker,docker28,cri,cri2}.N.json`), so that
//! integration/bench_stats.py's `starts` makes the tables: medians, IQRs,
//! and what each variant adds to the base with bootstrap 95% intervals.
//! Needs root and the cached trixie and sid roots; a part's name
//! (`docker`, `docker28`, `cri`, `cri2`) picks it alone.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use harness::debroot::{sid, trixie, DebRoot};
use harness::runtime::bundle::{template_rootfs, write_hook_config};
use harness::runtime::cleanup::remove_tree_safely;
use harness::runtime::containerd2::{Node, CONFIG};
use harness::runtime::cri::{
    ensure_cri_api, image_archive, import_k8s_image, pause_archive, run_pod, PodRequest,
    PAUSE_IMAGE,
};
use harness::runtime::daemons::{docker_with_cdi, our_spec, CriSetup, DaemonSetup, Daemons};
use harness::runtime::oci_config::path_str;
use harness::simhost::{require_root, Fixture, SimHost};
use serde_json::{json, Value};

/// A positive count from the environment, or `default`.
fn count(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .ok()
            .filter(|n: &usize| *n > 0 || name == "BENCH_WARMUP")
            .unwrap_or_else(|| panic!("{name} must be a positive integer, not {text:?}")),
        Err(_) => default,
    }
}

/// Runs `variants` (label, one start returning its seconds) interleaved,
/// writing each round's times as hyperfine's JSON under `out` as `key.N.json`.
fn interleave(out: &Path, key: &str, variants: &[(&str, &dyn Fn() -> f64)]) {
    let (runs, block, warmup) = (
        count("BENCH_RUNS", 40),
        count("BENCH_BLOCK", 10),
        count("BENCH_WARMUP", 3),
    );
    for (_, start) in variants {
        for _ in 0..warmup {
            start();
        }
    }
    let rounds = runs.div_ceil(block);
    for round in 0..rounds {
        let n = runs / rounds + usize::from(round < runs % rounds);
        let mut results: Vec<(String, Vec<f64>)> = Vec::new();
        for k in 0..variants.len() {
            let (label, start) = variants[(k + round) % variants.len()];
            let times = (0..n).map(|_| start()).collect();
            results.push((label.to_string(), times));
        }
        let json = json!({"results": results
            .iter()
            .map(|(label, times)| json!({"command": label, "times": times}))
            .collect::<Vec<Value>>()});
        fs::write(
            out.join(format!("{key}.{round}.json")),
            serde_json::to_vec_pretty(&json).unwrap(),
        )
        .unwrap();
        eprintln!("bench-trixie: {key} round {}/{rounds} done", round + 1);
    }
}

/// Docker starts from `root` (its dockerd, containerd and runc), written as `key.N.json`.
fn docker(host: &SimHost, out: &Path, work: &Path, root: &DebRoot, key: &str) {
    const IMAGE: &str = "onh-bench:docker";
    let dir = work.join(key);
    fs::create_dir_all(&dir).unwrap();
    let (config, log) = (dir.join("hook.toml"), dir.join("hook.log"));
    write_hook_config(host, &config, &log, "warn");
    let daemon_json = dir.join("daemon.json");
    fs::write(&daemon_json, "{}\n").unwrap();
    let daemons = docker_with_cdi(&dir, &config, &daemon_json, host, root);
    daemons.import_rootfs(&template_rootfs(host), IMAGE);
    let start = |extra: &'static [&'static str]| {
        let daemons = &daemons;
        move || {
            let mut args = vec!["run", "--rm", "--network", "none"];
            args.extend_from_slice(extra);
            args.extend([IMAGE, "/bin/true"]);
            let started = Instant::now();
            let finished = daemons.docker(&args);
            let seconds = started.elapsed().as_secs_f64();
            assert!(
                finished.status.is_some_and(|s| s.success()),
                "docker {args:?}: {}{}",
                finished.stdout,
                finished.stderr
            );
            seconds
        }
    };
    let (none, gpus, cdi) = (
        start(&[]),
        start(&["--gpus", "all"]),
        start(&["--device", "nvidia.com/gpu=all"]),
    );
    interleave(
        out,
        key,
        &[
            ("no GPU", &none),
            ("--gpus all", &gpus),
            ("--device nvidia.com/gpu=all", &cdi),
        ],
    );
}

/// containerd 1.7's CRI from the trixie root, with our runtime configured
/// by `nvidia-ctk runtime configure --runtime=containerd --cdi.enabled`.
fn cri(host: &SimHost, out: &Path, work: &Path) {
    const IMAGE: &str = "docker.io/library/onh-bench:trixie";
    let root = trixie();
    ensure_cri_api(&root);
    let dir = work.join("cri");
    fs::create_dir_all(&dir).unwrap();
    let (config, log) = (dir.join("hook.toml"), dir.join("hook.log"));
    write_hook_config(host, &config, &log, "warn");
    let spec = our_spec(host, &dir);
    let node = dir.join("node");
    let runtime_path = format!(
        "--nvidia-runtime-path={}",
        path_str(&node.join("bin/nvidia-container-runtime"))
    );
    let daemons = Daemons::start(
        &node,
        &DaemonSetup {
            hook_config: &config,
            links: &["nvidia-container-runtime", "nvidia-cdi-hook"],
            runtimes: &[],
            default_runtime: None,
            docker_config: None,
            cdi_dir: None,
            etc_files: &[("cdi/nvidia.yaml", &spec)],
            root: Some(&root),
            cri: Some(CriSetup {
                sandbox_image: PAUSE_IMAGE,
                configure: &[&runtime_path, "--cdi.enabled"],
            }),
        },
    );
    cri_starts(&daemons, host, &dir, IMAGE, &log, out, "cri");
}

/// containerd 2.1's CRI from the sid root (harness::runtime::containerd2),
/// on its own default config with our `nvidia-ctk runtime configure
/// --runtime=containerd --cdi.enabled` on NVIDIA's default paths.
fn cri2(host: &SimHost, out: &Path, work: &Path) {
    const IMAGE: &str = "docker.io/library/onh-bench:sid";
    let dir = work.join("cri2");
    fs::create_dir_all(&dir).unwrap();
    let (config, log) = (dir.join("hook.toml"), dir.join("hook.log"));
    write_hook_config(host, &config, &log, "warn");
    let spec = our_spec(host, &dir);
    let mut node = Node::hold(
        &dir.join("node"),
        &config,
        &log,
        &[("cdi/nvidia.yaml", &spec)],
    );
    fs::write(node.etc(CONFIG), &node.default_config).unwrap();
    node.configure(&["--cdi.enabled"]);
    node.restart();
    cri_starts(&node.daemons, host, &dir, IMAGE, &log, out, "cri2");
}

/// CreateContainer + StartContainer of a `/bin/true` container of `image`
/// (imported with the pause image into `daemons`' containerd) with CRI
/// `CDIDevices = ["nvidia.com/gpu=all"]` against none, written as `key.N.json`.
fn cri_starts(
    daemons: &Daemons,
    host: &SimHost,
    dir: &Path,
    image: &'static str,
    log: &Path,
    out: &Path,
    key: &str,
) {
    let images = dir.join("images");
    fs::create_dir_all(&images).unwrap();
    import_k8s_image(daemons, &pause_archive(&images));
    let tar = images.join("bench.tar");
    image_archive(&template_rootfs(host), image, &[], &tar);
    import_k8s_image(daemons, &tar);
    let serial = std::cell::Cell::new(0u32);
    let start = |cdi_devices: &'static [&'static str]| {
        let serial = &serial;
        move || {
            serial.set(serial.get() + 1);
            let name = format!("bench-{}", serial.get());
            let outcome = run_pod(
                daemons,
                &PodRequest {
                    name: &name,
                    image,
                    command: &["/bin/true"],
                    runtime_handler: "",
                    envs: &[],
                    mounts: &[],
                    annotations: &[],
                    cdi_devices,
                },
                log,
            );
            assert!(
                outcome.answer["error"].is_null() && outcome.answer["exit_code"] == 0,
                "{name}: {}",
                outcome.answer
            );
            let _ = fs::remove_dir_all(daemons.dir.join("pods").join(&name));
            (outcome.call_ms("CreateContainer") + outcome.call_ms("StartContainer")) / 1000.0
        }
    };
    let (plain, cdi) = (start(&[]), start(&["nvidia.com/gpu=all"]));
    interleave(
        out,
        key,
        &[
            ("no CDIDevices", &plain),
            ("CDIDevices nvidia.com/gpu=all", &cdi),
        ],
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a filter picks one part.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    require_root();
    let out = PathBuf::from(std::env::var("BENCH_OUT").unwrap_or_else(|_| "target/bench".into()))
        .join("bench-trixie");
    remove_tree_safely(&out);
    fs::create_dir_all(&out).unwrap();
    let work = out.join("work");
    let host = SimHost::shared(Fixture::real(4));
    let asked = |part: &str| only.is_empty() || only.iter().any(|o| o == part);
    if asked("docker") {
        docker(&host, &out, &work, &trixie(), "docker");
    }
    if asked("docker28") {
        docker(&host, &out, &work, &sid(), "docker28");
    }
    if asked("cri") {
        cri(&host, &out, &work);
    }
    if asked("cri2") {
        cri2(&host, &out, &work);
    }
    remove_tree_safely(&work);
}

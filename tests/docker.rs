//! Docker's `--gpus` and containerd's `ctr run --gpus`, with stock runc and
//! no NVIDIA package: real dockerd 20.10 and containerd 1.6 (Debian's
//! docker.io), started and stopped by the tests (harness::runtime::daemons),
//! find this binary under NVIDIA's names on their PATH:
//! `nvidia-container-runtime-hook prestart` for Docker, and
//! `nvidia-container-cli … configure --pid=… ROOTFS` through `containerd
//! oci-hook` for ctr. The hook reads its default config, which in the
//! daemons' private namespace points at a simulated 4-GPU host with
//! NVIDIA's real 535 libraries. Inside each container `/checker` reports
//! the nodes (ENXIO: the device cgroup allows; EPERM: it denies), libcuda's
//! answer and nvidia-smi's.
//!
//! Run as root: `make test`, or
//! `cargo test --features _test_as_root --test docker -- --nocapture`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use harness::mounts::{assert_mounts_unchanged, host_mounts};
use harness::runtime::bundle::{template_rootfs, work_root, write_hook_config};
use harness::runtime::cleanup::cgroup_dirs;
use harness::runtime::daemons::{collect_run, DaemonSetup, Daemons};
use harness::runtime::expected::node_specs;
use harness::runtime::host_state::{listing_diff, tree_listing};
use harness::runtime::injected::{
    assert_gpus, assert_injected, assert_utility_only, gpu, Expected,
};
use harness::runtime::oci_config::{path_str, CONTAINER_SCRIPT, NVIDIA_MAJOR};
use harness::runtime::run::{serial, Run};
use harness::simhost::{Fixture, SimHost};

/// The image every container runs: the template rootfs, imported.
const IMAGE: &str = "onh-gpu:test";

fn host() -> SimHost {
    SimHost::shared(Fixture::real(4))
}

/// The daemons for one test, with our binary on their PATH as NVIDIA's
/// tools, the image imported, and the host's state recorded to compare
/// afterwards ([`Docker::finish`]).
struct Docker {
    daemons: Daemons,
    host: SimHost,
    hook_log: PathBuf,
    mounts_before: Vec<String>,
    driver_before: std::collections::BTreeMap<PathBuf, String>,
    etc_before: std::collections::BTreeMap<PathBuf, String>,
}

/// Links under NVIDIA's names on the daemons' PATH.
const LINKS: [&str; 3] = [
    "nvidia-container-runtime-hook",
    "nvidia-container-cli",
    "nvidia-container-runtime",
];

impl Docker {
    /// dockerd with runc, `--gpus` reaching us as NVIDIA's hook.
    fn start(name: &str) -> Docker {
        Docker::start_with(name, None)
    }

    /// dockerd with our runtime mode added as `nvidia`, and the default
    /// runtime `default` when given.
    fn start_with(name: &str, default: Option<&str>) -> Docker {
        Docker::start_full(name, default, None)
    }

    /// dockerd whose `nvidia` runtime is in CDI mode, with `cdi_dir` bound
    /// over `/etc/cdi`; `write_specs` fills it, given the hook config.
    fn start_cdi(name: &str, write_specs: impl FnOnce(&Path, &Path)) -> Docker {
        let cdi_dir = work_root().join("docker").join(format!("{name}-cdi"));
        let _ = std::fs::remove_dir_all(&cdi_dir);
        std::fs::create_dir_all(&cdi_dir).unwrap();
        Docker::start_full(name, None, Some((&cdi_dir, Box::new(write_specs))))
    }

    #[allow(clippy::type_complexity)]
    fn start_full(
        name: &str,
        default: Option<&str>,
        cdi: Option<(&Path, Box<dyn FnOnce(&Path, &Path) + '_>)>,
    ) -> Docker {
        let host = host();
        let dir = work_root().join("docker").join(name);
        let mounts_before = host_mounts();
        let driver_before = tree_listing(&host.dir);
        let etc_before = etc_listing();
        let hook_log = work_root().join("docker").join(format!("{name}-hook.log"));
        let _ = std::fs::remove_file(&hook_log);
        let config = work_root().join("docker").join(format!("{name}-hook.toml"));
        std::fs::create_dir_all(config.parent().unwrap()).unwrap();
        write_hook_config(&host, &config, &hook_log, "debug");
        let cdi_dir = cdi.map(|(dir, write_specs)| {
            let mut text = std::fs::read_to_string(&config).unwrap();
            text.push_str("\n[runtime]\nmode = \"cdi\"\n");
            std::fs::write(&config, text).unwrap();
            write_specs(dir, &config);
            dir
        });
        let daemons = Daemons::start(
            &dir,
            &DaemonSetup {
                hook_config: &config,
                links: &LINKS,
                runtimes: &[("nvidia", "nvidia-container-runtime")],
                default_runtime: default,
                docker_config: None,
                cdi_dir,
                etc_files: &[],
                root: None,
                cri: None,
            },
        );
        let docker = Docker {
            daemons,
            host,
            hook_log,
            mounts_before,
            driver_before,
            etc_before,
        };
        docker.import_image();
        docker
    }

    fn import_image(&self) {
        self.daemons
            .import_rootfs(&template_rootfs(&self.host), IMAGE);
    }

    /// `docker run --rm ARGS IMAGE` with the checker (harness: [`Daemons::checker_run`]).
    fn run(&self, name: &str, args: &[&str], decoy_minors: &[u32]) -> Run {
        self.daemons
            .checker_run(name, args, IMAGE, decoy_minors, &self.hook_log)
    }

    /// Stops the daemons and checks that the host is as it was: mounts,
    /// `/etc`, the simulated driver, no daemon, container or cgroup left.
    fn finish(self) {
        let tag = self.daemons.tag.clone();
        let Docker {
            daemons,
            host,
            mounts_before,
            driver_before,
            etc_before,
            ..
        } = self;
        drop(daemons);
        assert_mounts_unchanged(&mounts_before, "after the daemons stopped");
        assert_eq!(
            listing_diff(&etc_before, &etc_listing()),
            Vec::<String>::new(),
            "/etc changed"
        );
        assert_eq!(
            listing_diff(&driver_before, &tree_listing(&host.dir)),
            Vec::<String>::new(),
            "the simulated host changed"
        );
        let left = cgroup_dirs(|n| n.to_str().is_some_and(|n| n.starts_with(&tag)));
        assert!(left.is_empty(), "cgroups left behind: {left:?}");
        for daemon in ["dockerd", "containerd", "containerd-shim-runc-v2"] {
            let out = Command::new("pgrep")
                .arg("-f")
                .arg(format!("{daemon}.*{tag}"))
                .output()
                .unwrap();
            assert!(
                out.stdout.is_empty(),
                "{daemon} left running: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
}

/// `/etc` as a listing, to show that the daemons' overlay kept it unchanged.
fn etc_listing() -> std::collections::BTreeMap<PathBuf, String> {
    tree_listing(Path::new("/etc"))
}

/// Every form of `--gpus` Docker 20.10 sends (TESTBED.md), on one pair of
/// daemons: the request reaches the hook only through `process.env`.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn docker_gpus_forms() {
    let _serial = serial();
    let docker = Docker::start("gpus-forms");
    let host = docker.host.clone();
    let minor = |i| gpu(&host, i).minor;

    let run = docker.run("all", &["--gpus", "all"], &[]);
    assert_gpus(&run, &host, &[0, 1, 2, 3], &[]);

    let run = docker.run("count", &["--gpus", "2"], &[minor(3)]);
    assert_gpus(&run, &host, &[0, 1], &[minor(3)]);

    let run = docker.run("list", &["--gpus", "\"device=1,2\""], &[minor(0)]);
    assert_gpus(&run, &host, &[1, 2], &[minor(0)]);

    let uuid = format!("\"device={}\"", gpu(&host, 3).uuid);
    let run = docker.run("uuid", &["--gpus", &uuid], &[minor(1)]);
    assert_gpus(&run, &host, &[3], &[minor(1)]);

    // Utility only: nvidia-smi and NVML, no UVM nodes, no libcuda.
    let run = docker.run("utility", &["--gpus", "all,capabilities=utility"], &[]);
    assert_utility_only(&run, &host);

    // `--gpus 0`: the hook is added, the variable is not: nothing happens.
    let run = docker.run("zero", &["--gpus", "0"], &[]);
    run.assert_completed();
    assert!(run.report.nodes.is_empty(), "{}", run.describe());
    assert!(run.report.files.is_empty(), "{}", run.describe());

    // The image's void comes first, `--gpus 1`'s value last, and wins.
    let run = docker.run(
        "void-then-gpus",
        &["-e", "NVIDIA_VISIBLE_DEVICES=void", "--gpus", "1"],
        &[],
    );
    assert_gpus(&run, &host, &[0], &[]);
    docker.finish();
}

/// Repeated `--gpus`: Docker adds the hook twice and the variable twice;
/// the second run finds the first's injection and leaves one consistent
/// injection of the last value, with no mount stacked and no error.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn docker_repeated_gpus_injects_once() {
    let _serial = serial();
    let docker = Docker::start("gpus-repeated");
    let host = docker.host.clone();
    let run = docker.run("repeated", &["--gpus", "1", "--gpus", "2"], &[]);
    assert_gpus(&run, &host, &[0, 1], &[]);
    let log = run.hook_log.as_deref().unwrap_or_default();
    assert_eq!(
        log.matches("injected").count(),
        2,
        "the hook ran twice:{}",
        run.describe()
    );
    // One mount per library, not two stacked.
    let libcuda = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("mount /usr/lib/x86_64-linux-gnu/libcuda.so."))
        .count();
    assert_eq!(libcuda, 1, "stacked mounts:{}", run.describe());
    docker.finish();
}

/// A requirement the host does not meet refuses the container, and Docker
/// shows the hook's one line, which says what to do.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn docker_shows_a_requirement_refusal() {
    let _serial = serial();
    let docker = Docker::start("gpus-refused");
    let run = docker.run(
        "refused",
        &["-e", "NVIDIA_REQUIRE_CUDA=cuda>=13.0", "--gpus", "all"],
        &[],
    );
    assert!(!run.succeeded(), "{}", run.describe());
    let stderr = &run.stderr;
    assert!(
        stderr.contains("error running hook #0")
            && stderr.contains("unsatisfied condition: cuda>=13.0")
            && stderr.contains("535.261.03"),
        "Docker's message names the hook's refusal:{}",
        run.describe()
    );
    docker.finish();
}

/// containerd 1.6's `ctr run --gpus`: its prestart hook is `containerd
/// oci-hook -- nvidia-container-cli --load-kmods configure --device=…
/// --compute --compat32 --graphics --utility --video --display
/// --pid={{pid}} {{rootfs}}`, with empty stdin: the argv is the request.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn ctr_run_gpus() {
    let _serial = serial();
    let docker = Docker::start("ctr");
    let host = docker.host.clone();
    let namespace = format!("{}-ctr", docker.daemons.tag);
    for (name, gpus, decoy) in [
        ("ctr-one", &["--gpus", "0"][..], 3),
        ("ctr-two", &["--gpus", "1", "--gpus", "3"], 0),
    ] {
        let rootfs = docker.daemons.dir.join(format!("rootfs-{name}"));
        let status = Command::new("cp")
            .arg("-a")
            .arg(template_rootfs(&host))
            .arg(&rootfs)
            .status()
            .unwrap();
        assert!(status.success());
        let out_dir = docker.daemons.dir.join(name).join("out");
        std::fs::create_dir_all(&out_dir).unwrap();
        let _ = std::fs::remove_file(&docker.hook_log);
        let decoy_minor = gpu(&host, decoy).minor;
        let script = format!(
            "mknod /dev/nvidia{decoy_minor} c {NVIDIA_MAJOR} {decoy_minor}; {CONTAINER_SCRIPT}"
        );
        let mount = format!(
            "type=bind,src={},dst=/out,options=rbind:rw",
            path_str(&out_dir)
        );
        let rootfs_arg = path_str(&rootfs);
        let mut args = vec!["run", "--rm", "--mount", &mount];
        args.extend_from_slice(gpus);
        args.extend_from_slice(&["--rootfs", &rootfs_arg, name, "/bin/sh", "-c", &script]);
        let started = Instant::now();
        let finished = docker.daemons.ctr(&namespace, &args);
        let run = collect_run(
            name,
            finished,
            started.elapsed(),
            &out_dir,
            &docker.hook_log,
        );
        let indices: Vec<u32> = gpus.iter().filter_map(|a| a.parse().ok()).collect();
        // ctr grants the devices it names; the decoy must stay denied.
        let minors: Vec<u32> = indices.iter().map(|i| gpu(&host, *i).minor).collect();
        assert_injected(
            &run,
            &host,
            &Expected {
                nodes: &node_specs(&host, &minors),
                real_libraries: true,
            },
        );
        let ctx = run.describe();
        let nodes = run.report.gpu_nodes();
        assert_eq!(
            nodes.get(&decoy_minor).and_then(|n| n.open.as_deref()),
            Some("EPERM"),
            "the decoy /dev/nvidia{decoy_minor} must be denied:{ctx}"
        );
    }
    docker.finish();
}

// ------------------------------------------------------------ runtime mode

/// `docker run --runtime nvidia` with the image's `NVIDIA_VISIBLE_DEVICES`:
/// the wrapper writes the GPUs into the spec and runc creates them; the
/// spec's createRuntime hook writes the loader cache and links.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn docker_runtime_nvidia_takes_gpus_from_the_spec() {
    let _serial = serial();
    let docker = Docker::start("runtime");
    let host = docker.host.clone();
    let minor = |i| gpu(&host, i).minor;
    let uuid = format!("NVIDIA_VISIBLE_DEVICES={}", gpu(&host, 2).uuid);
    for (name, env, indices, decoy) in [
        (
            "rt-index",
            "NVIDIA_VISIBLE_DEVICES=0",
            &[0][..],
            Some(minor(1)),
        ),
        ("rt-all", "NVIDIA_VISIBLE_DEVICES=all", &[0, 1, 2, 3], None),
        ("rt-uuid", uuid.as_str(), &[2], Some(minor(3))),
    ] {
        let decoys: Vec<u32> = decoy.into_iter().collect();
        let run = docker.run(name, &["--runtime", "nvidia", "-e", env], &decoys);
        assert_gpus(&run, &host, indices, &decoys);
        let log = run.hook_log.as_deref().unwrap_or_default();
        assert!(
            log.contains("written for the runtime") && log.contains("CDI:"),
            "the wrapper edited the spec and its hook ran:{}",
            run.describe()
        );
        assert!(
            !log.contains("device cgroup"),
            "nothing of ours wrote the device cgroup: runc did:{}",
            run.describe()
        );
    }
    docker.finish();
}

/// `docker run --runtime nvidia` in CDI mode, with our spec and another
/// vendor's in a private directory bound over `/etc/cdi`: the names of
/// `NVIDIA_VISIBLE_DEVICES` are CDI devices, each spec's edits are applied
/// as CDI's library applies them, runc creates and allows the nodes, and
/// an unknown name stops the container with our line.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn docker_runtime_nvidia_in_cdi_mode_applies_the_named_cdi_devices() {
    let _serial = serial();
    let docker = Docker::start_cdi("runtime-cdi", |dir, config| {
        let out = Command::new(harness::project::hook_binary())
            .arg("--config")
            .arg(config)
            .args(["cdi", "generate", "--output"])
            .arg(dir.join("nvidia.yaml"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(
            dir.join("example.yaml"),
            "cdiVersion: 0.5.0\nkind: example.com/dev\ndevices:\n- name: x\n  containerEdits:\n    \
             env: [EXAMPLE_DEV=x]\n    deviceNodes:\n    - path: /dev/example0\n      hostPath: /dev/null\n",
        )
        .unwrap();
        // NVIDIA_VISIBLE_DEVICES, which an image's ENV can set, names only
        // the kinds allowed: the administrator allows the other vendor's.
        let mut text = std::fs::read_to_string(config).unwrap();
        text.push_str("\n[runtime.cdi]\nenv-kinds = [\"nvidia.com/gpu\", \"example.com/dev\"]\n");
        std::fs::write(config, text).unwrap();
    });
    let host = docker.host.clone();
    let minor = |i| gpu(&host, i).minor;

    let run = docker.run(
        "cdi-all",
        &[
            "--runtime",
            "nvidia",
            "-e",
            "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all",
        ],
        &[],
    );
    assert_gpus(&run, &host, &[0, 1, 2, 3], &[]);
    let log = run.hook_log.as_deref().unwrap_or_default();
    assert!(
        log.contains("CDI devices nvidia.com/gpu=all:") && log.contains("written for the runtime"),
        "the wrapper applied the CDI device:{}",
        run.describe()
    );

    let decoys = [minor(2)];
    let run = docker.run(
        "cdi-one",
        &[
            "--runtime",
            "nvidia",
            "-e",
            "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1",
        ],
        &decoys,
    );
    assert_gpus(&run, &host, &[1], &decoys);

    let run = docker.run(
        "cdi-unknown",
        &[
            "--runtime",
            "nvidia",
            "-e",
            "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=9",
        ],
        &[],
    );
    assert!(!run.succeeded(), "{}", run.describe());
    assert!(
        run.stderr.contains(
            "unknown CDI device nvidia.com/gpu=9: no spec in /etc/cdi, /var/run/cdi defines it"
        ),
        "Docker shows the wrapper's refusal:{}",
        run.describe()
    );

    // Another vendor's device beside one of ours: both specs' edits.
    let script = format!(
        "{{ echo env=$EXAMPLE_DEV; stat -c 'node=%F %t:%T' /dev/example0; echo x > /dev/example0 && echo write=ok; }} \
         > /out/example 2>&1; {CONTAINER_SCRIPT}"
    );
    let run = docker.daemons.script_run(
        "cdi-vendor",
        &[
            "--runtime",
            "nvidia",
            "-e",
            "NVIDIA_VISIBLE_DEVICES=example.com/dev=x,nvidia.com/gpu=0",
        ],
        IMAGE,
        &script,
        &docker.hook_log,
    );
    assert_gpus(&run, &host, &[0], &[]);
    let example =
        std::fs::read_to_string(docker.daemons.dir.join("cdi-vendor/out/example")).unwrap();
    assert!(
        example.contains("env=x")
            && example.contains("node=character special file 1:3")
            && example.contains("write=ok"),
        "the other vendor's env and node (c 1:3, from its host node):\n{example}{}",
        run.describe()
    );
    docker.finish();
}

/// While a GPU container runs, its `config.json` in containerd's state
/// holds the GPU's node, its cgroup rule, the mounts and our hook; the v1
/// devices cgroup lists the node, written by runc alone; `docker exec`
/// into it sees the GPU; a non-GPU container through the same default
/// runtime keeps its spec untouched.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn docker_default_runtime_nvidia_edits_only_gpu_specs() {
    let _serial = serial();
    let docker = Docker::start_with("runtime-default", Some("nvidia"));
    let host = docker.host.clone();
    let m0 = gpu(&host, 0).minor;
    let id = docker
        .daemons
        .run_detached(&["-e", "NVIDIA_VISIBLE_DEVICES=0"], IMAGE);
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(docker.daemons.task_config(&id)).unwrap()).unwrap();
    let devices = spec["linux"]["devices"].to_string();
    assert!(
        devices.contains(&format!("\"/dev/nvidia{m0}\"")),
        "{devices}"
    );
    let rules = spec["linux"]["resources"]["devices"].to_string();
    assert!(
        rules.contains(&format!("\"major\":195,\"minor\":{m0}")),
        "{rules}"
    );
    let mounts = spec["mounts"].to_string();
    assert!(
        mounts.contains("/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03"),
        "{mounts}"
    );
    assert!(
        spec["hooks"]["createRuntime"]
            .to_string()
            .contains("cdi-hook"),
        "{spec}"
    );
    assert!(
        spec["hooks"]["createContainer"].is_null(),
        "nothing at createContainer: {spec}"
    );
    let list = cgroup_dirs(|n| n.to_str() == Some(id.as_str()))
        .into_iter()
        .find(|d| d.join("devices.list").is_file())
        .map(|d| std::fs::read_to_string(d.join("devices.list")).unwrap())
        .expect("the container's v1 devices cgroup");
    assert!(list.contains(&format!("c 195:{m0} rw")), "{list}");

    let exec = docker.daemons.docker(&["exec", &id, "/checker"]);
    assert!(
        exec.stdout.contains(&format!(
            "node /dev/nvidia{m0} c 195:{m0} mode=0666 open=ENXIO"
        )),
        "{}",
        exec.stdout
    );
    assert!(exec.stdout.contains("version=12020"), "{}", exec.stdout);
    let _ = docker.daemons.docker(&["rm", "-f", &id]);

    // No GPU asked for: the wrapper leaves the spec as dockerd wrote it.
    let id = docker.daemons.run_detached(&[], IMAGE);
    let spec = std::fs::read_to_string(docker.daemons.task_config(&id)).unwrap();
    assert!(
        !spec.contains("nvidia"),
        "a non-GPU spec was edited: {spec}"
    );
    let _ = docker.daemons.docker(&["rm", "-f", &id]);
    docker.finish();
}

/// A requirement the host does not meet stops the wrapper before runc
/// runs, and Docker shows its one line.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn docker_runtime_nvidia_shows_a_requirement_refusal() {
    let _serial = serial();
    let docker = Docker::start("runtime-refused");
    let run = docker.run(
        "rt-refused",
        &[
            "--runtime",
            "nvidia",
            "-e",
            "NVIDIA_VISIBLE_DEVICES=all",
            "-e",
            "NVIDIA_REQUIRE_CUDA=cuda>=13.0",
        ],
        &[],
    );
    assert!(!run.succeeded(), "{}", run.describe());
    assert!(
        run.stderr.contains("unsatisfied condition: cuda>=13.0")
            && run.stderr.contains("535.261.03"),
        "Docker shows the wrapper's refusal:{}",
        run.describe()
    );
    docker.finish();
}

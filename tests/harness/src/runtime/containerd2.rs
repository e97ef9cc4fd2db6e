//! A Kubernetes node on containerd 2.x: Debian sid's containerd 2.1
//! (config version 3, `io.containerd.cri.v1.runtime`, CDI on by default)
//! and runc 1.3 from the sid root (crate::debroot), in one private
//! namespace ([`Daemons::hold`]) whose `/etc` holds containerd's own default
//! config on the node's paths, `nvidia-ctk runtime configure
//! --runtime=containerd` run inside it on NVIDIA's default paths, and pods
//! run through the CRI as the kubelet runs them ([`super::cri`]).
//! tests/containerd2.rs, tests/containerd2_k8s.rs and the containerd 2.x
//! part of benches/trixie_starts.rs share it.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::bundle::{fresh_work_dir, template_rootfs};
use super::cleanup::remove_tree_safely;
use super::host_state::NodeBefore;
use super::run::{serial, Serial};
use crate::simhost::{Fixture, SimHost};

use super::cri::{
    ensure_cri_api, import_pod_images, run_checker_pod, PodOutcome, Shape, PAUSE_IMAGE,
};
use super::daemons::{our_spec, DaemonSetup, Daemons};
use super::oci_config::path_str;
use super::process::{run_bounded, Finished};
use super::run::RUN_LIMIT;
use crate::debroot::sid;

/// containerd's main config, inside the namespace.
pub const CONFIG: &str = "/etc/containerd/config.toml";
/// NVIDIA's default drop-in, inside the namespace.
pub const DROP_IN: &str = "/etc/containerd/conf.d/99-nvidia.toml";
/// The CRI runtime plugin of a version 3 config.
pub const CRI: &str = "io.containerd.cri.v1.runtime";
/// The runc v2 shim, the `runtime_type` a runtime needs.
pub const RUNC_V2: &str = "io.containerd.runc.v2";

/// The namespace, its containerd, and where the hook logs.
pub struct Node {
    /// The namespace and containerd.
    pub daemons: Daemons,
    /// The hook's log (its config's `log.file`).
    pub hook_log: PathBuf,
    /// Our wrapper as `nvidia-container-runtime`, for `--nvidia-runtime-path`.
    pub runtime_path: String,
    /// `containerd config default` on this node's paths, sandbox image and
    /// `restrict_oom_score_adj` (no CAP_SYS_RESOURCE here: TESTBED.md).
    pub default_config: String,
}

impl Node {
    /// A node under `dir` with `hook_config` (logging to `hook_log`) and
    /// `etc_files` in its `/etc`, our binary linked as NVIDIA's names; no
    /// config written and containerd not started yet.
    pub fn hold(
        dir: &Path,
        hook_config: &Path,
        hook_log: &Path,
        etc_files: &[(&str, &Path)],
    ) -> Node {
        let root = sid();
        ensure_cri_api(&root);
        let daemons = Daemons::hold(
            dir,
            &DaemonSetup {
                hook_config,
                links: &["nvidia-container-runtime", "nvidia-cdi-hook", "nvidia-ctk"],
                runtimes: &[],
                default_runtime: None,
                docker_config: None,
                cdi_dir: None,
                etc_files,
                root: Some(&root),
                cri: None,
            },
        );
        let mut node = Node {
            runtime_path: path_str(&dir.join("bin/nvidia-container-runtime")),
            daemons,
            hook_log: hook_log.to_path_buf(),
            default_config: String::new(),
        };
        let default = node.containerd(&["config", "default"]);
        assert!(default.starts_with("version = 3\n"), "{default}");
        let socket = path_str(&node.daemons.containerd_socket());
        let mut text = default;
        for (from, to) in [
            (
                "root = '/var/lib/containerd'".to_string(),
                format!("root = '{}'", path_str(&dir.join("ctd-root"))),
            ),
            (
                "state = '/run/containerd'".into(),
                format!("state = '{}'", path_str(&dir.join("ctd-state"))),
            ),
            (
                "address = '/run/containerd/containerd.sock'".into(),
                format!("address = '{socket}'"),
            ),
            (
                "sandbox = 'registry.k8s.io/pause:3.10'".into(),
                format!("sandbox = '{PAUSE_IMAGE}'"),
            ),
            (
                "restrict_oom_score_adj = false".into(),
                "restrict_oom_score_adj = true".into(),
            ),
        ] {
            text = edit(&text, &from, &to);
        }
        node.default_config = text;
        fs::create_dir_all(node.etc("/etc/containerd")).unwrap();
        node
    }

    /// `nvidia-ctk runtime configure --runtime=containerd ARGS` (this
    /// binary under that name) inside the namespace, which must succeed.
    pub fn configure(&self, args: &[&str]) {
        let mut cmd = self.in_namespace(&path_str(&self.daemons.dir.join("bin/nvidia-ctk")));
        cmd.args(["runtime", "configure", "--runtime=containerd"])
            .arg(format!("--nvidia-runtime-path={}", self.runtime_path))
            .args(args);
        let out = run_bounded(cmd, RUN_LIMIT);
        assert!(
            out.status.is_some_and(|s| s.success()),
            "nvidia-ctk runtime configure {args:?}: {}{}",
            out.stdout,
            out.stderr
        );
    }

    /// `program` in the namespace with a bare environment.
    pub fn in_namespace(&self, program: &str) -> std::process::Command {
        let mut cmd = self.daemons.in_namespace(program);
        cmd.env_clear().env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        cmd
    }

    /// `containerd ARGS` in the namespace, which must succeed; its stdout.
    pub fn containerd(&self, args: &[&str]) -> String {
        let mut cmd = self.in_namespace("containerd");
        cmd.args(args);
        let out: Finished = run_bounded(cmd, RUN_LIMIT);
        assert!(
            out.status.is_some_and(|s| s.success()),
            "containerd {args:?}: {}{}",
            out.stdout,
            out.stderr
        );
        out.stdout
    }

    /// What containerd makes of its config, imports merged.
    pub fn dump(&self) -> toml::Table {
        let text = self.containerd(&["--config", CONFIG, "config", "dump"]);
        toml::from_str(&text).unwrap_or_else(|e| panic!("config dump: {e}\n{text}"))
    }

    /// A file of the namespace's `/etc`, read or written from here.
    pub fn etc(&self, path: &str) -> PathBuf {
        self.daemons.ns_path(path)
    }

    /// Restarts containerd on [`CONFIG`] and checks its CRI plugins loaded.
    pub fn restart(&mut self) {
        self.daemons.stop_containerd();
        self.daemons.start_containerd(Path::new(CONFIG));
        let plugins = self.daemons.ctr("k8s.io", &["plugins", "ls"]);
        for (kind, id) in [
            ("io.containerd.grpc.v1", "cri"),
            ("io.containerd.cri.v1", "runtime"),
        ] {
            assert!(
                plugins.stdout.lines().any(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    f.first() == Some(&kind) && f.get(1) == Some(&id) && f.last() == Some(&"ok")
                }),
                "{kind} {id} did not load:\n{}\n{}",
                plugins.stdout,
                self.daemons.logs()
            );
        }
    }

    /// Imports the pause image and `host`'s template rootfs as `image`
    /// (archives made in `dir`) into containerd's Kubernetes namespace.
    pub fn import_images(&self, host: &SimHost, image: &str, dir: &Path) {
        import_pod_images(&self.daemons, &template_rootfs(host), image, dir);
    }

    /// One pod of `image` whose container runs the checker (decoys at
    /// `decoys`), shaped by `shape`; fails when the runtime still lists it
    /// once removed.
    pub fn pod(&self, name: &str, image: &str, decoys: &[u32], shape: Shape) -> PodOutcome {
        run_checker_pod(&self.daemons, name, image, decoys, shape, &self.hook_log)
    }
}

/// `text` with `from` replaced by `to` once; fails when `from` is not there.
pub fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} not in:\n{text}");
    text.replacen(from, to, 1)
}

/// The CRI runtime plugin's section of a config.
pub fn cri(config: &toml::Table) -> &toml::Value {
    &config["plugins"][CRI]
}

/// One test's node on the real-535 4-GPU host, in a fresh work directory
/// named after the test, with our spec in its `/etc/cdi` and the host's
/// state taken to compare at the end ([`Suite::finish`]).
pub struct Suite {
    /// The simulated host.
    pub host: SimHost,
    /// The work directory (the node is under `node/`).
    pub work: PathBuf,
    /// The node.
    pub node: Node,
    before: NodeBefore,
    started: Instant,
    _serial: Serial,
}

impl Suite {
    /// Starts the suite `name`, with more `/etc` files (path under it, text).
    pub fn start(name: &str, etc_texts: &[(&str, &str)]) -> Suite {
        let serial = serial();
        let started = Instant::now();
        let host = SimHost::shared(Fixture::real(4));
        let before = NodeBefore::take(&host.dir);
        let (work, hook_config, hook_log) = fresh_work_dir(&host, name);
        let spec = our_spec(&host, &work);
        let mut files: Vec<(String, PathBuf)> = vec![("cdi/nvidia.yaml".into(), spec)];
        for (rel, text) in etc_texts {
            let file = work.join("etc-files").join(rel);
            fs::create_dir_all(file.parent().expect("a file under /etc")).unwrap();
            fs::write(&file, text).unwrap();
            files.push((rel.to_string(), file));
        }
        let files: Vec<(&str, &Path)> = files
            .iter()
            .map(|(r, f)| (r.as_str(), f.as_path()))
            .collect();
        let node = Node::hold(&work.join("node"), &hook_config, &hook_log, &files);
        Suite {
            host,
            work,
            node,
            before,
            started,
            _serial: serial,
        }
    }

    /// Stops the node, checks the host is as it was, removes the work
    /// directory and says how long the suite took.
    pub fn finish(self) {
        let tag = self.node.daemons.tag.clone();
        drop(self.node);
        self.before.assert_left_alone(&tag);
        remove_tree_safely(&self.work);
        eprintln!(
            "{}: {:.0} s",
            self.work.display(),
            self.started.elapsed().as_secs_f64()
        );
    }
}

//! containerd's CRI plugin driven as the kubelet drives it: one pod with
//! one container per call (RunPodSandbox, CreateContainer, StartContainer,
//! then the removals) through `integration/cri-client`, a Python grpcio
//! client run inside the trixie root against the socket of containerd 1.7
//! started by [`Daemons`] with a [`super::daemons::CriSetup`]. No registry
//! is reachable: the sandbox (pause) image and the test image are Docker
//! archives made here and imported with `ctr -n k8s.io images import`.
//!
//! The CRI message classes are made once into the root by protoc from the
//! CRI `api.proto` of Debian's golang-k8s-cri-api-dev (in sid only, so
//! fetched with a private sources list beside the root's own: the root's
//! apt configuration is left as it is).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::daemons::{checker_script, collect_run, Daemons};
use super::oci_config::path_str;
use super::process::run_bounded;
use super::run::Run;
use crate::debroot::DebRoot;
use crate::project::repo;

/// Where the generated `api_pb2.py` lives inside the root.
pub const CRI_API_DIR: &str = "/opt/oci-nvidia-hook-cri";
/// The CRI namespace containerd keeps Kubernetes' images in.
const K8S_NAMESPACE: &str = "k8s.io";
/// The pause image's reference, as the CRI plugin's `sandbox_image`.
pub const PAUSE_IMAGE: &str = "docker.io/library/onh-pause:test";

/// Makes `api_pb2.py` in the root, unless it is there.
pub fn ensure_cri_api(root: &DebRoot) {
    if root
        .dir
        .join(CRI_API_DIR.trim_start_matches('/'))
        .join("api_pb2.py")
        .is_file()
    {
        return;
    }
    const SCRIPT: &str = r#"set -e
out=$1 d=/var/lib/oci-nvidia-hook-cri-api
rm -rf "$d"; mkdir -p "$d/lists/partial" "$d/deb"
# The root's own archive line, for sid (whose short Valid-Until this
# machine's clock may be past).
sed -n 's/^deb \([^ ]*\) [^ ]* main.*/deb \1 sid main/p' /etc/apt/sources.list | head -n1 >"$d/sources.list"
[ -s "$d/sources.list" ] || { echo "no archive line in /etc/apt/sources.list" >&2; exit 1; }
set -- -o Dir::Etc::SourceList="$d/sources.list" -o Dir::Etc::SourceParts=/dev/null \
  -o Dir::State::Lists="$d/lists" -o APT::Sandbox::User=root \
  -o Acquire::Check-Valid-Until=false
apt-get -q "$@" update >&2
cd "$d/deb"
apt-get -q "$@" download golang-k8s-cri-api-dev >&2
dpkg-deb -x golang-k8s-cri-api-dev_*.deb x
# trixie's protoc (3.21) predates the debug_redact field option (auth
# fields only: it marks what logs must hide); dropped, the wire is the same.
sed 's/ \[debug_redact = true\]//' x/usr/share/gocode/src/k8s.io/cri-api/pkg/apis/runtime/v1/api.proto >api.proto
mkdir -p "$out.partial"
protoc -I . --python_out="$out.partial" api.proto
rm -rf "$out"; mv "$out.partial" "$out"
rm -rf "$d""#;
    root.chroot_script(SCRIPT, &[CRI_API_DIR]);
}

/// A Docker archive (`docker save`'s format, which `ctr images import`
/// reads) of `rootfs` as image `reference`, with `entrypoint`, at `tar`.
pub fn image_archive(rootfs: &Path, reference: &str, entrypoint: &[&str], tar: &Path) {
    let stage = tar.with_extension("stage");
    let _ = fs::remove_dir_all(&stage);
    fs::create_dir_all(&stage).unwrap();
    let layer = stage.join("layer.tar");
    let status = Command::new("tar")
        .arg("-C")
        .arg(rootfs)
        .arg("-cf")
        .arg(&layer)
        .arg(".")
        .status()
        .expect("run tar");
    assert!(status.success(), "tar of {} failed", rootfs.display());
    let config = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": entrypoint, "Env": ["PATH=/usr/bin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{}", sha256(&layer))]},
    });
    let config_bytes = serde_json::to_vec(&config).unwrap();
    fs::write(stage.join("config.json"), &config_bytes).unwrap();
    let config_name = format!("{}.json", sha256(&stage.join("config.json")));
    fs::rename(stage.join("config.json"), stage.join(&config_name)).unwrap();
    let manifest =
        json!([{"Config": config_name, "RepoTags": [reference], "Layers": ["layer.tar"]}]);
    fs::write(stage.join("manifest.json"), manifest.to_string()).unwrap();
    let status = Command::new("tar")
        .arg("-C")
        .arg(&stage)
        .arg("-cf")
        .arg(tar)
        .args(["manifest.json", &config_name, "layer.tar"])
        .status()
        .expect("run tar");
    assert!(status.success(), "tar of the image archive failed");
    fs::remove_dir_all(&stage).unwrap();
}

fn sha256(file: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(file)
        .output()
        .expect("run sha256sum");
    assert!(out.status.success(), "sha256sum {}", file.display());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("a digest")
        .to_string()
}

/// The sandbox image: a static `/pause` that sleeps until a signal.
pub fn pause_archive(dir: &Path) -> PathBuf {
    let rootfs = dir.join("pause-rootfs");
    fs::create_dir_all(&rootfs).unwrap();
    let source = dir.join("pause.c");
    fs::write(
        &source,
        "#include <unistd.h>\nint main(void) { for (;;) pause(); }\n",
    )
    .unwrap();
    let status = Command::new("gcc")
        .args(["-static", "-O2", "-o"])
        .arg(rootfs.join("pause"))
        .arg(&source)
        .status()
        .expect("run gcc");
    assert!(status.success(), "gcc -static pause.c failed");
    let tar = dir.join("pause.tar");
    image_archive(&rootfs, PAUSE_IMAGE, &["/pause"], &tar);
    tar
}

/// Imports the pause image and `rootfs` as `image` (archives made in
/// `dir`) into containerd's Kubernetes namespace.
pub fn import_pod_images(daemons: &Daemons, rootfs: &Path, image: &str, dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    import_k8s_image(daemons, &pause_archive(dir));
    let tar = dir.join("image.tar");
    image_archive(rootfs, image, &[], &tar);
    import_k8s_image(daemons, &tar);
}

/// Imports a Docker archive into containerd's Kubernetes namespace.
pub fn import_k8s_image(daemons: &Daemons, tar: &Path) {
    let out = daemons.ctr(K8S_NAMESPACE, &["images", "import", &path_str(tar)]);
    assert!(
        out.status.is_some_and(|s| s.success()),
        "ctr images import {}: {}{}\n{}",
        tar.display(),
        out.stdout,
        out.stderr,
        daemons.logs()
    );
}

/// One pod with one container, as the kubelet asks for it.
pub struct PodRequest<'a> {
    /// The pod's and the run's name (its directory under the daemons').
    pub name: &'a str,
    /// The container's image reference (imported already).
    pub image: &'a str,
    /// The container's command.
    pub command: &'a [&'a str],
    /// The runtime handler (`""`: containerd's default).
    pub runtime_handler: &'a str,
    /// The container's environment.
    pub envs: &'a [(&'a str, &'a str)],
    /// More mounts (host path, container path), beside the checker's `/out`.
    pub mounts: &'a [(&'a str, &'a str)],
    /// The container's annotations.
    pub annotations: &'a [(&'a str, &'a str)],
    /// CRI `CDIDevices` names.
    pub cdi_devices: &'a [&'a str],
}

/// What a device plugin's answer (or a pod's spec) puts into the container.
#[derive(Clone, Copy, Default)]
pub struct Shape<'a> {
    /// The runtime handler (`""`: containerd's default).
    pub handler: &'a str,
    /// The container's environment.
    pub envs: &'a [(&'a str, &'a str)],
    /// Mounts (host path, container path).
    pub mounts: &'a [(&'a str, &'a str)],
    /// The container's annotations.
    pub annotations: &'a [(&'a str, &'a str)],
    /// CRI `CDIDevices` names.
    pub cdi_devices: &'a [&'a str],
}

impl<'a> Shape<'a> {
    /// The device plugin's `volume-mounts` answer under the `nvidia`
    /// handler: `mounts` (`/dev/null` at
    /// `/var/run/nvidia-container-devices/<id>`) and the variable naming
    /// their directory.
    pub fn volume_mounts(mounts: &'a [(&'a str, &'a str)]) -> Shape<'a> {
        Shape {
            handler: "nvidia",
            envs: &[(
                "NVIDIA_VISIBLE_DEVICES",
                "/var/run/nvidia-container-devices",
            )],
            mounts,
            ..Shape::default()
        }
    }
}

/// One pod of `image` whose container runs the checker (after making
/// `decoys`), shaped by `shape`, through [`run_pod_leaving_nothing`].
pub fn run_checker_pod(
    daemons: &Daemons,
    name: &str,
    image: &str,
    decoys: &[u32],
    shape: Shape,
    hook_log: &Path,
) -> PodOutcome {
    let script = checker_script(decoys);
    run_pod_leaving_nothing(
        daemons,
        &PodRequest {
            name,
            image,
            command: &["/bin/sh", "-c", &script],
            runtime_handler: shape.handler,
            envs: shape.envs,
            mounts: shape.mounts,
            annotations: shape.annotations,
            cdi_devices: shape.cdi_devices,
        },
        hook_log,
    )
}

/// What the CRI client answered.
pub struct PodOutcome {
    /// The checker's run (stdout and stderr from the CRI log).
    pub run: Run,
    /// The client's whole answer (exit code, error, timings, what is left).
    pub answer: Value,
}

impl PodOutcome {
    /// Milliseconds the named CRI call took.
    pub fn call_ms(&self, method: &str) -> f64 {
        self.answer["timings_ms"][method]
            .as_f64()
            .unwrap_or(f64::NAN)
    }
}

/// Runs `request` through the CRI client in `daemons`' namespace; the
/// container's log becomes the [`Run`]'s output. Fails the test if the
/// client itself failed to answer.
pub fn run_pod(daemons: &Daemons, request: &PodRequest, hook_log: &Path) -> PodOutcome {
    let run_dir = daemons.dir.join("pods").join(request.name);
    let out_dir = run_dir.join("out");
    let _ = fs::remove_dir_all(&run_dir);
    fs::create_dir_all(&out_dir).unwrap();
    fs::create_dir_all(run_dir.join("logs")).unwrap();
    let _ = fs::remove_file(hook_log);
    let pair = |k: &str, v: &str| json!({"key": k, "value": v});
    let mut mounts = vec![json!({"container_path": "/out", "host_path": path_str(&out_dir)})];
    mounts.extend(
        request
            .mounts
            .iter()
            .map(|(h, c)| json!({"container_path": c, "host_path": h, "readonly": true})),
    );
    let body = json!({
        "pod": {
            "metadata": {"name": request.name, "uid": format!("{}-{}", daemons.tag, request.name),
                         "namespace": "default", "attempt": 0},
            "log_directory": path_str(&run_dir.join("logs")),
            "linux": {
                "cgroup_parent": format!("/{}-pods", daemons.tag),
                // NODE: the host's network, so no CNI plugin is needed.
                "security_context": {"namespace_options": {"network": 2}},
            },
        },
        "container": {
            "metadata": {"name": "checker", "attempt": 0},
            "image": {"image": request.image},
            "command": request.command,
            "envs": request.envs.iter().map(|(k, v)| pair(k, v)).collect::<Vec<_>>(),
            "mounts": mounts,
            "annotations": request.annotations.iter().map(|(k, v)| (k.to_string(), json!(v)))
                .collect::<serde_json::Map<_, _>>(),
            "CDI_devices": request.cdi_devices.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
            "log_path": "checker.log",
        },
        "runtime_handler": request.runtime_handler,
        "timeout": 60,
    });
    let request_file = run_dir.join("request.json");
    fs::write(&request_file, body.to_string()).unwrap();
    let mut cmd = daemons.in_namespace("python3");
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("PYTHONPATH", CRI_API_DIR)
        .arg(repo().join("integration/cri-client"))
        .arg(daemons.containerd_socket())
        .arg(&request_file);
    let started = Instant::now();
    let finished = run_bounded(cmd, Duration::from_secs(120));
    let elapsed = started.elapsed();
    let answer: Value = serde_json::from_str(finished.stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "cri-client gave no answer ({e}): {}{}\n{}",
            finished.stdout,
            finished.stderr,
            daemons.logs()
        )
    });
    let container = super::process::Finished {
        status: finished
            .status
            .filter(|_| answer["error"].is_null() && answer["exit_code"] == 0),
        timed_out: finished.timed_out,
        stdout: answer["stdout"].as_str().unwrap_or_default().to_string(),
        stderr: format!(
            "{}{}",
            answer["stderr"].as_str().unwrap_or_default(),
            answer["error"].as_str().unwrap_or_default()
        ),
    };
    let run = collect_run(request.name, container, elapsed, &out_dir, hook_log);
    PodOutcome { run, answer }
}

/// [`run_pod`], its CreateContainer and StartContainer times printed;
/// fails the test when the runtime still lists the pod or its container
/// once they were removed.
pub fn run_pod_leaving_nothing(
    daemons: &Daemons,
    request: &PodRequest,
    hook_log: &Path,
) -> PodOutcome {
    let outcome = run_pod(daemons, request, hook_log);
    eprintln!(
        "{}: CreateContainer {:.0} ms, StartContainer {:.0} ms",
        request.name,
        outcome.call_ms("CreateContainer"),
        outcome.call_ms("StartContainer")
    );
    assert_eq!(
        outcome.answer["left"],
        json!({"pods": 0, "containers": 0}),
        "{}: the runtime still lists what was removed: {}",
        request.name,
        outcome.answer
    );
    outcome
}

/// How the device plugin's spec calls NVIDIA's hooks.
#[derive(Clone, Copy)]
pub enum PluginHooks<'a> {
    /// `nvidia-cdi-hook HOOK …` at this path, no `env` (ANCHORS.md):
    /// `create-symlinks` and `update-ldcache --folder`.
    CdiHook(&'a Path),
    /// `nvidia-ctk hook HOOK …` at this path, `env` =
    /// `NVIDIA_CTK_DEBUG=false`: the device plugin's default
    /// `--nvidia-cdi-hook-path=/usr/bin/nvidia-ctk` (v0.17 and later), with
    /// toolkit v1.20's hooks: `create-symlinks`, `enable-cuda-compat
    /// --host-driver-version=VERSION`, `update-ldcache --folder`,
    /// `disable-device-node-modification`
    /// (../shared/research/nvidia-v1.20-gaps.md, §2a).
    Ctk {
        /// The `nvidia-ctk` the spec names.
        path: &'a Path,
        /// The host driver's version.
        driver_version: &'a str,
    },
}

/// [`device_plugin_spec`] for `host`, from its driver root and our
/// `cdi generate --format json` spec for it.
pub fn device_plugin_spec_for(host: &crate::simhost::SimHost, hooks: PluginHooks) -> Value {
    let ours: Value = serde_json::from_str(
        &host.stdout(&["cdi", "generate", "--format", "json", "--output", "-"]),
    )
    .expect("our spec is JSON");
    device_plugin_spec(&ours, &host.dir.join("driver"), hooks)
}

/// The device plugin's own spec (kind `k8s.device-plugin.nvidia.com/gpu`,
/// one device per GPU UUID), shaped as NVIDIA's CDI library writes it:
/// the driver's files mounted at their paths inside the driver root,
/// `NVIDIA_VISIBLE_DEVICES=void`, and `createContainer` hooks called as
/// `hooks` says. Made from `ours`, our `cdi generate --format json` spec
/// for the same host.
fn device_plugin_spec(ours: &Value, driver_root: &Path, hooks: PluginHooks) -> Value {
    let root = path_str(driver_root);
    let edits = &ours["containerEdits"];
    let mut folders: Vec<String> = Vec::new();
    let mounts: Vec<Value> = edits["mounts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| {
            let host = m["hostPath"].as_str()?;
            let inside = host.strip_prefix(&root)?.to_string();
            if inside.contains(".so") {
                let dir = inside.rsplit_once('/').map_or("/", |(d, _)| d).to_string();
                if !folders.contains(&dir) {
                    folders.push(dir);
                }
            }
            Some(json!({"hostPath": host, "containerPath": inside,
                        "options": ["ro", "nosuid", "nodev", "bind"]}))
        })
        .collect();
    let hook = |args: Vec<String>| match hooks {
        PluginHooks::CdiHook(path) => {
            let mut argv = vec!["nvidia-cdi-hook".to_string()];
            argv.extend(args);
            json!({"hookName": "createContainer", "path": path_str(path), "args": argv})
        }
        PluginHooks::Ctk { path, .. } => {
            let mut argv = vec!["nvidia-ctk".to_string(), "hook".into()];
            argv.extend(args);
            json!({"hookName": "createContainer", "path": path_str(path), "args": argv,
                   "env": ["NVIDIA_CTK_DEBUG=false"]})
        }
    };
    let mut edits_hooks = Vec::new();
    if let Some(libcuda) = mounts
        .iter()
        .filter_map(|m| m["containerPath"].as_str())
        .find(|p| p.contains("/libcuda.so."))
    {
        let dir = libcuda.rsplit_once('/').map_or("", |(d, _)| d);
        edits_hooks.push(hook(vec![
            "create-symlinks".into(),
            "--link".into(),
            format!("libcuda.so.1::{dir}/libcuda.so"),
        ]));
    }
    if let PluginHooks::Ctk { driver_version, .. } = hooks {
        edits_hooks.push(hook(vec![
            "enable-cuda-compat".into(),
            format!("--host-driver-version={driver_version}"),
        ]));
    }
    let mut ldcache = vec!["update-ldcache".to_string()];
    for folder in &folders {
        ldcache.push("--folder".into());
        ldcache.push(folder.clone());
    }
    edits_hooks.push(hook(ldcache));
    if let PluginHooks::Ctk { .. } = hooks {
        edits_hooks.push(hook(vec!["disable-device-node-modification".into()]));
    }
    let devices: Vec<Value> = ours["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["name"].as_str().is_some_and(|n| n.starts_with("GPU-")))
        .cloned()
        .collect();
    json!({
        "cdiVersion": "0.5.0",
        "kind": "k8s.device-plugin.nvidia.com/gpu",
        "devices": devices,
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": edits["deviceNodes"],
            "mounts": mounts,
            "hooks": edits_hooks,
        },
    })
}

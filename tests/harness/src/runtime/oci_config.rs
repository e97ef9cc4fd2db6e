//! A test container's `config.json`, as data: `runc spec --rootless=false`'s
//! defaults written out, plus what the tests need (no terminal, a writable
//! rootfs as Docker and Podman give, the NVIDIA_* env, /out, decoy nodes,
//! and the hook entry). Pure: never touches the filesystem, so
//! tests/hook_entries.rs can check the hook entry without root; bundles
//! (bundle.rs) write what it returns.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// What the container runs: the checker, then nvidia-smi (whose own exit
/// code tells "found the driver libraries but no kernel driver" (9) from
/// "not there" (127)).
pub const CONTAINER_SCRIPT: &str = "/checker; /usr/bin/nvidia-smi; echo smi_exit=$?";

/// NVIDIA's character major for nvidiactl and nvidiaN.
pub const NVIDIA_MAJOR: u32 = 195;

/// The environment the hook runs with: set explicitly, as the project's
/// hooks.d file and docs/hook.md do, so that the runtime's own never reaches it.
const HOOK_ENV: [&str; 1] = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"];

/// What varies between test containers.
pub struct ContainerConfig<'a> {
    /// The container's hostname.
    pub hostname: &'a str,
    /// Its NVIDIA_* (and other) variables, after the default PATH and TERM.
    pub env: &'a [(&'a str, &'a str)],
    /// Its `process.args`; `sh -c CONTAINER_SCRIPT` when `None`.
    pub args: Option<&'a [String]>,
    /// The host directory bind-mounted read-write at /out.
    pub out_dir: &'a Path,
    /// More read-write bind mounts: (host directory, container path).
    pub binds: &'a [(PathBuf, String)],
    /// Minors of `/dev/nvidiaN` nodes the runtime creates without a
    /// device-cgroup rule.
    pub decoy_minors: &'a [u32],
    /// Other nodes the runtime creates without a device-cgroup rule.
    pub decoys: &'a [super::bundle::Decoy<'a>],
    /// The prestart hook: the binary and its argv; none when `None`.
    pub hook: Option<(&'a Path, &'a [String])>,
}

/// The OCI runtime hook entry that runs `path` with `args`.
fn hook_entry(path: &Path, args: &[String]) -> Value {
    json!({
        "path": path_str(path),
        "args": args,
        "env": HOOK_ENV,
        // The runtime kills a hung hook and says so, well before the
        // harness's own limit kills the runtime.
        "timeout": 30
    })
}

/// The whole `config.json` for `c`.
pub fn config_json(c: &ContainerConfig) -> Value {
    let mut env = vec![
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        "TERM=xterm".to_string(),
    ];
    env.extend(c.env.iter().map(|(k, v)| format!("{k}={v}")));
    let caps = json!(["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]);
    let mut config = json!({
        "ociVersion": "1.0.2-dev",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": ["/bin/sh", "-c", CONTAINER_SCRIPT],
            "env": env,
            "cwd": "/",
            "capabilities": {
                "bounding": caps, "effective": caps, "permitted": caps, "ambient": caps
            },
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": true
        },
        "root": {"path": "rootfs", "readonly": false},
        "hostname": c.hostname,
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
             "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
             "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]},
            {"destination": "/out", "type": "bind", "source": path_str(c.out_dir),
             "options": ["rbind", "rw", "nosuid", "nodev"]}
        ],
        "linux": {
            // Deny everything; the runtime adds its defaults (/dev/null…)
            // and the hook must add the GPU's.
            "resources": {"devices": [{"allow": false, "access": "rwm"}]},
            "namespaces": [
                {"type": "pid"}, {"type": "network"}, {"type": "ipc"},
                {"type": "uts"}, {"type": "mount"}
            ],
            "maskedPaths": [
                "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
                "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
                "/proc/sched_debug", "/sys/firmware", "/proc/scsi"
            ],
            "readonlyPaths": [
                "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"
            ]
        }
    });
    if !c.decoy_minors.is_empty() || !c.decoys.is_empty() {
        let node = |path: String, major: u32, minor: u32| {
            json!({"path": path, "type": "c", "major": major, "minor": minor,
                   "fileMode": 0o666, "uid": 0, "gid": 0})
        };
        let decoys: Vec<Value> = c
            .decoy_minors
            .iter()
            .map(|minor| node(format!("/dev/nvidia{minor}"), NVIDIA_MAJOR, *minor))
            .chain(
                c.decoys
                    .iter()
                    .map(|d| node(d.path.into(), d.major, d.minor)),
            )
            .collect();
        config["linux"]["devices"] = json!(decoys);
    }
    if let Some(args) = c.args {
        config["process"]["args"] = json!(args);
    }
    for (source, destination) in c.binds {
        config["mounts"]
            .as_array_mut()
            .expect("mounts is an array")
            .push(json!({"destination": destination, "type": "bind",
                         "source": path_str(source),
                         "options": ["rbind", "rw", "nosuid", "nodev"]}));
    }
    if let Some((path, args)) = c.hook {
        config["hooks"] = json!({ "prestart": [hook_entry(path, args)] });
    }
    config
}

/// The project's hooks.d file `shipped` with only the hook's binary and
/// arguments rewritten (to `path` and `args`), so that Podman runs the hook
/// under test with the `when`, `stages` and `env` we ship.
pub fn hooks_d_file(mut shipped: Value, path: &Path, args: &[String]) -> Value {
    shipped["hook"]["path"] = json!(path_str(path));
    shipped["hook"]["args"] = json!(args);
    shipped
}

/// `path` as the UTF-8 string `config.json` and command lines need; the
/// harness's paths always are.
pub fn path_str(path: &Path) -> String {
    path.to_str()
        .unwrap_or_else(|| panic!("non-UTF-8 path {}", path.display()))
        .to_string()
}

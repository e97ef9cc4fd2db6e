//! Reads what a container's bundle says about it, from `config.json`: the
//! rootfs, the container's own environment (the only place its request
//! comes from), its device mounts, privilege and user namespace, and the
//! systemd scope its cgroup is when it runs under the systemd cgroup
//! driver. The hook
//! and `list --bundle` read it; the planner takes the [`Container`].
//!
//! Only those parts are decoded, into `oci-spec`'s own types where they
//! are small (root, namespaces) and into just the fields read where they
//! are not (the bounding capability set, a mount's source and
//! destination); the rest is skipped unparsed. A Podman or CRI-O config
//! carries a seccomp profile of hundreds of rules, and oci-spec's whole
//! `Spec` would build all of it (and link a regex engine for
//! `process.execCPUAffinity`) for nothing.

use std::path::{Path, PathBuf};

use oci_spec::runtime::{LinuxDeviceType, LinuxNamespace, LinuxNamespaceType, Root};
use serde::Deserialize;
use thiserror::Error;

/// Why a bundle's `config.json` could not be read.
#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot read bundle config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bad bundle config {path}: {reason}")]
    Spec { path: PathBuf, reason: String },
}

/// Result of reading a bundle.
pub type Result<T> = std::result::Result<T, Error>;

/// The parts of `config.json` the hook reads.
#[derive(Debug, Deserialize)]
struct Config {
    root: Option<Root>,
    process: Option<Process>,
    mounts: Option<Vec<Mount>>,
    linux: Option<Linux>,
}

/// The parts of `process` the hook reads.
#[derive(Debug, Deserialize)]
struct Process {
    env: Option<Vec<String>>,
    capabilities: Option<Capabilities>,
}

/// The one capability set the hook reads: `CAP_SYS_ADMIN` there makes a
/// container privileged. oci-spec's `LinuxCapabilities` decodes all five
/// sets into hashed sets of known names (and refuses a name newer than it).
#[derive(Debug, Deserialize)]
struct Capabilities {
    bounding: Option<Vec<String>>,
}

/// The parts of a mount the hook reads (device requests are `/dev/null`
/// mounts): oci-spec's `Mount` would decode every option too.
#[derive(Debug, Deserialize)]
struct Mount {
    destination: PathBuf,
    source: Option<PathBuf>,
}

/// The parts of `linux` the hook reads.
#[derive(Debug, Deserialize)]
struct Linux {
    namespaces: Option<Vec<LinuxNamespace>>,
    devices: Option<Vec<Device>>,
    #[serde(rename = "cgroupsPath")]
    cgroups_path: Option<String>,
}

/// The parts of a `linux.devices` entry the CDI hook reads. oci-spec's own
/// `LinuxDevice` is not used: it requires fields a runtime may leave out.
#[derive(Debug, Deserialize)]
struct Device {
    #[serde(rename = "type")]
    kind: LinuxDeviceType,
    #[serde(default)]
    major: i64,
    #[serde(default)]
    minor: i64,
}

/// The container as its bundle describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// The rootfs, absolute.
    pub rootfs: PathBuf,
    /// `process.env`, `KEY=VALUE` strings.
    pub env: Vec<String>,
    /// Whether it has its own user namespace, where mknod and cgroup writes fail.
    pub user_namespace: bool,
    /// Whether it is privileged: `CAP_SYS_ADMIN` in its bounding set.
    pub privileged: bool,
    /// Devices requested by `/dev/null` mounts at `/var/run/nvidia-container-devices/<device>`.
    pub device_mounts: Vec<String>,
    /// IMEX channels requested by `/dev/null` mounts at
    /// `/var/run/nvidia-container-devices/imex/<channel>`.
    pub imex_mounts: Vec<String>,
    /// The character devices the runtime itself creates (`linux.devices`):
    /// what a CDI spec or the runtime wrapper granted the container.
    pub devices: Vec<GrantedNode>,
    /// The systemd scope unit its cgroup is, when `linux.cgroupsPath` has
    /// the systemd cgroup driver's form ([`systemd_scope`]).
    pub systemd_scope: Option<String>,
}

impl Container {
    /// A container known only by its rootfs and environment: unprivileged,
    /// with no user namespace, device mounts or granted devices (a CLI's
    /// container without a bundle, an image doctor describes).
    pub fn bare(rootfs: PathBuf, env: Vec<String>) -> Container {
        Container {
            rootfs,
            env,
            user_namespace: false,
            privileged: false,
            device_mounts: Vec::new(),
            imex_mounts: Vec::new(),
            devices: Vec::new(),
            systemd_scope: None,
        }
    }
}

/// A character device node the runtime creates in the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantedNode {
    /// Its major number.
    pub major: u32,
    /// Its minor number.
    pub minor: u32,
}

/// Where the Kubernetes device plugin's "volume-mounts" strategy puts its requests.
const DEVICE_MOUNT_DIR: &str = "/var/run/nvidia-container-devices";

/// Largest `config.json` read: a runtime's is a few KiB.
pub const MAX_CONFIG: usize = 16 * 1024 * 1024;

/// Loads `<bundle>/config.json`.
pub fn load(bundle: &Path) -> Result<Container> {
    let path = bundle.join("config.json");
    let data = crate::util::hostfile::read(&path, MAX_CONFIG).map_err(|source| Error::Read {
        path: path.clone(),
        source,
    })?;
    parse(bundle, &path, &data)
}

/// Reads the container from `data`, the bundle's `config.json` at `path`.
pub fn parse(bundle: &Path, path: &Path, data: &[u8]) -> Result<Container> {
    let path = path.to_path_buf();
    let spec: Config = serde_json::from_slice(data).map_err(|source| Error::Spec {
        path: path.clone(),
        reason: source.to_string(),
    })?;
    let root = spec.root.as_ref().ok_or_else(|| Error::Spec {
        path: path.clone(),
        reason: "no root.path".into(),
    })?;
    if root.path().as_os_str().is_empty() {
        return Err(Error::Spec {
            path,
            reason: "empty root.path".into(),
        });
    }
    let privileged = spec
        .process
        .as_ref()
        .and_then(|p| p.capabilities.as_ref())
        .and_then(|c| c.bounding.as_ref())
        .is_some_and(|bounding| bounding.iter().any(|c| c == "CAP_SYS_ADMIN"));
    let env = spec.process.and_then(|p| p.env).unwrap_or_default();
    let user_namespace = spec
        .linux
        .as_ref()
        .and_then(|l| l.namespaces.as_ref())
        .is_some_and(|ns| ns.iter().any(|n| n.typ() == LinuxNamespaceType::User));
    let devices = spec
        .linux
        .as_ref()
        .and_then(|l| l.devices.as_ref())
        .into_iter()
        .flatten()
        .filter(|d| d.kind == LinuxDeviceType::C)
        .filter_map(|d| {
            Some(GrantedNode {
                major: u32::try_from(d.major).ok()?,
                minor: u32::try_from(d.minor).ok()?,
            })
        })
        .collect();
    let requests: Vec<String> = spec
        .mounts
        .iter()
        .flatten()
        .filter(|m| m.source.as_deref() == Some(Path::new("/dev/null")))
        .filter_map(|m| m.destination.strip_prefix(DEVICE_MOUNT_DIR).ok())
        .filter_map(|device| device.to_str().map(str::to_string))
        .collect();
    let device_mounts = requests
        .iter()
        .filter(|device| !device.is_empty() && !device.contains('/'))
        .cloned()
        .collect();
    let imex_mounts = requests
        .iter()
        .filter_map(|device| device.strip_prefix("imex/"))
        .filter(|channel| !channel.is_empty() && !channel.contains('/'))
        .map(str::to_string)
        .collect();
    Ok(Container {
        rootfs: bundle.join(root.path()),
        env,
        user_namespace,
        privileged,
        device_mounts,
        imex_mounts,
        devices,
        systemd_scope: spec
            .linux
            .as_ref()
            .and_then(|l| l.cgroups_path.as_deref())
            .and_then(systemd_scope),
    })
}

/// The scope unit a `linux.cgroupsPath` in the systemd cgroup driver's form
/// (`SLICE:PREFIX:NAME`, as runc and crun take it under `--systemd-cgroup`)
/// names: `PREFIX-NAME.scope` (`NAME.scope` without a prefix). `None` for
/// a cgroupfs path (`/…`, or no colons), for a `NAME` that is itself a
/// slice (no scope of the container's own), and for a name systemd would
/// not take as a unit's.
pub fn systemd_scope(cgroups_path: &str) -> Option<String> {
    let mut parts = cgroups_path.split(':');
    let (_slice, prefix, name) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || cgroups_path.starts_with('/') || name.ends_with(".slice") {
        return None;
    }
    let unit = match prefix {
        "" => format!("{name}.scope"),
        prefix => format!("{prefix}-{name}.scope"),
    };
    let valid = |c: char| c.is_ascii_alphanumeric() || ":-_.\\@".contains(c);
    let stem = &unit[..unit.len() - ".scope".len()];
    (!stem.is_empty() && unit.len() <= 255 && !unit.starts_with('.') && unit.chars().all(valid))
        .then_some(unit)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn the_systemd_drivers_cgroups_path_names_the_containers_scope() {
        for (path, unit) in [
            (
                "system.slice:docker:0123abcd",
                Some("docker-0123abcd.scope"),
            ),
            (
                "kubepods-besteffort-pod1.slice:cri-containerd:c0ffee",
                Some("cri-containerd-c0ffee.scope"),
            ),
            (":libpod:abc", Some("libpod-abc.scope")),
            ("machine.slice::abc", Some("abc.scope")),
            // cgroupfs paths, a slice of its own, names no unit may have.
            ("/docker/0123abcd", None),
            ("docker/0123abcd", None),
            ("system.slice:docker:my.slice", None),
            ("a:b:c:d", None),
            ("system.slice:docker:../x", None),
            ("system.slice:docker:a b", None),
            ("system.slice::", None),
        ] {
            assert_eq!(systemd_scope(path).as_deref(), unit, "{path}");
        }
        let dir = bundle(
            r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},
               "linux":{"cgroupsPath":"system.slice:docker:0123abcd"}}"#,
        );
        let c = load(dir.path()).unwrap();
        assert_eq!(c.systemd_scope.as_deref(), Some("docker-0123abcd.scope"));
    }

    fn bundle(config: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("config.json"), config).unwrap();
        dir
    }

    #[test]
    fn reads_rootfs_env_and_namespaces() {
        let dir = bundle(
            r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},"process":{"cwd":"/","args":["sh"],"user":{"uid":0,"gid":0},"env":["PATH=/bin","NVIDIA_VISIBLE_DEVICES=0"]},
               "linux":{"namespaces":[{"type":"mount"},{"type":"user"}]}}"#,
        );
        let c = load(dir.path()).unwrap();
        assert_eq!(c.rootfs, dir.path().join("rootfs"));
        assert_eq!(c.env, ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"]);
        assert!(c.user_namespace);
        assert!(!c.privileged);
        assert!(c.device_mounts.is_empty());
    }

    #[test]
    fn reads_privilege_and_device_mounts() {
        let dir = bundle(
            r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},
               "process":{"cwd":"/","args":["sh"],"user":{"uid":0,"gid":0},"capabilities":{"bounding":["CAP_CHOWN","CAP_SYS_ADMIN"]}},
               "mounts":[{"destination":"/var/run/nvidia-container-devices/GPU-abcdef01-2345-6789-abcd-ef0123456789","source":"/dev/null","type":"bind"},
                         {"destination":"/var/run/nvidia-container-devices/3","source":"/dev/null"},
                         {"destination":"/var/run/nvidia-container-devices/imex/7","source":"/dev/null"},
                         {"destination":"/var/run/nvidia-container-devices/imex/8","source":"/etc/passwd"},
                         {"destination":"/var/run/nvidia-container-devices/imex/1/x","source":"/dev/null"},
                         {"destination":"/var/run/nvidia-container-devices/4","source":"/etc/passwd"},
                         {"destination":"/var/run/other/5","source":"/dev/null"}]}"#,
        );
        let c = load(dir.path()).unwrap();
        assert!(c.privileged);
        assert_eq!(
            c.device_mounts,
            ["GPU-abcdef01-2345-6789-abcd-ef0123456789", "3"]
        );
        // The device plugin's IMEX channel requests, `/dev/null` ones only.
        assert_eq!(c.imex_mounts, ["7"]);
    }

    #[test]
    fn parts_the_hook_does_not_read_are_skipped_unparsed() {
        // oci-spec's whole Spec would refuse this execCPUAffinity, and build
        // every seccomp rule; the runtime checks its own config.
        let dir = bundle(
            r#"{"ociVersion":"1.2.0","root":{"path":"rootfs"},
               "process":{"cwd":"/","args":["sh"],"user":{"uid":0,"gid":0},"env":["NVIDIA_VISIBLE_DEVICES=all"],
                          "execCPUAffinity":{"initial":"not a cpu list"}},
               "linux":{"namespaces":[{"type":"mount"}],
                        "seccomp":{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read","write"],"action":"SCMP_ACT_ALLOW"}]}},
               "hooks":{"prestart":[{"path":"/usr/bin/oci-nvidia-hook","args":["oci-nvidia-hook","prestart"]}]}}"#,
        );
        let c = load(dir.path()).unwrap();
        assert_eq!(c.env, ["NVIDIA_VISIBLE_DEVICES=all"]);
        assert_eq!(c.rootfs, dir.path().join("rootfs"));
    }

    #[test]
    fn only_the_bounding_set_decides_privilege() {
        let dir = bundle(
            r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},
               "process":{"capabilities":{"bounding":["CAP_CHOWN"],"effective":["CAP_SYS_ADMIN","CAP_FROM_THE_FUTURE"]}},
               "mounts":[{"destination":"/proc","type":"proc","source":"proc","options":["nosuid",7]}]}"#,
        );
        let c = load(dir.path()).unwrap();
        assert!(!c.privileged);
        assert!(c.device_mounts.is_empty());
    }

    #[test]
    fn absolute_root_path_is_kept() {
        let dir = bundle(
            r#"{"ociVersion":"1.0.2","root":{"path":"/var/lib/c/merged"},"linux":{"namespaces":[{"type":"mount"}]}}"#,
        );
        let c = load(dir.path()).unwrap();
        assert_eq!(c.rootfs, Path::new("/var/lib/c/merged"));
        assert!(!c.user_namespace);
        assert!(c.env.is_empty());
    }

    #[test]
    fn missing_root_or_config_names_the_file() {
        let dir = bundle(r#"{"ociVersion":"1.0.2"}"#);
        let err = load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("config.json") && err.contains("root.path"),
            "{err}"
        );
        let err = load(Path::new("/nonexistent/bundle"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/bundle/config.json"), "{err}");
    }
}

//! The wiring of the engines that do not read hooks.d: Docker (the
//! `nvidia-container-runtime-hook` its running dockerd finds on its own
//! `PATH`, and `runtimes` in `/etc/docker/daemon.json`), containerd
//! (`enable_cdi`), the systemd cgroup manager's `daemon-reload` hazard, and
//! whether anything at all reaches oci-nvidia-hook.
//!
//! A dockerd's `PATH` is read from its `/proc/<pid>/environ`, and names are
//! looked up through its `/proc/<pid>/root`, so a dockerd in another mount
//! namespace is judged by what it sees. Nothing is executed.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::hooks::{is_this_program, InstalledHook};
use super::procs::Table;
use super::{Check, HostRoot, Layer};
use crate::driver::DriverRoot;
// Where names are looked up when a process has no `PATH` (Go's LookPath
// then finds nothing; this is only used for daemon.json's runtimes).
use crate::program::SYSTEM_PATH;

const L: Layer = Layer::Wiring;

/// The name dockerd looks up for `--gpus`, and the runtime daemon.json names:
/// `compat::runtime_hook::NAME` and `compat::RUNTIME_NAME`, spelt out here
/// because `compat` builds on `cli`, which runs doctor (the import would be
/// a cycle); a unit test keeps them equal.
const HOOK_NAME: &str = "nvidia-container-runtime-hook";
const RUNTIME_NAME: &str = "nvidia-container-runtime";

/// Docker's configuration file.
const DAEMON_JSON: &str = "/etc/docker/daemon.json";

/// containerd's configuration file.
const CONTAINERD_TOML: &str = "/etc/containerd/config.toml";

/// What the Docker checks found.
#[derive(Debug, Default)]
pub(super) struct Docker {
    /// dockerd finds our binary under NVIDIA's hook name.
    pub hook_ours: bool,
    /// daemon.json's `nvidia` runtime is our binary.
    pub runtime_ours: bool,
    /// Our hook as dockerd runs it for `--gpus`.
    pub hook: Option<InstalledHook>,
}

/// A name found on a `PATH`: the entry's path there, and whether it is ours.
struct Found {
    /// The path on the `PATH` (as the process sees it).
    shown: String,
    /// The file on this machine.
    host: std::path::PathBuf,
    ours: bool,
}

/// Looks `name` up on `path_var` (a `PATH` value) inside `root`, as Go's
/// `exec.LookPath` does: the first executable regular file wins.
fn look_path(root: &DriverRoot, path_var: &str, name: &str) -> Option<Found> {
    path_var
        .split(':')
        .filter(|d| d.starts_with('/'))
        .find_map(|dir| {
            let inner = Path::new(dir).join(name);
            let resolved = root.resolve(&inner).ok()?;
            let executable = resolved.metadata.is_file() && resolved.metadata.mode() & 0o111 != 0;
            executable.then(|| Found {
                shown: inner.display().to_string(),
                ours: is_this_program(&resolved.host)
                    || resolved
                        .inner
                        .file_name()
                        .is_some_and(|n| n == "oci-nvidia-hook"),
                host: resolved.host,
            })
        })
}

/// Docker: the hook on each running dockerd's `PATH`, and daemon.json.
pub(super) fn docker(host: &HostRoot, processes: &Table, out: &mut Vec<Check>) -> Docker {
    let mut docker = Docker::default();
    for dockerd in processes.named("dockerd") {
        let pid = dockerd.pid;
        // `/proc/<pid>/root` is a link to the process's root: the trailing
        // slash makes every lookup follow it, into dockerd's own view.
        let root = DriverRoot::new(processes.dir(pid).join("root").join(""));
        let Some(path_var) = processes.env_var(pid, "PATH") else {
            out.push(Check::fail(
                L,
                "docker --gpus",
                format!(
                    "dockerd (pid {pid}) runs without PATH: it cannot find \
                     {}, and `docker run --gpus` fails with \"could not select device \
                     driver\"",
                    HOOK_NAME
                ),
                "start dockerd with a PATH that holds /usr/local/bin (its systemd unit \
                 does), after `make install`",
            ));
            continue;
        };
        match look_path(&root, &path_var, HOOK_NAME) {
            None => out.push(Check::fail(
                L,
                "docker --gpus",
                format!(
                    "dockerd (pid {pid}) has no {} on its PATH ({path_var}): \
                     `docker run --gpus` fails with \"could not select device driver\"",
                    HOOK_NAME
                ),
                "`make install` (it links /usr/local/bin/nvidia-container-runtime-hook to \
                 oci-nvidia-hook), then `systemctl restart docker`: dockerd looks the name up \
                 when it starts",
            )),
            Some(found) if !found.ours => out.push(Check::warn(
                L,
                "docker --gpus",
                format!(
                    "dockerd (pid {pid}) runs {}, which is not oci-nvidia-hook (NVIDIA's toolkit?)",
                    found.shown
                ),
                "leave Docker to NVIDIA's toolkit, or remove it and `make install`, then \
                 restart dockerd",
            )),
            Some(found) => {
                docker.hook_ours = true;
                // As dockerd adds it to a `--gpus` container (TESTBED.md).
                docker.hook.get_or_insert(InstalledHook {
                    source: format!("dockerd (pid {pid})"),
                    path: found.host.clone(),
                    args: vec![HOOK_NAME.into(), "prestart".into()],
                    env: Some(vec![format!("PATH={path_var}")]),
                    stage: "prestart".into(),
                });
                let created = std::fs::symlink_metadata(root.host_path(Path::new(&found.shown)))
                    .ok()
                    .map(|m| m.ctime());
                let started = processes.started_at(pid);
                match (created, started) {
                    (Some(created), Some(started)) if created > started as i64 => {
                        out.push(Check::warn(
                            L,
                            "docker --gpus",
                            format!(
                                "{} was created after dockerd (pid {pid}) started: if it was \
                                 not there before, dockerd has not registered its GPU driver",
                                found.shown
                            ),
                            "`systemctl restart docker`",
                        ))
                    }
                    _ => out.push(Check::ok(
                        L,
                        "docker --gpus",
                        format!(
                            "dockerd (pid {pid}) finds {} → {}",
                            found.shown,
                            found.host.display()
                        ),
                    )),
                }
            }
        }
    }
    docker.runtime_ours = daemon_json(host, processes, out);
    docker
}

/// `runtimes` and `default-runtime` in daemon.json; true when its `nvidia`
/// runtime is ours.
fn daemon_json(host: &HostRoot, processes: &Table, out: &mut Vec<Check>) -> bool {
    let file = host.path(DAEMON_JSON);
    let Ok(data) = std::fs::read(&file) else {
        return false;
    };
    let json: serde_json::Value = match serde_json::from_slice(&data) {
        Ok(json) => json,
        Err(e) => {
            out.push(Check::fail(
                L,
                "daemon.json",
                format!("{} is not JSON: {e}", file.display()),
                "fix it: dockerd does not start with it",
            ));
            return false;
        }
    };
    let runtimes = json.get("runtimes").and_then(|r| r.as_object());
    let default = json.get("default-runtime").and_then(|d| d.as_str());
    let path_var = processes
        .named("dockerd")
        .next()
        .and_then(|d| processes.env_var(d.pid, "PATH"))
        .unwrap_or_else(|| SYSTEM_PATH.to_string());
    let root = DriverRoot::new(host.root());
    let mut ours = false;
    let mut any = false;
    for (name, runtime) in runtimes.into_iter().flatten() {
        let Some(path) = runtime.get("path").and_then(|p| p.as_str()) else {
            continue;
        };
        let file_name = Path::new(path).file_name().and_then(|n| n.to_str());
        if name != "nvidia" && file_name != Some(RUNTIME_NAME) {
            continue;
        }
        any = true;
        let found = if path.starts_with('/') {
            root.resolve(Path::new(path)).ok().map(|r| Found {
                shown: path.to_string(),
                ours: is_this_program(&r.host)
                    || r.inner.file_name().is_some_and(|n| n == "oci-nvidia-hook"),
                host: r.host,
            })
        } else {
            look_path(&root, &path_var, path)
        };
        match found {
            None => out.push(Check::fail(
                L,
                "daemon.json",
                format!(
                    "runtime {name:?} runs {path}, which is not found{}: `docker run \
                     --runtime={name}` fails",
                    if default == Some(name.as_str()) {
                        ", and it is the default-runtime: every container fails"
                    } else {
                        ""
                    }
                ),
                "`make install` (it links /usr/local/bin/nvidia-container-runtime to \
                 oci-nvidia-hook), or fix the path in daemon.json",
            )),
            Some(found) => {
                ours |= found.ours;
                let whose = if found.ours {
                    "oci-nvidia-hook"
                } else {
                    "not oci-nvidia-hook"
                };
                out.push(Check::ok(
                    L,
                    "daemon.json",
                    format!("runtime {name:?} → {} ({whose})", found.host.display()),
                ));
            }
        }
    }
    if !any {
        out.push(Check::ok(
            L,
            "daemon.json",
            format!(
                "{}: no nvidia runtime (none is needed for --gpus)",
                file.display()
            ),
        ));
    }
    ours
}

/// containerd's `enable_cdi`, when CDI specs exist for it to read.
pub(super) fn containerd(host: &HostRoot, cdi_specs: bool, out: &mut Vec<Check>) {
    let file = host.path(CONTAINERD_TOML);
    let Ok(text) = std::fs::read_to_string(&file) else {
        return;
    };
    let value: toml::Value = match toml::from_str(&text) {
        Ok(value) => value,
        Err(e) => {
            out.push(Check::unparsable(
                L,
                "containerd",
                &file,
                e.message(),
                "fix it: containerd does not start with it",
            ));
            return;
        }
    };
    let plugins = value.get("plugins");
    // Version 2 files (containerd 1.x) keep it in the CRI plugin; version 3
    // (containerd 2.x) in its runtime part, where it defaults to true.
    let v2 = plugins
        .and_then(|p| p.get("io.containerd.grpc.v1.cri"))
        .and_then(|c| c.get("enable_cdi"));
    let v3 = plugins
        .and_then(|p| p.get("io.containerd.cri.v1.runtime"))
        .and_then(|c| c.get("enable_cdi"));
    let version = value
        .get("version")
        .and_then(|v| v.as_integer())
        .unwrap_or(1);
    let enabled = match v3.or(v2).and_then(|v| v.as_bool()) {
        Some(enabled) => enabled,
        None => version >= 3,
    };
    if enabled {
        out.push(Check::ok(
            L,
            "containerd",
            format!("{}: CDI enabled", file.display()),
        ));
    } else if cdi_specs {
        out.push(Check::warn(
            L,
            "containerd",
            format!(
                "{}: enable_cdi is off, so containerd's CRI ignores the CDI specs here",
                file.display()
            ),
            "set enable_cdi = true under [plugins.\"io.containerd.grpc.v1.cri\"] \
             (containerd 1.7; 2.x enables it by default) and restart containerd",
        ));
    } else {
        out.push(Check::ok(
            L,
            "containerd",
            format!("{}: CDI off, and no CDI spec to read", file.display()),
        ));
    }
}

/// The systemd cgroup manager's `daemon-reload` drops a hook's device rules.
pub(super) fn systemd(processes: &Table, hook_wired: bool, out: &mut Vec<Check>) {
    if processes.init() != Some("systemd") || !hook_wired {
        return;
    }
    out.push(Check::warn(
        L,
        "systemd",
        "systemd manages the cgroups and a hook grants the devices: a `systemctl \
         daemon-reload` rewrites each container's device rules from its spec and drops \
         the hook's, and running containers lose their GPUs (\"Failed to initialize NVML: \
         Unknown Error\")",
        "use CDI, which puts the devices in the spec: `oci-nvidia-hook cdi generate`, then \
         `podman run --device nvidia.com/gpu=all` (docs/cdi.md)",
    ));
}

/// Which ways to reach oci-nvidia-hook are wired.
pub(super) struct Wiring {
    /// A hooks.d file runs it.
    pub hooks_d: bool,
    /// dockerd finds it as nvidia-container-runtime-hook.
    pub docker_hook: bool,
    /// daemon.json's nvidia runtime is it.
    pub docker_runtime: bool,
    /// A CDI spec of ours exists.
    pub cdi: bool,
}

/// Fails when no engine reaches oci-nvidia-hook at all.
pub(super) fn wired(wiring: &Wiring, out: &mut Vec<Check>) {
    let mut ways = Vec::new();
    if wiring.hooks_d {
        ways.push("hooks.d");
    }
    if wiring.docker_hook {
        ways.push("Docker --gpus");
    }
    if wiring.docker_runtime {
        ways.push("Docker --runtime=nvidia");
    }
    if wiring.cdi {
        ways.push("CDI");
    }
    if ways.is_empty() {
        out.push(Check::fail(
            L,
            "wired",
            "no engine reaches oci-nvidia-hook: no hooks.d file, no Docker hook or runtime, \
             no CDI spec of ours",
            "install the hooks.d file (docs/hook.md), or `make install` and \
             restart dockerd, or `oci-nvidia-hook cdi generate`",
        ));
    } else {
        out.push(Check::ok(
            L,
            "wired",
            format!("oci-nvidia-hook is reached through {}", ways.join(", ")),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_looked_up_are_the_compat_fronts_names() {
        assert_eq!(HOOK_NAME, crate::compat::runtime_hook::NAME);
        assert_eq!(RUNTIME_NAME, crate::compat::RUNTIME_NAME);
    }

    #[test]
    fn looks_a_name_up_on_a_path_as_go_does() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["a", "b"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        // Not executable in a, executable in b: b's is found.
        std::fs::write(dir.path().join("a/tool"), b"").unwrap();
        let b = dir.path().join("b/tool");
        std::fs::write(&b, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&b, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let root = DriverRoot::new(dir.path());
        let found = look_path(&root, "relative:/a:/b", "tool").unwrap();
        assert_eq!(found.shown, "/b/tool");
        assert!(!found.ours);
        assert!(look_path(&root, "/a", "tool").is_none());
    }
}

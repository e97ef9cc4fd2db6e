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

use super::hooks::InstalledHook;
use super::procs::Table;
use super::programs::{find_program, look_path};
use super::{Check, HostRoot, Layer};
use crate::host::driver::DriverRoot;
use crate::specs::engine_config::docker::Daemon;
// Where names are looked up when a process has no `PATH` (Go's LookPath
// then finds nothing; this is only used for daemon.json's runtimes).
use crate::util::this_program::SYSTEM_PATH;

const L: Layer = Layer::Wiring;

/// The name dockerd looks up for `--gpus`, and the runtime daemon.json names.
use crate::util::this_program::{RUNTIME_HOOK_NAME as HOOK_NAME, RUNTIME_NAME};

/// What the Docker checks found.
#[derive(Debug, Default)]
pub(super) struct Docker {
    /// dockerd finds our binary under NVIDIA's hook name.
    pub hook_ours: bool,
    /// daemon.json's `nvidia` runtime is our binary.
    pub runtime_ours: bool,
    /// Our hook as dockerd runs it for `--gpus`.
    pub hook: Option<InstalledHook>,
    /// daemon.json's `features.cdi`, when set.
    pub cdi: Option<bool>,
    /// A dockerd runs.
    pub running: bool,
    /// daemon.json exists and parses.
    pub configured: bool,
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
    docker.running = processes.named("dockerd").next().is_some();
    if let Some(json) = daemon_json(host, processes, out) {
        docker.configured = true;
        docker.runtime_ours = json.runtime_ours;
        docker.cdi = json.cdi;
    }
    docker
}

/// What daemon.json says.
struct DaemonJson {
    /// Its `nvidia` runtime is ours.
    runtime_ours: bool,
    /// `features.cdi`, when set.
    cdi: Option<bool>,
}

/// `runtimes`, `default-runtime` and `features.cdi` in daemon.json; `None`
/// when there is no daemon.json or it does not parse.
fn daemon_json(host: &HostRoot, processes: &Table, out: &mut Vec<Check>) -> Option<DaemonJson> {
    let json = match Daemon::load(host)? {
        Ok(json) => json,
        Err(e) => {
            out.push(Check::fail(
                L,
                "daemon.json",
                e.to_string(),
                "fix it: dockerd does not start with it",
            ));
            return None;
        }
    };
    let default = json.default_runtime.as_deref();
    let path_var = processes
        .named("dockerd")
        .next()
        .and_then(|d| processes.env_var(d.pid, "PATH"))
        .unwrap_or_else(|| SYSTEM_PATH.to_string());
    let root = DriverRoot::new(host.root());
    let mut ours = false;
    let mut any = false;
    for runtime in &json.runtimes {
        let (name, Some(path)) = (&runtime.name, runtime.path.as_deref()) else {
            continue;
        };
        let file_name = Path::new(path).file_name().and_then(|n| n.to_str());
        if name != "nvidia" && file_name != Some(RUNTIME_NAME) {
            continue;
        }
        any = true;
        match find_program(&root, &path_var, path) {
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
                json.file.display()
            ),
        ));
    }
    Some(DaemonJson {
        runtime_ours: ours,
        cdi: json.cdi,
    })
}

/// The systemd cgroup manager's `daemon-reload` drops a hook's device
/// rules unless the hook tells systemd about them (`systemd-device-allow`,
/// [`crate::apply::systemd`]): whether it does and reaches systemd's
/// manager below `run` (the host's `/run`), as the hook would.
pub(super) fn systemd(
    processes: &Table,
    hook_wired: bool,
    tells: bool,
    run: &Path,
    out: &mut Vec<Check>,
) {
    if processes.init() != Some("systemd") || !hook_wired {
        return;
    }
    const HAZARD: &str = "a `systemctl daemon-reload` rewrites each container's device rules from \
         systemd's record and drops the hook's, and running containers lose their GPUs \
         (\"Failed to initialize NVML: Unknown Error\")";
    const CDI: &str =
        "use CDI, which puts the devices in the spec: `oci-nvidia-hook cdi generate`, \
         then `podman run --device nvidia.com/gpu=all` (docs/cdi.md)";
    if !tells {
        out.push(Check::warn(
            L,
            "systemd",
            format!(
                "systemd manages the cgroups, a hook grants the devices and \
                 systemd-device-allow = false: {HAZARD}"
            ),
            format!("set systemd-device-allow = true, or {CDI}"),
        ));
        return;
    }
    match crate::apply::systemd::reach(run) {
        Ok(endpoint) => out.push(Check::ok(
            L,
            "systemd",
            format!(
                "systemd's manager answers on {}: the hook adds each GPU it grants to the \
                 container's scope's DeviceAllow under the systemd cgroup driver, so a \
                 `systemctl daemon-reload` keeps it",
                endpoint.socket(run).display()
            ),
        )),
        Err(e) => out.push(Check::warn(
            L,
            "systemd",
            format!(
                "systemd manages the cgroups and a hook grants the devices, but systemd's \
                 manager does not answer ({e}), so the hook cannot record the grants: {HAZARD}"
            ),
            format!(
                "run the hook where {} is reachable (as root, the host's /run), or {CDI}",
                crate::apply::systemd::Endpoint::Private
                    .socket(run)
                    .display()
            ),
        )),
    }
}

/// What the wiring checks found, engine by engine, for [`reaches`].
pub(super) struct Engines<'a> {
    /// Docker's hook, runtime and `features.cdi`.
    pub docker: &'a Docker,
    /// containerd's CDI and runtime handlers.
    pub containerd: &'a super::containerd::Containerd,
    /// CRI-O's config, and its handlers that run our wrapper.
    pub crio: Option<(&'a crate::specs::engine_config::crio::Config, Vec<String>)>,
    /// A hooks.d file runs our hook (Podman and CRI-O read them).
    pub hooks_d: bool,
    /// A CDI spec of ours exists.
    pub cdi_ours: bool,
    /// The device plugin's spec exists.
    pub plugin_spec: bool,
}

/// One check per engine configured here, saying which ways it reaches GPUs
/// through oci-nvidia-hook: the hook, a runtime handler, CDI.
pub(super) fn reaches(engines: &Engines<'_>, out: &mut Vec<Check>) {
    let any_spec = engines.cdi_ours || engines.plugin_spec;
    let say = |engine: &str, ways: Vec<String>, note: &str, out: &mut Vec<Check>| {
        let name = format!("{engine} reaches GPUs");
        if ways.is_empty() {
            out.push(Check::warn(
                L,
                name,
                format!(
                    "{engine} is configured here but reaches no GPU through oci-nvidia-hook{note}"
                ),
                "docs/docker-and-containerd.md: wire it with `nvidia-ctk runtime configure` \
                 or `oci-nvidia-hook cdi generate`",
            ));
        } else {
            out.push(Check::ok(
                L,
                name,
                format!("through {}{note}", ways.join("; ")),
            ));
        }
    };
    let docker = engines.docker;
    if docker.running || docker.configured {
        let mut ways = Vec::new();
        if docker.hook_ours {
            ways.push("the hook (`docker run --gpus`)".to_string());
        }
        if docker.runtime_ours {
            ways.push("the runtime handler nvidia (`docker run --runtime nvidia`)".into());
        }
        let mut note = "";
        match docker.cdi {
            Some(true) if engines.cdi_ours => {
                ways.push("CDI (`docker run --device nvidia.com/gpu=…`, features.cdi)".into())
            }
            // Docker 29 sends `--gpus` through CDI too (moby PR 50228) when
            // features.cdi is on and nvidia-cdi-hook is installed.
            Some(true) => out.push(Check::warn(
                L,
                "Docker CDI",
                "features.cdi is on but no CDI spec of oci-nvidia-hook's exists: \
                 `--device nvidia.com/gpu=…` fails, and so does `--gpus` from Docker 29 \
                 on, which takes the CDI path where nvidia-cdi-hook is installed",
                "`systemctl start oci-nvidia-hook-cdi` (the refresh unit), or \
                 `oci-nvidia-hook cdi generate --output /var/run/cdi/nvidia.yaml`",
            )),
            // Not a warning: the spec may be there for another engine.
            Some(false) | None if engines.cdi_ours => {
                note = " (not CDI: features.cdi is not set in daemon.json, so Docker before \
                        28.2 refuses `--device nvidia.com/gpu=…`; `nvidia-ctk \
                        runtime configure --runtime=docker --cdi.enabled` sets it)"
            }
            _ => {}
        }
        say("Docker", ways, note, out);
    }
    let containerd = engines.containerd;
    if containerd.configured {
        let mut ways: Vec<String> = containerd
            .ours
            .iter()
            .map(|name| {
                format!(
                    "the runtime handler {name:?} (a RuntimeClass; the device plugin's envvar                      and volume-mounts strategies)"
                )
            })
            .collect();
        if containerd.cdi && any_spec {
            ways.push(
                "CDI (CRI CDIDevices and cdi.k8s.io annotations; the cdi-cri and                  cdi-annotations strategies)"
                    .into(),
            );
        }
        say("containerd", ways, "", out);
    }
    if let Some((_, ours)) = &engines.crio {
        let mut ways = Vec::new();
        if engines.hooks_d {
            ways.push("the hook (hooks.d)".to_string());
        }
        ways.extend(
            ours.iter()
                .map(|name| format!("the runtime handler {name:?} (a RuntimeClass)")),
        );
        if any_spec {
            ways.push("CDI (CRI CDIDevices and cdi.k8s.io annotations)".into());
        }
        say("CRI-O", ways, "", out);
    }
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
    /// A containerd or CRI-O runtime handler runs our wrapper.
    pub cri_runtime: bool,
    /// LXC, enroot or Apptainer calls it as `nvidia-container-cli` (docs/hpc.md).
    pub cli_callers: bool,
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
    if wiring.cri_runtime {
        ways.push("a CRI runtime handler");
    }
    if wiring.cli_callers {
        ways.push("nvidia-container-cli's callers (LXC, enroot, Apptainer)");
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

    fn reached(engines: &Engines<'_>) -> Vec<Check> {
        let mut out = Vec::new();
        reaches(engines, &mut out);
        out
    }

    #[test]
    fn says_per_engine_which_ways_reach_gpus() {
        let docker = Docker {
            hook_ours: true,
            runtime_ours: true,
            cdi: Some(true),
            running: true,
            ..Docker::default()
        };
        let containerd = super::super::containerd::Containerd {
            configured: true,
            cdi: true,
            ours: vec!["nvidia".into()],
        };
        let crio = crate::specs::engine_config::crio::Config::default();
        let engines = Engines {
            docker: &docker,
            containerd: &containerd,
            crio: Some((&crio, vec![])),
            hooks_d: true,
            cdi_ours: true,
            plugin_spec: false,
        };
        let out = reached(&engines);
        let found = |name: &str| {
            out.iter()
                .find(|c| c.name == name)
                .map(|c| (c.status, c.found.clone()))
                .unwrap()
        };
        let (status, docker_ways) = found("Docker reaches GPUs");
        assert_eq!(status, super::super::Status::Ok);
        for way in ["--gpus", "--runtime nvidia", "--device nvidia.com/gpu"] {
            assert!(docker_ways.contains(way), "{way} in {docker_ways}");
        }
        let (_, containerd_ways) = found("containerd reaches GPUs");
        assert!(containerd_ways.contains("runtime handler \"nvidia\""));
        assert!(containerd_ways.contains("CDIDevices"));
        let (_, crio_ways) = found("CRI-O reaches GPUs");
        assert!(crio_ways.contains("hooks.d") && crio_ways.contains("CDI"));
        // Docker without features.cdi: CDI is not one of its ways, and it says so.
        let docker = Docker {
            hook_ours: true,
            running: true,
            ..Docker::default()
        };
        let containerd = super::super::containerd::Containerd {
            configured: true,
            cdi: false,
            ours: vec!["nvidia".into()],
        };
        let engines = Engines {
            docker: &docker,
            containerd: &containerd,
            crio: None,
            hooks_d: true,
            cdi_ours: true,
            plugin_spec: false,
        };
        let out = reached(&engines);
        let docker_ways = &out
            .iter()
            .find(|c| c.name == "Docker reaches GPUs")
            .unwrap()
            .found;
        assert!(
            docker_ways.contains("not CDI: features.cdi is not set"),
            "{docker_ways}"
        );
        assert!(!docker_ways.contains("CDI (`docker run"), "{docker_ways}");
        let containerd_ways = &out
            .iter()
            .find(|c| c.name == "containerd reaches GPUs")
            .unwrap()
            .found;
        assert!(!containerd_ways.contains("CDIDevices"), "{containerd_ways}");
        assert!(!out.iter().any(|c| c.name == "CRI-O reaches GPUs"));
        assert!(!out.iter().any(|c| c.name == "Docker CDI"));
        // features.cdi on and no spec of ours: Docker 29's `--gpus` would
        // take the CDI path and find nothing; the check names the command.
        let cdi_docker = Docker {
            hook_ours: true,
            running: true,
            cdi: Some(true),
            ..Docker::default()
        };
        let out = reached(&Engines {
            docker: &cdi_docker,
            containerd: &containerd,
            crio: None,
            hooks_d: false,
            cdi_ours: false,
            plugin_spec: false,
        });
        let warned = out.iter().find(|c| c.name == "Docker CDI").unwrap();
        assert_eq!(warned.status, super::super::Status::Warn);
        assert!(
            warned
                .remedy
                .as_deref()
                .unwrap_or_default()
                .contains("cdi generate"),
            "{warned:?}"
        );
        // An engine configured but wired to nothing of ours warns.
        let idle = Docker {
            configured: true,
            ..Docker::default()
        };
        let none = super::super::containerd::Containerd::default();
        let out = reached(&Engines {
            docker: &idle,
            containerd: &none,
            crio: None,
            hooks_d: false,
            cdi_ours: false,
            plugin_spec: false,
        });
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].status, super::super::Status::Warn);
    }
}

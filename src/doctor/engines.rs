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
    /// The installed Docker package's version (major, minor), from dpkg's
    /// database: from 28.2 an unset `features.cdi` counts as on.
    pub version: Option<(u32, u32)>,
    /// The `nvidia-cdi-hook` dockerd finds: with it, Docker 29 sends
    /// `--gpus` through CDI (moby PR 50228).
    pub cdi_hook: Option<String>,
}

impl Docker {
    /// Whether Docker's CDI support is on: `features.cdi`, or unset on
    /// Docker 28.2 and later (its default there).
    fn cdi_on(&self) -> bool {
        self.cdi
            .unwrap_or_else(|| self.version.is_some_and(|v| v >= CDI_DEFAULT_FROM))
    }
}

/// The first Docker whose CDI support is on without `features.cdi`.
const CDI_DEFAULT_FROM: (u32, u32) = (28, 2);
/// The packages Docker's daemon comes in, Debian's and Docker's own.
const DOCKER_PACKAGES: [&str; 3] = ["docker.io", "docker-ce", "moby-engine"];
/// The name Docker 29 looks for before taking the CDI path for `--gpus`.
const CDI_HOOK_NAME: &str = "nvidia-cdi-hook";

/// The installed Docker package's (major, minor) from dpkg's status file,
/// its epoch and Debian revision dropped (`5:28.5.2-1~debian.12`,
/// `28.5.2+dfsg1-2`); `None` without dpkg or such a package.
fn docker_version(host: &HostRoot) -> Option<(u32, u32)> {
    let status = std::fs::read_to_string(host.path("/var/lib/dpkg/status")).ok()?;
    status.split("\n\n").find_map(|entry| {
        let field = |name: &str| {
            entry
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
        };
        let package = field("Package")?;
        if !DOCKER_PACKAGES.contains(&package)
            || !field("Status").is_some_and(|s| s.ends_with(" installed"))
        {
            return None;
        }
        let version = field("Version")?;
        let version = version.split_once(':').map_or(version, |(_, v)| v);
        let mut parts = version.split(|c: char| !c.is_ascii_digit());
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
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
    docker.running = processes.named("dockerd").next().is_some();
    docker.version = docker_version(host);
    // Looked up as dockerd does, on its own PATH (the system's when none runs).
    docker.cdi_hook = match processes.named("dockerd").next() {
        Some(d) => processes.env_var(d.pid, "PATH").and_then(|path| {
            let root = DriverRoot::new(processes.dir(d.pid).join("root").join(""));
            look_path(&root, &path, CDI_HOOK_NAME).map(|f| f.shown)
        }),
        None => {
            look_path(&DriverRoot::new(host.root()), SYSTEM_PATH, CDI_HOOK_NAME).map(|f| f.shown)
        }
    };
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
    /// A spec names devices of kind `nvidia.com/gpu` (ours or not).
    pub gpu_spec: bool,
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
        let mut note = String::new();
        let cdi_on = docker.cdi_on();
        let by_default = if docker.cdi.is_none() {
            " (on by default from Docker 28.2)"
        } else {
            ""
        };
        if cdi_on && engines.cdi_ours {
            ways.push(format!(
                "CDI (`docker run --device nvidia.com/gpu=…`, features.cdi{by_default})"
            ));
        }
        // Docker 29 sends `--gpus` through CDI too (moby PR 50228) when CDI
        // is on and nvidia-cdi-hook is on dockerd's PATH: it asks for
        // nvidia.com/gpu=all, =<index> and =GPU-<uuid>.
        let gpus_through_cdi = docker.cdi_hook.as_deref().map(|hook| {
            format!(
                ", and so does `--gpus` from Docker 29 on, which takes the CDI path \
                 because {hook} is installed"
            )
        });
        let warn = match (docker.cdi, &gpus_through_cdi) {
            (Some(true), _) => !engines.cdi_ours,
            (None, Some(_)) => cdi_on && !engines.gpu_spec,
            _ => false,
        };
        if warn {
            out.push(Check::warn(
                L,
                "Docker CDI",
                format!(
                    "Docker's CDI support is on (features.cdi{}) but no CDI spec of \
                     oci-nvidia-hook's exists: `--device nvidia.com/gpu=…` fails{}",
                    if docker.cdi.is_some() {
                        ""
                    } else {
                        " unset, the default from Docker 28.2"
                    },
                    gpus_through_cdi.as_deref().unwrap_or(
                        ", and so does `--gpus` from Docker 29 on where nvidia-cdi-hook is \
                         installed, since it then takes the CDI path"
                    )
                ),
                "`systemctl start oci-nvidia-hook-cdi` (the refresh unit), or \
                 `oci-nvidia-hook cdi generate --output /var/run/cdi/nvidia.yaml`",
            ));
        } else if !cdi_on && engines.cdi_ours {
            // Not a warning: the spec may be there for another engine.
            note =
                match docker.version {
                    Some((major, minor)) => {
                        format!(
                    " (not CDI: features.cdi is {} in daemon.json, and Docker {major}.{minor} \
                     refuses `--device nvidia.com/gpu=…`; `nvidia-ctk runtime configure \
                     --runtime=docker --cdi.enabled` sets it)",
                    if docker.cdi.is_some() { "off" } else { "not set" }
                )
                    }
                    None => " (not CDI: features.cdi is not set in daemon.json, so Docker before \
                          28.2 refuses `--device nvidia.com/gpu=…`; `nvidia-ctk \
                          runtime configure --runtime=docker --cdi.enabled` sets it)"
                        .into(),
                };
        }
        say("Docker", ways, &note, out);
    }
    let containerd = engines.containerd;
    if containerd.configured {
        let mut ways: Vec<String> = containerd
            .ours
            .iter()
            .map(|name| {
                format!(
                    "the runtime handler {name:?} (a RuntimeClass; the device plugin's envvar \
                     and volume-mounts strategies)"
                )
            })
            .collect();
        if containerd.cdi && any_spec {
            ways.push(
                "CDI (CRI CDIDevices and cdi.k8s.io annotations; the cdi-cri and \
                 cdi-annotations strategies)"
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
            gpu_spec: false,
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
            gpu_spec: false,
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
            gpu_spec: false,
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
            gpu_spec: false,
        });
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].status, super::super::Status::Warn);
    }

    #[test]
    fn reads_dockers_version_from_dpkgs_status() {
        let dir = tempfile::tempdir().unwrap();
        let host = HostRoot::new(dir.path());
        assert_eq!(docker_version(&host), None);
        std::fs::create_dir_all(dir.path().join("var/lib/dpkg")).unwrap();
        let status = |docker: &str| {
            format!(
                "Package: containerd\nStatus: install ok installed\nVersion: 2.1.9~ds1-1\n\n\
                 Package: {docker}\nStatus: install ok installed\n\n"
            )
        };
        for (entry, version) in [
            ("docker.io\nVersion: 28.5.2+dfsg1-2", Some((28, 5))),
            (
                "docker-ce\nVersion: 5:29.1.0-1~debian.13~trixie",
                Some((29, 1)),
            ),
            (
                "docker-ce\nVersion: 5:28.1.1-1~debian.12~bookworm",
                Some((28, 1)),
            ),
        ] {
            std::fs::write(dir.path().join("var/lib/dpkg/status"), status(entry)).unwrap();
            assert_eq!(docker_version(&host), version, "{entry}");
        }
        // Removed, its config files kept: not installed.
        std::fs::write(
            dir.path().join("var/lib/dpkg/status"),
            "Package: docker.io\nStatus: deinstall ok config-files\nVersion: 26.1.5\n",
        )
        .unwrap();
        assert_eq!(docker_version(&host), None);
    }

    #[test]
    fn docker_28_2_counts_an_unset_features_cdi_as_on() {
        let containerd = super::super::containerd::Containerd::default();
        let engines = |docker: &Docker, cdi_ours: bool, gpu_spec: bool| {
            reached(&Engines {
                docker,
                containerd: &containerd,
                crio: None,
                hooks_d: false,
                cdi_ours,
                plugin_spec: false,
                gpu_spec,
            })
        };
        let docker = |version: (u32, u32), hook: Option<&str>| Docker {
            hook_ours: true,
            running: true,
            version: Some(version),
            cdi_hook: hook.map(String::from),
            ..Docker::default()
        };
        let found = |out: &[Check], name: &str| {
            out.iter()
                .find(|c| c.name == name)
                .map(|c| (c.status, c.found.clone(), c.remedy.clone()))
        };
        // 28.5, features.cdi unset, nvidia-cdi-hook installed, no spec names
        // a GPU: Docker 29's --gpus would take CDI and find nothing.
        let hooked = docker((28, 5), Some("/usr/bin/nvidia-cdi-hook"));
        let out = engines(&hooked, false, false);
        let (status, text, remedy) = found(&out, "Docker CDI").expect("a Docker CDI check");
        assert_eq!(status, super::super::Status::Warn);
        assert!(text.contains("/usr/bin/nvidia-cdi-hook"), "{text}");
        assert!(text.contains("the default from Docker 28.2"), "{text}");
        assert!(remedy.unwrap_or_default().contains("cdi generate"));
        // A spec naming the GPUs (NVIDIA's, say) serves that path.
        assert!(found(&engines(&hooked, false, true), "Docker CDI").is_none());
        // No nvidia-cdi-hook and features.cdi unset: --gpus takes the hook.
        let plain = docker((28, 5), None);
        assert!(found(&engines(&plain, false, false), "Docker CDI").is_none());
        // Our spec: CDI is one of its ways, on by default.
        let (_, ways, _) = found(&engines(&plain, true, true), "Docker reaches GPUs").unwrap();
        assert!(ways.contains("on by default from Docker 28.2"), "{ways}");
        // Before 28.2, unset is off, and the note names the version.
        let old = docker((28, 1), Some("/usr/bin/nvidia-cdi-hook"));
        let out = engines(&old, true, true);
        assert!(found(&out, "Docker CDI").is_none());
        let (_, ways, _) = found(&out, "Docker reaches GPUs").unwrap();
        assert!(ways.contains("Docker 28.1 refuses"), "{ways}");
        assert!(!ways.contains("CDI (`docker run"), "{ways}");
    }
}

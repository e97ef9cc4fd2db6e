//! The CDI specs engines read (`/etc/cdi`, then `/var/run/cdi`, which wins):
//! whether each parses, whether an NVIDIA spec was made for another driver
//! than the running one (its mounts then name files that changed), and
//! device names defined twice, which CDI's own cache refuses in both specs
//! when they sit in one directory (`conflicting device`) and resolves for
//! the later directory otherwise.
//!
//! Only what doctor must say is checked here; the whole validation of a
//! spec against the host is `cdi validate`'s.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::programs::find_program;
use super::{Check, Error, HostFacts, HostRoot, Layer};
use crate::host::driver::DriverRoot;
use crate::specs::cdi::dirs::{read_spec_text, spec_files, SPEC_DIRS};
use crate::specs::cdi::Spec;
use crate::util::this_program::SYSTEM_PATH;

const L: Layer = Layer::Wiring;

/// What the CDI checks found.
#[derive(Debug, Default)]
pub(super) struct Specs {
    /// Whether any spec exists.
    pub any: bool,
    /// Whether a spec of ours exists (its hook is our `cdi-hook`).
    pub ours: bool,
    /// Whether the device plugin's spec exists.
    pub plugin: bool,
    /// Whether a spec names a device of kind `nvidia.com/gpu` (ours or
    /// NVIDIA's): what Docker's CDI `--gpus` path asks for.
    pub gpu_names: bool,
    /// Whether a spec defines `management.nvidia.com/gpu=all`, what the GPU
    /// Operator's own pods ask for.
    pub management: bool,
}

/// One parsed spec file.
struct Loaded {
    file: PathBuf,
    /// Its directory's priority.
    priority: usize,
    spec: Spec,
}

/// Checks the specs under the host root.
pub(super) fn check(
    host: &HostRoot,
    facts: &HostFacts,
    spec_driver: fn(&Spec) -> Option<&str>,
    out: &mut Vec<Check>,
) -> Specs {
    let mut result = Specs::default();
    let mut specs = Vec::new();
    for (priority, dir) in SPEC_DIRS.iter().enumerate() {
        for file in spec_files(&host.path(dir)) {
            result.any = true;
            let text = match read_spec_text(&file) {
                Ok(text) => text,
                Err(reason) => {
                    out.push(Check::warn(
                        L,
                        "CDI",
                        format!("{} is refused: {reason}", file.display()),
                        format!(
                            "make it root's and writable by root alone (`chown root: {0}; \
                             chmod go-w {0}`): the runtime wrapper and `nvidia-ctk cdi list` \
                             skip it, and its hooks run as root in every container that asks",
                            file.display()
                        ),
                    ));
                    continue;
                }
            };
            let parsed = serde_yaml::from_str::<Spec>(&text).map_err(|source| Error::Yaml {
                file: file.clone(),
                source,
            });
            match parsed {
                Ok(spec) => specs.push(Loaded {
                    file,
                    priority,
                    spec,
                }),
                Err(e) => out.push(Check::unparsable(
                    L,
                    "CDI",
                    &file,
                    &e.to_string(),
                    format!(
                        "regenerate it (`oci-nvidia-hook cdi generate --output {}`) or remove \
                         it: engines refuse its devices",
                        file.display()
                    ),
                )),
            }
        }
    }
    let running = facts.inventory.as_ref().map(|i| i.driver_version.as_str());
    for loaded in &specs {
        let ours = spec_driver(&loaded.spec).is_some();
        result.ours |= ours;
        let names = |name: &str| loaded.spec.devices.iter().any(|d| d.name == name);
        result.gpu_names |= loaded.spec.kind == GPU_KIND && !loaded.spec.devices.is_empty();
        result.management |= loaded.spec.kind == MANAGEMENT_KIND && names("all");
        if loaded.spec.kind.starts_with(PLUGIN_VENDOR) {
            result.plugin = true;
            plugin_spec(host, loaded, out);
            continue;
        }
        if !loaded.spec.kind.starts_with("nvidia.com/") {
            continue;
        }
        let made_for = spec_driver(&loaded.spec)
            .map(str::to_string)
            .or_else(|| mounted_driver(&loaded.spec));
        match (made_for, running) {
            (Some(made_for), Some(running)) if made_for != running => out.push(Check::fail(
                L,
                "CDI",
                format!(
                    "{} was made for driver {made_for}, but the host runs {running}: its \
                     mounts name files that no longer exist, and containers taking its \
                     devices fail",
                    loaded.file.display()
                ),
                format!(
                    "regenerate it: `oci-nvidia-hook cdi generate --output {}`",
                    loaded.file.display()
                ),
            )),
            (made_for, _) => out.push(Check::ok(
                L,
                "CDI",
                format!(
                    "{}: {} devices of {}{}",
                    loaded.file.display(),
                    loaded.spec.devices.len(),
                    loaded.spec.kind,
                    made_for
                        .map(|v| format!(", driver {v}"))
                        .unwrap_or_default()
                ),
            )),
        }
    }
    duplicates(&specs, out);
    if !result.any {
        let dirs: Vec<String> = SPEC_DIRS
            .iter()
            .map(|d| host.path(d).display().to_string())
            .collect();
        out.push(Check::ok(
            L,
            "CDI",
            format!("no spec in {}: CDI is not in use", dirs.join(" or ")),
        ));
    }
    result
}

/// The kind Docker's `--gpus` asks for on its CDI path, and `cdi generate` writes.
const GPU_KIND: &str = "nvidia.com/gpu";
/// The kind of the GPU Operator's management spec (`cdi generate --mode management`).
const MANAGEMENT_KIND: &str = "management.nvidia.com/gpu";

/// The GPU Operator's management flow: with the runtime wrapper in `cdi`
/// mode reading annotations under a prefix of its own (the operator's
/// `nvidia.cdi.k8s.io/`), the operator's pods ask for
/// `management.nvidia.com/gpu=all` in a `<prefix>container.<name>`
/// annotation; without a spec defining it each such pod fails to start.
pub(super) fn management_check(
    config: &crate::config::Config,
    specs: &Specs,
    out: &mut Vec<Check>,
) {
    let runtime = &config.runtime;
    let defaults = crate::config::RuntimeCdiConfig::default().annotation_prefixes;
    let extra: Vec<&str> = runtime
        .cdi
        .annotation_prefixes
        .iter()
        .filter(|p| !defaults.contains(p))
        .map(String::as_str)
        .collect();
    if runtime.mode != crate::config::RuntimeMode::Cdi || extra.is_empty() {
        return;
    }
    let prefixes = extra.join(", ");
    if specs.management {
        out.push(Check::ok(
            L,
            "GPU Operator",
            format!(
                "the runtime is in cdi mode with annotation prefixes {prefixes}, and a spec \
                 defines {MANAGEMENT_KIND}=all for the operator's own pods"
            ),
        ));
    } else {
        out.push(Check::warn(
            L,
            "GPU Operator",
            format!(
                "the runtime is in cdi mode with annotation prefixes {prefixes} (the GPU \
                 Operator's setup), but no spec defines {MANAGEMENT_KIND}=all: the operator's \
                 pods that ask for it (`{}container.<name>` annotations) fail with \
                 \"unresolvable CDI devices\"",
                extra[0]
            ),
            format!(
                "`nvidia-ctk cdi generate --mode management --output \
                 /var/run/cdi/{}.yaml`",
                MANAGEMENT_KIND.replace('/', "-")
            ),
        ));
    }
}

/// The vendor of the CDI kinds NVIDIA's device plugin writes its spec for
/// (`k8s.device-plugin.nvidia.com/gpu`, `…/imex`) under its
/// `cdi-annotations` and `cdi-cri` strategies.
const PLUGIN_VENDOR: &str = "k8s.device-plugin.nvidia.com/";

/// The device plugin's spec: its devices, and whether the programs its
/// hooks run (`nvidia-cdi-hook`, as NVIDIA's library writes them) exist on
/// the host; each that is missing fails every pod given its devices.
fn plugin_spec(host: &HostRoot, loaded: &Loaded, out: &mut Vec<Check>) {
    let spec = &loaded.spec;
    let edits = std::iter::once(&spec.container_edits)
        .chain(spec.devices.iter().map(|d| &d.container_edits));
    let mut programs: Vec<String> = Vec::new();
    for hook in edits.flat_map(|e| &e.hooks) {
        let program = hook.path.display().to_string();
        if !programs.contains(&program) {
            programs.push(program);
        }
    }
    let root = DriverRoot::new(host.root());
    let mut found = Vec::new();
    for program in &programs {
        match find_program(&root, SYSTEM_PATH, program) {
            None => {
                out.push(Check::fail(
                    L,
                    "device plugin CDI",
                    format!(
                        "{} (the device plugin's spec, kind {}) has hooks that run {program}, \
                    which is not on this host: every pod given its devices fails to start",
                        loaded.file.display(),
                        spec.kind
                    ),
                    "`make install` (it links /usr/local/bin/nvidia-cdi-hook to \
                     oci-nvidia-hook), or set the plugin's nvidiaCDIHookPath to it",
                ));
                return;
            }
            Some(hit) => found.push(format!(
                "{program} → {} ({})",
                hit.host.display(),
                if hit.ours {
                    "oci-nvidia-hook"
                } else {
                    "not oci-nvidia-hook"
                }
            )),
        }
    }
    let hooks = if found.is_empty() {
        "no hooks".to_string()
    } else {
        format!("hooks run {}", found.join(", "))
    };
    out.push(Check::ok(
        L,
        "device plugin CDI",
        format!(
            "{}: the device plugin's spec, {} devices of {}; {hooks}",
            loaded.file.display(),
            spec.devices.len(),
            spec.kind
        ),
    ));
}

/// The driver version of a spec not ours (NVIDIA's `nvidia-ctk cdi
/// generate`), from the versioned file name of the libcuda or NVML it mounts.
fn mounted_driver(spec: &Spec) -> Option<String> {
    let edits = std::iter::once(&spec.container_edits)
        .chain(spec.devices.iter().map(|d| &d.container_edits));
    edits.flat_map(|e| &e.mounts).find_map(|m| {
        let name = m.host_path.file_name()?.to_str()?;
        let version = name
            .strip_prefix("libcuda.so.")
            .or_else(|| name.strip_prefix("libnvidia-ml.so."))?;
        (version.split('.').count() >= 2
            && version
                .split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
        .then(|| version.to_string())
    })
}

/// Device names that more than one spec defines: one check per set of
/// specs, naming the devices they share.
fn duplicates(specs: &[Loaded], out: &mut Vec<Check>) {
    let mut names: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, loaded) in specs.iter().enumerate() {
        for device in &loaded.spec.devices {
            let name = format!("{}={}", loaded.spec.kind, device.name);
            let defined = names.entry(name).or_default();
            if !defined.contains(&i) {
                defined.push(i);
            }
        }
    }
    let mut groups: BTreeMap<Vec<usize>, Vec<String>> = BTreeMap::new();
    for (name, defined) in names.into_iter().filter(|(_, d)| d.len() > 1) {
        groups.entry(defined).or_default().push(name);
    }
    for (defined, names) in groups {
        let files: Vec<String> = defined
            .iter()
            .map(|&i| specs[i].file.display().to_string())
            .collect();
        let shown = if names.len() > 4 {
            format!("{} and {} more", names[..4].join(", "), names.len() - 4)
        } else {
            names.join(", ")
        };
        let top = defined
            .iter()
            .map(|&i| specs[i].priority)
            .max()
            .unwrap_or(0);
        let at_top: Vec<usize> = defined
            .iter()
            .copied()
            .filter(|&i| specs[i].priority == top)
            .collect();
        if at_top.len() > 1 {
            out.push(Check::fail(
                L,
                "CDI",
                format!(
                    "{shown} defined in both {}: engines refuse these devices in both \
                     (\"conflicting device\")",
                    files.join(" and ")
                ),
                "remove one of the specs (keep the one made for this host's driver)",
            ));
        } else {
            out.push(Check::warn(
                L,
                "CDI",
                format!(
                    "{shown} defined in both {}: the one in {} wins",
                    files.join(" and "),
                    specs[at_top[0]].file.display()
                ),
                "remove the spec that is not wanted, so that which one applies is not a \
                 matter of directory order",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::specs::cdi::spec::{ContainerEdits, Device, Mount};

    #[test]
    fn reads_the_driver_of_a_spec_from_the_libraries_it_mounts() {
        let spec = Spec {
            kind: "nvidia.com/gpu".into(),
            devices: vec![Device {
                name: "0".into(),
                ..Device::default()
            }],
            container_edits: ContainerEdits {
                mounts: vec![Mount {
                    host_path: "/usr/lib/x86_64-linux-gnu/libcuda.so.470.256.02".into(),
                    container_path: "/usr/lib/x86_64-linux-gnu/libcuda.so.470.256.02".into(),
                    ..Mount::default()
                }],
                ..ContainerEdits::default()
            },
            ..Spec::default()
        };
        assert_eq!(mounted_driver(&spec).as_deref(), Some("470.256.02"));
        assert_eq!(mounted_driver(&Spec::default()), None);
    }

    /// The device plugin's spec as NVIDIA's CDI library writes it.
    const PLUGIN_SPEC: &str = r#"---
cdiVersion: 0.5.0
kind: k8s.device-plugin.nvidia.com/gpu
devices:
- name: GPU-5b7d3c39-7e1a-4d8e-9c55-2b2f8f3c1a01
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args:
    - nvidia-cdi-hook
    - create-symlinks
    - --link
    - libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args:
    - nvidia-cdi-hook
    - update-ldcache
    - --folder
    - /usr/lib/x86_64-linux-gnu
"#;

    #[test]
    fn the_device_plugins_spec_fails_until_its_hook_program_exists() {
        let dir = tempfile::tempdir().unwrap();
        let cdi = dir.path().join("var/run/cdi");
        std::fs::create_dir_all(&cdi).unwrap();
        std::fs::write(
            cdi.join("k8s.device-plugin.nvidia.com-gpu.yaml"),
            PLUGIN_SPEC,
        )
        .unwrap();
        let host = HostRoot::new(dir.path());
        let facts = HostFacts {
            inventory: None,
            container: None,
            cuda: None,
            failed: false,
        };
        let mut out = Vec::new();
        let specs = check(&host, &facts, |_| None, &mut out);
        assert!(specs.plugin && !specs.ours);
        let plugin: Vec<_> = out
            .iter()
            .filter(|c| c.name == "device plugin CDI")
            .collect();
        assert_eq!(plugin.len(), 1, "{out:?}");
        assert_eq!(plugin[0].status, super::super::Status::Fail);
        assert!(
            plugin[0].found.contains("/usr/bin/nvidia-cdi-hook"),
            "{plugin:?}"
        );
        // `make install`'s link: the spec's hooks now run oci-nvidia-hook.
        let bin = dir.path().join("usr/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("oci-nvidia-hook"), b"#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink("oci-nvidia-hook", bin.join("nvidia-cdi-hook")).unwrap();
        let mut out = Vec::new();
        check(&host, &facts, |_| None, &mut out);
        let plugin = out.iter().find(|c| c.name == "device plugin CDI").unwrap();
        assert_eq!(plugin.status, super::super::Status::Ok, "{plugin:?}");
        assert!(plugin
            .found
            .contains("1 devices of k8s.device-plugin.nvidia.com/gpu"));
        assert!(plugin.found.contains("(oci-nvidia-hook)"), "{plugin:?}");
    }

    #[test]
    fn the_operators_cdi_mode_without_a_management_spec_is_named() {
        let mut config = crate::config::Config::default();
        let checks = |config: &crate::config::Config, management: bool| {
            let mut out = Vec::new();
            let specs = Specs {
                management,
                ..Specs::default()
            };
            management_check(config, &specs, &mut out);
            out
        };
        // NVIDIA's defaults (auto, cdi.k8s.io/): not the operator's flow.
        assert!(checks(&config, false).is_empty());
        config.runtime.mode = crate::config::RuntimeMode::Cdi;
        assert!(checks(&config, false).is_empty());
        config.runtime.cdi.annotation_prefixes = vec!["nvidia.cdi.k8s.io/".into()];
        let out = checks(&config, false);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].status, super::super::Status::Warn);
        assert!(out[0].found.contains("nvidia.cdi.k8s.io/container.<name>"));
        assert!(out[0]
            .remedy
            .as_deref()
            .unwrap_or_default()
            .contains("cdi generate --mode management"));
        let out = checks(&config, true);
        assert_eq!(out[0].status, super::super::Status::Ok);
    }
}

//! CRI-O's configuration: `crio.conf` and its drop-ins in `crio.conf.d`
//! (`*.conf`, in name order, each setting of a later file winning), read
//! once for the hooks.d directories it names (`hooks`) and for its runtime
//! handlers (`[crio.runtime.runtimes.NAME]`). CRI-O applies CDI devices
//! always (since 1.23, from `cdi_spec_dirs`): there is no switch to check.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::hooks::with_extension;
use super::programs::runtime_handler;
use super::{Check, HostRoot, Layer};

const L: Layer = Layer::Wiring;

/// CRI-O's configuration and its drop-in directory.
const CONF: &str = "/etc/crio/crio.conf";
const CONF_D: &str = "/etc/crio/crio.conf.d";

/// CRI-O's settings that concern GPUs, merged over its files.
#[derive(Debug, Default)]
pub(super) struct Config {
    /// The files read, in order.
    pub files: Vec<PathBuf>,
    /// `[crio.runtime] hooks_dir`, when a file sets it.
    pub hooks_dirs: Option<Vec<String>>,
    /// Runtime handler name → its `runtime_path` (`None`: looked up by name).
    pub runtimes: BTreeMap<String, Option<String>>,
    /// `[crio.runtime] default_runtime`.
    pub default: Option<String>,
}

/// Reads CRI-O's files under `host`; `None` when it has none. A file that
/// does not parse is a failed check, and CRI-O's other files still count.
pub(super) fn load(host: &HostRoot, out: &mut Vec<Check>) -> Option<Config> {
    let mut files = vec![host.path(CONF)];
    let mut drop_ins = with_extension(&host.path(CONF_D), "conf");
    drop_ins.sort();
    files.extend(drop_ins);
    let mut config = Config::default();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        config.files.push(file.clone());
        let value: toml::Value = match toml::from_str(&text) {
            Ok(value) => value,
            Err(e) => {
                out.push(Check::unparsable(
                    L,
                    "crio.conf",
                    &file,
                    e.message(),
                    "fix it: CRI-O does not start with it",
                ));
                continue;
            }
        };
        let Some(runtime) = value.get("crio").and_then(|c| c.get("runtime")) else {
            continue;
        };
        if let Some(list) = runtime.get("hooks_dir").and_then(|h| h.as_array()) {
            config.hooks_dirs = Some(
                list.iter()
                    .filter_map(|d| d.as_str().map(str::to_string))
                    .collect(),
            );
        }
        if let Some(default) = runtime.get("default_runtime").and_then(|d| d.as_str()) {
            config.default = Some(default.to_string());
        }
        for (name, handler) in runtime
            .get("runtimes")
            .and_then(|r| r.as_table())
            .into_iter()
            .flatten()
        {
            let path = handler
                .get("runtime_path")
                .and_then(|p| p.as_str())
                .filter(|p| !p.is_empty())
                .map(str::to_string);
            config.runtimes.insert(name.clone(), path);
        }
    }
    (!config.files.is_empty()).then_some(config)
}

/// CRI-O's GPU runtime handlers; the names of those that run our wrapper.
pub(super) fn check(host: &HostRoot, config: &Config, out: &mut Vec<Check>) -> Vec<String> {
    let mut ours = Vec::new();
    for (name, path) in &config.runtimes {
        let program = path.as_deref().unwrap_or(name);
        if !name.contains("nvidia") && !program.contains("nvidia") {
            continue;
        }
        let default = config.default.as_deref() == Some(name.as_str());
        let fix = "fix its runtime_path in crio.conf.d";
        if runtime_handler(host, "CRI-O runtime", (name, default), program, fix, out) {
            ours.push(name.clone());
        }
    }
    ours
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn drop_ins_add_runtimes_and_the_last_hooks_dir_wins() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("etc/crio/crio.conf.d");
        fs::create_dir_all(&d).unwrap();
        fs::write(
            dir.path().join("etc/crio/crio.conf"),
            "[crio.runtime]\ndefault_runtime = \"crun\"\nhooks_dir = [\"/a\"]\n",
        )
        .unwrap();
        // As `nvidia-ctk runtime configure --runtime=crio` writes its drop-in.
        fs::write(
            d.join("99-nvidia.conf"),
            "[crio]\n  [crio.runtime]\n    [crio.runtime.runtimes]\n      [crio.runtime.runtimes.nvidia]\n        \
             runtime_path = \"/usr/local/bin/nvidia-container-runtime\"\n        runtime_type = \"oci\"\n",
        )
        .unwrap();
        fs::write(
            d.join("10-hooks.conf"),
            "[crio.runtime]\nhooks_dir = [\"/b\"]\n",
        )
        .unwrap();
        fs::write(d.join("notes.txt"), "[broken").unwrap();
        let bin = dir.path().join("usr/local/bin");
        fs::create_dir_all(&bin).unwrap();
        fs::write(bin.join("oci-nvidia-hook"), b"#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink("oci-nvidia-hook", bin.join("nvidia-container-runtime"))
            .unwrap();
        let host = HostRoot::new(dir.path());
        let mut out = Vec::new();
        let config = load(&host, &mut out).unwrap();
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(config.files.len(), 3);
        assert_eq!(config.hooks_dirs.as_deref(), Some(&["/b".to_string()][..]));
        assert_eq!(config.default.as_deref(), Some("crun"));
        assert_eq!(check(&host, &config, &mut out), ["nvidia"]);
        assert!(out[0].found.contains("(oci-nvidia-hook)"), "{out:?}");
    }

    #[test]
    fn a_broken_drop_in_is_a_failure_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("etc/crio/crio.conf.d");
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("50-x.conf"), "[crio.runtime\n").unwrap();
        let mut out = Vec::new();
        let config = load(&HostRoot::new(dir.path()), &mut out).unwrap();
        assert!(config.runtimes.is_empty());
        assert!(out[0].found.contains("50-x.conf"), "{out:?}");
        assert!(load(
            &HostRoot::new(tempfile::tempdir().unwrap().path()),
            &mut out
        )
        .is_none());
    }
}

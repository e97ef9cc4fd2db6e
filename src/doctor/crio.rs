//! CRI-O's wiring: its GPU runtime handlers, judged on its configuration
//! as CRI-O reads it (`engine_config::crio::Config`: `crio.conf` and its
//! drop-ins), which also names the hooks.d directories it reads. CRI-O
//! applies CDI devices always (since 1.23): there is no switch to check.

use super::programs::runtime_handler;
use super::{Check, HostRoot, Layer};
use crate::specs::engine_config::crio::Config;

const L: Layer = Layer::Wiring;

/// CRI-O's configuration under `host`; `None` when it has none. A file
/// that does not parse is a failed check, and CRI-O's other files still count.
pub(super) fn load(host: &HostRoot, out: &mut Vec<Check>) -> Option<Config> {
    let (config, errors) = Config::load(host);
    for error in &errors {
        out.push(Check::engine_file(
            L,
            "crio.conf",
            error,
            "fix it: CRI-O does not start with it",
        ));
    }
    config
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

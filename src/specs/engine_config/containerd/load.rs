//! containerd's configuration as containerd loads it ([`Config`]):
//! `config.toml` and the files its `imports` name (globs, relative to the
//! importing file, followed recursively), merged the way each version
//! merges them, then its CRI plugin's runtime handlers and `enable_cdi`.
//!
//! Version 2 configs (containerd 1.x) merge an imported file by whole
//! plugin sections: an imported `[plugins."io.containerd.grpc.v1.cri"]`
//! replaces the main config's (containerd issue 5837). Version 3 configs
//! (containerd 2.x, containerd PR 9982) merge tables key by key. In
//! version 2 the CRI plugin is `io.containerd.grpc.v1.cri`, with CDI off
//! by default; in version 3 its runtime half is
//! `io.containerd.cri.v1.runtime`, with CDI on by default.

use std::path::{Path, PathBuf};

use super::{plugin_name, DEFAULT_CONFIG};
use crate::specs::engine_config::{Error, HostRoot, Result};
use crate::util::glob::matches as glob;

/// At most this many files are loaded (imports that import each other).
const MAX_FILES: usize = 64;

/// One runtime handler of the CRI plugin (a RuntimeClass's `handler`).
#[derive(Debug)]
pub struct Handler {
    /// Its name in `runtimes`.
    pub name: String,
    /// `options.BinaryName`, the OCI runtime the runc shim runs.
    pub binary: Option<String>,
    /// `runtime_type`, the shim; containerd 2.x refuses a handler without one.
    pub runtime_type: Option<String>,
}

/// containerd's effective configuration, as far as GPUs go.
#[derive(Debug)]
pub struct Config {
    /// The files loaded, main config first.
    pub files: Vec<PathBuf>,
    /// The config's version.
    pub version: i64,
    /// Whether its CRI plugin applies CDI devices.
    pub cdi: bool,
    /// Its runtime handlers.
    pub handlers: Vec<Handler>,
    /// `default_runtime_name`.
    pub default: Option<String>,
}

/// The files an `imports` entry names, in name order (Go's `filepath.Glob`:
/// a wildcard only in the last component is what configs use).
fn expand(host: &HostRoot, importer: &str, entry: &str) -> Vec<String> {
    let abs = if entry.starts_with('/') {
        PathBuf::from(entry)
    } else {
        Path::new(importer)
            .parent()
            .unwrap_or(Path::new("/"))
            .join(entry)
    };
    let Some(name) = abs.file_name().and_then(|n| n.to_str()) else {
        return Vec::new();
    };
    if !name.contains(['*', '?']) {
        return vec![abs.display().to_string()];
    }
    let dir = abs.parent().unwrap_or(Path::new("/"));
    let Ok(listing) = std::fs::read_dir(host.path(&dir.display().to_string())) else {
        return Vec::new();
    };
    let mut found: Vec<String> = listing
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| glob(name.as_bytes(), n.as_bytes()))
        .map(|n| dir.join(n).display().to_string())
        .collect();
    found.sort();
    found
}

/// Merges `from` into `into` key by key (version 3).
fn deep_merge(into: &mut toml::Table, from: toml::Table) {
    for (key, value) in from {
        match (into.get_mut(&key), value) {
            (Some(toml::Value::Table(old)), toml::Value::Table(new)) => deep_merge(old, new),
            (_, value) => {
                into.insert(key, value);
            }
        }
    }
}

/// Merges `from` into `into` as containerd 1.x does (version 2): each
/// top-level key and each plugin section replaced whole.
fn section_merge(into: &mut toml::Table, from: toml::Table) {
    for (key, value) in from {
        match (into.get_mut(&key), value) {
            (Some(toml::Value::Table(old)), toml::Value::Table(new)) if key == "plugins" => {
                for (name, section) in new {
                    old.insert(name, section);
                }
            }
            (_, value) => {
                into.insert(key, value);
            }
        }
    }
}

impl Config {
    /// containerd's config under `host` with its imports, as containerd
    /// loads it; `None` when there is none, an error naming the first file
    /// that does not parse.
    pub fn load(host: &HostRoot) -> Option<Result<Config>> {
        let parse = |inner: &str| -> Option<Result<toml::Table>> {
            let file = host.path(inner);
            let text = std::fs::read_to_string(&file).ok()?;
            Some(toml::from_str(&text).map_err(|e| Error::Unparsable {
                path: file,
                message: e.message().to_string(),
            }))
        };
        let mut merged = match parse(DEFAULT_CONFIG)? {
            Ok(table) => table,
            Err(e) => return Some(Err(e)),
        };
        let version = merged
            .get("version")
            .and_then(|v| v.as_integer())
            .unwrap_or(1);
        let mut files = vec![host.path(DEFAULT_CONFIG)];
        let mut seen = vec![DEFAULT_CONFIG.to_string()];
        let mut queue: Vec<String> = imports(&merged, DEFAULT_CONFIG, host);
        queue.reverse();
        while let Some(inner) = queue.pop() {
            if seen.contains(&inner) || seen.len() >= MAX_FILES {
                continue;
            }
            seen.push(inner.clone());
            let Some(parsed) = parse(&inner) else {
                continue;
            };
            let table = match parsed {
                Ok(table) => table,
                Err(e) => return Some(Err(e)),
            };
            files.push(host.path(&inner));
            let mut nested = imports(&table, &inner, host);
            nested.reverse();
            if version >= 3 {
                deep_merge(&mut merged, table);
            } else {
                section_merge(&mut merged, table);
            }
            queue.extend(nested);
        }
        let section = merged
            .get("plugins")
            .and_then(|p| p.get(plugin_name(version)));
        let enabled = section
            .and_then(|s| s.get("enable_cdi"))
            .and_then(|v| v.as_bool());
        let runtimes = section
            .and_then(|s| s.get("containerd"))
            .and_then(|c| c.get("runtimes"))
            .and_then(|r| r.as_table());
        let handlers = runtimes
            .into_iter()
            .flatten()
            .map(|(name, runtime)| Handler {
                name: name.clone(),
                binary: runtime
                    .get("options")
                    .and_then(|o| o.get("BinaryName"))
                    .and_then(|b| b.as_str())
                    .filter(|b| !b.is_empty())
                    .map(str::to_string),
                runtime_type: runtime
                    .get("runtime_type")
                    .and_then(|t| t.as_str())
                    .filter(|t| !t.is_empty())
                    .map(str::to_string),
            })
            .collect();
        let default = section
            .and_then(|s| s.get("containerd"))
            .and_then(|c| c.get("default_runtime_name"))
            .and_then(|d| d.as_str())
            .map(str::to_string);
        Some(Ok(Config {
            files,
            version,
            cdi: enabled.unwrap_or(version >= 3),
            handlers,
            default,
        }))
    }
}

/// The files a loaded file's `imports` name.
fn imports(table: &toml::Table, importer: &str, host: &HostRoot) -> Vec<String> {
    table
        .get("imports")
        .and_then(|i| i.as_array())
        .into_iter()
        .flatten()
        .filter_map(|i| i.as_str())
        .flat_map(|entry| expand(host, importer, entry))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::specs::engine_config::tests::{host_with, CONTAINERD_V2 as V2};

    #[test]
    fn reads_a_version_2_config_with_cdi_and_the_nvidia_handler() {
        let (_dir, host) = host_with(&[(DEFAULT_CONFIG, V2)]);
        let config = Config::load(&host).unwrap().ok().unwrap();
        assert_eq!(config.version, 2);
        assert!(config.cdi);
        let nvidia = config.handlers.iter().find(|h| h.name == "nvidia").unwrap();
        assert_eq!(
            nvidia.binary.as_deref(),
            Some("/usr/local/bin/nvidia-container-runtime")
        );
        assert_eq!(config.default.as_deref(), Some("runc"));
    }

    #[test]
    fn version_2_without_enable_cdi_is_off_and_version_3_is_on() {
        let (_dir, host) = host_with(&[(DEFAULT_CONFIG, "version = 2\n")]);
        assert!(!Config::load(&host).unwrap().ok().unwrap().cdi);
        let v3 = r#"version = 3
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]
    BinaryName = "nvidia-container-runtime"
"#;
        let (_dir, host) = host_with(&[(DEFAULT_CONFIG, v3)]);
        let config = Config::load(&host).unwrap().ok().unwrap();
        assert!(config.cdi, "version 3 enables CDI by default");
        assert_eq!(
            config.handlers[0].binary.as_deref(),
            Some("nvidia-container-runtime")
        );
        let off = "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\"]\nenable_cdi = false\n";
        let (_dir, host) = host_with(&[(DEFAULT_CONFIG, off)]);
        assert!(!Config::load(&host).unwrap().ok().unwrap().cdi);
    }

    #[test]
    fn a_version_2_drop_in_replaces_the_whole_cri_section() {
        // The drop-in holds the handler only: its CRI section replaces the
        // main config's, enable_cdi included (containerd issue 5837).
        let main = "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n\
                    [plugins.\"io.containerd.grpc.v1.cri\"]\nenable_cdi = true\n";
        let drop_in = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\n\
                       BinaryName = \"/usr/bin/nvidia-container-runtime\"\n";
        let (_dir, host) = host_with(&[
            (DEFAULT_CONFIG, main),
            ("/etc/containerd/conf.d/99-nvidia.toml", drop_in),
            ("/etc/containerd/conf.d/README", "not toml"),
        ]);
        let config = Config::load(&host).unwrap().ok().unwrap();
        assert_eq!(config.files.len(), 2, "{:?}", config.files);
        assert!(!config.cdi, "the drop-in's section dropped enable_cdi");
        assert_eq!(config.handlers.len(), 1);
        assert_eq!(config.handlers[0].name, "nvidia");
    }

    #[test]
    fn a_version_3_drop_in_merges_key_by_key_and_relative_imports_follow_the_importer() {
        let main = "version = 3\nimports = [\"conf.d/*.toml\"]\n\
                    [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc]\n\
                    runtime_type = \"io.containerd.runc.v2\"\n";
        let drop_in = "version = 3\nimports = [\"/etc/containerd/more.toml\"]\n\
                       [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia.options]\n\
                       BinaryName = \"/usr/bin/nvidia-container-runtime\"\n";
        let more = "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\"]\nenable_cdi = false\n";
        let (_dir, host) = host_with(&[
            (DEFAULT_CONFIG, main),
            ("/etc/containerd/conf.d/50-nvidia.toml", drop_in),
            ("/etc/containerd/more.toml", more),
        ]);
        let config = Config::load(&host).unwrap().ok().unwrap();
        let names: Vec<&str> = config.handlers.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["nvidia", "runc"]);
        assert!(
            !config.cdi,
            "the nested import's enable_cdi = false applies"
        );
        assert_eq!(config.files.len(), 3);
    }

    #[test]
    fn imports_that_import_each_other_load_once() {
        let main = "version = 2\nimports = [\"/etc/containerd/a.toml\"]\n";
        let a = "version = 2\nimports = [\"/etc/containerd/config.toml\", \"/etc/containerd/a.toml\"]\n";
        let (_dir, host) = host_with(&[(DEFAULT_CONFIG, main), ("/etc/containerd/a.toml", a)]);
        assert_eq!(Config::load(&host).unwrap().ok().unwrap().files.len(), 2);
    }
}

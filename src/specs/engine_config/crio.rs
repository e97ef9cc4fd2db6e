//! CRI-O: `crio.conf` and its drop-ins in `crio.conf.d`. Read
//! ([`Config::load`]): the settings that concern GPUs, merged over its
//! files (`*.conf`, in name order, each setting of a later file winning):
//! the hooks.d directories it reads (`hooks_dir`), its runtime handlers
//! and its default one. CRI-O applies CDI devices always (since 1.23,
//! from `cdi_spec_dirs`): there is no switch to read. Edited
//! ([`add_runtime`]): a drop-in with `[crio.runtime.runtimes.<name>]`: the
//! settings of the main config's default runtime, `runc` or `crun`, then
//! `runtime_path` (our wrapper) and `runtime_type = "oci"`, as NVIDIA's
//! tool writes it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml_edit::DocumentMut;

use super::{
    fresh_copy, get_str, get_table, low_level_runtimes, parse_toml, set, table_at, with_extension,
    Error, HostRoot, Output, Result, Runtime,
};

/// CRI-O's main configuration file.
pub const DEFAULT_CONFIG: &str = "/etc/crio/crio.conf";

/// CRI-O's drop-in directory, which it reads by itself: the path is
/// written once, here, and the default drop-in is built on it.
macro_rules! drop_in_dir {
    () => {
        "/etc/crio/crio.conf.d"
    };
}

/// CRI-O's drop-in directory (`*.conf`).
pub const DROP_IN_DIR: &str = drop_in_dir!();

/// The drop-in NVIDIA's tool writes.
pub const DEFAULT_DROP_IN: &str = concat!(drop_in_dir!(), "/99-nvidia.conf");

/// CRI-O's settings that concern GPUs, merged over its files.
#[derive(Debug, Default)]
pub struct Config {
    /// The files read, in order.
    pub files: Vec<PathBuf>,
    /// `[crio.runtime] hooks_dir`, when a file sets it.
    pub hooks_dirs: Option<Vec<String>>,
    /// Runtime handler name → its `runtime_path` (`None`: looked up by name).
    pub runtimes: BTreeMap<String, Option<String>>,
    /// `[crio.runtime] default_runtime`.
    pub default: Option<String>,
}

impl Config {
    /// CRI-O's files under `host`, read as CRI-O reads them; `None` when it
    /// has none. Each file that does not parse is an error of its own,
    /// beside the view of the others.
    pub fn load(host: &HostRoot) -> (Option<Config>, Vec<Error>) {
        let mut files = vec![host.path(DEFAULT_CONFIG)];
        let mut drop_ins = with_extension(&host.path(DROP_IN_DIR), "conf");
        drop_ins.sort();
        files.extend(drop_ins);
        let mut config = Config::default();
        let mut errors = Vec::new();
        for file in files {
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            config.files.push(file.clone());
            match toml::from_str::<toml::Value>(&text) {
                Ok(value) => config.merge(&value),
                Err(e) => errors.push(Error::Unparsable {
                    path: file,
                    message: e.message().to_string(),
                }),
            }
        }
        ((!config.files.is_empty()).then_some(config), errors)
    }

    /// Takes the settings of one file over those read before.
    fn merge(&mut self, value: &toml::Value) {
        let Some(runtime) = value.get("crio").and_then(|c| c.get("runtime")) else {
            return;
        };
        if let Some(list) = runtime.get("hooks_dir").and_then(|h| h.as_array()) {
            self.hooks_dirs = Some(
                list.iter()
                    .filter_map(|d| d.as_str().map(str::to_string))
                    .collect(),
            );
        }
        if let Some(default) = runtime.get("default_runtime").and_then(|d| d.as_str()) {
            self.default = Some(default.to_string());
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
            self.runtimes.insert(name.clone(), path);
        }
    }
}

/// The file to write so that CRI-O (its main config at `config`, now
/// `text`, `None` when missing) runs `runtime`: the drop-in when one is
/// given, else the main config itself.
pub fn add_runtime(
    config: &Path,
    text: Option<&str>,
    drop_in: Option<&Path>,
    runtime: &Runtime,
) -> Result<Output> {
    let mut main = parse_toml(config, text)?;
    let source = {
        let default = get_str(main.as_table(), &["crio", "runtime", "default_runtime"]);
        get_table(main.as_table(), &["crio", "runtime", "runtimes"]).and_then(|runtimes| {
            low_level_runtimes(default)
                .into_iter()
                .find_map(|name| runtimes.get(name)?.as_table_like())
                .map(fresh_copy)
        })
    };
    let mut nvidia = DocumentMut::new();
    let (doc, path) = match drop_in {
        Some(path) => (&mut nvidia, path),
        None => (&mut main, config),
    };
    let runtimes = table_at(doc.as_table_mut(), &["crio", "runtime", "runtimes"], path)?;
    if let Some(copy) = source {
        runtimes.insert(runtime.name, toml_edit::Item::Table(copy));
    }
    let entry = table_at(runtimes, &[runtime.name], path)?;
    set(entry, "runtime_path", runtime.path);
    set(entry, "runtime_type", "oci");
    if runtime.set_as_default {
        let crio = table_at(doc.as_table_mut(), &["crio", "runtime"], path)?;
        set(crio, "default_runtime", runtime.name);
    }
    Ok(Output {
        path: path.to_path_buf(),
        text: doc.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::specs::engine_config::tests::TEST;

    fn drop_in(main: &str, runtime: &Runtime) -> toml::Table {
        let out = add_runtime(
            Path::new("/etc/crio/crio.conf"),
            Some(main),
            Some(Path::new("/etc/crio/crio.conf.d/99-nvidia.conf")),
            runtime,
        )
        .unwrap();
        assert_eq!(out.path, Path::new("/etc/crio/crio.conf.d/99-nvidia.conf"));
        toml::from_str(&out.text).unwrap()
    }

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    // NVIDIA's TestAddRuntime (engine/crio/crio_test.go).
    #[test]
    fn the_drop_in_takes_the_default_or_runc_runtimes_settings() {
        let cases = [
            (
                "",
                "[crio.runtime.runtimes.test]\nruntime_path = \"/usr/bin/test\"\nruntime_type = \"oci\"\n",
            ),
            (
                "[crio]\n[crio.runtime.runtimes.runc]\nruntime_path = \"/usr/bin/runc\"\n\
                 runtime_type = \"runcoci\"\nrunc_option = \"option\"\n",
                "[crio.runtime.runtimes.test]\nruntime_path = \"/usr/bin/test\"\n\
                 runtime_type = \"oci\"\nrunc_option = \"option\"\n",
            ),
            (
                "[crio]\n[crio.runtime]\ndefault_runtime = \"default\"\n\
                 [crio.runtime.runtimes.default]\nruntime_path = \"/usr/bin/default\"\n\
                 runtime_type = \"defaultoci\"\ndefault_option = \"option\"\n",
                "[crio.runtime.runtimes.test]\nruntime_path = \"/usr/bin/test\"\n\
                 runtime_type = \"oci\"\ndefault_option = \"option\"\n",
            ),
            (
                "[crio]\n[crio.runtime]\ndefault_runtime = \"default\"\n\
                 [crio.runtime.runtimes.default]\nruntime_path = \"/usr/bin/default\"\n\
                 runtime_type = \"defaultoci\"\ndefault_option = \"option\"\n\
                 [crio.runtime.runtimes.runc]\nruntime_path = \"/usr/bin/runc\"\n\
                 runtime_type = \"runcoci\"\nrunc_option = \"option\"\n",
                "[crio.runtime.runtimes.test]\nruntime_path = \"/usr/bin/test\"\n\
                 runtime_type = \"oci\"\ndefault_option = \"option\"\n",
            ),
        ];
        for (main, expected) in cases {
            assert_eq!(drop_in(main, &TEST), table(expected), "{main}");
        }
    }

    // NVIDIA's TestDropInIntegration.
    #[test]
    fn the_default_runtime_is_set_in_the_drop_in_when_asked() {
        let runtime = Runtime {
            name: "nvidia",
            path: "/usr/bin/nvidia-container-runtime",
            set_as_default: true,
            enable_cdi: false,
        };
        assert_eq!(
            drop_in("[crio.runtime]\n", &runtime),
            table(
                "[crio.runtime]\ndefault_runtime = \"nvidia\"\n\
                 [crio.runtime.runtimes.nvidia]\n\
                 runtime_path = \"/usr/bin/nvidia-container-runtime\"\nruntime_type = \"oci\"\n"
            )
        );
    }

    #[test]
    fn without_a_drop_in_the_main_config_is_changed_in_place() {
        let main = "# CRI-O\n[crio.runtime]\nconmon_cgroup = \"pod\"\n";
        let out = add_runtime(Path::new("/etc/crio/crio.conf"), Some(main), None, &TEST).unwrap();
        assert_eq!(out.path, Path::new("/etc/crio/crio.conf"));
        assert!(out.text.starts_with(main), "{}", out.text);
        assert_eq!(
            table(&out.text)["crio"]["runtime"]["runtimes"]["test"]["runtime_path"].as_str(),
            Some("/usr/bin/test")
        );
    }

    #[test]
    fn the_view_merges_drop_ins_in_name_order() {
        let (_dir, host) = crate::specs::engine_config::tests::host_with(&[
            (
                DEFAULT_CONFIG,
                "[crio.runtime]\ndefault_runtime = \"crun\"\nhooks_dir = [\"/a\"]\n",
            ),
            (
                "/etc/crio/crio.conf.d/99-nvidia.conf",
                "[crio.runtime.runtimes.nvidia]\nruntime_path = \"/usr/bin/nvidia-container-runtime\"\n",
            ),
            (
                "/etc/crio/crio.conf.d/10-hooks.conf",
                "[crio.runtime]\nhooks_dir = [\"/b\"]\n[crio.runtime.runtimes.crun]\nruntime_path = \"\"\n",
            ),
            ("/etc/crio/crio.conf.d/50-x.conf", "[crio.runtime\n"),
            ("/etc/crio/crio.conf.d/notes.txt", "[broken"),
        ]);
        let (config, errors) = Config::load(&host);
        let config = config.unwrap();
        assert_eq!(config.files.len(), 4);
        assert_eq!(config.hooks_dirs.as_deref(), Some(&["/b".to_string()][..]));
        assert_eq!(config.default.as_deref(), Some("crun"));
        assert_eq!(
            config.runtimes.into_iter().collect::<Vec<_>>(),
            [
                ("crun".to_string(), None),
                (
                    "nvidia".to_string(),
                    Some("/usr/bin/nvidia-container-runtime".to_string())
                )
            ]
        );
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].to_string().contains("50-x.conf does not parse"),
            "{}",
            errors[0]
        );
        let (_dir, empty) = crate::specs::engine_config::tests::host_with(&[]);
        assert!(Config::load(&empty).0.is_none());
    }
}

//! CRI-O: a drop-in in `crio.conf.d` (which CRI-O reads by itself) with
//! `[crio.runtime.runtimes.<name>]`: the settings of the main config's
//! default runtime, `runc` or `crun`, then `runtime_path` (our wrapper)
//! and `runtime_type = "oci"`, as NVIDIA's tool writes it; or, with
//! `--config-mode=oci-hook`, the hooks.d file that runs the prestart hook
//! for every container.

use std::path::Path;

use serde_json::json;
use toml_edit::DocumentMut;

use super::{
    fresh_copy, get_str, get_table, low_level_runtimes, parse_toml, set, table_at, Error, Output,
    Result, Runtime,
};

/// CRI-O's main configuration file.
pub const DEFAULT_CONFIG: &str = "/etc/crio/crio.conf";

/// The drop-in NVIDIA's tool writes.
pub const DEFAULT_DROP_IN: &str = "/etc/crio/crio.conf.d/99-nvidia.conf";

/// The prestart hook the hooks.d file runs unless told.
pub const DEFAULT_HOOK_PATH: &str = "/usr/bin/nvidia-container-runtime-hook";

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

/// The hooks.d file (`--config-mode=oci-hook`) that runs `hook prestart`
/// for every container, its PATH the standard directories and the hook's
/// own, as NVIDIA's tool writes it.
pub fn oci_hook(hook: &Path) -> Result<String> {
    let mut dirs: Vec<&str> = crate::program::system_dirs().collect();
    let dir = hook.parent().and_then(Path::to_str).unwrap_or("/");
    if !dirs.contains(&dir) {
        dirs.push(dir);
    }
    let name = hook
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let entry = json!({
        "version": "1.0.0",
        "hook": {
            "path": hook,
            "args": [name, "prestart"],
            "env": [format!("PATH={}", dirs.join(":"))],
        },
        "when": {"always": true, "commands": [".*"]},
        "stages": ["prestart"],
    });
    serde_json::to_string_pretty(&entry)
        .map(|s| s + "\n")
        .map_err(Error::Json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_config::tests::TEST;

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
    fn the_hook_file_is_nvidias() {
        let hook = oci_hook(Path::new("/usr/bin/nvidia-container-runtime-hook")).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&hook).unwrap();
        assert_eq!(
            parsed,
            json!({
                "version": "1.0.0",
                "hook": {
                    "path": "/usr/bin/nvidia-container-runtime-hook",
                    "args": ["nvidia-container-runtime-hook", "prestart"],
                    "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                },
                "when": {"always": true, "commands": [".*"]},
                "stages": ["prestart"],
            })
        );
        let elsewhere = oci_hook(Path::new("/opt/nvidia/hook")).unwrap();
        assert!(
            elsewhere.contains(
                "\"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/nvidia\""
            ),
            "{elsewhere}"
        );
    }
}

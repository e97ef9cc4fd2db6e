//! containerd's `config.toml`: the runtime goes into the CRI plugin's
//! runtimes, in the config's own version (1: `cri`; 2, containerd 1.x:
//! `io.containerd.grpc.v1.cri`; 3, containerd 2.x:
//! `io.containerd.cri.v1.runtime`), as the runc v2 shim running our
//! wrapper (`options.BinaryName`). Its settings are copied from the
//! config's default runtime, `runc` or `crun`, as NVIDIA's tool does, so
//! that `SystemdCgroup` and the like carry over. With a drop-in (version 2
//! and later), the runtime goes into that file alone and the main config
//! gains the `imports` line that loads it; comments and every other
//! setting of the main config stay as they were. What containerd makes of
//! its files, imports merged, is read by [`Config::load`].

mod load;

use std::path::Path;

use toml_edit::{value, DocumentMut, Item, Table};

pub use load::{Config, Handler};

use super::{
    fresh_copy, get_str, get_table, low_level_runtimes, parse_toml, set, table_at, Error, Output,
    Result, Runtime,
};

/// Where containerd reads its configuration unless told.
pub const DEFAULT_CONFIG: &str = "/etc/containerd/config.toml";

/// The drop-in NVIDIA's tool writes by default.
pub const DEFAULT_DROP_IN: &str = "/etc/containerd/conf.d/99-nvidia.toml";

/// The shim a new runtime runs under when there is none to copy.
const RUNC_V2: &str = "io.containerd.runc.v2";

/// The version of a config that has nothing in it yet (containerd 1.6 and later).
const DEFAULT_VERSION: i64 = 2;

/// The files to write so that containerd (its config at `config`, now
/// `text`, `None` when missing) runs `runtime`: the drop-in (when one is
/// given and the config's version has drop-ins) and then the main config,
/// if it changes.
pub fn add_runtime(
    config: &Path,
    text: Option<&str>,
    drop_in: Option<&Path>,
    runtime: &Runtime,
) -> Result<Vec<Output>> {
    let mut main = parse_toml(config, text)?;
    let version = version_of(&main, config)?;
    let plugin = plugin_name(version);
    let source = source_runtime(&main, plugin);
    let drop_in = match drop_in {
        Some(path) if version == 1 => {
            log::warn!(
                "{}: version 1 configs have no drop-ins: changing it instead of writing {}",
                config.display(),
                path.display()
            );
            None
        }
        other => other,
    };
    let Some(drop_in) = drop_in else {
        add_to(&mut main, config, version, source, runtime)?;
        return Ok(vec![Output {
            path: config.to_path_buf(),
            text: main.to_string(),
        }]);
    };
    let mut nvidia = drop_in_base(&main, plugin, runtime.set_as_default);
    add_to(&mut nvidia, drop_in, version, source, runtime)?;
    let mut outputs = vec![Output {
        path: drop_in.to_path_buf(),
        text: nvidia.to_string(),
    }];
    if ensure_import(&mut main, config, version, &import_pattern(drop_in))? {
        outputs.push(Output {
            path: config.to_path_buf(),
            text: main.to_string(),
        });
    }
    Ok(outputs)
}

/// What a drop-in starts from. containerd merges an imported file by whole
/// plugin sections, not keys (its issue 5837): a drop-in's CRI section
/// replaces the main config's, and a `runtimes` table there replaces the
/// built-in list. So the drop-in carries a copy of the main config's CRI
/// section, and the default runtime (`runc` unless the config names
/// another; ours when `ours_default`) stays listed; without them
/// containerd 1.7 refuses to load the CRI plugin ("no corresponding
/// runtime configured").
fn drop_in_base(main: &DocumentMut, plugin: &str, ours_default: bool) -> DocumentMut {
    let mut doc = DocumentMut::new();
    let mut section = get_table(main.as_table(), &["plugins", plugin])
        .map(fresh_copy)
        .unwrap_or_default();
    let default = get_str(
        main.as_table(),
        &["plugins", plugin, "containerd", "default_runtime_name"],
    )
    .unwrap_or("runc")
    .to_string();
    let listed = get_table(&section, &["containerd", "runtimes"])
        .is_some_and(|runtimes| runtimes.contains_key(&default));
    if !listed && !ours_default {
        let mut runc = Table::new();
        runc.insert("runtime_type", value(RUNC_V2));
        let containerd = section
            .entry("containerd")
            .or_insert_with(|| Item::Table(Table::new()));
        if let Some(containerd) = containerd.as_table_like_mut() {
            let runtimes = containerd
                .entry("runtimes")
                .or_insert(Item::Table(Table::new()));
            if let Some(runtimes) = runtimes.as_table_like_mut() {
                runtimes.insert(&default, Item::Table(runc));
            }
        }
    }
    let mut plugins = Table::new();
    plugins.insert(plugin, Item::Table(section));
    let mut plugins = Item::Table(plugins);
    imply_parents(&mut plugins);
    doc.insert("plugins", plugins);
    doc
}

/// Marks every table holding only tables implicit, so a copy prints no
/// empty `[a]`, `[a.b]` headers above the tables that hold settings.
fn imply_parents(item: &mut Item) {
    if let Some(table) = item.as_table_mut() {
        let only_tables = table.iter().all(|(_, i)| i.is_table());
        if !table.is_empty() && only_tables {
            table.set_implicit(true);
        }
        for (_, child) in table.iter_mut() {
            imply_parents(child);
        }
    }
}

/// The config's version, as containerd reads it: none in a config with
/// settings is 1; an empty config is made a version 2 one.
fn version_of(doc: &DocumentMut, path: &Path) -> Result<i64> {
    match doc.get("version") {
        None if doc.as_table().is_empty() => Ok(DEFAULT_VERSION),
        None => Ok(1),
        Some(item) => match item.as_integer() {
            Some(version @ 1..=3) => Ok(version),
            _ => Err(Error::Version {
                path: path.to_path_buf(),
                version: item.to_string().trim().to_string(),
            }),
        },
    }
}

/// The CRI plugin's name in a config of `version` (below 1 read as 1),
/// the section that holds `containerd.runtimes` and `enable_cdi`.
fn plugin_name(version: i64) -> &'static str {
    match version {
        ..=1 => "cri",
        2 => "io.containerd.grpc.v1.cri",
        _ => "io.containerd.cri.v1.runtime",
    }
}

/// A copy of the runtime whose settings a new one takes, if the config has one.
fn source_runtime(doc: &DocumentMut, plugin: &str) -> Option<Table> {
    let containerd = ["plugins", plugin, "containerd"];
    let default = get_str(
        doc.as_table(),
        &["plugins", plugin, "containerd", "default_runtime_name"],
    );
    let runtimes = get_table(doc.as_table(), &containerd)?
        .get("runtimes")?
        .as_table_like()?;
    low_level_runtimes(default)
        .into_iter()
        .find_map(|name| runtimes.get(name)?.as_table_like())
        .map(fresh_copy)
}

/// Registers `runtime` in `doc` (the file at `path`), its settings from
/// `source` when there is one.
fn add_to(
    doc: &mut DocumentMut,
    path: &Path,
    version: i64,
    source: Option<Table>,
    runtime: &Runtime,
) -> Result<()> {
    if !doc.contains_key("version") {
        doc.insert("version", value(version));
    }
    let plugin = plugin_name(version);
    let runtimes = table_at(
        doc.as_table_mut(),
        &["plugins", plugin, "containerd", "runtimes"],
        path,
    )?;
    match source {
        Some(copy) => {
            runtimes.insert(runtime.name, Item::Table(copy));
        }
        None if runtimes.get(runtime.name).is_none() => {
            let mut new = Table::new();
            new.insert("privileged_without_host_devices", value(false));
            new.insert("runtime_engine", value(""));
            new.insert("runtime_root", value(""));
            new.insert("runtime_type", value(RUNC_V2));
            runtimes.insert(runtime.name, Item::Table(new));
        }
        None => {}
    }
    let keys = ["plugins", plugin, "containerd", "runtimes", runtime.name];
    let options = table_at(
        doc.as_table_mut(),
        &[&keys[..], &["options"]].concat(),
        path,
    )?;
    set(options, "BinaryName", runtime.path);
    if version == 1 {
        set(options, "Runtime", runtime.path);
    }
    if runtime.set_as_default {
        let containerd = table_at(doc.as_table_mut(), &keys[..3], path)?;
        set(containerd, "default_runtime_name", runtime.name);
    }
    if runtime.enable_cdi {
        set(
            table_at(doc.as_table_mut(), &keys[..2], path)?,
            "enable_cdi",
            true,
        );
    }
    Ok(())
}

/// What the main config imports to load every drop-in beside `drop_in`.
fn import_pattern(drop_in: &Path) -> String {
    let dir = drop_in.parent().unwrap_or(Path::new("/"));
    format!("{}/*.toml", dir.display())
}

/// Adds `pattern` to the main config's `imports` (and a `version` to a
/// config that has nothing else); whether the config changed.
fn ensure_import(doc: &mut DocumentMut, path: &Path, version: i64, pattern: &str) -> Result<bool> {
    let empty = doc.as_table().is_empty();
    match doc.get_mut("imports") {
        None => {
            if empty {
                doc.insert("version", value(version));
            }
            let mut imports = toml_edit::Array::new();
            imports.push(pattern);
            doc.insert("imports", value(imports));
            Ok(true)
        }
        Some(item) => match item.as_array_mut() {
            Some(imports) if imports.iter().any(|i| i.as_str() == Some(pattern)) => Ok(false),
            Some(imports) => {
                imports.push(pattern);
                Ok(true)
            }
            None => Err(Error::Shape {
                path: path.to_path_buf(),
                key: "imports".into(),
                found: super::toml_kind(item),
                expected: "an array",
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::specs::engine_config::tests::TEST;

    /// `text` with `runtime` added to the main config itself.
    fn in_place(text: &str, runtime: &Runtime) -> toml::Table {
        let out = add_runtime(Path::new("/c.toml"), Some(text), None, runtime).unwrap();
        assert_eq!(out.len(), 1);
        toml::from_str(&out[0].text).unwrap()
    }

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    // NVIDIA's TestAddRuntime (engine/containerd/config_test.go), version 1.
    #[test]
    fn version_1_takes_the_defaults_or_the_runc_or_default_runtime() {
        let cases = [
            (
                "version = 1",
                r#"version = 1
                [plugins."cri".containerd.runtimes.test]
                privileged_without_host_devices = false
                runtime_engine = ""
                runtime_root = ""
                runtime_type = "io.containerd.runc.v2"
                [plugins."cri".containerd.runtimes.test.options]
                BinaryName = "/usr/bin/test"
                Runtime = "/usr/bin/test""#,
            ),
            (
                r#"version = 1
                [plugins."cri".containerd.runtimes.runc]
                privileged_without_host_devices = true
                runtime_engine = "engine"
                runtime_root = "root"
                runtime_type = "type"
                [plugins."cri".containerd.runtimes.runc.options]
                BinaryName = "/usr/bin/runc"
                SystemdCgroup = true"#,
                r#"version = 1
                [plugins."cri".containerd.runtimes.runc]
                privileged_without_host_devices = true
                runtime_engine = "engine"
                runtime_root = "root"
                runtime_type = "type"
                [plugins."cri".containerd.runtimes.runc.options]
                BinaryName = "/usr/bin/runc"
                SystemdCgroup = true
                [plugins."cri".containerd.runtimes.test]
                privileged_without_host_devices = true
                runtime_engine = "engine"
                runtime_root = "root"
                runtime_type = "type"
                [plugins."cri".containerd.runtimes.test.options]
                BinaryName = "/usr/bin/test"
                Runtime = "/usr/bin/test"
                SystemdCgroup = true"#,
            ),
            (
                r#"version = 1
                [plugins."cri".containerd]
                default_runtime_name = "default"
                [plugins."cri".containerd.runtimes.runc]
                runtime_type = "type"
                [plugins."cri".containerd.runtimes.runc.options]
                SystemdCgroup = true
                [plugins."cri".containerd.runtimes.default]
                privileged_without_host_devices = false
                runtime_type = "defaulttype"
                [plugins."cri".containerd.runtimes.default.options]
                BinaryName = "/usr/bin/default"
                SystemdCgroup = false"#,
                r#"version = 1
                [plugins."cri".containerd]
                default_runtime_name = "default"
                [plugins."cri".containerd.runtimes.runc]
                runtime_type = "type"
                [plugins."cri".containerd.runtimes.runc.options]
                SystemdCgroup = true
                [plugins."cri".containerd.runtimes.default]
                privileged_without_host_devices = false
                runtime_type = "defaulttype"
                [plugins."cri".containerd.runtimes.default.options]
                BinaryName = "/usr/bin/default"
                SystemdCgroup = false
                [plugins."cri".containerd.runtimes.test]
                privileged_without_host_devices = false
                runtime_type = "defaulttype"
                [plugins."cri".containerd.runtimes.test.options]
                BinaryName = "/usr/bin/test"
                Runtime = "/usr/bin/test"
                SystemdCgroup = false"#,
            ),
        ];
        for (config, expected) in cases {
            assert_eq!(in_place(config, &TEST), table(expected), "{config}");
        }
    }

    // NVIDIA's TestAddRuntimeWithDropIn, TestDropInIntegration and TestEnsureImports.
    #[test]
    fn a_drop_in_gets_the_runtime_and_the_main_config_the_import() {
        for (version, plugin) in [
            (2, "io.containerd.grpc.v1.cri"),
            (3, "io.containerd.cri.v1.runtime"),
        ] {
            let main = format!("version = {version}\n");
            let runtime = Runtime {
                name: "nvidia",
                path: "/usr/bin/nvidia-container-runtime",
                set_as_default: true,
                enable_cdi: true,
            };
            let out = add_runtime(
                Path::new("/etc/containerd/config.toml"),
                Some(&main),
                Some(Path::new("/etc/containerd/conf.d/99-nvidia.toml")),
                &runtime,
            )
            .unwrap();
            assert_eq!(out.len(), 2);
            assert_eq!(
                out[0].path,
                Path::new("/etc/containerd/conf.d/99-nvidia.toml")
            );
            assert_eq!(
                table(&out[0].text),
                table(&format!(
                    r#"version = {version}
                    [plugins."{plugin}"]
                    enable_cdi = true
                    [plugins."{plugin}".containerd]
                    default_runtime_name = "nvidia"
                    [plugins."{plugin}".containerd.runtimes.nvidia]
                    privileged_without_host_devices = false
                    runtime_engine = ""
                    runtime_root = ""
                    runtime_type = "io.containerd.runc.v2"
                    [plugins."{plugin}".containerd.runtimes.nvidia.options]
                    BinaryName = "/usr/bin/nvidia-container-runtime""#
                ))
            );
            assert_eq!(out[1].path, Path::new("/etc/containerd/config.toml"));
            assert_eq!(
                out[1].text,
                format!("version = {version}\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n")
            );
        }
    }

    #[test]
    fn imports_are_appended_once() {
        let drop_in = Some(Path::new("/another/path/file.toml"));
        let cases = [
            (
                "",
                Some("version = 2\nimports = [\"/another/path/*.toml\"]\n"),
            ),
            (
                "version = 2\nimports = [\"/foo/bar/*.toml\"]\n",
                Some("version = 2\nimports = [\"/foo/bar/*.toml\", \"/another/path/*.toml\"]\n"),
            ),
            ("version = 2\nimports = [\"/another/path/*.toml\"]\n", None),
        ];
        for (main, expected) in cases {
            let out = add_runtime(Path::new("/c.toml"), Some(main), drop_in, &TEST).unwrap();
            assert_eq!(out.get(1).map(|o| o.text.as_str()), expected, "{main}");
        }
    }

    #[test]
    fn a_missing_config_becomes_version_2_with_the_import() {
        let out = add_runtime(
            Path::new("/c.toml"),
            None,
            Some(Path::new("/etc/containerd/conf.d/99-nvidia.toml")),
            &TEST,
        )
        .unwrap();
        assert!(out[0].text.starts_with("version = 2\n"), "{}", out[0].text);
        assert_eq!(
            out[1].text,
            "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n"
        );
    }

    // containerd replaces whole plugin sections on import (issue 5837):
    // seen with containerd 1.7 refusing a drop-in that lacked runc.
    #[test]
    fn the_drop_in_keeps_the_main_configs_cri_section_and_its_default_runtime() {
        let main =
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"pause:3\"\n";
        let out = add_runtime(
            Path::new("/c.toml"),
            Some(main),
            Some(Path::new("/d/99-nvidia.toml")),
            &TEST,
        )
        .unwrap();
        let drop_in = table(&out[0].text);
        let cri = &drop_in["plugins"]["io.containerd.grpc.v1.cri"];
        assert_eq!(
            cri["sandbox_image"].as_str(),
            Some("pause:3"),
            "{drop_in:?}"
        );
        let runtimes = &cri["containerd"]["runtimes"];
        assert_eq!(
            runtimes["runc"]["runtime_type"].as_str(),
            Some("io.containerd.runc.v2")
        );
        assert!(runtimes.get("test").is_some(), "{drop_in:?}");
    }

    #[test]
    fn the_drop_in_copies_the_main_configs_runc() {
        let main = r#"version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true # the host's cgroup driver
"#;
        let out = add_runtime(
            Path::new("/c.toml"),
            Some(main),
            Some(Path::new("/d/99-nvidia.toml")),
            &TEST,
        )
        .unwrap();
        assert_eq!(
            out[0].text,
            "version = 2\n\n\
             [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n\
             runtime_type = \"io.containerd.runc.v2\"\n\n\
             [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n\
             SystemdCgroup = true\n\n\
             [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.test]\n\
             runtime_type = \"io.containerd.runc.v2\"\n\n\
             [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.test.options]\n\
             SystemdCgroup = true\n\
             BinaryName = \"/usr/bin/test\"\n"
        );
        assert_eq!(
            out[1].text,
            main.replacen(
                "version = 2\n",
                "version = 2\nimports = [\"/d/*.toml\"]\n",
                1
            )
        );
    }

    #[test]
    fn comments_and_other_settings_stay_in_the_main_config() {
        let main = "# managed by hand\nversion = 2\nroot = \"/var/lib/containerd\" # keep\n\n\
                    [plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"pause:3.6\"\n";
        let runtime = Runtime {
            set_as_default: true,
            ..TEST
        };
        let out = add_runtime(Path::new("/c.toml"), Some(main), None, &runtime).unwrap();
        let text = &out[0].text;
        assert!(
            text.starts_with(
                "# managed by hand\nversion = 2\nroot = \"/var/lib/containerd\" # keep\n"
            ),
            "{text}"
        );
        assert!(text.contains("  sandbox_image = \"pause:3.6\"\n"), "{text}");
        let parsed = table(text);
        let cri = &parsed["plugins"]["io.containerd.grpc.v1.cri"];
        assert_eq!(
            cri["containerd"]["default_runtime_name"].as_str(),
            Some("test")
        );
        assert_eq!(
            cri["containerd"]["runtimes"]["test"]["options"]["BinaryName"].as_str(),
            Some("/usr/bin/test")
        );
    }

    #[test]
    fn a_config_without_a_version_is_version_1() {
        let parsed = in_place("root = \"/r\"\n", &TEST);
        assert_eq!(parsed["version"].as_integer(), Some(1));
        assert!(parsed["plugins"]["cri"]["containerd"]["runtimes"]["test"].is_table());
    }

    #[test]
    fn unknown_versions_and_broken_files_are_refused() {
        for (text, message) in [
            (
                "version = 4\n",
                "/c.toml: containerd config version 4 is not 1, 2 or 3; left untouched",
            ),
            (
                "version = \"2\"\n",
                "/c.toml: containerd config version \"2\" is not 1, 2 or 3; left untouched",
            ),
            (
                "version = 2\n[plugins\n",
                "/c.toml:2: not valid TOML (unclosed table, expected `]`); left untouched",
            ),
            (
                "version = 2\nimports = \"x\"\n",
                "/c.toml: imports is a string, not an array; left untouched",
            ),
        ] {
            let err = add_runtime(
                Path::new("/c.toml"),
                Some(text),
                Some(Path::new("/d/x.toml")),
                &TEST,
            )
            .unwrap_err();
            assert_eq!(err.to_string(), message, "{text}");
        }
    }
}

//! containerd's `config.toml`: the runtime goes into the CRI plugin's
//! runtimes, in the config's own version (1: `cri`; 2, containerd 1.x:
//! `io.containerd.grpc.v1.cri`; 3, containerd 2.x:
//! `io.containerd.cri.v1.runtime`), as the runc v2 shim running our
//! wrapper (`options.BinaryName`). Its settings are copied from the
//! config's default runtime, `runc` or `crun`, as NVIDIA's tool does, so
//! that `SystemdCgroup` and the like carry over; a copy without a
//! `runtime_type` gets the runc v2 shim's (containerd 2.x fails every pod
//! of a handler without one: "container.Runtime.Name must be set").
//!
//! With a drop-in (version 2 and later), the runtime goes into that file
//! and the main config gains the `imports` line that loads it; comments
//! and every other setting of the main config stay as they were. What the
//! drop-in holds follows how the version merges it: version 2 (containerd
//! 1.x) replaces whole plugin sections, so its drop-in carries a copy of
//! the main config's CRI section; version 3 (containerd 2.x) merges key by
//! key, so its drop-in holds our runtime alone (and `default_runtime_name`
//! and `enable_cdi` when asked), and later edits to the main config still
//! apply. The settings and, for a config that has none, the version may
//! come from `containerd config dump` ([`Dump`], `--config-source=command`).
//! What containerd makes of its files, imports merged, is read by
//! [`Config::load`].

mod dump;
mod load;

use std::path::Path;

use toml_edit::{value, DocumentMut, Item, Table, TableLike};

pub use dump::{dump, Dump};
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
/// if it changes. With `dump`, the runtime's settings are copied from
/// containerd's effective config, whose version also stands for a main
/// config that states none.
pub fn add_runtime(
    config: &Path,
    text: Option<&str>,
    dump: Option<&Dump>,
    drop_in: Option<&Path>,
    runtime: &Runtime,
) -> Result<Vec<Output>> {
    let mut main = parse_toml(config, text)?;
    let (version, source) = match dump {
        None => {
            let version = version_of(&main, config)?;
            (version, source_runtime(&main, plugin_name(version)))
        }
        Some(dump) => {
            let effective = parse_toml(Path::new(&dump.command), Some(&dump.text))?;
            let dumped = version_of(&effective, Path::new(&dump.command))?;
            let version = match main.get("version") {
                None if main.as_table().is_empty() => dumped,
                _ => version_of(&main, config)?,
            };
            if version != dumped {
                log::warn!(
                    "{} is version {version} but `{}` is version {dumped}: the runtime's settings \
                     are copied from the dump",
                    config.display(),
                    dump.command
                );
            }
            (version, source_runtime(&effective, plugin_name(dumped)))
        }
    };
    let plugin = plugin_name(version);
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
    let mut nvidia = if version >= 3 {
        DocumentMut::new()
    } else {
        drop_in_base(&main, plugin, runtime.set_as_default)
    };
    add_to(&mut nvidia, drop_in, version, source, runtime)?;
    let mut outputs = vec![Output {
        path: drop_in.to_path_buf(),
        text: nvidia.to_string(),
    }];
    // Keys of the main config outlive a version 3 drop-in: ours as the
    // default goes from there too.
    let unset = version >= 3
        && !runtime.set_as_default
        && unset_default(&mut main, plugin, config, runtime.name);
    if ensure_import(&mut main, config, version, &import_pattern(drop_in))? || unset {
        outputs.push(Output {
            path: config.to_path_buf(),
            text: main.to_string(),
        });
    }
    Ok(outputs)
}

/// What a version 2 drop-in starts from. containerd 1.x merges an
/// imported file by whole plugin sections, not keys (its issue 5837): a
/// drop-in's CRI section replaces the main config's, and a `runtimes`
/// table there replaces the built-in list. So the drop-in carries a copy
/// of the main config's CRI section, and the default runtime (`runc`
/// unless the config names another; ours when `ours_default`) stays
/// listed; without them containerd 1.7 refuses to load the CRI plugin ("no
/// corresponding runtime configured").
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
    let mut copy = low_level_runtimes(default)
        .into_iter()
        .find_map(|name| runtimes.get(name)?.as_table_like())
        .map(fresh_copy)?;
    // NVIDIA 1.20 (their issue 1956): containerd 2.x names no shim for a
    // runtime without one, and every pod of it fails.
    if copy
        .get("runtime_type")
        .and_then(Item::as_str)
        .is_none_or(str::is_empty)
    {
        copy.insert("runtime_type", value(RUNC_V2));
    }
    Some(copy)
}

/// Removes `default_runtime_name` from `doc` (the file at `path`) when it
/// names `name`, as NVIDIA's tool does since 1.18 for a runtime not asked
/// to be the default; whether it did.
fn unset_default(doc: &mut DocumentMut, plugin: &str, path: &Path, name: &str) -> bool {
    let keys = ["plugins", plugin, "containerd", "default_runtime_name"];
    if get_str(doc.as_table(), &keys) != Some(name) {
        return false;
    }
    let removed = ["plugins", plugin, "containerd"]
        .iter()
        .try_fold(doc.as_table_mut() as &mut dyn TableLike, |table, key| {
            table.get_mut(key)?.as_table_like_mut()
        })
        .and_then(|containerd| containerd.remove("default_runtime_name"))
        .is_some();
    if removed {
        log::info!(
            "{}: {name} is no longer containerd's default runtime (--nvidia-set-as-default=false)",
            path.display()
        );
    }
    removed
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
    } else {
        unset_default(doc, plugin, path, runtime.name);
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
        let out = add_runtime(Path::new("/c.toml"), Some(text), None, None, runtime).unwrap();
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
                None,
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
            let out = add_runtime(Path::new("/c.toml"), Some(main), None, drop_in, &TEST).unwrap();
            assert_eq!(out.get(1).map(|o| o.text.as_str()), expected, "{main}");
        }
    }

    #[test]
    fn a_missing_config_becomes_version_2_with_the_import() {
        let out = add_runtime(
            Path::new("/c.toml"),
            None,
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
            None,
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
            None,
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
        let out = add_runtime(Path::new("/c.toml"), Some(main), None, None, &runtime).unwrap();
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
                None,
                Some(Path::new("/d/x.toml")),
                &TEST,
            )
            .unwrap_err();
            assert_eq!(err.to_string(), message, "{text}");
        }
    }

    /// `main` with `runtime` added through the drop-in `/d/99-nvidia.toml`
    /// (and `dump` as the effective config): the drop-in and, when it
    /// changed, the main config.
    fn with_drop_in(main: &str, dump: Option<&str>, runtime: &Runtime) -> (String, Option<String>) {
        let dump = dump.map(|text| Dump {
            command: "containerd --config /c.toml config dump".into(),
            text: text.into(),
        });
        let out = add_runtime(
            Path::new("/c.toml"),
            Some(main),
            dump.as_ref(),
            Some(Path::new("/d/99-nvidia.toml")),
            runtime,
        )
        .unwrap();
        (out[0].text.clone(), out.get(1).map(|o| o.text.clone()))
    }

    // NVIDIA v1.20 (their issue 1956), seen with their nvidia-ctk 1.20
    // side by side: a copied runc without `runtime_type` gives ours the
    // runc v2 shim's, where containerd 2.x would name none.
    #[test]
    fn a_copied_runtime_without_a_runtime_type_gets_the_runc_v2_shim() {
        for (version, plugin) in [
            (2, "io.containerd.grpc.v1.cri"),
            (3, "io.containerd.cri.v1.runtime"),
        ] {
            for runc in ["", "runtime_type = \"\"\n"] {
                let main = format!(
                    "version = {version}\n[plugins.\"{plugin}\".containerd.runtimes.runc]\n{runc}\
                     [plugins.\"{plugin}\".containerd.runtimes.runc.options]\nSystemdCgroup = true\n"
                );
                let parsed = in_place(&main, &TEST);
                let runtimes = &parsed["plugins"][plugin]["containerd"]["runtimes"];
                assert_eq!(
                    runtimes["test"]["runtime_type"].as_str(),
                    Some("io.containerd.runc.v2"),
                    "{main}"
                );
                assert_eq!(
                    runtimes["test"]["options"]["SystemdCgroup"].as_bool(),
                    Some(true)
                );
                // The administrator's runc itself is left as it is.
                assert_eq!(
                    runtimes["runc"]
                        .get("runtime_type")
                        .and_then(|t| t.as_str()),
                    (!runc.is_empty()).then_some(""),
                    "{main}"
                );
                let (drop_in, _) = with_drop_in(&main, None, &TEST);
                let drop_in = table(&drop_in);
                assert_eq!(
                    drop_in["plugins"][plugin]["containerd"]["runtimes"]["test"]["runtime_type"]
                        .as_str(),
                    Some("io.containerd.runc.v2")
                );
            }
        }
        // A runtime_type of the administrator's own is kept (NVIDIA's
        // TestAddRuntime "options from runc are imported").
        let parsed = in_place(
            "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc]\n\
             runtime_type = \"io.containerd.runsc.v1\"\n",
            &TEST,
        );
        assert_eq!(
            parsed["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["test"]
                ["runtime_type"]
                .as_str(),
            Some("io.containerd.runsc.v1")
        );
    }

    // NVIDIA's TestAddRuntimeWithDropIn ("v3 config creates drop-in
    // configuration": the main tree unchanged, the drop-in holding the
    // runtime) and TestConfig_EnableCDI (enable_cdi in the drop-in only).
    // containerd 2.x merges imports key by key: a copy of the main
    // config's section there would override the administrator's later
    // edits to it.
    #[test]
    fn a_version_3_drop_in_holds_our_runtime_alone() {
        let main = r#"version = 3
imports = []
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "registry.k8s.io/pause:3.10"
[plugins."io.containerd.cri.v1.runtime"]
  enable_cdi = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = true
"#;
        let (drop_in, changed) = with_drop_in(main, None, &TEST);
        assert_eq!(
            drop_in,
            "version = 3\n\n\
             [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.test]\n\
             runtime_type = \"io.containerd.runc.v2\"\n\n\
             [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.test.options]\n\
             SystemdCgroup = true\n\
             BinaryName = \"/usr/bin/test\"\n"
        );
        assert_eq!(
            changed.as_deref(),
            Some(
                main.replace("imports = []", "imports = [\"/d/*.toml\"]")
                    .as_str()
            )
        );
        let asked = Runtime {
            set_as_default: true,
            enable_cdi: true,
            ..TEST
        };
        let (drop_in, _) = with_drop_in(main, None, &asked);
        let cri = &table(&drop_in)["plugins"]["io.containerd.cri.v1.runtime"];
        assert_eq!(cri["enable_cdi"].as_bool(), Some(true));
        assert_eq!(
            cri["containerd"]["default_runtime_name"].as_str(),
            Some("test")
        );
        let keys: Vec<&String> = cri["containerd"]["runtimes"]
            .as_table()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(keys, ["test"], "{drop_in}");
    }

    // NVIDIA's RemoveRuntime (engine/containerd/config.go) drops a
    // default_runtime_name naming the runtime; since 1.18 configure does
    // so for a runtime not asked to be the default.
    #[test]
    fn ours_as_the_default_is_removed_unless_asked_for() {
        let v2 = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n\
                  default_runtime_name = \"test\"\n";
        let parsed = in_place(v2, &TEST);
        let containerd = &parsed["plugins"]["io.containerd.grpc.v1.cri"]["containerd"];
        assert!(
            containerd.get("default_runtime_name").is_none(),
            "{parsed:?}"
        );
        // In a version 2 drop-in's copy of the section (which replaces the
        // main config's), runc stays listed as the built-in default.
        let (drop_in, _) = with_drop_in(v2, None, &TEST);
        let containerd = &table(&drop_in)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"];
        assert!(
            containerd.get("default_runtime_name").is_none(),
            "{drop_in}"
        );
        // Version 3: the main config's key would outlive the drop-in, so it
        // goes from there; the rest of the main config stays.
        let v3 = "version = 3\n# ours\n[plugins.\"io.containerd.cri.v1.runtime\".containerd]\n\
                  default_runtime_name = \"test\" # set by hand\nsnapshotter = \"overlayfs\"\n";
        let (drop_in, main) = with_drop_in(v3, None, &TEST);
        assert!(!drop_in.contains("default_runtime_name"), "{drop_in}");
        assert_eq!(
            main.as_deref(),
            Some(
                "version = 3\nimports = [\"/d/*.toml\"]\n# ours\n\
                 [plugins.\"io.containerd.cri.v1.runtime\".containerd]\nsnapshotter = \"overlayfs\"\n"
            )
        );
        // Another runtime as the default, or ours when asked, stays.
        let other = v3.replace("\"test\"", "\"crun\"");
        let (_, main) = with_drop_in(&other, None, &TEST);
        assert!(main.unwrap().contains("default_runtime_name = \"crun\""));
        let asked = Runtime {
            set_as_default: true,
            ..TEST
        };
        let parsed = in_place(&v3.replace("\"test\"", "\"runc\""), &asked);
        assert_eq!(
            parsed["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["default_runtime_name"]
                .as_str(),
            Some("test")
        );
    }

    // --config-source=command: the settings come from what `containerd
    // config dump` prints (its built-in runc included), and its version
    // stands for a main config that has none; the files are written as
    // with a file source.
    #[test]
    fn the_dump_gives_the_settings_and_the_version_of_an_empty_config() {
        let dump = r#"version = 3
root = '/var/lib/containerd'
[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'runc'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    sandboxer = 'podsandbox'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = ''
      SystemdCgroup = true
"#;
        let (drop_in, main) = with_drop_in("", Some(dump), &TEST);
        let parsed = table(&drop_in);
        assert_eq!(parsed["version"].as_integer(), Some(3));
        let test =
            &parsed["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["test"];
        assert_eq!(test["sandboxer"].as_str(), Some("podsandbox"));
        assert_eq!(test["options"]["SystemdCgroup"].as_bool(), Some(true));
        assert_eq!(
            test["options"]["BinaryName"].as_str(),
            Some("/usr/bin/test")
        );
        assert_eq!(
            main.as_deref(),
            Some("version = 3\nimports = [\"/d/*.toml\"]\n")
        );
        // A main config with a version keeps it; the settings still come
        // from the dump.
        let (drop_in, _) = with_drop_in("version = 2\n", Some(dump), &TEST);
        let parsed = table(&drop_in);
        assert_eq!(parsed["version"].as_integer(), Some(2));
        assert_eq!(
            parsed["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["test"]
                ["options"]["SystemdCgroup"]
                .as_bool(),
            Some(true)
        );
        // A dump that is not TOML is refused by its command.
        let err = add_runtime(
            Path::new("/c.toml"),
            None,
            Some(&Dump {
                command: "containerd config dump".into(),
                text: "[plugins\n".into(),
            }),
            None,
            &TEST,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("containerd config dump:1: not valid TOML"),
            "{err}"
        );
    }
}

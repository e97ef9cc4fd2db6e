//! Docker's `daemon.json`. Read ([`Daemon`]): its `runtimes`,
//! `default-runtime` and `features.cdi`. Edited ([`add_runtime`]):
//! `runtimes.<name>` = `{"args": [], "path": …}`, `default-runtime` when
//! asked, `features.cdi` with CDI; every other key kept, in its order.
//! Written with four-space indents, as NVIDIA's tool writes it.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

use super::{Error, HostRoot, Result, Runtime};

/// Where dockerd reads its configuration unless told (`--config-file`).
pub const DEFAULT_CONFIG: &str = "/etc/docker/daemon.json";

/// One of `daemon.json`'s `runtimes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonRuntime {
    /// Its name (`docker run --runtime NAME`).
    pub name: String,
    /// Its `path`, when that is a string: a program dockerd finds on its `PATH`, or absolute.
    pub path: Option<String>,
}

/// What `daemon.json` says that concerns GPUs, so that doctor can judge it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Daemon {
    /// The file read.
    pub file: PathBuf,
    /// Its `runtimes`, in the file's order.
    pub runtimes: Vec<DaemonRuntime>,
    /// `default-runtime`, when set.
    pub default_runtime: Option<String>,
    /// `features.cdi`, when set.
    pub cdi: Option<bool>,
}

impl Daemon {
    /// `daemon.json` under `host`, as dockerd reads it; `None` when there
    /// is none (or it cannot be read), an error when it is not JSON.
    pub fn load(host: &HostRoot) -> Option<Result<Daemon>> {
        let file = host.path(DEFAULT_CONFIG);
        let data = std::fs::read(&file).ok()?;
        Some(Daemon::parse(file, &data))
    }

    /// The view of `data`, the text of `file`.
    fn parse(file: PathBuf, data: &[u8]) -> Result<Daemon> {
        let json: Value = match serde_json::from_slice(data) {
            Ok(json) => json,
            Err(source) => return Err(Error::NotJson { path: file, source }),
        };
        let runtimes = json
            .get("runtimes")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(name, runtime)| DaemonRuntime {
                name: name.clone(),
                path: runtime
                    .get("path")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            })
            .collect();
        Ok(Daemon {
            runtimes,
            default_runtime: json
                .get("default-runtime")
                .and_then(Value::as_str)
                .map(str::to_string),
            cdi: json
                .get("features")
                .and_then(|f| f.get("cdi"))
                .and_then(Value::as_bool),
            file,
        })
    }
}

/// The new text of `daemon.json` (now `text`, `None` when missing) with
/// `runtime` registered.
pub fn add_runtime(path: &Path, text: Option<&str>, runtime: &Runtime) -> Result<String> {
    let mut config = parse(path, text)?;
    let runtimes = object_at(&mut config, "runtimes", path)?;
    let mut entry = Map::new();
    entry.insert("args".into(), Value::Array(Vec::new()));
    entry.insert("path".into(), Value::String(runtime.path.into()));
    runtimes.insert(runtime.name.into(), Value::Object(entry));
    if runtime.set_as_default {
        config.insert("default-runtime".into(), Value::String(runtime.name.into()));
    }
    if runtime.enable_cdi {
        object_at(&mut config, "features", path)?.insert("cdi".into(), Value::Bool(true));
    }
    encode(&config)
}

/// `text` as a JSON object; a missing or empty file is an empty one.
fn parse(path: &Path, text: Option<&str>) -> Result<Map<String, Value>> {
    let text = text.unwrap_or_default();
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    let value: Value = serde_json::from_str(text).map_err(|e| Error::Parse {
        path: path.to_path_buf(),
        line: e.line(),
        format: "JSON",
        reason: without_position(&e.to_string()),
    })?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(Error::Shape {
            path: path.to_path_buf(),
            key: "the whole file".into(),
            found: kind(&other),
            expected: "an object",
        }),
    }
}

/// serde_json's message without its trailing ` at line L column C`: the
/// line is already in the error.
fn without_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message.to_string(),
    }
}

/// The object under `key`, made when missing or `null`.
fn object_at<'a>(
    config: &'a mut Map<String, Value>,
    key: &str,
    path: &Path,
) -> Result<&'a mut Map<String, Value>> {
    let slot = config.entry(key).or_insert(Value::Null);
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    let found = kind(slot);
    slot.as_object_mut().ok_or_else(|| Error::Shape {
        path: path.to_path_buf(),
        key: key.into(),
        found,
        expected: "an object",
    })
}

/// What kind of JSON value `value` is, for a refusal.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `config`, pretty-printed with four-space indents and a final newline.
fn encode(config: &Map<String, Value>) -> Result<String> {
    let mut text = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(
        &mut text,
        serde_json::ser::PrettyFormatter::with_indent(b"    "),
    );
    config.serialize(&mut serializer).map_err(Error::Json)?;
    text.push(b'\n');
    Ok(String::from_utf8_lossy(&text).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NVIDIA: Runtime = Runtime {
        name: "nvidia",
        path: "nvidia-container-runtime",
        set_as_default: false,
        enable_cdi: false,
    };

    fn add(text: Option<&str>, runtime: &Runtime) -> Value {
        let out = add_runtime(Path::new("/etc/docker/daemon.json"), text, runtime).unwrap();
        serde_json::from_str(&out).unwrap()
    }

    fn json(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn the_view_reads_what_the_editor_writes() {
        let cdi = Runtime {
            set_as_default: true,
            enable_cdi: true,
            ..NVIDIA
        };
        let text = add_runtime(
            Path::new("/d.json"),
            Some(r#"{"runtimes": {"runc2": {"args": []}}}"#),
            &cdi,
        )
        .unwrap();
        let daemon = Daemon::parse("/d.json".into(), text.as_bytes()).unwrap();
        assert_eq!(
            daemon.runtimes,
            [
                DaemonRuntime {
                    name: "runc2".into(),
                    path: None
                },
                DaemonRuntime {
                    name: "nvidia".into(),
                    path: Some("nvidia-container-runtime".into())
                }
            ]
        );
        assert_eq!(daemon.default_runtime.as_deref(), Some("nvidia"));
        assert_eq!(daemon.cdi, Some(true));
        let err = Daemon::parse("/d.json".into(), b"{").unwrap_err();
        assert!(
            err.to_string().starts_with("/d.json is not JSON: EOF"),
            "{err}"
        );
    }

    // NVIDIA's TestUpdateConfigDefaultRuntime.
    #[test]
    fn the_default_runtime_is_set_only_when_asked() {
        for (config, set_as_default, expected) in [
            (None, false, None),
            (None, true, Some("NAME")),
            (
                Some(r#"{"default-runtime": "ALREADY_SET"}"#),
                false,
                Some("ALREADY_SET"),
            ),
            (
                Some(r#"{"default-runtime": "ALREADY_SET"}"#),
                true,
                Some("NAME"),
            ),
        ] {
            let runtime = Runtime {
                name: "NAME",
                set_as_default,
                ..NVIDIA
            };
            let config = add(config, &runtime);
            assert_eq!(
                config.get("default-runtime").and_then(Value::as_str),
                expected,
                "{config}"
            );
        }
    }

    // NVIDIA's TestUpdateConfigRuntimes.
    #[test]
    fn runtimes_are_added_and_replaced_and_other_keys_kept() {
        let runtime = |name, path| Runtime {
            name,
            path,
            ..NVIDIA
        };
        /// A config, the runtimes added to it in turn, and the result.
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
        let cases: [Case; 4] = [
            (
                "{}",
                &[
                    ("runtime1", "/test/runtime/dir/runtime1"),
                    ("runtime2", "/test/runtime/dir/runtime2"),
                ],
                r#"{"runtimes": {"runtime1": {"args": [], "path": "/test/runtime/dir/runtime1"},
                                 "runtime2": {"args": [], "path": "/test/runtime/dir/runtime2"}}}"#,
            ),
            (
                r#"{"runtimes": {"runtime1": {"path": "runtime1", "args": []}}}"#,
                &[
                    ("runtime1", "/test/runtime/dir/runtime1"),
                    ("runtime2", "/test/runtime/dir/runtime2"),
                ],
                r#"{"runtimes": {"runtime1": {"args": [], "path": "/test/runtime/dir/runtime1"},
                                 "runtime2": {"args": [], "path": "/test/runtime/dir/runtime2"}}}"#,
            ),
            (
                r#"{"runtimes": {"not-nvidia": {"path": "some-other-path", "args": []}}}"#,
                &[("runtime1", "/test/runtime/dir/runtime1")],
                r#"{"runtimes": {"not-nvidia": {"path": "some-other-path", "args": []},
                                 "runtime1": {"args": [], "path": "/test/runtime/dir/runtime1"}}}"#,
            ),
            (
                r#"{"exec-opts": ["native.cgroupdriver=systemd"], "log-driver": "json-file",
                    "log-opts": {"max-size": "100m"}, "storage-driver": "overlay2"}"#,
                &[("runtime1", "/test/runtime/dir/runtime1")],
                r#"{"exec-opts": ["native.cgroupdriver=systemd"], "log-driver": "json-file",
                    "log-opts": {"max-size": "100m"}, "storage-driver": "overlay2",
                    "runtimes": {"runtime1": {"args": [], "path": "/test/runtime/dir/runtime1"}}}"#,
            ),
        ];
        for (config, runtimes, expected) in cases {
            let mut text = config.to_string();
            for (name, path) in runtimes {
                text =
                    add_runtime(Path::new("/d.json"), Some(&text), &runtime(name, path)).unwrap();
            }
            assert_eq!(json(&text), json(expected), "{config}");
        }
    }

    #[test]
    fn keys_keep_their_order_and_the_file_its_indent() {
        let text = add_runtime(
            Path::new("/d.json"),
            Some(r#"{"storage-driver": "overlay2", "debug": true}"#),
            &NVIDIA,
        )
        .unwrap();
        assert_eq!(
            text,
            "{\n    \"storage-driver\": \"overlay2\",\n    \"debug\": true,\n    \"runtimes\": {\n        \
             \"nvidia\": {\n            \"args\": [],\n            \"path\": \"nvidia-container-runtime\"\n        \
             }\n    }\n}\n"
        );
    }

    // NVIDIA's TestNullRuntimesFromFile.
    #[test]
    fn null_runtimes_are_replaced() {
        let config = add(
            Some(r#"{"runtimes":null,"log-driver":"json-file"}"#),
            &NVIDIA,
        );
        assert_eq!(config["log-driver"], "json-file");
        assert_eq!(
            config["runtimes"]["nvidia"]["path"],
            "nvidia-container-runtime"
        );
    }

    // NVIDIA's TestEnableCDIPreservesFeaturesFromFile.
    #[test]
    fn cdi_is_enabled_among_the_other_features() {
        let cdi = Runtime {
            enable_cdi: true,
            ..NVIDIA
        };
        for (input, expected) in [
            ("{}", r#"{"features":{"cdi":true}}"#),
            (r#"{"features":{}}"#, r#"{"features":{"cdi":true}}"#),
            (
                r#"{"features":{"containerd-snapshotter":true,"buildkit":false},"debug":true}"#,
                r#"{"features":{"cdi":true,"containerd-snapshotter":true,"buildkit":false},"debug":true}"#,
            ),
            (
                r#"{"features":{"cdi":false,"containerd-snapshotter":true}}"#,
                r#"{"features":{"cdi":true,"containerd-snapshotter":true}}"#,
            ),
            (
                r#"{"features":{"cdi":true,"containerd-snapshotter":true}}"#,
                r#"{"features":{"cdi":true,"containerd-snapshotter":true}}"#,
            ),
        ] {
            let mut config = add(Some(input), &cdi);
            config.as_object_mut().unwrap().remove("runtimes");
            assert_eq!(config, json(expected), "{input}");
        }
    }

    #[test]
    fn a_missing_or_empty_file_starts_empty() {
        for text in [None, Some(""), Some("\n  \n")] {
            let config = add(text, &NVIDIA);
            assert_eq!(
                config,
                json(
                    r#"{"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}"#
                )
            );
        }
    }

    #[test]
    fn a_broken_file_is_refused_with_its_line() {
        let err = add_runtime(
            Path::new("/etc/docker/daemon.json"),
            Some("{\n  \"debug\": true,\n  \"x\": \n}\n"),
            &NVIDIA,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "/etc/docker/daemon.json:4: not valid JSON (expected value); left untouched"
        );
    }

    #[test]
    fn keys_of_the_wrong_kind_are_refused_by_name() {
        for (text, message) in [
            (
                "[]",
                "/d.json: the whole file is an array, not an object; left untouched",
            ),
            (
                r#"{"runtimes": []}"#,
                "/d.json: runtimes is an array, not an object; left untouched",
            ),
            (
                r#"{"features": "x"}"#,
                "/d.json: features is a string, not an object; left untouched",
            ),
        ] {
            let cdi = Runtime {
                enable_cdi: true,
                ..NVIDIA
            };
            let err = add_runtime(Path::new("/d.json"), Some(text), &cdi).unwrap_err();
            assert_eq!(err.to_string(), message);
        }
    }
}

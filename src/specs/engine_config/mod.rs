//! One model per container engine: Docker's `daemon.json`, containerd's
//! `config.toml` (with its imports and drop-in), CRI-O's `crio.conf` and
//! `crio.conf.d`, and the OCI hooks.d directories Podman and CRI-O read.
//! Each engine's module holds where its files are (each default path
//! written once in the crate), how to read them into a typed view (the
//! runtimes configured, the default runtime, CDI, hooks.d directories,
//! imports and drop-ins, the config's version), which `doctor` judges, and
//! how to add our runtime (`nvidia-ctk runtime configure`).
//!
//! The editor turns a file's current text into the files to write, as
//! NVIDIA's toolkit would write them; nothing else in the files changes
//! (JSON keys keep their order, TOML keeps its comments). A file that does
//! not parse is refused, naming its path and line, and nothing is written.
//! [`write`] then replaces each file atomically. The views read files
//! under a [`HostRoot`], so a host mounted elsewhere is read as its own
//! processes see it.

pub mod containerd;
pub mod crio;
pub mod docker;
pub mod hooks_d;

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use thiserror::Error;
use toml_edit::{DocumentMut, Item, Table, TableLike, Value};

/// Why an engine's configuration could not be read, changed or written.
#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path}:{line}: not valid {format} ({reason}); left untouched")]
    Parse {
        path: PathBuf,
        line: usize,
        format: &'static str,
        reason: String,
    },
    #[error("{path}: {key} is {found}, not {expected}; left untouched")]
    Shape {
        path: PathBuf,
        key: String,
        found: &'static str,
        expected: &'static str,
    },
    #[error("{path}: containerd config version {version} is not 1, 2 or 3; left untouched")]
    Version { path: PathBuf, version: String },
    #[error("`{command}` failed: {reason}")]
    Dump { command: String, reason: String },
    #[error(
        "{name} not found in {}: name the engine's program with --executable-path",
        crate::util::this_program::SYSTEM_PATH
    )]
    NoExecutable { name: String },
    #[error("--executable-path {path}: {reason}")]
    Executable { path: String, reason: &'static str },
    #[error("cannot create directory {path}: {source}")]
    CreateDir { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Write(#[from] crate::specs::cdi::Error),
    #[error("cannot encode JSON: {0}")]
    Json(serde_json::Error),
    #[error("cannot write to stdout: {0}")]
    Stdout(io::Error),
    // What the views say of a file that does not parse.
    #[error("{} does not parse: {message}", path.display())]
    Unparsable { path: PathBuf, message: String },
    #[error("{} is not JSON: {source}", path.display())]
    NotJson {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{} is not a hooks.d file: {source}", path.display())]
    NotHookFile {
        path: PathBuf,
        source: serde_json::Error,
    },
}

/// Result of an engine config operation.
pub type Result<T> = std::result::Result<T, Error>;

/// Where the files engines read live: `/` on a real host, another tree for a
/// host mounted elsewhere (`doctor --host-root /host` from a container or a
/// rescue system) and for the simulated hosts of the tests. It holds the
/// hooks.d directories, `crio.conf`, `/etc/docker/daemon.json`,
/// containerd's `config.toml`, the CDI spec directories and the procfs whose
/// processes (dockerd, nvidia-persistenced, pid 1) are looked up. The driver
/// itself is found through the config's `[driver]` roots, as the hook finds it.
#[derive(Debug, Clone)]
pub struct HostRoot {
    root: PathBuf,
}

impl HostRoot {
    /// The host tree at `root`.
    pub fn new(root: impl Into<PathBuf>) -> HostRoot {
        HostRoot { root: root.into() }
    }

    /// `abs`, a path as the host's own processes see it, under this root.
    pub fn path(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    /// The root itself.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// The runtime to register, as `runtime configure`'s flags name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Runtime<'a> {
    /// The engine's name for it (`--nvidia-runtime-name`, `nvidia`).
    pub name: &'a str,
    /// The program the engine runs (`--nvidia-runtime-path`).
    pub path: &'a str,
    /// Whether it becomes the engine's default runtime.
    pub set_as_default: bool,
    /// Whether the engine's own CDI support is turned on (Docker, containerd).
    pub enable_cdi: bool,
}

/// One file to write: where, and all of its new text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// The file.
    pub path: PathBuf,
    /// Its whole new content.
    pub text: String,
}

/// The text of `path`, or `None` when there is no such file (the engine's
/// defaults then apply, as for NVIDIA's tool).
pub fn read(path: &Path) -> Result<Option<String>> {
    match crate::util::bounded_read::read_text(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The entries of `dir` named `*.{ext}`, in no order; none when it cannot
/// be read (drop-in and hooks.d directories).
pub(crate) fn with_extension(dir: &Path, ext: &str) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect()
}

/// Writes each output atomically, in order, creating its directory (0755)
/// when missing; with `dry_run`, prints the first instead (what NVIDIA's
/// `--dry-run` prints: the file the runtime goes into) and writes nothing.
pub fn write(outputs: &[Output], dry_run: bool, out: &mut impl Write) -> Result<()> {
    if dry_run {
        if let Some(first) = outputs.first() {
            out.write_all(first.text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(Error::Stdout)?;
        }
        return Ok(());
    }
    for output in outputs {
        if let Some(dir) = output.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(|source| Error::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        crate::specs::cdi::write_atomically(&output.path, output.text.as_bytes())?;
        log::info!("wrote {}", output.path.display());
    }
    Ok(())
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// `text` (of `path`) as a TOML document; a missing file is an empty one.
pub(crate) fn parse_toml(path: &Path, text: Option<&str>) -> Result<DocumentMut> {
    let text = text.unwrap_or_default();
    text.parse::<DocumentMut>().map_err(|e| Error::Parse {
        path: path.to_path_buf(),
        line: line_of(text, e.span().map_or(0, |s| s.start)),
        format: "TOML",
        reason: e.message().trim().replace('\n', ": "),
    })
}

/// What kind of TOML item `item` is, for a refusal.
fn toml_kind(item: &Item) -> &'static str {
    match item {
        Item::None => "missing",
        Item::Table(_) | Item::Value(toml_edit::Value::InlineTable(_)) => "a table",
        Item::ArrayOfTables(_) => "an array of tables",
        Item::Value(toml_edit::Value::Array(_)) => "an array",
        Item::Value(toml_edit::Value::String(_)) => "a string",
        Item::Value(toml_edit::Value::Integer(_)) => "an integer",
        Item::Value(toml_edit::Value::Float(_)) => "a float",
        Item::Value(toml_edit::Value::Boolean(_)) => "a boolean",
        Item::Value(toml_edit::Value::Datetime(_)) => "a datetime",
    }
}

/// The table at `keys` under `root`, made (implicit, so that only the
/// innermost gets a header) where missing. A key that holds something
/// other than a table is refused by its dotted name.
pub(crate) fn table_at<'a>(
    root: &'a mut dyn TableLike,
    keys: &[&str],
    file: &Path,
) -> Result<&'a mut dyn TableLike> {
    let mut table = root;
    for (depth, key) in keys.iter().enumerate() {
        if table.get(key).is_none_or(Item::is_none) {
            let mut new = Table::new();
            new.set_implicit(true);
            table.insert(key, Item::Table(new));
        }
        let current = table;
        let Some(item) = current.get_mut(key) else {
            unreachable!("{key} was just inserted");
        };
        let found = toml_kind(item);
        table = match item.as_table_like_mut() {
            Some(next) => next,
            None => {
                return Err(Error::Shape {
                    path: file.to_path_buf(),
                    key: keys[..=depth].join("."),
                    found,
                    expected: "a table",
                })
            }
        };
    }
    Ok(table)
}

/// Sets `key` in `table` to `new`, keeping an existing key's and value's comments.
pub(crate) fn set(table: &mut dyn TableLike, key: &str, new: impl Into<Value>) {
    let mut new = new.into();
    match table.get_mut(key) {
        Some(item) => {
            if let Some(old) = item.as_value() {
                *new.decor_mut() = old.decor().clone();
            }
            // In place: the key, and the comment above it, stay.
            *item = Item::Value(new);
        }
        None => {
            table.insert(key, Item::Value(new));
        }
    }
}

/// The table-like item at `keys` under `root`, if there is one.
fn get_table<'a>(root: &'a dyn TableLike, keys: &[&str]) -> Option<&'a dyn TableLike> {
    let mut table = root;
    for key in keys {
        table = table.get(key)?.as_table_like()?;
    }
    Some(table)
}

/// The string at `keys` under `root`, if there is one.
fn get_str<'a>(root: &'a dyn TableLike, keys: &[&str]) -> Option<&'a str> {
    let (last, parents) = keys.split_last()?;
    get_table(root, parents)?.get(last)?.as_str()
}

/// A fresh copy of `source`: the same keys and values, without the
/// original's headers, comments or position, for another place.
fn fresh_copy(source: &dyn TableLike) -> Table {
    let mut table = Table::new();
    for (key, item) in source.iter() {
        let copy = match (item.as_table_like(), item) {
            (Some(sub), _) => Item::Table(fresh_copy(sub)),
            (None, Item::Value(value)) => {
                let mut value = value.clone();
                value.decor_mut().clear();
                Item::Value(value)
            }
            (None, other) => other.clone(),
        };
        table.insert(key, copy);
    }
    table
}

/// The runtime to copy a new runtime's settings from, as NVIDIA's toolkit
/// picks it: the engine's default runtime unless it is an `nvidia*` one,
/// then `runc`, then `crun`.
fn low_level_runtimes(default: Option<&str>) -> Vec<&str> {
    default
        .filter(|d| !d.is_empty() && !d.starts_with("nvidia"))
        .into_iter()
        .chain(["runc", "crun"])
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A host root holding `files`, each an absolute path and its text.
    pub(crate) fn host_with(files: &[(&str, &str)]) -> (tempfile::TempDir, HostRoot) {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let file = dir.path().join(path.trim_start_matches('/'));
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        let host = HostRoot::new(dir.path());
        (dir, host)
    }

    /// What `nvidia-ctk runtime configure --runtime=containerd --cdi.enabled`
    /// writes into containerd 1.7's default config (version 2).
    pub(crate) const CONTAINERD_V2: &str = r#"version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    enable_cdi = true
    cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/local/bin/nvidia-container-runtime"
"#;

    /// The runtime NVIDIA's engine tests add.
    pub(crate) const TEST: Runtime = Runtime {
        name: "test",
        path: "/usr/bin/test",
        set_as_default: false,
        enable_cdi: false,
    };

    #[test]
    fn lines_count_from_one() {
        assert_eq!(line_of("a\nb\nc", 0), 1);
        assert_eq!(line_of("a\nb\nc", 2), 2);
        assert_eq!(line_of("a\nb\nc", 99), 3);
    }

    #[test]
    fn a_toml_error_names_the_file_and_line() {
        let err = parse_toml(Path::new("/x.toml"), Some("a = 1\n\nb = = 2\n")).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("/x.toml:3: not valid TOML"), "{text}");
    }

    #[test]
    fn a_key_holding_a_value_is_not_made_a_table() {
        let mut doc = parse_toml(Path::new("/c"), Some("plugins = 3\n")).unwrap();
        let Err(err) = table_at(doc.as_table_mut(), &["plugins", "x"], Path::new("/c")) else {
            panic!("plugins = 3 was made a table");
        };
        assert_eq!(
            err.to_string(),
            "/c: plugins is an integer, not a table; left untouched"
        );
    }

    #[test]
    fn the_source_runtime_skips_nvidia_defaults() {
        assert_eq!(low_level_runtimes(Some("crun")), ["crun", "runc", "crun"]);
        assert_eq!(low_level_runtimes(Some("nvidia-cdi")), ["runc", "crun"]);
        assert_eq!(low_level_runtimes(None), ["runc", "crun"]);
    }

    #[test]
    fn dry_run_prints_the_first_file_and_writes_none() {
        let dir = tempfile::tempdir().unwrap();
        let outputs = [
            Output {
                path: dir.path().join("a/b.toml"),
                text: "x = 1\n".into(),
            },
            Output {
                path: dir.path().join("c.toml"),
                text: "y = 1\n".into(),
            },
        ];
        let mut out = Vec::new();
        write(&outputs, true, &mut out).unwrap();
        assert_eq!(out, b"x = 1\n");
        assert!(!dir.path().join("a").exists() && !dir.path().join("c.toml").exists());
        write(&outputs, false, &mut out).unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join("a/b.toml")).unwrap(),
            "x = 1\n"
        );
        assert_eq!(
            fs::read_to_string(dir.path().join("c.toml")).unwrap(),
            "y = 1\n"
        );
    }
}

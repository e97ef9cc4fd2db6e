//! `nvidia-ctk config`: our config file, read and written under NVIDIA's
//! key names. Each `--set` names one of NVIDIA's keys that has an
//! equivalent here ([`KEYS`]); any other is refused, naming it. The file is
//! edited in place of its text (comments stay), checked by the same parser
//! every command loads it with, and printed, written to `--output`, or
//! written back with `--in-place`, atomically. A missing file starts from
//! the shipped one: every key at its default, commented.

use std::io::Write;
use std::path::PathBuf;

use toml_edit::{Array, Value};

use super::{Error, Result};
use crate::config::Config;
use crate::specs::engine_config::{self, parse_toml, set, table_at, Output};

/// The config file every key is set to its default in, as packaged.
const SHIPPED: &str = include_str!("../../packaging/config.toml");

/// How a value given to `--set` is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `true`/`false` (Go's spellings); the key alone means true.
    Bool,
    /// Taken as it is.
    String,
    /// A comma list, as NVIDIA splits it.
    List,
    /// A log level: NVIDIA's `warning` is our `warn`.
    Level,
}

/// One of NVIDIA's keys and where it lives in our file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// NVIDIA's name (`nvidia-container-cli.root`).
    pub nvidia: &'static str,
    /// Ours (`driver.root`), by table.
    pub ours: &'static [&'static str],
    /// How its value is read.
    pub kind: Kind,
}

/// Every key of NVIDIA's config that has an equivalent in ours.
pub const KEYS: [Key; 12] = [
    Key {
        nvidia: "accept-nvidia-visible-devices-envvar-when-unprivileged",
        ours: &["accept-env-when-unprivileged"],
        kind: Kind::Bool,
    },
    Key {
        nvidia: "accept-nvidia-visible-devices-as-volume-mounts",
        ours: &["accept-volume-mounts"],
        kind: Kind::Bool,
    },
    Key {
        nvidia: "supported-driver-capabilities",
        ours: &["supported-capabilities"],
        kind: Kind::String,
    },
    Key {
        nvidia: "disable-require",
        ours: &["disable-require"],
        kind: Kind::Bool,
    },
    Key {
        nvidia: "nvidia-container-cli.root",
        ours: &["driver", "root"],
        kind: Kind::String,
    },
    Key {
        nvidia: "nvidia-container-runtime.log-level",
        ours: &["log", "level"],
        kind: Kind::Level,
    },
    Key {
        nvidia: "nvidia-container-runtime.debug",
        ours: &["log", "file"],
        kind: Kind::String,
    },
    Key {
        nvidia: "nvidia-container-runtime.runtimes",
        ours: &["runtime", "runtimes"],
        kind: Kind::List,
    },
    Key {
        nvidia: "nvidia-container-runtime.mode",
        ours: &["runtime", "mode"],
        kind: Kind::String,
    },
    Key {
        nvidia: "nvidia-container-runtime.modes.cdi.default-kind",
        ours: &["runtime", "cdi", "default-kind"],
        kind: Kind::String,
    },
    Key {
        nvidia: "nvidia-container-runtime.modes.cdi.annotation-prefixes",
        ours: &["runtime", "cdi", "annotation-prefixes"],
        kind: Kind::List,
    },
    Key {
        nvidia: "nvidia-container-runtime.modes.cdi.spec-dirs",
        ours: &["runtime", "cdi", "spec-dirs"],
        kind: Kind::List,
    },
];

/// What `config` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// The config file to read (and with `in_place` write).
    pub config_file: PathBuf,
    /// `KEY=VALUE` with one of NVIDIA's keys; an empty VALUE puts the key
    /// back to its default.
    pub sets: Vec<String>,
    /// Write the file back instead of printing it.
    pub in_place: bool,
    /// Write the result to this file instead of stdout.
    pub output: Option<PathBuf>,
}

/// Runs `config`: applies every `--set` to the file and prints, writes or
/// replaces it.
pub fn run(args: &Edit, out: &mut impl Write) -> Result<()> {
    let path = &args.config_file;
    let text = engine_config::read(path)?;
    let mut doc = parse_toml(path, Some(text.as_deref().unwrap_or(SHIPPED)))?;
    for given in &args.sets {
        let (key, value) = parse_set(given)?;
        let (name, parents) = key.ours.split_last().unwrap_or((&"", &[]));
        let table = table_at(doc.as_table_mut(), parents, path)?;
        match value {
            Some(value) => set(table, name, value),
            None => {
                table.remove(name);
            }
        }
    }
    let edited = doc.to_string();
    // A file not there yet starts as the shipped one: a line number of the
    // result is of that text, which the error must not pin on the file.
    let named = match text {
        Some(_) => path.clone(),
        None => PathBuf::from(format!(
            "{} (no such file: the shipped defaults with the --set values)",
            path.display()
        )),
    };
    Config::parse(&named, &edited)?;
    let text = edited;
    let target = match (&args.output, args.in_place) {
        (Some(file), _) => file.clone(),
        (None, true) => path.clone(),
        (None, false) => {
            out.write_all(text.as_bytes())?;
            out.flush()?;
            return Ok(());
        }
    };
    Ok(engine_config::write(
        &[Output { path: target, text }],
        false,
        out,
    )?)
}

/// A `--set KEY[=VALUE]`: the key, and its value (`None`: back to the default).
fn parse_set(given: &str) -> Result<(&'static Key, Option<Value>)> {
    let (name, value) = match given.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (given, None),
    };
    let key = KEYS.iter().find(|k| k.nvidia == name).ok_or_else(|| {
        let known: Vec<&str> = KEYS.iter().map(|k| k.nvidia).collect();
        Error::Usage(format!(
            "--set {name}: not a key with an equivalent in oci-nvidia-hook's config; these are: {}",
            known.join(", ")
        ))
    })?;
    let invalid = |reason: &str| Error::Usage(format!("invalid --set {given}: {reason}"));
    let value = match (key.kind, value) {
        (_, Some("")) => None,
        (Kind::Bool, None) => Some(Value::from(true)),
        (_, None) => return Err(invalid("expected key=value")),
        (Kind::Bool, Some(v)) => Some(Value::from(
            parse_bool(v).ok_or_else(|| invalid("expected true or false"))?,
        )),
        (Kind::String, Some(v)) => Some(Value::from(v)),
        (Kind::List, Some(v)) => Some(Value::Array(v.split(',').collect::<Array>())),
        (Kind::Level, Some(v)) => Some(Value::from(match v {
            "warning" => "warn",
            "trace" => "debug",
            other => other,
        })),
    };
    Ok((key, value))
}

/// A boolean as Go's `strconv.ParseBool` reads it.
fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn run_with(text: Option<&str>, sets: &[&str]) -> Result<String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        if let Some(text) = text {
            std::fs::write(&path, text).unwrap();
        }
        let args = Edit {
            config_file: path,
            sets: sets.iter().map(|s| s.to_string()).collect(),
            in_place: false,
            output: None,
        };
        let mut out = Vec::new();
        run(&args, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    fn parsed(text: &str) -> Config {
        Config::parse(Path::new("/c"), text).unwrap()
    }

    #[test]
    fn every_key_reaches_its_setting() {
        let text = run_with(
            Some("# mine\n"),
            &[
                "accept-nvidia-visible-devices-envvar-when-unprivileged=false",
                "accept-nvidia-visible-devices-as-volume-mounts",
                "supported-driver-capabilities=compute,utility",
                "disable-require=true",
                "nvidia-container-cli.root=/run/nvidia/driver",
                "nvidia-container-runtime.log-level=warning",
                "nvidia-container-runtime.debug=/var/log/onh.log",
                "nvidia-container-runtime.runtimes=crun,/usr/bin/runc",
                "nvidia-container-runtime.mode=cdi",
                "nvidia-container-runtime.modes.cdi.default-kind=example.com/gpu",
                "nvidia-container-runtime.modes.cdi.annotation-prefixes=cdi.k8s.io/,x.io/",
                "nvidia-container-runtime.modes.cdi.spec-dirs=/etc/cdi,/srv/cdi",
            ],
        )
        .unwrap();
        assert!(text.contains("# mine\n"), "{text}");
        let config = parsed(&text);
        assert!(!config.accept_env_when_unprivileged);
        assert!(config.accept_volume_mounts);
        assert!(config.disable_require);
        assert_eq!(config.driver.root, Path::new("/run/nvidia/driver"));
        assert_eq!(config.log.level, crate::config::LogLevel::Warn);
        assert_eq!(config.log.file, Path::new("/var/log/onh.log"));
        assert_eq!(config.runtime.runtimes, ["crun", "/usr/bin/runc"]);
        assert_eq!(config.runtime.mode, crate::config::RuntimeMode::Cdi);
        assert_eq!(config.runtime.cdi.default_kind, "example.com/gpu");
        assert_eq!(
            config.runtime.cdi.annotation_prefixes,
            ["cdi.k8s.io/", "x.io/"]
        );
        assert_eq!(
            config.runtime.cdi.spec_dirs,
            [Path::new("/etc/cdi"), Path::new("/srv/cdi")]
        );
        assert_eq!(
            config.supported_capabilities,
            crate::planning::request::Capabilities::parse("compute,utility").unwrap()
        );
    }

    #[test]
    fn a_missing_file_starts_from_the_shipped_one() {
        let text = run_with(None, &["disable-require"]).unwrap();
        assert_eq!(
            text,
            SHIPPED.replace("disable-require = false", "disable-require = true")
        );
    }

    #[test]
    fn an_empty_value_goes_back_to_the_default() {
        let text = run_with(
            Some("[log]\nlevel = \"debug\"\nfile = \"/x\"\n"),
            &["nvidia-container-runtime.log-level="],
        )
        .unwrap();
        assert_eq!(text, "[log]\nfile = \"/x\"\n");
    }

    /// With no file yet, a value the config refuses is not blamed on a line
    /// of a file that does not exist.
    #[test]
    fn a_bad_value_without_a_file_names_the_defaults_not_the_file() {
        let err = run_with(None, &["nvidia-container-runtime.mode=bogus"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("(no such file: the shipped defaults with the --set values)"),
            "{err}"
        );
        // With a file, its own lines are named as before.
        let err = run_with(
            Some("[runtime]\n"),
            &["nvidia-container-runtime.mode=bogus"],
        )
        .unwrap_err()
        .to_string();
        assert!(!err.contains("no such file"), "{err}");
    }

    #[test]
    fn other_keys_and_bad_values_are_refused_in_one_line() {
        for (set, start) in [
            ("nvidia-container-runtime.modes.csv.mount-spec-path=/x", "--set nvidia-container-runtime.modes.csv.mount-spec-path: not a key with an equivalent in oci-nvidia-hook's config; these are: accept-nvidia-visible-devices-envvar-when-unprivileged, "),
            ("nvidia-container-runtime.mode=csv", "invalid config file "),
            ("nvidia-container-cli.no-cgroups=true", "--set nvidia-container-cli.no-cgroups: not a key"),
            ("disable-require=maybe", "invalid --set disable-require=maybe: expected true or false"),
            ("nvidia-container-cli.root", "invalid --set nvidia-container-cli.root: expected key=value"),
            ("nvidia-container-cli.root=relative", "invalid config file "),
            ("nvidia-container-runtime.log-level=panic", "invalid config file "),
        ] {
            let err = run_with(Some(""), &[set]).unwrap_err().to_string();
            assert!(err.starts_with(start), "{set}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn in_place_writes_the_file_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "disable-require = false # why\n").unwrap();
        let args = Edit {
            config_file: path.clone(),
            sets: vec!["disable-require=true".into()],
            in_place: true,
            output: None,
        };
        let mut out = Vec::new();
        run(&args, &mut out).unwrap();
        assert!(out.is_empty());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "disable-require = true # why\n"
        );
    }
}

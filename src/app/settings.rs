//! `nvidia-ctk config`: NVIDIA's config file, printed and edited under
//! NVIDIA's key names, as NVIDIA's tool does; oci-nvidia-hook reads that
//! file under its own ([`crate::config::nvidia`]), so an edit here takes
//! effect wherever a key has an equivalent. Each `--set` names a key of
//! NVIDIA's v1.20 schema, its value checked against the key's type and
//! against what our config accepts; a key whose request is not done here
//! is still written, with a warning saying so. The file is edited in place
//! of its text (comments stay) and printed, written to `--output`, or
//! written back with `--in-place`, atomically. A missing file starts from
//! NVIDIA's defaults.

use std::io::Write;
use std::path::{Path, PathBuf};

use toml_edit::{Array, Value};

use super::{Error, Result};
use crate::config::nvidia::{self, Fate, Kind};
use crate::config::Config;
use crate::specs::engine_config::{self, parse_toml, set, table_at, Output};

/// What `config` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// The config file to read (and with `in_place` write).
    pub config_file: PathBuf,
    /// `KEY=VALUE` with one of NVIDIA's keys; an empty VALUE puts the key
    /// back to its default.
    pub sets: Vec<String>,
    /// What separates a list's items in a VALUE (besides a comma).
    pub list_separator: String,
    /// Write the file back instead of printing it.
    pub in_place: bool,
    /// Write the result to this file instead of stdout.
    pub output: Option<PathBuf>,
    /// `config default`: NVIDIA's default file, whatever is on disk.
    pub default_only: bool,
}

/// Runs `config`: applies every `--set` to the file and prints, writes or
/// replaces it.
pub fn run(args: &Edit, out: &mut impl Write) -> Result<()> {
    let path = &args.config_file;
    let text = match args.default_only {
        true => None,
        false => engine_config::read(path)?,
    };
    refuse_ours(path, text.as_deref())?;
    let default = nvidia::default_file();
    let mut doc = parse_toml(path, Some(text.as_deref().unwrap_or(&default)))?;
    let mut asked = Vec::new();
    for given in &args.sets {
        let (key, value) = parse_set(given, &args.list_separator)?;
        let dotted: Vec<&str> = key.name.split('.').collect();
        let (name, parents) = dotted.split_last().unwrap_or((&"", &[]));
        let table = table_at(doc.as_table_mut(), parents, path)?;
        match value {
            Some(value) => set(table, name, value),
            None => {
                table.remove(name);
            }
        }
        asked.push(key.name);
    }
    let edited = doc.to_string();
    // A file not there yet starts as NVIDIA's defaults: a line number of
    // the result is of that text, which the error must not pin on the file.
    let named = match text {
        Some(_) => path.clone(),
        None => PathBuf::from(format!(
            "{} (no such file: NVIDIA's defaults with the --set values)",
            path.display()
        )),
    };
    let checked = Config::with_nvidia(Path::new(crate::config::DEFAULT_PATH), "", &named, &edited)?;
    for finding in checked.nvidia.unhonoured() {
        if let Fate::Unhonoured(why) = finding.fate {
            if asked.contains(&finding.key.as_str()) {
                log::warn!(
                    "{} = {} is written but not honoured by oci-nvidia-hook: {why}",
                    finding.key,
                    finding.value
                );
            }
        }
    }
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

/// Our own settings, which this command does not edit: names our file's
/// tables and keys, which NVIDIA's has none of.
const OURS_ONLY: [&str; 7] = [
    "driver",
    "log",
    "runtime",
    "cuda-compat",
    "accept-env-when-unprivileged",
    "accept-volume-mounts",
    "supported-capabilities",
];

/// Refuses oci-nvidia-hook's own file: it is edited by hand.
fn refuse_ours(path: &Path, text: Option<&str>) -> Result<()> {
    let ours = path == Path::new(crate::config::DEFAULT_PATH)
        || text.is_some_and(|text| {
            text.parse::<toml::Table>()
                .is_ok_and(|table| OURS_ONLY.iter().any(|key| table.contains_key(*key)))
        });
    match ours {
        true => Err(Error::Usage(format!(
            "{} is oci-nvidia-hook's own config: edit it by hand (docs/configuration.md); \
             nvidia-ctk config edits NVIDIA's file ({}), which oci-nvidia-hook reads under its own",
            path.display(),
            nvidia::DEFAULT_PATH
        ))),
        false => Ok(()),
    }
}

/// A `--set KEY[=VALUE]`: the key, and its value (`None`: back to the default).
fn parse_set(given: &str, separator: &str) -> Result<(&'static nvidia::Key, Option<Value>)> {
    let (name, value) = match given.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (given, None),
    };
    let key = nvidia::find(name).ok_or_else(|| {
        Error::Usage(format!(
            "invalid --set {given}: {name} is not a key of NVIDIA's config (docs/nvidia-ctk.md lists them)"
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
        (Kind::List, Some(v)) => Some(Value::Array(
            v.split(|c: char| c == ',' || separator.contains(c))
                .filter(|item| !item.is_empty())
                .collect::<Array>(),
        )),
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

    fn run_with(text: Option<&str>, sets: &[&str]) -> Result<String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        if let Some(text) = text {
            std::fs::write(&path, text).unwrap();
        }
        let args = Edit {
            config_file: path,
            sets: sets.iter().map(|s| s.to_string()).collect(),
            list_separator: ":".into(),
            in_place: false,
            output: None,
            default_only: false,
        };
        let mut out = Vec::new();
        run(&args, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    /// What our config makes of NVIDIA's file `text`.
    fn read_as_ours(text: &str) -> Config {
        Config::with_nvidia(Path::new("/o"), "", Path::new("/n"), text).unwrap()
    }

    /// The settings NVIDIA's documentation and install scripts make
    /// (rootless Docker's `no-cgroups`, the multi-tenant hardening, the
    /// GPU Operator's driver root and runtime mode), each reaching its
    /// setting here.
    #[test]
    fn every_key_with_an_equivalent_reaches_its_setting() {
        let text = run_with(
            Some("# mine\n"),
            &[
                "accept-nvidia-visible-devices-envvar-when-unprivileged=false",
                "accept-nvidia-visible-devices-as-volume-mounts",
                "supported-driver-capabilities=compute,utility",
                "disable-require=true",
                "nvidia-container-cli.no-cgroups",
                "nvidia-container-cli.root=/run/nvidia/driver",
                "nvidia-container-runtime.log-level=warning",
                "nvidia-container-runtime.debug=/var/log/onh.log",
                "nvidia-container-runtime.runtimes=crun:/usr/bin/runc",
                "nvidia-container-runtime.mode=jit-cdi",
                "nvidia-container-runtime.modes.cdi.default-kind=example.com/gpu",
                "nvidia-container-runtime.modes.cdi.annotation-prefixes=cdi.k8s.io/,x.io/",
                "nvidia-container-runtime.modes.cdi.spec-dirs=/etc/cdi:/srv/cdi",
                "features.ignore-imex-channel-requests",
                "features.disable-cuda-compat-lib-hook=true",
            ],
        )
        .unwrap();
        assert!(text.contains("# mine\n"), "comments stay: {text}");
        assert!(
            text.contains("[nvidia-container-cli]\nno-cgroups = true\n"),
            "{text}"
        );
        let config = read_as_ours(&text);
        assert!(!config.accept_env_when_unprivileged);
        assert!(config.accept_volume_mounts);
        assert!(config.disable_require);
        assert!(!config.grant_device_cgroup);
        assert!(config.ignore_imex_channel_requests);
        assert_eq!(config.cuda_compat.mode, crate::config::CompatMode::Disabled);
        assert_eq!(config.driver.root, Path::new("/run/nvidia/driver"));
        assert_eq!(config.log.level, crate::config::LogLevel::Warn);
        assert_eq!(config.log.file, Path::new("/var/log/onh.log"));
        assert_eq!(config.runtime.runtimes, ["crun", "/usr/bin/runc"]);
        assert_eq!(config.runtime.mode, crate::config::RuntimeMode::JitCdi);
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

    /// NVIDIA v1.20's `nvidia-ctk config` without a file prints its
    /// defaults; with `--set`, those defaults changed.
    #[test]
    fn a_missing_file_starts_from_nvidias_defaults() {
        assert_eq!(run_with(None, &[]).unwrap(), nvidia::default_file());
        let text = run_with(None, &["disable-require"]).unwrap();
        assert_eq!(
            text,
            nvidia::default_file().replace("disable-require = false", "disable-require = true")
        );
    }

    #[test]
    fn an_empty_value_goes_back_to_the_default() {
        let text = run_with(
            Some("[nvidia-container-runtime]\nlog-level = \"debug\"\nmode = \"cdi\"\n"),
            &["nvidia-container-runtime.log-level="],
        )
        .unwrap();
        assert_eq!(text, "[nvidia-container-runtime]\nmode = \"cdi\"\n");
    }

    /// With no file yet, a value the config refuses is not blamed on a line
    /// of a file that does not exist.
    #[test]
    fn a_bad_value_without_a_file_names_the_defaults_not_the_file() {
        let err = run_with(None, &["nvidia-container-runtime.mode=bogus"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("(no such file: NVIDIA's defaults with the --set values)"),
            "{err}"
        );
        let err = run_with(
            Some("[nvidia-container-runtime]\n"),
            &["nvidia-container-runtime.mode=bogus"],
        )
        .unwrap_err()
        .to_string();
        assert!(!err.contains("no such file"), "{err}");
    }

    /// Keys NVIDIA's schema has but whose request is not done here are
    /// written, as NVIDIA's tool writes them (the run warns).
    #[test]
    fn keys_not_honoured_here_are_still_written() {
        let text = run_with(
            Some(""),
            &[
                "swarm-resource=DOCKER_RESOURCE_GPU",
                "nvidia-container-runtime.modes.csv.mount-spec-path=/x",
            ],
        )
        .unwrap();
        assert!(
            text.contains("swarm-resource = \"DOCKER_RESOURCE_GPU\""),
            "{text}"
        );
        assert!(text.contains("mount-spec-path = \"/x\""), "{text}");
    }

    /// NVIDIA's messages (`invalid --set option …: undefined field`,
    /// `strconv.ParseBool`), in one line each.
    #[test]
    fn unknown_keys_and_bad_values_are_refused_in_one_line() {
        for (set, start) in [
            (
                "bogus.key=1",
                "invalid --set bogus.key=1: bogus.key is not a key of NVIDIA's config",
            ),
            (
                "nvidia-container-cli.no-cgroups=maybe",
                "invalid --set nvidia-container-cli.no-cgroups=maybe: expected true or false",
            ),
            (
                "nvidia-container-cli.root",
                "invalid --set nvidia-container-cli.root: expected key=value",
            ),
            (
                "nvidia-container-cli.root=relative",
                "invalid NVIDIA config file ",
            ),
            (
                "nvidia-container-runtime.log-level=panic!",
                "invalid NVIDIA config file ",
            ),
        ] {
            let err = run_with(Some(""), &[set]).unwrap_err().to_string();
            assert!(err.starts_with(start), "{set}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn our_own_file_is_refused_naming_nvidias() {
        let err = run_with(Some("[driver]\nroot = \"/\"\n"), &["disable-require"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("oci-nvidia-hook's own config"), "{err}");
        assert!(err.contains(nvidia::DEFAULT_PATH), "{err}");
    }

    #[test]
    fn in_place_writes_the_file_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "disable-require = false # why\n").unwrap();
        let args = Edit {
            config_file: path.clone(),
            sets: vec!["disable-require=true".into()],
            list_separator: ":".into(),
            in_place: true,
            output: None,
            default_only: false,
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

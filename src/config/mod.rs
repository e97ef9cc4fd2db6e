//! The hook's configuration: a TOML file, never the process environment.
//!
//! Runtimes may run hooks with a cleared or attacker-influenced environment,
//! so every policy and logging knob comes from this file or from arguments.
//! Unknown keys are errors: a typo must not silently fall back to a default.

use std::io;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

use crate::planning::request::Capabilities;
use crate::util::error_line::escape_controls;

pub mod nvidia;

/// Where the configuration lives when `--config` is not given.
pub const DEFAULT_PATH: &str = "/etc/oci-nvidia-hook/config.toml";

/// Largest config file read: ours is a few KiB.
const MAX_SIZE: usize = 1024 * 1024;

/// Why the configuration could not be loaded.
#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("invalid config file {path}, line {line}, column {column}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("invalid config file {path}: {key} = {value:?}: {reason}")]
    Invalid {
        path: PathBuf,
        key: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("invalid NVIDIA config file {path}: {key} = {value}: {reason}")]
    Nvidia {
        path: PathBuf,
        key: String,
        value: String,
        reason: String,
    },
}

/// Result of loading the configuration.
pub type Result<T> = std::result::Result<T, Error>;

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Config {
    /// Honour `NVIDIA_VISIBLE_DEVICES` from unprivileged containers too, as NVIDIA does.
    pub accept_env_when_unprivileged: bool,
    /// Take device requests from `/dev/null` mounts at
    /// `/var/run/nvidia-container-devices/<device>` (the Kubernetes device
    /// plugin's strategy); when present they win over the variable.
    pub accept_volume_mounts: bool,
    /// The capabilities this host offers: `all` means these, and others are
    /// dropped. Parsed with the file, so a bad value is refused there, with
    /// its line, rather than read as something else later.
    #[serde(deserialize_with = "capabilities")]
    pub supported_capabilities: Capabilities,
    /// Skip every `NVIDIA_REQUIRE_*` check, host-wide.
    pub disable_require: bool,
    /// The wall-clock bound, in milliseconds, on each entry point a runtime
    /// waits for (the hooks, `cdi-hook`, the NVIDIA-name fronts, the runtime
    /// wrapper's work before it `exec`s the runtime); see [`crate::util::deadline`]
    /// for why 15 s by default: more than NVIDIA's 10 s driver RPC timeout,
    /// well under the kubelet's 2 min runtime request timeout.
    pub deadline_ms: u64,
    /// Where the host driver lives.
    pub driver: DriverConfig,
    /// Where and how much to log.
    pub log: LogConfig,
    /// CUDA forward compatibility.
    pub cuda_compat: CudaCompatConfig,
    /// The runtime wrapper's real runtime.
    pub runtime: RuntimeConfig,
    /// Grant the container's device cgroup its GPUs; `false` leaves it to
    /// the runtime (NVIDIA's `no-cgroups`, for engines that list the
    /// devices themselves).
    pub grant_device_cgroup: bool,
    /// Where the container runs under the systemd cgroup driver, add the
    /// nodes the hook grants to its scope's `DeviceAllow` too, so that a
    /// `systemctl daemon-reload` keeps them ([`crate::apply::systemd`]).
    pub systemd_device_allow: bool,
    /// Never take IMEX channels from what a container carries (its
    /// variable or mounts); only an administrator's `--imex-channel`.
    pub ignore_imex_channel_requests: bool,
    /// Give group-only device nodes (a render node's `0660 root:render`)
    /// as they are: unopenable by a container's non-root user. NVIDIA's
    /// `features.no-additional-gids-for-device-nodes`.
    pub no_additional_gids: bool,
    /// NVIDIA's config file, read under ours (see [`nvidia`]); `""` for none.
    #[serde(deserialize_with = "optional_path")]
    pub nvidia_config: Option<PathBuf>,
    /// What NVIDIA's config file contributed: not a key of ours.
    #[serde(skip)]
    pub nvidia: nvidia::Report,
}

/// `[runtime]`: what `oci-nvidia-hook runtime` (`nvidia-container-runtime`)
/// executes after editing the spec.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct RuntimeConfig {
    /// Names (looked up in the system directories, never the caller's PATH)
    /// or absolute paths, tried in order; as NVIDIA's `runtimes`.
    #[serde(deserialize_with = "runtimes")]
    pub runtimes: Vec<String>,
    /// How the wrapper reads a container's request: NVIDIA's `mode`.
    pub mode: RuntimeMode,
    /// `[runtime.cdi]`: where CDI mode finds its specs and what it reads.
    pub cdi: RuntimeCdiConfig,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            runtimes: vec!["runc".into(), "crun".into()],
            mode: RuntimeMode::default(),
            cdi: RuntimeCdiConfig::default(),
        }
    }
}

/// How the runtime wrapper turns a request into edits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeMode {
    /// CDI for a container whose request names CDI devices only (or that
    /// carries CDI annotations), legacy for the others.
    #[default]
    Auto,
    /// The planner's edits from this host's driver, as the hook injects.
    Legacy,
    /// The named devices' edits from the CDI specs; a bare name (`0`, `all`)
    /// is one of `default-kind`.
    Cdi,
    /// NVIDIA's default since 1.18: the container's devices, bare or named
    /// `runtime.nvidia.com/gpu=<id>`, as edits made for them from this
    /// host's driver; here the planner's edits, as `legacy` writes them.
    #[serde(rename = "jit-cdi")]
    JitCdi,
    /// NVIDIA's mode for Jetson/IGX hosts: the planner's edits from the
    /// host's CSV mount specs, the host read as a CSV host whatever it
    /// looks like (`auto` and `legacy` take a CSV host's anyway).
    Csv,
}

/// CDI's spec directories, in increasing priority: `spec-dirs` unless set.
pub const CDI_SPEC_DIRS: &[&str] = &["/etc/cdi", "/var/run/cdi"];

/// `[runtime.cdi]`: NVIDIA's `nvidia-container-runtime.modes.cdi`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct RuntimeCdiConfig {
    /// The spec directories, in increasing priority.
    #[serde(deserialize_with = "spec_dirs")]
    pub spec_dirs: Vec<PathBuf>,
    /// The kind a bare device name belongs to (checked where a name is made of it).
    pub default_kind: String,
    /// Annotation key prefixes whose values list qualified device names.
    pub annotation_prefixes: Vec<String>,
    /// The kinds a qualified name in `NVIDIA_VISIBLE_DEVICES` may be of:
    /// the image's `ENV` can set the variable, so it reaches only these
    /// (and `default-kind`); annotations and device mounts, which the
    /// orchestrator sets, may name any kind.
    pub env_kinds: Vec<String>,
}

impl Default for RuntimeCdiConfig {
    fn default() -> Self {
        RuntimeCdiConfig {
            spec_dirs: CDI_SPEC_DIRS.iter().map(PathBuf::from).collect(),
            default_kind: crate::planning::request::CDI_KIND.into(),
            annotation_prefixes: vec!["cdi.k8s.io/".into()],
            env_kinds: vec![
                crate::planning::request::CDI_KIND.into(),
                crate::planning::request::IMEX_KIND.into(),
            ],
        }
    }
}

/// Parses `spec-dirs`: absolute paths.
fn spec_dirs<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Vec<PathBuf>, D::Error> {
    let list = Vec::<PathBuf>::deserialize(deserializer)?;
    if let Some(bad) = list.iter().find(|d| !d.is_absolute()) {
        return Err(serde::de::Error::custom(format!(
            "{} is not an absolute path",
            bad.display()
        )));
    }
    Ok(list)
}

/// Parses the runtime list: non-empty, each a plain name or an absolute path.
fn runtimes<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Vec<String>, D::Error> {
    let list = Vec::<String>::deserialize(deserializer)?;
    if list.is_empty() {
        return Err(serde::de::Error::custom(
            "empty: name at least one runtime, e.g. [\"runc\"]",
        ));
    }
    for item in &list {
        if item.is_empty() || (item.contains('/') && !item.starts_with('/')) {
            return Err(serde::de::Error::custom(format!(
                "{item:?} is neither a plain name (runc) nor an absolute path"
            )));
        }
    }
    Ok(list)
}

impl Default for Config {
    fn default() -> Self {
        Config {
            accept_env_when_unprivileged: true,
            accept_volume_mounts: false,
            supported_capabilities: Capabilities::all(),
            disable_require: false,
            deadline_ms: DEFAULT_DEADLINE_MS,
            driver: DriverConfig::default(),
            log: LogConfig::default(),
            cuda_compat: CudaCompatConfig::default(),
            runtime: RuntimeConfig::default(),
            grant_device_cgroup: true,
            systemd_device_allow: true,
            ignore_imex_channel_requests: false,
            no_additional_gids: false,
            nvidia_config: Some(PathBuf::from(nvidia::DEFAULT_PATH)),
            nvidia: nvidia::Report::default(),
        }
    }
}

/// Parses an optional absolute path: `""` for none.
fn optional_path<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<PathBuf>, D::Error> {
    let text = String::deserialize(deserializer)?;
    match text.as_str() {
        "" => Ok(None),
        path if path.starts_with('/') => Ok(Some(PathBuf::from(path))),
        path => Err(serde::de::Error::custom(format!(
            "{path:?} is not an absolute path (or \"\" for none)"
        ))),
    }
}

/// Parses a capability list where the file is read, naming what it takes.
fn capabilities<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Capabilities, D::Error> {
    let text = String::deserialize(deserializer)?;
    Capabilities::parse(&text).map_err(|e| {
        serde::de::Error::custom(format!(
            "{e}; expected a comma list of compute, utility, video, graphics, display, ngx, compat32 or all"
        ))
    })
}

/// What to do with an image's CUDA forward-compatibility libraries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompatMode {
    /// Put the compat directory first in the injected loader configuration and cache when it is newer than the host driver.
    #[default]
    Ldconfig,
    /// Ignore compat libraries.
    Disabled,
}

/// `[cuda-compat]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct CudaCompatConfig {
    /// `ldconfig` (default) or `disabled`.
    pub mode: CompatMode,
}

/// `deadline-ms` unless set: [`crate::util::deadline::DEFAULT`].
const DEFAULT_DEADLINE_MS: u64 = 15_000;

/// The largest `deadline-ms` taken: 10 min, beyond which a start is not waited for.
const MAX_DEADLINE_MS: u64 = 600_000;

impl Config {
    /// The capabilities this host offers.
    pub fn supported(&self) -> &Capabilities {
        &self.supported_capabilities
    }

    /// The bound on each entry point a runtime waits for.
    pub fn deadline(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.deadline_ms)
    }
}

/// The host trees that discovery reads from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct DriverConfig {
    /// Host tree holding the driver's libraries, binaries, `etc/ld.so.cache` and `lib/firmware`.
    pub root: PathBuf,
    /// Tree whose `dev/` holds the `nvidia*` nodes.
    pub dev_root: PathBuf,
    /// The procfs to read `driver/nvidia/*` and `devices` from.
    pub proc_root: PathBuf,
    /// The sysfs to find each GPU's DRM nodes in (`bus/pci/devices/<bus>/drm/`).
    pub sys_root: PathBuf,
    /// Root-only directory where the hook keeps a validated snapshot of what
    /// it found in the driver root (see `driver::snapshot`); `""` keeps none.
    #[serde(deserialize_with = "optional_path")]
    pub snapshot_dir: Option<PathBuf>,
    /// Directories inside the driver root searched for the driver's
    /// libraries, before the standard ones, where its loader cache lists none.
    pub library_search_paths: Vec<PathBuf>,
    /// Which CSV files a CSV (Jetson) host's inventory reads: set by the
    /// commands that take NVIDIA's `--csv.*` flags and modes, never by the file.
    #[serde(skip)]
    pub csv: CsvSelection,
}

/// Which CSV mount-spec files are read on a CSV (Jetson) host, and which
/// of their `sym` entries are ignored (NVIDIA's `--csv.*` flags).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CsvSelection {
    /// The files, as host paths (`--csv.file`); `None` for NVIDIA's base
    /// files (`devices.csv`, `drivers.csv`, `l4t.csv`) in
    /// `/etc/nvidia-container-runtime/host-files-for-container.d` inside
    /// the driver root.
    pub files: Option<Vec<PathBuf>>,
    /// Patterns of `sym` entries to ignore (`--csv.ignore-pattern`).
    pub ignore_patterns: Vec<String>,
    /// Every CSV file of the directory instead of the base files, where
    /// `files` names none (an image's `NVIDIA_REQUIRE_JETPACK=csv-mounts=all`).
    pub all: bool,
    /// Whether the host is taken as a CSV host whatever it looks like
    /// (NVIDIA's `csv` modes).
    pub force: bool,
}

/// Where snapshots go unless the config says otherwise: memory, emptied at boot.
pub const DEFAULT_SNAPSHOT_DIR: &str = "/run/oci-nvidia-hook";

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            root: PathBuf::from("/"),
            dev_root: PathBuf::from("/"),
            proc_root: PathBuf::from("/proc"),
            sys_root: PathBuf::from("/sys"),
            snapshot_dir: Some(PathBuf::from(DEFAULT_SNAPSHOT_DIR)),
            library_search_paths: Vec::new(),
            csv: CsvSelection::default(),
        }
    }
}

/// How verbose the log is; the names the config file accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Only failures.
    Error,
    /// Failures and things a user should fix.
    Warn,
    /// One line per container, plus the above.
    #[default]
    Info,
    /// Every decision discovery and planning make.
    Debug,
}

impl From<LogLevel> for log::LevelFilter {
    fn from(level: LogLevel) -> Self {
        match level {
            LogLevel::Error => log::LevelFilter::Error,
            LogLevel::Warn => log::LevelFilter::Warn,
            LogLevel::Info => log::LevelFilter::Info,
            LogLevel::Debug => log::LevelFilter::Debug,
        }
    }
}

/// Logging settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct LogConfig {
    /// The most verbose level written.
    pub level: LogLevel,
    /// A file to append to as well as stderr; empty for none. Runtimes often swallow a hook's stderr.
    pub file: PathBuf,
}

impl LogConfig {
    /// The log file, if one is configured.
    pub fn file(&self) -> Option<&Path> {
        (!self.file.as_os_str().is_empty()).then_some(self.file.as_path())
    }
}

impl Config {
    /// Loads `explicit` if given, else the default path, where a missing file means defaults.
    pub fn load(explicit: Option<&Path>) -> Result<Config> {
        match explicit {
            Some(path) => Config::load_at(path, true),
            None => Config::load_at(Path::new(DEFAULT_PATH), false),
        }
    }

    fn load_at(path: &Path, must_exist: bool) -> Result<Config> {
        let text = match read_text(path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == io::ErrorKind::NotFound && !must_exist => None,
            Err(source) => {
                return Err(Error::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let config = match &text {
            Some(text) => Config::parse(path, text)?,
            None => Config::default(),
        };
        let Some(nvidia_path) = config.nvidia_config.clone() else {
            return Ok(config);
        };
        match read_text(&nvidia_path) {
            Ok(nvidia_text) => Config::with_nvidia(
                path,
                text.as_deref().unwrap_or(""),
                &nvidia_path,
                &nvidia_text,
            ),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(config),
            Err(source) => Err(Error::Read {
                path: nvidia_path,
                source,
            }),
        }
    }

    /// Loads `path`, which NVIDIA's hook's `-config` named: our own file,
    /// or one in NVIDIA's format, read as NVIDIA's under our default file.
    pub fn load_ours_or_nvidias(path: &Path) -> Result<Config> {
        let text = read_text(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        if !nvidia::is_nvidias(&text) {
            return Config::parse(path, &text);
        }
        let default = Path::new(DEFAULT_PATH);
        let ours = match read_text(default) {
            Ok(ours) => {
                Config::parse(default, &ours)?;
                ours
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
            Err(source) => {
                return Err(Error::Read {
                    path: default.to_path_buf(),
                    source,
                })
            }
        };
        Config::with_nvidia(default, &ours, path, &text)
    }

    /// Our file's text (already known valid) with NVIDIA's file's keys laid
    /// under it: where both set a thing, ours wins.
    pub fn with_nvidia(
        path: &Path,
        text: &str,
        nvidia_path: &Path,
        nvidia_text: &str,
    ) -> Result<Config> {
        let nvidia_table: toml::Table =
            toml::from_str(nvidia_text).map_err(|e| parse_error(nvidia_path, nvidia_text, &e))?;
        let ours: toml::Table = toml::from_str(text).map_err(|e| parse_error(path, text, &e))?;
        let digest = digest(nvidia_text.as_bytes());
        let (under, report) = nvidia::translate(nvidia_path, &nvidia_table, &ours, digest)
            .map_err(|bad| Error::Nvidia {
                path: nvidia_path.to_path_buf(),
                key: bad.key,
                value: escape_controls(&bad.value),
                reason: bad.reason,
            })?;
        let merged = nvidia::merge(under, &ours);
        let mut config = Config::deserialize(toml::Value::Table(merged))
            .map_err(|e| nvidia_culprit(nvidia_path, &report, &e.to_string()))?;
        config
            .validate(path)
            .map_err(|e| nvidia_culprit(nvidia_path, &report, &e.to_string()))?;
        config.nvidia = report;
        Ok(config)
    }

    /// Parses configuration text; `path` names the file in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Config> {
        let config: Config = toml::from_str(text).map_err(|e| parse_error(path, text, &e))?;
        config.validate(path)?;
        Ok(config)
    }

    fn validate(&self, path: &Path) -> Result<()> {
        let roots = [
            ("driver.root", &self.driver.root),
            ("driver.dev-root", &self.driver.dev_root),
            ("driver.proc-root", &self.driver.proc_root),
            ("driver.sys-root", &self.driver.sys_root),
        ];
        let search = self.driver.library_search_paths.iter();
        for (key, value) in roots
            .into_iter()
            .chain(search.map(|p| ("driver.library-search-paths", p)))
        {
            if !value.is_absolute() {
                return Err(Error::Invalid {
                    path: path.to_path_buf(),
                    key,
                    value: value.display().to_string(),
                    reason: "must be an absolute path",
                });
            }
        }
        if !(1..=MAX_DEADLINE_MS).contains(&self.deadline_ms) {
            return Err(Error::Invalid {
                path: path.to_path_buf(),
                key: "deadline-ms",
                value: self.deadline_ms.to_string(),
                reason: "must be from 1 to 600000 (10 min)",
            });
        }
        if let Some(file) = self.log.file() {
            if !file.is_absolute() {
                return Err(Error::Invalid {
                    path: path.to_path_buf(),
                    key: "log.file",
                    value: file.display().to_string(),
                    reason: "must be an absolute path",
                });
            }
        }
        Ok(())
    }
}

/// The parser's `error` in `text`, the file `path`, with its line and column.
fn parse_error(path: &Path, text: &str, error: &toml::de::Error) -> Error {
    let (line, column) = error
        .span()
        .map(|span| line_and_column(text, span.start))
        .unwrap_or((1, 1));
    Error::Parse {
        path: path.to_path_buf(),
        line,
        column,
        message: escape_controls(error.message().trim()),
    }
}

/// A file's text, bounded.
fn read_text(path: &Path) -> io::Result<String> {
    crate::util::hostfile::read(path, MAX_SIZE).and_then(|data| {
        String::from_utf8(data).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    })
}

/// An error for values NVIDIA's file gave that our config refuses (our own
/// file alone was valid): it names the keys that were applied from it.
fn nvidia_culprit(path: &Path, report: &nvidia::Report, message: &str) -> Error {
    let applied: Vec<&str> = report
        .findings
        .iter()
        .filter(|f| matches!(f.fate, nvidia::Fate::Applied { .. }))
        .map(|f| f.key.as_str())
        .collect();
    Error::Nvidia {
        path: path.to_path_buf(),
        key: applied.join(", "),
        value: "…".into(),
        reason: escape_controls(message.trim()),
    }
}

/// A digest of `bytes` (FNV-1a), stable across runs and builds.
fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One-based line and column of byte `offset` in `text`.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config> {
        Config::parse(Path::new("/etc/x.toml"), text)
    }

    #[test]
    fn empty_file_means_defaults() {
        let config = parse("").unwrap();
        assert_eq!(config, Config::default());
        assert_eq!(config.driver.root, Path::new("/"));
        assert_eq!(config.driver.proc_root, Path::new("/proc"));
        assert_eq!(config.driver.sys_root, Path::new("/sys"));
        assert_eq!(config.log.level, LogLevel::Info);
        assert_eq!(config.log.file(), None);
    }

    #[test]
    fn reads_every_key() {
        let config = parse(
            r#"
[driver]
root = "/run/nvidia/driver"
dev-root = "/run/nvidia/driver"
proc-root = "/sim/proc"
sys-root = "/sim/sys"
[log]
level = "debug"
file = "/var/log/oci-nvidia-hook.log"
"#,
        )
        .unwrap();
        assert_eq!(config.driver.root, Path::new("/run/nvidia/driver"));
        assert_eq!(config.driver.dev_root, Path::new("/run/nvidia/driver"));
        assert_eq!(config.driver.proc_root, Path::new("/sim/proc"));
        assert_eq!(config.driver.sys_root, Path::new("/sim/sys"));
        assert_eq!(config.log.level, LogLevel::Debug);
        assert_eq!(
            config.log.file(),
            Some(Path::new("/var/log/oci-nvidia-hook.log"))
        );
    }

    #[test]
    fn deadline_is_15_s_unless_set_within_10_min() {
        assert_eq!(
            Config::default().deadline(),
            crate::util::deadline::DEFAULT,
            "the default is the deadline module's"
        );
        let config = parse("deadline-ms = 2500\n").unwrap();
        assert_eq!(config.deadline(), std::time::Duration::from_millis(2500));
        for bad in ["0", "600001"] {
            let err = parse(&format!("deadline-ms = {bad}\n")).unwrap_err();
            assert!(err.to_string().contains("deadline-ms"), "{err}");
        }
    }

    #[test]
    fn snapshot_dir_is_absolute_or_empty_for_none() {
        assert_eq!(
            Config::default().driver.snapshot_dir.as_deref(),
            Some(Path::new(DEFAULT_SNAPSHOT_DIR))
        );
        let config = parse("[driver]\nsnapshot-dir = \"/var/lib/x\"\n").unwrap();
        assert_eq!(
            config.driver.snapshot_dir.as_deref(),
            Some(Path::new("/var/lib/x"))
        );
        let config = parse("[driver]\nsnapshot-dir = \"\"\n").unwrap();
        assert_eq!(config.driver.snapshot_dir, None);
        let err = parse("[driver]\nsnapshot-dir = \"run/x\"\n").unwrap_err();
        assert!(err.to_string().contains("absolute"), "{err}");
    }

    #[test]
    fn unknown_key_is_an_error_naming_file_and_line() {
        let err = parse("[driver]\nroot = \"/\"\nrooot = \"/x\"\n").unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::Parse { line: 3, .. }), "{text}");
        assert!(
            text.contains("/etc/x.toml") && text.contains("rooot"),
            "{text}"
        );
    }

    #[test]
    fn runtimes_are_names_or_absolute_paths_and_never_empty() {
        assert_eq!(Config::default().runtime.runtimes, ["runc", "crun"]);
        let config = parse("[runtime]\nruntimes = [\"/usr/local/sbin/runc\", \"crun\"]\n").unwrap();
        assert_eq!(config.runtime.runtimes, ["/usr/local/sbin/runc", "crun"]);
        for bad in ["[]", "[\"\"]", "[\"bin/runc\"]"] {
            let err = parse(&format!("[runtime]\nruntimes = {bad}\n")).unwrap_err();
            assert!(matches!(err, Error::Parse { line: 2, .. }), "{bad}: {err}");
        }
    }

    #[test]
    fn unknown_section_is_an_error() {
        assert!(matches!(
            parse("[drivers]\n"),
            Err(Error::Parse { line: 1, .. })
        ));
    }

    #[test]
    fn invalid_toml_names_the_line() {
        let err = parse("[log]\nlevel = \"info\"\nfile = \n").unwrap_err();
        assert!(matches!(err, Error::Parse { line: 3, .. }), "{err}");
    }

    #[test]
    fn errors_stay_on_one_line() {
        // An invalid value holding a newline must not break the one-line error.
        let err = parse("[cuda-compat]\nmode = \"l\\nonfig\"\n")
            .unwrap_err()
            .to_string();
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn bad_level_is_refused() {
        let err = parse("[log]\nlevel = \"verbose\"\n").unwrap_err();
        assert!(matches!(err, Error::Parse { line: 2, .. }), "{err}");
    }

    #[test]
    fn relative_roots_are_refused() {
        let err = parse("[driver]\nroot = \"run/nvidia\"\n").unwrap_err();
        assert!(err.to_string().contains("driver.root"), "{err}");
    }

    #[test]
    fn missing_explicit_file_is_an_error_naming_it() {
        let err = Config::load(Some(Path::new("/nonexistent/oci-nvidia-hook.toml"))).unwrap_err();
        assert!(matches!(err, Error::Read { .. }));
        assert!(
            err.to_string()
                .contains("/nonexistent/oci-nvidia-hook.toml"),
            "{err}"
        );
    }

    #[test]
    fn reads_policy_keys() {
        let config = parse(
            "accept-env-when-unprivileged = false\naccept-volume-mounts = true\n\
             supported-capabilities = \"utility,compute\"\ndisable-require = true\n\
             [cuda-compat]\nmode = \"disabled\"\n",
        )
        .unwrap();
        assert!(!config.accept_env_when_unprivileged);
        assert!(config.accept_volume_mounts);
        assert_eq!(*config.supported(), Capabilities::default_set());
        assert!(config.disable_require);
        assert_eq!(config.cuda_compat.mode, CompatMode::Disabled);
        let defaults = parse("").unwrap();
        assert!(
            defaults.accept_env_when_unprivileged
                && !defaults.accept_volume_mounts
                && !defaults.disable_require
        );
        assert_eq!(*defaults.supported(), Capabilities::all());
        assert_eq!(defaults.cuda_compat.mode, CompatMode::Ldconfig);
    }

    #[test]
    fn bad_supported_capabilities_are_refused_with_file_and_line() {
        // Never read as "every capability": that would offer what the host refuses.
        let err = parse("disable-require = false\nsupported-capabilities = \"compute,cuda\"\n")
            .unwrap_err();
        assert!(matches!(err, Error::Parse { line: 2, .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("/etc/x.toml") && text.contains("line 2") && text.contains("cuda"),
            "{text}"
        );
        assert!(matches!(
            parse("[cuda-compat]\nmode = \"auto\"\n"),
            Err(Error::Parse { line: 2, .. })
        ));
    }

    #[test]
    fn missing_default_file_means_defaults() {
        let config = Config::load_at(Path::new("/nonexistent/config.toml"), false).unwrap();
        assert_eq!(config, Config::default());
    }

    #[test]
    fn line_and_column_are_one_based() {
        assert_eq!(line_and_column("ab\ncd", 0), (1, 1));
        assert_eq!(line_and_column("ab\ncd", 4), (2, 2));
        assert_eq!(line_and_column("ab", 99), (1, 3));
    }

    /// NVIDIA's `nvidia-container-runtime.mode` values since 1.18, as
    /// `nvidia-ctk config --set nvidia-container-runtime.mode=…` writes them.
    #[test]
    fn every_runtime_mode_nvidia_names_parses() {
        for (value, mode) in [
            ("auto", RuntimeMode::Auto),
            ("legacy", RuntimeMode::Legacy),
            ("cdi", RuntimeMode::Cdi),
            ("jit-cdi", RuntimeMode::JitCdi),
            ("csv", RuntimeMode::Csv),
        ] {
            let text = format!("[runtime]\nmode = \"{value}\"\n");
            let config = Config::parse(Path::new("/c.toml"), &text).unwrap();
            assert_eq!(config.runtime.mode, mode, "{value}");
        }
        assert!(Config::parse(Path::new("/c.toml"), "[runtime]\nmode = \"tegra\"\n").is_err());
    }

    /// A host set up only by NVIDIA's instructions: its file takes effect
    /// under ours, where ours is silent.
    #[test]
    fn nvidias_file_is_read_under_ours() {
        let dir = tempfile::tempdir().unwrap();
        let nvidia = dir.path().join("nvidia.toml");
        std::fs::write(
            &nvidia,
            "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n\
             accept-nvidia-visible-devices-as-volume-mounts = true\n\
             [nvidia-container-cli]\nno-cgroups = true\nload-kmods = true\n\
             [nvidia-container-runtime]\nlog-level = \"debug\"\n",
        )
        .unwrap();
        let ours = dir.path().join("ours.toml");
        std::fs::write(
            &ours,
            format!(
                "nvidia-config = \"{}\"\n[log]\nlevel = \"error\"\n",
                nvidia.display()
            ),
        )
        .unwrap();
        let config = Config::load(Some(&ours)).unwrap();
        assert!(!config.accept_env_when_unprivileged);
        assert!(config.accept_volume_mounts);
        assert!(!config.grant_device_cgroup);
        assert_eq!(config.log.level, LogLevel::Error, "ours wins");
        assert_eq!(config.nvidia.path.as_deref(), Some(nvidia.as_path()));
        assert_eq!(config.nvidia.findings.len(), 5);
        // Without NVIDIA's file, or with none configured: our defaults.
        std::fs::write(&ours, "nvidia-config = \"\"\n").unwrap();
        let config = Config::load(Some(&ours)).unwrap();
        assert!(config.accept_env_when_unprivileged && config.nvidia.path.is_none());
        std::fs::remove_file(&nvidia).unwrap();
        std::fs::write(&ours, format!("nvidia-config = \"{}\"\n", nvidia.display())).unwrap();
        assert_eq!(
            Config::load(Some(&ours)).unwrap().nvidia,
            nvidia::Report::default()
        );
    }

    #[test]
    fn a_bad_nvidia_file_is_refused_naming_it() {
        let at = |text: &str| {
            Config::with_nvidia(Path::new("/ours.toml"), "", Path::new("/nv.toml"), text)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            at("disable-require = true\n[x\n"),
            "invalid config file /nv.toml, line 2, column 3: unclosed table, expected `]`"
        );
        let err = at("[nvidia-container-cli]\nroot = true\n");
        assert_eq!(
            err,
            "invalid NVIDIA config file /nv.toml: nvidia-container-cli.root = true: expected a string"
        );
        // A value of the right type that ours refuses names the keys taken.
        let err = at("[nvidia-container-runtime]\nruntimes = []\n");
        assert!(
            err.starts_with(
                "invalid NVIDIA config file /nv.toml: nvidia-container-runtime.runtimes = …: "
            ),
            "{err}"
        );
        assert!(!err.contains('\n'), "{err}");
    }
}

//! The application layer: everything the binary can be asked, as one plain
//! [`Operation`], and the one place that runs it.
//!
//! Each front ([`crate::front`]: ours, and each of NVIDIA's names) parses
//! its command line into an [`Invocation`]: an operation and the
//! [`Overrides`] its flags carry. [`run`] then does, once for every front:
//! load the configuration (under the deadline when a runtime waits), apply
//! the overrides, set up the log, log what the front noted, run the
//! operation, and say how it ended ([`Outcome`]). The operations' own
//! modules below do the work; none loads the configuration or sets up the
//! log itself, and none knows which front asked.

mod cdi_spec;
pub mod device_nodes;
mod doctor;
pub mod engine;
mod info;
mod list;
pub mod nvidia_cli;
pub mod nvidia_hooks;
pub mod settings;
mod specs;
pub mod system;

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::PathBuf;

use thiserror::Error;

pub use cdi_spec::{driver_of, Generate, DEFAULT_STRATEGIES, MANAGEMENT_KIND};
pub use doctor::Options as DoctorOptions;
pub use list::Ask;

use crate::apply::inject::LinuxSys;
use crate::config::{self, CompatMode, Config, LogLevel, RuntimeMode};
use crate::specs::cdi_hook_args::SpecMade;
use crate::{
    apply::hook, host::driver, planning::bundle, planning::planner, util::deadline, util::logging,
};

/// Why an operation failed.
#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] config::Error),
    #[error(transparent)]
    Logging(#[from] logging::Error),
    #[error(transparent)]
    Driver(#[from] driver::Error),
    #[error(transparent)]
    Planner(#[from] planner::Error),
    #[error(transparent)]
    Bundle(#[from] bundle::Error),
    #[error("cannot write output: {0}")]
    Output(#[from] io::Error),
    #[error("cannot encode JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Hook(#[from] hook::Error),
    #[error("cannot make the /dev/char link {path}: {source}")]
    DevChar { path: PathBuf, source: io::Error },
    #[error("cannot make the NVIDIA control device nodes: {path} lists no {name} major (the module is not loaded; --load-kernel-modules loads it)")]
    NoDeviceMajor { path: PathBuf, name: &'static str },
    #[error("refusing to replace {path}: it {problem}; remove it to have it made")]
    NodeInTheWay {
        path: PathBuf,
        problem: driver::NodeProblem,
    },
    #[error("cannot open {path} to make device nodes in: {source}")]
    DevDir { path: PathBuf, source: io::Error },
    #[error("cannot make {path} (c {major}:{minor}): {source}")]
    Mknod {
        path: PathBuf,
        major: u32,
        minor: u32,
        source: io::Error,
    },
    #[error("{command} failed: {reason}")]
    Modprobe { command: String, reason: String },
    #[error("refusing to run as hook stage {stage:?}: oci-nvidia-hook runs only at prestart or createRuntime (in the runtime's namespaces, before pivot_root)")]
    Stage { stage: String },
    #[error("refusing to run the CDI hook at stage {stage:?}: it runs only at createRuntime (in the runtime's namespaces, before pivot_root)")]
    CdiStage { stage: String },
    #[error(transparent)]
    Cdi(#[from] crate::specs::cdi::Error),
    #[error("cannot name this program or its config for the spec's hook: {source}")]
    Exe { source: io::Error },
    #[error(transparent)]
    Runtime(crate::specs::runtime::Error),
    #[error("cannot read CDI spec {path}: {source}")]
    ReadSpec { path: PathBuf, source: io::Error },
    #[error("not removing {path}: {reason}; only a spec oci-nvidia-hook generated is removed")]
    NotOurSpec { path: PathBuf, reason: String },
    #[error("cannot remove {path}: {source}")]
    RemoveSpec { path: PathBuf, source: io::Error },
    #[error("{count} {} in {path}", if *.count == 1 { "problem" } else { "problems" })]
    InvalidSpec { count: usize, path: PathBuf },
    #[error("{0}")]
    Usage(String),
    #[error("list: nothing on this host matches the options given (no driver file of those kinds and capabilities, no such device)")]
    NothingListed,
    #[error(transparent)]
    Engine(#[from] crate::specs::engine_config::Error),
    #[error(transparent)]
    Inject(Box<crate::apply::inject::Error>),
    #[error(transparent)]
    Image(#[from] crate::planning::image::Error),
}

impl From<crate::apply::inject::Error> for Error {
    fn from(e: crate::apply::inject::Error) -> Self {
        Error::Inject(Box::new(e))
    }
}

/// Result of an operation.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything the binary can be asked to do, whichever front asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// The host driver's inventory (`info`).
    Info {
        /// JSON instead of text.
        json: bool,
    },
    /// What a container with a request would receive (`list`).
    List {
        /// Where the request comes from.
        ask: Ask,
        /// The whole plan as JSON instead of host paths.
        json: bool,
    },
    /// Write this host's CDI spec (`cdi generate`, `nvidia-ctk cdi generate`).
    CdiGenerate(Generate),
    /// The device names a spec for this host offers (`cdi list`).
    CdiNames {
        /// `--device-name-strategy`, as given.
        strategies: String,
    },
    /// Check a spec against the schema and this host (`cdi validate`).
    CdiValidate {
        /// The spec file.
        file: PathBuf,
    },
    /// Every device every spec in the spec directories defines (`nvidia-ctk cdi list`).
    CdiSpecDevices {
        /// The directories; none means the standard ones.
        spec_dirs: Vec<PathBuf>,
    },
    /// The prestart (or createRuntime) hook: the container's request injected.
    Prestart {
        /// The entry point's name in the deadline's line.
        entry: &'static str,
    },
    /// The createRuntime hook of a spec we generated.
    CdiHook {
        /// The stage it was run at; only createRuntime is accepted.
        stage: String,
        /// How the spec was made.
        made: SpecMade,
    },
    /// A hook of NVIDIA's CDI specs (`nvidia-cdi-hook`, `nvidia-ctk hook`).
    NvidiaHook {
        /// The entry point's name in the deadline's line.
        entry: &'static str,
        /// The hook and its arguments.
        hook: nvidia_hooks::Hook,
    },
    /// `nvidia-container-cli info`.
    NvidiaCliInfo {
        /// `--csv`.
        csv: bool,
    },
    /// `nvidia-container-cli list`.
    NvidiaCliList(nvidia_cli::List),
    /// `nvidia-container-cli configure`, a prestart hook.
    NvidiaCliConfigure(nvidia_cli::Configure),
    /// Runtime mode: edit the spec, then exec the real runtime with `args`.
    Runtime {
        /// The runtime's command line, passed on unchanged.
        args: Vec<OsString>,
    },
    /// The layered diagnosis; it loads the configuration itself.
    Doctor(DoctorOptions),
    /// Register our runtime with a container engine (`nvidia-ctk runtime configure`).
    EngineConfigure(engine::Configure),
    /// Print or change the config file under NVIDIA's key names (`nvidia-ctk config`).
    ConfigEdit(settings::Edit),
    /// The `/dev/char` links of the driver's nodes (`nvidia-ctk system create-dev-char-symlinks`).
    DevCharSymlinks(system::DevCharLinks),
    /// The driver's control device nodes (`nvidia-ctk system create-device-nodes`).
    DeviceNodes(device_nodes::DeviceNodes),
    /// A hook stage the hook refuses to run at.
    RefusedStage {
        /// The stage given.
        stage: String,
    },
}

impl Operation {
    /// The entry point's name when a runtime waits for this operation,
    /// which then runs under a deadline (see [`crate::util::deadline`]); `None`
    /// for what people run.
    pub fn waited_for(&self) -> Option<&'static str> {
        match self {
            Operation::Prestart { entry } | Operation::NvidiaHook { entry, .. } => Some(entry),
            Operation::CdiHook { .. } => Some("cdi-hook"),
            Operation::Runtime { .. } => Some("the runtime wrapper"),
            Operation::NvidiaCliConfigure(_) => Some("nvidia-container-cli configure"),
            Operation::Info { .. }
            | Operation::List { .. }
            | Operation::CdiGenerate(_)
            | Operation::CdiNames { .. }
            | Operation::CdiValidate { .. }
            | Operation::CdiSpecDevices { .. }
            | Operation::NvidiaCliInfo { .. }
            | Operation::NvidiaCliList(_)
            | Operation::Doctor(_)
            | Operation::EngineConfigure(_)
            | Operation::ConfigEdit(_)
            | Operation::DevCharSymlinks(_)
            | Operation::DeviceNodes(_)
            | Operation::RefusedStage { .. } => None,
        }
    }
}

/// What a front's flags change in the configuration an operation runs with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// The config file to load instead of the default path.
    pub config: Option<PathBuf>,
    /// `config` may be in NVIDIA's format (NVIDIA's hook's `-config`):
    /// such a file is read as NVIDIA's, under our default file.
    pub config_may_be_nvidias: bool,
    /// The log level, instead of the file's.
    pub log_level: Option<LogLevel>,
    /// The log file, instead of the file's.
    pub log_file: Option<PathBuf>,
    /// The driver root, instead of the file's.
    pub driver_root: Option<PathBuf>,
    /// The dev root, instead of the file's.
    pub dev_root: Option<PathBuf>,
    /// A CSV (Jetson/Tegra) host's CSV selection, the host read as one
    /// whatever it looks like (a spec made for one records it).
    pub csv: Option<config::CsvSelection>,
    /// The CUDA compat mode, instead of the file's.
    pub cuda_compat: Option<CompatMode>,
    /// The runtime wrapper's mode, instead of the file's.
    pub runtime_mode: Option<RuntimeMode>,
    /// What the front accepted and ignored, logged once the log is set up.
    pub notes: Vec<Note>,
}

impl Overrides {
    /// The configuration these overrides name: the file `config`, read as
    /// ours or, where it may be, as NVIDIA's.
    fn load(&self) -> config::Result<Config> {
        match (&self.config, self.config_may_be_nvidias) {
            (Some(path), true) => Config::load_ours_or_nvidias(path),
            (path, _) => Config::load(path.as_deref()),
        }
    }

    /// `config` with these overrides in it.
    pub fn apply(&self, mut config: Config) -> Config {
        if let Some(root) = &self.driver_root {
            config.driver.root = root.clone();
        }
        if let Some(root) = &self.dev_root {
            config.driver.dev_root = root.clone();
        }
        if let Some(csv) = &self.csv {
            config.driver.csv = config::CsvSelection {
                force: true,
                ..csv.clone()
            };
        }
        if let Some(level) = self.log_level {
            config.log.level = level;
        }
        if let Some(file) = &self.log_file {
            config.log.file = file.clone();
        }
        if let Some(mode) = self.cuda_compat {
            config.cuda_compat.mode = mode;
        }
        if let Some(mode) = self.runtime_mode {
            config.runtime.mode = mode;
        }
        config
    }
}

/// A line a front wants logged once the log exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Its level.
    pub level: log::Level,
    /// The line.
    pub text: String,
}

impl Note {
    /// A note at debug level.
    pub fn debug(text: impl Into<String>) -> Note {
        Note {
            level: log::Level::Debug,
            text: text.into(),
        }
    }
}

/// What a command line asks for, as a front reads it.
// Made once per process and matched at once: boxing the large variant
// would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    /// Run an operation with these overrides.
    Run(Operation, Overrides),
    /// Print text, and nothing else (versions, help).
    Print(String),
    /// Say this on stderr and succeed: a hook of a newer spec than this
    /// binary knows, skipped as NVIDIA's hooks skip it.
    Warn(String),
    /// Nothing to do (`poststart`, `poststop`).
    Nothing,
}

/// How an operation that ran to its end came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done.
    Done,
    /// Doctor ran, and its report says which checks failed.
    Unhealthy,
}

/// Runs `operation` with `overrides`: the configuration loaded once
/// (bounded by the deadline when a runtime waits), the log set up once,
/// then the operation, writing to stdout.
pub fn run(operation: &Operation, overrides: &Overrides) -> Result<Outcome> {
    let loaded = match operation {
        // It may be mending the file: the defaults, for the log.
        Operation::ConfigEdit(_) => Ok(overrides.apply(Config::default())),
        _ => deadline::bounded_load(
            operation.waited_for(),
            || overrides.load().map(|c| overrides.apply(c)),
            Config::deadline,
        ),
    };
    let config = match operation {
        // A file that does not load is one of doctor's findings, and its
        // report is its output: no log is set up.
        Operation::Doctor(options) => {
            return Ok(
                match doctor::run(options, loaded, overrides.config.as_deref())? {
                    true => Outcome::Done,
                    false => Outcome::Unhealthy,
                },
            )
        }
        _ => set_up(operation, overrides, loaded)?,
    };
    // The one seam of every privileged call the operations make.
    let sys = LinuxSys::default();
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let config_path = overrides.config.as_deref();
    match operation {
        Operation::Info { json } => info::run(&config, *json, &mut out)?,
        Operation::List { ask, json } => list::run(&config, ask, *json, &mut out)?,
        Operation::CdiGenerate(generate) => {
            cdi_spec::generate(&config, config_path, generate, &mut out)?
        }
        Operation::CdiNames { strategies } => cdi_spec::list(&config, strategies, &mut out)?,
        Operation::CdiValidate { file } => cdi_spec::validate(&config, file, &mut out)?,
        Operation::CdiSpecDevices { spec_dirs } => specs::run(spec_dirs, &mut out)?,
        Operation::Prestart { .. } => hook::run(&config, io::stdin(), &sys)?,
        Operation::CdiHook { stage, made } => {
            if stage != crate::specs::cdi_hook_args::HOOK_STAGE {
                return Err(Error::CdiStage {
                    stage: stage.clone(),
                });
            }
            hook::run_granted(&config, io::stdin(), made, &sys)?
        }
        Operation::NvidiaHook { hook, .. } => nvidia_hooks::run(hook, &config, &sys)?,
        Operation::NvidiaCliInfo { csv } => nvidia_cli::info(&config, *csv, &mut out)?,
        Operation::NvidiaCliList(list) => nvidia_cli::list(&config, list, &mut out)?,
        Operation::NvidiaCliConfigure(configure) => {
            nvidia_cli::configure(&config, configure, &sys)?
        }
        Operation::Runtime { args } => {
            let error = Error::Runtime(crate::specs::runtime::run(&config, config_path, args));
            return Err(runtime_failed(args, error));
        }
        Operation::EngineConfigure(configure) => engine::configure(configure, &mut out)?,
        Operation::ConfigEdit(edit) => settings::run(edit, &mut out)?,
        Operation::DevCharSymlinks(asked) => {
            system::create_dev_char_symlinks(&config, asked, &mut out)?
        }
        Operation::DeviceNodes(asked) => {
            device_nodes::create_device_nodes(&config, asked, &device_nodes::LinuxCalls, &mut out)?
        }
        Operation::RefusedStage { stage } => {
            return Err(Error::Stage {
                stage: stage.clone(),
            })
        }
        // Returned above.
        Operation::Doctor(_) => {}
    }
    out.flush()?;
    Ok(Outcome::Done)
}

/// Logs `text`, a front's warning that ends its run (a hook a newer tool
/// wrote into a spec), where the default config sends the log: a runtime
/// swallows a hook's stderr, and the log file is where its user looks.
/// Bounded as a hook is; stderr alone when the config does not load.
pub fn warn(text: &str) {
    let loaded = deadline::bounded_load(
        Some("nvidia-cdi-hook"),
        || Config::load(None),
        Config::deadline,
    );
    match loaded.map(|config| logging::init(&config.log)) {
        Ok(Ok(())) => log::warn!("{text}"),
        _ => eprintln!("{text}"),
    }
}

/// The loaded configuration made ready: the log set up from it, then the
/// front's notes logged. A runtime wrapper's failure is also written
/// where its caller reads the runtime's errors.
fn set_up(
    operation: &Operation,
    overrides: &Overrides,
    loaded: config::Result<Config>,
) -> Result<Config> {
    let ready = loaded.map_err(Error::from).and_then(|config| {
        logging::init(&config.log)?;
        Ok(config)
    });
    match (ready, operation) {
        (Ok(config), _) => {
            for note in &overrides.notes {
                log::log!(note.level, "{}", note.text);
            }
            note_nvidia_config(&config);
            Ok(config)
        }
        (Err(e), Operation::Runtime { args }) => Err(runtime_failed(args, e)),
        (Err(e), _) => Err(e),
    }
}

/// Logs each key of NVIDIA's config file whose request is not done here,
/// once per content of the file: the first start after it changed (a
/// marker in the snapshot directory remembers; without one, every start).
fn note_nvidia_config(config: &Config) {
    let report = &config.nvidia;
    let (Some(path), Some(_)) = (&report.path, report.unhonoured().next()) else {
        return;
    };
    if let Some(dir) = &config.driver.snapshot_dir {
        if !first_note(dir, report.digest) {
            return;
        }
    }
    for finding in report.unhonoured() {
        if let config::nvidia::Fate::Unhonoured(why) = finding.fate {
            log::warn!(
                "{}: {} = {} is not honoured: {why} (doctor lists NVIDIA's keys)",
                path.display(),
                finding.key,
                finding.value
            );
        }
    }
}

/// Whether no note was made yet for the NVIDIA file whose digest is
/// `digest`: creates the marker that says so in the snapshots' state
/// directory (root's, checked as the snapshots' is). Where that directory
/// cannot be used (not root), every start notes.
fn first_note(dir: &std::path::Path, digest: u64) -> bool {
    use nix::fcntl::{openat, OFlag};
    let Ok(dir) = crate::host::driver::snapshot::state_dir(dir) else {
        return true;
    };
    let made = openat(
        &dir,
        format!("nvidia-config-{digest:016x}.noted").as_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    );
    !matches!(made, Err(nix::errno::Errno::EEXIST))
}

/// The runtime wrapper's `error`, also written to the runtime's log, where
/// the wrapper's caller reads errors.
fn runtime_failed(args: &[OsString], error: Error) -> Error {
    deadline::disarm();
    crate::specs::runtime::log_failure(args, &crate::util::error_line::error(&error));
    error
}

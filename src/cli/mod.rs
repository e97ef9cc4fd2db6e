//! The command line: options, and the commands that print the inventory and
//! the plan. Each command writes its whole output to stdout and returns an
//! error for `main` to report on one line.

mod cdi;
mod doctor;
pub mod fast;
mod info;
mod list;

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand, ValueEnum};
use thiserror::Error;

use crate::cdi::Format;
use crate::config::Config;
use crate::image::ImageLayout;
use crate::{bundle, driver, hook, planner};

/// What `--help` and the manual page's DESCRIPTION say of the whole command.
const LONG_ABOUT: &str = "Gives OCI containers NVIDIA GPUs. A runtime runs it as a prestart or \
createRuntime hook (a hooks.d file, Docker's --gpus, a config.json entry): it takes the \
request from the container's own NVIDIA_VISIBLE_DEVICES and NVIDIA_DRIVER_CAPABILITIES, \
checks NVIDIA_REQUIRE_*, and injects the device nodes and the host driver's files. \
info and list show what the host has and what a container would receive; cdi writes a \
Container Device Interface spec for engines that read one; runtime wraps runc and writes \
the GPUs into the container's spec. Configuration comes only from the file, never from \
the environment.";

/// Why a command failed.
#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] crate::config::Error),
    #[error(transparent)]
    Logging(#[from] crate::logging::Error),
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
    #[error("refusing to run as hook stage {stage:?}: oci-nvidia-hook runs only at prestart or createRuntime (in the runtime's namespaces, before pivot_root)")]
    Stage { stage: String },
    #[error("refusing to run the CDI hook at stage {stage:?}: it runs only at createRuntime (in the runtime's namespaces, before pivot_root)")]
    CdiStage { stage: String },
    #[error(transparent)]
    Cdi(#[from] crate::cdi::Error),
    #[error("cannot name this program or its config for the spec's hook: {source}")]
    Exe { source: io::Error },
    #[error(transparent)]
    Runtime(crate::runtime::Error),
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
    #[error("doctor: checks failed")]
    Unhealthy,
}

/// Result of a command.
pub type Result<T> = std::result::Result<T, Error>;

/// oci-nvidia-hook: gives OCI containers NVIDIA GPUs.
#[derive(Debug, PartialEq, Eq, Parser)]
#[command(name = "oci-nvidia-hook", version = VERSION, about, long_about = LONG_ABOUT)]
pub struct Cli {
    /// Configuration file [default: /etc/oci-nvidia-hook/config.toml, optional]
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Print the host driver's inventory: version, GPUs, device nodes, libraries.
    Info {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print what a container with this request would receive.
    List {
        /// GPUs, as NVIDIA_VISIBLE_DEVICES takes them: all, none, or a comma list of indices, GPU-<uuid> or PCI bus ids.
        #[arg(long, default_value = "all", value_name = "LIST")]
        device: String,
        /// Driver capabilities, as NVIDIA_DRIVER_CAPABILITIES takes them.
        #[arg(long, default_value = "utility,compute", value_name = "LIST")]
        capabilities: String,
        /// Library layout of the image the destinations are for.
        #[arg(long, value_enum, default_value = "debian")]
        layout: Layout,
        /// IMEX channels, as NVIDIA_IMEX_CHANNELS takes them: all, or a comma list.
        #[arg(long, value_name = "LIST")]
        imex_channels: Option<String>,
        /// A feature-gated device, as its NVIDIA_<NAME>=enabled asks (repeatable).
        #[arg(long, value_enum, value_name = "NAME")]
        enable: Vec<GatedName>,
        /// Print JSON with each item's container destination and mount options.
        #[arg(long)]
        json: bool,
        /// Plan for the container this OCI bundle describes, as the hook would: its
        /// environment, device mounts, privilege and rootfs (instead of the flags).
        #[arg(long, value_name = "DIR", conflicts_with_all = ["device", "capabilities", "layout", "imex_channels", "enable"])]
        bundle: Option<PathBuf>,
    },
    /// Container Device Interface: generate, list and validate the host's spec.
    Cdi {
        /// What to do with the spec.
        #[command(subcommand)]
        command: CdiCommand,
    },
    /// The createRuntime hook of a CDI spec we generated: loader cache, links
    /// and /proc/driver/nvidia mask, after the runtime added nodes and mounts.
    #[command(name = "cdi-hook")]
    CdiHook {
        /// The OCI stage it runs at; only createRuntime is accepted.
        stage: String,
        /// The driver version the spec was made for.
        #[arg(long, value_name = "VERSION")]
        driver_version: String,
        /// The capabilities the spec's mounts carry.
        #[arg(long, value_name = "LIST")]
        capabilities: String,
        /// The library layout of the spec's container paths.
        #[arg(long, value_enum)]
        layout: Layout,
        /// The host's MIG layout when the spec was made; another one now is refused.
        #[arg(long, value_name = "LAYOUT")]
        mig_layout: Option<String>,
    },
    /// Runtime mode: write a GPU container's devices, mounts and hook into its
    /// config.json on create/run, then exec the real runtime (runc) with these arguments.
    #[command(disable_help_flag = true)]
    Runtime {
        /// The runtime's own command line, passed on unchanged.
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "RUNC ARGS"
        )]
        args: Vec<std::ffi::OsString>,
    },
    /// Diagnose why a container does not see the GPU, layer by layer: host
    /// driver, runtime wiring, an image's needs, and a live container.
    Doctor(DoctorArgs),
    /// OCI hook: inject the GPUs the container asks for (state JSON on stdin).
    Prestart,
    /// OCI hook at createRuntime: the same point as prestart.
    #[command(name = "create-runtime", alias = "createRuntime")]
    CreateRuntime,
    /// Any other hook stage is refused.
    #[command(external_subcommand)]
    Other(Vec<String>),
}

impl Command {
    /// The entry point's name when a runtime waits for this command, which
    /// then runs under a deadline (see [`crate::deadline`]); `None` for the
    /// commands people run.
    pub fn waited_for(&self) -> Option<&'static str> {
        match self {
            Command::Prestart => Some("prestart"),
            Command::CreateRuntime => Some("createRuntime"),
            Command::CdiHook { .. } => Some("cdi-hook"),
            Command::Runtime { .. } => Some("the runtime wrapper"),
            _ => None,
        }
    }
}

/// `doctor`'s options.
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct DoctorArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also run the host's `nvidia-smi -L` (bounded to 10 s).
    #[arg(long)]
    pub host_smi: bool,
    /// An unpacked image to check against this host: its CUDA version and
    /// compat libraries are read (never executed).
    #[arg(long, value_name = "DIR")]
    pub image_rootfs: Option<PathBuf>,
    /// The image's OCI config (`skopeo inspect --config`, or `docker
    /// inspect` output), for its Env.
    #[arg(long, value_name = "FILE")]
    pub image_config: Option<PathBuf>,
    /// A container setting, after the image's (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// The image's CUDA version, stated directly.
    #[arg(long, value_name = "X.Y")]
    pub cuda: Option<String>,
    /// Start a throwaway container through this host's runc and the hook as installed.
    #[arg(long)]
    pub run: bool,
    /// Where the engines' files and processes are (hooks.d, daemon.json,
    /// crio.conf, containerd's config, /etc/cdi, /proc) [default: /].
    #[arg(long, value_name = "DIR")]
    pub host_root: Option<PathBuf>,
    /// The live check's half inside its container.
    #[arg(long, hide = true)]
    pub inside: bool,
}

/// What `cdi` does.
#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum CdiCommand {
    /// Write the spec for every GPU of this host (atomically, mode 0644).
    Generate {
        /// Where to write it; - for stdout.
        #[arg(long, default_value = crate::cdi::DEFAULT_OUTPUT, value_name = "FILE")]
        output: PathBuf,
        /// Encoding [default: from the output's extension, yaml for stdout].
        #[arg(long, value_enum)]
        format: Option<SpecFormat>,
        /// Device names to write: index (0, 0:1), uuid (GPU-…, MIG-…), or both.
        #[arg(long, default_value = cdi::DEFAULT_STRATEGIES, value_name = "LIST")]
        device_name_strategy: String,
        /// Capabilities whose files the spec mounts [default: all the config supports].
        #[arg(long, value_name = "LIST")]
        capabilities: Option<String>,
        /// Library layout of the container paths.
        #[arg(long, value_enum, default_value = "debian")]
        layout: Layout,
        /// With no driver to describe (the kernel module not loaded, or none of
        /// its libraries left in the driver root), remove the output and its IMEX
        /// spec (specs of ours only) instead of failing: what the refresh service runs.
        #[arg(long)]
        remove_without_driver: bool,
        /// The kind of host: auto (what discovery finds), nvml (a native
        /// driver) or wsl (a WSL2 host); nvml and wsl refuse the other.
        #[arg(long, value_enum, default_value = "auto")]
        mode: SpecMode,
    },
    /// Print the device names a spec for this host offers (nvidia.com/gpu=…).
    List {
        /// Device names: index, uuid, or both.
        #[arg(long, default_value = cdi::DEFAULT_STRATEGIES, value_name = "LIST")]
        device_name_strategy: String,
    },
    /// Check a spec (YAML or JSON, ours or another vendor's) against the CDI
    /// schema and this host; print one line per problem, exit 1 if any.
    Validate {
        /// The spec file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
}

/// The feature-gated devices `list --enable` names, in the order its
/// help lists them: each value is the name of a class of the
/// [`crate::device_class`] table, which says what it enables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GatedName {
    /// NVIDIA_GDS: GPUDirect Storage.
    Gds,
    /// NVIDIA_MOFED: the InfiniBand devices.
    Mofed,
    /// NVIDIA_NVSWITCH: the NVSwitch devices and the fabric manager.
    Nvswitch,
    /// NVIDIA_GDRCOPY: gdrdrv.
    Gdrcopy,
}

impl GatedName {
    /// The variable that enables it: its class's, found by its name
    /// (a test holds every value to a class, and every class to a value).
    fn variable(self) -> Option<&'static str> {
        let value = self.to_possible_value()?;
        let class = crate::device_class::Class::named(value.get_name())?;
        Some(class.row().variable)
    }
}

/// Spec encodings selectable on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SpecFormat {
    /// YAML.
    Yaml,
    /// JSON.
    Json,
}

impl From<SpecFormat> for Format {
    fn from(format: SpecFormat) -> Self {
        match format {
            SpecFormat::Yaml => Format::Yaml,
            SpecFormat::Json => Format::Json,
        }
    }
}

/// `cdi generate --mode`: the kind of host the spec is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SpecMode {
    /// The host discovery finds.
    Auto,
    /// A native driver.
    Nvml,
    /// A WSL2 host.
    Wsl,
}

impl From<SpecMode> for crate::cdi::Mode {
    fn from(mode: SpecMode) -> Self {
        match mode {
            SpecMode::Auto => crate::cdi::Mode::Auto,
            SpecMode::Nvml => crate::cdi::Mode::Nvml,
            SpecMode::Wsl => crate::cdi::Mode::Wsl,
        }
    }
}

/// Image layouts selectable on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Layout {
    /// /usr/lib/x86_64-linux-gnu (Debian, Ubuntu).
    Debian,
    /// /usr/lib64 (RHEL, Fedora, SUSE).
    Rpm,
}

impl From<ImageLayout> for Layout {
    fn from(layout: ImageLayout) -> Self {
        match layout {
            ImageLayout::Debian => Layout::Debian,
            ImageLayout::Rpm => Layout::Rpm,
        }
    }
}

impl From<Layout> for ImageLayout {
    fn from(layout: Layout) -> Self {
        match layout {
            Layout::Debian => ImageLayout::Debian,
            Layout::Rpm => ImageLayout::Rpm,
        }
    }
}

/// Runs `cli`'s command, writing to stdout. Each command but `doctor`
/// loads the configuration (from `--config` when given) and sets up the
/// log from it; `doctor` loads it itself: a broken one is a finding, and a
/// failing check is its exit status, not an error line.
pub fn run(cli: &Cli) -> Result<()> {
    let config_path = cli.config.as_deref();
    let loaded = || -> Result<Config> {
        let config = crate::deadline::bounded_load(
            cli.command.waited_for(),
            || Config::load(config_path),
            Config::deadline,
        )?;
        crate::logging::init(&config.log)?;
        Ok(config)
    };
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    match &cli.command {
        Command::Info { json } => info::run(&loaded()?, *json, &mut out)?,
        Command::List {
            device,
            capabilities,
            layout,
            imex_channels,
            enable,
            json,
            bundle,
        } => {
            let env: Vec<String> = imex_channels
                .iter()
                .map(|c| format!("NVIDIA_IMEX_CHANNELS={c}"))
                .chain(
                    enable
                        .iter()
                        .filter_map(|g| g.variable())
                        .map(|v| format!("{v}=enabled")),
                )
                .collect();
            let ask = match bundle {
                Some(dir) => list::Ask::Bundle(dir),
                None => list::Ask::Flags {
                    devices: device,
                    capabilities,
                    layout: (*layout).into(),
                    env: &env,
                },
            };
            list::run(&loaded()?, ask, *json, &mut out)?
        }
        Command::Cdi {
            command:
                CdiCommand::Generate {
                    output,
                    format,
                    device_name_strategy,
                    capabilities,
                    layout,
                    remove_without_driver,
                    mode,
                },
        } => cdi::generate(
            &loaded()?,
            config_path,
            &cdi::Generate {
                output,
                format: format.map(Format::from),
                strategies: device_name_strategy,
                capabilities: capabilities.as_deref(),
                layout: (*layout).into(),
                remove_without_driver: *remove_without_driver,
                mode: (*mode).into(),
            },
            &mut out,
        )?,
        Command::Cdi {
            command: CdiCommand::List {
                device_name_strategy,
            },
        } => cdi::list(&loaded()?, device_name_strategy, &mut out)?,
        Command::Cdi {
            command: CdiCommand::Validate { file },
        } => cdi::validate(&loaded()?, file, &mut out)?,
        Command::CdiHook {
            stage,
            driver_version,
            capabilities,
            layout,
            mig_layout,
        } => {
            let config = loaded()?;
            if stage != crate::callback::HOOK_STAGE {
                return Err(Error::CdiStage {
                    stage: stage.clone(),
                });
            }
            hook::run_granted(
                &config,
                io::stdin(),
                &planner::SpecMade {
                    driver_version: driver_version.clone(),
                    capabilities: capabilities.clone(),
                    layout: (*layout).into(),
                    mig_layout: mig_layout.clone(),
                },
            )?
        }
        Command::Runtime { args } => {
            // The wrapper's caller reads errors from the runtime's log.
            let error = match loaded() {
                Ok(config) => Error::Runtime(crate::runtime::run(&config, config_path, args)),
                Err(e) => e,
            };
            crate::deadline::disarm();
            crate::runtime::log_failure(args, &one_line(&error));
            return Err(error);
        }
        Command::Doctor(args) => {
            out.flush()?;
            if !doctor(args, config_path)? {
                return Err(Error::Unhealthy);
            }
        }
        Command::Prestart | Command::CreateRuntime => hook::run(&loaded()?, io::stdin())?,
        Command::Other(args) => {
            loaded()?;
            return Err(Error::Stage {
                stage: args.first().cloned().unwrap_or_default(),
            });
        }
    }
    out.flush()?;
    Ok(())
}

/// Runs `doctor`, printing its report; whether every check passed. It
/// loads the configuration itself: a file that does not parse is one of
/// its findings, not a reason to stop.
pub fn doctor(args: &DoctorArgs, config_path: Option<&Path>) -> Result<bool> {
    doctor::run(args, config_path)
}

/// This build's version and the git commit it was built from (build.rs),
/// so that a binary found on a host names the exact source it came from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("OCI_NVIDIA_HOOK_COMMIT"),
    ")"
);

/// This build's version, as `--version` prints it.
pub fn version() -> &'static str {
    VERSION
}

/// An error and its sources on one line, as `main` reports it.
pub fn one_line(error: &dyn std::error::Error) -> String {
    crate::oneline::error(error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device_class::Class;

    /// `list --enable` offers every device class, by its name, and no other.
    #[test]
    fn each_device_class_is_a_gated_name() {
        let names: Vec<String> = GatedName::value_variants()
            .iter()
            .filter_map(|g| Some(g.to_possible_value()?.get_name().to_string()))
            .collect();
        let mut offered = names.clone();
        let mut classes: Vec<String> = Class::all().map(|c| c.row().name.into()).collect();
        offered.sort();
        classes.sort();
        assert_eq!(offered, classes);
        assert_eq!(names, ["gds", "mofed", "nvswitch", "gdrcopy"]);
        assert_eq!(GatedName::Nvswitch.variable(), Some("NVIDIA_NVSWITCH"));
        assert!(GatedName::value_variants()
            .iter()
            .all(|g| g.variable().is_some()));
    }
}

//! `nvidia-ctk`: NVIDIA's container toolkit command line, answered by this
//! binary, for hosts that follow NVIDIA's current instructions
//! (`nvidia-ctk runtime configure --runtime=docker`). Each command parses
//! NVIDIA's flags and hands the work to this project's own modules
//! ([`crate::engine_config`] for the engines' files); none decides policy
//! of its own.

mod cdi;
mod runtime;
mod settings;

use std::io;

use super::Error;
use crate::config::{Config, LogLevel};
use clap::{Parser, Subcommand};

/// The name NVIDIA's tool is called by.
pub const NAME: &str = "nvidia-ctk";

/// Result of a command.
pub type Result<T> = std::result::Result<T, Error>;

/// What `--help` says of the whole command.
const LONG_ABOUT: &str = "NVIDIA's nvidia-ctk command line, answered by oci-nvidia-hook: \
runtime configure registers the NVIDIA runtime (this binary's nvidia-container-runtime) with \
Docker, containerd or CRI-O, editing only what it must of their configuration files; config \
prints or changes oci-nvidia-hook's own config file under NVIDIA's key names; cdi generate \
writes the spec oci-nvidia-hook cdi generate writes, and cdi list prints the devices of the \
specs in /etc/cdi and /var/run/cdi.";

/// nvidia-ctk: NVIDIA's container toolkit commands, answered by oci-nvidia-hook.
#[derive(Debug, PartialEq, Eq, Parser)]
#[command(name = NAME, version = crate::cli::VERSION, about, long_about = LONG_ABOUT)]
pub struct Ctk {
    /// Log at debug level.
    #[arg(long, short = 'd', global = true)]
    pub debug: bool,
    /// Log errors only.
    #[arg(long, global = true)]
    pub quiet: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `nvidia-ctk`'s commands.
#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Container engines: register the NVIDIA runtime with them.
    Runtime {
        /// What to do.
        #[command(subcommand)]
        command: RuntimeCommand,
    },
    /// Print or change oci-nvidia-hook's config file under NVIDIA's key names.
    Config(settings::ConfigArgs),
    /// Container Device Interface: generate this host's spec, list the specs' devices.
    Cdi {
        /// What to do.
        #[command(subcommand)]
        command: cdi::CdiCommand,
    },
    /// The hooks of NVIDIA's CDI specs, as nvidia-cdi-hook runs them.
    Hook {
        /// The hook to run.
        #[command(subcommand)]
        command: crate::compat::cdi_hook::HookCommand,
    },
}

/// `nvidia-ctk runtime`'s commands.
#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum RuntimeCommand {
    /// Add the NVIDIA runtime to a container engine's configuration.
    Configure(runtime::Configure),
}

/// Parses `args` (`argv[0]` first); clap prints its errors and exits, as
/// for our own command line.
pub fn parse(args: &[std::ffi::OsString]) -> Ctk {
    Ctk::parse_from(args)
}

/// The configuration `ctk` runs with: the default config file (for
/// `config`, which may be mending it, the defaults), its log level set by
/// `--debug` or `--quiet`.
pub fn config(ctk: &Ctk) -> crate::config::Result<Config> {
    let mut config = match ctk.command {
        Command::Config(_) => Config::default(),
        _ => Config::load(None)?,
    };
    if ctk.debug {
        config.log.level = LogLevel::Debug;
    } else if ctk.quiet {
        config.log.level = LogLevel::Error;
    }
    Ok(config)
}

/// Runs `ctk`'s command (logging set up), writing to stdout.
pub fn run(ctk: &Ctk) -> Result<()> {
    // `nvidia-ctk hook` runs as a runtime's hook: bounded as every hook is.
    let entry = matches!(ctk.command, Command::Hook { .. }).then_some("nvidia-ctk hook");
    let config = &crate::deadline::bounded_load(entry, || self::config(ctk), Config::deadline)?;
    crate::logging::init(&config.log)?;
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match &ctk.command {
        Command::Runtime {
            command: RuntimeCommand::Configure(configure),
        } => runtime::configure(configure, &mut out),
        Command::Config(args) => settings::run(args, &mut out),
        Command::Cdi { command } => cdi::run(command, config, &mut out),
        Command::Hook { command } => Ok(crate::compat::cdi_hook::run_command(command, config)?),
    }
}

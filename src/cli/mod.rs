//! The command line: options, and the commands that print the inventory and
//! the plan. Each command writes its whole output to stdout and returns an
//! error for `main` to report on one line.

mod info;
mod list;

use std::io::{self, Write};
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use thiserror::Error;

use crate::config::Config;
use crate::image::ImageLayout;
use crate::{bundle, driver, hook, planner};

/// Why a command failed.
#[derive(Debug, Error)]
pub enum Error {
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
}

impl Error {
    /// Whether the reader of our output went away, which is not a failure (`list | head`).
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, Error::Output(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

/// Result of a command.
pub type Result<T> = std::result::Result<T, Error>;

/// oci-nvidia-hook: gives OCI containers NVIDIA GPUs.
#[derive(Debug, Parser)]
#[command(name = "oci-nvidia-hook", version, about)]
pub struct Cli {
    /// Configuration file [default: /etc/oci-nvidia-hook/config.toml, optional]
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
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
        /// Print JSON with each item's container destination and mount options.
        #[arg(long)]
        json: bool,
        /// Plan for the container this OCI bundle describes, as the hook would: its
        /// environment, device mounts, privilege and rootfs (instead of the flags).
        #[arg(long, value_name = "DIR", conflicts_with_all = ["device", "capabilities", "layout"])]
        bundle: Option<PathBuf>,
    },
    /// OCI hook: inject the GPUs the container asks for (state JSON on stdin).
    Prestart,
    /// OCI hook at createRuntime: the same point as prestart.
    #[command(name = "create-runtime", alias = "createRuntime")]
    CreateRuntime,
    /// Any other hook stage is refused.
    #[command(external_subcommand)]
    Other(Vec<String>),
}

/// Image layouts selectable on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Layout {
    /// /usr/lib/x86_64-linux-gnu (Debian, Ubuntu).
    Debian,
    /// /usr/lib64 (RHEL, Fedora, SUSE).
    Rpm,
}

impl From<Layout> for ImageLayout {
    fn from(layout: Layout) -> Self {
        match layout {
            Layout::Debian => ImageLayout::Debian,
            Layout::Rpm => ImageLayout::Rpm,
        }
    }
}

/// Runs `command` with `config`, writing to stdout.
pub fn run(command: &Command, config: &Config) -> Result<()> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    match command {
        Command::Info { json } => info::run(config, *json, &mut out)?,
        Command::List {
            device,
            capabilities,
            layout,
            json,
            bundle,
        } => {
            let ask = match bundle {
                Some(dir) => list::Ask::Bundle(dir),
                None => list::Ask::Flags {
                    devices: device,
                    capabilities,
                    layout: (*layout).into(),
                },
            };
            list::run(config, ask, *json, &mut out)?
        }
        Command::Prestart | Command::CreateRuntime => hook::run(config, io::stdin())?,
        Command::Other(args) => {
            return Err(Error::Stage {
                stage: args.first().cloned().unwrap_or_default(),
            })
        }
    }
    out.flush()?;
    Ok(())
}

/// An error and its sources on one line, as `main` reports it.
pub fn one_line(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let more = e.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = e.source();
    }
    crate::oneline::escape_controls(&text)
}

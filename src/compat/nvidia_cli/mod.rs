//! `nvidia-container-cli`: NVIDIA's C CLI's command line, answered by the
//! same inventory, planner and hook as ours.
//!
//! containerd's `ctr run --gpus` and NVIDIA's own hook in legacy mode run
//! `nvidia-container-cli … configure … --pid=PID ROOTFS` as a prestart
//! hook; people run `info` and `list` by habit. The request comes from the
//! command line alone, never from the environment or the container's
//! `process.env`; the configuration is our default config file (NVIDIA's
//! CLI has no option naming one), with `--root` as its driver root and
//! `--debug=FILE` as a debug log. This module never loads a kernel module
//! and never runs `ldconfig`, whatever the options say: they are accepted
//! and logged.

pub mod args;
mod configure;
mod getopt;
mod info;
mod list;

use std::io::{self, Write};

use thiserror::Error;

pub use args::{parse, Invocation, Parsed, NAME};

use crate::config::{self, Config, LogLevel};
use crate::{driver, hook, planner};

/// Why a command failed.
#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    Driver(#[from] driver::Error),
    #[error(transparent)]
    Planner(#[from] planner::Error),
    #[error(transparent)]
    Hook(#[from] hook::Error),
    #[error("cannot write output: {0}")]
    Output(#[from] io::Error),
}

impl Error {
    /// Whether the reader of our output went away, which is not a failure (`list | head`).
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, Error::Output(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

/// Result of a command.
pub type Result<T> = std::result::Result<T, Error>;

/// The configuration `invocation` runs with: the default config file, its
/// driver root replaced by `--root`, its log by `--debug=FILE` at debug
/// level.
pub fn config(invocation: &Invocation) -> config::Result<Config> {
    let mut config = Config::load(None)?;
    let globals = &invocation.globals;
    if let Some(root) = &globals.root {
        config.driver.root = root.clone();
    }
    if let Some(file) = &globals.debug {
        config.log.level = LogLevel::Debug;
        config.log.file = file.clone();
    }
    Ok(config)
}

/// Runs `invocation`'s command with `config` (logging set up), writing to stdout.
pub fn run(invocation: &Invocation, config: &Config) -> Result<()> {
    log_ignored(&invocation.globals);
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    match &invocation.command {
        args::Command::Info { csv } => info::run(config, *csv, &mut out)?,
        args::Command::List(list) => list::run(config, list, &mut out)?,
        args::Command::Configure(configure) => configure::run(config, configure)?,
    }
    out.flush()?;
    Ok(())
}

/// What `--version` prints: NVIDIA's first two fields, so that scripts
/// reading them find a version, then what answers.
pub fn version_text() -> String {
    let version = crate::cli::version();
    format!(
        "cli-version: {version}\nlib-version: {version}\nbuild platform: {}\n\
         implementation: oci-nvidia-hook {version}\n",
        std::env::consts::ARCH
    )
}

/// Logs the global options that change nothing here, once logging is set up.
fn log_ignored(globals: &args::Globals) {
    if globals.load_kmods {
        log::debug!("{NAME}: --load-kmods ignored: kernel modules are never loaded");
    }
    if let Some(user) = &globals.user {
        log::debug!(
            "{NAME}: --user{} ignored: no privilege separation is needed, no driver code runs here",
            user.as_deref().map(|u| format!("={u}")).unwrap_or_default()
        );
    }
    if globals.no_pivot {
        log::debug!("{NAME}: --no-pivot ignored: nothing pivots");
    }
    if globals.no_create_imex_channels {
        log::debug!("{NAME}: --no-create-imex-channels ignored: no IMEX channel is created");
    }
    if let Some(ldcache) = &globals.ldcache {
        let level = if ldcache.as_os_str() == "/etc/ld.so.cache" {
            log::Level::Debug
        } else {
            log::Level::Warn
        };
        log::log!(
            level,
            "{NAME}: --ldcache={} ignored: the driver root's /etc/ld.so.cache is read",
            ldcache.display()
        );
    }
}

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

use crate::config::{self, CompatMode, Config, LogLevel};
use crate::{driver, hook, planner};

/// Why a command failed.
#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] config::Error),
    #[error(transparent)]
    Logging(#[from] crate::logging::Error),
    #[error(transparent)]
    Driver(#[from] driver::Error),
    #[error(transparent)]
    Planner(#[from] planner::Error),
    #[error(transparent)]
    Hook(#[from] hook::Error),
    #[error("cannot write output: {0}")]
    Output(#[from] io::Error),
    #[error("list: nothing on this host matches the options given (no driver file of those kinds and capabilities, no such device)")]
    NothingListed,
}

/// Result of a command.
pub type Result<T> = std::result::Result<T, Error>;

/// The configuration `invocation` runs with: the default config file, its
/// driver root replaced by `--root`, its log by `--debug=FILE` at debug
/// level, its CUDA compat mode by `configure --cuda-compat-mode`.
pub fn config(invocation: &Invocation) -> config::Result<Config> {
    Ok(with_options(invocation, Config::load(None)?))
}

/// `config` with what `invocation`'s options change in it.
fn with_options(invocation: &Invocation, mut config: Config) -> Config {
    let globals = &invocation.globals;
    if let Some(root) = &globals.root {
        config.driver.root = root.clone();
    }
    if let Some(file) = &globals.debug {
        config.log.level = LogLevel::Debug;
        // Every line goes to stderr anyway (NVIDIA's hook passes
        // `--debug=/dev/stderr` when run with -debug).
        if !STDERR.iter().any(|s| file.as_os_str() == *s) {
            config.log.file = file.clone();
        }
    }
    if let args::Command::Configure(configure) = &invocation.command {
        config.cuda_compat.mode = match configure.cuda_compat {
            None => config.cuda_compat.mode,
            Some(args::CudaCompat::Ldconfig | args::CudaCompat::Mount) => CompatMode::Ldconfig,
            Some(args::CudaCompat::Disabled) => CompatMode::Disabled,
        };
    }
    config
}

/// Names of stderr a `--debug` may give.
const STDERR: [&str; 3] = ["/dev/stderr", "/dev/fd/2", "/proc/self/fd/2"];

/// Runs `invocation`'s command, writing to stdout: with its configuration
/// ([`config`]), the log set up from it.
pub fn run(invocation: &Invocation) -> Result<()> {
    let entry = matches!(invocation.command, args::Command::Configure(_))
        .then_some("nvidia-container-cli configure");
    let config =
        &crate::deadline::bounded_load(entry, || self::config(invocation), Config::deadline)?;
    crate::logging::init(&config.log)?;
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

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    fn configured(args: &[&str]) -> Config {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let Ok(Parsed::Run(invocation)) = parse(&args) else {
            panic!("{args:?} does not parse");
        };
        with_options(&invocation, Config::default())
    }

    #[test]
    fn root_and_debug_options_replace_the_driver_root_and_the_log() {
        let config = configured(&[
            "--root=/run/nvidia/driver",
            "--debug=/var/log/nvc.log",
            "info",
        ]);
        assert_eq!(config.driver.root, Path::new("/run/nvidia/driver"));
        // Device nodes and procfs are not the driver root's.
        assert_eq!(config.driver.dev_root, Config::default().driver.dev_root);
        assert_eq!(config.log.level, LogLevel::Debug);
        assert_eq!(config.log.file, PathBuf::from("/var/log/nvc.log"));
        assert_eq!(configured(&["info"]), Config::default());
    }

    #[test]
    fn debug_to_stderr_raises_the_level_and_opens_no_file() {
        let config = configured(&["--debug=/dev/stderr", "info"]);
        assert_eq!(config.log.level, LogLevel::Debug);
        assert_eq!(config.log.file(), None);
    }

    #[test]
    fn cuda_compat_mode_sets_the_compat_mode_and_mount_is_ldconfig() {
        let run = |mode: &str| {
            configured(&[
                "configure",
                &format!("--cuda-compat-mode={mode}"),
                "--pid=1",
                "/r",
            ])
            .cuda_compat
            .mode
        };
        assert_eq!(run("disabled"), CompatMode::Disabled);
        assert_eq!(run("ldconfig"), CompatMode::Ldconfig);
        assert_eq!(run("mount"), CompatMode::Ldconfig);
    }
}

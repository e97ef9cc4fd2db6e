//! The `oci-nvidia-hook` binary: parse options, set up logging, dispatch.

use std::process::ExitCode;

use clap::Parser;
use oci_nvidia_hook::cli::{self, Cli};
use oci_nvidia_hook::config::Config;
use oci_nvidia_hook::logging;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(cli.config.as_deref()) {
        Ok(config) => config,
        Err(e) => return fail(&e),
    };
    if let Err(e) = logging::init(&config.log) {
        return fail(&e);
    }
    match cli::run(&cli.command, &config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{}", cli::one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// Reports an error from before the logger exists: one line on stderr.
fn fail(e: &dyn std::error::Error) -> ExitCode {
    eprintln!("oci-nvidia-hook: error: {}", cli::one_line(e));
    ExitCode::FAILURE
}

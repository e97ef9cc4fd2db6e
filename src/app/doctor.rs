//! `doctor`: its options in, its report out, in the colours a terminal wants.

use std::io::{self, IsTerminal, Write};
use std::path::Path;

use super::{Error, Result};
use crate::config::{self, Config};
use crate::doctor::{self, Loaded, Render};
use crate::host::driver::CudaVersion;

/// What `doctor` was asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// JSON instead of text.
    pub json: bool,
    /// The live check's half inside its container.
    pub inside: bool,
    /// What to check.
    pub checks: doctor::Options,
}

/// Runs the checks `options` ask for on the configuration `loaded` from
/// `config_path` (a file that failed is a finding) and prints them;
/// whether all passed.
pub fn run(
    options: &Options,
    loaded: config::Result<Config>,
    config_path: Option<&Path>,
) -> Result<bool> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    if options.inside {
        doctor::inside::run(&mut out)?;
        out.flush()?;
        return Ok(true);
    }
    let checks = &options.checks;
    if let Some(bad) = checks.env.iter().find(|e| !e.contains('=')) {
        return Err(Error::Usage(format!("--env {bad:?}: expected KEY=VALUE")));
    }
    if let Some(cuda) = checks
        .cuda
        .as_deref()
        .filter(|c| CudaVersion::parse(c).is_none())
    {
        return Err(Error::Usage(format!(
            "--cuda {cuda:?}: expected a CUDA version such as 12.4"
        )));
    }
    let loaded = Loaded::new(loaded, config_path);
    let found = doctor::diagnose(&loaded, checks, super::cdi_spec::driver_of);
    let render = if options.json {
        Render::Json
    } else {
        Render::Text {
            colour: colour_wanted(&stdout),
        }
    };
    doctor::report::write(&found, render, &mut out)?;
    out.flush()?;
    Ok(!doctor::any_failed(&found))
}

/// Colour only on a terminal, and never with `NO_COLOR` set to anything
/// (no-color.org). Display only: the environment decides nothing else.
fn colour_wanted(stdout: &io::Stdout) -> bool {
    stdout.is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

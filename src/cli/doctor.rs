//! `doctor`: the command line's side of [`crate::doctor`]: options in,
//! report out, in the colours a terminal wants.

use std::io::{self, IsTerminal, Write};
use std::path::Path;

use super::{DoctorArgs, Error, Result};
use crate::doctor::{self, Loaded, Options, Render};
use crate::driver::CudaVersion;

/// Runs the checks `args` ask for and prints them; whether all passed.
pub fn run(args: &DoctorArgs, config_path: Option<&Path>) -> Result<bool> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    if args.inside {
        doctor::inside::run(&mut out)?;
        out.flush()?;
        return Ok(true);
    }
    if let Some(bad) = args.env.iter().find(|e| !e.contains('=')) {
        return Err(Error::Usage(format!("--env {bad:?}: expected KEY=VALUE")));
    }
    if let Some(cuda) = args
        .cuda
        .as_deref()
        .filter(|c| CudaVersion::parse(c).is_none())
    {
        return Err(Error::Usage(format!(
            "--cuda {cuda:?}: expected a CUDA version such as 12.4"
        )));
    }
    let options = Options {
        host_smi: args.host_smi,
        image_rootfs: args.image_rootfs.clone(),
        image_config: args.image_config.clone(),
        env: args.env.clone(),
        cuda: args.cuda.clone(),
        run: args.run,
        host_root: args.host_root.clone(),
    };
    let loaded = Loaded::load(config_path);
    let checks = doctor::diagnose(&loaded, &options, super::cdi::driver_of);
    let render = if args.json {
        Render::Json
    } else {
        Render::Text {
            colour: colour_wanted(&stdout),
        }
    };
    doctor::report::write(&checks, render, &mut out)?;
    out.flush()?;
    Ok(!doctor::any_failed(&checks))
}

/// Colour only on a terminal, and never with `NO_COLOR` set to anything
/// (no-color.org). Display only: the environment decides nothing else.
fn colour_wanted(stdout: &io::Stdout) -> bool {
    stdout.is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

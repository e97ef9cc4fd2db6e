//! What more than one front reads the same way: the version they print,
//! NVIDIA's `--debug`/`--quiet` pair, and the spec encodings.

use clap::ValueEnum;

use crate::config::LogLevel;
use crate::specs::cdi::Format;

/// `--version`'s text, every front's.
pub const VERSION: &str = crate::util::this_program::VERSION;

/// The log level NVIDIA's Go tools' `--debug` and `--quiet` ask for.
pub fn log_level(debug: bool, quiet: bool) -> Option<LogLevel> {
    if debug {
        Some(LogLevel::Debug)
    } else if quiet {
        Some(LogLevel::Error)
    } else {
        None
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

//! `nvidia-ctk config`'s flags, NVIDIA's names, read into [`Edit`].

use std::path::PathBuf;

use crate::app::settings::Edit;
use crate::config::DEFAULT_PATH;

/// `config`'s flags, NVIDIA's names.
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct ConfigArgs {
    /// The config file to read (and with --in-place write).
    #[arg(long, short = 'c', alias = "config", default_value = DEFAULT_PATH, value_name = "FILE")]
    pub config_file: PathBuf,
    /// KEY=VALUE with one of NVIDIA's keys (docs/nvidia-ctk.md lists them);
    /// an empty VALUE puts the key back to its default (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Write the file back instead of printing it.
    #[arg(long, short = 'i')]
    pub in_place: bool,
    /// Write the result to this file instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE", conflicts_with = "in_place")]
    pub output: Option<PathBuf>,
}

impl From<ConfigArgs> for Edit {
    fn from(args: ConfigArgs) -> Self {
        Edit {
            config_file: args.config_file,
            sets: args.sets,
            in_place: args.in_place,
            output: args.output,
        }
    }
}

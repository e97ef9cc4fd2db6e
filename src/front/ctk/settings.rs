//! `nvidia-ctk config`'s flags, NVIDIA's names and defaults, read into [`Edit`].

use std::path::PathBuf;

use clap::Subcommand;

use crate::app::settings::Edit;
use crate::config::nvidia::DEFAULT_PATH;

/// `config`'s flags, NVIDIA's names.
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct ConfigArgs {
    /// `config default`, or nothing for the file.
    #[command(subcommand)]
    pub command: Option<ConfigCommand>,
    /// NVIDIA's config file, to read (and with --in-place write).
    #[arg(long, short = 'c', alias = "config", default_value = DEFAULT_PATH, value_name = "FILE")]
    pub config_file: PathBuf,
    /// KEY[=VALUE] with one of NVIDIA's keys (docs/nvidia-ctk.md lists
    /// them); a KEY alone is true, an empty VALUE puts the key back to its
    /// default, a list's items are separated by ':' or ',' (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// What separates a list's items in a --set value, besides a comma.
    #[arg(long, hide = true, default_value = ":")]
    pub set_list_separator: String,
    /// Write the file back instead of printing it.
    #[arg(long, short = 'i')]
    pub in_place: bool,
    /// Write the result to this file instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE", conflicts_with = "in_place")]
    pub output: Option<PathBuf>,
}

/// `config`'s one command.
#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum ConfigCommand {
    /// Print NVIDIA's default config file.
    #[command(visible_aliases = ["create-default", "generate-default"])]
    Default {
        /// Write it to this file instead of stdout.
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

impl From<ConfigArgs> for Edit {
    fn from(args: ConfigArgs) -> Self {
        let (default_only, output) = match args.command {
            Some(ConfigCommand::Default { output }) => (true, output.or(args.output)),
            None => (false, args.output),
        };
        Edit {
            config_file: args.config_file,
            sets: args.sets,
            list_separator: args.set_list_separator,
            in_place: args.in_place && !default_only,
            output,
            default_only,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: ConfigArgs,
    }

    fn edit(argv: &[&str]) -> Edit {
        let argv = std::iter::once("config").chain(argv.iter().copied());
        Cli::try_parse_from(argv).unwrap().args.into()
    }

    /// NVIDIA v1.20's `nvidia-ctk config --help` (cmd/nvidia-ctk/config/config.go):
    /// its file by default, `-c`/`--config`, `-i`, `-o`, `--set` repeated,
    /// and `default`'s two other names.
    #[test]
    fn nvidias_flags_and_default_file() {
        let e = edit(&["--set", "a", "--set", "b=1", "-i"]);
        assert_eq!(
            e.config_file,
            PathBuf::from("/etc/nvidia-container-runtime/config.toml")
        );
        assert_eq!(e.sets, ["a", "b=1"]);
        assert!(e.in_place && !e.default_only);
        assert_eq!(e.list_separator, ":");
        let e = edit(&["-c", "/x.toml", "-o", "/y.toml"]);
        assert_eq!(e.config_file, PathBuf::from("/x.toml"));
        assert_eq!(e.output, Some(PathBuf::from("/y.toml")));
        for name in ["default", "create-default", "generate-default"] {
            let e = edit(&[name, "-o", "/d.toml"]);
            assert!(e.default_only, "{name}");
            assert_eq!(e.output, Some(PathBuf::from("/d.toml")));
        }
    }
}

//! The hook's own command lines, read without clap: `[--config PATH]
//! prestart` (and `create-runtime`/`createRuntime`), as hooks.d files and
//! bundles write it, and `cdi-hook createRuntime --driver-version V
//! --capabilities C --layout L [--config PATH]`, exactly as our CDI spec and
//! the runtime wrapper write it. A runtime waits for the hook on every
//! container start, and clap building the whole command tree cost about
//! 0.1 ms of it.
//!
//! Anything else, a spelling clap would also take (`--config=PATH`, another
//! order, a value that looks like a flag) included, is left to clap: this
//! returns a [`Cli`] only for a command line clap reads the same way, which
//! the tests check against clap itself.

use std::ffi::OsString;
use std::path::PathBuf;

use super::{Cli, Command};
use crate::specs::cdi_hook_args::{SpecMade, HOOK_COMMAND};

/// The command line `args` (the program name first) as clap would read it,
/// or `None` when it is not one of the hook's own shapes.
pub fn parse(args: &[OsString]) -> Option<Cli> {
    let words: Vec<&str> = args
        .get(1..)?
        .iter()
        .map(|a| a.to_str())
        .collect::<Option<_>>()?;
    // `--config PATH` first or last, as clap's global option may be.
    let (config, words) = match words.as_slice() {
        ["--config", path, rest @ ..] => (Some(value(path)?), rest),
        [rest @ .., "--config", path] => (Some(value(path)?), rest),
        rest => (None, rest),
    };
    let command = match words {
        ["prestart"] => Command::Prestart,
        ["create-runtime" | "createRuntime"] => Command::CreateRuntime,
        [HOOK_COMMAND, stage, flags @ ..] => {
            let made = SpecMade::parse(flags, |word| value(word).is_some())?;
            Command::CdiHook {
                stage: value(stage)?.to_string(),
                driver_version: made.driver_version,
                capabilities: made.capabilities,
                layout: made.layout.into(),
                mig_layout: made.mig_layout,
                driver_root: made.roots.driver,
                dev_root: made.roots.dev,
                csv_host: made.roots.csv.is_some(),
                csv_all: made.roots.csv.as_ref().is_some_and(|c| c.all),
                csv_files: made
                    .roots
                    .csv
                    .as_ref()
                    .and_then(|c| c.files.clone())
                    .unwrap_or_default(),
                csv_ignore_patterns: made
                    .roots
                    .csv
                    .map(|c| c.ignore_patterns)
                    .unwrap_or_default(),
            }
        }
        _ => return None,
    };
    Some(Cli {
        config: config.map(PathBuf::from),
        command,
    })
}

/// `word` as an option's value: clap's reading of one that is empty or
/// starts with `-` is its own business.
fn value(word: &str) -> Option<&str> {
    (!word.is_empty() && !word.starts_with('-')).then_some(word)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn args(words: &[&str]) -> Vec<OsString> {
        std::iter::once("oci-nvidia-hook")
            .chain(words.iter().copied())
            .map(OsString::from)
            .collect()
    }

    #[test]
    fn the_hooks_own_command_lines_read_as_clap_reads_them() {
        // As the one writer writes it.
        let made = SpecMade {
            driver_version: "535.261.03".into(),
            capabilities: "compute,utility".into(),
            layout: crate::planning::image::ImageLayout::Debian,
            mig_layout: Some("0:1:0,0:2:0".into()),
            roots: Default::default(),
        };
        let written = made.args();
        let mut cdi = vec![HOOK_COMMAND, "createRuntime"];
        cdi.extend(written.iter().map(String::as_str));
        let mut lines: Vec<Vec<&str>> = vec![
            vec!["prestart"],
            vec!["create-runtime"],
            vec!["createRuntime"],
            vec!["--config", "/etc/x.toml", "prestart"],
            vec!["prestart", "--config", "/etc/x.toml"],
            vec!["--config", "/etc/x.toml", "createRuntime"],
            cdi.to_vec(),
            [&cdi[..], &["--config", "/etc/x.toml"]].concat(),
            [&["--config", "/etc/x.toml"], &cdi[..]].concat(),
        ];
        let rooted = SpecMade {
            roots: crate::specs::cdi_hook_args::Roots {
                driver: Some("/run/nvidia/driver".into()),
                dev: Some("/run/nvidia/driver".into()),
                csv: None,
            },
            ..made.clone()
        }
        .args();
        lines.push(
            [HOOK_COMMAND, "createRuntime"]
                .into_iter()
                .chain(rooted.iter().map(String::as_str))
                .collect(),
        );
        // A CSV host's spec, with the files and patterns it was made from.
        let csv = SpecMade {
            roots: crate::specs::cdi_hook_args::Roots {
                csv: Some(crate::config::CsvSelection {
                    files: Some(vec!["/sim/a.csv".into(), "/sim/b.csv".into()]),
                    ignore_patterns: vec!["**/*.so".into()],
                    all: false,
                    force: false,
                }),
                ..Default::default()
            },
            ..made.clone()
        }
        .args();
        lines.push(
            [HOOK_COMMAND, "createRuntime"]
                .into_iter()
                .chain(csv.iter().map(String::as_str))
                .collect(),
        );
        let mut rpm = cdi.to_vec();
        rpm[7] = "rpm";
        lines.push(rpm);
        let mut other_stage = cdi.to_vec();
        other_stage[1] = "poststop";
        lines.push(other_stage);
        for words in lines {
            let args = args(&words);
            let clap = Cli::try_parse_from(&args).unwrap();
            assert_eq!(parse(&args), Some(clap), "{words:?}");
        }
    }

    #[test]
    fn any_other_command_line_is_left_to_clap() {
        for words in [
            &[][..],
            &["list"],
            &["--config=/etc/x.toml", "prestart"],
            &["--config", "-x", "prestart"],
            &["--config", "", "prestart"],
            &["prestart", "extra"],
            &["poststart"],
            &["--help"],
            &["--version"],
            &["prestart", "--config", "a", "--config", "b"],
            &["--config", "a", "--config", "b", "prestart"],
            &["cdi-hook", "createRuntime", "--layout", "debian"],
            &[
                "cdi-hook",
                "createRuntime",
                "--capabilities",
                "utility",
                "--driver-version",
                "1",
                "--layout",
                "debian",
            ],
            &[
                "cdi-hook",
                "createRuntime",
                "--driver-version",
                "1",
                "--capabilities",
                "utility",
                "--layout",
                "windows",
            ],
        ] {
            assert_eq!(parse(&args(words)), None, "{words:?}");
        }
    }

    #[test]
    fn a_word_that_is_not_utf8_is_left_to_clap() {
        use std::os::unix::ffi::OsStringExt;
        let mut args = args(&["--config", "x", "prestart"]);
        args[2] = OsString::from_vec(b"/etc/\xff.toml".to_vec());
        assert_eq!(parse(&args), None);
    }
}

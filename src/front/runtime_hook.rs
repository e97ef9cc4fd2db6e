//! `nvidia-container-runtime-hook`: NVIDIA's OCI hook's command line.
//!
//! Docker's `--gpus` adds a prestart hook `nvidia-container-runtime-hook
//! prestart`, found on dockerd's PATH, with no config flag; hooks.d files
//! written for NVIDIA's toolkit call it the same way. NVIDIA's hook takes Go
//! flags (`-config PATH`, `-debug`, `-version`, one or two dashes) before
//! its command; `prestart` injects, `poststart` and `poststop` do nothing.
//! Here `prestart` is our prestart hook, with our config file (the default
//! path unless `-config` names another; a file in NVIDIA's format there,
//! as the GPU Operator's toolkit passes, is read as NVIDIA's file under our
//! default one): the request is still read only from the container's
//! `config.json`, never from the environment dockerd passes.

use std::path::PathBuf;

use super::Error;
use crate::app::{Invocation, Note, Operation, Overrides};

/// The name Docker looks up on its PATH.
pub const NAME: &str = crate::util::this_program::RUNTIME_HOOK_NAME;

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Our prestart hook, with this config file instead of the default one.
    Prestart {
        /// `-config PATH`.
        config: Option<PathBuf>,
        /// `-debug` was given: ignored, the config file sets the log level.
        debug: bool,
    },
    /// Nothing to do: `poststart`, `poststop`.
    Nothing,
    /// Print the version.
    Version,
}

/// Parses the arguments after `argv[0]`.
pub fn parse(args: &[String]) -> Result<Parsed, Error> {
    let mut config: Option<PathBuf> = None;
    let mut debug = false;
    let mut args = args.iter();
    let command = loop {
        let Some(arg) = args.next() else {
            return Err(Error::HookNoCommand);
        };
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            break arg;
        };
        let (name, inline) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (flag, None),
        };
        match name {
            "config" => {
                let value = match inline {
                    Some(value) => value,
                    None => args
                        .next()
                        .cloned()
                        .ok_or_else(|| Error::HookMissingValue { flag: arg.clone() })?,
                };
                config = Some(PathBuf::from(value));
            }
            // Our log level comes from the config file, never a flag.
            "debug" => debug = true,
            "version" => return Ok(Parsed::Version),
            _ => {
                return Err(Error::HookUnknownFlag { flag: arg.clone() });
            }
        }
    };
    if let Some(extra) = args.next() {
        return Err(Error::HookExtra {
            command: command.clone(),
            argument: extra.clone(),
        });
    }
    match command.as_str() {
        "prestart" => Ok(Parsed::Prestart { config, debug }),
        "poststart" | "poststop" => Ok(Parsed::Nothing),
        other => Err(Error::HookUnknownCommand {
            command: other.to_string(),
        }),
    }
}

/// What `parsed` asks the application to do.
pub fn invocation(parsed: Parsed) -> Invocation {
    match parsed {
        Parsed::Prestart { config, debug } => Invocation::Run(
            Operation::Prestart { entry: "prestart" },
            Overrides {
                config,
                config_may_be_nvidias: true,
                notes: debug
                    .then(|| {
                        Note::debug(format!(
                            "{NAME}: -debug ignored: the config file sets the log level"
                        ))
                    })
                    .into_iter()
                    .collect(),
                ..Overrides::default()
            },
        ),
        Parsed::Nothing => Invocation::Nothing,
        Parsed::Version => {
            Invocation::Print(format!("{NAME} {}\n", crate::util::this_program::VERSION))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_args(args: &[&str]) -> Result<Parsed, Error> {
        let args: Vec<String> = args.iter().map(|a| (*a).to_string()).collect();
        parse(&args)
    }

    fn prestart(config: Option<&str>, debug: bool) -> Parsed {
        Parsed::Prestart {
            config: config.map(PathBuf::from),
            debug,
        }
    }

    #[test]
    fn dockers_call_is_our_prestart_hook_with_the_default_config() {
        assert_eq!(parse_args(&["prestart"]), Ok(prestart(None, false)));
    }

    /// NVIDIA's `-config` names a file of NVIDIA's format: the application
    /// is told it may be one.
    #[test]
    fn the_config_flag_may_name_nvidias_file() {
        let Invocation::Run(_, overrides) = invocation(prestart(Some("/etc/n.toml"), false)) else {
            panic!("prestart runs");
        };
        assert!(overrides.config_may_be_nvidias);
        assert_eq!(
            overrides.config.as_deref(),
            Some(std::path::Path::new("/etc/n.toml"))
        );
    }

    #[test]
    fn go_flags_take_one_or_two_dashes_and_an_inline_or_separate_value() {
        for (args, debug) in [
            (&["-config", "/etc/x.toml", "prestart"][..], false),
            (&["--config", "/etc/x.toml", "prestart"], false),
            (&["-config=/etc/x.toml", "-debug", "prestart"], true),
            (&["--debug", "--config=/etc/x.toml", "prestart"], true),
        ] {
            assert_eq!(
                parse_args(args),
                Ok(prestart(Some("/etc/x.toml"), debug)),
                "{args:?}"
            );
        }
        assert_eq!(parse_args(&["-version"]), Ok(Parsed::Version));
    }

    #[test]
    fn poststart_and_poststop_do_nothing() {
        assert_eq!(parse_args(&["poststart"]), Ok(Parsed::Nothing));
        assert_eq!(parse_args(&["poststop"]), Ok(Parsed::Nothing));
    }

    #[test]
    fn other_stages_and_flags_are_refused_naming_them() {
        assert_eq!(
            parse_args(&["createContainer"]),
            Err(Error::HookUnknownCommand {
                command: "createContainer".into()
            })
        );
        assert_eq!(parse_args(&[]), Err(Error::HookNoCommand));
        assert_eq!(
            parse_args(&["-config"]),
            Err(Error::HookMissingValue {
                flag: "-config".into()
            })
        );
        assert_eq!(
            parse_args(&["-x", "prestart"]),
            Err(Error::HookUnknownFlag { flag: "-x".into() })
        );
        assert_eq!(
            parse_args(&["prestart", "extra"]),
            Err(Error::HookExtra {
                command: "prestart".into(),
                argument: "extra".into()
            })
        );
    }
}

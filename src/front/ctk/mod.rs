//! `nvidia-ctk`: NVIDIA's container toolkit command line, for hosts that
//! follow NVIDIA's current instructions (`nvidia-ctk runtime configure
//! --runtime=docker`), read into our operations. Each command's flags keep
//! NVIDIA's names and defaults; the work is the application layer's.

mod cdi;
mod runtime;
mod settings;
mod system;

use clap::{Parser, Subcommand};

use super::common::{log_level, VERSION};
use super::hooks::{self, HookCommand};
use super::Result;
use crate::app::{Invocation, Operation, Overrides};

/// The name NVIDIA's tool is called by.
pub const NAME: &str = crate::util::this_program::CTK_NAME;

/// What `--help` says of the whole command.
const LONG_ABOUT: &str = "NVIDIA's nvidia-ctk command line, answered by oci-nvidia-hook: \
runtime configure registers the NVIDIA runtime (this binary's nvidia-container-runtime) with \
Docker, containerd or CRI-O, editing only what it must of their configuration files; config \
prints or changes oci-nvidia-hook's own config file under NVIDIA's key names; cdi generate \
writes the spec oci-nvidia-hook cdi generate writes, and cdi list prints the devices of the \
specs in /etc/cdi and /var/run/cdi.";

/// nvidia-ctk: NVIDIA's container toolkit commands, answered by oci-nvidia-hook.
#[derive(Debug, PartialEq, Eq, Parser)]
#[command(name = NAME, version = VERSION, about, long_about = LONG_ABOUT)]
pub struct Ctk {
    /// Log at debug level.
    #[arg(long, short = 'd', global = true)]
    pub debug: bool,
    /// Log errors only.
    #[arg(long, global = true)]
    pub quiet: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `nvidia-ctk`'s commands.
#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Container engines: register the NVIDIA runtime with them.
    Runtime {
        /// What to do.
        #[command(subcommand)]
        command: RuntimeCommand,
    },
    /// Print or change oci-nvidia-hook's config file under NVIDIA's key names.
    Config(settings::ConfigArgs),
    /// Container Device Interface: generate this host's spec, list the specs' devices.
    Cdi {
        /// What to do.
        #[command(subcommand)]
        command: cdi::CdiCommand,
    },
    /// The host's system: the driver's device nodes and their /dev/char links.
    System {
        /// What to do.
        #[command(subcommand)]
        command: system::SystemCommand,
    },
    /// The hooks of NVIDIA's CDI specs, as nvidia-cdi-hook runs them.
    Hook {
        /// The hook to run.
        #[command(subcommand)]
        command: HookCommand,
    },
}

/// `nvidia-ctk runtime`'s commands.
#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum RuntimeCommand {
    /// Add the NVIDIA runtime to a container engine's configuration.
    Configure(runtime::ConfigureArgs),
}

/// Parses `args` (`argv[0]` first); clap prints its errors and exits, as
/// for our own command line.
pub fn parse(args: &[std::ffi::OsString]) -> Result<Invocation> {
    // `nvidia-ctk hook …` is as forward compatible as `nvidia-cdi-hook`.
    let words = args.get(1..).unwrap_or_default();
    let hook_words = hooks::first_word(words)
        .filter(|&at| words[at] == "hook")
        .and_then(|at| words.get(at + 1..));
    if let Some(hook_words) = hook_words {
        if let Some(skipped) = hooks::before_parsing(hook_words) {
            return Ok(skipped);
        }
    }
    match Ctk::try_parse_from(args) {
        Ok(ctk) => read(ctk),
        Err(error) => match hook_words {
            Some(hook_words) => Ok(hooks::unparsed(error, hooks::named(hook_words))),
            None => error.exit(),
        },
    }
}

/// [`parse`], clap's errors returned (tests).
pub fn try_parse<I, T>(args: I) -> std::result::Result<Invocation, String>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let ctk = Ctk::try_parse_from(args).map_err(|e| e.to_string())?;
    read(ctk).map_err(|e| e.to_string())
}

/// The operation `ctk` asks for, its log level set by `--debug` or
/// `--quiet`. It reads the default config file (`config` edits the file
/// named by its own flag and runs with the defaults).
fn read(ctk: Ctk) -> Result<Invocation> {
    let mut overrides = Overrides {
        log_level: log_level(ctk.debug, ctk.quiet),
        ..Overrides::default()
    };
    let operation = match ctk.command {
        Command::Runtime {
            command: RuntimeCommand::Configure(configure),
        } => Operation::EngineConfigure(configure.into()),
        Command::Config(args) => Operation::ConfigEdit(args.into()),
        Command::Cdi { command } => {
            let (operation, notes) = cdi::operation(&command)?;
            overrides.notes = notes;
            operation
        }
        Command::System {
            command: system::SystemCommand::CreateDevCharSymlinks(args),
        } => {
            let (asked, notes) = args.read();
            overrides.notes = notes;
            Operation::DevCharSymlinks(asked)
        }
        Command::System {
            command: system::SystemCommand::CreateDeviceNodes(args),
        } => {
            let (asked, notes) = args.read();
            overrides.notes = notes;
            Operation::DeviceNodes(asked)
        }
        // `nvidia-ctk hook` runs as a runtime's hook: bounded as every hook is.
        Command::Hook { command } => Operation::NvidiaHook {
            entry: "nvidia-ctk hook",
            hook: command.hook(),
        },
    };
    Ok(Invocation::Run(operation, overrides))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(argv: &[&str]) -> Invocation {
        let args: Vec<std::ffi::OsString> = std::iter::once("nvidia-ctk")
            .chain(argv.iter().copied())
            .map(Into::into)
            .collect();
        parse(&args).unwrap()
    }

    /// NVIDIA v1.20.0's `nvidia-ctk hook` answers as its `nvidia-cdi-hook`
    /// (run side by side from ../shared/anchor): no hook and an unknown one
    /// warn and exit 0, `noop` does nothing.
    #[test]
    fn nvidia_ctk_hook_is_as_forward_compatible_as_nvidia_cdi_hook() {
        let warn = |text: &str| Invocation::Warn(text.to_string());
        assert_eq!(parsed(&["hook"]), warn("No CDI hook specified"));
        assert_eq!(
            parsed(&["hook", "bogus"]),
            warn("Unsupported CDI hook: bogus")
        );
        assert_eq!(
            parsed(&["-d", "hook", "bogus", "--x"]),
            warn("Unsupported CDI hook: bogus")
        );
        assert_eq!(parsed(&["hook", "noop"]), Invocation::Nothing);
        assert_eq!(
            parsed(&["hook", "chmod", "--bogus"]),
            warn("Unsupported flag --bogus for CDI hook chmod: the hook is skipped")
        );
        let Invocation::Run(Operation::NvidiaHook { entry, .. }, _) =
            parsed(&["hook", "update-ldcache", "--folder", "/x"])
        else {
            panic!("update-ldcache runs no hook");
        };
        assert_eq!(entry, "nvidia-ctk hook");
    }
}

//! NVIDIA's `nvidia-container-cli` command line (libnvidia-container
//! `src/cli/main.c`, `info.c`, `list.c`, `configure.c`), read into an
//! [`Invocation`]: global options, then `info`, `list` or `configure` and
//! that command's own options, with NVIDIA's defaults filled in.
//!
//! It reads the command line only: it never looks at the host, and every
//! option NVIDIA's CLI takes is accepted or refused here by name, so a
//! caller learns on one line what is wrong.

use std::path::PathBuf;

use super::getopt::{self, Item, Opt, Order, Value};
use super::options::{options, Key};
use crate::app::nvidia_cli::{Configure, CudaCompat, List, Sections};
use crate::front::Error;
use crate::planning::planner::Asked;
use crate::planning::request::Capability;

/// The name other software calls NVIDIA's CLI by.
pub const NAME: &str = crate::util::this_program::CLI_NAME;

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Run a command.
    Run(Box<Invocation>),
    /// Print the version (`--version`, `-V`).
    Version,
    /// Print this usage text (`--help`, `-?`, `--usage`).
    Help(String),
}

/// A command to run and the global options it runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The options before the command.
    pub globals: Globals,
    /// The command.
    pub command: Command,
}

/// NVIDIA's global options, as given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Globals {
    /// `--load-kmods`: never acted on; we load no kernel module.
    pub load_kmods: bool,
    /// `--debug=FILE`: log at debug level to this file too.
    pub debug: Option<PathBuf>,
    /// `--ldcache=FILE`: the driver root's loader cache NVIDIA would read.
    pub ldcache: Option<PathBuf>,
    /// `--root=DIR`: the driver root.
    pub root: Option<PathBuf>,
    /// `--user[=UID[:GID]]`: given, and its value if any; never acted on.
    pub user: Option<Option<String>>,
    /// `--no-pivot`: never acted on; nothing of ours pivots.
    pub no_pivot: bool,
    /// `--no-create-imex-channels`: never acted on; we never create host IMEX channel nodes.
    pub no_create_imex_channels: bool,
}

/// The commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `info [--csv]`.
    Info {
        /// `--csv`.
        csv: bool,
    },
    /// `list`.
    List(List),
    /// `configure … ROOTFS`.
    Configure(Configure),
}

/// Parses the arguments after `argv[0]`.
pub fn parse(args: &[String]) -> Result<Parsed, Error> {
    let refused = |command: Option<&'static str>| {
        move |problem| Error::CliOption {
            command,
            problem,
            known: options(command)
                .iter()
                .map(Opt::shown)
                .collect::<Vec<_>>()
                .join(", "),
        }
    };
    let (items, rest) =
        getopt::parse(args, &options(None), Order::StopAtOperand).map_err(refused(None))?;
    let mut globals = Globals::default();
    for item in items {
        let Item::Opt { key, value } = item else {
            continue;
        };
        let value = value.unwrap_or_default();
        match key {
            Key::LoadKmods => globals.load_kmods = true,
            Key::Debug => globals.debug = Some(PathBuf::from(value)),
            Key::NoPivot => globals.no_pivot = true,
            Key::User => globals.user = Some((!value.is_empty()).then_some(value)),
            Key::Root => globals.root = Some(absolute("--root", value)?),
            Key::Ldcache => globals.ldcache = Some(PathBuf::from(value)),
            Key::NoCreateImexChannels => globals.no_create_imex_channels = true,
            Key::Version => return Ok(Parsed::Version),
            _ => return Ok(Parsed::Help(usage(None))),
        }
    }
    let Some((name, args)) = rest.split_first() else {
        return Err(Error::CliNoCommand);
    };
    let command: &'static str = match name.as_str() {
        "info" => "info",
        "list" => "list",
        "configure" => "configure",
        _ => {
            return Err(Error::CliUnknownCommand {
                command: name.clone(),
            })
        }
    };
    let (items, _) = getopt::parse(args, &options(Some(command)), Order::Permute)
        .map_err(refused(Some(command)))?;
    if items.iter().any(|i| {
        matches!(
            i,
            Item::Opt {
                key: Key::Version,
                ..
            }
        )
    }) {
        return Ok(Parsed::Version);
    }
    if items.iter().any(|i| {
        matches!(
            i,
            Item::Opt {
                key: Key::Help | Key::Usage,
                ..
            }
        )
    }) {
        return Ok(Parsed::Help(usage(Some(command))));
    }
    let command = match command {
        "info" => info(items)?,
        "list" => list(items)?,
        _ => configure(items)?,
    };
    Ok(Parsed::Run(Box::new(Invocation { globals, command })))
}

fn info(items: Vec<Item<Key>>) -> Result<Command, Error> {
    let mut csv = false;
    for item in items {
        match item {
            Item::Opt { .. } => csv = true,
            Item::Operand(argument) => {
                return Err(Error::CliExtra {
                    command: "info",
                    argument,
                })
            }
        }
    }
    Ok(Command::Info { csv })
}

/// `list`, with NVIDIA's defaults (list.c `ARGP_KEY_END`): no option at all
/// lists everything for every GPU, 32-bit libraries included; otherwise
/// only the kinds named, and devices only with `--device`. Capability
/// flags, which NVIDIA's `list` does not take, narrow the libraries and
/// binaries; without them, every capability's are listed, the 32-bit ones
/// only with `--compat32`. Filters alone (`--device`, capability flags, no
/// kind named) list what they select: the devices, and with capability
/// flags every kind of those capabilities' files.
fn list(items: Vec<Item<Key>>) -> Result<Command, Error> {
    if items.is_empty() {
        return Ok(Command::List(List {
            asked: Asked {
                devices: vec!["all".into()],
                capabilities: Capability::ALL.to_vec(),
                ..Asked::default()
            },
            sections: Sections {
                devices: true,
                binaries: true,
                libraries: true,
                ipcs: true,
                firmwares: true,
            },
        }));
    }
    let mut asked = Asked::default();
    let mut sections = Sections::default();
    for item in items {
        let (key, value) = match item {
            Item::Opt { key, value } => (key, value.unwrap_or_default()),
            Item::Operand(argument) => {
                return Err(Error::CliExtra {
                    command: "list",
                    argument,
                })
            }
        };
        match key {
            Key::Device => {
                sections.devices = true;
                asked.devices.push(value);
            }
            Key::Libraries => sections.libraries = true,
            Key::Binaries => sections.binaries = true,
            Key::Ipcs => sections.ipcs = true,
            Key::Firmwares => sections.firmwares = true,
            Key::MigConfig => asked.mig_config.push(value),
            Key::MigMonitor => asked.mig_monitor.push(value),
            Key::ImexChannel => {
                sections.devices = true;
                asked.imex_channels.push(value);
            }
            Key::Capability(c) => push_once(&mut asked.capabilities, c),
            _ => {}
        }
    }
    // Only filters, no kind named: list what the filters select, never
    // nothing. The devices (with no --device, the control nodes and MIG
    // files); with capability flags, the files of those capabilities too.
    if !(sections.binaries || sections.libraries || sections.ipcs || sections.firmwares) {
        sections.devices = true;
        if !asked.capabilities.is_empty() {
            sections.binaries = true;
            sections.libraries = true;
            sections.ipcs = true;
            sections.firmwares = true;
        }
    }
    if asked
        .capabilities
        .iter()
        .all(|c| *c == Capability::Compat32)
    {
        for c in Capability::ALL {
            if c != Capability::Compat32 {
                push_once(&mut asked.capabilities, c);
            }
        }
    }
    Ok(Command::List(List { asked, sections }))
}

/// `configure`: NVIDIA's options as its parser takes them (configure.c),
/// repeated `--device` and `--mig-*` values joined, `--require` rules
/// kept in order, the last `--pid` and `--ldconfig` winning. Without
/// `--pid`, NVIDIA's "standalone" mode: the caller's own namespaces.
fn configure(items: Vec<Item<Key>>) -> Result<Command, Error> {
    let mut asked = Asked::default();
    let mut pid = None;
    let mut rootfs = None;
    let mut ldconfig = None;
    let mut cuda_compat = None;
    let (mut no_cgroups, mut no_devbind) = (false, false);
    for item in items {
        let (key, value) = match item {
            Item::Opt { key, value } => (key, value.unwrap_or_default()),
            Item::Operand(argument) if rootfs.is_some() => {
                return Err(Error::CliExtra {
                    command: "configure",
                    argument,
                })
            }
            Item::Operand(argument) => {
                rootfs = Some(argument);
                continue;
            }
        };
        match key {
            Key::Pid => pid = Some(parse_pid(&value)?),
            Key::Device => asked.devices.push(value),
            Key::Require => asked.requirements.push(value),
            Key::Ldconfig => ldconfig = Some(value),
            Key::Capability(c) => push_once(&mut asked.capabilities, c),
            Key::MigConfig => asked.mig_config.push(value),
            Key::MigMonitor => asked.mig_monitor.push(value),
            Key::NoCgroups => no_cgroups = true,
            Key::NoDevbind => no_devbind = true,
            Key::CudaCompatMode => {
                cuda_compat = Some(match value.as_str() {
                    "ldconfig" => CudaCompat::Ldconfig,
                    "mount" => CudaCompat::Mount,
                    "disabled" => CudaCompat::Disabled,
                    _ => return Err(Error::BadCudaCompatMode { value }),
                })
            }
            Key::ImexChannel => asked.imex_channels.push(value),
            _ => {}
        }
    }
    let rootfs = rootfs.ok_or(Error::NoRootfs)?;
    // configure.c: "invalid rootfs directory".
    if !rootfs.starts_with('/') || rootfs.trim_end_matches('/').is_empty() {
        return Err(Error::BadRootfs { rootfs });
    }
    let rootfs = utf8("ROOTFS", rootfs)?;
    Ok(Command::Configure(Configure {
        pid,
        rootfs: PathBuf::from(rootfs),
        asked,
        ldconfig,
        no_cgroups,
        no_devbind,
        cuda_compat,
    }))
}

fn push_once(capabilities: &mut Vec<Capability>, capability: Capability) {
    if !capabilities.contains(&capability) {
        capabilities.push(capability);
    }
}

/// A process id as NVIDIA's `str_to_pid` takes it: a positive decimal number.
fn parse_pid(value: &str) -> Result<u32, Error> {
    value
        .parse::<u32>()
        .ok()
        .filter(|pid| *pid > 0 && *pid <= i32::MAX as u32 && !value.starts_with('+'))
        .ok_or_else(|| Error::BadPid {
            value: value.to_string(),
        })
}

/// `value`, refused when it names no absolute path.
fn absolute(option: &'static str, value: String) -> Result<PathBuf, Error> {
    let value = utf8(option, value)?;
    if !value.starts_with('/') {
        return Err(Error::NotAbsolute { option, value });
    }
    Ok(PathBuf::from(value))
}

/// `value`, refused when the command line held bytes that are not UTF-8
/// (`main` hands us arguments with those replaced): a path so mangled
/// would name another file.
fn utf8(option: &'static str, value: String) -> Result<String, Error> {
    if value.contains(char::REPLACEMENT_CHARACTER) {
        return Err(Error::NotUtf8 { option });
    }
    Ok(value)
}

/// The usage text of `command` (`None`: the global one), from the option tables.
fn usage(command: Option<&str>) -> String {
    let (synopsis, doc) = match command {
        None => (
            "[OPTION...] COMMAND [ARG...]",
            "Command line utility for manipulating NVIDIA GPU containers \
             (oci-nvidia-hook answering as nvidia-container-cli).\n\n\
             Commands:\n  info       Report information about the driver and devices\n  \
             list       List driver components\n  \
             configure  Configure a container with GPU support",
        ),
        Some("info") => (
            "info [OPTION...]",
            "Query the driver and report its information as well as the devices it detected.",
        ),
        Some("list") => (
            "list [OPTION...]",
            "List the host paths a container with GPU support receives.",
        ),
        _ => (
            "configure [OPTION...] [--pid=PID] ROOTFS",
            "Configure the container being created whose init is PID (without --pid, \
             the container whose mount namespace this process runs in), with root \
             filesystem ROOTFS, with GPU support.",
        ),
    };
    let mut text = format!("Usage: {NAME} {synopsis}\n{doc}\n\nOptions:\n");
    for o in options(command) {
        let short = o.short.map(|s| format!("-{s}, ")).unwrap_or_default();
        let value = match o.value {
            Value::None => String::new(),
            Value::Required => format!("={}", o.meta),
            Value::Optional => format!("[={}]", o.meta),
        };
        let left = format!("  {short:4}--{}{value}", o.long);
        text.push_str(&format!("{left:32} {}\n", o.doc));
    }
    text
}

#[cfg(test)]
mod tests;

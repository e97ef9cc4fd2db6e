//! NVIDIA's CLI's options, command by command, as libnvidia-container's
//! argp tables declare them (`src/cli/main.c`, `info.c`, `list.c`,
//! `configure.c`): each one's names, whether it takes a value, and what it
//! does ([`Key`]).

use super::getopt::{Opt, Value};
use crate::planning::request::Capability;

/// Every option of every command, by what it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Key {
    LoadKmods,
    Debug,
    NoPivot,
    User,
    Root,
    Ldcache,
    NoCreateImexChannels,
    Csv,
    Pid,
    Device,
    Require,
    Ldconfig,
    Capability(Capability),
    MigConfig,
    MigMonitor,
    NoCgroups,
    NoDevbind,
    CudaCompatMode,
    ImexChannel,
    Libraries,
    Binaries,
    Ipcs,
    Firmwares,
    Help,
    Usage,
    Version,
}

const fn opt(
    long: &'static str,
    short: Option<char>,
    value: Value,
    key: Key,
    meta: &'static str,
    doc: &'static str,
) -> Opt<Key> {
    Opt {
        long,
        short,
        value,
        key,
        meta,
        doc,
    }
}

/// argp's own options, which every command takes.
const HELP: [Opt<Key>; 3] = [
    opt(
        "help",
        Some('?'),
        Value::None,
        Key::Help,
        "",
        "Give this help list",
    ),
    opt(
        "usage",
        None,
        Value::None,
        Key::Usage,
        "",
        "Give a short usage message",
    ),
    opt(
        "version",
        Some('V'),
        Value::None,
        Key::Version,
        "",
        "Print program version",
    ),
];

const GLOBAL: [Opt<Key>; 7] = [
    opt(
        "debug",
        Some('d'),
        Value::Required,
        Key::Debug,
        "FILE",
        "Log debug information to FILE too",
    ),
    opt(
        "load-kmods",
        Some('k'),
        Value::None,
        Key::LoadKmods,
        "",
        "Accepted; kernel modules are never loaded",
    ),
    opt(
        "no-pivot",
        Some('n'),
        Value::None,
        Key::NoPivot,
        "",
        "Accepted; nothing pivots",
    ),
    opt(
        "user",
        Some('u'),
        Value::Optional,
        Key::User,
        "UID[:GID]",
        "Accepted; no privilege separation",
    ),
    opt(
        "root",
        Some('r'),
        Value::Required,
        Key::Root,
        "PATH",
        "Path to the driver root directory",
    ),
    opt(
        "ldcache",
        Some('l'),
        Value::Required,
        Key::Ldcache,
        "FILE",
        "Accepted; the driver root's /etc/ld.so.cache is read",
    ),
    opt(
        "no-create-imex-channels",
        None,
        Value::None,
        Key::NoCreateImexChannels,
        "",
        "Accepted; the host's channels are never created, the container's always are",
    ),
];

const INFO: [Opt<Key>; 1] = [opt(
    "csv",
    None,
    Value::None,
    Key::Csv,
    "",
    "Output in CSV format",
)];

/// The capability flags, in NVIDIA's `configure` order; `list` takes
/// their long forms too.
const CAPABILITIES: [Opt<Key>; 7] = [
    opt(
        "compute",
        Some('c'),
        Value::None,
        Key::Capability(Capability::Compute),
        "",
        "Enable compute capability",
    ),
    opt(
        "utility",
        Some('u'),
        Value::None,
        Key::Capability(Capability::Utility),
        "",
        "Enable utility capability",
    ),
    opt(
        "video",
        Some('v'),
        Value::None,
        Key::Capability(Capability::Video),
        "",
        "Enable video capability",
    ),
    opt(
        "graphics",
        Some('g'),
        Value::None,
        Key::Capability(Capability::Graphics),
        "",
        "Enable graphics capability",
    ),
    opt(
        "display",
        Some('D'),
        Value::None,
        Key::Capability(Capability::Display),
        "",
        "Enable display capability",
    ),
    opt(
        "ngx",
        Some('n'),
        Value::None,
        Key::Capability(Capability::Ngx),
        "",
        "Enable ngx capability",
    ),
    opt(
        "compat32",
        None,
        Value::None,
        Key::Capability(Capability::Compat32),
        "",
        "Enable 32bits compatibility",
    ),
];

const CONFIGURE: [Opt<Key>; 10] = [
    opt(
        "pid",
        Some('p'),
        Value::Required,
        Key::Pid,
        "PID",
        "Container PID",
    ),
    opt(
        "device",
        Some('d'),
        Value::Required,
        Key::Device,
        "ID",
        "Device UUID(s) or index(es) to isolate",
    ),
    opt(
        "require",
        Some('r'),
        Value::Required,
        Key::Require,
        "EXPR",
        "Check container requirements",
    ),
    opt(
        "ldconfig",
        Some('l'),
        Value::Required,
        Key::Ldconfig,
        "PATH",
        "Accepted; ldconfig is never run",
    ),
    opt(
        "mig-config",
        None,
        Value::Required,
        Key::MigConfig,
        "ID",
        "Enable configuration of MIG devices",
    ),
    opt(
        "mig-monitor",
        None,
        Value::Required,
        Key::MigMonitor,
        "ID",
        "Enable monitoring of MIG devices",
    ),
    opt(
        "no-cgroups",
        None,
        Value::None,
        Key::NoCgroups,
        "",
        "Don't use cgroup enforcement",
    ),
    opt(
        "no-devbind",
        None,
        Value::None,
        Key::NoDevbind,
        "",
        "Don't create device nodes",
    ),
    opt(
        "cuda-compat-mode",
        None,
        Value::Required,
        Key::CudaCompatMode,
        "MODE",
        "CUDA forward compatibility: ldconfig, mount (as ldconfig) or disabled",
    ),
    IMEX_CHANNEL,
];

/// `--imex-channel`, which `configure` and (ours only) `list` take.
const IMEX_CHANNEL: Opt<Key> = opt(
    "imex-channel",
    None,
    Value::Required,
    Key::ImexChannel,
    "CHANNEL",
    "IMEX channel CHANNEL, for the container (repeatable; all for every channel)",
);

const LIST: [Opt<Key>; 8] = [
    opt(
        "device",
        Some('d'),
        Value::Required,
        Key::Device,
        "ID",
        "Device UUID(s) or index(es) to list",
    ),
    opt(
        "libraries",
        Some('l'),
        Value::None,
        Key::Libraries,
        "",
        "List driver libraries",
    ),
    opt(
        "binaries",
        Some('b'),
        Value::None,
        Key::Binaries,
        "",
        "List driver binaries",
    ),
    opt(
        "ipcs",
        Some('i'),
        Value::None,
        Key::Ipcs,
        "",
        "List driver ipcs",
    ),
    opt(
        "firmwares",
        Some('f'),
        Value::None,
        Key::Firmwares,
        "",
        "List driver firmwares",
    ),
    opt(
        "mig-config",
        None,
        Value::Required,
        Key::MigConfig,
        "ID",
        "MIG devices to list config capabilities files for",
    ),
    opt(
        "mig-monitor",
        None,
        Value::Required,
        Key::MigMonitor,
        "ID",
        "MIG devices to list monitor capabilities files for",
    ),
    IMEX_CHANNEL,
];

/// The options of `command` (`None`: the global ones), argp's own last.
pub(super) fn options(command: Option<&str>) -> Vec<Opt<Key>> {
    let mut opts: Vec<Opt<Key>> = match command {
        None => GLOBAL.to_vec(),
        Some("info") => INFO.to_vec(),
        Some("list") => {
            // `list` takes the capability flags' long forms only: its short
            // letters mean other things there.
            let mut opts = LIST.to_vec();
            opts.extend(CAPABILITIES.iter().map(|o| Opt { short: None, ..*o }));
            opts
        }
        _ => CONFIGURE[..4]
            .iter()
            .chain(&CAPABILITIES)
            .chain(&CONFIGURE[4..])
            .copied()
            .collect(),
    };
    opts.extend(HELP);
    opts
}

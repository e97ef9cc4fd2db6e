//! `nvidia-ctk cdi generate` and `cdi list`: NVIDIA's flags, and the
//! environment variables NVIDIA's v1.20 declares for them, read into our
//! operations. `generate` becomes our own `cdi generate` (one planner
//! call, the same spec): a flag we give NVIDIA's meaning is honoured, one
//! that has none here is accepted with a note saying so, and a mode we
//! cannot serve is refused by name. `list` becomes the listing of every
//! spec's devices, any vendor's.
//!
//! The environment read here is the administrator's command environment
//! (the refresh unit's `.env` file, a shell), never a container's.

use std::path::PathBuf;

use clap::Subcommand;

use super::super::common::SpecFormat;
use super::super::{Error, Result};
use crate::app::{Generate, Note, Operation};
use crate::specs::cdi::{Format, Mode};
use crate::specs::cdi_hook_args::Roots;

/// `nvidia-ctk cdi`'s commands.
#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum CdiCommand {
    /// Generate the CDI spec for this host's GPUs (our own cdi generate).
    Generate(Box<GenerateArgs>),
    /// Print the devices the CDI specs in the spec directories define.
    List(ListArgs),
}

/// `cdi generate`'s flags, NVIDIA's names, defaults and environment variables.
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct GenerateArgs {
    /// Where to write the spec, atomically [default: stdout].
    #[arg(long, value_name = "FILE", env = "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH")]
    pub output: Option<PathBuf>,
    /// Encoding [default: from the output's extension, yaml for stdout].
    #[arg(
        long,
        value_enum,
        ignore_case = true,
        env = "NVIDIA_CTK_CDI_GENERATE_OUTPUT_FORMAT"
    )]
    pub format: Option<SpecFormat>,
    /// Device names: index (0, 0:1), uuid (GPU-…, MIG-…) or type-index
    /// (gpu0, mig0:1); repeatable or a comma list [default: index and uuid, as NVIDIA's].
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "index,uuid",
        value_name = "STRATEGY",
        env = "NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES"
    )]
    pub device_name_strategy: Vec<String>,
    /// The driver's root, for this spec and its hook [default: the config's driver.root].
    #[arg(long, value_name = "DIR", env = "NVIDIA_CTK_DRIVER_ROOT")]
    pub driver_root: Option<PathBuf>,
    /// The root whose dev/ holds the nodes [default: --driver-root when given, else the config's driver.dev-root].
    #[arg(long, value_name = "DIR", env = "NVIDIA_CTK_DEV_ROOT")]
    pub dev_root: Option<PathBuf>,
    /// The program NVIDIA's spec hooks run: noted, the spec's hook is this binary.
    #[arg(
        long,
        alias = "nvidia-ctk-path",
        value_name = "PATH",
        env = "NVIDIA_CTK_CDI_HOOK_PATH"
    )]
    pub nvidia_cdi_hook_path: Option<PathBuf>,
    /// The ldconfig NVIDIA's hook runs: noted, ldconfig is never run.
    #[arg(
        long,
        value_name = "PATH",
        env = "NVIDIA_CTK_CDI_GENERATE_LDCONFIG_PATH"
    )]
    pub ldconfig_path: Option<PathBuf>,
    /// The spec's vendor [default: nvidia.com; management.nvidia.com with --mode=management].
    #[arg(long, alias = "cdi-vendor", env = "NVIDIA_CTK_CDI_GENERATE_VENDOR")]
    pub vendor: Option<String>,
    /// The spec's device class [default: gpu].
    #[arg(long, alias = "cdi-class", env = "NVIDIA_CTK_CDI_GENERATE_CLASS")]
    pub class: Option<String>,
    /// Leave the `all` device out of the spec.
    #[arg(long, env = "NVIDIA_CTK_CDI_GENERATE_NO_ALL_DEVICE")]
    pub no_all_device: bool,
    /// How devices are found: auto, nvml (a native driver), wsl (a WSL2 host)
    /// or management (one device, all, for pods that manage the GPUs).
    #[arg(
        long,
        alias = "discovery-mode",
        default_value = "auto",
        env = "NVIDIA_CTK_CDI_GENERATE_MODE"
    )]
    pub mode: String,
    /// The devices the spec has, by index or UUID; all, or none [default: all].
    #[arg(
        long,
        aliases = ["device-ids", "device", "devices"],
        value_delimiter = ',',
        default_value = "all",
        value_name = "ID",
        env = "NVIDIA_CTK_CDI_GENERATE_DEVICE_IDS"
    )]
    pub device_id: Vec<String>,
    /// NVIDIA's hooks to leave out; all leaves out the spec's hook.
    #[arg(
        long,
        alias = "disable-hooks",
        value_delimiter = ',',
        value_name = "HOOK",
        env = "NVIDIA_CTK_CDI_GENERATE_DISABLED_HOOKS"
    )]
    pub disable_hook: Vec<String>,
    /// NVIDIA's hooks to add, overriding --disable-hook.
    #[arg(
        long,
        alias = "enable-hooks",
        value_delimiter = ',',
        value_name = "HOOK",
        env = "NVIDIA_CTK_CDI_GENERATE_ENABLED_HOOKS"
    )]
    pub enable_hook: Vec<String>,
    /// NVIDIA's feature flags for spec generation: each noted with what it means here.
    #[arg(
        long,
        alias = "feature-flags",
        value_delimiter = ',',
        value_name = "FLAG",
        env = "NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS"
    )]
    pub feature_flag: Vec<String>,
    /// Where NVIDIA's CSV mode looks for libraries: noted (the driver
    /// root's paths are resolved as the CSV files give them).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "DIR",
        env = "NVIDIA_CTK_CDI_GENERATE_LIBRARY_SEARCH_PATHS"
    )]
    pub library_search_path: Vec<String>,
    /// Where NVIDIA looks for config files to discover from: noted.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "DIR",
        env = "NVIDIA_CTK_CDI_GENERATE_CONFIG_SEARCH_PATHS"
    )]
    pub config_search_path: Vec<String>,
    /// The CSV files read in csv mode (a Jetson/Tegra host) [default:
    /// devices.csv, drivers.csv and l4t.csv in the driver root's
    /// /etc/nvidia-container-runtime/host-files-for-container.d].
    #[arg(
        long = "csv.file",
        value_delimiter = ',',
        value_name = "FILE",
        env = "NVIDIA_CTK_CDI_GENERATE_CSV_FILES"
    )]
    pub csv_file: Vec<String>,
    /// Patterns of the CSV files' `sym` entries to leave out (a glob on the
    /// path, or `**/GLOB` on the file name).
    #[arg(
        long = "csv.ignore-pattern",
        value_delimiter = ',',
        value_name = "PATTERN",
        env = "NVIDIA_CTK_CDI_GENERATE_CSV_IGNORE_PATTERNS"
    )]
    pub csv_ignore_pattern: Vec<String>,
    /// NVIDIA's compat folder for Orin: noted (NVIDIA passes it to
    /// enable-cuda-compat only where NVML answers, which a CSV host here never asks).
    #[arg(
        long = "csv.compat-container-root",
        value_name = "DIR",
        env = "NVIDIA_CTK_CDI_GENERATE_CSV_CONTAINER_COMPAT_ROOT"
    )]
    pub csv_compat_container_root: Option<String>,
}

/// `cdi list`'s flags.
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct ListArgs {
    /// A directory to read specs from (repeatable) [default: /etc/cdi, /var/run/cdi].
    #[arg(long = "spec-dir", value_name = "DIR")]
    pub spec_dirs: Vec<PathBuf>,
}

/// The operation `command` asks for.
pub fn operation(command: &CdiCommand) -> Result<(Operation, Vec<Note>)> {
    match command {
        CdiCommand::Generate(args) => generate(args),
        CdiCommand::List(args) => Ok((
            Operation::CdiSpecDevices {
                spec_dirs: args.spec_dirs.clone(),
            },
            Vec::new(),
        )),
    }
}

/// NVIDIA's modes this spec cannot be made in (its v1.20 `nvcdi.AllModes`
/// less ours).
const UNSERVED_MODES: [&str; 5] = ["gds", "mofed", "gdrcopy", "nvswitch", "imex"];

/// The modes served, as the refusal names them.
const SERVED_MODES: &str =
    "auto, nvml (a native driver), wsl (a WSL2 host), csv (a Jetson/Tegra host) and management are";

/// The mode `--mode` names (in any case, as NVIDIA lowercases it).
fn mode(given: &str) -> Result<Mode> {
    Ok(match given.to_ascii_lowercase().as_str() {
        "auto" => Mode::Auto,
        "nvml" => Mode::Nvml,
        "wsl" => Mode::Wsl,
        "csv" => Mode::Csv,
        "management" => Mode::Management,
        other if UNSERVED_MODES.contains(&other) => {
            return Err(Error::Usage(format!(
                "--mode={given} is not supported: {SERVED_MODES}"
            )))
        }
        _ => {
            return Err(Error::Usage(format!(
                "--mode={given} is not a mode: {SERVED_MODES}"
            )))
        }
    })
}

/// The kind `--vendor` and `--class` name; `None` leaves it to the
/// operation (ours, or the management kind).
fn kind(args: &GenerateArgs, mode: Mode) -> Result<Option<String>> {
    if args.vendor.is_none() && args.class.is_none() {
        return Ok(None);
    }
    let vendor = args.vendor.as_deref().unwrap_or(match mode {
        Mode::Management => "management.nvidia.com",
        _ => "nvidia.com",
    });
    let kind = format!("{vendor}/{}", args.class.as_deref().unwrap_or("gpu"));
    match crate::specs::cdi::name::kind_problem(&kind) {
        Some(why) => Err(Error::Usage(format!("--vendor/--class: {why}"))),
        None => Ok(Some(kind)),
    }
}

/// `cdi generate`: NVIDIA's flags checked, then our own generation.
fn generate(args: &GenerateArgs) -> Result<(Operation, Vec<Note>)> {
    let mode = mode(&args.mode)?;
    let kind = kind(args, mode)?;
    // Each strategy is checked where the spec is made, as for our own
    // command line (`cdi::parse_strategies`).
    let mut notes = Vec::new();
    let hook = hooks::read(&args.disable_hook, &args.enable_hook, &mut notes)?;
    features::note(&args.feature_flag, &mut notes);
    note_ignored(args, &mut notes);
    let mut all_device = !args.no_all_device;
    if all_device && args.device_id.iter().any(|id| id == "none") {
        // As NVIDIA's: a spec asked to hold no GPU has no `all` either.
        notes.push(Note {
            level: log::Level::Warn,
            text: "--device-id=none: no all device in the spec".into(),
        });
        all_device = false;
    }
    // NVIDIA's dev root is the driver root unless it is named.
    let roots = Roots {
        driver: args.driver_root.clone(),
        dev: args.dev_root.clone().or_else(|| args.driver_root.clone()),
        csv: None,
    };
    // Our own `cdi generate`, as `oci-nvidia-hook cdi generate` runs it:
    // the same planner call, with NVIDIA's defaults.
    let generate = Generate {
        format: args.format.map(Format::from),
        strategies: args.device_name_strategy.join(","),
        all_device,
        kind,
        device_ids: args.device_id.clone(),
        hook,
        roots,
        csv: crate::config::CsvSelection {
            files: (!args.csv_file.is_empty())
                .then(|| args.csv_file.iter().map(PathBuf::from).collect()),
            ignore_patterns: args.csv_ignore_pattern.clone(),
            all: false,
            force: false,
        },
        ..Generate::new(
            args.output.clone().unwrap_or_else(|| PathBuf::from("-")),
            mode,
        )
    };
    Ok((Operation::CdiGenerate(generate), notes))
}

/// Notes for the flags that have no meaning here, each given one.
fn note_ignored(args: &GenerateArgs, notes: &mut Vec<Note>) {
    let info = |text: String| Note {
        level: log::Level::Info,
        text,
    };
    if let Some(path) = &args.nvidia_cdi_hook_path {
        notes.push(info(format!(
            "--nvidia-cdi-hook-path={} ignored: the spec's hook is this binary",
            path.display()
        )));
    }
    if let Some(path) = &args.ldconfig_path {
        notes.push(info(format!(
            "--ldconfig-path={} ignored: the spec's hook writes the loader cache itself and never runs ldconfig",
            path.display()
        )));
    }
    if !args.library_search_path.is_empty() {
        notes.push(info(format!(
            "--library-search-path={} ignored: set driver.library-search-paths in the config, \
             which the spec's hook reads too at container start",
            args.library_search_path.join(",")
        )));
    }
    if let Some(root) = &args.csv_compat_container_root {
        notes.push(info(format!(
            "--csv.compat-container-root={root} ignored: NVIDIA passes it to enable-cuda-compat \
             only where NVML gives the host's CUDA version, and a CSV host's spec here has no \
             such hook"
        )));
    }
    if !args.config_search_path.is_empty() {
        notes.push(info(format!(
            "--config-search-path={} ignored: the driver's files are found from the driver root's loader cache",
            args.config_search_path.join(",")
        )));
    }
}

/// NVIDIA's spec hooks, by the names `--disable-hook` and `--enable-hook`
/// take, against the one hook our spec runs.
mod hooks {
    use super::{Error, Note, Result};

    /// What our spec's one hook (`cdi-hook`) does of each NVIDIA hook.
    const HOOKS: [(&str, Done); 6] = [
        ("create-symlinks", Done::Yes("makes the SONAME and development links")),
        ("update-ldcache", Done::Yes("writes the container's loader cache")),
        (
            "enable-cuda-compat",
            Done::No("the image's CUDA forward-compatibility libraries are not preferred on the CDI path"),
        ),
        (
            "disable-device-node-modification",
            Done::Yes("masks /proc/driver/nvidia, its params saying ModifyDeviceFiles: 0"),
        ),
        (
            "update-application-profile",
            Done::Yes("writes the application profile for graphics"),
        ),
        (
            "chmod",
            Done::No("the runtime makes the nodes with the spec's modes; nothing is chmod-ed"),
        ),
    ];

    /// Whether the hook does what NVIDIA's hook of that name does.
    #[derive(Clone, Copy)]
    enum Done {
        Yes(&'static str),
        No(&'static str),
    }

    /// Whether the spec carries its hook, and notes for every name given:
    /// `all` disabled (and none enabled) leaves it out, as NVIDIA's spec
    /// then has no hook; one step cannot be left out of our one hook.
    pub(super) fn read(
        disabled: &[String],
        enabled: &[String],
        notes: &mut Vec<Note>,
    ) -> Result<bool> {
        if enabled.iter().any(|h| h == "all") {
            // NVIDIA's own refusal, word for word.
            return Err(Error::Usage("enabling all hooks is not supported".into()));
        }
        let note = |level, text: String| Note { level, text };
        let without_hook = disabled.iter().any(|h| h == "all") && enabled.is_empty();
        if without_hook {
            notes.push(note(
                log::Level::Warn,
                "--disable-hook=all: the spec has no hook, so nothing writes the container's loader \
                 cache, links or /proc/driver/nvidia mask"
                    .into(),
            ));
        }
        for name in disabled.iter().filter(|h| *h != "all") {
            let text = match what(name) {
                Some(Done::Yes(does)) if !without_hook => format!(
                    "--disable-hook={name} ignored: the spec's one hook {does}, with the rest of its work"
                ),
                Some(_) => format!("--disable-hook={name}: nothing to leave out"),
                None => format!("--disable-hook={name}: no hook of NVIDIA's has that name"),
            };
            notes.push(note(log::Level::Warn, text));
        }
        for name in enabled {
            let (level, text) = match what(name) {
                Some(Done::Yes(does)) => (
                    log::Level::Info,
                    format!("--enable-hook={name}: the spec's hook {does}"),
                ),
                Some(Done::No(why)) => (
                    log::Level::Warn,
                    format!("--enable-hook={name} ignored: {why}"),
                ),
                None => (
                    log::Level::Warn,
                    format!("--enable-hook={name}: no hook of NVIDIA's has that name"),
                ),
            };
            notes.push(note(level, text));
        }
        Ok(!without_hook)
    }

    /// What our hook does of the NVIDIA hook `name`; `None` for no such hook.
    fn what(name: &str) -> Option<Done> {
        HOOKS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, done)| *done)
    }
}

/// NVIDIA's feature flags for spec generation (v1.20's
/// `pkg/nvcdi/options.go` `FeatureFlag`s), each with what it means here.
mod features {
    use super::Note;

    /// Each flag, whether our spec already is as it asks, and why.
    const FLAGS: [(&str, bool, &str); 6] = [
        (
            "disable-nvsandboxutils",
            true,
            "nvsandboxutils is never used; the driver's files are found from its loader cache",
        ),
        (
            "no-additional-gids-for-device-nodes",
            true,
            "the spec sets no additionalGids",
        ),
        (
            "enable-explicit-driver-libraries",
            true,
            "the spec mounts the driver's libraries by name, from the capabilities' lists",
        ),
        (
            "disable-multiple-csv-devices",
            true,
            "only NVIDIA's csv mode (Jetson) has CSV devices",
        ),
        (
            "enable-coherent-annotations",
            false,
            "no coherent or non-coherent spec is written beside the GPU spec",
        ),
        (
            "disable-ipc-discoverer",
            false,
            "the daemons' sockets (persistenced, MPS, fabric manager) are mounted where the host has them",
        ),
    ];

    /// A note for each flag in `given`.
    pub(super) fn note(given: &[String], notes: &mut Vec<Note>) {
        for name in given {
            // NVIDIA still reads its first release's spelling of one flag.
            let known = match name.as_str() {
                "disable-nvsandbox-utils" => "disable-nvsandboxutils",
                name => name,
            };
            let note = match FLAGS.iter().find(|(n, _, _)| *n == known) {
                Some((_, true, why)) => Note {
                    level: log::Level::Info,
                    text: format!("--feature-flag={name}: already so here: {why}"),
                },
                Some((_, false, why)) => Note {
                    level: log::Level::Warn,
                    text: format!("--feature-flag={name} ignored: {why}"),
                },
                // NVIDIA ignores a name it does not know; so do we, aloud.
                None => Note {
                    level: log::Level::Warn,
                    text: format!("--feature-flag={name} ignored: NVIDIA's v1.20 has no such flag"),
                },
            };
            notes.push(note);
        }
    }
}

#[cfg(test)]
mod tests;

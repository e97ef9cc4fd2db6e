//! Our own command line: its options, read by clap (or, for the hook's
//! own command lines, by [`fast`]), into an [`Invocation`].

pub mod hook_argv;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use super::common::{SpecFormat, VERSION};
use crate::app::{self, Ask, Generate, Invocation, Operation, Overrides};
use crate::planning::image::ImageLayout;
use crate::specs::cdi::Format;

/// What `--help` and the manual page's DESCRIPTION say of the whole command.
const LONG_ABOUT: &str = "Gives OCI containers NVIDIA GPUs. A runtime runs it as a prestart or \
createRuntime hook (a hooks.d file, Docker's --gpus, a config.json entry): it takes the \
request from the container's own NVIDIA_VISIBLE_DEVICES and NVIDIA_DRIVER_CAPABILITIES, \
checks NVIDIA_REQUIRE_*, and injects the device nodes and the host driver's files. \
info and list show what the host has and what a container would receive; cdi writes a \
Container Device Interface spec for engines that read one; runtime wraps runc and writes \
the GPUs into the container's spec. Configuration comes only from the file, never from \
the environment.";

/// oci-nvidia-hook: gives OCI containers NVIDIA GPUs.
#[derive(Debug, PartialEq, Eq, Parser)]
#[command(name = crate::util::this_program::NAME, version = VERSION, about, long_about = LONG_ABOUT)]
pub struct Cli {
    /// Configuration file [default: /etc/oci-nvidia-hook/config.toml, optional]
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Print the host driver's inventory: version, GPUs, device nodes, libraries.
    Info {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print what a container with this request would receive.
    List {
        /// GPUs, as NVIDIA_VISIBLE_DEVICES takes them: all, none, or a comma list of indices, GPU-<uuid> or PCI bus ids.
        #[arg(long, default_value = "all", value_name = "LIST")]
        device: String,
        /// Driver capabilities, as NVIDIA_DRIVER_CAPABILITIES takes them.
        #[arg(long, default_value = "utility,compute", value_name = "LIST")]
        capabilities: String,
        /// Library layout of the image the destinations are for.
        #[arg(long, value_enum, default_value = "debian")]
        layout: Layout,
        /// IMEX channels, as NVIDIA_IMEX_CHANNELS takes them: all, or a comma list.
        #[arg(long, value_name = "LIST")]
        imex_channels: Option<String>,
        /// A feature-gated device, as its NVIDIA_<NAME>=enabled asks (repeatable).
        #[arg(long, value_enum, value_name = "NAME")]
        enable: Vec<GatedName>,
        /// As NVIDIA_REQUIRE_JETPACK takes it: csv-mounts=all lists what every
        /// CSV file of a Jetson host provides, not only the base files'.
        #[arg(long, value_name = "VALUE")]
        jetpack: Option<String>,
        /// Print JSON with each item's container destination and mount options.
        #[arg(long)]
        json: bool,
        /// Plan for the container this OCI bundle describes, as the hook would: its
        /// environment, device mounts, privilege and rootfs (instead of the flags).
        #[arg(long, value_name = "DIR", conflicts_with_all = ["device", "capabilities", "layout", "imex_channels", "enable", "jetpack"])]
        bundle: Option<PathBuf>,
    },
    /// Container Device Interface: generate, list and validate the host's spec.
    Cdi {
        /// What to do with the spec.
        #[command(subcommand)]
        command: CdiCommand,
    },
    /// The createRuntime hook of a CDI spec we generated: loader cache, links
    /// and /proc/driver/nvidia mask, after the runtime added nodes and mounts.
    #[command(name = "cdi-hook")]
    CdiHook {
        /// The OCI stage it runs at; only createRuntime is accepted.
        stage: String,
        /// The driver version the spec was made for.
        #[arg(long, value_name = "VERSION")]
        driver_version: String,
        /// The capabilities the spec's mounts carry.
        #[arg(long, value_name = "LIST")]
        capabilities: String,
        /// The library layout of the spec's container paths.
        #[arg(long, value_enum)]
        layout: Layout,
        /// The host's MIG layout when the spec was made; another one now is refused.
        #[arg(long, value_name = "LAYOUT")]
        mig_layout: Option<String>,
        /// The driver root the spec was made on, instead of the config's.
        #[arg(long, value_name = "DIR")]
        driver_root: Option<PathBuf>,
        /// The dev root the spec was made on, instead of the config's.
        #[arg(long, value_name = "DIR")]
        dev_root: Option<PathBuf>,
        /// The spec was made for a CSV (Jetson/Tegra) host: this one is read so too.
        #[arg(long)]
        csv_host: bool,
        /// The spec was made from every CSV file of the host's directory.
        #[arg(long, requires = "csv_host")]
        csv_all: bool,
        /// A CSV file the spec was made from (repeatable) [default: the base files].
        #[arg(long = "csv-file", value_name = "FILE")]
        csv_files: Vec<PathBuf>,
        /// A pattern of `sym` entries the spec was made ignoring (repeatable).
        #[arg(long = "csv-ignore-pattern", value_name = "PATTERN")]
        csv_ignore_patterns: Vec<String>,
    },
    /// Runtime mode: write a GPU container's devices, mounts and hook into its
    /// config.json on create/run, then exec the real runtime (runc) with these arguments.
    #[command(disable_help_flag = true)]
    Runtime {
        /// The runtime's own command line, passed on unchanged.
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "RUNC ARGS"
        )]
        args: Vec<std::ffi::OsString>,
    },
    /// Diagnose why a container does not see the GPU, layer by layer: host
    /// driver, runtime wiring, an image's needs, and a live container.
    Doctor(DoctorArgs),
    /// OCI hook: inject the GPUs the container asks for (state JSON on stdin).
    Prestart,
    /// OCI hook at createRuntime: the same point as prestart.
    #[command(name = "create-runtime", alias = "createRuntime")]
    CreateRuntime,
    /// Any other hook stage is refused.
    #[command(external_subcommand)]
    Other(Vec<String>),
}

/// `doctor`'s options.
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct DoctorArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also run the host's `nvidia-smi -L` (bounded to 10 s).
    #[arg(long)]
    pub host_smi: bool,
    /// An unpacked image to check against this host: its CUDA version and
    /// compat libraries are read (never executed).
    #[arg(long, value_name = "DIR")]
    pub image_rootfs: Option<PathBuf>,
    /// The image's OCI config (`skopeo inspect --config`, or `docker
    /// inspect` output), for its Env.
    #[arg(long, value_name = "FILE")]
    pub image_config: Option<PathBuf>,
    /// A container setting, after the image's (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// The image's CUDA version, stated directly.
    #[arg(long, value_name = "X.Y")]
    pub cuda: Option<String>,
    /// Start a throwaway container through this host's runc and the hook as installed.
    #[arg(long)]
    pub run: bool,
    /// Where the engines' files and processes are (hooks.d, daemon.json,
    /// crio.conf, containerd's config, /etc/cdi, /proc) [default: /].
    #[arg(long, value_name = "DIR")]
    pub host_root: Option<PathBuf>,
    /// The live check's half inside its container.
    #[arg(long, hide = true)]
    pub inside: bool,
}

/// What `cdi` does.
#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum CdiCommand {
    /// Write the spec for every GPU of this host (atomically, mode 0644).
    Generate {
        /// Where to write it; - for stdout.
        #[arg(long, default_value = crate::specs::cdi::DEFAULT_OUTPUT, value_name = "FILE")]
        output: PathBuf,
        /// Encoding [default: from the output's extension, yaml for stdout].
        #[arg(long, value_enum)]
        format: Option<SpecFormat>,
        /// Device names to write: index (0, 0:1), uuid (GPU-…, MIG-…), or both.
        #[arg(long, default_value = app::DEFAULT_STRATEGIES, value_name = "LIST")]
        device_name_strategy: String,
        /// Capabilities whose files the spec mounts [default: all the config supports].
        #[arg(long, value_name = "LIST")]
        capabilities: Option<String>,
        /// Library layout of the container paths.
        #[arg(long, value_enum, default_value = "debian")]
        layout: Layout,
        /// With no driver to describe (the kernel module not loaded, or none of
        /// its libraries left in the driver root), remove the output and its IMEX
        /// spec (specs of ours only) instead of failing: what the refresh service runs.
        #[arg(long)]
        remove_without_driver: bool,
        /// The kind of host: auto (what discovery finds), nvml (a native
        /// driver), wsl (a WSL2 host) or csv (a Jetson/Tegra host's CSV
        /// mount specs, whatever discovery finds); nvml and wsl refuse the others.
        #[arg(long, value_enum, default_value = "auto")]
        mode: SpecMode,
    },
    /// Print the device names a spec for this host offers (nvidia.com/gpu=…).
    List {
        /// Device names: index, uuid, or both.
        #[arg(long, default_value = app::DEFAULT_STRATEGIES, value_name = "LIST")]
        device_name_strategy: String,
    },
    /// Check a spec (YAML or JSON, ours or another vendor's) against the CDI
    /// schema and this host; print one line per problem, exit 1 if any.
    Validate {
        /// The spec file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
}

/// The feature-gated devices `list --enable` names, in the order its
/// help lists them: each value is the name of a class of the
/// [`crate::planning::device_class`] table, which says what it enables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GatedName {
    /// NVIDIA_GDS: GPUDirect Storage.
    Gds,
    /// NVIDIA_MOFED: the InfiniBand devices.
    Mofed,
    /// NVIDIA_NVSWITCH: the NVSwitch devices and the fabric manager.
    Nvswitch,
    /// NVIDIA_GDRCOPY: gdrdrv.
    Gdrcopy,
}

impl GatedName {
    /// The variable that enables it: its class's, found by its name
    /// (a test holds every value to a class, and every class to a value).
    pub fn variable(self) -> Option<&'static str> {
        let value = self.to_possible_value()?;
        let class = crate::planning::device_class::Class::named(value.get_name())?;
        Some(class.row().variable)
    }
}

/// `cdi generate --mode`: the kind of host the spec is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SpecMode {
    /// The host discovery finds.
    Auto,
    /// A native driver.
    Nvml,
    /// A WSL2 host.
    Wsl,
    /// A Jetson/Tegra host: its CSV mount specs.
    Csv,
}

impl From<SpecMode> for crate::specs::cdi::Mode {
    fn from(mode: SpecMode) -> Self {
        match mode {
            SpecMode::Auto => crate::specs::cdi::Mode::Auto,
            SpecMode::Nvml => crate::specs::cdi::Mode::Nvml,
            SpecMode::Wsl => crate::specs::cdi::Mode::Wsl,
            SpecMode::Csv => crate::specs::cdi::Mode::Csv,
        }
    }
}

/// Image layouts selectable on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Layout {
    /// /usr/lib/x86_64-linux-gnu (Debian, Ubuntu).
    Debian,
    /// /usr/lib64 (RHEL, Fedora, SUSE).
    Rpm,
}

impl From<ImageLayout> for Layout {
    fn from(layout: ImageLayout) -> Self {
        match layout {
            ImageLayout::Debian => Layout::Debian,
            ImageLayout::Rpm => Layout::Rpm,
        }
    }
}

impl From<Layout> for ImageLayout {
    fn from(layout: Layout) -> Self {
        match layout {
            Layout::Debian => ImageLayout::Debian,
            Layout::Rpm => ImageLayout::Rpm,
        }
    }
}

/// Reads `args` (`argv[0]` first); the hook's own command lines skip
/// clap's start-up ([`fast`]); clap prints its own errors and exits.
pub fn parse(args: &[std::ffi::OsString]) -> Invocation {
    let cli = hook_argv::parse(args).unwrap_or_else(|| Cli::parse_from(args));
    invocation(cli)
}

/// The operation `cli` asks for, `--config` its one override, and the
/// roots a spec's `cdi-hook` records where its spec was made on others.
pub fn invocation(cli: Cli) -> Invocation {
    let operation = operation(cli.command);
    let roots = match &operation {
        Operation::CdiHook { made, .. } => made.roots.clone(),
        _ => Default::default(),
    };
    let overrides = Overrides {
        config: cli.config,
        driver_root: roots.driver,
        dev_root: roots.dev,
        csv: roots.csv,
        ..Overrides::default()
    };
    Invocation::Run(operation, overrides)
}

/// The operation a command names.
fn operation(command: Command) -> Operation {
    match command {
        Command::Info { json } => Operation::Info { json },
        Command::List {
            device,
            capabilities,
            layout,
            imex_channels,
            enable,
            jetpack,
            json,
            bundle,
        } => {
            let ask = match bundle {
                Some(dir) => Ask::Bundle(dir),
                None => Ask::Flags {
                    devices: device,
                    capabilities,
                    layout: layout.into(),
                    env: imex_channels
                        .iter()
                        .map(|c| format!("NVIDIA_IMEX_CHANNELS={c}"))
                        .chain(
                            enable
                                .iter()
                                .filter_map(|g| g.variable())
                                .map(|v| format!("{v}=enabled")),
                        )
                        .chain(
                            jetpack
                                .iter()
                                .map(|j| format!("NVIDIA_REQUIRE_JETPACK={j}")),
                        )
                        .collect(),
                },
            };
            Operation::List { ask, json }
        }
        Command::Cdi {
            command:
                CdiCommand::Generate {
                    output,
                    format,
                    device_name_strategy,
                    capabilities,
                    layout,
                    remove_without_driver,
                    mode,
                },
        } => Operation::CdiGenerate(Generate {
            format: format.map(Format::from),
            strategies: device_name_strategy,
            capabilities,
            layout: layout.into(),
            remove_without_driver,
            ..Generate::new(output, mode.into())
        }),
        Command::Cdi {
            command: CdiCommand::List {
                device_name_strategy,
            },
        } => Operation::CdiNames {
            strategies: device_name_strategy,
        },
        Command::Cdi {
            command: CdiCommand::Validate { file },
        } => Operation::CdiValidate { file },
        Command::CdiHook {
            stage,
            driver_version,
            capabilities,
            layout,
            mig_layout,
            driver_root,
            dev_root,
            csv_host,
            csv_all,
            csv_files,
            csv_ignore_patterns,
        } => Operation::CdiHook {
            stage,
            made: crate::specs::cdi_hook_args::SpecMade {
                driver_version,
                capabilities,
                layout: layout.into(),
                mig_layout,
                roots: crate::specs::cdi_hook_args::Roots {
                    driver: driver_root,
                    dev: dev_root,
                    csv: csv_host.then(|| crate::config::CsvSelection {
                        files: (!csv_files.is_empty()).then_some(csv_files),
                        ignore_patterns: csv_ignore_patterns,
                        all: csv_all,
                        force: false,
                    }),
                },
            },
        },
        Command::Runtime { args } => Operation::Runtime { args },
        Command::Doctor(args) => Operation::Doctor(args.into()),
        Command::Prestart => Operation::Prestart { entry: "prestart" },
        Command::CreateRuntime => Operation::Prestart {
            entry: "createRuntime",
        },
        Command::Other(args) => Operation::RefusedStage {
            stage: args.first().cloned().unwrap_or_default(),
        },
    }
}

impl From<DoctorArgs> for app::DoctorOptions {
    fn from(args: DoctorArgs) -> Self {
        app::DoctorOptions {
            json: args.json,
            inside: args.inside,
            checks: crate::doctor::Options {
                host_smi: args.host_smi,
                image_rootfs: args.image_rootfs,
                image_config: args.image_config,
                env: args.env,
                cuda: args.cuda,
                run: args.run,
                host_root: args.host_root,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planning::device_class::Class;

    /// `list --enable` offers every device class, by its name, and no other.
    #[test]
    fn each_device_class_is_a_gated_name() {
        let names: Vec<String> = GatedName::value_variants()
            .iter()
            .filter_map(|g| Some(g.to_possible_value()?.get_name().to_string()))
            .collect();
        let mut offered = names.clone();
        let mut classes: Vec<String> = Class::all().map(|c| c.row().name.into()).collect();
        offered.sort();
        classes.sort();
        assert_eq!(offered, classes);
        assert_eq!(names, ["gds", "mofed", "nvswitch", "gdrcopy"]);
        assert_eq!(GatedName::Nvswitch.variable(), Some("NVIDIA_NVSWITCH"));
        assert!(GatedName::value_variants()
            .iter()
            .all(|g| g.variable().is_some()));
    }

    /// `list --jetpack VALUE` asks as an image's `NVIDIA_REQUIRE_JETPACK`
    /// does; `--bundle` reads the image's own variable instead.
    #[test]
    fn list_jetpack_is_the_images_variable() {
        let cli = Cli::try_parse_from(["oci-nvidia-hook", "list", "--jetpack", "csv-mounts=all"])
            .unwrap();
        let Operation::List {
            ask: Ask::Flags { env, .. },
            ..
        } = operation(cli.command)
        else {
            panic!("list with flags");
        };
        assert_eq!(env, ["NVIDIA_REQUIRE_JETPACK=csv-mounts=all"]);
        let both = [
            "oci-nvidia-hook",
            "list",
            "--jetpack",
            "x",
            "--bundle",
            "/b",
        ];
        assert!(Cli::try_parse_from(both).is_err());
    }
}

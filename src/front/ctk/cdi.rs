//! `nvidia-ctk cdi generate` and `cdi list`: NVIDIA's flags read into
//! our operations. `generate` becomes our own `cdi generate` (one planner
//! call, the same spec), refusing by name what it cannot honour; `list`
//! becomes the listing of every spec's devices, any vendor's.

use std::path::PathBuf;

use clap::Subcommand;

use super::super::common::SpecFormat;
use super::super::{Error, Result};
use crate::app::{Generate, NamedRoot, Note, Operation, RootKind};
use crate::planning::image::ImageLayout;
use crate::specs::cdi::{Format, Mode};

/// `nvidia-ctk cdi`'s commands.
#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum CdiCommand {
    /// Generate the CDI spec for this host's GPUs (our own cdi generate).
    Generate(GenerateArgs),
    /// Print the devices the CDI specs in the spec directories define.
    List(ListArgs),
}

/// `cdi generate`'s flags, NVIDIA's names and defaults.
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct GenerateArgs {
    /// Where to write the spec, atomically [default: stdout].
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Encoding [default: from the output's extension, yaml for stdout].
    #[arg(long, value_enum)]
    pub format: Option<SpecFormat>,
    /// Device names: index (0, 0:1) or uuid (GPU-…, MIG-…); repeatable or a
    /// comma list [default: both, as NVIDIA's].
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "index,uuid",
        value_name = "STRATEGY"
    )]
    pub device_name_strategy: Vec<String>,
    /// The driver root; must be the config's (driver.root).
    #[arg(long, value_name = "DIR")]
    pub driver_root: Option<PathBuf>,
    /// The device root; must be the config's (driver.dev-root).
    #[arg(long, value_name = "DIR")]
    pub dev_root: Option<PathBuf>,
    /// The program NVIDIA's spec hooks run: ignored, the spec's hook is this binary.
    #[arg(long, alias = "nvidia-ctk-path", value_name = "PATH")]
    pub nvidia_cdi_hook_path: Option<PathBuf>,
    /// The spec's vendor (only nvidia.com).
    #[arg(long, alias = "cdi-vendor", default_value = "nvidia.com")]
    pub vendor: String,
    /// The spec's device class (only gpu).
    #[arg(long, alias = "cdi-class", default_value = "gpu")]
    pub class: String,
    /// Leave the `all` device out of the spec.
    #[arg(long)]
    pub no_all_device: bool,
    /// How devices are found: auto, nvml (a native driver) or wsl (a WSL2 host); NVIDIA's other modes are refused.
    #[arg(long, default_value = "auto")]
    pub mode: String,
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

/// `cdi generate`: NVIDIA's flags checked, then our own generation.
fn generate(args: &GenerateArgs) -> Result<(Operation, Vec<Note>)> {
    let refuse = |message: String| Err(Error::Usage(message));
    let mode = match args.mode.as_str() {
        "auto" => Mode::Auto,
        "nvml" => Mode::Nvml,
        "wsl" => Mode::Wsl,
        other => {
            return refuse(format!(
                "--mode={other} is not supported: auto, nvml (a native driver) and wsl \
                 (a WSL2 host) are"
            ))
        }
    };
    let kind = format!("{}/{}", args.vendor, args.class);
    if kind != crate::specs::cdi::spec::KIND {
        return refuse(format!(
            "--vendor/--class {kind} is not supported: the spec is {}",
            crate::specs::cdi::spec::KIND
        ));
    }
    if let Some(strategy) = args
        .device_name_strategy
        .iter()
        .find(|s| s.as_str() == "type-index")
    {
        return refuse(format!(
            "--device-name-strategy={strategy} is not supported: index and uuid are"
        ));
    }
    let roots = [
        (RootKind::Driver, &args.driver_root),
        (RootKind::Dev, &args.dev_root),
    ]
    .into_iter()
    .filter_map(|(which, given)| {
        Some(NamedRoot {
            which,
            given: given.clone()?,
        })
    })
    .collect();
    let notes = args
        .nvidia_cdi_hook_path
        .iter()
        .map(|path| Note {
            level: log::Level::Info,
            text: format!(
                "--nvidia-cdi-hook-path={} ignored: the spec's hook is this binary",
                path.display()
            ),
        })
        .collect();
    // Our own `cdi generate`, as `oci-nvidia-hook cdi generate` runs it:
    // the same planner call, with NVIDIA's defaults.
    let generate = Generate {
        output: args.output.clone().unwrap_or_else(|| PathBuf::from("-")),
        format: args.format.map(Format::from),
        strategies: args.device_name_strategy.join(","),
        capabilities: None,
        layout: ImageLayout::Debian,
        remove_without_driver: false,
        mode,
        all_device: !args.no_all_device,
        roots,
    };
    Ok((Operation::CdiGenerate(generate), notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generate_refuses_what_it_cannot_honour_by_name() {
        let parse = |args: &[&str]| -> GenerateArgs {
            use clap::Parser;
            #[derive(Parser)]
            struct T {
                #[command(flatten)]
                g: GenerateArgs,
            }
            T::try_parse_from(std::iter::once("t").chain(args.iter().copied()))
                .unwrap()
                .g
        };
        for (args, message) in [
            (&["--mode=csv"][..], "--mode=csv is not supported: auto, nvml (a native driver) and wsl (a WSL2 host) are"),
            (&["--vendor=example.com"][..], "--vendor/--class example.com/gpu is not supported: the spec is nvidia.com/gpu"),
            (&["--device-name-strategy=index,type-index"][..], "--device-name-strategy=type-index is not supported: index and uuid are"),
        ] {
            let err = generate(&parse(args)).unwrap_err();
            assert_eq!(err.to_string(), message, "{args:?}");
        }
        // A root is checked against the config where the operation runs.
        let (Operation::CdiGenerate(asked), _) =
            generate(&parse(&["--driver-root=/run/nvidia/driver"])).unwrap()
        else {
            panic!("not cdi generate");
        };
        assert_eq!(
            asked.roots,
            [NamedRoot {
                which: RootKind::Driver,
                given: "/run/nvidia/driver".into()
            }]
        );
        let (Operation::CdiGenerate(asked), _) = generate(&parse(&["--no-all-device"])).unwrap()
        else {
            panic!("not cdi generate");
        };
        assert!(!asked.all_device);
        let defaults = parse(&[]);
        // NVIDIA's default since v1.20 at least (`nvidia-ctk cdi generate
        // --help`: `(default: "index", "uuid")`), so that `nvidia.com/gpu=GPU-…`
        // resolves in a spec made without the flag.
        assert_eq!(defaults.device_name_strategy, ["index", "uuid"]);
        assert_eq!(defaults.output, None);
    }
}

//! `nvidia-ctk cdi generate` and `cdi list`. `generate` takes NVIDIA's
//! flags and runs our own `cdi generate` with them (one planner call, the
//! same spec), refusing by name what it cannot honour; `list` prints the
//! devices of every spec in the spec directories, any vendor's, as
//! NVIDIA's does: one fully qualified name a line, sorted.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde::Deserialize;

use super::{Error, Result};
use crate::cdi::dirs::{spec_files, SPEC_DIRS};
use crate::cli::{self, CdiCommand as OurCdi, Layout, SpecFormat, SpecMode};
use crate::config::Config;

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
    /// Device names: index (0, 0:1) or uuid (GPU-…, MIG-…); repeatable or a comma list.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "index",
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

/// Runs `cdi generate` or `cdi list`.
pub fn run(command: &CdiCommand, config: &Config, out: &mut impl Write) -> Result<()> {
    match command {
        CdiCommand::Generate(args) => generate(args, config),
        CdiCommand::List(args) => list(args, out),
    }
}

/// `cdi generate`: NVIDIA's flags checked, then our own command.
fn generate(args: &GenerateArgs, config: &Config) -> Result<()> {
    let refuse = |message: String| Err(Error::Usage(message));
    let mode = match args.mode.as_str() {
        "auto" => SpecMode::Auto,
        "nvml" => SpecMode::Nvml,
        "wsl" => SpecMode::Wsl,
        other => {
            return refuse(format!(
                "--mode={other} is not supported: auto, nvml (a native driver) and wsl \
                 (a WSL2 host) are"
            ))
        }
    };
    let kind = format!("{}/{}", args.vendor, args.class);
    if kind != crate::cdi::spec::KIND {
        return refuse(format!(
            "--vendor/--class {kind} is not supported: the spec is {}",
            crate::cdi::spec::KIND
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
    for (flag, given, configured, key) in [
        (
            "--driver-root",
            &args.driver_root,
            &config.driver.root,
            "nvidia-container-cli.root",
        ),
        ("--dev-root", &args.dev_root, &config.driver.dev_root, ""),
    ] {
        if let Some(given) = given.as_deref().filter(|g| *g != configured) {
            let how = if key.is_empty() {
                "set [driver] dev-root in the config file".to_string()
            } else {
                format!(
                    "nvidia-ctk config --in-place --set {key}={}",
                    given.display()
                )
            };
            return refuse(format!(
                "{flag}={} differs from the config's {}, which the spec's hook reads at \
                 container start: {how}",
                given.display(),
                configured.display()
            ));
        }
    }
    if let Some(path) = &args.nvidia_cdi_hook_path {
        log::info!(
            "--nvidia-cdi-hook-path={} ignored: the spec's hook is this binary",
            path.display()
        );
    }
    let ours = cli::Command::Cdi {
        command: OurCdi::Generate {
            output: args.output.clone().unwrap_or_else(|| PathBuf::from("-")),
            format: args.format,
            device_name_strategy: args.device_name_strategy.join(","),
            capabilities: None,
            layout: Layout::Debian,
            remove_without_driver: false,
            mode,
        },
    };
    // Our own command, as `oci-nvidia-hook cdi generate` runs it: the same
    // planner call. It reads the same default config file; the logger this
    // front set up (its `--debug`, `--quiet`) stays.
    Ok(cli::run(&cli::Cli {
        config: None,
        command: ours,
    })?)
}

/// The part of any vendor's spec `list` reads.
#[derive(Deserialize)]
struct Listed {
    kind: String,
    #[serde(default)]
    devices: Vec<Named>,
}

/// A device, by name.
#[derive(Deserialize)]
struct Named {
    name: String,
}

/// `cdi list`: every device of every spec that parses, `kind=name`, sorted;
/// a spec that does not parse is named in a warning and skipped, as CDI's
/// cache skips it.
fn list(args: &ListArgs, out: &mut impl Write) -> Result<()> {
    let dirs: Vec<PathBuf> = if args.spec_dirs.is_empty() {
        SPEC_DIRS.iter().map(PathBuf::from).collect()
    } else {
        args.spec_dirs.clone()
    };
    let mut names = BTreeSet::new();
    for file in dirs.iter().flat_map(|d| spec_files(d)) {
        match read_spec(&file) {
            Ok(spec) => {
                for device in spec.devices {
                    names.insert(format!("{}={}", spec.kind, device.name));
                }
            }
            Err(reason) => log::warn!("{}: skipped: {reason}", file.display()),
        }
    }
    log::info!("Found {} CDI devices", names.len());
    for name in &names {
        writeln!(out, "{}", crate::oneline::escape_controls(name))?;
    }
    out.flush()?;
    Ok(())
}

/// The spec in `file`, YAML or JSON, its kind `vendor/class`.
fn read_spec(file: &Path) -> std::result::Result<Listed, String> {
    let text = crate::bounded::read_text(file).map_err(|e| e.to_string())?;
    let spec: Listed = serde_yaml::from_str(&text).map_err(|e| e.to_string())?;
    match spec.kind.split_once('/') {
        Some((vendor, class)) if !vendor.is_empty() && !class.is_empty() => Ok(spec),
        _ => Err(format!("kind {:?} is not vendor/class", spec.kind)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_prints_every_vendors_devices_sorted_once() {
        let etc = tempfile::tempdir().unwrap();
        let run = tempfile::tempdir().unwrap();
        std::fs::write(
            etc.path().join("nvidia.yaml"),
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"1\"\n  containerEdits: {}\n- name: \"0\"\n  containerEdits: {}\n",
        )
        .unwrap();
        std::fs::write(
            run.path().join("other.json"),
            r#"{"cdiVersion":"0.6.0","kind":"example.com/net","devices":[{"name":"eth","containerEdits":{}}]}"#,
        )
        .unwrap();
        std::fs::write(
            run.path().join("dup.yaml"),
            "kind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n",
        )
        .unwrap();
        std::fs::write(run.path().join("broken.yaml"), "kind: [\n").unwrap();
        std::fs::write(
            run.path().join("notes.txt"),
            "kind: x.com/y\ndevices:\n- name: z\n",
        )
        .unwrap();
        let args = ListArgs {
            spec_dirs: vec![etc.path().into(), run.path().into()],
        };
        let mut out = Vec::new();
        list(&args, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "example.com/net=eth\nnvidia.com/gpu=0\nnvidia.com/gpu=1\n"
        );
    }

    #[test]
    fn generate_refuses_what_it_cannot_honour_by_name() {
        let config = Config::default();
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
            (
                &["--driver-root=/run/nvidia/driver"][..],
                "--driver-root=/run/nvidia/driver differs from the config's /, which the spec's hook reads at container start: nvidia-ctk config --in-place --set nvidia-container-cli.root=/run/nvidia/driver",
            ),
        ] {
            let err = generate(&parse(args), &config).unwrap_err();
            assert_eq!(err.to_string(), message, "{args:?}");
        }
        let defaults = parse(&[]);
        assert_eq!(defaults.device_name_strategy, ["index"]);
        assert_eq!(defaults.output, None);
    }
}

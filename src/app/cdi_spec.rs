//! `cdi generate`, `cdi list` and `cdi validate`: the host's CDI spec,
//! written or named, and any spec checked.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{Error, Result};
use crate::config::Config;
use crate::planning::image::ImageLayout;
use crate::specs::cdi::{self, Format, Options, Spec};
use crate::specs::cdi_hook_args::{Roots, SpecMade};
use crate::util::error_line::escape_controls;

/// How `cdi generate` was asked to make the spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generate {
    /// Where to write it; `-` for stdout.
    pub output: PathBuf,
    /// The encoding; `None` follows the output's extension.
    pub format: Option<Format>,
    /// `--device-name-strategy`, as given.
    pub strategies: String,
    /// `--capabilities`, as given.
    pub capabilities: Option<String>,
    /// `--layout`.
    pub layout: ImageLayout,
    /// `--remove-without-driver`: no driver removes the spec instead of failing.
    pub remove_without_driver: bool,
    /// `--mode`.
    pub mode: cdi::Mode,
    /// Whether the spec has an `all` device (`nvidia-ctk`'s `--no-all-device` says no).
    pub all_device: bool,
    /// The spec's kind; `None` for ours: `nvidia.com/gpu`, and
    /// `management.nvidia.com/gpu` for [`cdi::Mode::Management`].
    pub kind: Option<String>,
    /// The devices it has, by index or UUID; `all` for every one, `none`
    /// for a device holding no GPU (`nvidia-ctk`'s `--device-id`).
    pub device_ids: Vec<String>,
    /// Whether it carries its hook (`nvidia-ctk`'s `--disable-hook=all` says no).
    pub hook: bool,
    /// Roots the caller named (`nvidia-ctk`'s `--driver-root`, `--dev-root`),
    /// read for this spec instead of the config's and recorded in its hook,
    /// which reads the driver there at container start.
    pub roots: Roots,
    /// The CSV files read on a Jetson/Tegra host, and the `sym` entries
    /// ignored (`nvidia-ctk`'s `--csv.file`, `--csv.ignore-pattern`).
    pub csv: crate::config::CsvSelection,
}

impl Generate {
    /// What our own `cdi generate` asks unless told: every device and the
    /// `all` device, the default names, our kind, the hook, the config's roots.
    pub fn new(output: PathBuf, mode: cdi::Mode) -> Generate {
        Generate {
            output,
            format: None,
            strategies: DEFAULT_STRATEGIES.into(),
            capabilities: None,
            layout: ImageLayout::Debian,
            remove_without_driver: false,
            mode,
            all_device: true,
            kind: None,
            device_ids: vec!["all".into()],
            hook: true,
            roots: Roots::default(),
            csv: crate::config::CsvSelection::default(),
        }
    }
}

/// The kind of a management spec unless the caller names another, the one
/// NVIDIA's GPU Operator gives its management spec: beside the GPU spec's
/// `nvidia.com/gpu=all`, its `all` does not clash.
pub const MANAGEMENT_KIND: &str = "management.nvidia.com/gpu";

/// `config` with the roots `ask` names instead of its own, and its CSV
/// selection (taken as a CSV host's whatever it looks like in `csv` mode).
fn on_roots(config: &Config, ask: &Generate) -> Config {
    let roots = &ask.roots;
    let mut config = config.clone();
    config.driver.csv = crate::config::CsvSelection {
        force: ask.mode == cdi::Mode::Csv,
        ..ask.csv.clone()
    };
    if let Some(root) = &roots.driver {
        config.driver.root.clone_from(root);
    }
    if let Some(root) = &roots.dev {
        config.driver.dev_root.clone_from(root);
    }
    config
}

/// The specs for this host, made as `ask` asks, its hook reading the
/// config at `config_path` (absolute) when one was given.
fn spec(config: &Config, config_path: Option<&Path>, ask: &Generate) -> Result<cdi::Generated> {
    let strategies = cdi::parse_strategies(&ask.strategies)?;
    let program = crate::util::this_program::path().map_err(|source| Error::Exe { source })?;
    let config_path = config_path
        .map(std::path::absolute)
        .transpose()
        .map_err(|source| Error::Exe { source })?;
    let kind = ask.kind.clone().unwrap_or_else(|| {
        match ask.mode {
            cdi::Mode::Management => MANAGEMENT_KIND,
            _ => cdi::spec::KIND,
        }
        .to_string()
    });
    Ok(cdi::generate(
        &on_roots(config, ask),
        &Options {
            mode: ask.mode,
            strategies,
            capabilities: ask.capabilities.clone(),
            layout: ask.layout,
            program,
            config_path,
            all_device: ask.all_device,
            kind,
            device_ids: ask.device_ids.clone(),
            hook: ask.hook,
            roots: ask.roots.clone(),
        },
    )?)
}

/// Generates the spec and writes it atomically (or to `out` for `-`).
pub fn generate(
    config: &Config,
    config_path: Option<&Path>,
    ask: &Generate,
    out: &mut impl Write,
) -> Result<()> {
    let output = ask.output.as_path();
    let to_stdout = output == Path::new("-");
    let cdi::Generated { gpus: spec, imex } = match spec(config, config_path, ask) {
        Ok(generated) => generated,
        Err(Error::Cdi(why)) if ask.remove_without_driver && !to_stdout && why.driver_gone() => {
            return remove_stale(output, &why);
        }
        Err(e) => return Err(e),
    };
    let format = ask.format.unwrap_or(if to_stdout {
        Format::Yaml
    } else {
        Format::of(output)
    });
    let data = format.encode(&spec)?;
    if to_stdout {
        out.write_all(&data)?;
        return Ok(());
    }
    if output == Path::new(cdi::DEFAULT_OUTPUT) {
        create_default_dir(output)?;
    }
    cdi::write_atomically(output, &data)?;
    log::info!(
        "wrote {} ({} devices, cdiVersion {}, driver {})",
        output.display(),
        spec.devices.len(),
        spec.cdi_version,
        driver_of(&spec).unwrap_or("?")
    );
    let imex_output = imex_path(output);
    match imex {
        Some(imex) => {
            cdi::write_atomically(&imex_output, &format.encode(&imex)?)?;
            log::info!(
                "wrote {} ({} IMEX channels, kind {})",
                imex_output.display(),
                imex.devices.len(),
                cdi::IMEX_KIND
            );
        }
        None => log::debug!("no IMEX channel on this host: no {}", imex_output.display()),
    }
    Ok(())
}

/// Removes the spec at `output` and its IMEX spec beside it, where they
/// exist, since there is no driver (`why`) for them to describe. Only a
/// regular file that parses as a spec of ours (our kind with our hook, or
/// the IMEX kind) is removed; anything else is refused, and kept.
fn remove_stale(output: &Path, why: &cdi::Error) -> Result<()> {
    let imex = imex_path(output);
    let mut gone = Vec::new();
    for (path, ours) in [
        (output, is_our_gpu_spec as fn(&Spec) -> bool),
        (imex.as_path(), |s: &Spec| s.kind == cdi::IMEX_KIND),
    ] {
        let meta = match std::fs::symlink_metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(Error::ReadSpec {
                    path: path.into(),
                    source,
                })
            }
        };
        let refuse = |reason: &str| Error::NotOurSpec {
            path: path.into(),
            reason: reason.into(),
        };
        if !meta.file_type().is_file() {
            return Err(refuse("not a regular file"));
        }
        let text =
            crate::util::bounded_read::read_text(path).map_err(|source| Error::ReadSpec {
                path: path.into(),
                source,
            })?;
        let spec: Spec =
            serde_yaml::from_str(&text).map_err(|e| refuse(&format!("not a CDI spec ({e})")))?;
        if !ours(&spec) {
            return Err(refuse(&format!(
                "a spec of kind {} not made by us",
                spec.kind
            )));
        }
        gone.push(path.to_path_buf());
    }
    if gone.is_empty() {
        log::info!("no spec at {} to remove: {why}", output.display());
    }
    for path in gone {
        std::fs::remove_file(&path).map_err(|source| Error::RemoveSpec {
            path: path.clone(),
            source,
        })?;
        log::info!("removed {}: {why}", path.display());
    }
    Ok(())
}

/// Whether `spec` is a GPU spec that `cdi generate` wrote: our kind, its
/// hook calling this binary back.
fn is_our_gpu_spec(spec: &Spec) -> bool {
    spec.kind == cdi::spec::KIND
        && spec.container_edits.hooks.iter().any(|h| {
            let args: Vec<&str> = h.args.iter().map(String::as_str).collect();
            crate::specs::cdi_hook_args::is_ours(&args)
        })
}

/// Where the IMEX channel spec goes: beside the GPU spec, `-imex-channel`
/// added to its name (`nvidia.yaml` gives `nvidia-imex-channel.yaml`).
pub fn imex_path(output: &Path) -> PathBuf {
    let stem = output
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match output.extension() {
        Some(ext) => format!("{stem}-imex-channel.{}", ext.to_string_lossy()),
        None => format!("{stem}-imex-channel"),
    };
    output.with_file_name(name)
}

/// `/var/run/cdi` may not exist before the first spec.
fn create_default_dir(output: &Path) -> Result<()> {
    let Some(dir) = output.parent() else {
        return Ok(());
    };
    std::fs::create_dir_all(dir).map_err(|source| {
        Error::Cdi(cdi::Error::CreateDir {
            path: PathBuf::from(dir),
            source,
        })
    })
}

/// The driver version a spec of ours records in its hook's arguments.
pub fn driver_of(spec: &Spec) -> Option<&str> {
    spec.container_edits.hooks.iter().find_map(|h| {
        let args: Vec<&str> = h.args.iter().map(String::as_str).collect();
        SpecMade::recorded_driver(&args).flatten()
    })
}

/// Prints the fully qualified names of the devices a spec for this host offers.
pub fn list(config: &Config, strategies: &str, out: &mut impl Write) -> Result<()> {
    let ask = Generate {
        strategies: strategies.into(),
        ..Generate::new(PathBuf::from("-"), cdi::Mode::Auto)
    };
    let spec = spec(config, None, &ask)?.gpus;
    for device in &spec.devices {
        writeln!(out, "{}={}", spec.kind, device.name)?;
    }
    Ok(())
}

/// Checks the spec in `file` against the CDI schema and this host: prints
/// one line per problem, each naming the file and the item's JSON path, and
/// fails with their count; prints one `ok` line when there is none.
pub fn validate(config: &Config, file: &Path, out: &mut impl Write) -> Result<()> {
    let text = crate::util::bounded_read::read_text(file).map_err(|source| Error::ReadSpec {
        path: file.to_path_buf(),
        source,
    })?;
    let mut driver = || cdi::validate::running_driver(config);
    let mut devices = || cdi::validate::host_devices(config);
    let report = cdi::validate::validate(
        &text,
        &mut cdi::validate::Host {
            dev_root: &config.driver.dev_root,
            driver_version: &mut driver,
            devices: &mut devices,
        },
    );
    let name = file.display();
    for problem in &report.problems {
        writeln!(out, "{}", escape_controls(&format!("{name}: {problem}")))?;
    }
    if !report.problems.is_empty() {
        out.flush()?;
        return Err(Error::InvalidSpec {
            count: report.problems.len(),
            path: file.to_path_buf(),
        });
    }
    writeln!(
        out,
        "{}",
        escape_controls(&format!(
            "{name}: ok: {} devices, cdiVersion {}",
            report.devices,
            report.cdi_version.as_deref().unwrap_or("?")
        ))
    )?;
    Ok(())
}

/// The name strategies `cdi list` and `cdi generate` use unless told.
pub const DEFAULT_STRATEGIES: &str = "index,uuid";

#[cfg(test)]
mod tests {
    use super::*;

    /// Why the refresh removes: the module's procfs is gone.
    fn not_loaded() -> cdi::Error {
        cdi::Error::Driver(crate::host::driver::Error::NotLoaded {
            path: "/proc/driver/nvidia/version".into(),
        })
    }

    const OURS: &str = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n\
        containerEdits:\n  hooks:\n  - hookName: createRuntime\n    path: /usr/bin/oci-nvidia-hook\n\
        \x20   args: [oci-nvidia-hook, cdi-hook, createRuntime]\n";

    #[test]
    fn a_stale_spec_of_ours_is_removed_with_its_imex_spec() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("nvidia.yaml");
        let imex = imex_path(&output);
        std::fs::write(&output, OURS).unwrap();
        std::fs::write(
            &imex,
            "cdiVersion: 0.5.0\nkind: nvidia.com/imex-channel\ndevices: []\n",
        )
        .unwrap();
        assert!(not_loaded().driver_gone());
        remove_stale(&output, &not_loaded()).unwrap();
        assert!(!output.exists() && !imex.exists());
        // Nothing there: nothing to do.
        remove_stale(&output, &not_loaded()).unwrap();
    }

    #[test]
    fn what_is_not_a_spec_of_ours_is_refused_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("nvidia.yaml");
        for (text, said) in [
            (OURS.replace("cdi-hook", "other-hook"), "not made by us"),
            (
                OURS.replace("nvidia.com/gpu", "example.com/gpu"),
                "not made by us",
            ),
            ("{not yaml".to_string(), "not a CDI spec"),
        ] {
            std::fs::write(&output, &text).unwrap();
            let err = remove_stale(&output, &not_loaded())
                .unwrap_err()
                .to_string();
            assert!(err.contains(said) && err.contains("nvidia.yaml"), "{err}");
            assert_eq!(std::fs::read_to_string(&output).unwrap(), text);
        }
        std::fs::remove_file(&output).unwrap();
        let target = dir.path().join("target.yaml");
        std::fs::write(&target, OURS).unwrap();
        std::os::unix::fs::symlink(&target, &output).unwrap();
        let err = remove_stale(&output, &not_loaded())
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a regular file"), "{err}");
        assert!(output.symlink_metadata().is_ok() && target.exists());
    }

    #[test]
    fn only_a_missing_driver_removes() {
        let libraries_gone = cdi::Error::Planner(crate::planning::planner::Error::Plan(
            crate::planning::plan::Error::CoreLibraryMissing {
                capability: crate::planning::request::Capability::Utility,
                prefix: "libnvidia-ml.so",
                version: "535.261.03".into(),
            },
        ));
        assert!(libraries_gone.driver_gone());
        assert!(!cdi::Error::NameStrategy { value: "x".into() }.driver_gone());
        let unreadable = cdi::Error::Driver(crate::host::driver::Error::Read {
            path: "/proc/driver/nvidia/version".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        });
        assert!(!unreadable.driver_gone());
    }

    #[test]
    fn the_imex_spec_goes_beside_the_gpu_spec() {
        assert_eq!(
            imex_path(Path::new("/var/run/cdi/nvidia.yaml")),
            Path::new("/var/run/cdi/nvidia-imex-channel.yaml")
        );
        assert_eq!(
            imex_path(Path::new("/etc/cdi/gpu.json")),
            Path::new("/etc/cdi/gpu-imex-channel.json")
        );
        assert_eq!(imex_path(Path::new("spec")), Path::new("spec-imex-channel"));
    }
}

//! `cdi generate`, `cdi list` and `cdi validate`: the host's CDI spec,
//! written or named, and any spec checked.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{Error, Result};
use crate::callback::SpecMade;
use crate::cdi::{self, Format, Options, Spec};
use crate::config::Config;
use crate::image::ImageLayout;
use crate::oneline::escape_controls;

/// How `cdi generate` was asked to make the spec.
#[derive(Debug, Clone)]
pub struct Generate<'a> {
    /// Where to write it; `-` for stdout.
    pub output: &'a Path,
    /// The encoding; `None` follows the output's extension.
    pub format: Option<Format>,
    /// `--device-name-strategy`, as given.
    pub strategies: &'a str,
    /// `--capabilities`, as given.
    pub capabilities: Option<&'a str>,
    /// `--layout`.
    pub layout: ImageLayout,
    /// `--mode`.
    pub mode: cdi::Mode,
}

/// The spec for this host, made as `generate` asks, its hook reading the
/// config at `config_path` (absolute) when one was given.
fn spec(
    config: &Config,
    config_path: Option<&Path>,
    strategies: &str,
    capabilities: Option<&str>,
    layout: ImageLayout,
    mode: cdi::Mode,
) -> Result<Spec> {
    let strategies = cdi::parse_strategies(strategies)?;
    let program = crate::program::path().map_err(|source| Error::Exe { source })?;
    let config_path = config_path
        .map(std::path::absolute)
        .transpose()
        .map_err(|source| Error::Exe { source })?;
    Ok(cdi::generate(
        config,
        &Options {
            mode,
            strategies,
            capabilities: capabilities.map(str::to_string),
            layout,
            program,
            config_path,
        },
    )?)
}

/// Generates the spec and writes it atomically (or to `out` for `-`).
pub fn generate(
    config: &Config,
    config_path: Option<&Path>,
    ask: &Generate<'_>,
    out: &mut impl Write,
) -> Result<()> {
    let spec = spec(
        config,
        config_path,
        ask.strategies,
        ask.capabilities,
        ask.layout,
        ask.mode,
    )?;
    let to_stdout = ask.output == Path::new("-");
    let format = ask.format.unwrap_or(if to_stdout {
        Format::Yaml
    } else {
        Format::of(ask.output)
    });
    let data = format.encode(&spec)?;
    if to_stdout {
        out.write_all(&data)?;
        return Ok(());
    }
    if ask.output == Path::new(cdi::DEFAULT_OUTPUT) {
        create_default_dir(ask.output)?;
    }
    cdi::write_atomically(ask.output, &data)?;
    log::info!(
        "wrote {} ({} devices, cdiVersion {}, driver {})",
        ask.output.display(),
        spec.devices.len(),
        spec.cdi_version,
        driver_of(&spec).unwrap_or("?")
    );
    let imex_output = imex_path(ask.output);
    match cdi::generate_imex(config)? {
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
    let spec = spec(
        config,
        None,
        strategies,
        None,
        ImageLayout::Debian,
        cdi::Mode::Auto,
    )?;
    for device in &spec.devices {
        writeln!(out, "{}={}", spec.kind, device.name)?;
    }
    Ok(())
}

/// Checks the spec in `file` against the CDI schema and this host: prints
/// one line per problem, each naming the file and the item's JSON path, and
/// fails with their count; prints one `ok` line when there is none.
pub fn validate(config: &Config, file: &Path, out: &mut impl Write) -> Result<()> {
    let text = crate::bounded::read_text(file).map_err(|source| Error::ReadSpec {
        path: file.to_path_buf(),
        source,
    })?;
    let mut driver = || cdi::validate::running_driver(config);
    let report = cdi::validate::validate(
        &text,
        &mut cdi::validate::Host {
            dev_root: &config.driver.dev_root,
            driver_version: &mut driver,
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

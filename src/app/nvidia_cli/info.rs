//! `info [--csv]`: the driver and its GPUs in NVIDIA's layout (libnvidia-
//! container `src/cli/info.c`), so that scripts reading it keep working:
//! `%-15s` labels, a blank line before each GPU, and the CSV header lines.
//!
//! Every fact comes from the inventory: the driver version and GPUs from
//! `/proc`, the CUDA version from the driver's own `libcuda`, and brand and
//! architecture from NVML in the bounded child ([`Inventory::nvml`]).
//! Where NVML cannot be loaded (no kernel driver answers, as on simulated
//! hosts) NVIDIA's CLI fails outright; this one prints what it knows and
//! `Unknown` for those two facts, with a warning on stderr.

use std::io::Write;

use crate::app::Result;
use crate::config::Config;
use crate::host::driver::Inventory;
use crate::planning::planner;
use crate::planning::request::Capabilities;

/// What `info` prints for a fact it could not learn: NVIDIA's word for a
/// brand it cannot name.
const UNKNOWN: &str = "Unknown";

/// The facts `info` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Report {
    /// `NVRM version`.
    nvrm: String,
    /// `CUDA version`, `MAJOR.MINOR`.
    cuda: String,
    /// One per GPU, in index order.
    gpus: Vec<Row>,
}

/// One GPU's line or block.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    index: u32,
    minor: u32,
    model: String,
    brand: String,
    uuid: String,
    bus: String,
    arch: String,
}

/// Inventories the driver, asks NVML what only it knows, and prints.
pub fn run(config: &Config, csv: bool, out: &mut impl Write) -> Result<()> {
    // libcuda (compute) gives the CUDA version, libnvidia-ml (utility) NVML.
    let mut inventory = planner::inventory(config, &Capabilities::default_set())?;
    let cuda = match inventory.cuda_version() {
        Ok(version) => version.to_string(),
        Err(e) => {
            log::warn!("{e}: CUDA version shown as {UNKNOWN}");
            UNKNOWN.to_string()
        }
    };
    if let Some(found) = &inventory.csv {
        // No procfs lists a Tegra host's GPU, and NVML is not what serves it.
        log::warn!(
            "a Jetson/Tegra host (CSV mode, L4T {}): its integrated GPU is device 0, \
             its {} nodes and {} files listed by {}; `oci-nvidia-hook info` shows them",
            inventory.driver_version,
            inventory.nodes.len(),
            found.files_listed.len() + found.dirs.len() + found.links.len(),
            found.files_line()
        );
    } else if let Err(e) = inventory.nvml() {
        log::warn!("{e}: brand and architecture shown as {UNKNOWN}");
    }
    let report = report(&inventory, cuda);
    if csv {
        write_csv(&report, out)
    } else {
        write_text(&report, out)
    }
}

/// The facts of `inventory`, NVML's where it answered.
fn report(inventory: &Inventory, cuda: String) -> Report {
    let gpus = inventory
        .gpus
        .iter()
        .map(|gpu| {
            let nvml = inventory.nvml.as_ref().and_then(|r| r.gpu(&gpu.uuid));
            Row {
                index: gpu.index,
                minor: gpu.minor,
                model: gpu.model.clone(),
                brand: nvml.map_or(UNKNOWN, |g| brand(&g.brand)).to_string(),
                uuid: gpu.uuid.clone(),
                bus: bus_location(&gpu.bus),
                arch: nvml
                    .map_or_else(|| UNKNOWN.to_string(), |g| g.compute_capability.to_string()),
            }
        })
        .collect();
    Report {
        nvrm: inventory.driver_version.clone(),
        cuda,
        gpus,
    }
}

/// NVIDIA's name for an NVML brand (libnvidia-container 1.17 `driver.c`
/// `driver_get_device_brand`, its table read from the built library): one
/// name per `nvmlBrandType_t` through `TitanRTX`, an H100's `NVIDIA` brand
/// printed `Nvidia` (Incus reads this field), anything newer `Unknown`.
/// `brand` is the lower-case name the NVML query gives.
fn brand(brand: &str) -> &'static str {
    match brand {
        "quadro" => "Quadro",
        "tesla" => "Tesla",
        "nvs" => "NVS",
        "grid" => "GRID",
        "geforce" => "GeForce",
        "titan" => "TITAN",
        "vapps" => "VApps",
        "vpc" => "VPC",
        "vcs" => "VCS",
        "vws" => "VWS",
        "cloudgaming" | "vgaming" => "CloudGaming",
        "quadrortx" => "QuadroRTX",
        "nvidiartx" => "NvidiaRTX",
        "nvidia" => "Nvidia",
        "geforcertx" => "GeForceRTX",
        "titanrtx" => "TitanRTX",
        _ => UNKNOWN,
    }
}

/// A bus id as NVIDIA prints it: NVML's domain, bus and device as
/// `%08x:%02x:%02x.0` (libnvidia-container `driver.c`), from our
/// `dddd:bb:dd.f`. An id in another shape is printed as it is.
fn bus_location(bus: &str) -> String {
    let parse = || -> Option<String> {
        let (rest, _function) = bus.rsplit_once('.')?;
        let mut parts = rest.split(':');
        let domain = u32::from_str_radix(parts.next()?, 16).ok()?;
        let number = u8::from_str_radix(parts.next()?, 16).ok()?;
        let device = u8::from_str_radix(parts.next()?, 16).ok()?;
        if parts.next().is_some() {
            return None;
        }
        Some(format!("{domain:08x}:{number:02x}:{device:02x}.0"))
    };
    parse().unwrap_or_else(|| bus.to_string())
}

/// NVIDIA's text layout: each label left-aligned in 15 columns.
fn write_text(report: &Report, out: &mut impl Write) -> Result<()> {
    writeln!(out, "{:<15} {}", "NVRM version:", report.nvrm)?;
    writeln!(out, "{:<15} {}", "CUDA version:", report.cuda)?;
    for gpu in &report.gpus {
        writeln!(out)?;
        for (label, value) in [
            ("Device Index:", gpu.index.to_string()),
            ("Device Minor:", gpu.minor.to_string()),
            ("Model:", gpu.model.clone()),
            ("Brand:", gpu.brand.clone()),
            ("GPU UUID:", gpu.uuid.clone()),
            ("Bus Location:", gpu.bus.clone()),
            ("Architecture:", gpu.arch.clone()),
        ] {
            writeln!(out, "{label:<15} {value}")?;
        }
    }
    Ok(())
}

/// NVIDIA's CSV: two header lines and their rows, fields unquoted as NVIDIA
/// prints them.
fn write_csv(report: &Report, out: &mut impl Write) -> Result<()> {
    writeln!(out, "NVRM version,CUDA version")?;
    writeln!(out, "{},{}", report.nvrm, report.cuda)?;
    writeln!(out)?;
    writeln!(
        out,
        "Device Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture"
    )?;
    for g in &report.gpus {
        writeln!(
            out,
            "{},{},{},{},{},{},{}",
            g.index, g.minor, g.model, g.brand, g.uuid, g.bus, g.arch
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_gpus() -> Report {
        Report {
            nvrm: "535.261.03".into(),
            cuda: "12.2".into(),
            gpus: vec![
                Row {
                    index: 0,
                    minor: 2,
                    model: "NVIDIA H100 80GB HBM3".into(),
                    brand: "Unknown".into(),
                    uuid: "GPU-6d48f1a2-0000-1111-2222-333344445555".into(),
                    bus: "00000000:18:00.0".into(),
                    arch: "9.0".into(),
                },
                Row {
                    index: 1,
                    minor: 0,
                    model: "Tesla V100-SXM2-16GB".into(),
                    brand: "Tesla".into(),
                    uuid: "GPU-8d38a0b3-0000-1111-2222-333344445555".into(),
                    bus: "00000001:2a:00.0".into(),
                    arch: "7.0".into(),
                },
            ],
        }
    }

    fn text(report: &Report, csv: bool) -> String {
        let mut out = Vec::new();
        if csv {
            write_csv(report, &mut out).unwrap();
        } else {
            write_text(report, &mut out).unwrap();
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn text_is_nvidias_layout_with_fifteen_column_labels() {
        assert_eq!(
            text(&two_gpus(), false),
            "NVRM version:   535.261.03\n\
             CUDA version:   12.2\n\
             \n\
             Device Index:   0\n\
             Device Minor:   2\n\
             Model:          NVIDIA H100 80GB HBM3\n\
             Brand:          Unknown\n\
             GPU UUID:       GPU-6d48f1a2-0000-1111-2222-333344445555\n\
             Bus Location:   00000000:18:00.0\n\
             Architecture:   9.0\n\
             \n\
             Device Index:   1\n\
             Device Minor:   0\n\
             Model:          Tesla V100-SXM2-16GB\n\
             Brand:          Tesla\n\
             GPU UUID:       GPU-8d38a0b3-0000-1111-2222-333344445555\n\
             Bus Location:   00000001:2a:00.0\n\
             Architecture:   7.0\n"
        );
    }

    #[test]
    fn csv_is_nvidias_two_tables() {
        assert_eq!(
            text(&two_gpus(), true),
            "NVRM version,CUDA version\n\
             535.261.03,12.2\n\
             \n\
             Device Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture\n\
             0,2,NVIDIA H100 80GB HBM3,Unknown,GPU-6d48f1a2-0000-1111-2222-333344445555,00000000:18:00.0,9.0\n\
             1,0,Tesla V100-SXM2-16GB,Tesla,GPU-8d38a0b3-0000-1111-2222-333344445555,00000001:2a:00.0,7.0\n"
        );
    }

    #[test]
    fn a_host_without_gpus_prints_the_driver_only() {
        let report = Report {
            gpus: Vec::new(),
            ..two_gpus()
        };
        assert_eq!(
            text(&report, false),
            "NVRM version:   535.261.03\nCUDA version:   12.2\n"
        );
    }

    #[test]
    fn bus_ids_get_nvidias_eight_digit_domain_and_function_zero() {
        assert_eq!(bus_location("0000:3b:00.0"), "00000000:3b:00.0");
        assert_eq!(bus_location("10000:b1:1f.3"), "00010000:b1:1f.0");
        assert_eq!(bus_location("garbage"), "garbage");
    }

    #[test]
    fn brands_are_named_as_nvidias_cli_names_them() {
        assert_eq!(brand("tesla"), "Tesla");
        assert_eq!(brand("geforce"), "GeForce");
        assert_eq!(brand("titan"), "TITAN");
        assert_eq!(brand("grid"), "GRID");
        // As NVIDIA's 1.17 CLI prints them on the same host (an H100).
        assert_eq!(brand("nvidia"), "Nvidia");
        assert_eq!(brand("nvidiartx"), "NvidiaRTX");
        assert_eq!(brand("unknown"), "Unknown");
    }
}

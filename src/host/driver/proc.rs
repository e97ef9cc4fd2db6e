//! Parses the files the NVIDIA kernel module publishes under procfs:
//! `driver/nvidia/version`, `driver/nvidia/gpus/<bus>/information`, and the
//! character-device majors in `devices`.
//!
//! Parsers are pure functions over text so they are tested against the
//! driver's exact formats; an unknown format is an error naming the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Error, Result};
use crate::planning::request::parse_bus_id;

/// One GPU as the kernel module describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gpu {
    /// Position in PCI bus order, the index NVML and users count by.
    pub index: u32,
    /// The minor of its `/dev/nvidiaN` node.
    pub minor: u32,
    /// Marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub model: String,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// PCI bus id, `dddd:bb:dd.f`.
    pub bus: String,
}

/// Extracts the driver version from the `version` file's `NVRM version:` line.
pub fn parse_version(path: &Path, text: &str) -> Result<String> {
    let unknown = || Error::UnknownFormat {
        path: path.to_path_buf(),
        reason: "no \"NVRM version:\" line with a version number".into(),
    };
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("NVRM version:"))
        .ok_or_else(unknown)?;
    line.split_whitespace()
        .find(|token| is_version(token))
        .map(str::to_string)
        .ok_or_else(unknown)
}

/// Whether `s` looks like a driver version: dot-separated numbers, at least two.
fn is_version(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() >= 2
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// What one `information` file says; `excluded` GPUs are not offered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Information {
    /// `Model:`.
    pub model: String,
    /// `GPU UUID:`.
    pub uuid: String,
    /// `Bus Location:`, normalised.
    pub bus: String,
    /// `Device Minor:`.
    pub minor: u32,
    /// `GPU Excluded: Yes`, set by `NVreg_ExcludedGpus`.
    pub excluded: bool,
}

/// Parses a `gpus/<bus>/information` file (`Key: \t value` lines).
pub fn parse_information(path: &Path, text: &str) -> Result<Information> {
    // The few fields used, in one pass; a field given twice counts as its
    // last line says.
    const NAMES: [&str; 5] = [
        "Model",
        "GPU UUID",
        "Bus Location",
        "Device Minor",
        "GPU Excluded",
    ];
    let mut fields: [Option<&str>; 5] = [None; 5];
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if let Some(at) = NAMES.iter().position(|name| *name == key.trim()) {
            fields[at] = Some(value.trim());
        }
    }
    let get = |name: &str| {
        NAMES
            .iter()
            .position(|known| *known == name)
            .and_then(|at| fields[at])
    };
    let field = |name: &'static str| {
        get(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Error::UnknownFormat {
                path: path.to_path_buf(),
                reason: format!("no \"{name}:\" field"),
            })
    };
    let bad = |name: &str, value: &str| Error::UnknownFormat {
        path: path.to_path_buf(),
        reason: format!("\"{name}:\" has unexpected value {value:?}"),
    };
    let bus_text = field("Bus Location")?;
    let bus = parse_bus_id(bus_text).ok_or_else(|| bad("Bus Location", bus_text))?;
    let minor_text = field("Device Minor")?;
    let minor = minor_text
        .parse()
        .map_err(|_| bad("Device Minor", minor_text))?;
    let uuid = field("GPU UUID")?;
    if !uuid.starts_with("GPU-") {
        return Err(bad("GPU UUID", uuid));
    }
    Ok(Information {
        model: field("Model")?.to_string(),
        uuid: uuid.to_ascii_lowercase().replacen("gpu-", "GPU-", 1),
        bus,
        minor,
        excluded: get("GPU Excluded").is_some_and(|v| v.eq_ignore_ascii_case("yes")),
    })
}

/// Reads every GPU under `<proc-root>/driver/nvidia/gpus`, in PCI bus order.
pub fn read_gpus(gpus_dir: &Path) -> Result<Vec<Gpu>> {
    let Some(entries) = gpu_entries(gpus_dir)? else {
        return Ok(Vec::new());
    };
    let mut infos = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| Error::Read {
            path: gpus_dir.to_path_buf(),
            source,
        })?;
        let path = entry.path().join("information");
        let info = parse_information(&path, &read_text(&path)?)?;
        if info.excluded {
            log::info!(
                "GPU {} is excluded by the driver (GPU Excluded: Yes); skipping it",
                info.bus
            );
            continue;
        }
        infos.push(info);
    }
    // Normalised bus ids sort as their numbers do: fixed-width lower-case hex.
    infos.sort_by(|a, b| a.bus.cmp(&b.bus));
    Ok(infos
        .into_iter()
        .enumerate()
        .map(|(index, info)| Gpu {
            index: index as u32,
            minor: info.minor,
            model: info.model,
            uuid: info.uuid,
            bus: info.bus,
        })
        .collect())
}

/// The names of the GPUs' directories under `<proc-root>/driver/nvidia/gpus`
/// (their bus ids), sorted; none where the driver shows no such directory.
/// A masked `/proc/driver/nvidia` shows each of them.
pub fn gpu_dirs(gpus_dir: &Path) -> Result<Vec<String>> {
    let Some(entries) = gpu_entries(gpus_dir)? else {
        return Ok(Vec::new());
    };
    let mut buses = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect::<Vec<_>>();
    buses.sort();
    Ok(buses)
}

/// The entries of `gpus_dir`; `None` where the driver shows no such directory.
fn gpu_entries(gpus_dir: &Path) -> Result<Option<std::fs::ReadDir>> {
    match std::fs::read_dir(gpus_dir) {
        Ok(entries) => Ok(Some(entries)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Read {
            path: gpus_dir.to_path_buf(),
            source,
        }),
    }
}

/// Character-device majors by name, from `/proc/devices`.
pub fn parse_char_majors(path: &Path, text: &str) -> Result<BTreeMap<String, u32>> {
    let mut lines = text.lines();
    if !lines.any(|l| l.trim() == "Character devices:") {
        return Err(Error::UnknownFormat {
            path: path.to_path_buf(),
            reason: "no \"Character devices:\" section".into(),
        });
    }
    let mut majors = BTreeMap::new();
    for line in lines.take_while(|l| !l.trim().is_empty() && !l.ends_with(':')) {
        let mut parts = line.split_whitespace();
        let (Some(major), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(Error::UnknownFormat {
                path: path.to_path_buf(),
                reason: format!("unexpected line {line:?}"),
            });
        };
        let major = major.parse().map_err(|_| Error::UnknownFormat {
            path: path.to_path_buf(),
            reason: format!("unexpected line {line:?}"),
        })?;
        majors.entry(name.to_string()).or_insert(major);
    }
    Ok(majors)
}

/// Reads a small procfs text file, naming it on failure.
pub fn read_text(path: &Path) -> Result<String> {
    crate::util::bounded_read::read_text(path).map_err(|source| Error::Read {
        path: PathBuf::from(path),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROPRIETARY: &str = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul 16 20:23:34 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) \n";
    const OPEN: &str = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.261.03  Release Build  (dvs-builder@U16-I2-C03-12-4)  Wed Jul 16 20:20:46 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) \n";
    const INFORMATION: &str = "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nGPU UUID: \t GPU-8B2E3A4C-5D6E-7F80-91A2-B3C4D5E6F708\nVideo BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t 0000:3B:00.0\nDevice Minor: \t 2\nGPU Excluded:\t No\n";

    fn p() -> &'static Path {
        Path::new("/proc/driver/nvidia/x")
    }

    #[test]
    fn reads_version_from_proprietary_and_open_modules() {
        assert_eq!(parse_version(p(), PROPRIETARY).unwrap(), "535.261.03");
        assert_eq!(parse_version(p(), OPEN).unwrap(), "535.261.03");
        assert_eq!(
            parse_version(
                p(),
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.82.01  Wed Oct 27\n"
            )
            .unwrap(),
            "470.82.01"
        );
    }

    #[test]
    fn unknown_version_format_names_the_file() {
        let err = parse_version(p(), "hello\n").unwrap_err();
        assert!(err.to_string().contains("/proc/driver/nvidia/x"), "{err}");
        assert!(parse_version(p(), "NVRM version: no number here\n").is_err());
    }

    #[test]
    fn parses_information_file() {
        let info = parse_information(p(), INFORMATION).unwrap();
        assert_eq!(
            info,
            Information {
                model: "NVIDIA H100 80GB HBM3".into(),
                uuid: "GPU-8b2e3a4c-5d6e-7f80-91a2-b3c4d5e6f708".into(),
                bus: "0000:3b:00.0".into(),
                minor: 2,
                excluded: false,
            }
        );
    }

    #[test]
    fn information_without_minor_is_an_error_naming_the_field() {
        let text = INFORMATION.replace("Device Minor: \t 2\n", "");
        let err = parse_information(p(), &text).unwrap_err();
        assert!(err.to_string().contains("Device Minor"), "{err}");
        let text = INFORMATION.replace("\t 2\n", "\t two\n");
        assert!(parse_information(p(), &text).is_err());
    }

    #[test]
    fn excluded_gpu_is_flagged() {
        let text = INFORMATION.replace("GPU Excluded:\t No", "GPU Excluded:\t Yes");
        assert!(parse_information(p(), &text).unwrap().excluded);
    }

    #[test]
    fn reads_char_majors_only() {
        let text = "Character devices:\n  1 mem\n195 nvidia\n195 nvidia-modeset\n195 nvidiactl\n509 nvidia-caps\n511 nvidia-uvm\n\nBlock devices:\n  7 loop\n259 blkext\n";
        let majors = parse_char_majors(p(), text).unwrap();
        assert_eq!(majors.get("nvidia-uvm"), Some(&511));
        assert_eq!(majors.get("nvidia-caps"), Some(&509));
        assert_eq!(majors.get("nvidiactl"), Some(&195));
        assert_eq!(majors.get("loop"), None);
    }

    #[test]
    fn devices_in_unknown_format_is_an_error() {
        assert!(parse_char_majors(p(), "nvidia 195\n").is_err());
        assert!(parse_char_majors(p(), "Character devices:\nnvidia\n").is_err());
    }

    #[test]
    fn gpus_are_indexed_in_pci_bus_order_not_minor_order() {
        let dir = tempfile::tempdir().unwrap();
        for (bus, minor) in [
            ("0000:db:00.0", 0),
            ("0000:1b:00.0", 3),
            ("0000:3b:00.0", 1),
        ] {
            std::fs::create_dir(dir.path().join(bus)).unwrap();
            let text = INFORMATION
                .replace("0000:3B:00.0", bus)
                .replace("Minor: \t 2", &format!("Minor: \t {minor}"));
            std::fs::write(dir.path().join(bus).join("information"), text).unwrap();
        }
        let gpus = read_gpus(dir.path()).unwrap();
        let order: Vec<_> = gpus
            .iter()
            .map(|g| (g.index, g.bus.as_str(), g.minor))
            .collect();
        assert_eq!(
            order,
            [
                (0, "0000:1b:00.0", 3),
                (1, "0000:3b:00.0", 1),
                (2, "0000:db:00.0", 0)
            ]
        );
    }
}

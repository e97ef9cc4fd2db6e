//! `info`: the host driver's inventory, for people and for scripts.

use std::io::Write;

use serde::Serialize;

use super::Result;
use crate::config::Config;
use crate::host::driver::{Csv, CudaVersion, Inventory, Library, NodeState};
use crate::planning::planner;
use crate::planning::request::{Capabilities, Capability};

/// `info --json`: the inventory plus the CUDA version.
#[derive(Serialize)]
struct Report<'a> {
    cuda_version: Option<String>,
    cuda_driver_version: Option<i32>,
    cuda_error: Option<String>,
    #[serde(flatten)]
    inventory: &'a Inventory,
}

/// Inventories every capability and prints it.
pub fn run(config: &Config, json: bool, out: &mut impl Write) -> Result<()> {
    let inventory = planner::inventory(config, &Capabilities::all())?;
    let cuda = inventory.cuda_version();
    if let Err(e) = &cuda {
        log::warn!("{e}");
    }
    for missing in &inventory.missing_libraries {
        let level = if missing.core {
            log::Level::Warn
        } else {
            log::Level::Debug
        };
        log::log!(
            level,
            "{} library {} not found",
            missing.capability,
            missing.prefix
        );
    }
    if json {
        let report = Report {
            cuda_version: cuda.as_ref().ok().map(CudaVersion::to_string),
            cuda_driver_version: cuda.as_ref().ok().map(|v| v.0),
            cuda_error: cuda.as_ref().err().map(ToString::to_string),
            inventory: &inventory,
        };
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
        return Ok(());
    }
    write_text(&inventory, cuda.ok(), out)
}

/// One library's line: its file, SONAME and architecture.
fn write_library(lib: &Library, out: &mut impl Write) -> Result<()> {
    writeln!(
        out,
        "    {} ({}, {})",
        lib.path.display(),
        lib.soname,
        lib.arch
    )?;
    Ok(())
}

/// A CSV (Jetson) host's mount specs: the files read, and what they
/// provide beyond the nodes and libraries listed below.
fn write_csv(csv: &Csv, out: &mut impl Write) -> Result<()> {
    writeln!(
        out,
        "Host:           Jetson/Tegra (integrated GPU, NVIDIA's CSV mode: device 0 or all)"
    )?;
    for file in &csv.files {
        writeln!(out, "CSV file:       {}", file.display())?;
    }
    let files = csv.files_listed.iter().filter(|f| f.soname.is_none());
    for file in files.chain(&csv.release) {
        writeln!(out, "  file          {}", file.inner.display())?;
    }
    for dir in &csv.dirs {
        writeln!(out, "  directory     {}", dir.inner.display())?;
    }
    for link in &csv.links {
        writeln!(
            out,
            "  link          {} -> {}",
            link.path.display(),
            link.target.display()
        )?;
    }
    for skipped in &csv.skipped {
        writeln!(
            out,
            "  SKIPPED {}    {}: {}",
            skipped.kind.name(),
            skipped.path.display(),
            skipped.reason
        )?;
    }
    Ok(())
}

fn write_text(inv: &Inventory, cuda: Option<CudaVersion>, out: &mut impl Write) -> Result<()> {
    writeln!(out, "Driver version: {}", inv.driver_version)?;
    match cuda {
        Some(v) => writeln!(out, "CUDA version:   {v}")?,
        None => writeln!(out, "CUDA version:   unknown")?,
    }

    if let Some(wsl) = &inv.wsl {
        // The "driver version" above is the driver store's name: WSL shows no other.
        writeln!(
            out,
            "Host:           WSL2 (Windows' driver; GPUs reach containers only through /dev/dxg)\n\
             Driver store:   {}",
            wsl.store.display()
        )?;
    }
    if let Some(csv) = &inv.csv {
        write_csv(csv, out)?;
    }
    writeln!(out, "\nGPUs: {}", inv.gpus.len())?;
    if !inv.gpus.is_empty() {
        let model_width = inv
            .gpus
            .iter()
            .map(|g| g.model.len())
            .max()
            .unwrap_or(0)
            .max(5);
        writeln!(
            out,
            "  {:<5} {:<5} {:<model_width$}  {:<40}  BUS",
            "INDEX", "MINOR", "MODEL", "UUID"
        )?;
        for g in &inv.gpus {
            writeln!(
                out,
                "  {:<5} {:<5} {:<model_width$}  {:<40}  {}",
                g.index, g.minor, g.model, g.uuid, g.bus
            )?;
        }
    }

    writeln!(out, "\nDevice nodes:")?;
    // Each GPU's DRM nodes (graphics) after the driver's own.
    let drm = inv.drm.iter().flat_map(|d| &d.nodes);
    for node in inv.nodes.iter().chain(drm) {
        let state = match &node.state {
            NodeState::Ok { mode, .. } => format!("ok, mode {mode:04o}"),
            NodeState::Missing => "MISSING".to_string(),
            NodeState::Wrong(problem) => format!("WRONG: {problem}"),
        };
        let numbers = format!("c {}:{}", node.major, node.minor);
        writeln!(
            out,
            "  {:<36} {:<10} {}",
            node.host_path.display(),
            numbers,
            state
        )?;
    }

    writeln!(out, "\nLibraries:")?;
    for capability in Capability::ALL {
        if capability == Capability::Compat32 {
            continue;
        }
        writeln!(out, "  {capability}:")?;
        for lib in inv.libraries_of(Some(capability)) {
            write_library(lib, out)?;
        }
        let missing: Vec<String> = inv
            .missing_libraries
            .iter()
            .filter(|m| m.capability == capability)
            .map(|m| {
                if m.core {
                    format!("{} (REQUIRED)", m.prefix)
                } else {
                    m.prefix.to_string()
                }
            })
            .collect();
        if !missing.is_empty() {
            writeln!(out, "    missing: {}", missing.join(", "))?;
        }
    }
    let mut unplaced = inv.libraries_of(None).peekable();
    if unplaced.peek().is_some() {
        writeln!(out, "  every capability (no known family):")?;
        for lib in unplaced {
            write_library(lib, out)?;
        }
    }

    writeln!(out, "\nBinaries:")?;
    for file in &inv.binaries {
        writeln!(out, "  {}", file.path.display())?;
    }
    for file in inv.wsl.iter().flat_map(|w| &w.files) {
        if file.kind != crate::host::driver::wsl::WslKind::Library {
            writeln!(out, "  {}", file.path.display())?;
        }
    }
    if !inv.missing_binaries.is_empty() {
        writeln!(out, "  missing: {}", inv.missing_binaries.join(", "))?;
    }

    writeln!(out, "\nFirmware:")?;
    for file in &inv.firmware {
        writeln!(out, "  {}", file.path.display())?;
    }
    writeln!(out, "\nIPC:")?;
    for ipc in &inv.ipcs {
        writeln!(out, "  {} ({})", ipc.path.display(), ipc.capability)?;
    }
    if !inv.configs.is_empty() {
        writeln!(out, "\nConfiguration files and X server modules:")?;
        for file in &inv.configs {
            let capability = file.capability.map(|c| c.name()).unwrap_or("-");
            writeln!(out, "  {} ({capability})", file.path.display())?;
        }
    }
    if !inv.gated_files.is_empty() {
        writeln!(out, "\nFiles of the feature-gated devices:")?;
        for file in &inv.gated_files {
            writeln!(out, "  {} ({:?})", file.path.display(), file.gate)?;
        }
    }
    Ok(())
}

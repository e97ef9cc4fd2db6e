//! The Container Device Interface: a spec generated from the same planner
//! as the hook, for runtimes that add devices themselves (Podman, CRI-O,
//! containerd, Docker ≥ 25, the Kubernetes device plugin). The runtime
//! then owns the device cgroup rules, which survive a systemd
//! `daemon-reload`; one `createRuntime` hook (`cdi-hook`) does what a
//! runtime cannot: the loader cache, the links and the masked
//! `/proc/driver/nvidia`.
//!
//! `spec` is the format, `edits` turns a plan into container edits (shared
//! with the runtime wrapper), `generate` builds the spec, `output` writes it,
//! `validate` checks a spec against the schema and this host.

pub mod apply;
pub mod dirs;
pub mod edits;
pub mod generate;
pub use crate::planning::request::cdi_name as name;
pub mod output;
pub mod registry;
pub mod spec;
pub mod validate;

use std::io;
use std::path::PathBuf;

use thiserror::Error;

pub use edits::{Callback, HOOK_COMMAND, HOOK_STAGE};
pub use generate::{
    generate, parse_strategies, Generated, Mode, NameStrategy, Options, IMEX_KIND, NO_GPU_DEVICE,
};
pub use output::{write_atomically, Format, DEFAULT_OUTPUT};
pub use spec::Spec;

use crate::{host::driver, planning::planner};
use name::Qualified;

/// Why a spec could not be made or written.
#[derive(Debug, Error)]
pub enum Error {
    #[error("unknown device name strategy {value:?}: use index, uuid or type-index, or several (index,uuid)")]
    NameStrategy { value: String },
    #[error("no device {id:?} on this host to put in the spec: its devices are {known} (or their UUIDs), or all, or none")]
    UnknownDeviceId {
        /// The id asked for.
        id: String,
        /// The host's devices by index.
        known: String,
    },
    #[error("--mode={asked} asked for, but this host is a {found} host (a WSL2 host has /dev/dxg and no /proc/driver/nvidia; a csv host, Jetson or IGX, has /etc/nv_tegra_release or a tegra SoC and no /proc/driver/nvidia): use --mode={found} or auto")]
    Mode {
        asked: generate::Mode,
        found: generate::Mode,
    },
    #[error(transparent)]
    Planner(#[from] planner::Error),
    #[error(transparent)]
    Driver(#[from] driver::Error),
    #[error("cannot encode the spec as {format}: {reason}")]
    Encode { format: Format, reason: String },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("cannot create directory {path} for the spec: {source}")]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("config.json: {field} is not {expected}")]
    Shape {
        /// The JSON path of the field.
        field: &'static str,
        /// What it should be.
        expected: &'static str,
    },
    #[error("a CDI hook at {stage:?}: not an OCI hook stage ({})", apply::HOOK_STAGES.join(", "))]
    HookStage {
        /// The stage named.
        stage: String,
    },
    #[error("unknown CDI device {name}: no spec in {dirs} defines it{broken}")]
    UnknownDevice {
        /// The name asked for.
        name: Qualified,
        /// The directories searched, comma-separated.
        dirs: String,
        /// The spec files skipped for breaking CDI's rules, if any, in words.
        broken: String,
    },
    #[error("CDI device {name} is defined in both {first} and {second}: remove one of them")]
    DeviceConflict {
        /// The name asked for.
        name: Qualified,
        /// One spec defining it.
        first: PathBuf,
        /// The other, in the same directory.
        second: PathBuf,
    },
    #[error("CDI device {name} of {path}: {reason}")]
    DeviceNode {
        /// The device whose node could not be completed.
        name: Qualified,
        /// Its spec.
        path: PathBuf,
        /// What was wrong with the host node.
        reason: String,
    },
}

impl Error {
    /// Whether there is no driver to describe: the kernel module is not
    /// loaded, or its core libraries are gone (a removal, the module still
    /// loaded). A spec made before then names files that are gone, and the
    /// refresh removes it.
    pub fn driver_gone(&self) -> bool {
        matches!(
            self,
            Error::Driver(driver::Error::NotLoaded { .. })
                | Error::Planner(planner::Error::Driver(driver::Error::NotLoaded { .. }))
                | Error::Planner(planner::Error::Plan(
                    crate::planning::plan::Error::CoreLibraryMissing { .. }
                ))
        )
    }
}

/// Result of CDI work.
pub type Result<T> = std::result::Result<T, Error>;

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
pub mod name;
pub mod output;
pub mod registry;
pub mod spec;
pub mod validate;

use std::io;
use std::path::PathBuf;

use thiserror::Error;

pub use edits::{Callback, HOOK_COMMAND, HOOK_STAGE};
pub use generate::{generate, parse_strategies, NameStrategy, Options};
pub use output::{write_atomically, Format, DEFAULT_OUTPUT};
pub use spec::Spec;

use crate::{driver, planner};

/// Why a spec could not be made or written.
#[derive(Debug, Error)]
pub enum Error {
    #[error("unknown device name strategy {value:?}: use index, uuid, or both (index,uuid)")]
    NameStrategy { value: String },
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
}

/// Result of CDI work.
pub type Result<T> = std::result::Result<T, Error>;

//! oci-nvidia-hook: an OCI hook that gives containers NVIDIA GPUs.
//!
//! The flow is one-way: inputs ([`config`], [`request`]) → host inventory
//! ([`driver`]) → [`plan`] → apply, the steps ordered by the one
//! [`planner`]. Everything up to the plan is pure or read-only (discovery
//! only reads; the planner alone leaves the hooks' driver snapshot, a
//! cache), so it is tested without root.
#![deny(unsafe_code)]

pub mod app;
pub mod atomic;
pub mod bounded;
pub mod bundle;
pub mod callback;
pub mod cdi;
pub mod cgroup;
pub mod child;
pub mod config;
pub mod deadline;
pub mod device_class;
pub mod doctor;
pub mod driver;
pub mod elf;
pub mod engine_config;
pub mod entry;
pub mod front;
pub mod glob;
pub mod hook;
pub mod hostfile;
pub mod image;
pub mod inject;
pub mod ldcache;
pub mod logging;
pub mod nvml;
pub mod oneline;
pub mod plan;
pub mod planner;
#[cfg(target_env = "musl")]
pub mod probe;
pub mod program;
pub mod reopen;
pub mod request;
pub mod require;
pub mod runtime;
#[allow(unsafe_code)]
pub mod sys;
pub mod userns;

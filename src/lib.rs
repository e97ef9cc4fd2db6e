//! oci-nvidia-hook: an OCI hook that gives containers NVIDIA GPUs.
//!
//! The flow is one-way: a [`front`] parses a command line into an
//! [`app`] operation; [`app::run`] loads the [`config`] once and runs it:
//! the request ([`planning`]) and the host inventory ([`host`]) meet in the
//! one planner, whose plan is applied ([`apply`]), printed, or written for
//! others ([`specs`]); [`doctor`] diagnoses, [`util`] and [`sys`] serve all.
//! Everything up to the plan is pure or read-only (discovery only reads;
//! the planner alone leaves the hooks' driver snapshot, a cache), so it is
//! tested without root.
#![deny(unsafe_code)]

pub mod app;
pub mod apply;
pub mod config;
pub mod doctor;
pub mod entry;
pub mod front;
pub mod host;
pub mod planning;
pub mod specs;
#[allow(unsafe_code)]
pub mod sys;
pub mod util;

//! The runtime harness: bundles and `config.json`s for real runc, crun,
//! Podman, containerd and dockerd, the container runs and what `/checker`
//! saw inside them, and the host state each run must leave as it found.

pub mod bundle;
pub mod cleanup;
pub mod container;
pub mod containerd2;
pub mod cri;
pub mod daemons;
pub mod docker;
pub mod expected;
pub mod host_state;
pub mod injected;
pub mod oci_config;
pub mod prepared;
pub mod process;
pub mod report;
pub mod run;
pub mod runtimes;

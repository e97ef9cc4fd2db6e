//! `configure … [--pid=PID] ROOTFS`: NVIDIA's CLI run as a prestart hook by
//! containerd (`ctr run --gpus`) and by NVIDIA's own hook in legacy mode,
//! or without `--pid` from a container manager's own hook, inside the
//! container's namespaces (LXC, enroot, Apptainer: docs/hpc.md).
//! The command line is the whole request: stdin is not read (containerd
//! leaves it empty), and the container's `process.env` is never consulted.
//! The working directory is the bundle where its `config.json` says whether
//! the container is privileged and in a user namespace. Everything after
//! that is the hook's own sequence ([`hook::configure`]).

use std::path::Path;

use super::{Configure, CudaCompat, NAME};
use crate::app::Result;
use crate::apply::hook::{self, Seam, Steps};
use crate::config::Config;

/// Configures the container `configure` names.
pub fn run(config: &Config, configure: &Configure, sys: &impl Seam) -> Result<()> {
    if configure.cuda_compat == Some(CudaCompat::Mount) {
        log::debug!(
            "{NAME}: --cuda-compat-mode=mount taken as ldconfig: the image's compat libraries are \
             preferred through its loader cache, never mounted"
        );
    }
    if let Some(ldconfig) = &configure.ldconfig {
        log::debug!(
            "{NAME}: --ldconfig={ldconfig} ignored: the container's loader cache is written directly, \
             no ldconfig is run"
        );
    }
    hook::configure(
        config,
        &hook::Configure {
            pid: configure.pid,
            rootfs: &configure.rootfs,
            // Relative: the working directory, whatever path reaches it.
            bundle: Path::new("."),
            asked: &configure.asked,
            steps: Steps {
                cgroup: !configure.no_cgroups,
                nodes: !configure.no_devbind,
            },
        },
        sys,
    )?;
    Ok(())
}

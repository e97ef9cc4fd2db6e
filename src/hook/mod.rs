//! The hook itself: what runs at `prestart`/`createRuntime`.
//!
//! One-way flow: the state on stdin and the bundle's `config.json` give the
//! request; discovery gives the host inventory; the plan joins them; then the
//! device cgroup is updated in the host's view, host sources are opened, and
//! only then does the process enter the container's mount namespace to apply
//! the plan (stepping back into the host's only to clone the GPUs' procfs
//! directories, when the container shows the driver). The hook's own
//! environment is never consulted.

mod pid;
mod spec;
mod state;

use std::io::{self, Read};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use nix::sys::stat::{umask, Mode};
use thiserror::Error;

pub use spec::Container;
pub use state::{parse as parse_state, ContainerState, MAX_STATE, STATE_TIMEOUT};

use crate::config::Config;
use crate::driver::Gpu;
use crate::driver::Inventory;
use crate::image::Image;
use crate::inject::{self, LinuxSys, NodeMode, Sources, Sys};
use crate::plan::Plan;
use crate::request::{Capability, DeviceSelection, Request};
use crate::require::{DeviceFacts, Facts, Requirements};
use crate::{cgroup, driver, image, plan, request, require};

/// Why the hook refused or failed; `main` prints it on one line.
#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot read the OCI state from stdin: {0}")]
    Stdin(io::Error),
    #[error("the OCI state on stdin exceeds {limit} bytes")]
    StdinTooLarge { limit: usize },
    #[error("no complete OCI state on stdin within {seconds} s")]
    StdinTimeout { seconds: u64 },
    #[error("bad OCI state on stdin: {0}")]
    State(String),
    #[error("container process {pid} does not exist (dead pid, or not in this pid namespace)")]
    DeadPid { pid: u32 },
    #[error("refusing to run inside the container's mount namespace (pid {pid}): run this hook at prestart or createRuntime, never createContainer")]
    InsideContainer { pid: u32 },
    #[error("process {pid} is not a container being created: its root is not the runtime's, so it has already pivoted (a running container, or another process)")]
    NotCreating { pid: u32 },
    #[error("process {pid} is not the container being created: its parent {parent} is not the runtime running this hook ({runtime}) nor one of its ancestors below pid 1")]
    NotSibling { pid: u32, parent: u32, runtime: u32 },
    #[error("cannot inspect {path}: {source}")]
    Inspect { path: PathBuf, source: io::Error },
    #[error("bad bundle config {path}: {reason}")]
    Spec { path: PathBuf, reason: String },
    #[error("cannot open container rootfs {path}: {reason}")]
    Rootfs { path: PathBuf, reason: String },
    #[error("container {id}: {source}")]
    Request { id: String, source: request::Error },
    #[error("{what}=all is refused: only privileged containers (CAP_SYS_ADMIN in the bounding set) may manage or monitor MIG")]
    Unprivileged { what: &'static str },
    #[error(transparent)]
    Driver(#[from] driver::Error),
    #[error(transparent)]
    Plan(#[from] plan::Error),
    #[error(transparent)]
    Image(#[from] image::Error),
    #[error(transparent)]
    Require(#[from] require::Error),
    #[error(transparent)]
    Cgroup(#[from] cgroup::Error),
    #[error(transparent)]
    Inject(#[from] inject::Error),
}

/// Result of a hook run.
pub type Result<T> = std::result::Result<T, Error>;

/// The procfs the container's pid is looked up in: always the real one (the
/// config's `proc-root` only relocates the driver's files).
const PROC: &str = "/proc";

/// Runs the hook with the state read from `stdin`.
pub fn run(config: &Config, stdin: impl Read + AsFd) -> Result<()> {
    // Modes we pass are exact: device nodes keep the host node's mode.
    umask(Mode::empty());
    let state = state::parse(&state::read(stdin)?)?;
    let proc = Path::new(PROC);
    let pidfd = pid::refuse_inside_container(proc, state.pid)?;

    let container = spec::load(&state.bundle)?;
    let request = effective_request(config, &container).map_err(|source| match source {
        Error::Request { source, .. } => Error::Request {
            id: state.id.clone(),
            source,
        },
        other => other,
    })?;
    if request.devices == DeviceSelection::Void {
        log::debug!(
            "container {}: NVIDIA_VISIBLE_DEVICES unset or void, nothing to do",
            state.id
        );
        return Ok(());
    }
    let started = Instant::now();
    let plan = plan_container(config, &container, &request)?;
    let planned = Instant::now();

    // A `user` namespace in config.json, or the one the runtime itself runs
    // in (rootless Podman's config.json has none). Its /dev cannot hold
    // usable device nodes, so the host's are bound; the device cgroup is
    // still granted unless the hook runs unprivileged too (rootless), where
    // it cannot be written and the runtime made none.
    let userns = inject::userns::detect(proc, state.pid)?;
    let nodes = if container.user_namespace || userns.is_some() {
        NodeMode::Bind
    } else {
        NodeMode::Mknod
    };
    if userns.is_some_and(|ns| ns.rootless) {
        log::info!(
            "container {}: user namespace: skipping the device cgroup, bind-mounting device nodes",
            state.id
        );
    } else {
        if nodes == NodeMode::Bind {
            log::info!(
                "container {}: user namespace: bind-mounting device nodes",
                state.id
            );
        }
        for outcome in cgroup::allow(proc, state.pid, &plan.cgroup_rules)? {
            log::debug!("container {}: device cgroup: {outcome:?}", state.id);
        }
    }
    let granted = Instant::now();
    let sys = LinuxSys::default();
    let mut sources = Sources::open(&sys, &plan, nodes == NodeMode::Bind)?;
    let opened = Instant::now();
    // Files made in the container belong to its root, not to host root
    // (which its user namespace cannot represent: see `inject::userns`).
    if let Some((uid, gid)) = userns.and_then(|ns| ns.root) {
        log::debug!(
            "container {}: creating files as its root: uid {uid}, gid {gid} of the hook's user namespace",
            state.id
        );
        inject::userns::act_as(uid, gid)?;
    }
    sys.enter_mount_namespace(proc, state.pid, pidfd.as_ref().map(AsFd::as_fd))?;
    let summary = inject::apply(&sys, &plan, &mut sources, &container.rootfs, nodes)?;
    log::debug!(
        "container {}: took {} µs: plan {}, cgroup {}, sources {}, inject {}",
        state.id,
        started.elapsed().as_micros(),
        (planned - started).as_micros(),
        (granted - planned).as_micros(),
        (opened - granted).as_micros(),
        opened.elapsed().as_micros()
    );
    log::info!(
        "container {}: injected {} device nodes, {} mounts, {} links, {} loader entries ({})",
        state.id,
        summary.devices,
        summary.mounts,
        summary.symlinks,
        summary.loader_entries,
        request.capabilities
    );
    Ok(())
}

/// Everything before the container is touched: requirements, discovery
/// (NVML only when asked for), the image, and the plan, checked against
/// the requirements so that a refusal leaves the container as it was.
fn plan_container(config: &Config, container: &Container, request: &Request) -> Result<Plan> {
    let requirements = if config.disable_require {
        Requirements::default()
    } else {
        Requirements::from_env(&container.env)?
    };
    let needs = requirements.needs();
    // NVML only for MIG devices, or for brand and arch requirements.
    let nvml = request.needs_nvml() || needs.arch || needs.brand;
    // NVML is found as a utility library, whatever the container asked for.
    let scope = if nvml {
        request.capabilities.with(Capability::Utility)
    } else {
        request.capabilities.clone()
    };
    let mut inventory = Inventory::discover(&config.driver, &scope)?;
    if nvml {
        inventory.load_nvml()?;
    }
    let image = Image::inspect(
        &container.rootfs,
        &inventory.driver_version,
        config.cuda_compat.mode,
    )?;
    let plan = Plan::build(&inventory, request, &image)?;
    if !requirements.is_empty() {
        check_requirements(&requirements, &inventory, request, &image, needs.cuda)?;
    }
    Ok(plan)
}

/// Checks the container's requirements on every GPU it gets (a MIG
/// device's parent), before anything is changed: a refusal here replaces
/// "CUDA driver version is insufficient" at run time.
fn check_requirements(
    requirements: &Requirements,
    inventory: &Inventory,
    request: &Request,
    image: &Image,
    need_cuda: bool,
) -> Result<()> {
    let cuda = if need_cuda {
        Some(inventory.cuda_version()?)
    } else {
        None
    };
    let mut facts = Facts {
        driver: inventory.driver_version.clone(),
        cuda,
        compat_cuda: image.compat.as_ref().map(|c| c.cuda),
        device: None,
    };
    let mut gpus: Vec<&Gpu> = Vec::new();
    for device in plan::select(inventory, &request.devices)? {
        if !gpus.iter().any(|g| g.index == device.gpu().index) {
            gpus.push(device.gpu());
        }
    }
    if gpus.is_empty() {
        return Ok(requirements.check(&facts)?);
    }
    for gpu in gpus {
        let nvml = inventory.nvml.as_ref().and_then(|r| {
            r.gpus
                .iter()
                .find(|g| g.uuid.eq_ignore_ascii_case(&gpu.uuid))
        });
        facts.device = Some(DeviceFacts {
            name: format!("GPU {} ({})", gpu.index, gpu.uuid),
            arch: nvml.and_then(|g| {
                let (major, minor) = g.compute_capability.split_once('.')?;
                Some((major.parse().ok()?, minor.parse().ok()?))
            }),
            brand: nvml.map(|g| g.brand.clone()),
        });
        requirements.check(&facts)?;
    }
    Ok(())
}

/// The request as policy lets it stand: device mounts win over the variable
/// when accepted, an unprivileged container's variable is ignored when the
/// config says so, capabilities the host does not offer are dropped, and the
/// MIG management capabilities need a privileged container.
fn effective_request(config: &Config, container: &Container) -> Result<Request> {
    let request_err = |source| Error::Request {
        id: String::new(),
        source,
    };
    let mut request = Request::from_env(&container.env).map_err(request_err)?;
    if config.accept_volume_mounts && !container.device_mounts.is_empty() {
        let list = if container.device_mounts.iter().any(|d| d == "all") {
            "all".to_string()
        } else {
            container.device_mounts.join(",")
        };
        request.devices = DeviceSelection::parse(Some(&list)).map_err(request_err)?;
    } else if !config.accept_env_when_unprivileged && !container.privileged {
        if request.devices != DeviceSelection::Void {
            log::info!(
                "ignoring NVIDIA_VISIBLE_DEVICES of an unprivileged container (accept-env-when-unprivileged = false)"
            );
        }
        request.devices = DeviceSelection::Void;
    }
    let (capabilities, dropped) = request.capabilities.restrict(&config.supported());
    if !dropped.is_empty() {
        let names: Vec<&str> = dropped.iter().map(|c| c.name()).collect();
        log::warn!(
            "capabilities not offered on this host (supported-capabilities): {}",
            names.join(",")
        );
    }
    request.capabilities = capabilities;
    for (wanted, name) in [
        (request.mig_config, "NVIDIA_MIG_CONFIG_DEVICES"),
        (request.mig_monitor, "NVIDIA_MIG_MONITOR_DEVICES"),
    ] {
        if wanted && !container.privileged {
            return Err(Error::Unprivileged { what: name });
        }
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(env: &[&str], privileged: bool, device_mounts: &[&str]) -> Container {
        Container {
            rootfs: "/r".into(),
            env: env.iter().map(|e| e.to_string()).collect(),
            user_namespace: false,
            privileged,
            device_mounts: device_mounts.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn volume_mounts_win_over_the_variable_only_when_accepted() {
        let c = container(
            &["NVIDIA_VISIBLE_DEVICES=all"],
            false,
            &["1", "GPU-abcdef01-2345-6789-abcd-ef0123456789"],
        );
        let req = effective_request(&Config::default(), &c).unwrap();
        assert_eq!(req.devices, DeviceSelection::All);
        let config = Config {
            accept_volume_mounts: true,
            ..Config::default()
        };
        let req = effective_request(&config, &c).unwrap();
        assert_eq!(
            req.devices,
            DeviceSelection::parse(Some("1,GPU-abcdef01-2345-6789-abcd-ef0123456789")).unwrap()
        );
    }

    #[test]
    fn unprivileged_env_is_ignored_when_configured() {
        let config = Config {
            accept_env_when_unprivileged: false,
            ..Config::default()
        };
        let c = container(&["NVIDIA_VISIBLE_DEVICES=all"], false, &[]);
        assert_eq!(
            effective_request(&config, &c).unwrap().devices,
            DeviceSelection::Void
        );
        let c = container(&["NVIDIA_VISIBLE_DEVICES=all"], true, &[]);
        assert_eq!(
            effective_request(&config, &c).unwrap().devices,
            DeviceSelection::All
        );
    }

    #[test]
    fn unsupported_capabilities_are_dropped() {
        let config = Config {
            supported_capabilities: "utility,compute".into(),
            ..Config::default()
        };
        let c = container(
            &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"],
            false,
            &[],
        );
        assert_eq!(
            effective_request(&config, &c)
                .unwrap()
                .capabilities
                .to_string(),
            "compute,utility"
        );
    }

    #[test]
    fn mig_management_needs_a_privileged_container() {
        let env = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"];
        let err = effective_request(&Config::default(), &container(&env, false, &[])).unwrap_err();
        assert!(
            err.to_string().contains("NVIDIA_MIG_CONFIG_DEVICES")
                && err.to_string().contains("CAP_SYS_ADMIN"),
            "{err}"
        );
        assert!(
            effective_request(&Config::default(), &container(&env, true, &[]))
                .unwrap()
                .mig_config
        );
        let env = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_MONITOR_DEVICES=all"];
        assert!(effective_request(&Config::default(), &container(&env, false, &[])).is_err());
    }
}

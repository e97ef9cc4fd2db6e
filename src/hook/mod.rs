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
mod state;

use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Instant;

use nix::sys::stat::{umask, Mode};
use thiserror::Error;

pub use state::{parse as parse_state, ContainerState, MAX_STATE, STATE_TIMEOUT};

use crate::bundle;
use crate::config::Config;
use crate::image::ImageLayout;
use crate::inject::{self, LinuxSys, Sources, Sys};
use crate::plan::{NodeMode, Plan};
use crate::planner::{self, Granted, ImageSource, Source};
use crate::{cgroup, request};

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
    #[error("process {pid}, between the runtime and this hook, exited while the hook checked its ancestry")]
    AncestorGone { pid: u32 },
    #[error("refusing to run inside the container's mount namespace (pid {pid}): run this hook at prestart or createRuntime, never createContainer")]
    InsideContainer { pid: u32 },
    #[error("process {pid} is not a container being created: its root is not the runtime's, so it has already pivoted (a running container, or another process)")]
    NotCreating { pid: u32 },
    #[error("process {pid} is not the container being created: its parent {parent} is not the runtime running this hook ({runtime}) nor one of its ancestors below pid 1")]
    NotSibling { pid: u32, parent: u32, runtime: u32 },
    #[error("cannot inspect {path}: {source}")]
    Inspect { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Bundle(#[from] bundle::Error),
    #[error("container {id}: {source}")]
    Request { id: String, source: request::Error },
    #[error(transparent)]
    Planner(#[from] planner::Error),
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

/// A container being created, checked: its state, the process held, its bundle.
struct Creating {
    state: ContainerState,
    pidfd: Option<OwnedFd>,
    container: bundle::Container,
}

/// Reads the state from `stdin` and checks that its pid is a container
/// being created, seen from outside it; then reads its bundle.
fn creating(stdin: impl Read + AsFd) -> Result<Creating> {
    // Modes we pass are exact: device nodes keep the host node's mode.
    umask(Mode::empty());
    let state = state::parse(&state::read(stdin)?)?;
    let pidfd = pid::refuse_inside_container(Path::new(PROC), state.pid)?;
    let container = bundle::load(&state.bundle)?;
    Ok(Creating {
        state,
        pidfd,
        container,
    })
}

/// Runs the hook with the state read from `stdin`.
pub fn run(config: &Config, stdin: impl Read + AsFd) -> Result<()> {
    let Creating {
        state,
        pidfd,
        mut container,
    } = creating(stdin)?;
    let proc = Path::new(PROC);
    let name_container = |source: planner::Error| match source {
        planner::Error::Request(source) => Error::Request {
            id: state.id.clone(),
            source,
        },
        other => Error::Planner(other),
    };
    let mut effective =
        planner::effective(config, Source::Container(&container)).map_err(name_container)?;
    if effective.is_void() {
        log::debug!(
            "container {}: NVIDIA_VISIBLE_DEVICES unset or void, nothing to do",
            state.id
        );
        return Ok(());
    }
    // A `user` namespace in config.json, or the one the runtime itself runs
    // in (rootless Podman's config.json has none). Its /dev cannot hold
    // usable device nodes, so the host's are bound; the device cgroup is
    // still granted unless the hook runs unprivileged too (rootless), where
    // it cannot be written and the runtime made none.
    let userns = inject::userns::detect(proc, state.pid)?;
    if userns.is_some() && !container.user_namespace {
        container.user_namespace = true;
        effective =
            planner::effective(config, Source::Container(&container)).map_err(name_container)?;
    }
    let started = Instant::now();
    let mut inventory = planner::discover_for_hook(config, &effective)?;
    let image = planner::image(config, &inventory, ImageSource::Rootfs(&container.rootfs))?;
    let plan = planner::plan(&effective, &mut inventory, &image)?;
    let planned = Instant::now();
    if log::log_enabled!(log::Level::Debug) {
        log::debug!(
            "container {}: planned {}",
            state.id,
            serde_json::to_string(&plan).unwrap_or_default()
        );
    }

    if userns.is_some_and(|ns| ns.rootless) {
        log::info!(
            "container {}: user namespace: skipping the device cgroup, bind-mounting device nodes",
            state.id
        );
    } else {
        if plan.node_mode == NodeMode::Bind {
            log::info!(
                "container {}: user namespace: bind-mounting device nodes",
                state.id
            );
        }
        let held = || pid::still_held(proc, state.pid, pidfd.as_ref()).is_ok();
        for outcome in cgroup::allow_held(proc, state.pid, &plan.cgroup_rules, &held)? {
            log::debug!("container {}: device cgroup: {outcome:?}", state.id);
        }
    }
    // userns::detect read /proc/<pid> by number: it was about the process
    // checked only if that is still the one held.
    pid::still_held(proc, state.pid, pidfd.as_ref())?;
    let granted = Instant::now();
    let sys = LinuxSys::default();
    let mut sources = Sources::open(&sys, &plan)?;
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
    let summary = inject::apply(&sys, &plan, &mut sources, &container.rootfs)?;
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
        effective.request.capabilities
    );
    Ok(())
}

/// How the spec that granted a container its devices was made: the
/// `cdi-hook` arguments `cdi generate` (or the runtime wrapper) wrote.
#[derive(Debug, Clone)]
pub struct SpecMade {
    /// The driver version it was made for.
    pub driver_version: String,
    /// The capabilities its mounts carry.
    pub capabilities: String,
    /// The layout of its container paths.
    pub layout: ImageLayout,
}

/// The `createRuntime` hook of a spec we generated. The runtime created
/// the nodes, granted the device cgroup and made the mounts; what is left
/// is what a runtime cannot do: the SONAME and development links, the
/// loader cache and its `ld.so.conf.d` entry, and the masked
/// `/proc/driver/nvidia` showing the granted GPUs only. Outside the
/// container, as the prestart hook; it touches no cgroup and execs nothing.
pub fn run_granted(config: &Config, stdin: impl Read + AsFd, made: &SpecMade) -> Result<()> {
    let Creating {
        state,
        pidfd,
        container,
    } = creating(stdin)?;
    let proc = Path::new(PROC);
    let started = Instant::now();
    let planned = planner::plan_granted(
        config,
        Granted {
            nodes: &container.devices,
            capabilities: &made.capabilities,
            layout: made.layout,
            driver_version: &made.driver_version,
        },
    )?;
    // The runtime owns the nodes, the cgroup and the mounts.
    let plan = Plan {
        devices: Vec::new(),
        mounts: Vec::new(),
        cgroup_rules: Vec::new(),
        ..planned.plan
    };
    if log::log_enabled!(log::Level::Debug) {
        log::debug!(
            "container {}: granted {:?}, planned {}",
            state.id,
            planned.effective.request.devices,
            serde_json::to_string(&plan).unwrap_or_default()
        );
    }
    let userns = inject::userns::detect(proc, state.pid)?;
    pid::still_held(proc, state.pid, pidfd.as_ref())?;
    let sys = LinuxSys::default();
    let mut sources = Sources::open(&sys, &plan)?;
    if let Some((uid, gid)) = userns.and_then(|ns| ns.root) {
        inject::userns::act_as(uid, gid)?;
    }
    sys.enter_mount_namespace(proc, state.pid, pidfd.as_ref().map(AsFd::as_fd))?;
    let summary = inject::apply(&sys, &plan, &mut sources, &container.rootfs)?;
    log::info!(
        "container {}: CDI: {} links, {} loader entries in {} µs",
        state.id,
        summary.symlinks,
        summary.loader_entries,
        started.elapsed().as_micros()
    );
    Ok(())
}

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
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use nix::sys::stat::{umask, Mode};
use thiserror::Error;

pub use state::{parse as parse_state, ContainerState, MAX_STATE, STATE_TIMEOUT};

use crate::bundle;
use crate::config::Config;
use crate::inject::{self, LinuxSys, Sources, Sys};
use crate::plan::NodeMode;
use crate::planner::{self, ImageSource, Source};
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

/// Runs the hook with the state read from `stdin`.
pub fn run(config: &Config, stdin: impl Read + AsFd) -> Result<()> {
    // Modes we pass are exact: device nodes keep the host node's mode.
    umask(Mode::empty());
    let state = state::parse(&state::read(stdin)?)?;
    let proc = Path::new(PROC);
    let pidfd = pid::refuse_inside_container(proc, state.pid)?;

    let mut container = bundle::load(&state.bundle)?;
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
    let mut inventory = planner::discover(config, &effective)?;
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

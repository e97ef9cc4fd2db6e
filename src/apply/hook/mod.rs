//! The hook itself: what runs at `prestart`/`createRuntime`.
//!
//! One-way flow: the state on stdin and the bundle's `config.json` give the
//! request; discovery gives the host inventory; the plan joins them; then the
//! device cgroup is updated in the host's view, host sources are opened, and
//! only then does the process enter the container's mount namespace to apply
//! the plan (stepping back into the host's only to clone the GPUs' procfs
//! directories, when the container shows the driver). The hook's own
//! environment is never consulted.
//!
//! `nvidia-container-cli configure` ([`configure`]) enters the same sequence
//! with its pid and rootfs from the command line and its request from its
//! options; only where the request comes from differs.

#[cfg(test)]
pub(crate) mod fake;
mod pid;
mod state;
mod target;

use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use nix::sys::stat::{umask, Mode};
use thiserror::Error;

pub use state::{parse as parse_state, ContainerState, MAX_STATE, STATE_TIMEOUT};
use target::Reach;
pub use target::{Applied, Seam, Target};

use crate::apply::inject;
use crate::config::Config;
use crate::planning::bundle;
use crate::planning::plan::NodeMode;
use crate::planning::planner::{
    self, Asked, Discovery, Granted, ImageSource, Inputs, LeftToOthers, Source, SpecMade,
};
use crate::{apply::cgroup, planning::request};

/// Why the hook refused or failed; `main` prints it on one line.
#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot read the OCI state from stdin: {0}")]
    Stdin(io::Error),
    #[error("the OCI state on stdin exceeds {limit} bytes")]
    StdinTooLarge { limit: usize },
    #[error("no complete OCI state on stdin within {millis} ms")]
    StdinTimeout { millis: u64 },
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
    #[error("container {id}: a plan made inside the container must take nothing from the host")]
    HostSourcesInside { id: String },
    #[error("container {id}: no device cgroup to grant: without --pid there is no container process to find it by; pass --no-cgroups (the container manager grants the devices) or --pid=PID")]
    NoCgroupWithoutPid { id: String },
    #[error("container {id}: the caller (pid {parent}) runs in another mount namespace than this process: configure without --pid acts on the caller's own namespaces; pass --pid=PID")]
    CallerElsewhere { id: String, parent: u32 },
}

/// Result of a hook run.
pub type Result<T> = std::result::Result<T, Error>;

/// The procfs the container's pid is looked up in: always the real one (the
/// config's `proc-root` only relocates the driver's files).
const PROC: &str = "/proc";

/// Reads the state from `stdin` and checks that its pid is a container
/// being created, seen from outside it; then reads its bundle.
fn creating(stdin: impl Read + AsFd) -> Result<Target> {
    let state = state::parse(&state::read(stdin)?)?;
    let held = hold_creating(state.pid)?;
    let container = bundle::load(&state.bundle)?;
    Ok(Target::outside(state.id, container, held))
}

/// Checks that `pid` is a container being created, seen from outside it,
/// and holds it.
fn hold_creating(pid: u32) -> Result<pid::Held> {
    // Modes we pass are exact: device nodes keep the host node's mode.
    umask(Mode::empty());
    pid::refuse_inside_container(Path::new(PROC), pid)
}

/// Where a container's request is read from.
#[derive(Debug, Clone, Copy)]
enum Ask<'a> {
    /// Its own `process.env` and device mounts: the OCI hook.
    Environment,
    /// A command line (`nvidia-container-cli configure`).
    Argv(&'a Asked),
}

impl<'a> Ask<'a> {
    /// The planner's source for `container`.
    fn source(self, container: &'a bundle::Container) -> Source<'a> {
        match self {
            Ask::Environment => Source::Container(container),
            Ask::Argv(asked) => Source::Argv {
                asked,
                container: Some(container),
            },
        }
    }
}

/// The steps of injection a caller may leave to the runtime, as NVIDIA's
/// CLI `--no-cgroups` and `--no-devbind` do; the hook takes every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steps {
    /// Grant the device nodes in the container's device cgroup.
    pub cgroup: bool,
    /// Create (or bind) the device nodes in the container's `/dev`.
    pub nodes: bool,
}

impl Steps {
    /// Every step, as the hook takes them.
    pub const ALL: Steps = Steps {
        cgroup: true,
        nodes: true,
    };
}

/// Runs the hook with the state read from `stdin`, its privileged calls through `sys`.
pub fn run(config: &Config, stdin: impl Read + AsFd, sys: &impl Seam) -> Result<()> {
    inject(config, sys, &creating(stdin)?, Ask::Environment, Steps::ALL)
}

/// What `nvidia-container-cli configure` names: the container's pid and
/// rootfs, its bundle directory (where `config.json` may be), the request,
/// and the steps to take.
#[derive(Debug, Clone, Copy)]
pub struct Configure<'a> {
    /// The container's init, being created (`--pid`); `None`: the
    /// container whose namespaces the caller, and so this process, runs in.
    pub pid: Option<u32>,
    /// Its rootfs (the command's argument).
    pub rootfs: &'a Path,
    /// Where its `config.json` may be: the working directory, as
    /// containerd and NVIDIA's hook run the CLI.
    pub bundle: &'a Path,
    /// What it gets.
    pub asked: &'a Asked,
    /// Which steps to take.
    pub steps: Steps,
}

/// Configures a container as `nvidia-container-cli configure` asks: the
/// request from the command line, never from the container's environment,
/// with the same pid checks, planner and injection as the hook. Without a
/// pid, the container is the one whose namespaces this process runs in
/// (NVIDIA's "standalone" mode): its rootfs is still resolved inside
/// itself, and nothing is entered.
pub fn configure(config: &Config, target: &Configure<'_>, sys: &impl Seam) -> Result<()> {
    let configured = match target.pid {
        Some(pid) => {
            let held = hold_creating(pid)?;
            let container = configured_container(target.bundle, target.rootfs)?;
            Target::outside(format!("pid {pid}"), container, held)
        }
        None => {
            let id = format!("rootfs {}", target.rootfs.display());
            caller_in_our_mount_namespace(&id, Path::new(PROC))?;
            // Modes we pass are exact, as outside.
            umask(Mode::empty());
            let container = configured_container(target.bundle, target.rootfs)?;
            Target::caller(id, container)
        }
    };
    inject(
        config,
        sys,
        &configured,
        Ask::Argv(target.asked),
        target.steps,
    )
}

/// Fails when the caller runs in another mount namespace than this
/// process: NVIDIA's CLI would act on the caller's, we act on our own, so
/// the two must be one. A parent outside this pid namespace (pid 0) or gone
/// is not looked at: our own namespace is the caller's then.
fn caller_in_our_mount_namespace(id: &str, proc: &Path) -> Result<()> {
    let parent = std::os::unix::process::parent_id();
    if parent == 0 {
        return Ok(());
    }
    let ns = |name: &str| {
        std::fs::metadata(proc.join(name).join("ns/mnt"))
            .ok()
            .map(|m| (m.dev(), m.ino()))
    };
    match (ns("self"), ns(&parent.to_string())) {
        (Some(ours), Some(theirs)) if ours != theirs => Err(Error::CallerElsewhere {
            id: id.to_string(),
            parent,
        }),
        _ => Ok(()),
    }
}

/// The container `configure` names, as its bundle describes it when the
/// bundle's `config.json` is there and is this rootfs's; otherwise only its
/// rootfs is known, and it counts as unprivileged without a user namespace
/// (its pid's `uid_map` still tells a user namespace apart).
fn configured_container(bundle: &Path, rootfs: &Path) -> Result<bundle::Container> {
    let bare = || bundle::Container::bare(rootfs.to_path_buf(), Vec::new());
    let mut container = match bundle::load(bundle) {
        Ok(container) => container,
        Err(bundle::Error::Read { source, path }) if source.kind() == io::ErrorKind::NotFound => {
            log::debug!(
                "no {}: the container counts as unprivileged",
                path.display()
            );
            return Ok(bare());
        }
        Err(e) => return Err(e.into()),
    };
    let same = |a: &Path, b: &Path| match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    };
    if !same(&container.rootfs, rootfs) {
        log::info!(
            "{}/config.json describes rootfs {}, not {}: another container's, not read",
            bundle.display(),
            container.rootfs.display(),
            rootfs.display()
        );
        return Ok(bare());
    }
    // Its request is the command line's, never the environment's.
    container.env.clear();
    container.device_mounts.clear();
    container.rootfs = rootfs.to_path_buf();
    Ok(container)
}

/// Injects into `target` what `ask` asks for, taking `steps`: the one
/// sequence after the container is known, for the hook and `configure`.
fn inject(
    config: &Config,
    sys: &impl Seam,
    target: &Target,
    ask: Ask<'_>,
    steps: Steps,
) -> Result<()> {
    let id = &target.id;
    let name_container = |source: planner::Error| match source {
        planner::Error::Request(source) => Error::Request {
            id: id.clone(),
            source,
        },
        other => Error::Planner(other),
    };
    let started = Instant::now();
    let planned = planner::plan(
        config,
        Inputs {
            source: ask.source(&target.container),
            image: ImageSource::Rootfs(&target.container.rootfs),
            // A `user` namespace in config.json, or the one the runtime
            // itself runs in (rootless Podman's config.json has none).
            user_namespace: target.user_namespace(),
            // The caller's runtime makes the nodes or grants the cgroup
            // (NVIDIA's `--no-devbind`, `--no-cgroups`).
            left: LeftToOthers {
                nodes: !steps.nodes,
                cgroup_rules: !steps.cgroup,
                mounts: false,
            },
            discovery: Discovery::Snapshot,
        },
    )
    .map_err(name_container)?;
    if planned.effective.is_void() {
        log::debug!("container {id}: NVIDIA_VISIBLE_DEVICES unset or void, nothing to do");
        return Ok(());
    }
    let plan = &planned.plan;
    let planned_at = Instant::now();
    if log::log_enabled!(log::Level::Debug) {
        log::debug!(
            "container {id}: planned {}",
            serde_json::to_string(plan).unwrap_or_default()
        );
    }
    if !steps.nodes {
        // They are still granted in the device cgroup.
        log::debug!("container {id}: device nodes left to the runtime");
    }
    if !steps.cgroup {
        log::debug!("container {id}: device cgroup left to the runtime");
    }
    match &planned.user_namespace {
        Some(ns) if ns.rootless => log::info!(
            "container {id}: user namespace: skipping the device cgroup, bind-mounting device nodes"
        ),
        Some(_) if plan.node_mode == NodeMode::Bind && steps.nodes => {
            log::info!("container {id}: user namespace: bind-mounting device nodes")
        }
        _ => {}
    }
    let applied = target.apply(sys, plan, planned.user_namespace.as_ref())?;
    let summary = applied.summary;
    log::debug!(
        "container {id}: took {} µs: plan {}, cgroup {}, sources {}, inject {}",
        started.elapsed().as_micros(),
        (planned_at - started).as_micros(),
        (applied.granted - planned_at).as_micros(),
        (applied.opened - applied.granted).as_micros(),
        applied.opened.elapsed().as_micros()
    );
    log::info!(
        "container {id}: injected {} device nodes, {} mounts, {} links, {} loader entries ({})",
        summary.devices,
        summary.mounts,
        summary.symlinks,
        summary.loader_entries,
        planned.effective.request.capabilities
    );
    Ok(())
}

/// The `createRuntime` hook of a spec we generated. The runtime created
/// the nodes, granted the device cgroup and made the mounts; what is left
/// is what a runtime cannot do: the SONAME and development links, the
/// loader cache and its `ld.so.conf.d` entry, and the masked
/// `/proc/driver/nvidia` showing the granted GPUs only. Outside the
/// container, as the prestart hook; it touches no cgroup and execs nothing.
pub fn run_granted(
    config: &Config,
    stdin: impl Read + AsFd,
    made: &SpecMade,
    sys: &impl Seam,
) -> Result<()> {
    let target = creating(stdin)?;
    let id = &target.id;
    let started = Instant::now();
    let planned = planner::plan(
        config,
        Inputs {
            source: Source::Granted(Granted {
                nodes: &target.container.devices,
                made,
            }),
            image: ImageSource::Layout(made.layout),
            // Files it makes belong to the container's root, as the prestart hook's do.
            user_namespace: target.user_namespace(),
            left: LeftToOthers::SPEC_EDITS,
            discovery: Discovery::Snapshot,
        },
    )?;
    if log::log_enabled!(log::Level::Debug) {
        log::debug!(
            "container {id}: granted {:?}, planned {}",
            planned.effective.request.devices,
            serde_json::to_string(&planned.plan).unwrap_or_default()
        );
    }
    let summary = target
        .apply(sys, &planned.plan, planned.user_namespace.as_ref())?
        .summary;
    log::info!(
        "container {id}: CDI: {} links, {} loader entries in {} µs",
        summary.symlinks,
        summary.loader_entries,
        started.elapsed().as_micros()
    );
    Ok(())
}

/// Reads the state (from `state_file`, else `stdin`) and the bundle, and
/// finds whether this process is in the container's mount namespace; if
/// not, its pid is checked as the prestart hook checks it.
pub fn locate(stdin: impl Read + AsFd, state_file: Option<&Path>) -> Result<Target> {
    let data = match state_file {
        Some(path) => {
            crate::util::hostfile::read(path, MAX_STATE).map_err(|source| Error::Inspect {
                path: path.to_path_buf(),
                source,
            })?
        }
        None => state::read(stdin)?,
    };
    let ns = |pid: &str| {
        let path = Path::new(PROC).join(pid).join("ns/mnt");
        std::fs::metadata(&path)
            .map(|m| (m.dev(), m.ino()))
            .map_err(|source| Error::Inspect { path, source })
    };
    // Run from inside the container's pid namespace (runc and crun run
    // `createContainer` hooks from its init), this process's pid differs
    // from the one the host's procfs gives it, and the state's pid is the
    // init's own view (1): the namespace this process is in is the
    // container's. Otherwise it is the container's if the state's pid
    // shares it.
    let in_child_pid_ns =
        std::fs::read_link(Path::new(PROC).join("self")).map_err(|source| Error::Inspect {
            path: Path::new(PROC).join("self"),
            source,
        })? != Path::new(&std::process::id().to_string());
    // crun run with the host's pids says pid 0 (none) at createContainer,
    // which it runs from the container's init, in its mount namespace.
    let state = state::parse_inside(&data)?;
    let reach = if in_child_pid_ns {
        Reach::Inside
    } else if state.pid == 0 {
        // Then this process shares its parent's (the init's) namespace,
        // and that is not the host's: else it is on the host, where the
        // rootfs is not the container's to change. The init's children have
        // the container's capabilities, fewer than pid 1's, whose
        // namespace they then may not even look at: that too says this is
        // not the host's runtime.
        let parent = nix::unistd::getppid().as_raw().to_string();
        let own = ns("self")?;
        let hosts = match ns("1") {
            Err(Error::Inspect { source, .. })
                if source.kind() == io::ErrorKind::PermissionDenied =>
            {
                None
            }
            other => Some(other?),
        };
        if own != ns(&parent)? || hosts == Some(own) {
            return Err(Error::State(format!(
                "the state names no process (pid 0), and this process is not in a container's mount namespace: it shares the host's, or not its parent's ({parent})"
            )));
        }
        Reach::Inside
    } else if ns("self")? == ns(&state.pid.to_string())? {
        Reach::Inside
    } else {
        Reach::Outside(hold_creating(state.pid)?)
    };
    let container = bundle::load(&state.bundle)?;
    Ok(Target {
        id: state.id,
        container,
        reach,
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn bundle_with(root: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("rootfs")).unwrap();
        fs::create_dir(dir.path().join("other")).unwrap();
        fs::write(
            dir.path().join("config.json"),
            format!(
                r#"{{"ociVersion":"1.0.2","root":{{"path":"{root}"}},
                    "process":{{"cwd":"/","args":["sh"],"user":{{"uid":0,"gid":0}},
                                "env":["NVIDIA_VISIBLE_DEVICES=all"],
                                "capabilities":{{"bounding":["CAP_SYS_ADMIN"]}}}},
                    "mounts":[{{"destination":"/var/run/nvidia-container-devices/0","source":"/dev/null"}}],
                    "linux":{{"namespaces":[{{"type":"mount"}},{{"type":"user"}}]}}}}"#
            ),
        )
        .unwrap();
        dir
    }

    #[test]
    fn configure_reads_the_bundle_of_its_rootfs_but_never_its_request() {
        let dir = bundle_with("rootfs");
        let rootfs = dir.path().join("rootfs");
        let c = configured_container(dir.path(), &rootfs).unwrap();
        assert!(c.privileged && c.user_namespace);
        assert_eq!(c.rootfs, rootfs);
        assert!(c.env.is_empty() && c.device_mounts.is_empty(), "{c:?}");
    }

    #[test]
    fn configure_without_this_rootfss_bundle_counts_the_container_unprivileged() {
        // Another container's config.json.
        let dir = bundle_with("other");
        let rootfs = dir.path().join("rootfs");
        let c = configured_container(dir.path(), &rootfs).unwrap();
        assert!(!c.privileged && !c.user_namespace);
        assert_eq!(c.rootfs, rootfs);
        // None at all.
        let empty = tempfile::tempdir().unwrap();
        let c = configured_container(empty.path(), &rootfs).unwrap();
        assert!(!c.privileged && !c.user_namespace && c.env.is_empty());
    }

    #[test]
    fn configure_refuses_a_malformed_bundle_config() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("config.json"), "{").unwrap();
        let err = configured_container(dir.path(), &dir.path().join("rootfs")).unwrap_err();
        assert!(err.to_string().contains("config.json"), "{err}");
    }
}

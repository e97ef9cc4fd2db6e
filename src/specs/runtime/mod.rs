//! Runtime mode: `oci-nvidia-hook runtime` (also the name
//! `nvidia-container-runtime`), a thin layer in front of runc, as NVIDIA's
//! runtime is. On `create` and `run` it writes the GPUs a container asks
//! for into its `config.json` (the same edits as our CDI spec: device
//! nodes and their cgroup rules, read-only mounts, one `createRuntime`
//! hook), so the runtime owns the devices and a systemd `daemon-reload`
//! keeps them; then, as for every other command, it `exec`s the real
//! runtime with the arguments it was given, unchanged. It parses no more
//! of runc's command line than the global flags, the command and the
//! bundle, and never executes itself. In CDI mode (`cdi`, the request's
//! choice under `auto`) the edits are instead those of the CDI devices the
//! container names, from the spec directories, any vendor's (`cdi`).

pub mod annotations;
pub mod args;

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use thiserror::Error;

use crate::config::Config;
use crate::planning::bundle;
use crate::planning::planner::{self, ImageSource, Inputs, Source};
use crate::specs::cdi::apply;
use crate::specs::cdi::edits::{self, Callback, VISIBLE_DEVICES_VOID};
use crate::specs::cdi::registry::Registry;
use crate::util::atomic;
use crate::util::this_program;

/// Why the wrapper stopped before the real runtime ran.
#[derive(Debug, Error)]
pub enum Error {
    #[error("no OCI runtime found: tried {tried} ([runtime] runtimes in the config)")]
    NoRuntime { tried: String },
    #[error("refusing runtime {path}: it is this wrapper itself ([runtime] runtimes must name the real runtime, e.g. runc)")]
    Itself { path: PathBuf },
    #[error("cannot find this program: {0}")]
    Exe(std::io::Error),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bad config.json {path}: {reason}")]
    Spec { path: PathBuf, reason: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Bundle(#[from] bundle::Error),
    #[error(transparent)]
    Planner(#[from] planner::Error),
    #[error(transparent)]
    Edit(#[from] Box<crate::specs::cdi::Error>),
    #[error(transparent)]
    Deadline(#[from] Box<crate::util::deadline::Expired>),
    #[error("cannot execute {path}: {source}")]
    Exec {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Result of the wrapper.
pub type Result<T> = std::result::Result<T, Error>;

/// What glibc's loader removes from the environment of a secure-mode start
/// (its `UNSECURE_ENVVARS`, with the malloc ones older releases list): the variables that make a dynamically linked
/// program load code (`LD_PRELOAD`, `LD_AUDIT`, `LD_LIBRARY_PATH`,
/// `GCONV_PATH`) or read files it names. The runtime the wrapper execs (runc
/// links glibc) gets none of them, whatever environment the engine handed
/// the wrapper: the static binary is immune itself, and must not hand them on.
pub const UNSECURE_VARIABLES: &[&str] = &[
    "GCONV_PATH",
    "GETCONF_DIR",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LD_AUDIT",
    "LD_DEBUG",
    "LD_DEBUG_OUTPUT",
    "LD_DYNAMIC_WEAK",
    "LD_HWCAP_MASK",
    "LD_LIBRARY_PATH",
    "LD_ORIGIN_PATH",
    "LD_PRELOAD",
    "LD_PROFILE",
    "LD_SHOW_AUXV",
    "LD_USE_LOAD_BIAS",
    "LOCALDOMAIN",
    "LOCPATH",
    "MALLOC_ARENA_MAX",
    "MALLOC_ARENA_TEST",
    "MALLOC_PERTURB_",
    "MALLOC_TRACE",
    "MALLOC_TOP_PAD_",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TMPDIR",
    "TZDIR",
];

/// Edits the bundle's spec when `args` create a container that asks for
/// GPUs, then replaces this process with the real runtime given `args`.
/// Returns only on failure.
pub fn run(config: &Config, config_path: Option<&Path>, args: &[OsString]) -> Error {
    let runtime = match find_runtime(config) {
        Ok(runtime) => runtime,
        Err(e) => return e,
    };
    if let Some(bundle) = args::bundle_of(args) {
        if let Err(e) = edit_bundle(config, config_path, &bundle) {
            return e;
        }
    }
    log::debug!("exec {} {args:?}", runtime.display());
    // The runtime runs unbounded by ours: an interval timer outlives exec.
    crate::util::deadline::disarm();
    let name = runtime
        .file_name()
        .unwrap_or(runtime.as_os_str())
        .to_owned();
    let mut command = Command::new(&runtime);
    for variable in UNSECURE_VARIABLES {
        command.env_remove(variable);
    }
    let source = command.arg0(name).args(args).exec();
    Error::Exec {
        path: runtime,
        source,
    }
}

/// Appends `message` to the log the caller gave the runtime, in the
/// runtime's own format: containerd shows the last error there as the
/// runtime's ("OCI runtime create failed: …"), and Docker prints it. A log
/// that cannot be written changes nothing: stderr still has the line.
pub fn log_failure(args: &[OsString], message: &str) {
    let Some((path, json)) = args::log_file(args) else {
        return;
    };
    let line = if json {
        serde_json::json!({"level": "error", "msg": message}).to_string()
    } else {
        format!("level=error msg={}", serde_json::Value::from(message))
    };
    let _ = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        // After the deadline is disarmed: a fifo no one reads is refused
        // (ENXIO), never waited for.
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
        .open(&path)
        .and_then(|mut file| writeln!(file, "{line}"));
}

/// The first runtime of the config that exists and is not this binary.
/// Files are told apart by device and inode (a link to this binary is this
/// binary), which costs one `stat` a candidate where resolving each path
/// would read every component's link.
pub fn find_runtime(config: &Config) -> Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let me = fs::metadata("/proc/self/exe").map_err(Error::Exe)?;
    let mut tried = Vec::new();
    for name in &config.runtime.runtimes {
        let candidates: Vec<PathBuf> = if name.starts_with('/') {
            vec![PathBuf::from(name)]
        } else {
            // The system's directories, never the caller's `PATH`
            // (`doctor --run` finds runc there too).
            this_program::system_dirs()
                .map(|dir| Path::new(dir).join(name))
                .collect()
        };
        for path in candidates {
            tried.push(path.display().to_string());
            let Ok(meta) = fs::metadata(&path) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            if (meta.dev(), meta.ino()) == (me.dev(), me.ino()) {
                return Err(Error::Itself { path });
            }
            return Ok(path);
        }
    }
    Err(Error::NoRuntime {
        tried: tried.join(", "),
    })
}

/// Writes the GPUs a container asks for into `bundle`'s `config.json`,
/// unless the spec is ours already: the plan's edits in legacy mode, the
/// named CDI devices' in CDI mode. The file is replaced whole.
pub fn edit_bundle(config: &Config, config_path: Option<&Path>, bundle: &Path) -> Result<()> {
    let path = bundle.join("config.json");
    let data =
        crate::util::hostfile::read(&path, bundle::MAX_CONFIG).map_err(|source| Error::Read {
            path: path.clone(),
            source,
        })?;
    // Most containers ask for no GPU: that is decided from the light
    // reading, before the whole spec is decoded.
    let container = bundle::parse(bundle, &path, &data)?;
    let annotated = !matches!(
        config.runtime.mode,
        crate::config::RuntimeMode::Legacy
            | crate::config::RuntimeMode::JitCdi
            | crate::config::RuntimeMode::Csv
    ) && annotations::may_annotate(&data, &config.runtime.cdi.annotation_prefixes);
    let whole = annotated.then(|| decode(&path, &data)).transpose()?;
    let planned = planner::plan(
        config,
        Inputs::new(
            Source::Runtime {
                container: &container,
                spec: whole.as_ref(),
            },
            ImageSource::Rootfs(&container.rootfs),
        ),
    )?;
    if let Some(names) = &planned.cdi_devices {
        return edit_for_cdi(config, &path, &data, whole, names);
    }
    if planned.effective.is_void() {
        return Ok(());
    }
    let mut spec = match whole {
        Some(spec) => spec,
        None => decode(&path, &data)?,
    };
    if apply::is_edited(&spec) {
        log::debug!("{}: edited already", path.display());
        return Ok(());
    }
    let program = this_program::path().map_err(Error::Exe)?;
    let config_path = config_path
        .map(std::path::absolute)
        .transpose()
        .map_err(Error::Exe)?;
    let Some(callback) = Callback::for_planned(program, config_path, &planned) else {
        return Ok(());
    };
    apply::apply(&mut spec, &edits::container_edits(&planned.plan, &callback)).map_err(Box::new)?;
    encode_and_replace(&path, &spec)?;
    log::info!(
        "{}: {} device nodes, {} mounts written for the runtime",
        path.display(),
        planned.plan.devices.len(),
        planned.plan.mounts.len()
    );
    Ok(())
}

/// CDI mode: the edits of the devices `names` from the spec directories,
/// as a CDI runtime applies them; an unknown name stops the container here.
/// `NVIDIA_VISIBLE_DEVICES=void` follows, so that no prestart hook (ours
/// or NVIDIA's) injects the same GPUs a second time.
fn edit_for_cdi(
    config: &Config,
    path: &Path,
    data: &[u8],
    whole: Option<Value>,
    names: &[crate::specs::cdi::name::Qualified],
) -> Result<()> {
    if names.is_empty() {
        return Ok(());
    }
    let registry = Registry::load(&config.runtime.cdi.spec_dirs);
    let mut edits = registry.edits(names).map_err(Box::new)?;
    edits.env.push(VISIBLE_DEVICES_VOID.into());
    let mut spec = match whole {
        Some(spec) => spec,
        None => decode(path, data)?,
    };
    if apply::is_edited(&spec) {
        log::debug!("{}: edited already", path.display());
        return Ok(());
    }
    apply::apply(&mut spec, &edits).map_err(Box::new)?;
    encode_and_replace(path, &spec)?;
    let listed: Vec<String> = names.iter().map(ToString::to_string).collect();
    log::info!(
        "{}: CDI devices {}: {} device nodes, {} mounts, {} hooks written for the runtime",
        path.display(),
        listed.join(", "),
        edits.device_nodes.len(),
        edits.mounts.len(),
        edits.hooks.len()
    );
    Ok(())
}

/// The whole spec, as JSON.
fn decode(path: &Path, data: &[u8]) -> Result<Value> {
    serde_json::from_slice(data).map_err(|e| Error::Spec {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Encodes `spec` and replaces `path` with it.
fn encode_and_replace(path: &Path, spec: &Value) -> Result<()> {
    let mut text = serde_json::to_vec(spec).map_err(|e| Error::Spec {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    text.push(b'\n');
    replace(path, &text)
}

/// Replaces `path` with `data` through a temporary file beside it, in
/// its mode: the runtime reads the old spec or the new one, never half of one.
fn replace(path: &Path, data: &[u8]) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    // Written whole or not at all: the deadline stops it before, not midway.
    let _held = crate::util::deadline::hold();
    crate::util::deadline::check()?;
    let mode = fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o600);
    atomic::replace(path, data, atomic::Options { mode, sync: true })
        .map_err(|atomic::Error { path, source }| Error::Write { path, source })
}

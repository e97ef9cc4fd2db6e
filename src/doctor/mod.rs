//! `doctor`: the layered diagnosis of "my container does not see the GPU".
//!
//! It walks the layers a user walks by hand, in order: the host driver
//! (`host`), the runtimes' wiring to the injector (`hooks`, `engines`,
//! `containerd`, `crio`, `cdi`), an image's needs against this host (`image`, `ceiling`) and,
//! when asked, a live container (`live`, whose in-container half is
//! `inside`). Each layer yields [`Check`]s, plain data that `report`
//! prints as text or JSON; a check that fails names the one remedy that
//! fixes it.
//!
//! Doctor only reads, except for the live check, which builds a throwaway
//! rootfs and container out of host files and removes them whatever
//! happens. It never executes, loads or opens for reading anything of an
//! image except through the same resolution inside its rootfs that the hook
//! uses, and never runs policy of its own: the planner, inventory and
//! requirement checks are the hook's.

mod cdi_specs;
pub mod ceiling;
mod containerd;
mod crio;
mod cudart;
mod engines;
mod hooks;
mod host;
mod hpc;
mod image;
pub mod inside;
mod live;
mod procs;
mod programs;
pub mod report;
mod tegra;
mod wsl;

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;

use serde::Serialize;

use crate::config::{self, Config};
use crate::host::driver::Inventory;
// The image's CUDA places (`cudart`) are globs, as containerd's imports are.
use crate::util::glob::matches as glob;

pub use crate::specs::engine_config::HostRoot;

pub use report::Render;

/// The layers, in the order a diagnosis walks them: a fault in an earlier
/// layer explains the failures of later ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layer {
    /// The kernel module, GPUs, device nodes and driver libraries.
    Host,
    /// How container engines reach the injector: hooks.d, Docker, CDI.
    Wiring,
    /// An image's CUDA and requirements against this host.
    Image,
    /// A throwaway container started through the hook as installed.
    Live,
}

impl Layer {
    /// How the report names the layer.
    pub fn title(self) -> &'static str {
        match self {
            Layer::Host => "host driver",
            Layer::Wiring => "runtime wiring",
            Layer::Image => "image",
            Layer::Live => "live container",
        }
    }
}

/// What a check concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Nothing to fix.
    Ok,
    /// Works, but something will bite: the remedy says what to change.
    Warn,
    /// Containers fail because of this: the remedy fixes it.
    Fail,
}

impl Status {
    /// How the report spells it.
    pub fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One finding: what was checked, what was found and, unless it is ok, the
/// one remedy that fixes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// The layer it belongs to.
    pub layer: Layer,
    /// What was checked, a few words (`kernel module`, `hooks.d`).
    pub name: String,
    /// The verdict.
    pub status: Status,
    /// What was found, one sentence.
    pub found: String,
    /// The fix, for `warn` and `fail`.
    pub remedy: Option<String>,
}

impl Check {
    /// A check that found nothing to fix.
    pub fn ok(layer: Layer, name: impl Into<String>, found: impl Into<String>) -> Check {
        Check {
            layer,
            name: name.into(),
            status: Status::Ok,
            found: found.into(),
            remedy: None,
        }
    }

    /// A check that found something to change.
    pub fn warn(
        layer: Layer,
        name: impl Into<String>,
        found: impl Into<String>,
        remedy: impl Into<String>,
    ) -> Check {
        Check::remedied(
            layer,
            name.into(),
            Status::Warn,
            found.into(),
            remedy.into(),
        )
    }

    /// A check that found what makes containers fail.
    pub fn fail(
        layer: Layer,
        name: impl Into<String>,
        found: impl Into<String>,
        remedy: impl Into<String>,
    ) -> Check {
        Check::remedied(
            layer,
            name.into(),
            Status::Fail,
            found.into(),
            remedy.into(),
        )
    }

    /// A failed check for a configuration `file` that does not parse,
    /// with the parser's `error` (control characters escaped).
    pub fn unparsable(
        layer: Layer,
        name: impl Into<String>,
        file: &Path,
        error: &str,
        remedy: impl Into<String>,
    ) -> Check {
        let found = format!(
            "{} does not parse: {}",
            file.display(),
            crate::util::error_line::escape_controls(error)
        );
        Check::fail(layer, name, found, remedy)
    }

    /// A failed check for an engine's file its model could not read: one
    /// that does not parse as [`Check::unparsable`] says it, any other
    /// error as it says itself.
    pub(crate) fn engine_file(
        layer: Layer,
        name: impl Into<String>,
        error: &crate::specs::engine_config::Error,
        remedy: impl Into<String>,
    ) -> Check {
        match error {
            crate::specs::engine_config::Error::Unparsable { path, message } => {
                Check::unparsable(layer, name, path, message, remedy)
            }
            other => Check::fail(layer, name, other.to_string(), remedy),
        }
    }

    fn remedied(
        layer: Layer,
        name: String,
        status: Status,
        found: String,
        remedy: String,
    ) -> Check {
        Check {
            layer,
            name,
            status,
            found,
            remedy: Some(remedy),
        }
    }
}

/// Why something doctor looks at could not be read or run: its text
/// becomes a check's finding, after the name of what it was.
#[derive(Debug, Error)]
pub enum Error {
    // A host program run with a time bound.
    #[error("cannot run it: {source}")]
    Spawn { program: PathBuf, source: io::Error },
    #[error("no answer within {} s: killed", timeout.as_secs())]
    Hung { program: PathBuf, timeout: Duration },
    #[error("cannot wait for it: {source}")]
    Wait { program: PathBuf, source: io::Error },
    // An image config or a CDI spec.
    #[error("{source}")]
    Read { file: PathBuf, source: io::Error },
    #[error("more than {limit} bytes")]
    TooLarge { file: PathBuf, limit: u64 },
    #[error("{source}")]
    Json {
        file: PathBuf,
        source: serde_json::Error,
    },
    #[error("no config.Env in it")]
    NoEnv { file: PathBuf },
    #[error("config.Env: {source}")]
    Env {
        file: PathBuf,
        source: serde_json::Error,
    },
    #[error("{source}")]
    Yaml {
        file: PathBuf,
        source: serde_yaml::Error,
    },
    // The live check's throwaway container.
    #[error("cannot create {}: {source}", path.display())]
    Create { path: PathBuf, source: io::Error },
    #[error("cannot create mount point {}: {source}", path.display())]
    MountPoint { path: PathBuf, source: io::Error },
    #[error("cannot read the host's {}: {source}", path.display())]
    HostCache { path: PathBuf, source: io::Error },
    #[error("cannot parse the host's {}: {source}", path.display())]
    HostCacheParse {
        path: PathBuf,
        source: crate::host::ldcache::Error,
    },
    #[error("the host's loader cache lists no {soname}")]
    NoLibc { soname: &'static str },
    #[error("cannot name this program: {source}")]
    CurrentExe { source: io::Error },
    #[error("cannot copy the host's {}: {source}", path.display())]
    Copy { path: PathBuf, source: io::Error },
    #[error("{source}")]
    Encode { source: serde_json::Error },
    #[error("cannot write {}: {source}", path.file_name().unwrap_or_default().to_string_lossy())]
    Write { path: PathBuf, source: io::Error },
    #[error("{source}")]
    Runc { runc: PathBuf, source: io::Error },
}

/// What `doctor` was asked to look at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// Run the host's `nvidia-smi -L` (with a time bound).
    pub host_smi: bool,
    /// An image's rootfs to read its CUDA version and compat libraries from.
    pub image_rootfs: Option<PathBuf>,
    /// An OCI image config (or `docker inspect` output) to take `Env` from.
    pub image_config: Option<PathBuf>,
    /// `KEY=VALUE` settings of the container, after the image's.
    pub env: Vec<String>,
    /// The image's CUDA version, stated directly (`12.4`).
    pub cuda: Option<String>,
    /// Start a throwaway container through the hook as installed.
    pub run: bool,
    /// Where the engines' files and processes are.
    pub host_root: Option<PathBuf>,
}

impl Options {
    /// Whether an image was described at all.
    fn has_image(&self) -> bool {
        self.image_rootfs.is_some()
            || self.image_config.is_some()
            || !self.env.is_empty()
            || self.cuda.is_some()
    }
}

/// The configuration as doctor found it: a file that does not parse is a
/// finding of the wiring layer, and the rest runs with the defaults.
pub struct Loaded<'a> {
    /// The config in force (the defaults when the file failed).
    pub config: Config,
    /// Why the file failed, if it did.
    pub error: Option<config::Error>,
    /// The file asked for with `--config`, if any.
    pub path: Option<&'a Path>,
}

impl<'a> Loaded<'a> {
    /// What loading `path` (or the default file) as the hook would gave.
    pub fn new(loaded: config::Result<Config>, path: Option<&'a Path>) -> Loaded<'a> {
        match loaded {
            Ok(config) => Loaded {
                config,
                error: None,
                path,
            },
            Err(e) => Loaded {
                config: Config::default(),
                error: Some(e),
                path,
            },
        }
    }
}

/// What the host layer learnt that later layers use.
pub(crate) struct HostFacts {
    /// The inventory, when the module is loaded and discovery worked.
    pub inventory: Option<Inventory>,
    /// The plan for the described image's container, made on that
    /// inventory; `None` when no image was described or discovery failed.
    pub container: Option<crate::planning::planner::Result<crate::planning::planner::Planned>>,
    /// The CUDA version the driver's own libcuda reported.
    pub cuda: Option<crate::host::driver::CudaVersion>,
    /// Whether a host check failed: later failures may follow from it.
    pub failed: bool,
}

impl HostFacts {
    /// What later layers know of a host that could not be inventoried.
    fn unknown() -> HostFacts {
        HostFacts {
            inventory: None,
            container: None,
            cuda: None,
            failed: true,
        }
    }
}

/// Every check `options` asks for, layer after layer.
pub fn diagnose(
    loaded: &Loaded<'_>,
    options: &Options,
    spec_driver: fn(&crate::specs::cdi::Spec) -> Option<&str>,
) -> Vec<Check> {
    let host_root = HostRoot::new(options.host_root.clone().unwrap_or_else(|| "/".into()));
    let processes = procs::Table::scan(&host_root);
    let mut checks = Vec::new();
    // The image is read first: the host's one planner call plans its container.
    let described = options.has_image().then(|| image::describe(options));
    let container = described.as_ref().map(image::Described::inputs);
    // A WSL2 host's driver is Windows': its own host layer.
    let mut facts = if crate::host::driver::wsl::detect(&loaded.config.driver) {
        wsl::check(&loaded.config, options.host_smi, container, &mut checks)
    } else if crate::host::driver::csv::detect(&loaded.config.driver) {
        // A Jetson/Tegra host's GPU is integrated: its CSV files are the host layer.
        tegra::check(&loaded.config, container, &mut checks)
    } else {
        host::check(
            &loaded.config,
            &processes,
            options.host_smi,
            container,
            &mut checks,
        )
    };
    facts.failed = any_failed(&checks);
    let crio_config = crio::load(&host_root, &mut checks);
    let crio_dirs = crio_config
        .as_ref()
        .and_then(|c| c.hooks_dirs.clone())
        .unwrap_or_default();
    let wired = hooks::check(loaded, &host_root, &crio_dirs, &mut checks);
    let docker = engines::docker(&host_root, &processes, &mut checks);
    let specs = cdi_specs::check(&host_root, &facts, spec_driver, &mut checks);
    let containerd = containerd::check(&host_root, specs.any, &mut checks);
    let crio = crio_config
        .as_ref()
        .map(|config| (config, crio::check(&host_root, config, &mut checks)));
    engines::systemd(
        &processes,
        wired.ours || docker.hook_ours,
        loaded.config.systemd_device_allow,
        &host_root.path("/run"),
        &mut checks,
    );
    let cri_runtime =
        !containerd.ours.is_empty() || crio.as_ref().is_some_and(|(_, ours)| !ours.is_empty());
    engines::reaches(
        &engines::Engines {
            docker: &docker,
            containerd: &containerd,
            crio,
            hooks_d: wired.ours,
            cdi_ours: specs.ours,
            plugin_spec: specs.plugin,
            gpu_spec: specs.gpu_names,
        },
        &mut checks,
    );
    cdi_specs::management_check(&loaded.config, &specs, &mut checks);
    let cli_callers = hpc::check(&host_root, &mut checks);
    engines::wired(
        &engines::Wiring {
            hooks_d: wired.ours,
            docker_hook: docker.hook_ours,
            docker_runtime: docker.runtime_ours,
            cdi: specs.ours,
            cri_runtime,
            cli_callers,
        },
        &mut checks,
    );
    if let Some(described) = described {
        image::check(&loaded.config, options, described, &facts, &mut checks);
    }
    if options.run {
        let hook = wired.hook.as_ref().or(docker.hook.as_ref());
        live::check(hook, &facts, &mut checks);
    }
    checks
}

/// Whether any check failed: `doctor`'s exit status is 1 then.
pub fn any_failed(checks: &[Check]) -> bool {
    checks.iter().any(|c| c.status == Status::Fail)
}

//! Host driver discovery: everything the hook needs to know about the host's
//! NVIDIA driver, gathered into one [`Inventory`].
//!
//! Discovery only reads: the kernel module's procfs files, the device nodes
//! under the dev root, and the driver root's `ld.so.cache` and files. It never
//! writes, never executes anything, and never returns a path outside the
//! driver root or dev root.

pub mod catalog;
pub mod csv;
pub mod cuda;
pub mod drm;
pub mod files;
pub mod libraries;
pub mod mig;
pub mod nodes;
pub mod proc;
pub mod root;
pub mod scan;
pub mod snapshot;
pub mod wsl;

use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;
use thiserror::Error;

use crate::config::DriverConfig;
use crate::host::driver_child;
use crate::host::elf::Arch;
use crate::host::ldcache::{self, LdCache};
use crate::host::nvml;
use crate::planning::request::{Capabilities, Capability};

pub use csv::Csv;
pub use cuda::CudaVersion;
pub use drm::GpuDrm;
pub use files::{GatedFile, HostFile, Ipc};
pub use libraries::{Library, MissingLibrary};
pub use mig::{layout as mig_layout, CapFile, ComputeInstance, GpuInstance, MigDevice};
pub use nodes::{Node, NodeProblem, NodeRole, NodeState};
pub use proc::Gpu;
pub use root::DriverRoot;
pub use snapshot::RootFiles;
pub use wsl::Wsl;

/// Why the host driver could not be inventoried, or a path not resolved
/// inside its root.
#[derive(Debug, Error)]
pub enum Error {
    #[error("NVIDIA kernel module not loaded: {path} does not exist")]
    NotLoaded { path: PathBuf },
    #[error("a WSL2 host (it has /dev/dxg) without an NVIDIA driver store: no {dir}/*/{mark} in driver root {root}")]
    WslNoDriverStore {
        root: PathBuf,
        dir: &'static str,
        mark: &'static str,
    },
    #[error("a Jetson/Tegra host (CSV mode) without CSV mount specs: none of {dir}/{{devices,drivers,l4t}}.csv in driver root {root}")]
    NoCsvFiles { root: PathBuf, dir: &'static str },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path} is in an unknown format: {reason}")]
    UnknownFormat { path: PathBuf, reason: String },
    #[error("bad loader cache {path}: {source}")]
    LdCache {
        path: PathBuf,
        source: ldcache::Error,
    },
    #[error("no {prefix} of driver {version} in the driver root: the CUDA version is unknown")]
    NoLibcuda {
        prefix: &'static str,
        version: String,
    },
    #[error("no {prefix} of driver {version} in the driver root, needed for {purpose}")]
    NoLibrary {
        prefix: &'static str,
        version: String,
        purpose: &'static str,
    },
    #[error(transparent)]
    Nvml(#[from] driver_child::Error),
    #[error("{path} (in driver root {root}) does not exist")]
    NotFound { root: PathBuf, path: PathBuf },
    #[error("{path} (in driver root {root}) escapes the root through {via}")]
    Escapes {
        root: PathBuf,
        path: PathBuf,
        via: PathBuf,
    },
    #[error(
        "{path} (in driver root {root}): more than {} symlinks",
        root::MAX_LINKS
    )]
    TooManyLinks { root: PathBuf, path: PathBuf },
    #[error("{path} (in driver root {root}): {component} is not a directory")]
    NotADirectory {
        root: PathBuf,
        path: PathBuf,
        component: PathBuf,
    },
    #[error("{path} (in driver root {root}): cannot inspect {at}: {source}")]
    Inspect {
        root: PathBuf,
        path: PathBuf,
        at: PathBuf,
        source: io::Error,
    },
    // A driver snapshot not used or not written: logged, never returned by discovery.
    #[error("not running as root (euid {euid}): snapshots are root's only")]
    SnapshotNotRoot { euid: u32 },
    #[error("no snapshot at {path}")]
    SnapshotMissing { path: PathBuf },
    #[error("cannot use {path}: {source}")]
    SnapshotIo { path: PathBuf, source: io::Error },
    #[error("refusing {path}: {reason}")]
    SnapshotUnsafe { path: PathBuf, reason: String },
    #[error("cannot decode {path}: {reason}")]
    SnapshotDecode { path: PathBuf, reason: String },
    #[error("{path} was made for another build, driver root, scope or driver")]
    SnapshotOtherKey { path: PathBuf },
    #[error("refusing {path}: it has no stamp for {input}, which the inventory depends on")]
    SnapshotIncomplete { path: PathBuf, input: PathBuf },
    #[error("{path} is stale: {examined} changed since it was made")]
    SnapshotStale { path: PathBuf, examined: PathBuf },
    #[error(
        "not writing {path}: {examined} changed less than {} s ago",
        snapshot::SETTLED
    )]
    SnapshotUnsettled { path: PathBuf, examined: PathBuf },
}

/// Result of discovery.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything found about the host driver, for the capabilities in scope.
#[derive(Debug, Clone, Serialize)]
pub struct Inventory {
    /// The running kernel module's version, e.g. `535.261.03`.
    pub driver_version: String,
    /// GPUs in PCI bus order.
    pub gpus: Vec<Gpu>,
    /// Every NVIDIA device node, checked.
    pub nodes: Vec<Node>,
    /// Libraries of the running driver, per capability.
    pub libraries: Vec<Library>,
    /// Libraries of the capabilities in scope that the host lacks.
    pub missing_libraries: Vec<MissingLibrary>,
    /// Programs found.
    pub binaries: Vec<HostFile>,
    /// Programs of the capabilities in scope that the host lacks.
    pub missing_binaries: Vec<&'static str>,
    /// GSP firmware of the running driver.
    pub firmware: Vec<HostFile>,
    /// Daemon sockets and pipe directories that exist.
    pub ipcs: Vec<Ipc>,
    /// Graphics ICD files.
    pub configs: Vec<HostFile>,
    /// The capabilities discovery looked for.
    pub scope: Capabilities,
    /// The kernel module's procfs directory, `<proc-root>/driver/nvidia`.
    pub proc_dir: PathBuf,
    /// MIG devices, once NVML was asked ([`Inventory::nvml`]); `None` before.
    pub mig: Option<Vec<MigDevice>>,
    /// The MIG GPU and compute instances the kernel module lists, which
    /// `all` and MIG management bring: known from procfs, without NVML.
    pub mig_instances: Vec<GpuInstance>,
    /// What NVML said, once asked.
    pub nvml: Option<nvml::Report>,
    /// The MIG configuration capability, where the driver has one.
    pub mig_config: Option<CapFile>,
    /// The MIG monitoring capability, where the driver has one.
    pub mig_monitor: Option<CapFile>,
    /// The IMEX channels' major (`nvidia-caps-imex-channels` in
    /// `/proc/devices`): a channel asked for is made with it even where the
    /// host has no node for it.
    pub imex_major: Option<u32>,
    /// Each GPU's DRM nodes, found through sysfs, when graphics is in scope.
    pub drm: Vec<GpuDrm>,
    /// The feature-gated devices' files the driver root has.
    pub gated_files: Vec<GatedFile>,
    /// A WSL2 host's driver (`/dev/dxg`, `/usr/lib/wsl`), which the planner
    /// injects instead of a native driver's nodes and files; `None` elsewhere.
    pub wsl: Option<Wsl>,
    /// A CSV (Jetson, IGX) host's mount specs, found and checked ([`csv`]):
    /// the planner injects them instead of a native driver's files; `None` elsewhere.
    pub csv: Option<Csv>,
}

impl Inventory {
    /// Inventories the host driver described by `config`, looking only for the files of `scope`.
    pub fn discover(config: &DriverConfig, scope: &Capabilities) -> Result<Inventory> {
        Ok(Self::discover_from(config, scope, None)?.0)
    }

    /// [`Inventory::discover`], taking what the driver root holds from the
    /// snapshot in `config`'s `snapshot_dir` when one is there and valid;
    /// when not, also the snapshot of what it found, for the caller to
    /// leave there ([`Unstored::store`]): discovery only reads (see
    /// [`snapshot`]). For the hooks, which run on every container start;
    /// commands an operator runs to look at the host walk it whole and log
    /// all they find, every time.
    pub fn discover_with_snapshot(
        config: &DriverConfig,
        scope: &Capabilities,
    ) -> Result<(Inventory, Option<Unstored>)> {
        Self::discover_from(config, scope, config.snapshot_dir.as_deref())
    }

    fn discover_from(
        config: &DriverConfig,
        scope: &Capabilities,
        snapshot_dir: Option<&Path>,
    ) -> Result<(Inventory, Option<Unstored>)> {
        let _waiting = crate::util::deadline::waiting_for(|| {
            format!(
                "the host driver (proc-root {}, root {})",
                config.proc_root.display(),
                config.root.display()
            )
        });
        if wsl::detect(config) {
            // Nothing of the driver store is snapshotted: it is a handful of files.
            return Ok((Self::discover_wsl(config, scope)?, None));
        }
        if config.csv.force || csv::detect(config) {
            // The CSV files are read every time: they are a handful.
            return Ok((Self::discover_csv(config, scope)?, None));
        }
        let nvidia = config.proc_root.join("driver/nvidia");
        let version_path = nvidia.join("version");
        let version_text = match crate::util::bounded_read::read_text(&version_path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::NotLoaded { path: version_path })
            }
            Err(source) => {
                return Err(Error::Read {
                    path: version_path,
                    source,
                })
            }
        };
        let driver_version = proc::parse_version(&version_path, &version_text)?;
        let gpus = proc::read_gpus(&nvidia.join("gpus"))?;
        let devices_path = config.proc_root.join("devices");
        let majors = proc::parse_char_majors(&devices_path, &proc::read_text(&devices_path)?)?;
        let mut nodes = nodes::inspect(&config.dev_root, &gpus, &majors);
        let imex_major = majors.get(nodes::IMEX_MAJOR_NAME).copied();
        nodes.extend(nodes::imex_channels(&config.dev_root, imex_major));
        nodes.extend(nodes::gated(&config.dev_root));
        let drm = if scope.contains(Capability::Graphics) {
            drm::inspect(&config.sys_root, &config.dev_root, &gpus, &majors)
        } else {
            Vec::new()
        };
        let mig_instances = mig::instances(&nvidia, &gpus)?;

        let root = DriverRoot::new(&config.root);
        let search = &config.library_search_paths;
        let (files, unstored) = match snapshot_dir {
            Some(dir) => root_files_snapshotted(&root, dir, &driver_version, scope, search)?,
            None => (root_files(&root, &driver_version, scope, search)?, None),
        };
        // Daemons come and go: their sockets are looked for every time.
        let ipcs = files::ipcs(&root, scope);
        let gated_files = files::gated_files(&root);
        let inventory = Inventory {
            driver_version,
            gpus,
            nodes,
            libraries: files.libraries,
            missing_libraries: files.missing_libraries,
            binaries: files.binaries,
            missing_binaries: files.missing_binaries,
            firmware: files.firmware,
            ipcs,
            configs: files.configs,
            scope: scope.clone(),
            mig_config: optional_cap(&nvidia, "capabilities/mig/config")?,
            mig_monitor: optional_cap(&nvidia, "capabilities/mig/monitor")?,
            proc_dir: nvidia,
            mig: None,
            mig_instances,
            nvml: None,
            imex_major,
            drm,
            gated_files,
            wsl: None,
            csv: None,
        };
        Ok((inventory, unstored))
    }

    /// A WSL2 host's inventory: `/dev/dxg`, and the driver store's and
    /// `/usr/lib/wsl/lib`'s files ([`wsl`]); no GPU is listed, since Linux
    /// sees none but through `dxg`. Every file is taken whatever `scope`,
    /// as NVIDIA's `wsl` mode takes them.
    fn discover_wsl(config: &DriverConfig, scope: &Capabilities) -> Result<Inventory> {
        let root = DriverRoot::new(&config.root);
        let store = wsl::driver_store(&root)?;
        let host = Arch::host();
        let found = wsl::files(&root, &store, host);
        let (libraries, missing_libraries) = wsl::libraries(&found, host);
        let driver_version = store
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(Inventory {
            driver_version,
            nodes: vec![wsl::node(config)],
            libraries,
            missing_libraries,
            wsl: Some(found),
            ..Self::without_native(config, scope)
        })
    }

    /// A CSV (Jetson) host's inventory: what its CSV files list, checked
    /// ([`csv`]); no GPU is listed (there is no procfs to list one: its
    /// integrated GPU is the one device, `0`). Every entry is taken
    /// whatever `scope`, as NVIDIA's `csv` mode takes them.
    fn discover_csv(config: &DriverConfig, scope: &Capabilities) -> Result<Inventory> {
        let host = Arch::host();
        let (found, nodes) = csv::discover(config, &config.csv, host)?;
        // L4T's release stands in for the driver version: specs made for
        // one are told from another's.
        let driver_version = found
            .release
            .as_ref()
            .and_then(|r| crate::util::bounded_read::read_text(&r.host).ok())
            .and_then(|text| csv::release_version(&text))
            .unwrap_or_default();
        Ok(Inventory {
            driver_version,
            nodes,
            libraries: found.libraries(host),
            csv: Some(found),
            ..Self::without_native(config, scope)
        })
    }

    /// An inventory of none of a native driver's parts, for a WSL2 or CSV
    /// host's to fill in.
    fn without_native(config: &DriverConfig, scope: &Capabilities) -> Inventory {
        Inventory {
            driver_version: String::new(),
            gpus: Vec::new(),
            nodes: Vec::new(),
            libraries: Vec::new(),
            missing_libraries: Vec::new(),
            binaries: Vec::new(),
            missing_binaries: Vec::new(),
            firmware: Vec::new(),
            ipcs: Vec::new(),
            configs: Vec::new(),
            scope: scope.clone(),
            proc_dir: config.proc_root.join("driver/nvidia"),
            mig: None,
            mig_instances: Vec::new(),
            nvml: None,
            mig_config: None,
            mig_monitor: None,
            imex_major: None,
            drm: Vec::new(),
            gated_files: Vec::new(),
            wsl: None,
            csv: None,
        }
    }

    /// The CUDA version the driver supports, asked of its own libcuda in a
    /// child process. Loads driver code: call it only when the answer is needed.
    pub fn cuda_version(&self) -> Result<CudaVersion> {
        let libcuda = self
            .host_library("libcuda.so")
            .ok_or_else(|| Error::NoLibcuda {
                prefix: "libcuda.so",
                version: self.driver_version.clone(),
            })?;
        // libcuda answers once per process: doctor's host layer and the
        // planner's requirement check share the answer.
        static ANSWERED: std::sync::Mutex<Option<(PathBuf, CudaVersion)>> =
            std::sync::Mutex::new(None);
        let mut answered = ANSWERED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((path, version)) = answered.as_ref() {
            if *path == libcuda.path {
                return Ok(*version);
            }
        }
        let version = cuda::ask(&libcuda.path, cuda::TIMEOUT)?;
        *answered = Some((libcuda.path.clone(), version));
        Ok(version)
    }

    /// What NVML says of this host's GPUs and MIG devices: asked, in a
    /// child process with a time bound, the first time only. The one way to
    /// the facts only NVML knows (MIG devices, brand, compute capability),
    /// for whoever needs them when they need them: requests that name MIG
    /// devices, requirements on brand or architecture whose answer hangs on
    /// them. Whole-GPU requests never load NVML.
    pub fn nvml(&mut self) -> Result<&nvml::Report> {
        let report = match self.nvml.take() {
            Some(report) => report,
            None => {
                let lib = self
                    .host_library("libnvidia-ml.so")
                    .ok_or_else(|| Error::NoLibrary {
                        prefix: "libnvidia-ml.so",
                        version: self.driver_version.clone(),
                        purpose: "NVML",
                    })?;
                let report = nvml::query(&lib.path, nvml::TIMEOUT)?;
                self.mig = Some(mig::devices(&self.proc_dir, &self.gpus, &report)?);
                report
            }
        };
        Ok(self.nvml.insert(report))
    }

    /// The driver library `prefix` of this host's architecture: the one
    /// this process can load (in a child).
    fn host_library(&self, prefix: &str) -> Option<&Library> {
        let host = Arch::host();
        self.libraries
            .iter()
            .find(|l| l.prefix == prefix && l.arch == host.name)
    }

    /// The node with `role`; for GPUs and capabilities use [`Inventory::node_at`].
    pub fn node(&self, role: NodeRole) -> Option<&Node> {
        self.nodes.iter().find(|n| n.role == role)
    }

    /// The node at container path `path`, e.g. `/dev/nvidia3`.
    pub fn node_at(&self, path: &Path) -> Option<&Node> {
        self.nodes.iter().find(|n| n.path == path)
    }

    /// The DRM nodes of the GPU at PCI bus `bus`, if sysfs showed any.
    pub fn drm_of(&self, bus: &str) -> Option<&GpuDrm> {
        self.drm.iter().find(|d| d.bus.eq_ignore_ascii_case(bus))
    }

    /// Libraries of `capability`; of `None`, the driver's libraries of no
    /// known family, which every capability brings.
    pub fn libraries_of(&self, capability: Option<Capability>) -> impl Iterator<Item = &Library> {
        self.libraries
            .iter()
            .filter(move |l| l.capability == capability)
    }
}

/// What the driver root holds for `scope`: libraries (from its cache, and
/// beside them, or from `search` and the standard directories where the
/// cache has none of them), programs, firmware and ICD files.
fn root_files(
    root: &DriverRoot,
    version: &str,
    scope: &Capabilities,
    search: &[PathBuf],
) -> Result<RootFiles> {
    let host = Arch::host();
    let (mut libraries, cache) = match read_cache(root)? {
        Some((cache, path)) => (
            libraries::select(root, &cache.entries, version, host, scope),
            Some(path),
        ),
        None => (Vec::new(), None),
    };
    scan::extend(root, &mut libraries, version, host, scope, search);
    let missing_libraries = libraries::missing(&libraries, host, scope);
    let (binaries, missing_binaries) = files::binaries(root, host, scope);
    Ok(RootFiles {
        libraries,
        missing_libraries,
        binaries,
        missing_binaries,
        firmware: files::firmware(root, version),
        configs: files::configs(root, version, host, scope),
        cache,
    })
}

/// A snapshot of what discovery found, not written yet: discovery only
/// reads, so the one who inventories for the hooks leaves it for the next
/// start.
#[derive(Debug)]
pub struct Unstored {
    dir: PathBuf,
    key: snapshot::Key,
    files: RootFiles,
    examined: Vec<(PathBuf, std::fs::Metadata)>,
}

impl Unstored {
    /// Writes it, whole or not at all (the deadline waits for it, so no
    /// temporary file is left behind); a snapshot that cannot be written is
    /// only logged.
    pub fn store(&self) {
        let _held = crate::util::deadline::hold();
        if let Err(e) = snapshot::store(&self.dir, &self.key, &self.files, &self.examined) {
            log::debug!("inventory snapshot: {e}");
        }
    }
}

/// [`root_files`] from a valid snapshot in `dir`, or found, with the
/// snapshot to leave there for the next start. `root` must not have been
/// used yet: what it examines is what the snapshot is checked against.
fn root_files_snapshotted(
    root: &DriverRoot,
    dir: &Path,
    version: &str,
    scope: &Capabilities,
    search: &[PathBuf],
) -> Result<(RootFiles, Option<Unstored>)> {
    if let Err(e) = snapshot::allowed() {
        log::debug!("inventory snapshot: {e}");
        return Ok((root_files(root, version, scope, search)?, None));
    }
    let key =
        snapshot::Key::new(root.path(), scope.to_string(), Arch::host(), version).searching(search);
    match snapshot::load(dir, &key) {
        Ok(files) => {
            log::debug!(
                "inventory snapshot: the driver root's files from {}",
                dir.display()
            );
            return Ok((files, None));
        }
        // A bad one is said once: it is removed, and the next start
        // finds none (or the one this start leaves).
        Err(e) if e.is_refusal() => {
            log::warn!("inventory snapshot: {e}; discarded, discovering the driver root live");
            // Failing only where the directory itself was refused: said already.
            if let Err(e) = snapshot::discard(dir, &key) {
                log::debug!("inventory snapshot: {e}");
            }
        }
        Err(e) => log::debug!("inventory snapshot: {e}"),
    }
    let files = root_files(root, version, scope, search)?;
    let unstored = Unstored {
        dir: dir.to_path_buf(),
        key,
        files: files.clone(),
        examined: root.examined(),
    };
    Ok((files, Some(unstored)))
}

/// Largest driver-root loader cache read: a host's of thousands of entries
/// is a few hundred KiB.
const MAX_CACHE: usize = 64 * 1024 * 1024;

/// Reads and parses `<root>/etc/ld.so.cache`, resolved inside the root;
/// with the host path it resolved to. `None` where the root has none, as
/// on hosts whose loader is configured otherwise (NixOS); the libraries
/// are then searched for.
fn read_cache(root: &DriverRoot) -> Result<Option<(LdCache, PathBuf)>> {
    let inner = Path::new("/etc/ld.so.cache");
    let path = match root.resolve(inner) {
        Ok(resolved) => resolved.host,
        Err(Error::NotFound { .. }) => {
            log::debug!("{} has no loader cache", root.path().display());
            return Ok(None);
        }
        Err(e) => {
            return Err(Error::Read {
                path: root.host_path(inner),
                source: io::Error::other(e.to_string()),
            })
        }
    };
    let data = crate::util::hostfile::read(&path, MAX_CACHE).map_err(|source| Error::Read {
        path: path.clone(),
        source,
    })?;
    // Only NVIDIA's libraries matter here: the rest of a host cache (often
    // thousands of entries) is checked but not copied.
    let ours = |soname: &[u8]| {
        std::str::from_utf8(soname)
            .ok()
            .and_then(catalog::library_for)
            .is_some()
    };
    match LdCache::parse_where(&data, ours) {
        Ok(cache) => Ok(Some((cache, path))),
        Err(source) => Err(Error::LdCache { path, source }),
    }
}

/// A MIG capability file if the driver has it (`None` on drivers without MIG).
fn optional_cap(proc_dir: &Path, rel: &str) -> Result<Option<CapFile>> {
    match mig::cap_file(proc_dir, PathBuf::from(rel)) {
        Ok(cap) => Ok(Some(cap)),
        Err(Error::Read { source, .. }) if source.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

//! Simulated GPU hosts built by `integration/simhost`, which every suite
//! runs on. Fixtures live under the target directory, one tree per test
//! binary; nothing here touches the machine's own driver files.
//!
//! These tests need root (mknod, chroot for `ldconfig -r`). Without the
//! `_test_as_root` feature they show as ignored; with it they fail loudly
//! when not run as root, never pass silently.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use serde::Deserialize;

use super::project::repo;

/// A simulated GPU host on disk, with its self-description (`host.json`).
#[derive(Debug, Clone)]
pub struct SimHost {
    /// The fixture's top directory.
    pub dir: PathBuf,
    /// Its `config.toml`, pointing the hook at it.
    pub config: PathBuf,
    /// What the builder says it made.
    pub facts: HostFacts,
}

/// Which user space a simulated host carries (`simhost --flavour`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavour {
    /// Tiny C libraries and binaries with NVIDIA's SONAMEs, and a mock NVML
    /// serving the host's GPUs: seconds to build.
    Synthetic,
    /// NVIDIA's real 535 user space from Debian's non-free archive.
    Real,
}

/// The layout of the driver root's `ld.so.cache` (`simhost --cache-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheFormat {
    /// glibc's current format alone.
    New,
    /// The old libc5-era format alone.
    Old,
    /// The old format with the new one appended, as older glibc wrote it.
    Compat,
}

/// The branch of the running driver (`simhost --driver`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Driver {
    /// 535.261.03 (CUDA 12.2), the default.
    R535,
    /// Tesla 470.256.02 (CUDA 11.4): synthetic hosts only.
    R470,
}

/// The host's architecture (`simhost --arch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostArch {
    /// x86-64, with i386 for compat32: the default.
    Amd64,
    /// arm64 (Grace), from Debian's arm64 packages: real hosts only; its
    /// binaries run under qemu-user (`qemu-aarch64-static -L` the driver root).
    Arm64,
}

impl HostArch {
    /// Its name on simhost's command line (Debian's).
    pub fn as_str(self) -> &'static str {
        match self {
            HostArch::Amd64 => "amd64",
            HostArch::Arm64 => "arm64",
        }
    }
}

impl Flavour {
    /// Its name on simhost's command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Flavour::Synthetic => "synthetic",
            Flavour::Real => "real",
        }
    }
}

impl CacheFormat {
    /// Every format, for the suites that read each.
    pub const ALL: [CacheFormat; 3] = [CacheFormat::New, CacheFormat::Old, CacheFormat::Compat];

    /// Its name on simhost's command line and in `host.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheFormat::New => "new",
            CacheFormat::Old => "old",
            CacheFormat::Compat => "compat",
        }
    }
}

impl Driver {
    /// Its name on simhost's command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Driver::R535 => "535",
            Driver::R470 => "470",
        }
    }
}

/// What simulated host to build: `integration/simhost`'s options, typed.
/// Shared fixtures are keyed by it, so equal options share one host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fixture {
    /// Its user space.
    pub flavour: Flavour,
    /// How many GPUs it has.
    pub gpus: u32,
    /// Its loader cache's layout.
    pub cache_format: CacheFormat,
    /// MIG enabled on GPU indices 0 and 1 (synthetic only).
    pub mig: bool,
    /// The running driver's branch.
    pub driver: Driver,
    /// The stale driver's libraries listed last in the loader's search
    /// order (the healthy host `doctor` expects), not first.
    pub stale_last: bool,
    /// The host's architecture.
    pub arch: HostArch,
    /// The devices beyond the GPU: IMEX channels, NVSwitch, GDS, MOFED,
    /// GDRCopy and each GPU's DRM nodes in sysfs (`simhost --extras`).
    pub extras: bool,
    /// A WSL2 host instead of a native driver (`simhost --wsl`).
    pub wsl: bool,
}

impl Fixture {
    /// A synthetic host with `gpus` GPUs and otherwise the defaults.
    pub const fn synthetic(gpus: u32) -> Fixture {
        Fixture {
            flavour: Flavour::Synthetic,
            gpus,
            cache_format: CacheFormat::New,
            mig: false,
            driver: Driver::R535,
            stale_last: false,
            arch: HostArch::Amd64,
            extras: false,
            wsl: false,
        }
    }

    /// A host with NVIDIA's real 535 libraries and `gpus` GPUs.
    pub const fn real(gpus: u32) -> Fixture {
        Fixture {
            flavour: Flavour::Real,
            ..Fixture::synthetic(gpus)
        }
    }

    /// The same host with its loader cache in `format`.
    pub const fn cache_format(self, format: CacheFormat) -> Fixture {
        Fixture {
            cache_format: format,
            ..self
        }
    }

    /// The same host with MIG enabled on GPUs 0 and 1.
    pub const fn mig(self) -> Fixture {
        Fixture { mig: true, ..self }
    }

    /// The same host running driver branch `driver`.
    pub const fn driver(self, driver: Driver) -> Fixture {
        Fixture { driver, ..self }
    }

    /// The same host with the stale driver last in the loader's search order.
    pub const fn stale_last(self) -> Fixture {
        Fixture {
            stale_last: true,
            ..self
        }
    }

    /// The same host on arm64 (real hosts only).
    pub const fn arm64(self) -> Fixture {
        Fixture {
            arch: HostArch::Arm64,
            ..self
        }
    }

    /// The same host with the devices beyond the GPU.
    pub const fn extras(self) -> Fixture {
        Fixture {
            extras: true,
            ..self
        }
    }

    /// A WSL2 host made of NVIDIA's real 535 libraries, placed as WSL has
    /// them (`simhost --flavour real --wsl`).
    pub const fn wsl() -> Fixture {
        Fixture {
            wsl: true,
            ..Fixture::real(1)
        }
    }

    /// The name of the shared fixture with these options.
    fn shared_name(&self) -> String {
        let mut name = format!(
            "shared-{}-{}-{}",
            self.flavour.as_str(),
            self.gpus,
            self.cache_format.as_str()
        );
        if self.mig {
            name.push_str("-mig");
        }
        if self.driver != Driver::R535 {
            name.push_str("-driver");
            name.push_str(self.driver.as_str());
        }
        if self.stale_last {
            name.push_str("-stale-last");
        }
        if self.arch != HostArch::Amd64 {
            name.push('-');
            name.push_str(self.arch.as_str());
        }
        if self.extras {
            name.push_str("-extras");
        }
        if self.wsl {
            name.push_str("-wsl");
        }
        name
    }

    /// `integration/simhost`'s arguments for these options, before `--out`.
    fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "--flavour".into(),
            self.flavour.as_str().into(),
            "--gpus".into(),
            self.gpus.to_string(),
            "--cache-format".into(),
            self.cache_format.as_str().into(),
        ];
        if self.mig {
            args.push("--mig".into());
        }
        if self.driver != Driver::R535 {
            args.push("--driver".into());
            args.push(self.driver.as_str().into());
        }
        if self.stale_last {
            args.push("--stale-last".into());
        }
        if self.arch != HostArch::Amd64 {
            args.push("--arch".into());
            args.push(self.arch.as_str().into());
        }
        if self.extras {
            args.push("--extras".into());
        }
        if self.wsl {
            args.push("--wsl".into());
        }
        args
    }
}

/// What `integration/simhost` says it made (`host.json`), every field of
/// it: a field the builder adds or drops fails the fixture's reading here.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostFacts {
    /// Its user space.
    pub flavour: Flavour,
    /// The running driver's version (`535.261.03`).
    pub driver_version: String,
    /// What the running libcuda's `cuDriverGetVersion` answers (12020).
    pub cuda_version: u32,
    /// The version of the stale driver's leftover libraries.
    pub stale_driver_version: String,
    /// Its loader cache's layout.
    pub cache_format: CacheFormat,
    /// The major number of `nvidia-uvm` in its `proc/devices`.
    pub uvm_major: u32,
    /// The major number of `nvidia-caps`.
    pub caps_major: u32,
    /// The driver root (libraries, binaries, firmware).
    pub driver_root: String,
    /// The root whose `dev/` holds the device nodes.
    pub dev_root: String,
    /// Its procfs stand-in.
    pub proc_root: String,
    /// Its `config.toml`.
    pub config: String,
    /// Its GPUs, by index.
    pub gpus: Vec<GpuFacts>,
    /// Its MIG devices, in NVML's order (none unless built with MIG).
    pub mig: Vec<MigFacts>,
    /// `proc/driver/nvidia-caps/mig-minors`.
    pub mig_minors: String,
    /// Its NVML.
    pub nvml: NvmlFacts,
    /// The running driver's 64-bit libraries: SONAME to real file.
    pub libraries: BTreeMap<String, String>,
    /// Its 32-bit libraries: SONAME to real file.
    pub libraries32: BTreeMap<String, String>,
    /// The stale driver's libraries that the cache still lists.
    pub stale_libraries: Vec<String>,
    /// The driver's binaries (`nvidia-smi`, ...): name to real file.
    pub binaries: BTreeMap<String, String>,
    /// Debian's `/etc/alternatives` links: link to target, both
    /// driver-root-relative.
    pub alternatives: BTreeMap<String, String>,
    /// The GSP firmware files.
    pub firmware: Vec<String>,
    /// The persistence daemon's socket.
    pub sockets: Vec<String>,
    /// The MPS pipe directory.
    pub mps_pipe_dir: String,
    /// The driver root's `etc/ld.so.cache`.
    pub ld_so_cache: String,
    /// Its sysfs stand-in (the config's `sys-root`).
    pub sys_root: String,
    /// The devices beyond the GPU, when built with them.
    pub extras: Option<ExtrasFacts>,
    /// A WSL2 host's layout, when built as one (`simhost --wsl`).
    pub wsl: Option<WslFacts>,
}

/// A WSL2 host's layout (`simhost --wsl`): the driver runs on Windows;
/// Linux sees `/dev/dxg` and the files under `/usr/lib/wsl`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WslFacts {
    /// The driver store, as seen inside the driver root.
    pub store: String,
    /// `/usr/lib/wsl/lib`.
    pub lib_dir: String,
    /// `/dev/dxg`'s major (misc, 10).
    pub dxg_major: u32,
    /// `/dev/dxg`'s minor, as its `proc/misc` lists it.
    pub dxg_minor: u32,
    /// The driver store's data files (`nvcubins.bin`), host paths.
    pub data: Vec<String>,
    /// NVIDIA's wsl-mode files the host lacks on purpose.
    pub missing: Vec<String>,
}

/// The devices beyond the GPU of a host built with `--extras`; every
/// path is the node's path in a container (below the dev root on the host).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtrasFacts {
    /// The `nvidia-caps-imex-channels` major in its `proc/devices`.
    pub imex_major: u32,
    /// The IMEX channels it has nodes for.
    pub imex_channels: Vec<u32>,
    /// `NVIDIA_NVSWITCH=enabled`'s nodes.
    pub nvswitch: Vec<String>,
    /// `NVIDIA_GDS=enabled`'s nodes.
    pub gds: Vec<String>,
    /// `NVIDIA_MOFED=enabled`'s nodes.
    pub mofed: Vec<String>,
    /// `NVIDIA_GDRCOPY=enabled`'s nodes.
    pub gdrcopy: Vec<String>,
    /// Each GPU's DRM nodes, by index.
    pub drm: Vec<DrmFacts>,
    /// The X server driver `display` brings (the real file, below the driver root).
    pub xorg_driver: String,
    /// The GLX server module `display` brings, named for the driver version.
    pub glx_server: String,
    /// The EGL external platform files `graphics` brings.
    pub egl_platforms: Vec<String>,
    /// OpenCL's ICD file, which `compute` brings.
    pub opencl_icd: String,
    /// `NVIDIA_GDS=enabled`'s udev database directory.
    pub udev: String,
    /// `NVIDIA_GDS=enabled`'s `cufile.json`.
    pub cufile: String,
    /// `NVIDIA_NVSWITCH=enabled`'s fabric manager socket.
    pub fabricmanager_socket: String,
}

impl ExtrasFacts {
    /// The DRM nodes of the GPU at PCI bus id `bus`.
    pub fn drm_of(&self, bus: &str) -> &DrmFacts {
        self.drm
            .iter()
            .find(|d| d.bus == bus)
            .unwrap_or_else(|| panic!("no DRM nodes for the GPU at {bus}"))
    }
}

/// One GPU's DRM nodes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrmFacts {
    /// The GPU's PCI bus id.
    pub bus: String,
    /// `/dev/dri/cardN`.
    pub card: String,
    /// `/dev/dri/renderDN`.
    pub render: String,
}

/// One GPU of a simulated host.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuFacts {
    /// NVML's index (PCI order).
    pub index: u32,
    /// Its `/dev/nvidiaN` minor, which differs from the index.
    pub minor: u32,
    /// Its PCI bus id.
    pub bus: String,
    /// `GPU-<uuid>`.
    pub uuid: String,
    /// Its product name.
    pub model: String,
    /// NVML's brand name.
    pub brand: String,
    /// Its architecture's name.
    pub arch: String,
    /// Its compute capability, `major.minor`.
    pub cc: String,
    /// Whether it can run MIG.
    pub mig_capable: bool,
    /// Whether MIG is on.
    pub mig_enabled: bool,
}

/// One MIG device of a simulated host.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigFacts {
    /// The index of its parent GPU.
    pub gpu: u32,
    /// Its index among its parent's MIG devices.
    pub mig_index: u32,
    /// `MIG-<uuid>`.
    pub uuid: String,
    /// Its GPU instance.
    pub gi: u32,
    /// Its compute instance.
    pub ci: u32,
    /// Its profile (`3g.40gb`).
    pub profile: String,
    /// Its product name.
    pub name: String,
    /// Its parent's `/dev/nvidiaN` minor.
    pub gpu_minor: u32,
    /// The minor of its GPU instance's access node.
    pub gi_access_minor: u32,
    /// The minor of its compute instance's access node.
    pub ci_access_minor: u32,
    /// Its GPU instance's capability file in procfs.
    pub gi_access_path: String,
    /// Its compute instance's capability file in procfs.
    pub ci_access_path: String,
    /// Its GPU instance's `nvidia-cap` node.
    pub gi_access_node: String,
    /// Its compute instance's `nvidia-cap` node.
    pub ci_access_node: String,
    /// Its parent's UUID.
    pub gpu_uuid: String,
}

/// A simulated host's NVML.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvmlFacts {
    /// Its `libnvidia-ml.so.1`.
    pub library: String,
    /// Whether it is the mock (synthetic hosts).
    pub mock: bool,
    /// The mock's `nvml-mock.conf`, which tests edit to break NVML.
    pub conf: Option<String>,
}

/// Panics with a clear message unless the tests run as root.
pub fn require_root() {
    if !nix::unistd::Uid::effective().is_root() {
        panic!("this test needs root (mknod, ldconfig -r); run it as root via `make test`");
    }
}

/// Where this test binary keeps its fixtures, apart from other test binaries.
fn fixture_root() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let name = exe
        .file_stem()
        .expect("test binary name")
        .to_string_lossy()
        .into_owned();
    crate::project::target_tmpdir().join("simhosts").join(name)
}

impl SimHost {
    /// Builds a `fixture` named `name` afresh, for tests that modify it.
    pub fn fresh(name: &str, fixture: Fixture) -> SimHost {
        SimHost::fresh_at(&fixture_root().join(name), fixture)
    }

    /// Builds a `fixture` afresh in `dir`, for a test whose fixture must sit
    /// somewhere in particular (outside a sandbox's private /tmp, say).
    pub fn fresh_at(dir: &Path, fixture: Fixture) -> SimHost {
        require_root();
        let dir = dir.to_path_buf();
        let status = Command::new(repo().join("integration/simhost"))
            .args(fixture.args())
            .arg("--out")
            .arg(&dir)
            .status()
            .expect("run integration/simhost");
        assert!(
            status.success(),
            "integration/simhost failed for {}: {status}",
            dir.display()
        );
        let facts: HostFacts =
            serde_json::from_slice(&std::fs::read(dir.join("host.json")).expect("host.json"))
                .unwrap_or_else(|e| panic!("{}/host.json: {e}", dir.display()));
        SimHost {
            config: dir.join("config.toml"),
            dir,
            facts,
        }
    }

    /// The `fixture` shared by every test of this binary that only reads
    /// it, built the first time one asks for it.
    pub fn shared(fixture: Fixture) -> SimHost {
        static BUILT: OnceLock<Mutex<HashMap<Fixture, SimHost>>> = OnceLock::new();
        let mut built = BUILT
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        built
            .entry(fixture)
            .or_insert_with(|| SimHost::fresh(&fixture.shared_name(), fixture))
            .clone()
    }

    /// Makes the host's mock NVML fail to initialise from now on (its
    /// config gains `init error=9`); returns that config's path.
    pub fn fail_nvml_init(&self) -> PathBuf {
        let conf = PathBuf::from(
            self.facts
                .nvml
                .conf
                .as_deref()
                .expect("the mock NVML's config (a synthetic host)"),
        );
        let mut text = std::fs::read_to_string(&conf).unwrap();
        text.push_str("init error=9\n");
        std::fs::write(&conf, text).unwrap();
        conf
    }

    /// A path inside the fixture.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }
}

//! The host driver layer: the kernel module, the GPUs it shows, every device
//! node, the driver's libraries and the order the host's loader finds them
//! in, the CUDA version the driver's own libcuda reports, the persistence
//! daemon and, when asked, the host's `nvidia-smi -L`.
//!
//! Everything comes from the hook's own discovery (`Inventory::discover`,
//! `cuda_version()` in its bounded child); this module only judges what
//! discovery found and names the fix. It never loads NVML: `nvmlInit` can
//! take seconds on a host without persistence mode, and doctor must answer
//! in milliseconds.

use std::io::{self, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::procs::Table;
use super::{Check, Error, HostFacts, Layer};
use crate::config::Config;
use crate::host::driver::{proc, DriverRoot, Inventory, NodeProblem, NodeRole, NodeState};
use crate::host::elf::Arch;
use crate::host::ldcache::LdCache;
use crate::planning::planner::{self, Inputs};
use crate::planning::request::Capabilities;

pub(super) const L: Layer = Layer::Host;

/// How long the host's `nvidia-smi -L` may take before it is killed.
const SMI_TIMEOUT: Duration = Duration::from_secs(10);

/// The libraries whose stale copies break host tools: NVIDIA's CLI and
/// `nvidia-smi` load NVML, CUDA programs libcuda, through the host's cache.
const LOADER_CHECKED: &[&str] = &["libnvidia-ml.so.1", "libcuda.so.1"];

/// Checks the host driver and returns what later layers need: its
/// inventory, and `container` (the described image's) planned on it.
pub(super) fn check(
    config: &Config,
    processes: &Table,
    host_smi: bool,
    container: Option<Inputs<'_>>,
    out: &mut Vec<Check>,
) -> HostFacts {
    let none = HostFacts::unknown();
    let nvidia = config.driver.proc_root.join("driver/nvidia");
    if !module(&nvidia, out) {
        return none;
    }
    let fix = "fix what the message names: `oci-nvidia-hook info` fails the same way, \
               and so does every GPU container";
    let Some((inventory, planned)) = examine(config, container, "inventory", fix, out) else {
        return none;
    };
    gpus(&nvidia, &inventory, out);
    nodes(&inventory, out);
    drm_modules(&config.driver.sys_root, &inventory, out);
    let root = DriverRoot::new(&config.driver.root);
    let cache = cache_hits(&root);
    libraries(&inventory, &root, &cache, out);
    loader_order(&inventory, &cache, out);
    let cuda = cuda(&inventory, out);
    persistence(processes, out);
    if host_smi {
        smi(&inventory, out);
    }
    HostFacts {
        inventory: Some(inventory),
        container: planned,
        cuda,
        failed: false,
    }
}

/// The host inventoried and `container` planned on it: doctor's one
/// planner call; when discovery fails, a failed check `name` with `fix`.
pub(super) fn examine(
    config: &Config,
    container: Option<Inputs<'_>>,
    name: &str,
    fix: &str,
    out: &mut Vec<Check>,
) -> Option<(Inventory, Option<planner::Result<planner::Planned>>)> {
    match planner::examine(config, &Capabilities::all(), container) {
        Ok(examined) => Some((examined.inventory, examined.container)),
        Err(e) => {
            out.push(Check::fail(
                L,
                name,
                crate::util::error_line::error(&e),
                fix,
            ));
            None
        }
    }
}

/// The kernel module's version file; false when the module is not loaded.
fn module(nvidia: &Path, out: &mut Vec<Check>) -> bool {
    let path = nvidia.join("version");
    let text = match crate::util::bounded_read::read_text(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            out.push(Check::fail(
                L,
                "kernel module",
                format!("not loaded: {} does not exist", path.display()),
                "load it with `modprobe nvidia` (`dmesg | grep NVRM` says why it fails; \
                 the module must be built for the running kernel, `uname -r`)",
            ));
            return false;
        }
        Err(e) => {
            out.push(Check::fail(
                L,
                "kernel module",
                format!("cannot read {}: {e}", path.display()),
                "run doctor as root, with the host's /proc",
            ));
            return false;
        }
    };
    match proc::parse_version(&path, &text) {
        Ok(version) => {
            let flavour = if text.contains("Open Kernel Module") {
                "open"
            } else {
                "proprietary"
            };
            out.push(Check::ok(
                L,
                "kernel module",
                format!("NVIDIA {version} ({flavour}) loaded"),
            ));
            true
        }
        Err(e) => {
            out.push(Check::fail(
                L,
                "kernel module",
                e.to_string(),
                "reinstall the NVIDIA driver: its module's version file is not NVIDIA's format",
            ));
            false
        }
    }
}

/// The GPUs the driver shows, and those it excludes.
fn gpus(nvidia: &Path, inventory: &Inventory, out: &mut Vec<Check>) {
    let excluded = excluded_gpus(&nvidia.join("gpus"));
    if inventory.gpus.is_empty() {
        out.push(Check::fail(
            L,
            "GPUs",
            format!(
                "driver {} shows no GPU in {}",
                inventory.driver_version,
                nvidia.join("gpus").display()
            ),
            "check that the GPU is on the bus (`lspci -d 10de:`) and bound to the driver \
             (`dmesg | grep NVRM`), and that NVreg_ExcludedGpus does not list it",
        ));
    } else {
        let mut models: Vec<(&str, usize)> = Vec::new();
        for gpu in &inventory.gpus {
            match models.iter_mut().find(|(m, _)| *m == gpu.model) {
                Some((_, n)) => *n += 1,
                None => models.push((&gpu.model, 1)),
            }
        }
        let models: Vec<String> = models.iter().map(|(m, n)| format!("{n} × {m}")).collect();
        out.push(Check::ok(L, "GPUs", models.join(", ")));
    }
    if !excluded.is_empty() {
        out.push(Check::warn(
            L,
            "excluded GPUs",
            format!(
                "the driver excludes {} (GPU Excluded: Yes): no container gets them",
                excluded.join(", ")
            ),
            "remove them from NVreg_ExcludedGpus (/etc/modprobe.d) and reload the module, \
             if they should be used",
        ));
    }
}

/// Bus ids of the GPUs whose `information` says `GPU Excluded: Yes`.
fn excluded_gpus(gpus_dir: &Path) -> Vec<String> {
    let mut excluded: Vec<String> = std::fs::read_dir(gpus_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let path = entry.path().join("information");
            let text = crate::util::bounded_read::read_text(&path).ok()?;
            let info = proc::parse_information(&path, &text).ok()?;
            info.excluded.then_some(info.bus)
        })
        .collect();
    excluded.sort();
    excluded
}

/// Every device node: one check for all that are right, one per node that is not.
pub(super) fn nodes(inventory: &Inventory, out: &mut Vec<Check>) {
    let mut good = 0;
    let drm = inventory.drm.iter().flat_map(|d| &d.nodes);
    let all: Vec<_> = inventory.nodes.iter().chain(drm).collect();
    for node in all.iter().copied() {
        let name = node.path.display().to_string();
        let create = create_command(node.role, node.minor);
        match &node.state {
            NodeState::Ok { .. } => good += 1,
            // Only display containers get nvidia-modeset, and the module
            // that makes it is not loaded on headless hosts.
            NodeState::Missing if node.role == NodeRole::Modeset => good += 1,
            NodeState::Missing => out.push(Check::fail(
                L,
                name,
                format!("{} is missing", node.host_path.display()),
                format!("create it: `{create}`"),
            )),
            NodeState::Wrong(NodeProblem::NoImexMajor) => out.push(Check::fail(
                L,
                name,
                "the nvidia module offers no IMEX channels (no nvidia-caps-imex-channels \
                     in /proc/devices), but the host has channel nodes: containers asking \
                     for one (NVIDIA_IMEX_CHANNELS) fail",
                "load a driver of 550 or later, with IMEX channels (NVreg_ImexChannelCount)",
            )),
            NodeState::Wrong(NodeProblem::NoMajor) => out.push(Check::fail(
                L,
                name,
                "the nvidia-uvm module is not loaded (no nvidia-uvm in /proc/devices): \
                 CUDA cannot start in any container",
                "`modprobe nvidia-uvm`, then `nvidia-modprobe -u -c=0` for its nodes",
            )),
            NodeState::Wrong(problem) => out.push(Check::fail(
                L,
                name,
                format!("{} {problem}", node.host_path.display()),
                format!(
                    "remove it (it is not the driver's node), then `{create}`; \
                     a wrong node would hand containers another device"
                ),
            )),
        }
    }
    if good == all.len() {
        out.push(Check::ok(
            L,
            "device nodes",
            format!("{good} nodes, each a character device with the driver's numbers"),
        ));
    }
}

/// The command that makes a node of `role` as the driver makes it.
fn create_command(role: NodeRole, minor: u32) -> String {
    match role {
        NodeRole::Control => "nvidia-modprobe -c=255".into(),
        NodeRole::Modeset => "nvidia-modprobe -m".into(),
        NodeRole::Uvm | NodeRole::UvmTools => "nvidia-modprobe -u -c=0".into(),
        NodeRole::Gpu => format!("nvidia-modprobe -c={minor}"),
        NodeRole::Capability => {
            "nvidia-modprobe -f /proc/driver/nvidia/capabilities/<its capability file>".into()
        }
        NodeRole::ImexChannel => format!(
            "mknod -m 666 /dev/nvidia-caps-imex-channels/channel{minor} c \
             <the nvidia-caps-imex-channels major in /proc/devices> {minor}"
        ),
        NodeRole::DrmCard | NodeRole::DrmRender => {
            "modprobe nvidia-drm, then udevadm trigger --subsystem-match=drm".into()
        }
        NodeRole::Gated(class) => class.row().remedy.into(),
        NodeRole::Dxg => "`wsl --update` on Windows, then `wsl --shutdown`: WSL2's own \
                          kernel (its dxgkrnl) makes /dev/dxg"
            .into(),
        NodeRole::Listed => "the L4T (JetPack) kernel makes it: reinstall or update \
                             JetPack, or fix the CSV file that lists it"
            .into(),
    }
}

/// A GPU sysfs shows no DRM node for: graphics containers get no
/// `/dev/dri` for it, which headless rendering (EGL, Vulkan) needs.
/// A GPU sysfs does not show at all says nothing: the sys-root is not
/// this host's.
fn drm_modules(sys_root: &Path, inventory: &Inventory, out: &mut Vec<Check>) {
    let without: Vec<&str> = inventory
        .gpus
        .iter()
        .filter(|g| inventory.drm_of(&g.bus).is_none())
        .filter(|g| {
            sys_root
                .join("bus/pci/devices")
                .join(g.bus.to_ascii_lowercase())
                .is_dir()
        })
        .map(|g| g.bus.as_str())
        .collect();
    if without.is_empty() {
        return;
    }
    out.push(Check::warn(
        L,
        "DRM nodes",
        format!(
            "sysfs shows no DRM node for GPU {}: nvidia-drm is not loaded; graphics and \
             display containers get no /dev/dri for it",
            without.join(", ")
        ),
        "`modprobe nvidia-drm` where containers render with EGL or Vulkan",
    ));
}

/// A catalogue library as the driver root's `ld.so.cache` lists it, for the
/// host architecture, in the cache's (the loader's) order.
struct CacheHit {
    soname: String,
    /// The entry's path, as the cache lists it.
    path: String,
    /// The driver version in the real file's name, `None` if it has none or
    /// does not resolve.
    version: Option<String>,
}

/// The catalogue libraries the driver root's cache lists; empty when it
/// cannot be read (discovery has reported that already).
fn cache_hits(root: &DriverRoot) -> Vec<CacheHit> {
    let Ok(cache_path) = root.resolve(Path::new("/etc/ld.so.cache")) else {
        return Vec::new();
    };
    let Ok(data) = std::fs::read(&cache_path.host) else {
        return Vec::new();
    };
    let ours = |soname: &[u8]| {
        std::str::from_utf8(soname)
            .ok()
            .and_then(crate::host::driver::catalog::library_for)
            .is_some()
    };
    let Ok(cache) = LdCache::parse_where(&data, ours) else {
        return Vec::new();
    };
    let host = Arch::host();
    cache
        .entries
        .into_iter()
        .filter(|e| e.is_elf() && e.arch() == host.cache_flags)
        .map(|e| {
            let version = root
                .resolve(Path::new(&e.path))
                .ok()
                .and_then(|r| driver_version_of(&r.inner));
            CacheHit {
                soname: e.soname,
                path: e.path,
                version,
            }
        })
        .collect()
}

/// The driver version a library's real file name carries:
/// `libcuda.so.535.261.03` → `535.261.03`.
fn driver_version_of(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let (_, version) = name.split_once(".so.")?;
    let parts: Vec<&str> = version.split('.').collect();
    (parts.len() >= 2
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
    .then(|| version.to_string())
}

/// The driver's core libraries: found, of the running module's version.
fn libraries(inventory: &Inventory, root: &DriverRoot, cache: &[CacheHit], out: &mut Vec<Check>) {
    let version = &inventory.driver_version;
    let cache_file = root.host_path(Path::new("/etc/ld.so.cache"));
    let mut missing_core = false;
    for missing in inventory.missing_libraries.iter().filter(|m| m.core) {
        missing_core = true;
        let others: Vec<&str> = cache
            .iter()
            .filter(|h| h.soname.starts_with(missing.prefix))
            .filter_map(|h| h.version.as_deref())
            .filter(|v| v != version)
            .collect();
        let listed = if others.is_empty() {
            String::new()
        } else {
            format!(" (it lists only driver {}'s)", dedup(&others).join(", "))
        };
        out.push(Check::fail(
            L,
            format!("{} library", missing.prefix),
            format!(
                "no {} of driver {version} in {}{listed}: every container asking for \
                 {} fails",
                missing.prefix,
                cache_file.display(),
                missing.capability
            ),
            format!(
                "install the user-space driver of the running module, {version} (the package \
                 that ships {}.{version}), then run `ldconfig`",
                missing.prefix
            ),
        ));
    }
    if !missing_core {
        out.push(Check::ok(
            L,
            "libraries",
            format!(
                "{} libraries of driver {version}, libcuda and libnvidia-ml among them",
                inventory.libraries.len()
            ),
        ));
    }
}

/// Whether the host's loader finds a stale driver's library first.
fn loader_order(inventory: &Inventory, cache: &[CacheHit], out: &mut Vec<Check>) {
    let running = &inventory.driver_version;
    let mut stale = Vec::new();
    for soname in LOADER_CHECKED {
        let Some(first) = cache.iter().find(|h| h.soname == *soname) else {
            continue;
        };
        if let Some(version) = first.version.as_deref().filter(|v| *v != running) {
            stale.push(format!("{soname} → {} (driver {version})", first.path));
        }
    }
    if stale.is_empty() {
        out.push(Check::ok(
            L,
            "loader cache",
            format!("the host's loader finds driver {running}'s libraries first"),
        ));
        return;
    }
    out.push(Check::fail(
        L,
        "loader cache",
        format!(
            "the host's loader finds a stale driver first: {}; host tools load it and fail \
             (nvidia-smi, NVIDIA's CLI: \"rm has detected an NVML/RM version mismatch\"); \
             oci-nvidia-hook's containers are not affected",
            stale.join(", ")
        ),
        format!(
            "remove the other driver's libraries (its packages), or its directory from \
             /etc/ld.so.conf.d, then run `ldconfig` so that {running}'s come first"
        ),
    ));
}

/// Distinct values, in first-seen order.
fn dedup<'a>(items: &[&'a str]) -> Vec<&'a str> {
    let mut seen: Vec<&str> = Vec::new();
    for item in items {
        if !seen.contains(item) {
            seen.push(item);
        }
    }
    seen
}

/// The CUDA version the driver supports, from its own libcuda in a child.
pub(super) fn cuda(
    inventory: &Inventory,
    out: &mut Vec<Check>,
) -> Option<crate::host::driver::CudaVersion> {
    if inventory
        .missing_libraries
        .iter()
        .any(|m| m.prefix == "libcuda.so")
    {
        out.push(Check::warn(
            L,
            "CUDA version",
            "not asked: the driver has no libcuda",
            "install the driver's libcuda (see the libcuda check above)",
        ));
        return None;
    }
    match inventory.cuda_version() {
        Ok(cuda) => {
            out.push(Check::ok(
                L,
                "CUDA version",
                format!(
                    "driver {} supports CUDA {cuda} (cuDriverGetVersion = {})",
                    inventory.driver_version, cuda.0
                ),
            ));
            Some(cuda)
        }
        Err(crate::host::driver::Error::Nvml(
            e @ crate::host::driver_child::Error::Exec { .. },
        )) => {
            out.push(Check::fail(
                L,
                "CUDA version",
                crate::util::error_line::error(&e),
                "let this host execute a program from a memfd: the static binary \
                 asks libcuda through its embedded helper, which the kernel refused \
                 (sysctl vm.memfd_noexec must be 0 or 1; an emulator such as \
                 qemu-user cannot run it either)",
            ));
            None
        }
        Err(e) => {
            out.push(Check::fail(
                L,
                "CUDA version",
                crate::util::error_line::error(&e),
                "reinstall the user-space driver: its own libcuda cannot answer \
                 cuDriverGetVersion, so no CUDA program can start",
            ));
            None
        }
    }
}

/// Whether nvidia-persistenced runs (the kernel keeps its name to 15 bytes).
fn persistence(processes: &Table, out: &mut Vec<Check>) {
    match processes.named("nvidia-persiste").next() {
        Some(p) => out.push(Check::ok(
            L,
            "persistence",
            format!("nvidia-persistenced runs (pid {})", p.pid),
        )),
        None => out.push(Check::warn(
            L,
            "persistence",
            "nvidia-persistenced is not running: the driver tears the GPUs down when their \
             last user exits, and each NVML or CUDA start then takes 100 ms to seconds",
            "`systemctl enable --now nvidia-persistenced`",
        )),
    }
}

/// The host's `nvidia-smi -L`, bounded in time.
fn smi(inventory: &Inventory, out: &mut Vec<Check>) {
    let Some(smi) = inventory
        .binaries
        .iter()
        .find(|b| b.destination == Path::new("/usr/bin/nvidia-smi"))
        .map(|b| b.path.clone())
    else {
        out.push(Check::fail(
            L,
            "nvidia-smi -L",
            "no nvidia-smi in the driver root",
            "install the driver's nvidia-smi (it ships with the user-space driver)",
        ));
        return;
    };
    run_smi(
        &smi,
        "the module and the user-space driver must be loaded and of one version: \
         fix the checks above; `dmesg | grep NVRM` names a GPU that fell off the bus",
        "a hung nvidia-smi is a hung driver or GPU: see `dmesg | grep NVRM` \
         (Xid errors), and reset the GPU or reboot",
        out,
    );
}

/// Runs `smi -L`, bounded in time; `failed` and `hung` are the fixes named
/// when it fails or does not finish.
pub(super) fn run_smi(smi: &Path, failed: &str, hung: &str, out: &mut Vec<Check>) {
    match run_bounded(smi, &["-L"], SMI_TIMEOUT) {
        Ok((true, text)) => {
            let gpus = text.lines().filter(|l| l.starts_with("GPU ")).count();
            out.push(Check::ok(
                L,
                "nvidia-smi -L",
                format!("{} ran and lists {gpus} GPUs", smi.display()),
            ))
        }
        Ok((false, text)) => {
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            out.push(Check::fail(
                L,
                "nvidia-smi -L",
                format!("{} failed: {}", smi.display(), first.trim()),
                failed,
            ))
        }
        Err(reason) => out.push(Check::fail(
            L,
            "nvidia-smi -L",
            format!("{}: {reason}", smi.display()),
            hung,
        )),
    }
}

/// Runs a host program with a bare environment; its success and its output
/// (stdout then stderr), or why it could not finish within `timeout`.
pub(super) fn run_bounded(
    program: &Path,
    args: &[&str],
    timeout: Duration,
) -> Result<(bool, String), Error> {
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", crate::util::this_program::SYSTEM_PATH)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| Error::Spawn {
            program: program.to_path_buf(),
            source,
        })?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::Hung {
                    program: program.to_path_buf(),
                    timeout,
                });
            }
            Err(source) => {
                return Err(Error::Wait {
                    program: program.to_path_buf(),
                    source,
                })
            }
        }
    };
    let mut text = String::new();
    for pipe in [
        child.stdout.take().map(|p| Box::new(p) as Box<dyn Read>),
        child.stderr.take().map(|p| Box::new(p) as Box<dyn Read>),
    ]
    .into_iter()
    .flatten()
    {
        let mut bytes = Vec::new();
        let _ = pipe.take(64 * 1024).read_to_end(&mut bytes);
        text.push_str(&String::from_utf8_lossy(&bytes));
    }
    Ok((status.success(), text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_driver_version_from_a_library_file_name() {
        assert_eq!(
            driver_version_of(Path::new("/usr/lib/libnvidia-ml.so.470.256.02")).as_deref(),
            Some("470.256.02")
        );
        assert_eq!(driver_version_of(Path::new("/usr/lib/libcuda.so.1")), None);
        assert_eq!(driver_version_of(Path::new("/usr/lib/libcuda.so")), None);
    }

    #[test]
    fn each_node_role_has_the_command_that_makes_it() {
        assert_eq!(create_command(NodeRole::Uvm, 0), "nvidia-modprobe -u -c=0");
        assert_eq!(create_command(NodeRole::Gpu, 3), "nvidia-modprobe -c=3");
        assert_eq!(
            create_command(NodeRole::Control, 255),
            "nvidia-modprobe -c=255"
        );
    }

    #[test]
    fn a_bounded_program_that_hangs_is_killed() {
        let started = Instant::now();
        let err =
            run_bounded(Path::new("/bin/sleep"), &["5"], Duration::from_millis(100)).unwrap_err();
        assert!(matches!(err, Error::Hung { .. }), "{err:?}");
        assert!(err.to_string().contains("killed"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(3));
        let (ok, text) = run_bounded(
            Path::new("/bin/sh"),
            &["-c", "echo hi; exit 3"],
            SMI_TIMEOUT,
        )
        .unwrap();
        assert!(!ok);
        assert_eq!(text, "hi\n");
    }
}

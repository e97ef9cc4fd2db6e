//! `nvidia-cdi-hook` (and `nvidia-ctk hook`): the hooks that CDI specs
//! written by NVIDIA's tools call (`nvidia-ctk cdi generate`, the device
//! plugin's and the GPU Operator's specs), answered by this binary. They
//! run at `createContainer`, inside the container's mount namespace, or at
//! `createRuntime`/`prestart`, where the container's namespace is entered
//! first ([`hook::locate`]).
//!
//! Each subcommand does what NVIDIA's does under our rules: every path is
//! resolved inside the container's root, nothing of the image is opened
//! before its type is checked, nothing is executed (`update-ldcache` writes
//! the loader cache itself, whatever `--ldconfig-path` says), and a failure
//! undoes what was done. The edits go through [`crate::inject`], as the
//! prestart hook's do.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::Error;
use clap::{Args, Parser, Subcommand};

use crate::config::{CompatMode, Config, LogLevel};
use crate::hook::{self, Located};
use crate::inject::{self, edits, LinuxSys, Sources};
use crate::plan::{self, Plan, Symlink};

/// The name NVIDIA's hook is called by.
pub const NAME: &str = "nvidia-cdi-hook";

/// Our `ld.so.conf.d` entry for the image's CUDA compat libraries; it
/// sorts before NVIDIA's `00-nvcr-*`, as NVIDIA's `00-compat-*` does.
pub const COMPAT_CONF: &str = "/etc/ld.so.conf.d/00-compat-oci-nvidia-hook.conf";

/// Result of a hook.
pub type Result<T> = std::result::Result<T, Error>;

/// What `--help` says of the whole command.
const LONG_ABOUT: &str = "NVIDIA's nvidia-cdi-hook, answered by oci-nvidia-hook: the OCI hooks \
that CDI specs made by NVIDIA's tools run at createContainer. Each reads the OCI state on stdin \
and edits the container's root only through paths resolved inside it; nothing of the image is \
executed, and update-ldcache writes the loader cache itself, never running ldconfig.";

/// nvidia-cdi-hook: the hooks of NVIDIA's CDI specs, answered by oci-nvidia-hook.
#[derive(Debug, PartialEq, Eq, Parser)]
#[command(name = NAME, version = crate::cli::VERSION, about, long_about = LONG_ABOUT)]
pub struct CdiHook {
    /// Log at debug level.
    #[arg(long, short = 'd', global = true)]
    pub debug: bool,
    /// Log errors only.
    #[arg(long, global = true)]
    pub quiet: bool,
    /// The hook to run.
    #[command(subcommand)]
    pub command: HookCommand,
}

/// The OCI state a hook reads.
#[derive(Debug, PartialEq, Eq, Args)]
pub struct State {
    /// Read the OCI state from this file instead of stdin (testing).
    #[arg(long, value_name = "FILE", hide = true)]
    pub container_spec: Option<PathBuf>,
}

impl State {
    /// The state file, `-` (or none) meaning stdin.
    fn file(&self) -> Option<&Path> {
        self.container_spec
            .as_deref()
            .filter(|p| p.as_os_str().as_bytes() != b"-" && !p.as_os_str().is_empty())
    }
}

/// The library folders `update-ldcache` and `create-soname-symlinks` take.
#[derive(Debug, PartialEq, Eq, Args)]
pub struct Folders {
    /// A directory of the container whose libraries the loader must find (repeatable).
    #[arg(long = "folder", value_name = "DIR")]
    pub folders: Vec<PathBuf>,
    /// Accepted for NVIDIA's specs and ignored: nothing is executed.
    #[arg(long, value_name = "PATH")]
    pub ldconfig_path: Option<PathBuf>,
    #[command(flatten)]
    pub state: State,
}

/// The hooks, by NVIDIA's names and flags.
#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum HookCommand {
    /// Add the libraries of --folder directories to the container's loader
    /// cache (and SONAME links to them), written by us: ldconfig never runs.
    UpdateLdcache(Folders),
    /// Create the SONAME links of the libraries in --folder directories.
    CreateSonameSymlinks(Folders),
    /// Create symlinks in the container, each given as TARGET::LINK.
    CreateSymlinks {
        /// TARGET::LINK, LINK a path in the container (repeatable).
        #[arg(long = "link", value_name = "TARGET::LINK")]
        links: Vec<String>,
        #[command(flatten)]
        state: State,
    },
    /// Let the loader prefer the image's CUDA compat libraries when they
    /// come from a newer driver than the host's.
    EnableCudaCompat {
        /// The host's driver version.
        #[arg(long, value_name = "VERSION")]
        host_driver_version: String,
        #[command(flatten)]
        state: State,
    },
    /// Show the container a /proc/driver/nvidia/params with
    /// ModifyDeviceFiles: 0, so the driver never makes device nodes for it.
    DisableDeviceNodeModification {
        #[command(flatten)]
        state: State,
    },
    /// Set the permission bits of paths in the container.
    Chmod {
        /// The mode, in octal.
        #[arg(long, value_name = "MODE")]
        mode: String,
        /// A path in the container (repeatable); one it lacks is skipped.
        #[arg(long = "path", value_name = "PATH")]
        paths: Vec<PathBuf>,
        #[command(flatten)]
        state: State,
    },
    /// Restrict EGL and Vulkan to the container's GPUs through the driver's
    /// application profile.
    UpdateApplicationProfile {
        #[command(flatten)]
        state: State,
    },
}

/// Parses `args` (`argv[0]` first); clap prints its errors and exits.
pub fn parse(args: &[std::ffi::OsString]) -> CdiHook {
    CdiHook::parse_from(args)
}

/// Runs `hook` with the default config file (for the log and the driver's
/// procfs), `--debug`/`--quiet` setting its level; a runtime waits for it,
/// so it runs under the config's deadline like every hook.
pub fn run(hook: &CdiHook) -> Result<()> {
    let mut config =
        crate::deadline::bounded_load(Some(NAME), || Config::load(None), Config::deadline)?;
    if hook.debug {
        config.log.level = LogLevel::Debug;
    } else if hook.quiet {
        config.log.level = LogLevel::Error;
    }
    crate::logging::init(&config.log)?;
    run_command(&hook.command, &config)
}

/// Runs one hook (`nvidia-cdi-hook`'s, or `nvidia-ctk hook`'s), the state on stdin.
pub fn run_command(command: &HookCommand, config: &Config) -> Result<()> {
    let sys = LinuxSys::default();
    let locate = |state: &State| hook::locate(io::stdin(), state.file());
    match command {
        HookCommand::UpdateLdcache(Folders { folders, state, .. }) => {
            let located = locate(state)?;
            located.enter(&sys)?;
            let rootfs = &located.container.rootfs;
            // The compat libraries `enable-cuda-compat` chose come first.
            let mut dirs = compat_dirs(rootfs)?;
            dirs.extend(folders.iter().cloned());
            let libraries = edits::libraries(rootfs, &dirs)?;
            let plan = Plan {
                symlinks: libraries.symlinks,
                loader_entries: libraries.entries,
                loader_dirs: folders.clone(),
                ..Plan::default()
            };
            apply(&sys, &located, &plan, "update-ldcache")
        }
        HookCommand::CreateSonameSymlinks(Folders { folders, state, .. }) => {
            let located = locate(state)?;
            located.enter(&sys)?;
            let libraries = edits::libraries(&located.container.rootfs, folders)?;
            let plan = Plan {
                symlinks: libraries.symlinks,
                ..Plan::default()
            };
            apply(&sys, &located, &plan, "create-soname-symlinks")
        }
        HookCommand::CreateSymlinks { links, state } => {
            let plan = Plan {
                symlinks: symlinks(links)?,
                ..Plan::default()
            };
            let located = locate(state)?;
            located.enter(&sys)?;
            apply(&sys, &located, &plan, "create-symlinks")
        }
        HookCommand::EnableCudaCompat {
            host_driver_version,
            state,
        } => {
            let located = locate(state)?;
            located.enter(&sys)?;
            let rootfs = &located.container.rootfs;
            let image =
                crate::image::Image::inspect(rootfs, host_driver_version, CompatMode::Ldconfig)?;
            let Some(compat) = image.compat else {
                log::debug!(
                    "container {}: no CUDA compat libraries newer than driver {host_driver_version}",
                    located.id
                );
                return Ok(());
            };
            let mut conf = compat.dir.as_os_str().as_bytes().to_vec();
            conf.push(b'\n');
            edits::write_file(rootfs, Path::new(COMPAT_CONF), &conf)?;
            log::info!(
                "container {}: CUDA compat libraries of driver {} in {} preferred",
                located.id,
                compat.driver_version,
                compat.dir.display()
            );
            Ok(())
        }
        HookCommand::DisableDeviceNodeModification { state } => {
            let proc_dir = config.driver.proc_root.join("driver/nvidia");
            if !proc_dir.join("params").exists() {
                log::debug!("{}: no driver loaded, nothing to mask", proc_dir.display());
                return Ok(());
            }
            let plan = Plan {
                proc_mask: Some(plan::whole_driver(&proc_dir, gpu_buses(&proc_dir)?)),
                ..Plan::default()
            };
            let located = locate(state)?;
            // The host's files are opened before the container's namespace is entered.
            let mut sources = Sources::open(&sys, &plan)?;
            located.enter(&sys)?;
            inject::apply(&sys, &plan, &mut sources, &located.container.rootfs)?;
            Ok(())
        }
        HookCommand::Chmod { mode, paths, state } => {
            let mode = parse_mode(mode)?;
            let located = locate(state)?;
            located.enter(&sys)?;
            let changed = edits::chmod(&located.container.rootfs, paths, mode)?;
            log::debug!(
                "container {}: chmod {mode:o}: {changed} changed",
                located.id
            );
            Ok(())
        }
        HookCommand::UpdateApplicationProfile { state } => {
            let located = locate(state)?;
            located.enter(&sys)?;
            let rootfs = &located.container.rootfs;
            let Some(profile) = plan::application_profile(edits::gpu_minors(rootfs)?) else {
                return Ok(());
            };
            edits::write_file(
                rootfs,
                Path::new(plan::APPLICATION_PROFILE),
                profile.as_bytes(),
            )?;
            Ok(())
        }
    }
}

/// Applies a plan of links and loader entries to the located container.
fn apply(sys: &LinuxSys, located: &Located, plan: &Plan, what: &str) -> Result<()> {
    let mut sources = Sources::open(sys, plan)?;
    let summary = inject::apply(sys, plan, &mut sources, &located.container.rootfs)?;
    log::info!(
        "container {}: {what}: {} links, {} loader entries",
        located.id,
        summary.symlinks,
        summary.loader_entries
    );
    Ok(())
}

/// The directories our `enable-cuda-compat` entry names, if the image has it.
fn compat_dirs(rootfs: &Path) -> Result<Vec<PathBuf>> {
    Ok(edits::read_file(rootfs, Path::new(COMPAT_CONF))?
        .map(|text| {
            text.split(|b| *b == b'\n')
                .filter(|line| line.starts_with(b"/"))
                .map(|line| PathBuf::from(std::ffi::OsStr::from_bytes(line)))
                .collect()
        })
        .unwrap_or_default())
}

/// `--link TARGET::LINK` values as links, each once.
fn symlinks(links: &[String]) -> Result<Vec<Symlink>> {
    let mut out: Vec<Symlink> = Vec::new();
    for spec in links {
        let Some((target, link)) = spec.split_once("::") else {
            return Err(Error::CdiHookLink(spec.clone()));
        };
        if target.is_empty() || link.is_empty() || link.contains("::") {
            return Err(Error::CdiHookLink(spec.clone()));
        }
        let link = Symlink {
            path: Path::new("/").join(link),
            target: PathBuf::from(target),
        };
        if !out.contains(&link) {
            out.push(link);
        }
    }
    Ok(out)
}

/// An octal mode of permission bits.
fn parse_mode(mode: &str) -> Result<u32> {
    u32::from_str_radix(mode.trim(), 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| Error::CdiHookMode(mode.to_string()))
}

/// The bus ids of the GPUs the host's `proc_dir` shows.
fn gpu_buses(proc_dir: &Path) -> Result<Vec<String>> {
    let path = proc_dir.join("gpus");
    let entries = match std::fs::read_dir(&path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(Error::CdiHookHostProc { path, source }),
    };
    let mut buses = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect::<Vec<_>>();
    buses.sort();
    Ok(buses)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_target_then_link_each_once() {
        let links = symlinks(&[
            "libcuda.so.1::/usr/lib64/libcuda.so".into(),
            "libcuda.so.1::/usr/lib64/libcuda.so".into(),
            "../a::usr/b".into(),
        ])
        .unwrap();
        assert_eq!(
            links,
            [
                Symlink {
                    path: "/usr/lib64/libcuda.so".into(),
                    target: "libcuda.so.1".into()
                },
                Symlink {
                    path: "/usr/b".into(),
                    target: "../a".into()
                }
            ]
        );
        for bad in ["a", "::b", "a::", "a::b::c"] {
            let err = symlinks(&[bad.into()]).unwrap_err();
            assert!(err.to_string().contains(bad), "{err}");
        }
    }

    #[test]
    fn modes_are_octal_permission_bits() {
        assert_eq!(parse_mode("755").unwrap(), 0o755);
        assert_eq!(parse_mode("0644").unwrap(), 0o644);
        for bad in ["", "9", "17777", "rwx"] {
            assert!(parse_mode(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn nvidias_command_lines_parse() {
        let hook = CdiHook::try_parse_from([
            "nvidia-cdi-hook",
            "update-ldcache",
            "--ldconfig-path",
            "/sbin/ldconfig",
            "--folder",
            "/usr/lib/x86_64-linux-gnu",
            "--folder",
            "/usr/lib64",
        ])
        .unwrap();
        let HookCommand::UpdateLdcache(Folders { folders, .. }) = hook.command else {
            panic!("{hook:?}");
        };
        assert_eq!(folders.len(), 2);
        for args in [
            &["nvidia-cdi-hook", "create-symlinks", "--link", "a::/b"][..],
            &[
                "nvidia-cdi-hook",
                "chmod",
                "--mode",
                "755",
                "--path",
                "/dev/dri",
            ],
            &[
                "nvidia-cdi-hook",
                "enable-cuda-compat",
                "--host-driver-version",
                "535.1",
            ],
            &["nvidia-cdi-hook", "disable-device-node-modification"],
            &["nvidia-cdi-hook", "update-application-profile"],
            &[
                "nvidia-cdi-hook",
                "-d",
                "create-soname-symlinks",
                "--folder",
                "/x",
            ],
        ] {
            CdiHook::try_parse_from(args).unwrap();
        }
        assert!(CdiHook::try_parse_from(["nvidia-cdi-hook", "apply-cuda-memory-limits"]).is_err());
    }
}

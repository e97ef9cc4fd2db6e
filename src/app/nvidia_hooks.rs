//! `nvidia-cdi-hook` (and `nvidia-ctk hook`): the hooks that CDI specs
//! written by NVIDIA's tools call (`nvidia-ctk cdi generate`, the device
//! plugin's and the GPU Operator's specs), answered by this binary. They
//! run at `createContainer`, inside the container's mount namespace, or at
//! `createRuntime`/`prestart`, where the container's namespace is entered
//! first ([`hook::locate`]).
//!
//! Each hook does what NVIDIA's does under our rules: every path is
//! resolved inside the container's root, nothing of the image is opened
//! before its type is checked, nothing is executed (`update-ldcache` writes
//! the loader cache itself, whatever `--ldconfig-path` said), and a failure
//! undoes what was done. The edits go through [`crate::inject`], as the
//! prestart hook's do.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::{Error, Result};
use crate::config::{CompatMode, Config};
use crate::hook::{self, Located};
use crate::inject::{self, edits, LinuxSys, Sources};
use crate::plan::{self, Plan, Symlink};

/// Our `ld.so.conf.d` entry for the image's CUDA compat libraries; it
/// sorts before NVIDIA's `00-nvcr-*`, as NVIDIA's `00-compat-*` does.
pub const COMPAT_CONF: &str = "/etc/ld.so.conf.d/00-compat-oci-nvidia-hook.conf";

/// One hook of NVIDIA's, and where its OCI state comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// The file to read the OCI state from; `None` for stdin.
    pub state: Option<PathBuf>,
    /// What the hook does.
    pub kind: HookKind,
}

/// The hooks, by what NVIDIA's do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookKind {
    /// Add the libraries of `folders` to the loader cache, with SONAME links.
    UpdateLdcache {
        /// Directories of the container.
        folders: Vec<PathBuf>,
    },
    /// Create the SONAME links of the libraries in `folders`.
    CreateSonameSymlinks {
        /// Directories of the container.
        folders: Vec<PathBuf>,
    },
    /// Create links, each given as `TARGET::LINK`.
    CreateSymlinks {
        /// `TARGET::LINK`, as given.
        links: Vec<String>,
    },
    /// Prefer the image's CUDA compat libraries when they come from a newer driver.
    EnableCudaCompat {
        /// The host's driver version.
        host_driver_version: String,
    },
    /// Show the container a driver params file that never makes nodes.
    DisableDeviceNodeModification,
    /// Set the permission bits of paths in the container.
    Chmod {
        /// The mode, in octal, as given.
        mode: String,
        /// Paths in the container.
        paths: Vec<PathBuf>,
    },
    /// Restrict EGL and Vulkan to the container's GPUs.
    UpdateApplicationProfile,
}

/// Runs one hook (`nvidia-cdi-hook`'s, or `nvidia-ctk hook`'s).
pub fn run(asked: &Hook, config: &Config) -> Result<()> {
    let sys = LinuxSys::default();
    let locate = || hook::locate(io::stdin(), asked.state.as_deref());
    match &asked.kind {
        HookKind::UpdateLdcache { folders } => {
            let located = locate()?;
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
        HookKind::CreateSonameSymlinks { folders } => {
            let located = locate()?;
            located.enter(&sys)?;
            let libraries = edits::libraries(&located.container.rootfs, folders)?;
            let plan = Plan {
                symlinks: libraries.symlinks,
                ..Plan::default()
            };
            apply(&sys, &located, &plan, "create-soname-symlinks")
        }
        HookKind::CreateSymlinks { links } => {
            let plan = Plan {
                symlinks: symlinks(links)?,
                ..Plan::default()
            };
            let located = locate()?;
            located.enter(&sys)?;
            apply(&sys, &located, &plan, "create-symlinks")
        }
        HookKind::EnableCudaCompat {
            host_driver_version,
        } => {
            let located = locate()?;
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
        HookKind::DisableDeviceNodeModification => {
            let proc_dir = config.driver.proc_root.join("driver/nvidia");
            if !proc_dir.join("params").exists() {
                log::debug!("{}: no driver loaded, nothing to mask", proc_dir.display());
                return Ok(());
            }
            let plan = Plan {
                proc_mask: Some(plan::whole_driver(&proc_dir, gpu_buses(&proc_dir)?)),
                ..Plan::default()
            };
            let located = locate()?;
            // The host's files are opened before the container's namespace is entered.
            let mut sources = Sources::open(&sys, &plan)?;
            located.enter(&sys)?;
            inject::apply(&sys, &plan, &mut sources, &located.container.rootfs)?;
            Ok(())
        }
        HookKind::Chmod { mode, paths } => {
            let mode = parse_mode(mode)?;
            let located = locate()?;
            located.enter(&sys)?;
            let changed = edits::chmod(&located.container.rootfs, paths, mode)?;
            log::debug!(
                "container {}: chmod {mode:o}: {changed} changed",
                located.id
            );
            Ok(())
        }
        HookKind::UpdateApplicationProfile => {
            let located = locate()?;
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
            return Err(Error::HookLink(spec.clone()));
        };
        if target.is_empty() || link.is_empty() || link.contains("::") {
            return Err(Error::HookLink(spec.clone()));
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
        .ok_or_else(|| Error::HookMode(mode.to_string()))
}

/// The bus ids of the GPUs the host's `proc_dir` shows.
fn gpu_buses(proc_dir: &Path) -> Result<Vec<String>> {
    let path = proc_dir.join("gpus");
    let entries = match std::fs::read_dir(&path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(Error::HostProc { path, source }),
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
}

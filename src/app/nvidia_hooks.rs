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
//! undoes what was done. The edits go through [`crate::apply::inject`], as the
//! prestart hook's do.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::{Error, Result};
use crate::apply::hook::{self, Seam, Target};
use crate::apply::inject::{self, edits};
use crate::config::{CompatMode, Config};
use crate::planning::plan::{self, ModeChange, Plan, Symlink, WrittenFile};

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

impl HookKind {
    /// NVIDIA's name for it, in log lines.
    fn name(&self) -> &'static str {
        match self {
            HookKind::UpdateLdcache { .. } => "update-ldcache",
            HookKind::CreateSonameSymlinks { .. } => "create-soname-symlinks",
            HookKind::CreateSymlinks { .. } => "create-symlinks",
            HookKind::EnableCudaCompat { .. } => "enable-cuda-compat",
            HookKind::DisableDeviceNodeModification => "disable-device-node-modification",
            HookKind::Chmod { .. } => "chmod",
            HookKind::UpdateApplicationProfile => "update-application-profile",
        }
    }
}

/// Runs one hook (`nvidia-cdi-hook`'s, or `nvidia-ctk hook`'s), its
/// privileged calls through `sys`: each ends in the container's one apply.
pub fn run(asked: &Hook, config: &Config, sys: &impl Seam) -> Result<()> {
    let target = hook::locate(io::stdin(), asked.state.as_deref())?;
    let summary = run_on(&target, &asked.kind, config, sys)?;
    log::info!(
        "container {}: {}: {} links, {} loader entries, {} files, {} modes",
        target.id,
        asked.kind.name(),
        summary.symlinks,
        summary.loader_entries,
        summary.files,
        summary.modes
    );
    Ok(())
}

/// The hook `kind` on the located `target`: planned, then applied in the
/// container's one sequence.
fn run_on(
    target: &Target,
    kind: &HookKind,
    config: &Config,
    sys: &impl Seam,
) -> Result<inject::Summary> {
    Ok(match kind {
        HookKind::DisableDeviceNodeModification => {
            let proc_dir = config.driver.proc_root.join("driver/nvidia");
            if !proc_dir.join("params").exists() {
                log::debug!("{}: no driver loaded, nothing to mask", proc_dir.display());
                return Ok(inject::Summary::default());
            }
            let plan = Plan {
                proc_mask: Some(plan::whole_driver(&proc_dir, gpu_buses(&proc_dir)?)),
                ..Plan::default()
            };
            // The host's files are opened before the container's namespace is entered.
            target.apply(sys, &plan, None)?.summary
        }
        kind => target.apply_made_inside(sys, |rootfs| made_inside(kind, rootfs))?,
    })
}

/// The plan of a hook that edits the container from what it shows inside
/// its mount namespace (`rootfs` as seen there).
fn made_inside(kind: &HookKind, rootfs: &Path) -> Result<Plan> {
    Ok(match kind {
        HookKind::UpdateLdcache { folders } => {
            // The compat libraries `enable-cuda-compat` chose come first.
            let mut dirs = compat_dirs(rootfs)?;
            dirs.extend(folders.iter().cloned());
            let libraries = edits::libraries(rootfs, &dirs)?;
            Plan {
                symlinks: libraries.symlinks,
                loader_entries: libraries.entries,
                loader_dirs: folders.clone(),
                ..Plan::default()
            }
        }
        HookKind::CreateSonameSymlinks { folders } => Plan {
            symlinks: edits::libraries(rootfs, folders)?.symlinks,
            ..Plan::default()
        },
        HookKind::CreateSymlinks { links } => Plan {
            symlinks: symlinks(links)?,
            ..Plan::default()
        },
        HookKind::EnableCudaCompat {
            host_driver_version,
        } => {
            let image = crate::planning::image::Image::inspect(
                rootfs,
                host_driver_version,
                CompatMode::Ldconfig,
            )?;
            let Some(compat) = image.compat else {
                log::debug!("no CUDA compat libraries newer than driver {host_driver_version}");
                return Ok(Plan::default());
            };
            log::info!(
                "CUDA compat libraries of driver {} in {} preferred",
                compat.driver_version,
                compat.dir.display()
            );
            let mut conf = compat.dir.as_os_str().to_string_lossy().into_owned();
            conf.push('\n');
            Plan {
                files: vec![WrittenFile {
                    path: COMPAT_CONF.into(),
                    data: conf,
                }],
                ..Plan::default()
            }
        }
        HookKind::Chmod { mode, paths } => {
            let mode = parse_mode(mode)?;
            Plan {
                modes: paths
                    .iter()
                    .map(|path| ModeChange {
                        path: path.clone(),
                        mode,
                    })
                    .collect(),
                ..Plan::default()
            }
        }
        HookKind::UpdateApplicationProfile => Plan {
            files: plan::application_profile(edits::gpu_minors(rootfs)?)
                .map(|data| WrittenFile {
                    path: plan::APPLICATION_PROFILE.into(),
                    data,
                })
                .into_iter()
                .collect(),
            ..Plan::default()
        },
        // Planned from the host, before entering.
        HookKind::DisableDeviceNodeModification => Plan::default(),
    })
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

    /// Every hook against the fake seam: entered before anything is read
    /// of the container; a refused step stops it with the rootfs unchanged.
    #[test]
    fn each_hook_runs_the_one_sequence_and_a_refused_step_changes_nothing() {
        use crate::apply::hook::fake::FakeSeam;
        use std::fs;

        let host = tempfile::tempdir().unwrap();
        let proc_dir = host.path().join("proc/driver/nvidia");
        fs::create_dir_all(proc_dir.join("gpus/0000:3b:00.0")).unwrap();
        fs::write(proc_dir.join("params"), "ModifyDeviceFiles: 1\n").unwrap();
        fs::write(proc_dir.join("version"), "NVRM version: 535\n").unwrap();
        let mut config = Config::default();
        config.driver.proc_root = host.path().join("proc");
        let kinds = [
            HookKind::UpdateLdcache {
                folders: vec!["/lib".into()],
            },
            HookKind::CreateSonameSymlinks {
                folders: vec!["/lib".into()],
            },
            HookKind::CreateSymlinks {
                links: vec!["libcuda.so.1::/lib/libcuda.so".into()],
            },
            HookKind::EnableCudaCompat {
                host_driver_version: "535.261.03".into(),
            },
            HookKind::DisableDeviceNodeModification,
            HookKind::Chmod {
                mode: "700".into(),
                paths: vec!["/lib".into()],
            },
            HookKind::UpdateApplicationProfile,
        ];
        let tree = |root: &Path| {
            let mut out: Vec<String> = walk(root)
                .into_iter()
                .map(|(p, m)| format!("{} {m:o}", p.display()))
                .collect();
            out.sort();
            out
        };
        for kind in &kinds {
            for refused in ["still_held", "enter"] {
                let rootfs = tempfile::tempdir().unwrap();
                fs::create_dir(rootfs.path().join("lib")).unwrap();
                let before = tree(rootfs.path());
                let target = Target::of_rootfs(rootfs.path().into(), true);
                let sys = FakeSeam::refusing(refused);
                let err = run_on(&target, kind, &config, &sys).unwrap_err();
                assert_eq!(sys.calls.borrow().last(), Some(&refused), "{kind:?}: {err}");
                assert_eq!(tree(rootfs.path()), before, "{kind:?}: {err}");
            }
            let rootfs = tempfile::tempdir().unwrap();
            fs::create_dir(rootfs.path().join("lib")).unwrap();
            // A container that shows the driver, whose procfs is masked.
            fs::create_dir_all(rootfs.path().join("proc/driver/nvidia")).unwrap();
            let target = Target::of_rootfs(rootfs.path().into(), true);
            let sys = FakeSeam::default();
            let summary = run_on(&target, kind, &config, &sys).unwrap();
            assert_eq!(sys.calls.borrow()[..2], ["still_held", "enter"], "{kind:?}");
            match kind {
                HookKind::CreateSymlinks { .. } => assert_eq!(summary.symlinks, 1),
                HookKind::Chmod { .. } => assert_eq!(summary.modes, 1),
                HookKind::DisableDeviceNodeModification => {
                    assert_eq!(sys.inner.tmpfs.borrow().len(), 1, "{kind:?}")
                }
                _ => {}
            }
        }
    }

    /// Every path below `root` with its mode.
    fn walk(root: &Path) -> Vec<(PathBuf, u32)> {
        use std::os::unix::fs::PermissionsExt;
        let mut out = Vec::new();
        for entry in std::fs::read_dir(root).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            out.push((path.clone(), meta.permissions().mode()));
            if meta.is_dir() {
                out.extend(walk(&path));
            }
        }
        out
    }
}

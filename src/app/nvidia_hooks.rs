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
//! undoes what was done. Each hook's edits are planned by the planner and
//! applied by the one apply sequence ([`Target`]), as the prestart hook's are.

use std::io;
use std::path::{Path, PathBuf};

use super::Result;
use crate::apply::hook::{self, Seam, Target};
use crate::apply::inject;
use crate::config::Config;
use crate::planning::image::ImageLayout;
use crate::planning::plan::Plan;
use crate::planning::planner::{self, ImageSource, Inputs, Source};
pub use crate::planning::request::hook_edits::HookEdits;

/// One hook of NVIDIA's, and where its OCI state comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// The file to read the OCI state from; `None` for stdin.
    pub state: Option<PathBuf>,
    /// What the hook does.
    pub kind: HookEdits,
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
/// container's one sequence. `disable-device-node-modification` is planned
/// from the host, its sources opened before entering; the others from what
/// the container shows inside its mount namespace.
fn run_on(
    target: &Target,
    kind: &HookEdits,
    config: &Config,
    sys: &impl Seam,
) -> Result<inject::Summary> {
    if !kind.reads_container() {
        return Ok(target
            .apply(sys, &planned(config, kind, None)?, None)?
            .summary);
    }
    target.apply_made_inside(sys, |rootfs| planned(config, kind, Some(rootfs)))
}

/// The planner's plan of `kind`, for the container whose root is `rootfs`
/// as seen inside it (`None`: from the host alone).
fn planned(config: &Config, kind: &HookEdits, rootfs: Option<&Path>) -> Result<Plan> {
    let image = match rootfs {
        Some(rootfs) => ImageSource::Rootfs(rootfs),
        None => ImageSource::Layout(ImageLayout::default()),
    };
    Ok(planner::plan(config, Inputs::new(Source::Edits(kind), image))?.plan)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            HookEdits::UpdateLdcache {
                folders: vec!["/lib".into()],
            },
            HookEdits::CreateSonameSymlinks {
                folders: vec!["/lib".into()],
            },
            HookEdits::CreateSymlinks {
                links: vec!["libcuda.so.1::/lib/libcuda.so".into()],
            },
            HookEdits::EnableCudaCompat {
                host_driver_version: Some("535.261.03".into()),
                host_cuda_version: None,
                container_root: None,
            },
            HookEdits::DisableDeviceNodeModification,
            HookEdits::Chmod {
                mode: "700".into(),
                paths: vec!["/lib".into()],
            },
            HookEdits::UpdateApplicationProfile,
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
                HookEdits::CreateSymlinks { .. } => assert_eq!(summary.symlinks, 1),
                HookEdits::Chmod { .. } => assert_eq!(summary.modes, 1),
                HookEdits::DisableDeviceNodeModification => {
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

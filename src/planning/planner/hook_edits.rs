//! The plans of NVIDIA's CDI spec hooks (`nvidia-cdi-hook` and `nvidia-ctk
//! hook`): what each subcommand asks, read into links, loader entries,
//! files and permission bits of the container, or the driver's procfs
//! masked. Every hook's edits are a plan like any other, applied by the one
//! apply sequence.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::{Error, Result};
use crate::apply::inject::container_files;
use crate::config::Config;
use crate::host::driver;
use crate::planning::image::{self, HostOffers, Image};
use crate::planning::plan::{self, ModeChange, Plan, Symlink, WrittenFile};
use crate::planning::request::hook_edits::HookEdits;

/// Our `ld.so.conf.d` entry for the image's CUDA compat libraries; it
/// sorts before NVIDIA's `00-nvcr-*`, as NVIDIA's `00-compat-*` does.
pub const COMPAT_CONF: &str = "/etc/ld.so.conf.d/00-compat-oci-nvidia-hook.conf";

/// The plan of a hook of NVIDIA's: from the host's driver procfs for
/// `disable-device-node-modification`, else from what the container shows
/// inside its mount namespace (`rootfs` as seen there).
pub(super) fn plan(config: &Config, kind: &HookEdits, rootfs: Option<&Path>) -> Result<Plan> {
    let rootfs = match (kind.reads_container(), rootfs) {
        (false, _) => return proc_mask(config),
        // The others read the container: nothing without its root.
        (true, None) => return Ok(Plan::default()),
        (true, Some(rootfs)) => rootfs,
    };
    Ok(match kind {
        HookEdits::UpdateLdcache { folders } => {
            // The compat libraries `enable-cuda-compat` chose come first.
            let mut dirs = compat_dirs(rootfs)?;
            dirs.extend(folders.iter().cloned());
            let libraries = container_files::libraries(rootfs, &dirs)?;
            Plan {
                symlinks: libraries.symlinks,
                loader_entries: libraries.entries,
                loader_dirs: folders.clone(),
                ..Plan::default()
            }
        }
        HookEdits::CreateSonameSymlinks { folders } => Plan {
            symlinks: container_files::libraries(rootfs, folders)?.symlinks,
            ..Plan::default()
        },
        HookEdits::CreateSymlinks { links } => Plan {
            symlinks: symlinks(links)?,
            ..Plan::default()
        },
        HookEdits::EnableCudaCompat {
            host_driver_version,
            host_cuda_version,
            container_root,
        } => compat_conf(
            rootfs,
            host_driver_version,
            host_cuda_version,
            container_root,
        )?,
        HookEdits::Chmod { mode, paths } => {
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
        HookEdits::UpdateApplicationProfile => Plan {
            files: plan::application_profile(container_files::gpu_minors(rootfs)?)
                .map(|data| WrittenFile {
                    path: plan::APPLICATION_PROFILE.into(),
                    data,
                })
                .into_iter()
                .collect(),
            ..Plan::default()
        },
        // Planned from the host above.
        HookEdits::DisableDeviceNodeModification => proc_mask(config)?,
    })
}

/// `disable-device-node-modification`'s plan: the driver's procfs masked,
/// its params showing `ModifyDeviceFiles: 0`; nothing without a driver.
fn proc_mask(config: &Config) -> Result<Plan> {
    let proc_dir = config.driver.proc_root.join("driver/nvidia");
    if !proc_dir.join("params").exists() {
        log::debug!("{}: no driver loaded, nothing to mask", proc_dir.display());
        return Ok(Plan::default());
    }
    let buses = driver::proc::gpu_dirs(&proc_dir.join("gpus"))?;
    Ok(Plan {
        proc_mask: Some(plan::whole_driver(&proc_dir, buses)),
        ..Plan::default()
    })
}

/// `enable-cuda-compat`'s plan: our `ld.so.conf.d` entry naming the
/// container's compat libraries when NVIDIA's v1.20.0 hook would use them
/// (`planning::compat_rule`: the compat libcuda's note, else the driver
/// majors); nothing when neither version is given, as NVIDIA's hook does
/// nothing then, and nothing for a version that does not read, which
/// NVIDIA's hook only warns about.
fn compat_conf(
    rootfs: &Path,
    host_driver_version: &Option<String>,
    host_cuda_version: &Option<String>,
    container_root: &Option<PathBuf>,
) -> Result<Plan> {
    let host = HostOffers::HookFlags {
        driver: given(host_driver_version),
        cuda: given(host_cuda_version),
    };
    if host
        == (HostOffers::HookFlags {
            driver: None,
            cuda: None,
        })
    {
        log::debug!("enable-cuda-compat: no host driver or CUDA version given, nothing to do");
        return Ok(Plan::default());
    }
    let dir = container_root
        .as_deref()
        .unwrap_or(Path::new(image::COMPAT_DIR));
    let Some(compat) = Image::compat_in(rootfs, dir, host)? else {
        log::debug!(
            "no CUDA compat libraries in {} newer than {host:?}",
            dir.display()
        );
        return Ok(Plan::default());
    };
    log::info!(
        "CUDA compat libraries of driver {} in {} preferred",
        compat.driver_version,
        compat.dir.display()
    );
    let mut conf = compat.dir.as_os_str().to_string_lossy().into_owned();
    conf.push('\n');
    Ok(Plan {
        files: vec![WrittenFile {
            path: COMPAT_CONF.into(),
            data: conf,
        }],
        ..Plan::default()
    })
}

/// A version flag's value; an empty one is none, as NVIDIA's hook reads it.
fn given(flag: &Option<String>) -> Option<&str> {
    flag.as_deref().filter(|v| !v.is_empty())
}

/// The directories our `enable-cuda-compat` entry names, if the image has it.
fn compat_dirs(rootfs: &Path) -> Result<Vec<PathBuf>> {
    Ok(container_files::read_file(rootfs, Path::new(COMPAT_CONF))?
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

    /// NVIDIA v1.20.0's `nvidia-cdi-hook enable-cuda-compat` with neither
    /// version exits 0 without reading the container (run side by side from
    /// ../shared/anchor): ours plans nothing, whatever the image holds.
    #[test]
    fn enable_cuda_compat_without_a_host_version_plans_nothing() {
        let root = tempfile::tempdir().unwrap();
        let kind = HookEdits::EnableCudaCompat {
            host_driver_version: None,
            host_cuda_version: None,
            container_root: Some("/anywhere".into()),
        };
        let planned = plan(&Config::default(), &kind, Some(root.path())).unwrap();
        assert_eq!(planned, Plan::default());
        // A CUDA version that does not read: NVIDIA's hook warns and uses
        // no compat libraries, even ones whose note names a newer CUDA.
        let lib = root
            .path()
            .join("usr/local/cuda/compat/libcuda.so.590.44.01");
        std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
        let desc = br#"{"Format": 1, "CUDA Version": "13.1", "Driver": [580, 590]}"#;
        std::fs::write(
            &lib,
            crate::host::elf::tests::with_note(
                ".note.cuda.fwd_compatibility",
                "NVIDIA Corporation",
                desc,
            ),
        )
        .unwrap();
        let unread = |cuda: &str| HookEdits::EnableCudaCompat {
            host_driver_version: None,
            host_cuda_version: Some(cuda.into()),
            container_root: None,
        };
        let planned = plan(&Config::default(), &unread("twelve"), Some(root.path())).unwrap();
        assert_eq!(planned, Plan::default());
        let planned = plan(&Config::default(), &unread("12.6"), Some(root.path())).unwrap();
        assert_eq!(
            planned.files.len(),
            1,
            "the note's CUDA is newer: {planned:?}"
        );
    }

    /// NVIDIA's `TestCompatLibs` table (cmd/nvidia-cdi-hook/cudacompat/
    /// cudacompat_test.go, v1.17.5 to v1.20.0): which compat directory
    /// `enable-cuda-compat --host-driver-version` names for each image.
    /// NVIDIA's files are empty; ours are ELF headers, as ours checks them.
    /// Where the compat directory is reached through a link, NVIDIA names
    /// the directory it resolved to; ours names the one it was asked for,
    /// which the loader resolves the same way inside the container.
    #[test]
    fn enable_cuda_compat_decides_as_nvidias_table() {
        use goblin::elf::header::{ELFCLASS64, EM_X86_64, ET_DYN};
        let so = crate::host::elf::tests::header(ELFCLASS64, EM_X86_64, ET_DYN);
        /// (description, the image's files, the host's driver, the directory named).
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str, Option<&'a str>);
        let cases: [Case; 9] = [
            ("empty root", &[], "222.55.66", None),
            (
                "compat lib is newer; no ldcache",
                &[("usr/local/cuda/compat/libcuda.so.333.88.99", "")],
                "222.55.66",
                Some("/usr/local/cuda/compat"),
            ),
            (
                "compat lib is newer; ldcache",
                &[
                    ("etc/ld.so.cache", "-"),
                    ("usr/local/cuda/compat/libcuda.so.333.88.99", ""),
                ],
                "222.55.66",
                Some("/usr/local/cuda/compat"),
            ),
            (
                "compat lib is older",
                &[("usr/local/cuda/compat/libcuda.so.111.88.99", "")],
                "222.55.66",
                None,
            ),
            (
                "compat lib has the same major",
                &[("usr/local/cuda/compat/libcuda.so.222.88.99", "")],
                "222.55.66",
                None,
            ),
            (
                "numeric comparison is used",
                &[("usr/local/cuda/compat/libcuda.so.222.88.99", "")],
                "99.55.66",
                Some("/usr/local/cuda/compat"),
            ),
            (
                "driver version empty",
                &[("usr/local/cuda/compat/libcuda.so.222.88.99", "")],
                "",
                None,
            ),
            (
                "symlinks are followed",
                &[
                    ("etc/alternatives/cuda/compat/libcuda.so.333.88.99", ""),
                    ("usr/local/cuda", "symlink=/etc/alternatives/cuda"),
                ],
                "222.55.66",
                Some("/usr/local/cuda/compat"),
            ),
            (
                "symlinks stay in the container",
                &[
                    ("compat/libcuda.so.333.88.99", ""),
                    ("usr/local/cuda", "symlink=../../../../../../"),
                ],
                "222.55.66",
                Some("/usr/local/cuda/compat"),
            ),
        ];
        for (description, contents, host, expected) in cases {
            let root = tempfile::tempdir().unwrap();
            for (name, content) in contents {
                let path = root.path().join(name);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                match content.strip_prefix("symlink=") {
                    Some(target) => std::os::unix::fs::symlink(target, &path).unwrap(),
                    None if name.contains("libcuda") => std::fs::write(&path, &so).unwrap(),
                    None => std::fs::write(&path, content).unwrap(),
                }
            }
            let kind = HookEdits::EnableCudaCompat {
                host_driver_version: (!host.is_empty()).then(|| host.to_string()),
                host_cuda_version: None,
                container_root: None,
            };
            let planned = plan(&Config::default(), &kind, Some(root.path())).unwrap();
            let named = planned.files.first().map(|f| f.data.trim_end().to_string());
            assert_eq!(named.as_deref(), expected, "{description}");
        }
    }
}

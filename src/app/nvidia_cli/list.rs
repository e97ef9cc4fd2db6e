//! `list`: the host paths a container with the request receives, one
//! absolute path a line, in NVIDIA's order (libnvidia-container
//! `src/cli/list.c`): device nodes and MIG capability files, then
//! binaries, libraries (64-bit, then 32-bit), IPC sockets and directories,
//! firmware. Planned by the one planner; this module only picks and
//! orders what to print.

use std::io::Write;
use std::path::Path;

use super::{List, Sections};
use crate::app::{Error, Result};
use crate::config::Config;
use crate::planning::image::ImageLayout;
use crate::planning::plan::{MountKind, Plan};
use crate::planning::planner::{self, ImageSource, Inputs, Source};

/// Plans `list`'s request and prints the sections it asks for.
pub fn run(config: &Config, list: &List, out: &mut impl Write) -> Result<()> {
    let planned = planner::plan(
        config,
        Inputs::new(
            Source::Argv {
                asked: &list.asked,
                container: None,
            },
            // Host paths do not depend on the image's layout.
            ImageSource::Layout(ImageLayout::Debian),
        ),
    )?;
    let paths = listing(&planned.plan, list.sections);
    if paths.is_empty() {
        return Err(Error::NothingListed);
    }
    for path in paths {
        writeln!(out, "{}", path.display())?;
    }
    Ok(())
}

/// The host paths of `plan` in `sections`, in NVIDIA's order. Graphics
/// configuration files, which NVIDIA's `list` has no section for, are not
/// printed.
fn listing(plan: &Plan, sections: Sections) -> Vec<&Path> {
    let mut paths: Vec<&Path> = Vec::new();
    if sections.devices {
        paths.extend(plan.devices.iter().map(|d| d.host_path.as_path()));
        // The MIG capability files a container reads to use its MIG devices
        // or to manage MIG (`/proc/driver/nvidia/capabilities/...`).
        paths.extend(
            plan.proc_mask
                .iter()
                .flat_map(|m| &m.files)
                .filter(|f| f.path.starts_with("capabilities"))
                .map(|f| f.source.as_path()),
        );
    }
    let mounts = |kinds: &[MountKind]| -> Vec<&Path> {
        plan.mounts
            .iter()
            .filter(|m| kinds.contains(&m.kind))
            .map(|m| m.source.as_path())
            .collect()
    };
    for (wanted, kinds) in [
        (sections.binaries, &[MountKind::Binary][..]),
        (sections.libraries, &[MountKind::Library]),
        (sections.ipcs, &[MountKind::Socket, MountKind::Directory]),
        (sections.firmwares, &[MountKind::Firmware]),
    ] {
        if wanted {
            paths.extend(mounts(kinds));
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::planning::plan::{DeviceNode, Mount, ProcCopy, ProcFile, ProcMask};

    fn plan() -> Plan {
        let mount = |kind: MountKind, source: &str| Mount {
            kind,
            source: PathBuf::from(source),
            destination: PathBuf::from(source),
            options: kind.options(),
        };
        let file = |path: &str, source: &str| ProcFile {
            path: PathBuf::from(path),
            source: PathBuf::from(source),
            copy: ProcCopy::Verbatim,
        };
        Plan {
            devices: vec![DeviceNode {
                host_path: PathBuf::from("/dev/nvidiactl"),
                path: PathBuf::from("/dev/nvidiactl"),
                major: 195,
                minor: 255,
                mode: 0o666,
                gid: 0,
            }],
            mounts: vec![
                mount(MountKind::Library, "/lib/libcuda.so.535"),
                mount(MountKind::Firmware, "/lib/firmware/gsp.bin"),
                mount(MountKind::Socket, "/run/persistenced/socket"),
                mount(MountKind::Binary, "/bin/nvidia-smi"),
                mount(MountKind::Config, "/etc/vulkan/icd.d/nvidia_icd.json"),
                mount(MountKind::Library, "/lib32/libcuda.so.535"),
                mount(MountKind::Directory, "/tmp/nvidia-mps"),
            ],
            proc_mask: Some(ProcMask {
                path: PathBuf::from("/proc/driver/nvidia"),
                files: vec![
                    file("params", "/proc/driver/nvidia/params"),
                    file(
                        "capabilities/gpu0/mig/gi1/access",
                        "/proc/driver/nvidia/capabilities/gpu0/mig/gi1/access",
                    ),
                ],
                gpus: Vec::new(),
            }),
            ..Plan::default()
        }
    }

    fn all() -> Sections {
        Sections {
            devices: true,
            binaries: true,
            libraries: true,
            ipcs: true,
            firmwares: true,
        }
    }

    #[test]
    fn everything_is_listed_in_nvidias_order() {
        let plan = plan();
        let paths: Vec<&str> = listing(&plan, all())
            .iter()
            .map(|p| p.to_str().unwrap())
            .collect();
        assert_eq!(
            paths,
            [
                "/dev/nvidiactl",
                "/proc/driver/nvidia/capabilities/gpu0/mig/gi1/access",
                "/bin/nvidia-smi",
                "/lib/libcuda.so.535",
                "/lib32/libcuda.so.535",
                "/run/persistenced/socket",
                "/tmp/nvidia-mps",
                "/lib/firmware/gsp.bin",
            ]
        );
    }

    #[test]
    fn only_the_sections_asked_for_are_listed() {
        let plan = plan();
        let libraries = Sections {
            libraries: true,
            ..Sections::default()
        };
        assert_eq!(
            listing(&plan, libraries),
            [
                Path::new("/lib/libcuda.so.535"),
                Path::new("/lib32/libcuda.so.535")
            ]
        );
        assert!(listing(&plan, Sections::default()).is_empty());
    }
}

//! Finds the driver's non-library files in the driver root: programs such as
//! `nvidia-smi`, GSP firmware, daemon sockets, and graphics ICD files.
//!
//! Every path is resolved inside the driver root, and a file is only kept if
//! it is of the expected type: a program must be an ELF executable of the
//! host's architecture, firmware and ICD files must be regular files.

use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::catalog::{self, IpcKind};
use super::root::{DriverRoot, Resolved};
use super::Error;
use crate::host::elf::{self, Arch};
use crate::planning::device_class::{Class, FileKind};
use crate::planning::request::{Capabilities, Capability};

/// A host file to inject, with where it goes in the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFile {
    /// The capability that brings it.
    pub capability: Option<Capability>,
    /// The real file on the host.
    pub path: PathBuf,
    /// Where it goes in the container.
    pub destination: PathBuf,
}

/// A daemon's socket or pipe directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ipc {
    /// The capability that brings it.
    pub capability: Capability,
    /// Socket or directory.
    pub kind: IpcKind,
    /// The path on the host.
    pub path: PathBuf,
    /// The same path inside the container.
    pub destination: PathBuf,
}

/// A file of a feature-gated device, found in the driver root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GatedFile {
    /// The device class whose variable brings it.
    pub gate: Class,
    /// Directory, file or socket.
    pub kind: FileKind,
    /// The path on the host.
    pub path: PathBuf,
    /// The same path inside the container.
    pub destination: PathBuf,
}

/// The files of the [`crate::planning::device_class`] table's classes that exist,
/// each of its kind: looked for every time, as the daemons' sockets are.
/// Directories come first, then files, then sockets.
pub fn gated_files(root: &DriverRoot) -> Vec<GatedFile> {
    let mut files: Vec<GatedFile> = Class::all()
        .flat_map(|gate| gate.row().files.iter().map(move |file| (gate, file)))
        .filter_map(|(gate, &(inner, kind))| {
            let (inner, resolved) = typed(root, inner, kind, |ft| match kind {
                FileKind::Directory => ft.is_dir(),
                FileKind::File => ft.is_file(),
                FileKind::Socket => ft.is_socket(),
            })?;
            Some(GatedFile {
                gate,
                kind,
                path: resolved.host,
                destination: inner,
            })
        })
        .collect();
    files.sort_by_key(|file| file.kind);
    files
}

/// Finds the catalogue's programs; returns those found and the names missing.
pub fn binaries(
    root: &DriverRoot,
    host: Arch,
    scope: &Capabilities,
) -> (Vec<HostFile>, Vec<&'static str>) {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for &(capability, name) in catalog::BINARIES.iter().filter(|(c, _)| scope.contains(*c)) {
        let hit = catalog::BINARY_DIRS.iter().find_map(|dir| {
            let resolved = lookup(root, &Path::new("/").join(dir).join(name))?;
            if !resolved.metadata.is_file() {
                log::warn!("skipping {}: not a regular file", resolved.host.display());
                return None;
            }
            match elf::check_file(&resolved.host, host, elf::Kind::Executable) {
                Ok(()) => Some(resolved.host),
                Err(e) => {
                    log::warn!("skipping {e}");
                    None
                }
            }
        });
        match hit {
            Some(path) => found.push(HostFile {
                capability: Some(capability),
                path,
                destination: Path::new("/usr/bin").join(name),
            }),
            None => missing.push(name),
        }
    }
    (found, missing)
}

/// GSP firmware of the running driver, `lib/firmware/nvidia/<version>/gsp*.bin`.
pub fn firmware(root: &DriverRoot, version: &str) -> Vec<HostFile> {
    let inner_dir = Path::new("/lib/firmware/nvidia").join(version);
    let Some(dir) = lookup(root, &inner_dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = fs::read_dir(&dir.host)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("gsp") && n.ends_with(".bin"))
        .collect();
    names.sort();
    names
        .into_iter()
        .filter_map(|name| {
            let resolved = lookup(root, &dir.inner.join(&name))?;
            if !resolved.metadata.is_file() {
                log::warn!(
                    "skipping firmware {}: not a regular file",
                    resolved.host.display()
                );
                return None;
            }
            Some(HostFile {
                capability: None,
                path: resolved.host,
                destination: inner_dir.join(&name),
            })
        })
        .collect()
}

/// The daemons' sockets and pipe directories that exist.
pub fn ipcs(root: &DriverRoot, scope: &Capabilities) -> Vec<Ipc> {
    catalog::IPCS
        .iter()
        .filter(|(c, _, _)| scope.contains(*c))
        .filter_map(|&(capability, inner, kind)| {
            let (inner, resolved) = typed(root, inner, kind, |ft| match kind {
                IpcKind::Socket => ft.is_socket(),
                IpcKind::Directory => ft.is_dir(),
            })?;
            Some(Ipc {
                capability,
                kind,
                path: resolved.host,
                destination: inner,
            })
        })
        .collect()
}

/// The [`catalog::CONFIGS`] files of `scope` (ICDs, X server modules),
/// the first existing place for each, named for driver `version` and
/// architecture `host`.
pub fn configs(
    root: &DriverRoot,
    version: &str,
    host: Arch,
    scope: &Capabilities,
) -> Vec<HostFile> {
    catalog::CONFIGS
        .iter()
        .filter(|(capability, _)| scope.contains(*capability))
        .filter_map(|&(capability, places)| {
            places.iter().find_map(|inner| {
                let inner = Path::new("/").join(
                    inner
                        .replace(catalog::VERSION, version)
                        .replace(catalog::ARCH, host.name),
                );
                let resolved = lookup(root, &inner)?;
                resolved.metadata.is_file().then_some(HostFile {
                    capability: Some(capability),
                    path: resolved.host,
                    destination: inner,
                })
            })
        })
        .collect()
}

/// `inner` (relative to the root) made absolute and resolved, if it is
/// there and `ok` takes its type; one of another type is said and skipped.
fn typed(
    root: &DriverRoot,
    inner: &str,
    kind: impl std::fmt::Debug,
    ok: impl Fn(fs::FileType) -> bool,
) -> Option<(PathBuf, Resolved)> {
    let inner = Path::new("/").join(inner);
    let resolved = lookup(root, &inner)?;
    if !ok(resolved.metadata.file_type()) {
        log::warn!("skipping {}: not a {kind:?}", resolved.host.display());
        return None;
    }
    Some((inner, resolved))
}

/// Resolves `inner`; absence is quiet, any other failure is logged and skipped.
pub(super) fn lookup(root: &DriverRoot, inner: &Path) -> Option<Resolved> {
    match root.resolve(inner) {
        Ok(resolved) => Some(resolved),
        Err(Error::NotFound { .. }) => None,
        Err(e) => {
            log::warn!("skipping {}: {e}", inner.display());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use goblin::elf::header::{ELFCLASS64, EM_X86_64, ET_EXEC};

    use super::*;
    use crate::host::elf::tests::header;
    use crate::host::elf::X86_64;

    fn root() -> (tempfile::TempDir, DriverRoot) {
        let dir = tempfile::tempdir().unwrap();
        let root = DriverRoot::new(dir.path());
        (dir, root)
    }

    fn write(root: &DriverRoot, inner: &str, bytes: &[u8]) -> PathBuf {
        let host = root.host_path(Path::new(inner));
        fs::create_dir_all(host.parent().unwrap()).unwrap();
        fs::write(&host, bytes).unwrap();
        host
    }

    #[test]
    fn finds_binaries_through_alternatives() {
        let (_d, root) = root();
        let real = write(
            &root,
            "/usr/lib/nvidia/current/nvidia-smi",
            &header(ELFCLASS64, EM_X86_64, ET_EXEC),
        );
        fs::create_dir_all(root.host_path(Path::new("/etc/alternatives"))).unwrap();
        fs::create_dir_all(root.host_path(Path::new("/usr/bin"))).unwrap();
        symlink(
            "/usr/lib/nvidia/current/nvidia-smi",
            root.host_path(Path::new("/etc/alternatives/nvidia--nvidia-smi")),
        )
        .unwrap();
        symlink(
            "/etc/alternatives/nvidia--nvidia-smi",
            root.host_path(Path::new("/usr/bin/nvidia-smi")),
        )
        .unwrap();
        let (found, missing) = binaries(&root, X86_64, &Capabilities::parse("utility").unwrap());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].path, real);
        assert_eq!(found[0].destination, Path::new("/usr/bin/nvidia-smi"));
        assert!(missing.contains(&"nvidia-debugdump"));
        assert!(
            !missing.contains(&"nvidia-cuda-mps-control"),
            "compute is not in scope"
        );
    }

    #[test]
    fn rejects_script_or_directory_as_binary() {
        let (_d, root) = root();
        write(&root, "/usr/bin/nvidia-smi", b"#!/bin/sh\necho hi\n");
        fs::create_dir_all(root.host_path(Path::new("/sbin/nvidia-smi"))).unwrap();
        let (found, missing) = binaries(&root, X86_64, &Capabilities::parse("utility").unwrap());
        assert!(found.is_empty());
        assert!(missing.contains(&"nvidia-smi"));
    }

    #[test]
    fn finds_firmware_of_the_running_version_only() {
        let (_d, root) = root();
        write(
            &root,
            "/lib/firmware/nvidia/535.261.03/gsp_ga10x.bin",
            b"fw",
        );
        write(
            &root,
            "/lib/firmware/nvidia/535.261.03/gsp_tu10x.bin",
            b"fw",
        );
        write(&root, "/lib/firmware/nvidia/535.261.03/README", b"x");
        write(
            &root,
            "/lib/firmware/nvidia/470.256.02/gsp_tu10x.bin",
            b"fw",
        );
        let fw = firmware(&root, "535.261.03");
        let dests: Vec<_> = fw
            .iter()
            .map(|f| f.destination.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            dests,
            [
                "/lib/firmware/nvidia/535.261.03/gsp_ga10x.bin",
                "/lib/firmware/nvidia/535.261.03/gsp_tu10x.bin"
            ]
        );
    }

    #[test]
    fn ipc_socket_must_be_a_socket() {
        let (_d, root) = root();
        write(&root, "/run/nvidia-persistenced/socket", b"not a socket");
        fs::create_dir_all(root.host_path(Path::new("/tmp/nvidia-mps"))).unwrap();
        let found = ipcs(&root, &Capabilities::all());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].kind, IpcKind::Directory);
        let sock = root.host_path(Path::new("/run/nvidia-fabricmanager/socket"));
        fs::create_dir_all(sock.parent().unwrap()).unwrap();
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let found = ipcs(&root, &Capabilities::parse("utility").unwrap());
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].destination,
            Path::new("/run/nvidia-fabricmanager/socket")
        );
    }

    #[test]
    fn graphics_configs_prefer_etc() {
        let (_d, root) = root();
        write(&root, "/usr/share/vulkan/icd.d/nvidia_icd.json", b"{}");
        let etc = write(&root, "/etc/vulkan/icd.d/nvidia_icd.json", b"{}");
        assert!(configs(
            &root,
            "535.261.03",
            X86_64,
            &Capabilities::parse("utility").unwrap()
        )
        .is_empty());
        let found = configs(
            &root,
            "535.261.03",
            X86_64,
            &Capabilities::parse("graphics").unwrap(),
        );
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].path, etc);
    }

    /// NVIDIA v1.18: the architecture's own Vulkan ICD file comes beside
    /// the plain one, and another architecture's does not.
    #[test]
    fn the_architectures_vulkan_icd_comes_beside_the_plain_one() {
        let (_d, root) = root();
        let plain = write(&root, "/usr/share/vulkan/icd.d/nvidia_icd.json", b"{}");
        let own = write(
            &root,
            "/usr/share/vulkan/icd.d/nvidia_icd.x86_64.json",
            b"{}",
        );
        write(
            &root,
            "/usr/share/vulkan/icd.d/nvidia_icd.aarch64.json",
            b"{}",
        );
        let graphics = Capabilities::parse("graphics").unwrap();
        let found: Vec<PathBuf> = configs(&root, "535.261.03", X86_64, &graphics)
            .into_iter()
            .map(|f| f.path)
            .collect();
        assert_eq!(found, [plain, own]);
    }

    /// graphics_test.go: the EGL external platform files come with graphics.
    #[test]
    fn egl_external_platforms_come_with_graphics() {
        let (_d, root) = root();
        let gbm = write(
            &root,
            "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
            b"{}",
        );
        let found = configs(
            &root,
            "535.261.03",
            X86_64,
            &Capabilities::parse("display").unwrap(),
        );
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].path, gbm);
        assert_eq!(
            found[0].destination,
            Path::new("/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json")
        );
    }
}

//! WSL2 hosts: the driver runs on Windows, and Linux sees one device node,
//! `/dev/dxg` (a misc character device), the libraries Windows exposes in
//! `/usr/lib/wsl/lib`, and the driver store under `/usr/lib/wsl/drivers`
//! (one directory per installed driver, `nv_dispi.inf_amd64_<hash>`).
//! There is no `/proc/driver/nvidia` and no `/dev/nvidia*`.
//!
//! A host is WSL2 when its dev root has `dev/dxg` and its proc root has no
//! `driver/nvidia`. The files taken are the ones NVIDIA's `wsl` discovery
//! mode takes (nvidia-container-toolkit `pkg/nvcdi/driver-wsl.go`), each
//! looked for in the driver store first, then in `/usr/lib/wsl/lib`,
//! resolved inside the driver root and checked as every library is (an ELF
//! shared object of the host's architecture; a program an ELF executable).
//!
//! NVIDIA finds the driver store by asking `libdxcore.so`, that is by
//! loading driver code. We never load it for discovery: the driver store is
//! the directory under `/usr/lib/wsl/drivers` that holds `libcuda.so.1.1`,
//! the newest when several do (Windows keeps an old driver's directory
//! until it is cleaned up). WSL shows Linux no driver version without
//! driver code either; the driver store directory's name stands in for it,
//! since Windows names each installed driver's directory anew (its INF
//! hash), so a spec made for one driver is still told from another's.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::files::lookup;
use super::libraries::{Library, MissingLibrary};
use super::nodes::{self, Node, NodeProblem, NodeRole, NodeState};
use super::root::DriverRoot;
use super::{Error, Result};
use crate::config::DriverConfig;
use crate::host::elf::{self, Arch};
use crate::planning::request::Capability;

/// The WSL2 device node's name below `/dev`.
pub const DXG: &str = "dxg";
/// The misc devices' major, which `/dev/dxg` has.
pub const MISC_MAJOR: u32 = 10;
/// The directory of the libraries WSL exposes.
pub const LIB_DIR: &str = "/usr/lib/wsl/lib";
/// The directory holding each installed driver's driver store.
pub const DRIVERS_DIR: &str = "/usr/lib/wsl/drivers";
/// The file that marks a driver store as NVIDIA's.
const STORE_MARK: &str = "libcuda.so.1.1";

/// What a WSL file is, which decides how it is checked and planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WslKind {
    /// A shared library: checked as ELF, listed in the loader cache.
    Library,
    /// A program: checked as an ELF executable, linked into `/usr/bin`.
    Program,
    /// A data file the libraries read (`nvcubins.bin`).
    Data,
}

/// One file NVIDIA's `wsl` mode injects.
#[derive(Debug, Clone, Copy)]
pub struct WslSpec {
    /// Its file name in the driver store or `/usr/lib/wsl/lib`.
    pub name: &'static str,
    /// The name programs load it by, for libraries.
    pub soname: Option<&'static str>,
    /// The prefix it is listed under among the inventory's libraries.
    pub prefix: &'static str,
    /// What it is.
    pub kind: WslKind,
    /// The capability it serves.
    pub capability: Capability,
    /// Whether that capability cannot work without it.
    pub core: bool,
}

const fn spec(
    name: &'static str,
    soname: Option<&'static str>,
    prefix: &'static str,
    kind: WslKind,
    capability: Capability,
    core: bool,
) -> WslSpec {
    WslSpec {
        name,
        soname,
        prefix,
        kind,
        capability,
        core,
    }
}

/// NVIDIA's `requiredDriverStoreFiles`, in its order.
pub const FILES: &[WslSpec] = {
    use Capability::{Compute, Utility};
    use WslKind::{Data, Library as Lib, Program};
    &[
        spec(
            "libcuda.so.1.1",
            Some("libcuda.so.1"),
            "libcuda.so",
            Lib,
            Compute,
            true,
        ),
        spec(
            "libcuda_loader.so",
            Some("libcuda_loader.so"),
            "libcuda_loader.so",
            Lib,
            Compute,
            false,
        ),
        spec(
            "libnvidia-ptxjitcompiler.so.1",
            Some("libnvidia-ptxjitcompiler.so.1"),
            "libnvidia-ptxjitcompiler.so",
            Lib,
            Compute,
            false,
        ),
        spec(
            "libnvidia-ml.so.1",
            Some("libnvidia-ml.so.1"),
            "libnvidia-ml.so",
            Lib,
            Utility,
            true,
        ),
        spec(
            "libnvidia-ml_loader.so",
            Some("libnvidia-ml_loader.so"),
            "libnvidia-ml_loader.so",
            Lib,
            Utility,
            false,
        ),
        // dxcore is every capability's way to the adapter: utility and compute both need it.
        spec(
            "libdxcore.so",
            Some("libdxcore.so"),
            "libdxcore.so",
            Lib,
            Utility,
            true,
        ),
        spec(
            "libnvdxgdmal.so.1",
            Some("libnvdxgdmal.so.1"),
            "libnvdxgdmal.so",
            Lib,
            Compute,
            false,
        ),
        spec("nvcubins.bin", None, "nvcubins.bin", Data, Compute, false),
        spec("nvidia-smi", None, "nvidia-smi", Program, Utility, false),
    ]
};

/// A WSL file found on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WslFile {
    /// Its file name, as [`FILES`] names it.
    pub name: &'static str,
    /// What it is.
    pub kind: WslKind,
    /// The name programs load it by, for libraries.
    pub soname: Option<&'static str>,
    /// The real file on the host (no symlink).
    pub path: PathBuf,
    /// Where it was found, as seen inside the driver root: the container
    /// gets it at the same path, as NVIDIA mounts it.
    pub destination: PathBuf,
}

/// A WSL2 host's driver: what the planner injects instead of a native
/// driver's nodes and files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Wsl {
    /// The driver store, as seen inside the driver root.
    pub store: PathBuf,
    /// The files found, in [`FILES`] order.
    pub files: Vec<WslFile>,
    /// The names of [`FILES`] the host lacks.
    pub missing: Vec<&'static str>,
}

impl Wsl {
    /// The directories the container's loader searches: the driver store
    /// and `/usr/lib/wsl/lib`, which NVIDIA's mode always adds.
    pub fn loader_dirs(&self) -> Vec<PathBuf> {
        vec![self.store.clone(), PathBuf::from(LIB_DIR)]
    }
}

/// Whether `config` describes a WSL2 host: `dev/dxg` under the dev root
/// (whatever it is: a wrong one is reported by the inventory) and no
/// `driver/nvidia` under the proc root.
pub fn detect(config: &DriverConfig) -> bool {
    let dxg = config.dev_root.join("dev").join(DXG);
    fs::symlink_metadata(&dxg).is_ok()
        && matches!(
            fs::symlink_metadata(config.proc_root.join("driver/nvidia")),
            Err(e) if e.kind() == io::ErrorKind::NotFound
        )
}

/// `/dev/dxg`, checked: major 10, and the minor `<proc-root>/misc` lists for
/// `dxg` (the node's own where procfs does not say).
pub fn node(config: &DriverConfig) -> Node {
    let host_path = config.dev_root.join("dev").join(DXG);
    let misc = config.proc_root.join("misc");
    let listed = match crate::util::bounded_read::read_text(&misc) {
        Ok(text) => misc_minor(&text, DXG),
        Err(e) => {
            log::debug!("cannot read {}: {e}", misc.display());
            None
        }
    };
    let stat = nodes::stat(&host_path);
    let minor = listed.or(match stat {
        Ok(nodes::Stat::Char { minor, .. }) => Some(minor),
        _ => None,
    });
    let state = match (&stat, minor) {
        (Ok(s), Some(minor)) => nodes::judge(*s, MISC_MAJOR, minor),
        (Ok(s), None) => nodes::judge(*s, MISC_MAJOR, 0),
        (Err(e), _) => NodeState::Wrong(NodeProblem::stat(e)),
    };
    Node {
        role: NodeRole::Dxg,
        path: Path::new("/dev").join(DXG),
        host_path,
        major: MISC_MAJOR,
        minor: minor.unwrap_or(0),
        state,
    }
}

/// The minor `/proc/misc` (lines `<minor> <name>`) lists for `name`.
pub fn misc_minor(text: &str, name: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let minor = fields.next()?.parse().ok()?;
        (fields.next()? == name && fields.next().is_none()).then_some(minor)
    })
}

/// The driver store: the directory under [`DRIVERS_DIR`] holding
/// [`STORE_MARK`], the newest by that file's modification time.
pub fn driver_store(root: &DriverRoot) -> Result<PathBuf> {
    let none = || Error::WslNoDriverStore {
        root: root.path().to_path_buf(),
        dir: DRIVERS_DIR,
        mark: STORE_MARK,
    };
    let dir = match root.resolve(Path::new(DRIVERS_DIR)) {
        Ok(dir) => dir,
        Err(Error::NotFound { .. }) => return Err(none()),
        Err(e) => return Err(e),
    };
    let entries = fs::read_dir(&dir.host).map_err(|source| Error::Read {
        path: dir.host.clone(),
        source,
    })?;
    let mut stores: Vec<(i64, PathBuf)> = Vec::new();
    for entry in entries.flatten() {
        let inner = dir.inner.join(entry.file_name()).join(STORE_MARK);
        if let Some(found) = lookup(root, &inner).filter(|r| r.metadata.is_file()) {
            if let Some(store) = inner.parent() {
                stores.push((found.metadata.mtime(), store.to_path_buf()));
            }
        }
    }
    stores.sort();
    if stores.len() > 1 {
        log::warn!(
            "several WSL driver stores hold {STORE_MARK}: {:?}; taking the newest",
            stores.iter().map(|(_, s)| s).collect::<Vec<_>>()
        );
    }
    stores.pop().map(|(_, store)| store).ok_or_else(none)
}

/// The files of [`FILES`] the host has, each from the driver store first,
/// then from [`LIB_DIR`], checked for its kind; with the names missing.
pub fn files(root: &DriverRoot, store: &Path, host: Arch) -> Wsl {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for spec in FILES {
        let hit = [store, Path::new(LIB_DIR)].into_iter().find_map(|dir| {
            let inner = dir.join(spec.name);
            let resolved = lookup(root, &inner)?;
            if !resolved.metadata.is_file() {
                log::warn!("skipping {}: not a regular file", resolved.host.display());
                return None;
            }
            let kind = match spec.kind {
                WslKind::Library => Some(elf::Kind::SharedObject),
                WslKind::Program => Some(elf::Kind::Executable),
                WslKind::Data => None,
            };
            if let Some(kind) = kind {
                if let Err(e) = elf::check_file(&resolved.host, host, kind) {
                    log::warn!("skipping {e}");
                    return None;
                }
            }
            Some(WslFile {
                name: spec.name,
                kind: spec.kind,
                soname: spec.soname,
                path: resolved.host,
                destination: inner,
            })
        });
        match hit {
            Some(file) => found.push(file),
            None => missing.push(spec.name),
        }
    }
    Wsl {
        store: store.to_path_buf(),
        files: found,
        missing,
    }
}

/// The WSL libraries as the inventory lists every driver library, and the
/// missing ones as it lists those.
pub fn libraries(wsl: &Wsl, host: Arch) -> (Vec<Library>, Vec<MissingLibrary>) {
    let spec_of = |name: &str| FILES.iter().find(|s| s.name == name);
    let libraries = wsl
        .files
        .iter()
        .filter(|f| f.kind == WslKind::Library)
        .filter_map(|f| {
            let spec = spec_of(f.name)?;
            Some(Library {
                capability: Some(spec.capability),
                prefix: spec.prefix.to_string(),
                soname: spec.soname?.to_string(),
                arch: host.name,
                path: f.path.clone(),
            })
        })
        .collect();
    let missing = wsl
        .missing
        .iter()
        .filter_map(|name| spec_of(name))
        .map(|spec| MissingLibrary {
            capability: spec.capability,
            prefix: spec.prefix,
            core: spec.core,
        })
        .collect();
    (libraries, missing)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use goblin::elf::header::{ELFCLASS64, EM_X86_64, ET_DYN, ET_EXEC};

    use super::*;
    use crate::host::elf::tests::header;
    use crate::host::elf::X86_64;

    const STORE: &str = "usr/lib/wsl/drivers/nv_dispi.inf_amd64_0123456789abcdef";

    fn write(root: &Path, rel: &str, bytes: &[u8]) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, bytes).unwrap();
    }

    fn so() -> Vec<u8> {
        header(ELFCLASS64, EM_X86_64, ET_DYN)
    }

    fn config(dir: &Path) -> DriverConfig {
        DriverConfig {
            root: dir.join("driver"),
            dev_root: dir.join("devroot"),
            proc_root: dir.join("proc"),
            sys_root: dir.join("sys"),
            snapshot_dir: None,
            library_search_paths: Vec::new(),
            csv: Default::default(),
        }
    }

    #[test]
    fn a_host_is_wsl_with_dev_dxg_and_without_the_kernel_modules_procfs() {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path());
        fs::create_dir_all(config.dev_root.join("dev")).unwrap();
        fs::create_dir_all(&config.proc_root).unwrap();
        assert!(!detect(&config), "no dxg: not WSL");
        fs::write(config.dev_root.join("dev/dxg"), b"").unwrap();
        assert!(detect(&config), "dxg and no driver/nvidia: WSL");
        fs::create_dir_all(config.proc_root.join("driver/nvidia")).unwrap();
        assert!(!detect(&config), "a native driver's procfs: not WSL");
    }

    #[test]
    fn the_dxg_node_is_judged_against_the_misc_major_and_proc_misc() {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path());
        fs::create_dir_all(config.dev_root.join("dev")).unwrap();
        fs::create_dir_all(&config.proc_root).unwrap();
        fs::write(config.dev_root.join("dev/dxg"), b"").unwrap();
        fs::write(config.proc_root.join("misc"), "183 hw_random\n 61 dxg\n").unwrap();
        let node = node(&config);
        assert_eq!((node.major, node.minor), (10, 61));
        assert_eq!(node.path, Path::new("/dev/dxg"));
        assert!(
            matches!(&node.state, NodeState::Wrong(w) if w.to_string().contains("regular file")),
            "{:?}",
            node.state
        );
        assert_eq!(misc_minor("61 dxgkrnl\n", DXG), None);
        assert_eq!(misc_minor(" 7 dxg\n", DXG), Some(7));
    }

    #[test]
    fn files_come_from_the_driver_store_first_then_the_wsl_lib_dir_each_checked() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, &format!("{STORE}/libcuda.so.1.1"), &so());
        write(root, "usr/lib/wsl/lib/libcuda.so.1.1", &so());
        write(root, &format!("{STORE}/libnvidia-ml.so.1"), &so());
        write(root, "usr/lib/wsl/lib/libdxcore.so", &so());
        // An executable where a library belongs, and a script where the program does.
        write(
            root,
            &format!("{STORE}/libnvidia-ptxjitcompiler.so.1"),
            &header(ELFCLASS64, EM_X86_64, ET_EXEC),
        );
        write(root, &format!("{STORE}/nvidia-smi"), b"#!/bin/sh\n");
        write(root, &format!("{STORE}/nvcubins.bin"), b"cubins");
        symlink(
            "libdxcore.so",
            root.join("usr/lib/wsl/lib/libnvdxgdmal.so.1"),
        )
        .unwrap();
        let droot = DriverRoot::new(root);
        let store = driver_store(&droot).unwrap();
        assert_eq!(store, Path::new("/").join(STORE));
        let wsl = files(&droot, &store, X86_64);
        let got: Vec<(&str, PathBuf)> = wsl
            .files
            .iter()
            .map(|f| (f.name, f.destination.clone()))
            .collect();
        let at = |dir: &str, name: &str| Path::new("/").join(dir).join(name);
        assert_eq!(
            got,
            vec![
                ("libcuda.so.1.1", at(STORE, "libcuda.so.1.1")),
                ("libnvidia-ml.so.1", at(STORE, "libnvidia-ml.so.1")),
                ("libdxcore.so", at("usr/lib/wsl/lib", "libdxcore.so")),
                (
                    "libnvdxgdmal.so.1",
                    at("usr/lib/wsl/lib", "libnvdxgdmal.so.1")
                ),
                ("nvcubins.bin", at(STORE, "nvcubins.bin")),
            ]
        );
        // A link is mounted at its own name, from the real file behind it.
        assert_eq!(wsl.files[3].path, root.join("usr/lib/wsl/lib/libdxcore.so"));
        assert_eq!(
            wsl.missing,
            vec![
                "libcuda_loader.so",
                "libnvidia-ptxjitcompiler.so.1",
                "libnvidia-ml_loader.so",
                "nvidia-smi"
            ]
        );
        let (libs, missing) = libraries(&wsl, X86_64);
        let cuda = libs.iter().find(|l| l.prefix == "libcuda.so").unwrap();
        assert_eq!(
            (cuda.soname.as_str(), cuda.capability),
            ("libcuda.so.1", Some(Capability::Compute))
        );
        assert!(missing.iter().all(|m| !m.core), "{missing:?}");
    }

    #[test]
    fn without_a_driver_store_holding_libcuda_discovery_says_where_it_looked() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "usr/lib/wsl/drivers/other.inf_amd64_1/libfoo.so",
            &so(),
        );
        let err = driver_store(&DriverRoot::new(dir.path())).unwrap_err();
        assert!(err.to_string().contains("libcuda.so.1.1"), "{err}");
    }
}

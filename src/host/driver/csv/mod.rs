//! Jetson, IGX and other integrated-GPU (Tegra) hosts: no
//! `/proc/driver/nvidia`, no `/dev/nvidia0`; the files a container needs
//! are listed in NVIDIA's CSV mount specs ([`format`]), which L4T's
//! packages install. NVIDIA serves them through its `csv` mode
//! (nvidia-container-toolkit `internal/platform-support/tegra`,
//! `pkg/nvcdi/lib-csv.go`); here they are one more source of the one
//! inventory, each entry checked as every other source's files are:
//!
//! - `dev`: a character device under the dev root (its numbers are the
//!   node's own: no procfs says what they must be);
//! - `lib`: a regular file resolved inside the driver root; an ELF file
//!   must be of the host's architecture, and a shared object's SONAME is
//!   read for the loader cache;
//! - `sym`: a symlink inside the driver root, each link of its chain
//!   recreated in the container, the file it ends at mounted;
//! - `dir`: a directory resolved inside the driver root.
//!
//! An entry the host lacks is reported and skipped, as NVIDIA skips it.
//!
//! A host is a CSV host as NVIDIA's `auto` finds a Tegra one
//! (go-nvlib `HasTegraFiles`): `/etc/nv_tegra_release` in the driver root,
//! or a `devices/soc0/family` in the sysfs starting with `tegra`; and,
//! here, no `driver/nvidia` in the proc root (a loaded native driver is
//! served as one, as NVIDIA serves a Tegra host with NVML through NVML).

pub mod format;

use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use super::files::lookup;
use super::libraries::Library;
use super::nodes::{self, Node, NodeProblem, NodeRole, NodeState};
use super::root::DriverRoot;
use super::{catalog, Error, Result};
pub use crate::config::CsvSelection;
use crate::config::DriverConfig;
use crate::host::elf::{self, Arch};
pub use format::{Entry, EntryKind};

/// The file whose presence in the driver root marks a Tegra host; NVIDIA
/// also mounts it into every container.
pub const TEGRA_RELEASE: &str = "/etc/nv_tegra_release";
/// The sysfs file whose `tegra…` content marks a Tegra host.
pub const SOC_FAMILY: &str = "devices/soc0/family";
/// Largest `devices/soc0/family` read.
const MAX_FAMILY: usize = 4096;
/// Most links followed in one `sym` entry's chain.
const MAX_CHAIN: usize = 16;

/// What a host's CSV files list, found and checked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Csv {
    /// The CSV files read (host paths).
    pub files: Vec<PathBuf>,
    /// `lib` entries and the files `sym` chains end at: each regular file
    /// once, at its path inside the driver root.
    pub files_listed: Vec<ListedFile>,
    /// Links of `sym` entries, to recreate: each link once.
    pub links: Vec<ListedLink>,
    /// `dir` entries found: each at the path listed, from the directory it resolves to.
    pub dirs: Vec<ListedFile>,
    /// Entries the host lacks or that failed their check, each with why.
    pub skipped: Vec<Skipped>,
    /// `/etc/nv_tegra_release` in the driver root, when it has one.
    pub release: Option<ListedFile>,
}

/// A file or directory a CSV file lists, found inside the driver root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListedFile {
    /// The real file on the host.
    pub host: PathBuf,
    /// Where it is inside the driver root (links resolved), and so in the container.
    pub inner: PathBuf,
    /// A shared object's SONAME, for the loader cache.
    pub soname: Option<String>,
}

/// A link of a `sym` entry's chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListedLink {
    /// The link, inside the driver root (its directory resolved).
    pub path: PathBuf,
    /// Its target, as written on the host.
    pub target: PathBuf,
}

/// An entry left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// Its type.
    pub kind: EntryKind,
    /// Its path, as listed.
    pub path: PathBuf,
    /// Why.
    pub reason: String,
}

/// Whether `config` describes a CSV (Tegra) host: Tegra's files (see the
/// module's documentation), and no native driver's procfs.
pub fn detect(config: &DriverConfig) -> bool {
    let native = !matches!(
        fs::symlink_metadata(config.proc_root.join("driver/nvidia")),
        Err(e) if e.kind() == io::ErrorKind::NotFound
    );
    !native && has_tegra_files(config)
}

/// NVIDIA's `HasTegraFiles`, under `config`'s roots.
pub fn has_tegra_files(config: &DriverConfig) -> bool {
    let root = DriverRoot::new(&config.root);
    if lookup(&root, Path::new(TEGRA_RELEASE)).is_some_and(|r| !r.metadata.is_dir()) {
        return true;
    }
    let family = config.sys_root.join(SOC_FAMILY);
    match crate::util::hostfile::read(&family, MAX_FAMILY) {
        Ok(text) => text
            .get(..5)
            .is_some_and(|head| head.eq_ignore_ascii_case(b"tegra")),
        Err(e) => {
            if e.kind() != io::ErrorKind::NotFound {
                log::debug!("cannot read {}: {e}", family.display());
            }
            false
        }
    }
}

/// The CSV files `selection` names: its own, or every one or the base
/// files of [`format::DIR`] inside the driver root that exist.
pub fn csv_files(root: &DriverRoot, selection: &CsvSelection) -> Vec<PathBuf> {
    if let Some(files) = &selection.files {
        return files.iter().take(format::MAX_FILES).cloned().collect();
    }
    if selection.all {
        return all_csv_files(root);
    }
    let Some(dir) = lookup(root, Path::new(format::DIR)).filter(|d| d.metadata.is_dir()) else {
        log::debug!("no {} in {}", format::DIR, root.path().display());
        return Vec::new();
    };
    format::BASE_FILES
        .iter()
        .map(|name| dir.host.join(name))
        .filter(|path| path.exists())
        .collect()
}

/// Every CSV file in the directory, as `NVIDIA_REQUIRE_JETPACK=csv-mounts=all`
/// takes them, sorted; for listing what a host's files provide.
pub fn all_csv_files(root: &DriverRoot) -> Vec<PathBuf> {
    let Some(dir) = lookup(root, Path::new(format::DIR)).filter(|d| d.metadata.is_dir()) else {
        return Vec::new();
    };
    let Ok(entries) = fs::read_dir(&dir.host) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .filter(|e| format::is_csv_name(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect();
    files.sort();
    files.truncate(format::MAX_FILES);
    files
}

/// The entries of `files`, in order; a file that cannot be read, or lists
/// nothing, is skipped with a warning, as NVIDIA skips it.
pub fn read_entries(files: &[PathBuf]) -> (Vec<PathBuf>, Vec<Entry>) {
    let mut read = Vec::new();
    let mut entries = Vec::new();
    for file in files {
        let text = match crate::util::hostfile::read(file, format::MAX_FILE) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => {
                log::warn!("skipping CSV file {}: {e}", file.display());
                continue;
            }
        };
        let listed = format::parse(file, &text);
        if listed.is_empty() {
            log::warn!("skipping CSV file {}: it lists nothing", file.display());
            continue;
        }
        read.push(file.clone());
        entries.extend(listed);
    }
    (read, entries)
}

/// The host's CSV inventory: `entries`' nodes under `dev_root`, and its
/// files, links and directories inside `root`, each checked; the nodes
/// are returned apart, for the inventory's node list.
pub fn inventory(
    root: &DriverRoot,
    dev_root: &Path,
    files: Vec<PathBuf>,
    entries: &[Entry],
    ignore_patterns: &[String],
    host: Arch,
) -> (Csv, Vec<Node>) {
    let mut csv = Csv {
        files,
        ..Csv::default()
    };
    let mut found_nodes: Vec<Node> = Vec::new();
    for entry in entries {
        let outcome = match entry.kind {
            EntryKind::Dev => node(dev_root, &entry.path).map(|node| {
                if !found_nodes.iter().any(|n| n.path == node.path) {
                    found_nodes.push(node);
                }
            }),
            EntryKind::Lib => listed_file(root, &entry.path, host).map(|f| csv.add_file(f)),
            EntryKind::Sym if format::ignored(ignore_patterns, &entry.path) => {
                log::debug!("{}: ignored by pattern", entry.path.display());
                Ok(())
            }
            EntryKind::Sym => chain(root, &entry.path, host, &mut csv),
            EntryKind::Dir => listed_dir(root, &entry.path).map(|d| {
                if !csv.dirs.contains(&d) {
                    csv.dirs.push(d);
                }
            }),
        };
        if let Err(reason) = outcome {
            // NVIDIA warns ("Could not locate"); info and doctor list them here.
            log::debug!(
                "skipping {} {}: {reason}",
                entry.kind.name(),
                entry.path.display()
            );
            csv.skipped.push(Skipped {
                kind: entry.kind,
                path: entry.path.clone(),
                reason,
            });
        }
    }
    csv.release = lookup(root, Path::new(TEGRA_RELEASE))
        .filter(|r| r.metadata.is_file())
        .map(|r| ListedFile {
            host: r.host,
            inner: r.inner,
            soname: None,
        });
    (csv, found_nodes)
}

impl Csv {
    /// The CSV files read, as one line.
    pub fn files_line(&self) -> String {
        let files: Vec<String> = self.files.iter().map(|f| f.display().to_string()).collect();
        files.join(", ")
    }

    fn add_file(&mut self, file: ListedFile) {
        if !self.files_listed.iter().any(|f| f.inner == file.inner) {
            self.files_listed.push(file);
        }
    }

    /// The listed shared objects with a SONAME, as the inventory lists
    /// every driver library: each of the family its name has, if any.
    pub fn libraries(&self, host: Arch) -> Vec<Library> {
        self.files_listed
            .iter()
            .filter_map(|f| {
                let soname = f.soname.clone()?;
                let prefix = catalog::dev_name(&soname).unwrap_or(&soname).to_string();
                Some(Library {
                    capability: catalog::library_for(&soname).map(|spec| spec.capability),
                    prefix,
                    soname,
                    arch: host.name,
                    path: f.host.clone(),
                })
            })
            .collect()
    }

    /// The directories of the listed libraries, for the loader cache and
    /// configuration (NVIDIA's `update-ldcache --folder`), each once.
    pub fn library_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for dir in self
            .files_listed
            .iter()
            .filter(|f| f.soname.is_some())
            .filter_map(|f| f.inner.parent())
        {
            if !dirs.iter().any(|d| d == dir) {
                dirs.push(dir.to_path_buf());
            }
        }
        dirs
    }
}

/// A listed path as a path inside a root: absolute, without `..`.
fn inner_path(listed: &Path) -> std::result::Result<PathBuf, String> {
    if listed.components().any(|c| c == Component::ParentDir) {
        return Err("a path with `..` is refused".into());
    }
    Ok(Path::new("/").join(listed))
}

/// A `dev` entry: a character device under `dev_root` (a bare name is in
/// `/dev`), at the same path in the container.
fn node(dev_root: &Path, listed: &Path) -> std::result::Result<Node, String> {
    let inner = if listed.is_absolute() {
        inner_path(listed)?
    } else {
        inner_path(&Path::new("/dev").join(listed))?
    };
    let host_path = dev_root.join(inner.strip_prefix("/").unwrap_or(&inner));
    match nodes::stat(&host_path) {
        Ok(nodes::Stat::Char {
            major,
            minor,
            mode,
            gid,
        }) => Ok(Node {
            role: NodeRole::Listed,
            path: inner,
            host_path,
            major,
            minor,
            state: NodeState::Ok { mode, gid },
        }),
        Ok(nodes::Stat::Missing) => Err(format!("{} does not exist", host_path.display())),
        Ok(nodes::Stat::Other(kind)) => Err(format!(
            "{} {}",
            host_path.display(),
            NodeProblem::NotCharDevice(kind)
        )),
        Err(e) => Err(format!(
            "{}: {}",
            host_path.display(),
            NodeProblem::stat(&e)
        )),
    }
}

/// A `lib` entry (or the end of a `sym` chain): a regular file inside the
/// root; an ELF file must be for `host`, a shared object's SONAME is read.
fn listed_file(
    root: &DriverRoot,
    listed: &Path,
    host: Arch,
) -> std::result::Result<ListedFile, String> {
    let resolved = root
        .resolve(&inner_path(listed)?)
        .map_err(|e| e.to_string())?;
    if !resolved.metadata.is_file() {
        return Err(format!("{} is not a regular file", resolved.host.display()));
    }
    let (file, _) =
        crate::util::hostfile::open_regular(&resolved.host).map_err(|e| e.to_string())?;
    let mut magic = [0u8; 4];
    let is_elf = std::os::unix::fs::FileExt::read_at(&file, &mut magic, 0)
        .is_ok_and(|n| n == 4 && &magic == b"\x7fELF");
    let soname = if is_elf {
        let name = resolved
            .inner
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match elf::check_file(&resolved.host, host, elf::Kind::Executable) {
            Ok(()) => elf::shared_object(&file)
                .filter(|so| so.arch.name == host.name)
                .map(|so| so.soname)
                .filter(|_| name.contains(".so")),
            Err(e) => return Err(e.to_string()),
        }
    } else {
        None
    };
    Ok(ListedFile {
        host: resolved.host,
        inner: resolved.inner,
        soname,
    })
}

/// A `dir` entry: a directory resolved inside the root, which the
/// container gets at the path listed (as NVIDIA mounts it: `/usr/local/cuda`
/// stays that, though the host's is a link to `cuda-12.6`).
fn listed_dir(root: &DriverRoot, listed: &Path) -> std::result::Result<ListedFile, String> {
    let inner = inner_path(listed)?;
    let resolved = root.resolve(&inner).map_err(|e| e.to_string())?;
    if !resolved.metadata.is_dir() {
        return Err(format!("{} is not a directory", resolved.host.display()));
    }
    Ok(ListedFile {
        host: resolved.host,
        inner,
        soname: None,
    })
}

/// A `sym` entry: each link of its chain (its directory resolved inside
/// the root) to recreate with its own target, and the regular file the
/// chain ends at, to mount.
fn chain(
    root: &DriverRoot,
    listed: &Path,
    host: Arch,
    csv: &mut Csv,
) -> std::result::Result<(), String> {
    let mut at = inner_path(listed)?;
    let mut links = Vec::new();
    for _ in 0..MAX_CHAIN {
        let (Some(parent), Some(name)) = (at.parent(), at.file_name()) else {
            return Err(format!("{} is not a file", at.display()));
        };
        let dir = root.resolve(parent).map_err(|e| e.to_string())?;
        let host_path = dir.host.join(name);
        let meta = fs::symlink_metadata(&host_path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => format!("{} does not exist", host_path.display()),
            _ => format!("{}: {e}", host_path.display()),
        })?;
        let link = dir.inner.join(name);
        if !meta.file_type().is_symlink() {
            if links.is_empty() {
                return Err(format!("{} is not a symlink", host_path.display()));
            }
            break;
        }
        let target = fs::read_link(&host_path).map_err(|e| e.to_string())?;
        if target.as_os_str().is_empty() || target.as_os_str().as_bytes().contains(&0) {
            return Err(format!("{} has an empty target", host_path.display()));
        }
        at = if target.is_absolute() {
            target.clone()
        } else {
            dir.inner.join(&target)
        };
        links.push(ListedLink { path: link, target });
    }
    // The chain must end at a regular file inside the root, checked as a `lib` entry is.
    let end = listed_file(root, &inner_path(listed)?, host)?;
    csv.add_file(end);
    for link in links {
        if !csv.links.iter().any(|l| l.path == link.path) {
            csv.links.push(link);
        }
    }
    Ok(())
}

/// The L4T release `/etc/nv_tegra_release` names (`# R36 (release),
/// REVISION: 4.3, …` is `R36.4.3`), which stands in for a driver version.
pub fn release_version(text: &str) -> Option<String> {
    let line = text.lines().next()?.trim_start_matches('#').trim();
    let major = line.split_whitespace().next()?;
    let digits = major.strip_prefix('R')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let revision = line
        .split(',')
        .find_map(|field| field.trim().strip_prefix("REVISION:"))
        .map(str::trim)
        .filter(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit() || b == b'.'));
    Some(match revision {
        Some(revision) => format!("{major}.{revision}"),
        None => major.to_string(),
    })
}

/// The CSV host's inventory parts, from `config` and `selection`.
pub fn discover(
    config: &DriverConfig,
    selection: &CsvSelection,
    host: Arch,
) -> Result<(Csv, Vec<Node>)> {
    let root = DriverRoot::new(&config.root);
    let files = csv_files(&root, selection);
    if files.is_empty() {
        return Err(Error::NoCsvFiles {
            root: config.root.clone(),
            dir: format::DIR,
        });
    }
    let (read, entries) = read_entries(&files);
    Ok(inventory(
        &root,
        &config.dev_root,
        read,
        &entries,
        &selection.ignore_patterns,
        host,
    ))
}

#[cfg(test)]
mod tests;

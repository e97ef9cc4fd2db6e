//! Finds what the driver ships beyond the catalogue's cache entries, as
//! NVIDIA's CDI discovery does: every `lib*.so.<version>` in the
//! directories that hold the running driver's libraries (and their
//! `vdpau/`), and the families versioned on their own there (the EGL
//! platforms, NVVM 7.0). Where the loader cache lists no library of the
//! running driver (Talos, NixOS-style hosts), the configured search paths
//! and the standard library directories are scanned the same way.
//!
//! Never leaves the driver root: directories and files are resolved inside
//! it, and every file is checked as a cache entry is (a regular file, an
//! ELF shared object of the directory's architecture), its SONAME read
//! from it. A file of another driver version is never taken, and one
//! versioned on its own only from a directory that holds the running
//! driver's versioned libraries. The work is bounded: [`MAX_ENTRIES`]
//! entries read per directory, [`MAX_FILES`] files checked in all.

use std::fs;
use std::path::{Path, PathBuf};

use super::catalog;
use super::files::lookup;
use super::libraries::{archs, Library};
use super::root::DriverRoot;
use crate::host::elf::{self, Arch};
use crate::planning::request::Capabilities;

/// Directory entries read from one directory; a host's library directory
/// has a few thousand.
pub const MAX_ENTRIES: usize = 65_536;

/// Files checked (resolved, ELF header and SONAME read) in one discovery; a
/// driver ships about 60 libraries per architecture.
pub const MAX_FILES: usize = 1_024;

/// What a file name says it is; versioned first, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Named {
    /// `lib*.so.<version>` of the running driver.
    Versioned,
    /// A catalogue family versioned on its own (`libnvidia-egl-gbm.so.1.1.0`).
    OwnVersion,
}

/// How a name is judged: by the running driver's suffix.
struct Names {
    suffix: String,
}

impl Names {
    fn new(version: &str) -> Names {
        Names {
            suffix: format!(".so.{version}"),
        }
    }

    /// What `name` is, if it is a library to look at.
    fn judge(&self, name: &str) -> Option<Named> {
        if !name.starts_with("lib") || name.starts_with(catalog::GLX_SERVER) {
            return None;
        }
        if name.ends_with(&self.suffix) {
            return Some(Named::Versioned);
        }
        catalog::library_for(name)
            .is_some_and(|spec| !spec.versioned)
            .then_some(Named::OwnVersion)
    }
}

/// The scan's state: what is found, and what is left of the bound.
struct Scan<'a> {
    root: &'a DriverRoot,
    scope: &'a Capabilities,
    names: Names,
    found: &'a mut Vec<Library>,
    files_left: usize,
}

/// Adds to `found` (the cache's libraries) what else the driver ships for
/// `scope`: see the module's text. `search` are the configured search
/// paths, inside the driver root, scanned before the standard directories
/// where the cache lists no host library of the running driver.
pub fn extend(
    root: &DriverRoot,
    found: &mut Vec<Library>,
    version: &str,
    host: Arch,
    scope: &Capabilities,
    search: &[PathBuf],
) {
    let mut dirs: Vec<(PathBuf, Arch)> = Vec::new();
    for lib in found.iter() {
        let Some(arch) = archs(host, scope).find(|a| a.name == lib.arch) else {
            continue;
        };
        if let Some(dir) = inner_dir(root, &lib.path) {
            if !dirs.contains(&(dir.clone(), arch)) {
                dirs.push((dir, arch));
            }
        }
    }
    let searching = !found.iter().any(|l| l.arch == host.name);
    let mut scan = Scan {
        root,
        scope,
        names: Names::new(version),
        found,
        files_left: MAX_FILES,
    };
    if searching {
        log::debug!(
            "the loader cache lists no {host} library of driver {version}: searching {}",
            root.path().display()
        );
        let standard = catalog::search_dirs(host.name);
        let candidates = search
            .iter()
            .cloned()
            .chain(standard.iter().map(PathBuf::from));
        for dir in candidates {
            let Some(resolved) = lookup(root, &dir).filter(|r| r.metadata.is_dir()) else {
                continue;
            };
            if !dirs.iter().any(|(d, _)| *d == resolved.inner) {
                dirs.push((resolved.inner, host));
            }
        }
    }
    for (dir, arch) in dirs {
        scan.dir(&dir, arch, !searching);
        scan.dir(&dir.join(catalog::VDPAU_DIR), arch, false);
    }
}

/// The directory, inside the root, of `path`, a host path under it.
fn inner_dir(root: &DriverRoot, path: &Path) -> Option<PathBuf> {
    let rel = path.strip_prefix(root.path()).ok()?;
    Some(Path::new("/").join(rel.parent()?))
}

impl Scan<'_> {
    /// Takes the libraries of directory `inner` for `arch`; those versioned
    /// on their own only when `is_driver` (it holds the running driver's
    /// libraries) or the directory gave a versioned one itself. Says
    /// nothing of a directory that is not there.
    fn dir(&mut self, inner: &Path, arch: Arch, is_driver: bool) {
        let Some(dir) = lookup(self.root, inner).filter(|r| r.metadata.is_dir()) else {
            return;
        };
        let entries = match fs::read_dir(&dir.host) {
            Ok(entries) => entries,
            Err(e) => {
                log::warn!("skipping {}: {e}", dir.host.display());
                return;
            }
        };
        let mut named: Vec<(Named, String)> = Vec::new();
        for (read, entry) in entries.enumerate() {
            if read == MAX_ENTRIES {
                log::warn!(
                    "{}: more than {MAX_ENTRIES} entries, the rest not read",
                    dir.host.display()
                );
                break;
            }
            let Ok(name) = entry.map(|e| e.file_name()) else {
                continue;
            };
            let Ok(name) = name.into_string() else {
                continue;
            };
            if let Some(kind) = self.names.judge(&name) {
                named.push((kind, name));
            }
        }
        // Versioned first: they make a searched directory the driver's.
        named.sort();
        let mut is_driver = is_driver;
        for (kind, name) in named {
            if kind == Named::OwnVersion && !is_driver {
                continue;
            }
            if self.files_left == 0 {
                log::warn!(
                    "more than {MAX_FILES} driver library candidates: {} and the rest not checked",
                    dir.inner.join(&name).display()
                );
                return;
            }
            if self.file(&dir.inner.join(&name), kind, arch) && kind == Named::Versioned {
                is_driver = true;
            }
        }
    }

    /// Checks `inner`, named as `kind`, and takes it if it is a library of
    /// `arch` that `scope` brings and is not found yet; whether it is the
    /// driver's (taken now or before).
    fn file(&mut self, inner: &Path, kind: Named, arch: Arch) -> bool {
        let Some(resolved) = lookup(self.root, inner) else {
            return false;
        };
        let real = resolved.inner.file_name().and_then(|n| n.to_str());
        if real.and_then(|n| self.names.judge(n)) != Some(kind) {
            log::debug!(
                "skipping {} -> {}: not of the running driver",
                inner.display(),
                resolved.inner.display()
            );
            return false;
        }
        if !resolved.metadata.is_file() {
            log::warn!("skipping {}: not a regular file", resolved.host.display());
            return false;
        }
        let known = |l: &Library| l.arch == arch.name && l.path == resolved.host;
        if self.found.iter().any(known) {
            return true;
        }
        self.files_left -= 1;
        let soname = match soname(&resolved.host, arch) {
            Ok(soname) => soname,
            Err(e) => {
                log::debug!("skipping {}: {e}", inner.display());
                return false;
            }
        };
        if self
            .found
            .iter()
            .any(|l| l.arch == arch.name && l.soname == soname)
        {
            log::debug!(
                "skipping {}: {soname} is taken from another file",
                resolved.host.display()
            );
            return true;
        }
        let Some(lib) = Library::new(&soname, arch, resolved.host, self.scope) else {
            // Of the driver, only not of this scope.
            return true;
        };
        log::debug!(
            "{} ({soname}, {}): found beside the driver's libraries",
            lib.path.display(),
            lib.capability.map_or("any capability", |c| c.name())
        );
        self.found.push(lib);
        true
    }
}

/// The SONAME of `path`, a checked shared object of `arch`; its file name
/// where it has none, as `ldconfig` lists such a library.
fn soname(path: &Path, arch: Arch) -> Result<String, elf::Error> {
    elf::check_file(path, arch, elf::Kind::SharedObject)?;
    let object = crate::util::hostfile::open_regular(path)
        .ok()
        .and_then(|(file, _)| elf::shared_object(&file));
    Ok(match object {
        Some(object) => object.soname,
        None => path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests;

//! A snapshot of what discovery found in the driver root (libraries,
//! programs, firmware, ICD files), kept in a root-only directory so that the
//! next container start need not walk the driver root and parse its
//! `ld.so.cache` again: on an 8-GPU host that walk is about 150 syscalls, and
//! a host's cache of thousands of entries is most of `list`'s time.
//!
//! A snapshot is used only if everything it was made from is unchanged:
//! its key (this build, the driver root, the capabilities looked for, the
//! architecture, the running driver's version, read live from procfs, and
//! the configured library search paths) must match, and every path
//! discovery examined (the root, each directory walked or whose entries
//! were read, each link read, each file whose header or content was read,
//! the cache) must `lstat` to the same device, inode, type, mode, size, mtime
//! and ctime. A file or link added, removed, renamed or rewritten under the
//! root changes the ctime of an examined directory or of the file itself,
//! and no one can set a ctime back. A snapshot is written only when every
//! stamp in it is at least [`SETTLED`] old, so that a change within the
//! filesystem's timestamp granularity after discovery still shows. What
//! discovery reads of procfs and the dev root (driver version, GPUs, nodes,
//! MIG) and the daemons' sockets are never in a snapshot.
//!
//! The directory and the file must belong to root and be writable by no
//! one else, are opened without following links, and only root (the
//! effective uid 0) reads or writes them: a hook running unprivileged
//! (rootless) never uses one. The file's type is checked through `O_PATH`
//! before it is opened (a fifo there would block every start), then it is
//! opened non-blocking and read within [`MAX_SIZE`] bytes.
//!
//! What a snapshot says is not trusted either. Every path in it must be
//! normal (absolute, no `.`, `..` or empty component) and lie under the
//! driver root; it must stamp every input the inventory depends on (the
//! root, its loader cache, each library, program, firmware and ICD file),
//! and each stamp is checked on the path resolved inside the driver root
//! (`openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS)`), as image paths are
//! resolved inside the rootfs. A snapshot that fails any check is ignored,
//! and discovery runs as if there were none; one that is malformed or
//! unsafe ([`Error::is_refusal`]) is logged once and removed by name. Writing
//! one that fails is only logged. This module never fails discovery.

use std::ffi::OsStr;
use std::fs::{self, Metadata};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use nix::errno::Errno;
use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use serde::{Deserialize, Serialize};

mod stamps;

use stamps::{is_normal, CheckedDirs, NormalRoot, Stamp};

use super::catalog;
use super::files::HostFile;
use super::libraries::{classify, Library, MissingLibrary};
use super::Error;
use crate::host::elf::Arch;
use crate::planning::request::Capability;
use crate::util::atomic;
use crate::util::hostfile;

/// What this build writes; a snapshot of another build or format is ignored.
const FORMAT: u32 = 3;

/// How old every examined path must be before a snapshot of it is written:
/// more than any filesystem's timestamp granularity.
pub const SETTLED: u64 = 2;

/// Largest snapshot read; a host's is a few KiB.
pub const MAX_SIZE: usize = 1024 * 1024;

impl Error {
    /// Whether the snapshot itself is bad (unsafe, malformed, incomplete,
    /// unreadable), rather than absent, stale or made for another key: one
    /// to log as a warning and remove.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Error::SnapshotIo { .. }
                | Error::SnapshotUnsafe { .. }
                | Error::SnapshotDecode { .. }
                | Error::SnapshotIncomplete { .. }
        )
    }
}

/// Result of reading or writing a snapshot.
pub type Result<T> = std::result::Result<T, Error>;

/// What discovery finds in the driver root for a scope: what a snapshot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootFiles {
    /// Libraries of the running driver.
    pub libraries: Vec<Library>,
    /// Libraries of the scope the host lacks.
    pub missing_libraries: Vec<MissingLibrary>,
    /// Programs found.
    pub binaries: Vec<HostFile>,
    /// Programs of the scope the host lacks.
    pub missing_binaries: Vec<&'static str>,
    /// GSP firmware of the running driver.
    pub firmware: Vec<HostFile>,
    /// Graphics ICD files.
    pub configs: Vec<HostFile>,
    /// The driver root's loader cache the libraries were found in, as
    /// resolved; `None` where it has none (the libraries were searched for).
    pub cache: Option<PathBuf>,
}

/// What a snapshot must have been made for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    /// The snapshot format and this build's version.
    pub format: u32,
    /// This build's version.
    pub build: String,
    /// The driver root.
    pub root: PathBuf,
    /// The capabilities discovery looked for, as a list.
    pub scope: String,
    /// The host architecture.
    pub arch: String,
    /// The running driver's version.
    pub driver: String,
    /// The configured library search paths (`driver.library-search-paths`).
    pub search: Vec<PathBuf>,
}

impl Key {
    /// The key for this build.
    pub fn new(root: &Path, scope: String, arch: Arch, driver: &str) -> Key {
        Key {
            format: FORMAT,
            build: env!("CARGO_PKG_VERSION").to_string(),
            root: root.to_path_buf(),
            scope,
            arch: arch.name.to_string(),
            driver: driver.to_string(),
            search: Vec::new(),
        }
    }

    /// The same key for discovery that searches `search` where the cache
    /// lists no driver library: another list finds other libraries.
    pub fn searching(self, search: &[PathBuf]) -> Key {
        Key {
            search: search.to_vec(),
            ..self
        }
    }

    /// The file name of this key's snapshot: one per driver root, scope and
    /// architecture; a new driver version replaces it.
    fn file_name(&self) -> String {
        let parts: [&[u8]; 3] = [
            self.root.as_os_str().as_encoded_bytes(),
            self.scope.as_bytes(),
            self.arch.as_bytes(),
        ];
        let hash = fnv1a(parts.iter().flat_map(|p| p.iter().chain(&[0u8])));
        format!("inventory-{hash:016x}.json")
    }
}

/// FNV-1a: stable across builds, unlike std's hashers; and each step is a
/// bijection of the state, so changing any one byte changes the hash.
fn fnv1a<'a>(bytes: impl IntoIterator<Item = &'a u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `body` with its checksum on a last line: a torn, truncated or
/// byte-flipped file is refused even where it still decodes.
fn seal(mut body: Vec<u8>) -> Vec<u8> {
    let sum = fnv1a(&body);
    body.extend_from_slice(format!("\n{sum:016x}\n").as_bytes());
    body
}

/// The body of a sealed file, if its checksum holds.
fn unseal<'d>(path: &Path, data: &'d [u8]) -> Result<&'d [u8]> {
    let bad = |reason: &str| Error::SnapshotDecode {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let text = data
        .strip_suffix(b"\n")
        .ok_or_else(|| bad("no checksum line"))?;
    let at = text
        .iter()
        .rposition(|&b| b == b'\n')
        .ok_or_else(|| bad("no checksum line"))?;
    let (body, sum) = (&text[..at], &text[at + 1..]);
    let sum = std::str::from_utf8(sum)
        .ok()
        .filter(|s| s.len() == 16)
        .and_then(|s| u64::from_str_radix(s, 16).ok())
        .ok_or_else(|| bad("no checksum line"))?;
    if sum != fnv1a(body) {
        return Err(bad("checksum mismatch: torn or altered"));
    }
    Ok(body)
}

/// A library as the file holds it.
#[derive(Debug, Serialize, Deserialize)]
struct LibraryRecord {
    capability: Option<Capability>,
    prefix: String,
    soname: String,
    arch: String,
    path: PathBuf,
}

/// A missing library as the file holds it.
#[derive(Debug, Serialize, Deserialize)]
struct MissingRecord {
    capability: Capability,
    prefix: String,
    core: bool,
}

/// The file.
#[derive(Debug, Serialize, Deserialize)]
struct Snapshot {
    key: Key,
    stamps: Vec<Stamp>,
    libraries: Vec<LibraryRecord>,
    missing_libraries: Vec<MissingRecord>,
    binaries: Vec<HostFile>,
    missing_binaries: Vec<String>,
    firmware: Vec<HostFile>,
    configs: Vec<HostFile>,
    cache: Option<PathBuf>,
}

/// The snapshot for `key` in `dir`, if there is one, it is safe to read,
/// and nothing it was made from changed.
pub fn load(dir: &Path, key: &Key) -> Result<RootFiles> {
    let path = dir.join(key.file_name());
    let dir_fd = open_dir(dir)?;
    let io_err = |source: io::Error| Error::SnapshotIo {
        path: path.clone(),
        source,
    };
    // O_PATH opens nothing: a fifo, device or directory at the name is
    // refused by its type before anything could block on it.
    let fd = match openat(
        &dir_fd,
        OsStr::new(&key.file_name()),
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Err(Error::SnapshotMissing { path }),
        Err(errno) => return Err(io_err(errno.into())),
    };
    let stat = fstat(&fd).map_err(|errno| io_err(errno.into()))?;
    owned_by_root(&path, stat.st_mode, stat.st_uid, SFlag::S_IFREG)?;
    let size = usize::try_from(stat.st_size).unwrap_or(usize::MAX);
    if size > MAX_SIZE {
        return Err(Error::SnapshotUnsafe {
            path,
            reason: format!("{size} bytes, more than {MAX_SIZE}"),
        });
    }
    let (file, size) = hostfile::reopen_regular(fd.as_fd(), &stat).map_err(io_err)?;
    let data = hostfile::read_opened(file, size, MAX_SIZE).map_err(io_err)?;
    let snapshot: Snapshot =
        serde_json::from_slice(unseal(&path, &data)?).map_err(|e| Error::SnapshotDecode {
            path: path.clone(),
            reason: e.to_string(),
        })?;
    if snapshot.key != *key {
        return Err(Error::SnapshotOtherKey { path });
    }
    let files = decode(&path, snapshot.libraries, snapshot.missing_libraries, key)?;
    let inputs: Vec<&Path> = [Some(key.root.as_path()), snapshot.cache.as_deref()]
        .into_iter()
        .flatten()
        .chain(files.libraries.iter().map(|l| l.path.as_path()))
        .chain(
            [&snapshot.binaries, &snapshot.firmware, &snapshot.configs]
                .into_iter()
                .flatten()
                .map(|f| f.path.as_path()),
        )
        .collect();
    let root = NormalRoot::new(&key.root);
    confined(
        &path,
        &root,
        snapshot.stamps.iter().map(|s| s.path.as_path()),
    )?;
    confined(&path, &root, inputs.iter().copied())?;
    // All normal now: equal paths are equal bytes.
    let mut stamped: Vec<&[u8]> = snapshot
        .stamps
        .iter()
        .map(|s| s.path.as_os_str().as_bytes())
        .collect();
    stamped.sort_unstable();
    if let Some(input) = inputs.iter().find(|input| {
        stamped
            .binary_search(&input.as_os_str().as_bytes())
            .is_err()
    }) {
        return Err(Error::SnapshotIncomplete {
            path,
            input: input.to_path_buf(),
        });
    }
    let root_fd = open(
        &key.root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| Error::SnapshotIo {
        path: key.root.clone(),
        source: errno.into(),
    })?;
    let mut dirs = CheckedDirs::new(&root, root_fd);
    if let Some(stale) = snapshot.stamps.iter().find(|s| !dirs.holds(s)) {
        return Err(Error::SnapshotStale {
            path,
            examined: stale.path.clone(),
        });
    }
    let missing_binaries = snapshot
        .missing_binaries
        .iter()
        .map(|name| {
            catalog::BINARIES
                .iter()
                .map(|(_, known)| *known)
                .find(|known| known == name)
                .ok_or_else(|| Error::SnapshotDecode {
                    path: path.clone(),
                    reason: format!("unknown program {name:?}"),
                })
        })
        .collect::<Result<_>>()?;
    Ok(RootFiles {
        missing_binaries,
        binaries: snapshot.binaries,
        firmware: snapshot.firmware,
        configs: snapshot.configs,
        cache: snapshot.cache,
        ..files
    })
}

/// Refuses a path of `paths` that is not normal or not under `root`.
fn confined<'a>(
    path: &Path,
    root: &NormalRoot,
    paths: impl IntoIterator<Item = &'a Path>,
) -> Result<()> {
    for named in paths {
        let reason = if !is_normal(named) {
            "is not a normal absolute path"
        } else if root.inner(named).is_none() {
            "lies outside the driver root"
        } else {
            continue;
        };
        return Err(Error::SnapshotUnsafe {
            path: path.to_path_buf(),
            reason: format!("{} {reason}", named.display()),
        });
    }
    Ok(())
}

/// Removes the snapshot for `key` from `dir`, by name, without following
/// a link: a refused one, so that it is logged once, not at every start.
pub fn discard(dir: &Path, key: &Key) -> Result<()> {
    let dir_fd = open_dir(dir)?;
    match unlinkat(
        &dir_fd,
        OsStr::new(&key.file_name()),
        UnlinkatFlags::NoRemoveDir,
    ) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(errno) => Err(Error::SnapshotIo {
            path: dir.join(key.file_name()),
            source: errno.into(),
        }),
    }
}

/// The libraries of a snapshot, their names mapped back to the
/// catalogue's; each library's family must be the one its SONAME gives.
fn decode(
    path: &Path,
    libraries: Vec<LibraryRecord>,
    missing: Vec<MissingRecord>,
    key: &Key,
) -> Result<RootFiles> {
    let unknown = |what: &str, name: &str| Error::SnapshotDecode {
        path: path.to_path_buf(),
        reason: format!("unknown {what} {name:?}"),
    };
    let prefix = |name: &str| {
        catalog::LIBRARIES
            .iter()
            .find(|s| s.prefix == name)
            .map(|s| s.prefix)
            .ok_or_else(|| unknown("library", name))
    };
    let host = Arch::host();
    let arch = |name: &str| {
        [Some(host), host.compat32()]
            .into_iter()
            .flatten()
            .find(|a| a.name == name && key.arch == host.name)
            .map(|a| a.name)
            .ok_or_else(|| unknown("architecture", name))
    };
    Ok(RootFiles {
        libraries: libraries
            .into_iter()
            .map(|l| {
                if classify(&l.soname) != Some((l.capability, l.prefix.clone())) {
                    return Err(unknown("library family", &l.prefix));
                }
                Ok(Library {
                    capability: l.capability,
                    prefix: l.prefix,
                    soname: l.soname,
                    arch: arch(&l.arch)?,
                    path: l.path,
                })
            })
            .collect::<Result<_>>()?,
        missing_libraries: missing
            .into_iter()
            .map(|m| {
                Ok(MissingLibrary {
                    capability: m.capability,
                    prefix: prefix(&m.prefix)?,
                    core: m.core,
                })
            })
            .collect::<Result<_>>()?,
        binaries: Vec::new(),
        missing_binaries: Vec::new(),
        firmware: Vec::new(),
        configs: Vec::new(),
        cache: None,
    })
}

/// Writes the snapshot of `files`, found by examining `examined`, for
/// `key` in `dir` (created, mode 0700, if missing), replacing any; unless
/// something examined changed too recently to be told apart later.
pub fn store(
    dir: &Path,
    key: &Key,
    files: &RootFiles,
    examined: &[(PathBuf, Metadata)],
) -> Result<()> {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    store_at(dir, key, files, examined, now)
}

/// [`store`] at time `now` (seconds since the epoch).
fn store_at(
    dir: &Path,
    key: &Key,
    files: &RootFiles,
    examined: &[(PathBuf, Metadata)],
    now: u64,
) -> Result<()> {
    let path = dir.join(key.file_name());
    let settled = |m: &Metadata| {
        let newest = m.ctime().max(m.mtime());
        u64::try_from(newest).is_ok_and(|t| t.saturating_add(SETTLED) <= now)
    };
    if let Some((unsettled, _)) = examined.iter().find(|(_, m)| !settled(m)) {
        return Err(Error::SnapshotUnsettled {
            path,
            examined: unsettled.clone(),
        });
    }
    let snapshot = Snapshot {
        key: key.clone(),
        // A link is never changed in place: replacing or removing it
        // changes the directory holding it, which was examined on the way.
        stamps: examined
            .iter()
            .filter(|(_, m)| !m.file_type().is_symlink())
            .map(|(p, m)| Stamp::of(p.clone(), m))
            .collect(),
        libraries: files
            .libraries
            .iter()
            .map(|l| LibraryRecord {
                capability: l.capability,
                prefix: l.prefix.clone(),
                soname: l.soname.clone(),
                arch: l.arch.to_string(),
                path: l.path.clone(),
            })
            .collect(),
        missing_libraries: files
            .missing_libraries
            .iter()
            .map(|m| MissingRecord {
                capability: m.capability,
                prefix: m.prefix.to_string(),
                core: m.core,
            })
            .collect(),
        binaries: files.binaries.clone(),
        missing_binaries: files
            .missing_binaries
            .iter()
            .map(|s| s.to_string())
            .collect(),
        firmware: files.firmware.clone(),
        configs: files.configs.clone(),
        cache: files.cache.clone(),
    };
    let data = seal(
        serde_json::to_vec(&snapshot).map_err(|e| Error::SnapshotDecode {
            path: path.clone(),
            reason: e.to_string(),
        })?,
    );
    let dir_fd = state_dir(dir)?;
    // No fsync: /run is memory, and a torn file is refused as undecodable.
    let options = atomic::Options {
        mode: 0o600,
        sync: false,
    };
    atomic::replace_in(
        dir_fd.as_fd(),
        dir,
        OsStr::new(&key.file_name()),
        &data,
        options,
    )
    .map_err(|atomic::Error { path, source }| Error::SnapshotIo { path, source })
}

/// Whether snapshots may be used by this process: root's only.
pub fn allowed() -> Result<()> {
    let euid = nix::unistd::geteuid().as_raw();
    if euid == 0 {
        Ok(())
    } else {
        Err(Error::SnapshotNotRoot { euid })
    }
}

/// `dir`, the root-only directory the hooks keep their state in (snapshots,
/// notes made once): made mode 0700 where missing, then opened as
/// [`open_dir`] checks it.
pub fn state_dir(dir: &Path) -> Result<OwnedFd> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(source) => {
            return Err(Error::SnapshotIo {
                path: dir.to_path_buf(),
                source,
            })
        }
    }
    open_dir(dir)
}

/// `dir`, opened without following a link, if it is a directory of root's
/// that no one else can write.
fn open_dir(dir: &Path) -> Result<OwnedFd> {
    let io_err = |errno: Errno| Error::SnapshotIo {
        path: dir.to_path_buf(),
        source: errno.into(),
    };
    let fd = match open(
        dir,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => {
            return Err(Error::SnapshotMissing {
                path: dir.to_path_buf(),
            })
        }
        Err(errno) => return Err(io_err(errno)),
    };
    let stat = fstat(fd.as_fd()).map_err(io_err)?;
    owned_by_root(dir, stat.st_mode, stat.st_uid, SFlag::S_IFDIR)?;
    Ok(fd)
}

/// Refuses what is not of `kind`, not root's, or writable by group or others.
fn owned_by_root(path: &Path, mode: u32, uid: u32, kind: SFlag) -> Result<()> {
    let reason = if SFlag::from_bits_truncate(mode) & SFlag::S_IFMT != kind {
        format!(
            "a {}, not a {}",
            crate::util::reopen::kind_name(mode),
            crate::util::reopen::kind_name(kind.bits())
        )
    } else if uid != 0 {
        format!("owned by uid {uid}, not root")
    } else if mode & 0o022 != 0 {
        format!("mode {:o}: writable by group or others", mode & 0o7777)
    } else {
        return Ok(());
    };
    Err(Error::SnapshotUnsafe {
        path: path.to_path_buf(),
        reason,
    })
}

#[cfg(test)]
mod tests;

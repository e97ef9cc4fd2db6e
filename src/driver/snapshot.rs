//! A snapshot of what discovery found in the driver root (libraries,
//! programs, firmware, ICD files), kept in a root-only directory so that the
//! next container start need not walk the driver root and parse its
//! `ld.so.cache` again: on an 8-GPU host that walk is about 150 syscalls, and
//! a host's cache of thousands of entries is most of `list`'s time.
//!
//! A snapshot is used only if everything it was made from is unchanged:
//! its key (this build, the driver root, the capabilities looked for, the
//! architecture and the running driver's version, read live from procfs)
//! must match, and every path discovery examined (the root, each directory
//! walked, each link read, each file whose header or content was read, the
//! cache) must `lstat` to the same device, inode, type, mode, size, mtime
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
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use nix::errno::Errno;
use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::{fstat, FileStat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use serde::{Deserialize, Serialize};

use super::catalog;
use super::files::HostFile;
use super::libraries::{Library, MissingLibrary};
use super::Error;
use crate::atomic;
use crate::elf::Arch;
use crate::hostfile;
use crate::request::Capability;

/// What this build writes; a snapshot of another build or format is ignored.
const FORMAT: u32 = 2;

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
    /// The driver root's loader cache the libraries were found in, as resolved.
    pub cache: PathBuf,
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

/// One examined path and what `lstat` said of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    path: PathBuf,
    dev: u64,
    ino: u64,
    mode: u32,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(path: PathBuf, m: &Metadata) -> Stamp {
        Stamp {
            path,
            dev: m.dev(),
            ino: m.ino(),
            mode: m.mode(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// Whether `fstat` said `s` of this stamp's path: the same file, unchanged.
    fn is(&self, s: &FileStat) -> bool {
        (self.dev, self.ino, self.mode, self.mtime, self.ctime)
            == (
                s.st_dev,
                s.st_ino,
                s.st_mode,
                (s.st_mtime, s.st_mtime_nsec),
                (s.st_ctime, s.st_ctime_nsec),
            )
            && Ok(self.size) == u64::try_from(s.st_size)
    }
}

/// Checks stamps in the driver root, keeping a descriptor of each
/// directory found unchanged: a later stamp directly inside one is then
/// looked at by its name in that descriptor (one `fstatat` for a file),
/// not resolved from the root again (an `openat2`, an `fstat` and a
/// `close`, walking every component). The same guarantee: the directory
/// was reached through no symlink and is the one stamped, and a single
/// plain name, not followed if it is a link, cannot leave it.
struct CheckedDirs<'r> {
    root: &'r NormalRoot,
    /// The root, as an `O_PATH` descriptor.
    root_fd: OwnedFd,
    /// Each directory below the root found unchanged, by its path inside
    /// the root, and its `O_PATH` descriptor.
    open: Vec<(Vec<u8>, OwnedFd)>,
}

impl<'r> CheckedDirs<'r> {
    /// None checked yet but the root, open as `root_fd`, whose stamp is still to check.
    fn new(root: &'r NormalRoot, root_fd: OwnedFd) -> CheckedDirs<'r> {
        CheckedDirs {
            root,
            root_fd,
            open: Vec::new(),
        }
    }

    /// The descriptor of checked directory `inner` (the root for empty).
    fn dir(&self, inner: &[u8]) -> Option<&OwnedFd> {
        if inner.is_empty() {
            return Some(&self.root_fd);
        }
        self.open
            .iter()
            .find(|(path, _)| path == inner)
            .map(|(_, fd)| fd)
    }

    /// Whether `stamp`'s path (normal, see [`confined`]), resolved inside
    /// the driver root through no symlink, is still the same.
    fn holds(&mut self, stamp: &Stamp) -> bool {
        let Some(inner) = self.root.inner(&stamp.path) else {
            return false;
        };
        if inner.is_empty() {
            return fstat(self.root_fd.as_fd()).is_ok_and(|s| stamp.is(&s));
        }
        let is_dir = SFlag::from_bits_truncate(stamp.mode) & SFlag::S_IFMT == SFlag::S_IFDIR;
        let (parent, name) = match inner.iter().rposition(|&b| b == b'/') {
            Some(at) => (&inner[..at], &inner[at + 1..]),
            None => (&inner[..0], inner),
        };
        let name = OsStr::from_bytes(name);
        let fd = match self.dir(parent) {
            // A file: its own `lstat`, in its checked directory.
            Some(dir) if !is_dir => {
                let stat =
                    nix::sys::stat::fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW);
                return stat.is_ok_and(|s| stamp.is(&s));
            }
            Some(dir) => openat(
                dir,
                name,
                OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .ok(),
            None => resolve_in_root(&self.root_fd, Path::new(OsStr::from_bytes(inner))),
        };
        let Some(fd) = fd else {
            return false;
        };
        let holds = fstat(fd.as_fd()).is_ok_and(|s| stamp.is(&s));
        if holds && is_dir {
            self.open.push((inner.to_vec(), fd));
        }
        holds
    }
}

/// The driver root in normal form, to tell by their bytes whether normal
/// paths lie under it: `Path::starts_with` and `strip_prefix` walk both
/// paths' components, which for a snapshot's few dozen paths was most of
/// a start's own (user-space) work.
struct NormalRoot(Vec<u8>);

impl NormalRoot {
    /// `root` with its components rejoined: no `.`, repeated or trailing `/`.
    fn new(root: &Path) -> NormalRoot {
        NormalRoot(
            root.components()
                .collect::<PathBuf>()
                .into_os_string()
                .into_vec(),
        )
    }

    /// What follows the root in `path`, a normal path (empty for the root
    /// itself), if `path` lies under it; as `path.strip_prefix(root)` says
    /// for a normal path.
    fn inner<'p>(&self, path: &'p Path) -> Option<&'p [u8]> {
        let path = path.as_os_str().as_bytes();
        if self.0 == b"/" {
            return path.strip_prefix(b"/");
        }
        match path.strip_prefix(self.0.as_slice())? {
            [] => Some(&[]),
            [b'/', rest @ ..] => Some(rest),
            _ => None,
        }
    }
}

/// `inner` (relative) resolved inside the root open as `root_fd` as an
/// `O_PATH` descriptor, through no symlink: stamped paths are resolved
/// paths, so a link on the way means the root changed, or the snapshot lies.
fn resolve_in_root(root_fd: &OwnedFd, inner: &Path) -> Option<OwnedFd> {
    use rustix::fs::{openat2, Mode as RxMode, OFlags, ResolveFlags};
    openat2(
        root_fd,
        inner,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        RxMode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .ok()
}

/// Whether `path` is normal: absolute, with no `.`, `..` or empty component.
fn is_normal(path: &Path) -> bool {
    match path.as_os_str().as_bytes() {
        b"/" => true,
        [b'/', rest @ ..] => rest
            .split(|&b| b == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b".."),
        _ => false,
    }
}

/// A library as the file holds it.
#[derive(Debug, Serialize, Deserialize)]
struct LibraryRecord {
    capability: Capability,
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
    cache: PathBuf,
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
    let inputs: Vec<&Path> = [key.root.as_path(), snapshot.cache.as_path()]
        .into_iter()
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

/// The libraries of a snapshot, their names mapped back to the catalogue's.
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
                Ok(Library {
                    capability: l.capability,
                    prefix: prefix(&l.prefix)?,
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
        cache: PathBuf::new(),
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
                prefix: l.prefix.to_string(),
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
    let dir_fd = open_dir(dir)?;
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
            crate::reopen::kind_name(mode),
            crate::reopen::kind_name(kind.bits())
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
mod tests {
    use std::os::unix::fs::{symlink, PermissionsExt};

    use super::*;
    use crate::driver::DriverRoot;

    /// A driver root with a library reached through a link, and what
    /// resolving it examined, ready to snapshot.
    struct Host {
        dir: tempfile::TempDir,
        root: PathBuf,
        snapshots: PathBuf,
        key: Key,
        files: RootFiles,
        examined: Vec<(PathBuf, Metadata)>,
    }

    impl Host {
        fn new() -> Host {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().join("driver");
            let lib = root.join("usr/lib/x86_64-linux-gnu");
            fs::create_dir_all(lib.join("nvidia")).unwrap();
            fs::write(lib.join("nvidia/libcuda.so.535.261.03"), b"\x7fELF").unwrap();
            symlink("nvidia/libcuda.so.535.261.03", lib.join("libcuda.so.1")).unwrap();
            fs::create_dir_all(root.join("etc")).unwrap();
            fs::write(root.join("etc/ld.so.cache"), b"glibc-ld.so.cache1.1").unwrap();
            fs::create_dir_all(root.join("usr/bin")).unwrap();
            fs::write(root.join("usr/bin/nvidia-smi"), b"\x7fELF").unwrap();
            let firmware = root.join("lib/firmware/nvidia/535.261.03");
            fs::create_dir_all(&firmware).unwrap();
            fs::write(firmware.join("gsp_ga10x.bin"), b"gsp").unwrap();
            let driver = DriverRoot::new(&root);
            let cache = driver.resolve(Path::new("/etc/ld.so.cache")).unwrap();
            let found = |inner: &str, capability| HostFile {
                capability,
                path: driver.resolve(Path::new(inner)).unwrap().host,
                destination: PathBuf::from(inner),
            };
            let binaries = vec![found("/usr/bin/nvidia-smi", Some(Capability::Utility))];
            let firmware = vec![found("/lib/firmware/nvidia/535.261.03/gsp_ga10x.bin", None)];
            let resolved = driver
                .resolve(Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1"))
                .unwrap();
            let files = RootFiles {
                libraries: vec![Library {
                    capability: Capability::Compute,
                    prefix: "libcuda.so",
                    soname: "libcuda.so.1".into(),
                    arch: Arch::host().name,
                    path: resolved.host,
                }],
                missing_libraries: vec![MissingLibrary {
                    capability: Capability::Utility,
                    prefix: "libnvidia-ml.so",
                    core: true,
                }],
                binaries,
                missing_binaries: vec!["nvidia-debugdump"],
                firmware,
                configs: Vec::new(),
                cache: cache.host,
            };
            let key = Key::new(&root, "compute,utility".into(), Arch::host(), "535.261.03");
            Host {
                snapshots: dir.path().join("snapshots"),
                examined: driver.examined(),
                dir,
                root,
                key,
                files,
            }
        }

        /// Stores the snapshot as if a minute had passed since the host was made.
        fn store(&self) {
            store_at(
                &self.snapshots,
                &self.key,
                &self.files,
                &self.examined,
                later(),
            )
            .unwrap();
        }

        fn load(&self) -> Result<RootFiles> {
            load(&self.snapshots, &self.key)
        }

        fn file(&self) -> PathBuf {
            self.snapshots.join(self.key.file_name())
        }

        /// The stored snapshot's JSON, decoded.
        fn json(&self) -> serde_json::Value {
            let data = fs::read(self.file()).unwrap();
            serde_json::from_slice(unseal(&self.file(), &data).unwrap()).unwrap()
        }

        /// Rewrites the stored snapshot's JSON with `edit`, sealed again:
        /// what a writer that knows the format could put there.
        fn rewrite(&self, edit: impl FnOnce(&mut serde_json::Value)) {
            let mut json = self.json();
            edit(&mut json);
            fs::write(self.file(), seal(serde_json::to_vec(&json).unwrap())).unwrap();
        }

        fn library_path(&self) -> String {
            self.files.libraries[0].path.to_str().unwrap().to_string()
        }
    }

    fn later() -> u64 {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 60
    }

    #[test]
    fn a_stored_snapshot_gives_back_what_was_found() {
        let host = Host::new();
        assert!(matches!(host.load(), Err(Error::SnapshotMissing { .. })));
        host.store();
        assert_eq!(host.load().unwrap(), host.files);
        let mode = fs::metadata(&host.snapshots).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let mode = fs::metadata(host.file()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn it_is_not_written_while_what_it_examined_may_still_change_unseen() {
        let host = Host::new();
        let now = later() - 60;
        let err = store_at(&host.snapshots, &host.key, &host.files, &host.examined, now);
        assert!(
            matches!(err, Err(Error::SnapshotUnsettled { .. })),
            "{err:?}"
        );
        assert!(!host.file().exists());
    }

    #[test]
    fn any_change_under_the_root_makes_it_stale() {
        fn lib(h: &Host) -> PathBuf {
            h.root.join("usr/lib/x86_64-linux-gnu")
        }
        type Change = fn(&Host);
        let changes: [(&str, Change, &str); 5] = [
            (
                "the library rewritten in place",
                |h| fs::write(lib(h).join("nvidia/libcuda.so.535.261.03"), b"\x7fELF2").unwrap(),
                "nvidia/libcuda.so.535.261.03",
            ),
            (
                "a file added beside the link",
                |h| fs::write(lib(h).join("libcuda.so.550.54.15"), b"").unwrap(),
                "x86_64-linux-gnu",
            ),
            (
                "the link pointed elsewhere",
                |h| {
                    fs::remove_file(lib(h).join("libcuda.so.1")).unwrap();
                    symlink("nvidia/libcuda.so.550.54.15", lib(h).join("libcuda.so.1")).unwrap();
                },
                "x86_64-linux-gnu",
            ),
            (
                "a directory renamed into place",
                |h| {
                    fs::create_dir(lib(h).join("new")).unwrap();
                    fs::rename(lib(h).join("nvidia"), lib(h).join("old")).unwrap();
                    fs::rename(lib(h).join("new"), lib(h).join("nvidia")).unwrap();
                },
                "x86_64-linux-gnu",
            ),
            (
                "the library's mode changed",
                |h| {
                    let path = lib(h).join("nvidia/libcuda.so.535.261.03");
                    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
                },
                "nvidia/libcuda.so.535.261.03",
            ),
        ];
        for (case, change, named) in changes {
            let host = Host::new();
            host.store();
            change(&host);
            match host.load() {
                Err(Error::SnapshotStale { examined, .. }) => {
                    assert!(examined.ends_with(named), "{case}: {}", examined.display())
                }
                other => panic!("{case}: {other:?}"),
            }
        }
    }

    #[test]
    fn another_driver_scope_or_root_does_not_match() {
        let host = Host::new();
        host.store();
        let mut other = host.key.clone();
        other.driver = "550.54.15".into();
        // Same file (one per root, scope and architecture), another driver.
        assert!(matches!(
            load(&host.snapshots, &other),
            Err(Error::SnapshotOtherKey { .. })
        ));
        other = host.key.clone();
        other.scope = "compute".into();
        assert!(matches!(
            load(&host.snapshots, &other),
            Err(Error::SnapshotMissing { .. })
        ));
    }

    #[test]
    #[cfg_attr(
        not(feature = "_test_as_root"),
        ignore = "needs root: the snapshot must be root's; run `make test`"
    )]
    fn a_snapshot_anyone_but_root_could_have_written_is_refused() {
        use std::os::unix::fs::chown;
        type Tamper = fn(&Host);
        let cases: [(&str, Tamper); 5] = [
            ("the file owned by another user", |h| {
                chown(h.file(), Some(1000), None).unwrap()
            }),
            ("the file writable by others", |h| {
                fs::set_permissions(h.file(), fs::Permissions::from_mode(0o666)).unwrap()
            }),
            ("the directory writable by others", |h| {
                fs::set_permissions(&h.snapshots, fs::Permissions::from_mode(0o777)).unwrap()
            }),
            ("the directory owned by another user", |h| {
                chown(&h.snapshots, Some(1000), None).unwrap()
            }),
            ("the file a link to another", |h| {
                let elsewhere = h.dir.path().join("elsewhere.json");
                fs::rename(h.file(), &elsewhere).unwrap();
                symlink(&elsewhere, h.file()).unwrap();
            }),
        ];
        for (case, tamper) in cases {
            let host = Host::new();
            host.store();
            tamper(&host);
            let err = host.load().unwrap_err();
            assert!(
                matches!(err, Error::SnapshotUnsafe { .. } | Error::SnapshotIo { .. }),
                "{case}: {err}"
            );
        }
    }

    /// Loads `host`'s snapshot after `edit`, which must be refused as
    /// `expected` says, naming `named`; and leaves it refused.
    fn refused(host: &Host, case: &str, named: &str, expected: fn(&Error) -> bool) {
        let err = host.load().unwrap_err();
        assert!(expected(&err), "{case}: {err}");
        assert!(err.is_refusal(), "{case}: {err}");
        assert!(err.to_string().contains(named), "{case}: {err}");
    }

    /// A path rewriting a library's (root and library path given).
    type PathEdit = fn(&str, &str) -> String;

    /// Checks that a snapshot naming each of `cases` instead of its
    /// library, in its library list alone or in its stamp too, is refused
    /// as unsafe, naming the path.
    fn paths_refused(cases: &[(&str, PathEdit)]) {
        for (case, edit) in cases {
            let host = Host::new();
            host.store();
            let bad = edit(&host.root.to_string_lossy(), &host.library_path());
            for both in [false, true] {
                host.store();
                host.rewrite(|json| {
                    json["libraries"][0]["path"] = bad.clone().into();
                    if both {
                        for stamp in json["stamps"].as_array_mut().unwrap() {
                            if stamp["path"] == host.library_path().as_str() {
                                stamp["path"] = bad.clone().into();
                            }
                        }
                    }
                });
                refused(&host, case, &bad, |e| {
                    matches!(e, Error::SnapshotUnsafe { .. })
                });
            }
        }
    }

    #[test]
    fn a_snapshot_with_dot_or_dot_dot_components_is_refused() {
        paths_refused(&[
            ("up and out of the root", |root, _| {
                format!("{root}/usr/lib/../../../../etc/shadow")
            }),
            ("up and back into the root", |root, lib| {
                lib.replacen(root, &format!("{root}/usr/.."), 1)
            }),
            ("through a dot", |root, lib| {
                lib.replacen(root, &format!("{root}/."), 1)
            }),
        ]);
    }

    #[test]
    fn a_snapshot_with_relative_or_empty_paths_is_refused() {
        paths_refused(&[
            ("relative", |_, lib| lib.trim_start_matches('/').into()),
            ("through an empty component", |root, lib| {
                lib.replacen(root, &format!("{root}/"), 1)
            }),
            ("with a trailing slash", |_, lib| format!("{lib}/")),
        ]);
    }

    #[test]
    fn a_snapshot_naming_files_outside_the_root_is_refused() {
        paths_refused(&[
            ("another host file", |_, _| "/etc/shadow".into()),
            // A prefix of the root's name is not the root.
            ("beside the root", |root, _| format!("{root}2/libcuda.so.1")),
        ]);
    }

    #[test]
    fn a_path_normal_and_under_the_root_is_still_resolved_inside_it() {
        // A link inside the root up and out of it: the path is normal and
        // under the root, its stamp's lstat may match, but resolved inside
        // the root it is not the file stamped.
        let host = Host::new();
        host.store();
        // Only the inputs stamped, not the directories on the way: so that
        // nothing but resolving inside the root can tell.
        let inputs: Vec<String> = [&host.root, &host.files.cache]
            .into_iter()
            .chain(host.files.libraries.iter().map(|l| &l.path))
            .chain(host.files.binaries.iter().map(|b| &b.path))
            .chain(host.files.firmware.iter().map(|f| &f.path))
            .map(|p| p.to_string_lossy().to_string())
            .collect();
        host.rewrite(|json| {
            json["stamps"]
                .as_array_mut()
                .unwrap()
                .retain(|s| inputs.iter().any(|i| s["path"] == i.as_str()))
        });
        assert_eq!(host.load().unwrap(), host.files);
        let lib = host.root.join("usr/lib/x86_64-linux-gnu");
        let outside = host.dir.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::rename(lib.join("nvidia"), outside.join("nvidia")).unwrap();
        let up = "../".repeat(lib.strip_prefix("/").unwrap().components().count());
        symlink(
            format!("{up}{}", outside.join("nvidia").display()),
            lib.join("nvidia"),
        )
        .unwrap();
        // Through the host's own lookup it is the very file stamped.
        let stamped = fs::metadata(&host.files.libraries[0].path).unwrap();
        assert_eq!(
            stamped.ino(),
            fs::metadata(outside.join("nvidia/libcuda.so.535.261.03"))
                .unwrap()
                .ino()
        );
        match host.load() {
            Err(Error::SnapshotStale { examined, .. }) => {
                assert_eq!(examined, host.files.libraries[0].path)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_snapshot_of_names_this_build_does_not_know_is_refused() {
        let host = Host::new();
        host.store();
        host.rewrite(|json| json["libraries"][0]["prefix"] = "libfoo.so".into());
        refused(&host, "unknown library", "libfoo.so", |e| {
            matches!(e, Error::SnapshotDecode { .. })
        });
    }

    /// Checks that `host`'s snapshot, its stamps edited by `edit`, is
    /// refused as incomplete (or `expected`), naming `named`.
    fn stamps_refused(
        host: &Host,
        case: &str,
        named: &str,
        edit: impl FnOnce(&mut serde_json::Value),
        expected: fn(&Error) -> bool,
    ) {
        host.store();
        host.rewrite(edit);
        refused(host, case, named, expected);
    }

    fn incomplete(e: &Error) -> bool {
        matches!(e, Error::SnapshotIncomplete { .. })
    }

    #[test]
    fn a_snapshot_with_an_empty_stamp_list_is_refused() {
        let host = Host::new();
        let root = host.root.to_string_lossy().to_string();
        stamps_refused(
            &host,
            "no stamps at all",
            &root,
            |json| json["stamps"].as_array_mut().unwrap().clear(),
            incomplete,
        );
    }

    #[test]
    fn a_snapshot_with_no_stamp_list_is_refused() {
        let host = Host::new();
        stamps_refused(
            &host,
            "no stamp list",
            "stamps",
            |json| {
                json.as_object_mut().unwrap().remove("stamps");
            },
            |e| matches!(e, Error::SnapshotDecode { .. }),
        );
    }

    #[test]
    fn a_snapshot_with_a_partial_stamp_list_is_refused() {
        let host = Host::new();
        let shown = |p: &Path| p.to_string_lossy().to_string();
        let inputs = [
            ("the root", shown(&host.root)),
            ("the cache", shown(&host.files.cache)),
            ("a library", host.library_path()),
            ("a program", shown(&host.files.binaries[0].path)),
            ("a firmware file", shown(&host.files.firmware[0].path)),
        ];
        for (case, dropped) in inputs {
            stamps_refused(
                &host,
                &format!("no stamp of {case}"),
                &dropped,
                |json| {
                    let stamps = json["stamps"].as_array_mut().unwrap();
                    let before = stamps.len();
                    stamps.retain(|s| s["path"] != dropped.as_str());
                    assert_eq!(stamps.len(), before - 1, "{case} was stamped");
                },
                incomplete,
            );
        }
    }

    #[test]
    fn a_snapshot_with_an_emptied_stamp_is_refused() {
        // A stamp of the right path whose other fields are gone does not
        // decode; one zeroed decodes and is stale.
        let host = Host::new();
        let lib = host.library_path();
        stamps_refused(
            &host,
            "a stamp of its path alone",
            "missing field",
            |json| {
                for stamp in json["stamps"].as_array_mut().unwrap() {
                    if stamp["path"] == lib.as_str() {
                        *stamp = serde_json::json!({ "path": lib });
                    }
                }
            },
            |e| matches!(e, Error::SnapshotDecode { .. }),
        );
        host.store();
        host.rewrite(|json| {
            for stamp in json["stamps"].as_array_mut().unwrap() {
                if stamp["path"] == lib.as_str() {
                    for field in ["dev", "ino", "mode", "size"] {
                        stamp[field] = 0.into();
                    }
                }
            }
        });
        assert!(matches!(host.load(), Err(Error::SnapshotStale { .. })));
    }

    #[test]
    fn a_stamp_is_checked_on_its_path_resolved_inside_the_root() {
        let host = Host::new();
        host.store();
        // The library's directory replaced by a link to the very same
        // files: lstat of the library still matches, but the path no longer
        // resolves inside the root without a link.
        let lib = host.root.join("usr/lib/x86_64-linux-gnu");
        fs::rename(lib.join("nvidia"), host.dir.path().join("moved")).unwrap();
        symlink(host.dir.path().join("moved"), lib.join("nvidia")).unwrap();
        assert!(matches!(host.load(), Err(Error::SnapshotStale { .. })));
    }

    #[test]
    fn a_torn_truncated_or_byte_flipped_snapshot_is_refused() {
        let host = Host::new();
        host.store();
        let data = fs::read(host.file()).unwrap();
        for len in [0, 1, data.len() / 2, data.len() - 18, data.len() - 1] {
            fs::write(host.file(), &data[..len]).unwrap();
            refused(&host, &format!("{len} bytes"), "", |e| {
                matches!(e, Error::SnapshotDecode { .. })
            });
        }
        for at in 0..data.len() {
            let mut flipped = data.clone();
            flipped[at] ^= 0x01;
            fs::write(host.file(), &flipped).unwrap();
            let err = host.load().unwrap_err();
            assert!(err.is_refusal(), "byte {at} flipped: {err}");
        }
        fs::write(host.file(), &data).unwrap();
        assert_eq!(host.load().unwrap(), host.files);
    }

    #[test]
    fn a_link_directory_or_fifo_at_its_name_is_refused_without_being_opened() {
        type Put = fn(&Host);
        let cases: [(&str, Put, &str); 3] = [
            (
                "a link",
                |h| {
                    let elsewhere = h.dir.path().join("elsewhere.json");
                    fs::rename(h.file(), &elsewhere).unwrap();
                    symlink(&elsewhere, h.file()).unwrap();
                },
                "symlink",
            ),
            (
                "a directory",
                |h| {
                    fs::remove_file(h.file()).unwrap();
                    fs::create_dir(h.file()).unwrap();
                },
                "directory",
            ),
            (
                "a fifo",
                |h| {
                    fs::remove_file(h.file()).unwrap();
                    nix::unistd::mkfifo(&h.file(), Mode::from_bits_truncate(0o600)).unwrap();
                },
                "fifo",
            ),
        ];
        for (case, put, found) in cases {
            let host = Host::new();
            host.store();
            put(&host);
            // A fifo opened for reading would block here.
            refused(&host, case, found, |e| {
                matches!(e, Error::SnapshotUnsafe { .. })
            });
        }
    }

    #[test]
    fn a_refused_snapshot_is_discarded_by_name_and_replaced() {
        let host = Host::new();
        host.store();
        let elsewhere = host.dir.path().join("elsewhere.json");
        fs::rename(host.file(), &elsewhere).unwrap();
        symlink(&elsewhere, host.file()).unwrap();
        discard(&host.snapshots, &host.key).unwrap();
        // The link went, not what it pointed to.
        assert!(fs::symlink_metadata(host.file()).is_err());
        assert!(elsewhere.exists());
        discard(&host.snapshots, &host.key).unwrap();
        // A fifo at the name is replaced by the next store, never written through.
        nix::unistd::mkfifo(&host.file(), Mode::from_bits_truncate(0o600)).unwrap();
        host.store();
        assert_eq!(host.load().unwrap(), host.files);
    }

    #[test]
    fn only_normal_absolute_paths_are_normal() {
        for (path, normal) in [
            ("/", true),
            ("/usr/lib/libcuda.so.1", true),
            ("usr/lib", false),
            ("", false),
            ("/usr/./lib", false),
            ("/usr/../lib", false),
            ("/usr//lib", false),
            ("/usr/lib/", false),
            ("/..", false),
        ] {
            assert_eq!(is_normal(Path::new(path)), normal, "{path:?}");
        }
    }

    #[test]
    fn a_normal_path_is_under_the_root_as_strip_prefix_says() {
        let inner = |root: &str, path: &str| {
            NormalRoot::new(Path::new(root))
                .inner(Path::new(path))
                .map(|b| String::from_utf8(b.to_vec()).unwrap())
        };
        assert_eq!(inner("/drv", "/drv").as_deref(), Some(""));
        assert_eq!(inner("/drv", "/drv/usr/lib").as_deref(), Some("usr/lib"));
        assert_eq!(
            inner("/drv/./", "/drv/usr").as_deref(),
            Some("usr"),
            "the root is made normal"
        );
        assert_eq!(inner("//drv//x/", "/drv/x/y").as_deref(), Some("y"));
        assert_eq!(
            inner("/drv", "/drvx/usr"),
            None,
            "a sibling sharing its bytes"
        );
        assert_eq!(inner("/drv", "/usr"), None);
        assert_eq!(inner("/", "/usr/lib").as_deref(), Some("usr/lib"));
        assert_eq!(inner("/", "/").as_deref(), Some(""));
        for (root, path) in [
            ("/drv", "/drv/a/b"),
            ("/drv/", "/drv"),
            ("/", "/a"),
            ("/a", "/ab"),
        ] {
            let by_components = Path::new(path)
                .strip_prefix(root)
                .ok()
                .map(|p| p.to_str().unwrap().to_string());
            assert_eq!(inner(root, path), by_components, "{root} {path}");
        }
    }
}

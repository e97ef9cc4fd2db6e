//! Resolves paths inside a host driver root, as if that root were `/`.
//!
//! A containerized driver lives under its own root (e.g. `/run/nvidia/driver`)
//! and its symlinks are written for that root: `/etc/alternatives/...` means
//! `<root>/etc/alternatives/...`. Resolution re-roots absolute links, follows
//! relative ones, and refuses any `..` that would climb out of the root. It
//! never returns a path outside the root.

use std::cell::RefCell;
use std::ffi::OsStr;
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::{Error, Result};

/// Symlinks followed in one resolution before giving up, as Linux's `MAXSYMLINKS`.
pub(super) const MAX_LINKS: usize = 40;

/// A host tree that holds a driver, the root all its paths are relative to.
#[derive(Debug, Clone)]
pub struct DriverRoot {
    root: PathBuf,
    /// Host paths already examined, and what they were. Discovery resolves
    /// dozens of paths through the same few directories, and a Debian host
    /// lists each library twice (`/usr/lib/<triplet>` and the `nvidia/current`
    /// it links to), so each path is `lstat`ed, and each link read, once.
    seen: RefCell<Vec<(Vec<u8>, Seen)>>,
}

/// What a host path under the root was found to be.
#[derive(Debug, Clone)]
enum Seen {
    /// A symlink, its target, and its own metadata.
    Link(PathBuf, Metadata),
    /// Anything else (a directory, a file), with its metadata.
    Entry(Metadata),
}

/// A path resolved inside the root: no symlink in any component.
#[derive(Debug)]
pub struct Resolved {
    /// The path as the host sees it, under the root.
    pub host: PathBuf,
    /// The path as seen from inside the root, absolute (e.g. `/usr/lib/libcuda.so.1`).
    pub inner: PathBuf,
    /// What the final component is (never a symlink).
    pub metadata: Metadata,
}

impl DriverRoot {
    /// A driver root at `root`, an absolute host path.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DriverRoot {
            root: root.into(),
            seen: RefCell::new(Vec::new()),
        }
    }

    /// The root as the host sees it.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Where `inner` (a path as seen from inside the root) lies on the host, without resolving anything.
    pub fn host_path(&self, inner: &Path) -> PathBuf {
        let mut host = self.root.clone();
        host.extend(
            inner
                .components()
                .filter(|c| matches!(c, Component::Normal(_))),
        );
        host
    }

    /// Resolves `inner`, a path as seen from inside the root, following every
    /// symlink inside the root.
    pub fn resolve(&self, inner: &Path) -> Result<Resolved> {
        // What is still to walk, from `next` on: components between slashes.
        let mut rest = Pending::new(inner);
        // The components walked, as a host path under the root.
        let mut host = HostPath::new(&self.root);
        let mut links = 0;
        // Whether `host` is a directory, and its metadata when we have it.
        let (mut is_dir, mut last) = self.root_metadata(inner)?;
        while let Some(name) = rest.next() {
            if name == b".." {
                if !host.pop() {
                    return Err(Error::Escapes {
                        root: self.root.clone(),
                        path: inner.to_path_buf(),
                        via: host.inner(),
                    });
                }
                // The parent of anything is a directory.
                (is_dir, last) = (true, None);
                continue;
            }
            if !is_dir {
                return Err(Error::NotADirectory {
                    root: self.root.clone(),
                    path: inner.to_path_buf(),
                    component: host.inner(),
                });
            }
            host.push(name);
            match self.examine(inner, host.as_path())? {
                Seen::Link(target, _) => {
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(Error::TooManyLinks {
                            root: self.root.clone(),
                            path: inner.to_path_buf(),
                        });
                    }
                    host.pop();
                    if target.is_absolute() {
                        host.clear();
                    }
                    rest.prepend(target.as_os_str().as_bytes());
                    // What remains of `host` held the link: a directory.
                    (is_dir, last) = (true, None);
                }
                Seen::Entry(metadata) => (is_dir, last) = (metadata.is_dir(), Some(metadata)),
            }
        }
        let (resolved_inner, host) = (host.inner(), host.as_path().to_path_buf());
        let metadata = match last {
            Some(metadata) => metadata,
            None => fs::symlink_metadata(&host).map_err(|e| self.io(inner, &host, e))?,
        };
        Ok(Resolved {
            host,
            inner: resolved_inner,
            metadata,
        })
    }

    /// Whether the root itself is a directory (`lstat`ed once per
    /// `DriverRoot`), with its metadata when it was just read.
    fn root_metadata(&self, inner: &Path) -> Result<(bool, Option<Metadata>)> {
        if let Some(Seen::Entry(metadata)) = self.recall(self.root.as_os_str().as_bytes()) {
            return Ok((metadata.is_dir(), Some(metadata)));
        }
        let metadata =
            fs::symlink_metadata(&self.root).map_err(|e| self.io(inner, &self.root, e))?;
        self.remember(&self.root, Seen::Entry(metadata.clone()));
        Ok((metadata.is_dir(), Some(metadata)))
    }

    /// What `host` is: `lstat`ed (and read, if a link) the first time only.
    fn examine(&self, inner: &Path, host: &Path) -> Result<Seen> {
        if let Some(seen) = self.recall(host.as_os_str().as_bytes()) {
            return Ok(seen);
        }
        let metadata = match fs::symlink_metadata(host) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::NotFound {
                    root: self.root.clone(),
                    path: inner.to_path_buf(),
                })
            }
            Err(e) => return Err(self.io(inner, host, e)),
        };
        let seen = if metadata.file_type().is_symlink() {
            Seen::Link(
                fs::read_link(host).map_err(|e| self.io(inner, host, e))?,
                metadata,
            )
        } else {
            Seen::Entry(metadata)
        };
        self.remember(host, seen.clone());
        Ok(seen)
    }

    /// Every host path examined so far (the root, each component walked,
    /// each link read), with what `lstat` said of it: everything discovery's
    /// answers from this root depend on, as [`super::snapshot`] checks them.
    pub fn examined(&self) -> Vec<(PathBuf, Metadata)> {
        self.seen
            .borrow()
            .iter()
            .map(|(path, seen)| {
                let metadata = match seen {
                    Seen::Link(_, metadata) | Seen::Entry(metadata) => metadata.clone(),
                };
                (PathBuf::from(OsStr::from_bytes(path)), metadata)
            })
            .collect()
    }

    /// What `host` was seen to be, if it was. A driver root holds a few
    /// dozen paths of interest, so comparing bytes beats hashing.
    fn recall(&self, host: &[u8]) -> Option<Seen> {
        self.seen
            .borrow()
            .iter()
            .find(|(path, _)| path.as_slice() == host)
            .map(|(_, seen)| seen.clone())
    }

    fn remember(&self, host: &Path, seen: Seen) {
        self.seen
            .borrow_mut()
            .push((host.as_os_str().as_bytes().to_vec(), seen));
    }

    fn io(&self, path: &Path, at: &Path, source: io::Error) -> Error {
        Error::Inspect {
            root: self.root.clone(),
            path: path.to_path_buf(),
            at: at.to_path_buf(),
            source,
        }
    }
}

/// A host path under the root, grown and shrunk one component at a time
/// during resolution without reparsing it (as `PathBuf::push` would).
struct HostPath {
    bytes: Vec<u8>,
    /// Length of the root, without a trailing slash.
    base: usize,
    /// Length before each pushed component.
    ends: Vec<usize>,
}

impl HostPath {
    fn new(root: &Path) -> Self {
        let bytes = root.as_os_str().as_bytes();
        let base = bytes.len() - bytes.iter().rev().take_while(|&&b| b == b'/').count();
        HostPath {
            bytes: bytes[..base].to_vec(),
            base,
            ends: Vec::new(),
        }
    }

    /// Appends `name`, a single component.
    fn push(&mut self, name: &[u8]) {
        self.ends.push(self.bytes.len());
        self.bytes.push(b'/');
        self.bytes.extend_from_slice(name);
    }

    /// Drops the last component pushed; false when there was none (at the root).
    fn pop(&mut self) -> bool {
        match self.ends.pop() {
            Some(end) => {
                self.bytes.truncate(end);
                true
            }
            None => false,
        }
    }

    /// Back to the root.
    fn clear(&mut self) {
        self.bytes.truncate(self.base);
        self.ends.clear();
    }

    /// The path as seen from inside the root: what was pushed, from `/`.
    fn inner(&self) -> PathBuf {
        match &self.bytes[self.base..] {
            [] => PathBuf::from("/"),
            rest => PathBuf::from(OsStr::from_bytes(rest)),
        }
    }

    fn as_path(&self) -> &Path {
        if self.bytes.is_empty() {
            Path::new("/")
        } else {
            Path::new(OsStr::from_bytes(&self.bytes))
        }
    }
}

/// The part of a path still to walk, as bytes: components come off the
/// front, and a symlink's target goes in front of what remains. Empty
/// components and `.` vanish, as in `Path::components`, without its parsing
/// or an allocation per component.
struct Pending {
    bytes: Vec<u8>,
    next: usize,
}

impl Pending {
    fn new(path: &Path) -> Self {
        Pending {
            bytes: path.as_os_str().as_bytes().to_vec(),
            next: 0,
        }
    }

    /// The next component, `..` included.
    fn next(&mut self) -> Option<&[u8]> {
        loop {
            let rest = &self.bytes[self.next..];
            let start = rest.iter().position(|&b| b != b'/')?;
            let len = rest[start..]
                .iter()
                .position(|&b| b == b'/')
                .unwrap_or(rest.len() - start);
            let begin = self.next + start;
            self.next = begin + len;
            if &self.bytes[begin..self.next] != b"." {
                return Some(&self.bytes[begin..self.next]);
            }
        }
    }

    /// Puts `path` in front of what remains.
    fn prepend(&mut self, path: &[u8]) {
        let mut bytes = Vec::with_capacity(path.len() + 1 + self.bytes.len() - self.next);
        bytes.extend_from_slice(path);
        bytes.push(b'/');
        bytes.extend_from_slice(&self.bytes[self.next..]);
        (self.bytes, self.next) = (bytes, 0);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn tree() -> (tempfile::TempDir, DriverRoot) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("driver");
        fs::create_dir_all(root.join("usr/lib/x86_64-linux-gnu/nvidia/current")).unwrap();
        fs::create_dir_all(root.join("etc/alternatives")).unwrap();
        fs::write(
            root.join("usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.261.03"),
            b"x",
        )
        .unwrap();
        symlink(
            "libcuda.so.535.261.03",
            root.join("usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1"),
        )
        .unwrap();
        symlink(
            "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1",
            root.join("etc/alternatives/nvidia--libcuda.so.1"),
        )
        .unwrap();
        symlink(
            "/etc/alternatives/nvidia--libcuda.so.1",
            root.join("usr/lib/x86_64-linux-gnu/libcuda.so.1"),
        )
        .unwrap();
        (dir, DriverRoot::new(root))
    }

    #[test]
    fn follows_alternatives_chain_inside_root() {
        let (_dir, root) = tree();
        let resolved = root
            .resolve(Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1"))
            .unwrap();
        assert_eq!(
            resolved.inner,
            Path::new("/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.261.03")
        );
        assert_eq!(
            resolved.host,
            root.path()
                .join("usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.261.03")
        );
        assert!(resolved.metadata.is_file());
    }

    #[test]
    fn pending_components_skip_empty_and_dot_and_take_links_in_front() {
        let mut rest = Pending::new(Path::new("//usr/./lib//../lib64/"));
        let mut seen: Vec<String> = Vec::new();
        while let Some(name) = rest.next() {
            let name = String::from_utf8(name.to_vec()).unwrap();
            if name == "lib" {
                rest.prepend(b"/etc/./alternatives/");
            }
            seen.push(name);
        }
        assert_eq!(seen, ["usr", "lib", "etc", "alternatives", "..", "lib64"]);
        assert!(Pending::new(Path::new("/")).next().is_none());
        assert!(Pending::new(Path::new("./.")).next().is_none());
    }

    #[test]
    fn each_path_is_examined_once_per_root() {
        let (dir, root) = tree();
        let current = dir
            .path()
            .join("driver/usr/lib/x86_64-linux-gnu/nvidia/current");
        root.resolve(Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1"))
            .unwrap();
        // The second name of the library goes through links already read and
        // a file already examined: the disk is not asked again.
        fs::remove_file(current.join("libcuda.so.1")).unwrap();
        fs::remove_file(current.join("libcuda.so.535.261.03")).unwrap();
        let again = root
            .resolve(Path::new(
                "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1",
            ))
            .unwrap();
        assert_eq!(
            again.inner,
            Path::new("/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.261.03")
        );
        assert!(again.metadata.is_file());
        // A fresh root sees the disk as it is now.
        let fresh = DriverRoot::new(root.path());
        assert!(matches!(
            fresh.resolve(Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1")),
            Err(Error::NotFound { .. })
        ));
    }

    #[test]
    fn absolute_link_is_rerooted_not_followed_to_the_host() {
        let (_dir, root) = tree();
        // /etc/passwd exists on the host but not in the root: it must not be found.
        symlink(
            "/etc/passwd",
            root.path()
                .join("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"),
        )
        .unwrap();
        let err = root
            .resolve(Path::new("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"))
            .unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err}");
    }

    #[test]
    fn refuses_relative_link_that_climbs_out() {
        let (_dir, root) = tree();
        symlink(
            "../../../../../../etc/passwd",
            root.path()
                .join("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"),
        )
        .unwrap();
        let err = root
            .resolve(Path::new("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"))
            .unwrap_err();
        assert!(matches!(err, Error::Escapes { .. }), "{err}");
        assert!(err.to_string().contains("escapes"), "{err}");
    }

    #[test]
    fn refuses_dotdot_in_the_requested_path() {
        let (_dir, root) = tree();
        assert!(matches!(
            root.resolve(Path::new("/../etc/passwd")),
            Err(Error::Escapes { .. })
        ));
    }

    #[test]
    fn relative_dotdot_within_root_is_fine() {
        let (_dir, root) = tree();
        symlink(
            "../x86_64-linux-gnu/nvidia/current/libcuda.so.1",
            root.path().join("usr/lib/x86_64-linux-gnu/libcuda.so"),
        )
        .unwrap();
        let resolved = root
            .resolve(Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so"))
            .unwrap();
        assert!(resolved.inner.ends_with("libcuda.so.535.261.03"));
    }

    #[test]
    fn symlink_loop_is_an_error() {
        let (_dir, root) = tree();
        symlink("b", root.path().join("etc/a")).unwrap();
        symlink("a", root.path().join("etc/b")).unwrap();
        assert!(matches!(
            root.resolve(Path::new("/etc/a")),
            Err(Error::TooManyLinks { .. })
        ));
    }

    #[test]
    fn file_used_as_directory_is_an_error() {
        let (_dir, root) = tree();
        let err = root
            .resolve(Path::new(
                "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.261.03/x",
            ))
            .unwrap_err();
        assert!(matches!(err, Error::NotADirectory { .. }), "{err}");
    }

    #[test]
    fn host_path_never_leaves_the_root() {
        let root = DriverRoot::new("/sim/driver");
        assert_eq!(
            root.host_path(Path::new("/../../etc/passwd")),
            Path::new("/sim/driver/etc/passwd")
        );
    }
}

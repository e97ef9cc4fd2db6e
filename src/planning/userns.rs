//! User namespaces: whether a container runs in one, as its process's
//! `/proc/<pid>/uid_map` says.
//!
//! Two shapes reach the hook. Under a root runtime whose `config.json` asks
//! for a `user` namespace, the hook runs as host root and the container's
//! root is some other host id (say 100000). Under rootless Podman the
//! `config.json` has no `user` namespace at all: Podman, conmon, the runtime
//! and so the hook already run in the user's own user namespace, where the
//! hook is the container's root. Either way the container's
//! `/proc/<pid>/uid_map` is not the initial namespace's identity map, which
//! is how both are detected. What the hook then does differently is the
//! planner's decision (bound nodes, no device cgroup when rootless) and
//! [`crate::apply::inject::userns`]'s (files made as the container's root).

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Why the container's user namespace could not be told.
#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
}

/// Result of a look at a user namespace.
pub type Result<T> = std::result::Result<T, Error>;

/// The container's user namespace, as seen from the hook's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserNamespace {
    /// The container's root, with every id its namespace maps, in ids of
    /// the hook's own user namespace, when the container's user namespace
    /// is another one (a root runtime with a `user` namespace in
    /// `config.json`); `None` when the hook already runs in the container's
    /// user namespace (rootless Podman), where the kernel itself holds the
    /// hook to the container root's rights.
    pub root: Option<MappedRoot>,
    /// The hook itself runs in a user namespace (rootless Podman): it has no
    /// `CAP_SYS_ADMIN` in the initial one, so no device cgroup can be
    /// written, and none was made for the container either.
    pub rootless: bool,
}

/// The container's root seen from outside its user namespace: the ids it
/// acts as, and the ids its namespace maps, over which alone its
/// capabilities reach (the kernel's `capable_wrt_inode_uidgid`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedRoot {
    /// The host uid the container's root is.
    pub uid: u32,
    /// The host gid the container's root is.
    pub gid: u32,
    /// The container's `uid_map`.
    pub uids: Vec<IdRange>,
    /// The container's `gid_map`.
    pub gids: Vec<IdRange>,
}

impl MappedRoot {
    /// Whether a file owned by host `uid`:`gid` is one the container's root
    /// has its capabilities over: both ids are mapped into its namespace.
    pub fn maps(&self, uid: u32, gid: u32) -> bool {
        let within = |ranges: &[IdRange], id: u32| {
            ranges.iter().any(|r| {
                id >= r.outside && u64::from(id) < u64::from(r.outside) + u64::from(r.count)
            })
        };
        within(&self.uids, uid) && within(&self.gids, gid)
    }
}

/// One `uid_map`/`gid_map` line: ids `inside..inside+count` of the
/// namespace are `outside..` of the reader's (or the parent's) namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    pub inside: u32,
    pub outside: u32,
    pub count: u32,
}

/// Parses `/proc/<pid>/uid_map` (or `gid_map`); `None` on a malformed line.
pub fn parse_id_map(text: &str) -> Option<Vec<IdRange>> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let mut fields = line.split_whitespace().map(|f| f.parse::<u32>().ok());
            let range = IdRange {
                inside: fields.next()??,
                outside: fields.next()??,
                count: fields.next()??,
            };
            fields.next().is_none().then_some(range)
        })
        .collect()
}

/// Whether `map` is the initial user namespace's (every id maps to itself).
pub fn is_initial(map: &[IdRange]) -> bool {
    map == [IdRange {
        inside: 0,
        outside: 0,
        count: u32::MAX,
    }]
}

/// The outside id of the container's root (inside id 0); when root is not
/// mapped, of the lowest id that is.
pub fn root_id(map: &[IdRange]) -> Option<u32> {
    map.iter()
        .find(|r| r.inside == 0 && r.count > 0)
        .or_else(|| map.iter().filter(|r| r.count > 0).min_by_key(|r| r.inside))
        .map(|r| r.outside)
}

fn read(path: PathBuf) -> Result<String> {
    crate::util::bounded_read::read_text(&path).map_err(|source| Error::Read { path, source })
}

fn id_map(path: PathBuf) -> Result<Vec<IdRange>> {
    let text = read(path.clone())?;
    parse_id_map(&text).ok_or_else(|| Error::Read {
        path,
        source: io::Error::new(io::ErrorKind::InvalidData, format!("bad id map {text:?}")),
    })
}

/// The user namespace of container process `pid`, or `None` when it runs in
/// the initial one (then mknod and the device cgroup work as usual).
pub fn detect(proc: &Path, pid: u32) -> Result<Option<UserNamespace>> {
    detect_at(proc, &pid.to_string())
}

/// The user namespace this process runs in, or `None` for the initial one:
/// the container's when a container manager runs us from its own hook
/// (`nvidia-container-cli configure` without `--pid`). Read through
/// `/proc/self`, which names this process whatever pid namespace it is in.
pub fn detect_own(proc: &Path) -> Result<Option<UserNamespace>> {
    detect_at(proc, "self")
}

/// [`detect`] for the process `/proc/<name>` names.
fn detect_at(proc: &Path, name: &str) -> Result<Option<UserNamespace>> {
    let dir = proc.join(name);
    let uid_map = id_map(dir.join("uid_map"))?;
    if is_initial(&uid_map) {
        return Ok(None);
    }
    let ns = |path: PathBuf| {
        std::fs::metadata(&path)
            .map(|m| (m.dev(), m.ino()))
            .map_err(|source| Error::Read { path, source })
    };
    let rootless = !is_initial(&id_map(proc.join("self/uid_map"))?);
    if ns(dir.join("ns/user"))? == ns(proc.join("self/ns/user"))? {
        return Ok(Some(UserNamespace {
            root: None,
            rootless,
        }));
    }
    // Read from another user namespace, the outside ids are the reader's own.
    let gid_map = id_map(dir.join("gid_map"))?;
    let root = match (root_id(&uid_map), root_id(&gid_map)) {
        (Some(uid), Some(gid)) => Some(MappedRoot {
            uid,
            gid,
            uids: uid_map,
            gids: gid_map,
        }),
        _ => {
            return Err(Error::Read {
                path: dir.join("uid_map"),
                source: io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the container's user namespace maps no uid or no gid",
                ),
            })
        }
    };
    Ok(Some(UserNamespace { root, rootless }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_maps() {
        let map = parse_id_map("         0     100000      65536\n").unwrap();
        assert_eq!(
            map,
            [IdRange {
                inside: 0,
                outside: 100000,
                count: 65536
            }]
        );
        assert!(!is_initial(&map));
        assert_eq!(root_id(&map), Some(100000));
        let initial = parse_id_map("         0          0 4294967295\n").unwrap();
        assert!(is_initial(&initial));
        assert_eq!(parse_id_map("0 1 x\n"), None);
        assert_eq!(parse_id_map("0 1 2 3\n"), None);
        assert_eq!(parse_id_map("0 1\n"), None);
    }

    #[test]
    fn root_id_prefers_the_root_mapping() {
        // Rootless Podman's shape: root is the user, the rest subordinate ids.
        let map = parse_id_map("1 100000 65536\n0 1001 1\n").unwrap();
        assert_eq!(root_id(&map), Some(1001));
        // Root unmapped: the lowest mapped id stands in.
        let map = parse_id_map("1000 1001 1\n1 100000 999\n").unwrap();
        assert_eq!(root_id(&map), Some(100000));
        assert_eq!(root_id(&[]), None);
    }

    #[test]
    fn the_root_has_its_capabilities_over_mapped_owners_only() {
        let root = MappedRoot {
            uid: 100000,
            gid: 100000,
            uids: parse_id_map("0 100000 65536\n").unwrap(),
            gids: parse_id_map("0 100000 65536\n1000 5000 1\n").unwrap(),
        };
        assert!(root.maps(100000, 100000));
        assert!(root.maps(165535, 5000));
        assert!(!root.maps(0, 0), "host root");
        assert!(!root.maps(165536, 100000), "past the range");
        assert!(!root.maps(100000, 0), "both ids must be mapped");
        let full = MappedRoot {
            uids: parse_id_map("0 4294967195 100\n").unwrap(),
            ..root
        };
        assert!(full.maps(u32::MAX - 1, 100000), "no overflow at the top");
    }

    #[test]
    fn own_process_is_in_the_initial_namespace_or_its_own() {
        // This test runs either on the host (initial namespace) or in some
        // user namespace, which is then its own: never with a `root` to switch to.
        let found = detect(Path::new("/proc"), std::process::id()).unwrap();
        assert!(
            found
                .as_ref()
                .is_none_or(|ns| ns.root.is_none() && ns.rootless),
            "{found:?}"
        );
    }
}

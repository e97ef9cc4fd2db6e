//! Whose files the hook creates in a container with a user namespace
//! ([`crate::planning::userns`] tells it has one).
//!
//! Under a root runtime with a `user` namespace, the hook must not create files as host root: the
//! runtime's `/dev` tmpfs belongs to the container's user namespace, which
//! cannot represent host uid 0, so the kernel refuses to create anything
//! there (`EOVERFLOW`), and in the rootfs such files would belong to
//! `nobody`. The hook therefore switches its filesystem ids (`setfsuid`,
//! `setfsgid`) to the container root's host ids before it enters the
//! container's mount namespace: mount targets, links and the loader cache
//! belong to the container's root, as if it had made them. The switch
//! drops the file capabilities (`CAP_DAC_OVERRIDE`, `CAP_FOWNER`, ...) from
//! the effective set; they are taken back, as the container's root has them
//! too. Mounts need `CAP_SYS_ADMIN`, which the switch does not touch.
//!
//! Those capabilities are the host's, though, and reach further than the
//! container root's own: [`may_change`] holds every change to what the
//! container's root could make itself.

use std::ffi::OsStr;
use std::io;
use std::os::fd::BorrowedFd;
use std::path::Path;

use caps::CapSet;
use nix::fcntl::AtFlags;
use nix::sys::stat::{fstat, fstatat};
use nix::unistd::{setfsgid, setfsuid, Gid, Uid};

use super::slot::Place;
use super::{Error, Result};
use crate::planning::userns::MappedRoot;

/// Creates files from now on as `uid`:`gid` (this thread's filesystem ids).
/// `setfsuid` reports no errors, so each switch is checked by asking again.
pub fn act_as(uid: u32, gid: u32) -> Result<()> {
    let failed = |what: &str, id: u32| Error::Identity {
        uid,
        gid,
        source: io::Error::other(format!("{what}({id}) did not take effect")),
    };
    // Both need CAP_SETUID/CAP_SETGID, which the switch leaves alone.
    setfsgid(Gid::from_raw(gid));
    if setfsgid(Gid::from_raw(gid)) != Gid::from_raw(gid) {
        return Err(failed("setfsgid", gid));
    }
    setfsuid(Uid::from_raw(uid));
    if setfsuid(Uid::from_raw(uid)) != Uid::from_raw(uid) {
        return Err(failed("setfsuid", uid));
    }
    // Leaving fsuid 0 dropped CAP_DAC_OVERRIDE, CAP_FOWNER and the like from
    // the effective set; the container's root has them in its namespace (it
    // may write where an image's other users own things), so take them back.
    restore_effective_caps().map_err(|source| Error::Identity { uid, gid, source })
}

/// Sets this thread's effective capabilities to its permitted ones.
fn restore_effective_caps() -> io::Result<()> {
    let permitted = caps::read(None, CapSet::Permitted).map_err(io::Error::other)?;
    caps::set(None, CapSet::Effective, &permitted).map_err(io::Error::other)
}

/// What a change does to a directory of the rootfs, for [`may_change`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edit {
    /// A new entry where there was none.
    Add,
    /// An entry of the image taken aside for ours.
    Replace,
}

/// Whether the container's root, `root`, could itself make `edit` at
/// `place`; the hook acts with its capabilities only where they would
/// reach. Its file ids are the container root's already ([`act_as`]), but
/// its capabilities are the host's: they override the permissions of any
/// file, while the container root's own reach only files whose owner and
/// group its user namespace maps (`capable_wrt_inode_uidgid`). A host
/// directory bind-mounted into the container, owned by host root, is one
/// the container's root cannot write to, and neither may the hook. The
/// kernel's rules, as `generic_permission` and `check_sticky` apply them,
/// are checked here before each change; ACLs are not read, so a directory
/// whose ACL alone would let the container's root in is refused.
pub fn may_change(root: &MappedRoot, place: Place<'_>, edit: Edit) -> Result<()> {
    let stat = |fd, name: &OsStr| {
        fstatat(
            fd,
            name,
            AtFlags::AT_SYMLINK_NOFOLLOW | AtFlags::AT_EMPTY_PATH,
        )
        .map_err(|errno| Error::Stat {
            path: place.path.to_path_buf(),
            source: errno.into(),
        })
    };
    let dir = Owner::of(&stat(place.dir, OsStr::new(""))?);
    let entry = match edit {
        Edit::Replace if dir.mode & 0o1000 != 0 => Some(Owner::of(&stat(place.dir, place.name)?)),
        _ => None,
    };
    match refusal(root, dir, entry) {
        None => Ok(()),
        Some(why) => Err(Error::BeyondContainerRoot {
            path: place.path.to_path_buf(),
            uid: root.uid,
            gid: root.gid,
            why,
        }),
    }
}

/// Whether the container's root could change the mode of the entry `fd`
/// (at `path`): as its owner, or with `CAP_FOWNER` over a mapped owner.
pub fn may_change_mode(root: &MappedRoot, fd: BorrowedFd<'_>, path: &Path) -> Result<()> {
    let stat = fstat(fd).map_err(|errno| Error::Stat {
        path: path.to_path_buf(),
        source: errno.into(),
    })?;
    let owner = Owner::of(&stat);
    if owner.uid == root.uid || root.maps(owner.uid, owner.gid) {
        return Ok(());
    }
    Err(Error::BeyondContainerRoot {
        path: path.to_path_buf(),
        uid: root.uid,
        gid: root.gid,
        why: format!(
            "it belongs to {}:{}, ids its user namespace does not map",
            owner.uid, owner.gid
        ),
    })
}

/// The owner, group and mode of an inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owner {
    uid: u32,
    gid: u32,
    mode: u32,
}

impl Owner {
    fn of(stat: &nix::sys::stat::FileStat) -> Owner {
        Owner {
            uid: stat.st_uid,
            gid: stat.st_gid,
            mode: stat.st_mode & 0o7777,
        }
    }
}

/// Why the container's root could not add to (or, with `entry`, the entry
/// being replaced in a sticky directory, replace in) directory `dir`;
/// `None` where it could.
fn refusal(root: &MappedRoot, dir: Owner, entry: Option<Owner>) -> Option<String> {
    // Writing to a directory takes write and search permission.
    let bits = if dir.uid == root.uid {
        dir.mode >> 6
    } else if dir.gid == root.gid {
        dir.mode >> 3
    } else {
        dir.mode
    };
    if bits & 0o3 != 0o3 && !root.maps(dir.uid, dir.gid) {
        return Some(format!(
            "the directory belongs to {}:{}, ids its user namespace does not map, and its mode {:04o} does not let the container's root write there",
            dir.uid, dir.gid, dir.mode
        ));
    }
    // In a sticky directory only an entry's owner, the directory's owner,
    // or CAP_FOWNER over the entry may take the entry away.
    match entry {
        Some(entry)
            if entry.uid != root.uid && dir.uid != root.uid && !root.maps(entry.uid, entry.gid) =>
        {
            Some(format!(
                "the directory is sticky and the entry there belongs to {}:{}, ids its user namespace does not map",
                entry.uid, entry.gid
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planning::userns::parse_id_map;

    fn root() -> MappedRoot {
        let ids = parse_id_map("0 100000 65536\n").unwrap();
        MappedRoot {
            uid: 100000,
            gid: 100000,
            uids: ids.clone(),
            gids: ids,
        }
    }

    fn owner(uid: u32, gid: u32, mode: u32) -> Owner {
        Owner { uid, gid, mode }
    }

    #[test]
    fn a_host_owned_directory_is_refused_unless_its_mode_lets_anyone_in() {
        let root = root();
        let refused = refusal(&root, owner(0, 0, 0o755), None).unwrap();
        assert!(refused.contains("belongs to 0:0"), "{refused}");
        assert!(refused.contains("0755"), "{refused}");
        assert_eq!(
            refusal(&root, owner(0, 0, 0o777), None),
            None,
            "others may write"
        );
        assert!(
            refusal(&root, owner(0, 0, 0o776), None).is_some(),
            "no search"
        );
        assert_eq!(
            refusal(&root, owner(0, 100000, 0o775), None),
            None,
            "its group"
        );
        assert!(refusal(&root, owner(0, 100000, 0o755), None).is_some());
        assert_eq!(
            refusal(&root, owner(100000, 0, 0o700), None),
            None,
            "its own"
        );
        assert!(
            refusal(&root, owner(100000, 0, 0o500), None).is_some(),
            "not even its own"
        );
    }

    #[test]
    fn a_mapped_owner_is_overridden_as_the_containers_root_would() {
        let root = root();
        // Fedora's /usr/lib is 0555, root's: the container's root writes there.
        assert_eq!(refusal(&root, owner(100000, 100000, 0o555), None), None);
        assert_eq!(refusal(&root, owner(101000, 101000, 0o700), None), None);
        // Mapped uid, unmapped group: no capability reaches it.
        assert!(refusal(&root, owner(101000, 0, 0o755), None).is_some());
    }

    #[test]
    fn a_sticky_directory_keeps_other_owners_entries() {
        let root = root();
        let tmp = owner(0, 0, 0o1777);
        assert_eq!(refusal(&root, tmp, None), None, "adding is fine");
        let refused = refusal(&root, tmp, Some(owner(0, 0, 0o644))).unwrap();
        assert!(refused.contains("sticky"), "{refused}");
        assert_eq!(
            refusal(&root, tmp, Some(owner(100000, 100000, 0o644))),
            None
        );
        assert_eq!(
            refusal(&root, tmp, Some(owner(100500, 100500, 0o644))),
            None
        );
        let own = owner(100000, 100000, 0o1755);
        assert_eq!(refusal(&root, own, Some(owner(0, 0, 0o644))), None);
    }
}

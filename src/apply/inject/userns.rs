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

use std::io;

use caps::CapSet;
use nix::unistd::{setfsgid, setfsuid, Gid, Uid};

use super::{Error, Result};

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

//! `mount_setattr(2)`, the one call of the new mount API that rustix does
//! not wrap (it wraps `open_tree` and `move_mount`, which callers use
//! directly). It only sets flags on a detached mount the caller owns; it
//! never looks a path up.

use std::ffi::{c_uint, CStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::libc;

/// `MOUNT_ATTR_RDONLY` of `struct mount_attr`.
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// `MOUNT_ATTR_NOSUID`.
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
/// `MOUNT_ATTR_NODEV`.
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
/// `MOUNT_ATTR_NOEXEC`.
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// The empty path `AT_EMPTY_PATH` goes with.
const EMPTY: &CStr = c"";

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `mount_setattr(tree, "", AT_EMPTY_PATH, {attr_set})`: sets the
/// `MOUNT_ATTR_*` bits `attr_set` on the mount `tree` refers to (a detached
/// mount from `open_tree`, so nothing visible changes before it is moved).
/// `ENOSYS` before Linux 5.12.
pub fn mount_setattr(tree: BorrowedFd<'_>, attr_set: u64) -> io::Result<()> {
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `attr` lives across the call and its size is passed with it;
    // the kernel only reads it. The descriptor is borrowed, so it stays open
    // for the call, and the path is a valid NUL-terminated string.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            EMPTY.as_ptr(),
            libc::AT_EMPTY_PATH as c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

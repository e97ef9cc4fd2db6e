//! Confines the forked child that runs driver code (NVML, libcuda): driver
//! libraries have side effects on the machine (NVIDIA's `libnvidia-ml`,
//! initialised as root, makes `/dev/nvidiactl` through `nvidia-modprobe`),
//! and a query must change nothing on the host. The child gets its own mount
//! namespace, none of whose mounts propagate back, in which `/dev` and every
//! mount below it are read-only: the driver's nodes still open (a read-only
//! mount refuses writes to files, not I/O on device nodes), but no node or
//! file can be made there.

use std::io;
use std::path::{Path, PathBuf};

use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};

/// The mounts of this process's namespace at or below `/dev`, with the
/// per-mount flags a bind remount must keep (a user namespace locks them).
fn dev_mounts() -> io::Result<Vec<(PathBuf, MsFlags)>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mut found = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(point), Some(options)) = (fields.get(4), fields.get(5)) else {
            continue;
        };
        let point = unescape(point);
        if point != Path::new("/dev") && !point.starts_with("/dev/") {
            continue;
        }
        let mut flags = MsFlags::empty();
        for option in options.split(',') {
            flags |= match option {
                "nosuid" => MsFlags::MS_NOSUID,
                "nodev" => MsFlags::MS_NODEV,
                "noexec" => MsFlags::MS_NOEXEC,
                "noatime" => MsFlags::MS_NOATIME,
                "nodiratime" => MsFlags::MS_NODIRATIME,
                "relatime" => MsFlags::MS_RELATIME,
                _ => MsFlags::empty(),
            };
        }
        found.push((point, flags));
    }
    Ok(found)
}

/// A mountinfo path: spaces, tabs, newlines and backslashes come octal-escaped.
fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal {
            Some(digits) => {
                let value = digits.iter().fold(0u32, |v, d| v * 8 + u32::from(d - b'0'));
                out.push(value as u8);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(out))
}

/// Puts the calling process (a freshly forked, single-threaded child) in a
/// mount namespace of its own, private, with `/dev` and every mount below it
/// read-only; `Ok(false)` where it may not make a mount namespace at all
/// (no `CAP_SYS_ADMIN`: inside a container, such as doctor's live check,
/// whose `/dev` is the container's own). An error leaves the child to refuse
/// its query: driver code never runs half-confined.
pub fn driver_child() -> io::Result<bool> {
    match unshare(CloneFlags::CLONE_NEWNS) {
        Ok(()) => {}
        Err(nix::errno::Errno::EPERM) => return Ok(false),
        Err(e) => return Err(io::Error::other(format!("unshare: {e}"))),
    }
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| io::Error::other(format!("making its mounts private: {e}")))?;
    for (point, kept) in dev_mounts()? {
        mount(
            None::<&str>,
            &point,
            None::<&str>,
            MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | kept,
            None::<&str>,
        )
        .map_err(|e| io::Error::other(format!("making {} read-only: {e}", point.display())))?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(unescape("/dev/a\\040b"), PathBuf::from("/dev/a b"));
        assert_eq!(unescape("/dev/x\\\\y"), PathBuf::from("/dev/x\\\\y"));
        assert_eq!(unescape("/dev/x\\134y"), PathBuf::from("/dev/x\\y"));
    }

    #[test]
    fn the_dev_mounts_include_dev() {
        let mounts = dev_mounts().unwrap();
        assert!(
            mounts.iter().any(|(p, _)| p == Path::new("/dev")),
            "{mounts:?}"
        );
    }
}

//! cgroup v1: one `devices.allow` write per rule.
//!
//! Owns writing rules into an already opened devices cgroup directory. It must
//! never create a file, follow a symlink, or write anything but a rule line.

#![forbid(unsafe_code)]

use std::os::fd::AsFd;

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::write;

use super::discovery::CgroupDir;
use super::{Error, Result};
use crate::planning::plan::CgroupRule;

const ALLOW: &str = "devices.allow";

/// Writes each rule to `<dir>/devices.allow` with one `write()` apiece, since
/// the kernel parses exactly one rule per write.
pub fn allow(dir: &CgroupDir, rules: &[CgroupRule]) -> Result<()> {
    let path = dir.path.join(ALLOW);
    let flags = OFlag::O_WRONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
    let file =
        openat(dir.fd.as_fd(), ALLOW, flags, Mode::empty()).map_err(|errno| match errno {
            Errno::ENOENT => Error::CgroupDirMissing {
                path: dir.path.clone(),
            },
            Errno::EACCES | Errno::EPERM | Errno::EROFS => Error::NotWritable { path, errno },
            _ => Error::OpenCgroupDir {
                path: dir.path.clone(),
                errno,
            },
        })?;
    for rule in rules {
        let line = rule.to_string();
        let written = write(&file, line.as_bytes()).map_err(|errno| Error::WriteRule {
            path: dir.path.join(ALLOW),
            rule: *rule,
            errno,
        })?;
        if written != line.len() {
            return Err(Error::WriteRule {
                path: dir.path.join(ALLOW),
                rule: *rule,
                errno: Errno::EIO,
            });
        }
    }
    Ok(())
}

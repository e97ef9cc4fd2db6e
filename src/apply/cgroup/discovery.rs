//! Finds a container's device cgroup directories in the hook's own view.
//!
//! Owns parsing `/proc/<pid>/cgroup` and `/proc/self/mountinfo`, and proving
//! that a mount listed there is the one a path lookup reaches (mountinfo also
//! lists mounts hidden under later ones). It must never create, write or
//! follow anything out of a verified cgroup mount: the directories it returns
//! are opened relative to that mount.

#![forbid(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag, AT_FDCWD};
use nix::sys::stat::Mode;
use nix::sys::statfs::{fstatfs, FsType, CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC};

use super::{Error, Result};

/// The two kinds of hierarchy that can restrict devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hierarchy {
    /// The cgroup v1 `devices` controller.
    V1Devices,
    /// The unified cgroup v2 hierarchy.
    V2,
}

impl Hierarchy {
    fn name(self) -> &'static str {
        match self {
            Hierarchy::V1Devices => "cgroup v1 devices",
            Hierarchy::V2 => "cgroup2",
        }
    }

    fn magic(self) -> FsType {
        match self {
            Hierarchy::V1Devices => CGROUP_SUPER_MAGIC,
            Hierarchy::V2 => CGROUP2_SUPER_MAGIC,
        }
    }
}

/// One line of `/proc/<pid>/cgroup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// Hierarchy id; 0 is the unified hierarchy.
    pub id: u32,
    /// Controllers bound to the hierarchy (v1), empty for v2.
    pub controllers: Vec<String>,
    /// The cgroup, relative to the reader's cgroup namespace root.
    pub path: PathBuf,
}

/// One line of `/proc/self/mountinfo`, the fields we use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// Mount id, as `fdinfo`'s `mnt_id` reports it.
    pub id: u64,
    /// The directory of the filesystem that is mounted.
    pub root: PathBuf,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Filesystem type.
    pub fstype: String,
    /// Per-superblock options; v1 cgroups list their controllers here.
    pub super_options: Vec<String>,
}

/// A container's cgroup directory, opened under a verified mount.
#[derive(Debug)]
pub struct CgroupDir {
    /// The directory in the hook's view, for errors and log lines.
    pub path: PathBuf,
    /// The open directory.
    pub fd: OwnedFd,
    /// How many levels it lies below the mount's root: how far up its
    /// ancestors stay in view.
    pub depth: usize,
}

/// Parses `/proc/<pid>/cgroup`.
pub fn parse_memberships(text: &str) -> std::result::Result<Vec<Membership>, String> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(line.to_string());
        };
        let id = id.parse().map_err(|_| line.to_string())?;
        if !path.starts_with('/') {
            return Err(line.to_string());
        }
        out.push(Membership {
            id,
            controllers: controllers
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect(),
            path: PathBuf::from(path),
        });
    }
    Ok(out)
}

/// Parses `/proc/self/mountinfo`, checking every line, and keeps the
/// `cgroup` and `cgroup2` mounts: the only ones that can hold a device
/// cgroup. A busy node has hundreds of other mounts; they are not unescaped.
pub fn parse_mountinfo(text: &str) -> std::result::Result<Vec<MountEntry>, String> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let bad = || line.to_string();
        let mut fields = line.split(' ');
        let mut next = || fields.next().ok_or_else(bad);
        let (id, _parent, _dev, root, mount_point, _options) =
            (next()?, next()?, next()?, next()?, next()?, next()?);
        // Optional fields end at the lone "-".
        while next()? != "-" {}
        let (fstype, _source, super_options) = (next()?, next()?, next()?);
        let id = id.parse().map_err(|_| bad())?;
        if fstype != "cgroup" && fstype != "cgroup2" {
            continue;
        }
        out.push(MountEntry {
            id,
            root: PathBuf::from(unescape(root)),
            mount_point: PathBuf::from(unescape(mount_point)),
            fstype: fstype.to_string(),
            super_options: super_options.split(',').map(unescape).collect(),
        });
    }
    Ok(out)
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\134` for `\`).
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| {
            b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) && d[0] <= b'3'
        });
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The container's cgroup in `hierarchy`, if it has one.
pub fn membership(memberships: &[Membership], hierarchy: Hierarchy) -> Option<&Path> {
    memberships
        .iter()
        .find(|m| match hierarchy {
            Hierarchy::V1Devices => m.controllers.iter().any(|c| c == "devices"),
            Hierarchy::V2 => m.id == 0 && m.controllers.is_empty(),
        })
        .map(|m| m.path.as_path())
}

/// Whether `mount` is a mount of `hierarchy`.
pub fn is_mount_of(mount: &MountEntry, hierarchy: Hierarchy) -> bool {
    match hierarchy {
        Hierarchy::V1Devices => {
            mount.fstype == "cgroup" && mount.super_options.iter().any(|o| o == "devices")
        }
        Hierarchy::V2 => mount.fstype == "cgroup2",
    }
}

/// Where `cgroup` lies below a mount of its hierarchy whose root is `root`:
/// the relative path, or `None` when the mount does not show it.
pub fn relative_to_mount(root: &Path, cgroup: &Path) -> Option<PathBuf> {
    // A cgroup outside the reader's namespace shows as `/../..`: never reachable.
    let plain = |p: &Path| {
        p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
    };
    if !plain(root) || !plain(cgroup) {
        return None;
    }
    cgroup.strip_prefix(root).ok().map(Path::to_path_buf)
}

/// Opens the container's directory in `hierarchy`, relative to a mount that is
/// verified to be the visible one. `Ok(None)` when no visible mount of the
/// hierarchy exists; an error when visible mounts exist but none shows the cgroup.
pub fn open_cgroup_dir(
    proc: &Path,
    mounts: &[MountEntry],
    hierarchy: Hierarchy,
    pid: u32,
    cgroup: &Path,
) -> Result<Option<CgroupDir>> {
    let mut visible_elsewhere = Vec::new();
    // Later mounts are on top; prefer them.
    for mount in mounts.iter().rev().filter(|m| is_mount_of(m, hierarchy)) {
        let Some(mount_fd) = open_visible_mount(proc, mount, hierarchy) else {
            continue;
        };
        let Some(rel) = relative_to_mount(&mount.root, cgroup) else {
            visible_elsewhere.push(mount.mount_point.clone());
            continue;
        };
        // Joining "" would add a trailing slash to the path we report.
        let depth = rel.components().count();
        let (path, rel) = if rel.as_os_str().is_empty() {
            (mount.mount_point.clone(), PathBuf::from("."))
        } else {
            (mount.mount_point.join(&rel), rel)
        };
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
        return match openat(&mount_fd, &rel, flags, Mode::empty()) {
            Ok(fd) => Ok(Some(CgroupDir { path, fd, depth })),
            Err(Errno::ENOENT) | Err(Errno::ENOTDIR) => Err(Error::CgroupDirMissing { path }),
            Err(errno) => Err(Error::OpenCgroupDir { path, errno }),
        };
    }
    if visible_elsewhere.is_empty() {
        log::debug!("no visible {} mount", hierarchy.name());
        return Ok(None);
    }
    Err(Error::CgroupNotVisible {
        pid,
        hierarchy: hierarchy.name(),
        cgroup: cgroup.to_path_buf(),
        mounts: visible_elsewhere,
    })
}

/// Opens `mount`'s mount point when a lookup of it really lands on that mount
/// of `hierarchy`, not on something mounted over it.
fn open_visible_mount(proc: &Path, mount: &MountEntry, hierarchy: Hierarchy) -> Option<OwnedFd> {
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
    let point = &mount.mount_point;
    let fd = match openat(AT_FDCWD, point, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(errno) => {
            log::debug!(
                "{} mount {} is hidden: {errno}",
                hierarchy.name(),
                point.display()
            );
            return None;
        }
    };
    match fstatfs(fd.as_fd()) {
        Ok(st) if st.filesystem_type() == hierarchy.magic() => {}
        Ok(_) => {
            log::debug!("{} is covered by another filesystem", point.display());
            return None;
        }
        Err(errno) => {
            log::debug!("cannot statfs {}: {errno}", point.display());
            return None;
        }
    }
    // Same filesystem type is not enough: a cgroup2 mount over another shows
    // the same magic with a different root. The mount id settles it.
    match mount_id(proc, &fd) {
        Ok(Some(id)) if id != mount.id => {
            log::debug!(
                "{} is mount {id}, not the listed {}: hidden",
                point.display(),
                mount.id
            );
            None
        }
        Ok(_) => Some(fd),
        Err(e) => {
            log::debug!("no mount id for {} ({e}); trusting statfs", point.display());
            Some(fd)
        }
    }
}

/// The mount id of an open file, from `<proc>/self/fdinfo/<fd>` (3.15+).
fn mount_id(proc: &Path, fd: &OwnedFd) -> io::Result<Option<u64>> {
    // statx answers in one call where the kernel has STATX_MNT_ID (5.8);
    // fdinfo takes an open, two reads and a close of a procfs file.
    use rustix::fs::{statx, AtFlags as StatxAt, StatxFlags};
    if let Ok(stx) = statx(fd, "", StatxAt::EMPTY_PATH, StatxFlags::MNT_ID) {
        if StatxFlags::from_bits_retain(stx.stx_mask).contains(StatxFlags::MNT_ID) {
            return Ok(Some(stx.stx_mnt_id));
        }
    }
    fdinfo_mount_id(proc, fd)
}

/// The mount id `fdinfo` gives for `fd`, where statx cannot.
fn fdinfo_mount_id(proc: &Path, fd: &OwnedFd) -> io::Result<Option<u64>> {
    let text = crate::util::bounded_read::read_text(
        &proc.join("self/fdinfo").join(fd.as_raw_fd().to_string()),
    )?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
23 1 0:21 / /sys rw,nosuid - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime shared:9 - tmpfs tmpfs rw,mode=755
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime shared:14 master:2 - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
90 31 0:38 /kube\\040pods /mnt/with\\040space rw - cgroup2 none rw
";

    #[test]
    fn statx_and_fdinfo_give_the_same_mount_id() {
        for path in ["/", "/proc", "/sys"] {
            let fd = openat(
                AT_FDCWD,
                path,
                OFlag::O_PATH | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .unwrap();
            let proc = Path::new("/proc");
            let fdinfo = fdinfo_mount_id(proc, &fd).unwrap();
            assert!(fdinfo.is_some(), "{path}");
            assert_eq!(mount_id(proc, &fd).unwrap(), fdinfo, "{path}");
        }
    }

    #[test]
    fn parses_mountinfo_with_optional_fields_and_escapes() {
        let mounts = parse_mountinfo(MOUNTINFO).unwrap();

        // sysfs and tmpfs are checked, not kept.
        let ids: Vec<u64> = mounts.iter().map(|m| m.id).collect();
        assert_eq!(ids, [36, 37, 41, 90]);
        assert_eq!(mounts[0].mount_point, Path::new("/sys/fs/cgroup/devices"));
        assert_eq!(mounts[0].fstype, "cgroup");
        assert_eq!(mounts[0].super_options, ["rw", "devices"]);
        assert_eq!(mounts[3].root, Path::new("/kube pods"));
        assert_eq!(mounts[3].mount_point, Path::new("/mnt/with space"));
    }

    #[test]
    fn rejects_malformed_mountinfo_lines_of_any_filesystem() {
        for line in [
            "36 31 0:33 / /x rw cgroup cgroup rw",
            "23 1 0:21 / /sys rw,nosuid - sysfs sysfs",
            "23 1 0:21 / /sys - sysfs sysfs rw",
            "x 1 0:21 / /sys rw - sysfs sysfs rw",
        ] {
            let text = format!("{}{line}\n", MOUNTINFO);
            assert_eq!(parse_mountinfo(&text).unwrap_err(), line);
        }
    }

    #[test]
    fn picks_only_devices_and_cgroup2_mounts() {
        let mounts = parse_mountinfo(MOUNTINFO).unwrap();

        let v1: Vec<u64> = mounts
            .iter()
            .filter(|m| is_mount_of(m, Hierarchy::V1Devices))
            .map(|m| m.id)
            .collect();
        let v2: Vec<u64> = mounts
            .iter()
            .filter(|m| is_mount_of(m, Hierarchy::V2))
            .map(|m| m.id)
            .collect();

        assert_eq!(v1, [36]);
        assert_eq!(v2, [41, 90]);
    }

    #[test]
    fn parses_hybrid_memberships() {
        let text =
            "12:devices:/user.slice/ctr\n4:cpu,cpuacct:/\n1:name=systemd:/x\n0::/ctr:with:colons\n";

        let m = parse_memberships(text).unwrap();

        assert_eq!(
            membership(&m, Hierarchy::V1Devices),
            Some(Path::new("/user.slice/ctr"))
        );
        assert_eq!(
            membership(&m, Hierarchy::V2),
            Some(Path::new("/ctr:with:colons"))
        );
    }

    #[test]
    fn pure_v1_host_has_no_v2_membership() {
        let m = parse_memberships("5:devices:/ctr\n").unwrap();

        assert_eq!(membership(&m, Hierarchy::V2), None);
    }

    #[test]
    fn rejects_malformed_membership() {
        assert!(parse_memberships("garbage\n").is_err());
        assert!(parse_memberships("x::/a\n").is_err());
        assert!(parse_memberships("0::relative\n").is_err());
    }

    #[test]
    fn joins_cgroup_below_a_mount_root() {
        let rel = relative_to_mount(Path::new("/"), Path::new("/a/b"));
        let nested = relative_to_mount(Path::new("/kubepods"), Path::new("/kubepods/pod1/c"));
        let root_itself = relative_to_mount(Path::new("/kubepods"), Path::new("/kubepods"));

        assert_eq!(rel.as_deref(), Some(Path::new("a/b")));
        assert_eq!(nested.as_deref(), Some(Path::new("pod1/c")));
        assert_eq!(root_itself.as_deref(), Some(Path::new("")));
    }

    #[test]
    fn refuses_cgroup_outside_the_mount_root_or_the_namespace() {
        assert_eq!(
            relative_to_mount(Path::new("/kubepods"), Path::new("/other/c")),
            None
        );
        assert_eq!(
            relative_to_mount(Path::new("/kube"), Path::new("/kubepods/c")),
            None
        );
        assert_eq!(
            relative_to_mount(Path::new("/"), Path::new("/../../ctr")),
            None
        );
    }
}

//! A fake of the apply sequence's [`Seam`]: injection's calls recorded by
//! [`FakeSys`], the container-level ones in order, one refused on request.

use std::cell::RefCell;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use super::{Error, Result, Seam};
use crate::apply::cgroup;
use crate::apply::inject::fake::FakeSys;
use crate::apply::inject::{self, NodeMade, Place, Source, Sys};
use crate::apply::systemd::{self, Endpoint, Told};
use crate::planning::plan::{CgroupRule, MountOptions};
use crate::sys::process::Hold;

/// The steps of the sequence a fake can be told to refuse.
pub(crate) const STEPS: [&str; 4] = ["grant", "still_held", "act_as", "enter"];

/// [`FakeSys`], with the container-level calls recorded in order and
/// one step refused on request.
#[derive(Default)]
pub(crate) struct FakeSeam {
    pub(crate) inner: FakeSys,
    pub(crate) calls: RefCell<Vec<&'static str>>,
    refuse: Option<&'static str>,
}

impl FakeSeam {
    pub(crate) fn refusing(step: &'static str) -> FakeSeam {
        FakeSeam {
            refuse: Some(step),
            ..FakeSeam::default()
        }
    }

    fn call(&self, step: &'static str) -> std::io::Result<()> {
        self.calls.borrow_mut().push(step);
        match self.refuse == Some(step) {
            true => Err(std::io::Error::other(format!("{step} refused"))),
            false => Ok(()),
        }
    }
}

impl Sys for FakeSeam {
    fn enter_mount_namespace(&self, proc: &Path, pid: u32, _hold: Hold<'_>) -> inject::Result<()> {
        self.call("enter")
            .map_err(|source| inject::Error::Namespace {
                path: proc.join(pid.to_string()).join("ns/mnt"),
                source,
            })
    }
    fn mknod(
        &self,
        place: Place<'_>,
        mode: u32,
        major: u32,
        minor: u32,
    ) -> inject::Result<NodeMade> {
        self.calls.borrow_mut().push("mknod");
        self.inner.mknod(place, mode, major, minor)
    }
    fn clone_mount(
        &self,
        path: &Path,
        source: BorrowedFd<'_>,
        options: MountOptions,
    ) -> inject::Result<Option<OwnedFd>> {
        self.inner.clone_mount(path, source, options)
    }
    fn clone_in_host(
        &self,
        sources: &mut [(String, Source)],
        options: MountOptions,
    ) -> inject::Result<()> {
        self.inner.clone_in_host(sources, options)
    }
    fn bind_mount(
        &self,
        source: &Source,
        target: BorrowedFd<'_>,
        place: Place<'_>,
        options: MountOptions,
    ) -> inject::Result<()> {
        self.calls.borrow_mut().push("bind");
        self.inner.bind_mount(source, target, place, options)
    }
    fn mount_tmpfs(&self, dir: BorrowedFd<'_>, path: &Path) -> inject::Result<()> {
        self.inner.mount_tmpfs(dir, path)
    }
    fn remount_read_only(&self, dir: BorrowedFd<'_>, path: &Path) -> inject::Result<()> {
        self.inner.remount_read_only(dir, path)
    }
    fn unmount(&self, mounted: BorrowedFd<'_>, path: &Path) -> inject::Result<()> {
        self.calls.borrow_mut().push("unmount");
        self.inner.unmount(mounted, path)
    }
}

impl Seam for FakeSeam {
    fn still_held(&self, pid: u32, _hold: Hold<'_>) -> Result<()> {
        self.call("still_held").map_err(|_| Error::DeadPid { pid })
    }
    fn grant(
        &self,
        _pid: u32,
        _hold: Hold<'_>,
        _rules: &[CgroupRule],
    ) -> Result<Vec<cgroup::Outcome>> {
        self.call("grant").map_err(|source| Error::Inspect {
            path: "/sys/fs/cgroup".into(),
            source,
        })?;
        Ok(vec![cgroup::Outcome::Unrestricted])
    }
    fn tell_systemd(&self, _pid: u32, unit: &str, rules: &[CgroupRule]) -> systemd::Result<Told> {
        self.call("systemd")
            .map_err(|e| systemd::Error::Malformed(e.to_string()))?;
        Ok(Told {
            unit: unit.to_string(),
            endpoint: Endpoint::Private,
            entries: rules
                .iter()
                .map(|r| (r.to_string(), String::new()))
                .collect(),
        })
    }
    fn act_as(&self, uid: u32, gid: u32) -> Result<()> {
        self.call("act_as")
            .map_err(|source| inject::Error::Identity { uid, gid, source })?;
        Ok(())
    }
}

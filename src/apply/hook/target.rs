//! The one way a plan reaches a container. A [`Target`] is built once, from
//! the OCI state (a container being created, seen from outside it), from
//! `nvidia-container-cli configure`'s pid, from the current process at
//! `createContainer` (already inside), or, for `configure` without `--pid`,
//! from the caller's own namespaces (LXC's mount hook, enroot's hook,
//! Apptainer's `--nvccli`: the rootfs is seen from the mount namespace
//! this process runs in, and no device cgroup is known). Its [`Target::apply`] owns the order
//! of every side effect: grant the device cgroup (and record the grant in the
//! container's systemd scope, under the systemd cgroup driver), check the held process
//! again, open the host sources, switch to the container root's ids, enter
//! the mount namespace, apply (which undoes itself on failure). Every
//! privileged call goes through the [`Seam`] the caller passes, so each
//! consumer's whole sequence runs against a fake in unit tests.

use std::path::Path;
use std::time::Instant;

use super::pid::{self, Held};
use super::{Result, PROC};
use crate::apply::cgroup;
use crate::apply::inject::{self, LinuxSys, Sources, Sys};
use crate::apply::systemd::{self, Told};
use crate::planning::bundle;
use crate::planning::plan::{CgroupRule, Plan};
use crate::planning::planner::UserNamespace as UserNamespaceSource;
use crate::planning::userns::UserNamespace;
use crate::sys::process::Hold;

/// The privileged calls of the whole apply sequence: injection's, and the
/// container's own around them.
pub trait Seam: Sys {
    /// Fails unless the process `hold` holds is still process `pid`, so
    /// that what was read of `/proc/<pid>` was about it.
    fn still_held(&self, pid: u32, hold: Hold<'_>) -> Result<()>;
    /// Grants `rules` in the device cgroup of process `pid`, held by `hold`.
    fn grant(&self, pid: u32, hold: Hold<'_>, rules: &[CgroupRule])
        -> Result<Vec<cgroup::Outcome>>;
    /// Adds `rules` to the `DeviceAllow` of systemd scope `unit`, which
    /// process `pid` runs in, so that a `daemon-reload` keeps them.
    fn tell_systemd(&self, pid: u32, unit: &str, rules: &[CgroupRule]) -> systemd::Result<Told>;
    /// Creates files from now on as `uid`:`gid`.
    fn act_as(&self, uid: u32, gid: u32) -> Result<()>;
}

impl Seam for LinuxSys {
    fn still_held(&self, pid: u32, hold: Hold<'_>) -> Result<()> {
        pid::still_held(Path::new(PROC), pid, hold)
    }

    fn grant(
        &self,
        pid: u32,
        hold: Hold<'_>,
        rules: &[CgroupRule],
    ) -> Result<Vec<cgroup::Outcome>> {
        let proc = Path::new(PROC);
        let held = || pid::still_held(proc, pid, hold).is_ok();
        Ok(cgroup::allow_held(proc, pid, rules, &held)?)
    }

    fn tell_systemd(&self, pid: u32, unit: &str, rules: &[CgroupRule]) -> systemd::Result<Told> {
        systemd::allow(Path::new(PROC), Path::new(RUN), pid, unit, rules)
    }

    fn act_as(&self, uid: u32, gid: u32) -> Result<()> {
        Ok(inject::userns::act_as(uid, gid)?)
    }
}

/// The host's `/run`, where systemd's sockets are.
const RUN: &str = "/run";

/// Where this process stands towards the container's mount namespace.
#[derive(Debug)]
pub(super) enum Reach {
    /// Outside it: its init, held, whose device cgroup is granted and
    /// whose mount namespace is entered.
    Outside(Held),
    /// Inside it, put there by the runtime (`createContainer`): nothing to
    /// grant or enter.
    Inside,
    /// In it because the caller is (`nvidia-container-cli configure`
    /// without `--pid`): nothing to enter, and no process whose device
    /// cgroup could be granted, so a plan with cgroup rules is refused.
    Caller,
}

/// A container a plan is applied to.
#[derive(Debug)]
pub struct Target {
    /// How logs name it.
    pub id: String,
    /// What its bundle says of it.
    pub container: bundle::Container,
    /// Where this process stands towards its mount namespace.
    pub(super) reach: Reach,
}

/// What applying a plan did, and when each step ended.
#[derive(Debug)]
pub struct Applied {
    /// What was injected.
    pub summary: inject::Summary,
    /// When the device cgroup was granted.
    pub granted: Instant,
    /// When the host sources were open.
    pub opened: Instant,
}

impl Target {
    /// A container whose init, `held`, was checked to be one being
    /// created, seen from outside it.
    pub(super) fn outside(id: String, container: bundle::Container, held: Held) -> Target {
        Target {
            id,
            container,
            reach: Reach::Outside(held),
        }
    }

    /// A container whose mount namespace is the one this process runs in
    /// because its caller's is: `nvidia-container-cli configure` without
    /// `--pid`, run from a container manager's own hook.
    pub(super) fn caller(id: String, container: bundle::Container) -> Target {
        Target {
            id,
            container,
            reach: Reach::Caller,
        }
    }

    /// The held process, when outside the container.
    fn held(&self) -> Option<&Held> {
        match &self.reach {
            Reach::Outside(held) => Some(held),
            Reach::Inside | Reach::Caller => None,
        }
    }

    /// The pid of its init as this process sees it, when outside it.
    pub fn pid(&self) -> Option<u32> {
        self.held().map(|held| held.pid)
    }

    /// Where the planner reads the container's user namespace: its init's
    /// process outside it, this process in its caller's namespaces, its
    /// bundle inside it.
    pub fn user_namespace(&self) -> UserNamespaceSource {
        match &self.reach {
            Reach::Outside(held) => UserNamespaceSource::Process(held.pid),
            Reach::Caller => UserNamespaceSource::OwnProcess,
            Reach::Inside => UserNamespaceSource::Declared,
        }
    }

    /// Applies `plan` to the container whose user namespace is
    /// `user_namespace` (as the planner found it): the cgroup rules
    /// granted, the process checked again, the host sources opened, files
    /// made as the container's root, its mount namespace entered, the plan
    /// injected. Nothing after a failed step runs.
    pub fn apply(
        &self,
        sys: &impl Seam,
        plan: &Plan,
        user_namespace: Option<&UserNamespace>,
    ) -> Result<Applied> {
        let id = &self.id;
        if matches!(self.reach, Reach::Caller) && !plan.cgroup_rules.is_empty() {
            return Err(super::Error::NoCgroupWithoutPid { id: id.clone() });
        }
        if let Some(held) = self.held() {
            if !plan.cgroup_rules.is_empty() {
                for outcome in sys.grant(held.pid, held.hold(), &plan.cgroup_rules)? {
                    log::debug!("container {id}: device cgroup: {outcome:?}");
                }
                if let Some(unit) = &plan.systemd_scope {
                    tell_systemd(sys, id, held.pid, unit, &plan.cgroup_rules);
                }
            }
            // The cgroup and the user namespace were found by pid: they were
            // the held process's only if it still exists.
            sys.still_held(held.pid, held.hold())?;
        }
        let granted = Instant::now();
        let mut sources = Sources::open(sys, plan)?;
        let opened = Instant::now();
        // Files made in the container belong to its root, not to host root
        // (which its user namespace cannot represent: see `inject::userns`).
        // With no more rights than it has (see `inject::userns`).
        let acting_as = user_namespace.and_then(|ns| ns.root.as_ref());
        if let Some(root) = acting_as {
            let (uid, gid) = (root.uid, root.gid);
            log::debug!(
                "container {id}: creating files as its root: uid {uid}, gid {gid} of the hook's user namespace"
            );
            sys.act_as(uid, gid)?;
        }
        self.enter(sys)?;
        let summary = inject::apply(sys, plan, &mut sources, &self.container.rootfs, acting_as)?;
        Ok(Applied {
            summary,
            granted,
            opened,
        })
    }

    /// Applies the plan `make` draws from the container's own files, seen
    /// from inside its mount namespace (the libraries a runtime mounted,
    /// the image's compat directory): the process checked again, the
    /// namespace entered, then the plan made and injected. Such a plan takes
    /// nothing from the host: one that would is refused before any change.
    pub fn apply_made_inside<E: From<super::Error>>(
        &self,
        sys: &impl Seam,
        make: impl FnOnce(&Path) -> std::result::Result<Plan, E>,
    ) -> std::result::Result<inject::Summary, E> {
        if let Some(held) = self.held() {
            sys.still_held(held.pid, held.hold())?;
        }
        self.enter(sys)?;
        let plan = make(&self.container.rootfs)?;
        if !plan.devices.is_empty() || !plan.mounts.is_empty() || plan.proc_mask.is_some() {
            return Err(super::Error::HostSourcesInside {
                id: self.id.clone(),
            }
            .into());
        }
        let mut sources = Sources::open(sys, &plan).map_err(super::Error::from)?;
        Ok(
            // Inside, the kernel holds the process to its user namespace.
            inject::apply(sys, &plan, &mut sources, &self.container.rootfs, None)
                .map_err(super::Error::from)?,
        )
    }

    /// A container of `rootfs` whose init, pid 4242, is held (`held`) or
    /// whose mount namespace this process is in: what tests apply to.
    #[cfg(test)]
    pub fn of_rootfs(rootfs: std::path::PathBuf, held: bool) -> Target {
        Target {
            id: "test".into(),
            container: bundle::Container::bare(rootfs, Vec::new()),
            reach: if held {
                Reach::Outside(Held::fake(4242))
            } else {
                Reach::Inside
            },
        }
    }

    /// Makes the container's mount namespace this process's (a no-op inside it).
    fn enter(&self, sys: &impl Seam) -> Result<()> {
        if let Some(held) = self.held() {
            sys.enter_mount_namespace(Path::new(PROC), held.pid, held.hold())?;
        }
        Ok(())
    }
}

/// Tells systemd that scope `unit` of the container `id` (init `pid`) has
/// the devices of `rules`. Its failure is a warning: the device cgroup is
/// granted, and the container works until the next `daemon-reload`.
fn tell_systemd(sys: &impl Seam, id: &str, pid: u32, unit: &str, rules: &[CgroupRule]) {
    let started = Instant::now();
    match sys.tell_systemd(pid, unit, rules) {
        Ok(told) => log::info!(
            "container {id}: {} device(s) added to {}'s DeviceAllow through {:?} in {} µs: they survive a systemctl daemon-reload",
            told.entries.len(),
            told.unit,
            told.endpoint,
            started.elapsed().as_micros()
        ),
        Err(e) => log::warn!(
            "container {id}: systemd was not told about its devices, so the next `systemctl daemon-reload` takes them away (CDI keeps them): {e}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::fs;
    use std::path::PathBuf;

    use super::*;
    use crate::apply::hook::fake::{FakeSeam, STEPS};
    use crate::apply::hook::Error;
    use crate::apply::inject::fake::World;

    /// A container of `world`'s rootfs, outside this process's mount
    /// namespace (`held`) or inside it.
    fn target(world: &World, held: bool) -> Target {
        Target::of_rootfs(world.rootfs(), held)
    }

    /// A world whose plan has cgroup rules, as the hook's plans do.
    fn world() -> World {
        let mut world = World::new();
        world.plan.cgroup_rules = vec![CgroupRule {
            kind: 'c',
            major: 195,
            minor: 0,
            access: "rw",
        }];
        world
    }

    /// Every path below `root` with its type and content: what a failed
    /// sequence must leave as it found it.
    fn tree(root: &Path) -> Vec<(PathBuf, String)> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let meta = fs::symlink_metadata(&path).unwrap();
                let what = if meta.is_dir() {
                    stack.push(path.clone());
                    "dir".to_string()
                } else if meta.is_symlink() {
                    format!("-> {}", fs::read_link(&path).unwrap().display())
                } else {
                    format!("{:?}", fs::read(&path).unwrap())
                };
                out.push((path.strip_prefix(root).unwrap().to_path_buf(), what));
            }
        }
        out.sort();
        out
    }

    /// A root runtime's user namespace mapping the container's root to
    /// host id 100000, with 65536 ids, and this test's own ids, which own
    /// the test's rootfs.
    fn mapped() -> UserNamespace {
        use crate::planning::userns::parse_id_map;
        let map = |own: u32| parse_id_map(&format!("0 100000 65536\n65536 {own} 1\n")).unwrap();
        UserNamespace {
            root: Some(crate::planning::userns::MappedRoot {
                uid: 100000,
                gid: 100000,
                uids: map(nix::unistd::geteuid().as_raw()),
                gids: map(nix::unistd::getegid().as_raw()),
            }),
            rootless: false,
        }
    }

    #[test]
    fn the_sequence_is_grant_check_act_as_enter_then_inject() {
        let world = world();
        let sys = FakeSeam::default();
        let applied = target(&world, true)
            .apply(&sys, &world.plan, Some(&mapped()))
            .unwrap();
        assert_eq!(applied.summary.devices, 1);
        let calls = sys.calls.borrow();
        assert_eq!(
            calls[..5],
            ["grant", "still_held", "act_as", "enter", "mknod"],
            "{calls:?}"
        );
        assert!(applied.granted <= applied.opened);
    }

    #[test]
    fn a_systemd_scope_is_told_after_the_grant_and_its_failure_stops_nothing() {
        let mut world = world();
        world.plan.systemd_scope = Some("docker-abc.scope".into());
        let sys = FakeSeam::default();
        target(&world, true)
            .apply(&sys, &world.plan, Some(&mapped()))
            .unwrap();
        assert_eq!(
            sys.calls.borrow()[..6],
            ["grant", "systemd", "still_held", "act_as", "enter", "mknod"]
        );
        // systemd unreachable: a warning, and the same sequence to its end.
        let sys = FakeSeam::refusing("systemd");
        let applied = target(&world, true)
            .apply(&sys, &world.plan, Some(&mapped()))
            .unwrap();
        assert_eq!(applied.summary.devices, 1);
        assert_eq!(sys.calls.borrow()[..3], ["grant", "systemd", "still_held"]);
        // A refused grant tells systemd nothing.
        let sys = FakeSeam::refusing("grant");
        target(&world, true)
            .apply(&sys, &world.plan, Some(&mapped()))
            .unwrap_err();
        assert_eq!(*sys.calls.borrow(), ["grant"]);
        // Nothing to grant, nothing to tell; inside, no process to find it by.
        for (rules, held) in [(false, true), (true, false)] {
            let mut world = self::world();
            world.plan.systemd_scope = Some("docker-abc.scope".into());
            if !rules {
                world.plan.cgroup_rules.clear();
            }
            let sys = FakeSeam::default();
            target(&world, held).apply(&sys, &world.plan, None).unwrap();
            assert!(
                !sys.calls.borrow().contains(&"systemd"),
                "{:?}",
                sys.calls.borrow()
            );
        }
    }

    #[test]
    fn no_rules_grant_nothing_and_no_mapped_root_switches_nothing() {
        let mut world = world();
        world.plan.cgroup_rules.clear();
        let sys = FakeSeam::default();
        target(&world, true).apply(&sys, &world.plan, None).unwrap();
        assert_eq!(sys.calls.borrow()[..3], ["still_held", "enter", "mknod"]);
    }

    #[test]
    fn inside_the_container_nothing_is_granted_checked_or_entered() {
        let world = world();
        let sys = FakeSeam::default();
        target(&world, false)
            .apply(&sys, &world.plan, None)
            .unwrap();
        assert_nothing_held_or_entered(&sys);
    }

    /// No call of the sequence's outside steps was made.
    fn assert_nothing_held_or_entered(sys: &FakeSeam) {
        let calls = sys.calls.borrow();
        assert!(
            !calls
                .iter()
                .any(|c| ["grant", "still_held", "enter"].contains(c)),
            "{calls:?}"
        );
    }

    #[test]
    fn in_the_callers_namespaces_nothing_is_entered_and_no_cgroup_is_guessed() {
        // Without cgroup rules (--no-cgroups, or a user namespace): applied
        // where this process stands, as inside.
        let mut world = world();
        world.plan.cgroup_rules.clear();
        let caller = |world: &World| {
            Target::caller(
                "rootfs r".into(),
                bundle::Container::bare(world.rootfs(), Vec::new()),
            )
        };
        let sys = FakeSeam::default();
        let applied = caller(&world).apply(&sys, &world.plan, None).unwrap();
        assert_eq!(applied.summary.devices, 1);
        assert_nothing_held_or_entered(&sys);
        assert_eq!(
            caller(&world).user_namespace(),
            UserNamespaceSource::OwnProcess
        );
        // With cgroup rules: refused on one line before any call or change.
        let world = self::world();
        let before = tree(&world.rootfs());
        let sys = FakeSeam::default();
        let err = caller(&world).apply(&sys, &world.plan, None).unwrap_err();
        assert!(matches!(err, Error::NoCgroupWithoutPid { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("--no-cgroups") && text.contains("--pid") && !text.contains('\n'),
            "{text}"
        );
        assert!(sys.calls.borrow().is_empty(), "{:?}", sys.calls.borrow());
        assert_eq!(tree(&world.rootfs()), before);
    }

    #[test]
    fn a_refused_step_stops_the_sequence_and_changes_nothing() {
        for step in STEPS {
            let world = world();
            let before = tree(&world.rootfs());
            let sys = FakeSeam::refusing(step);
            let err = target(&world, true)
                .apply(&sys, &world.plan, Some(&mapped()))
                .unwrap_err();
            let calls = sys.calls.borrow();
            assert_eq!(calls.last(), Some(&step), "{step}: {calls:?}");
            assert_eq!(
                calls.iter().filter(|c| STEPS.contains(c)).count(),
                STEPS.iter().position(|s| *s == step).unwrap() + 1,
                "{step}: a later step ran: {calls:?}"
            );
            assert!(!calls.contains(&"mknod"), "{step}: {calls:?}");
            assert_eq!(tree(&world.rootfs()), before, "{step}: {err}");
        }
    }

    #[test]
    fn a_source_that_cannot_be_opened_stops_before_entering() {
        let mut world = world();
        world.plan.mounts[0].source = world.dir.path().join("gone");
        let before = tree(&world.rootfs());
        let sys = FakeSeam::default();
        let err = target(&world, true)
            .apply(&sys, &world.plan, Some(&mapped()))
            .unwrap_err();
        assert!(err.to_string().contains("gone"), "{err}");
        assert_eq!(*sys.calls.borrow(), ["grant", "still_held"]);
        assert_eq!(tree(&world.rootfs()), before);
    }

    #[test]
    fn a_failure_while_injecting_is_rolled_back() {
        let world = world();
        // A directory where the binary's mount target goes: refused, after
        // the node was made.
        fs::create_dir_all(world.rootfs().join("usr/bin/nvidia-smi")).unwrap();
        let before = tree(&world.rootfs());
        let sys = FakeSeam::default();
        let err = target(&world, true)
            .apply(&sys, &world.plan, None)
            .unwrap_err();
        assert!(err.to_string().contains("nvidia-smi"), "{err}");
        assert!(sys.calls.borrow().contains(&"mknod"));
        assert_eq!(tree(&world.rootfs()), before);
    }

    #[test]
    fn a_plan_made_inside_is_made_after_entering_and_takes_nothing_from_the_host() {
        let world = world();
        let sys = FakeSeam::default();
        let made = RefCell::new(Vec::new());
        let summary = target(&world, true)
            .apply_made_inside(&sys, |rootfs| -> Result<Plan> {
                made.borrow_mut().extend(sys.calls.borrow().iter().copied());
                assert_eq!(rootfs, world.rootfs());
                Ok(Plan {
                    symlinks: world.plan.symlinks.clone(),
                    ..Plan::default()
                })
            })
            .unwrap();
        assert_eq!(summary.symlinks, 2);
        assert_eq!(*made.borrow(), ["still_held", "enter"]);
        // One that would take a host file is refused, changing nothing.
        let before = tree(&world.rootfs());
        let err = target(&world, true)
            .apply_made_inside(&FakeSeam::default(), |_| -> Result<Plan> {
                Ok(world.plan.clone())
            })
            .unwrap_err();
        assert!(matches!(err, Error::HostSourcesInside { .. }), "{err}");
        assert_eq!(tree(&world.rootfs()), before);
        // A refused entry makes no plan.
        let err = target(&world, true)
            .apply_made_inside(&FakeSeam::refusing("enter"), |_| -> Result<Plan> {
                panic!("planned outside the container")
            })
            .unwrap_err();
        assert!(err.to_string().contains("4242"), "{err}");
    }
}

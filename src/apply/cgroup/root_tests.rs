//! Grants for real, as root, on this host's own cgroup mounts: a child cgroup
//! is made, restricted the way runc does it, a shell is moved in, and the
//! shell's own `open()`s report what the kernel allows afterwards.

use std::fs;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use nix::unistd::Uid;

use super::bpf_sys::{self, CGROUP_DEVICE, F_ALLOW_MULTI};
use super::discovery::{self, CgroupDir, Hierarchy};
use super::program::{self, tests::runc_like};
use super::*;

/// /dev/zero: what the tests grant.
const ZERO: CgroupRule = CgroupRule {
    kind: 'c',
    major: 1,
    minor: 5,
    access: "rw",
};

/// `BPF_F_ALLOW_OVERRIDE`: only tests attach with it.
const F_ALLOW_OVERRIDE: u32 = 1;

fn require_root() {
    assert!(
        Uid::effective().is_root(),
        "this test needs root (cgroups, bpf): run `make test` as root"
    );
}

/// A visible mount of `hierarchy` whose root is the hierarchy's root.
fn visible_mount(hierarchy: Hierarchy) -> Option<PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mounts = discovery::parse_mountinfo(&text).unwrap();
    let dir = discovery::open_cgroup_dir(Path::new("/proc"), &mounts, hierarchy, 0, Path::new("/"));
    dir.ok().flatten().map(|d| d.path)
}

/// A child cgroup made for one test, removed when dropped.
struct TempCgroup {
    path: PathBuf,
}

impl TempCgroup {
    fn new(parent: &Path, name: &str) -> TempCgroup {
        let path = parent.join(format!("ocinvh-test-{}-{name}", std::process::id()));
        fs::create_dir(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        TempCgroup { path }
    }

    fn write(&self, file: &str, line: &str) {
        let path = self.path.join(file);
        fs::write(&path, line)
            .unwrap_or_else(|e| panic!("write {line:?} to {}: {e}", path.display()));
    }

    /// Opens a cgroup2 test cgroup as discovery would.
    fn open(&self) -> CgroupDir {
        let mount = visible_mount(Hierarchy::V2).unwrap();
        let depth = self.path.strip_prefix(&mount).unwrap().components().count();
        CgroupDir {
            path: self.path.clone(),
            fd: fs::File::open(&self.path).unwrap().into(),
            depth,
        }
    }
}

impl Drop for TempCgroup {
    fn drop(&mut self) {
        // The prober is gone by now; its cgroup empties as soon as it is reaped.
        if let Err(e) = fs::remove_dir(&self.path) {
            eprintln!("cannot remove {}: {e}", self.path.display());
        }
    }
}

/// A shell that, once told to go, opens /dev/zero, /dev/null and /dev/full
/// read-write and says which opens worked; failures print the errno's text.
struct Prober {
    child: Option<Child>,
}

const PROBE: &str = r#"exec 2>&1
read go
for d in zero null full; do
  if { :; } <>/dev/$d; then echo "$d: ok"; fi
done"#;

impl Prober {
    fn spawn() -> Prober {
        let child = Command::new("sh")
            .args(["-c", PROBE])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn sh");
        Prober { child: Some(child) }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    fn run(mut self) -> String {
        let mut child = self.child.take().unwrap();
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The negative control: the cgroup really was restricted before the grant.
fn assert_only_null_opens(report: &str) {
    assert!(
        report.contains("null: ok"),
        "/dev/null denied before the grant:\n{report}"
    );
    assert!(
        report.contains("/dev/zero: Operation not permitted"),
        "/dev/zero not denied before the grant:\n{report}"
    );
    assert!(!report.contains("full: ok"), "{report}");
}

fn assert_zero_and_null_open_but_not_full(report: &str) {
    assert!(
        report.contains("zero: ok"),
        "/dev/zero not granted:\n{report}"
    );
    assert!(
        report.contains("null: ok"),
        "old rule for /dev/null lost:\n{report}"
    );
    assert!(
        !report.contains("full: ok"),
        "/dev/full let through:\n{report}"
    );
    assert!(
        report.contains("/dev/full: Operation not permitted"),
        "/dev/full not denied with EPERM:\n{report}"
    );
}

/// Loads the runc-like program (char 1:3 and a few others, default deny).
fn load_runc_like() -> bpf_sys::ProgFd {
    let insns = program::encode(&runc_like());
    let mut log = vec![0u8; 64 * 1024];
    bpf_sys::prog_load(
        bpf_sys::PROG_TYPE_CGROUP_DEVICE,
        &insns,
        c"Apache-2.0",
        "test_runc_like",
        Some(&mut log),
    )
    .unwrap_or_else(|e| panic!("load runc-like: {e}\n{}", String::from_utf8_lossy(&log)))
}

fn attached(cgroup: &TempCgroup) -> (u32, Vec<u32>) {
    let dir = cgroup.open();
    bpf_sys::prog_query(dir.fd.as_fd(), CGROUP_DEVICE, 0).unwrap()
}

/// Restricts a fresh cgroup2 child with `programs` runc-like programs attached
/// with `flags`, grants /dev/zero to a shell in it, and checks the result.
fn v2_scenario(name: &str, flags: u32, programs: usize) {
    require_root();
    let mount = visible_mount(Hierarchy::V2).expect("this test needs a visible cgroup2 mount");
    let cgroup = TempCgroup::new(&mount, name);
    let mut old_ids = Vec::new();
    {
        let dir = cgroup.open();
        for _ in 0..programs {
            let prog = load_runc_like();
            bpf_sys::prog_attach(dir.fd.as_fd(), &prog, CGROUP_DEVICE, flags, None).unwrap();
            old_ids.push(bpf_sys::prog_info(&prog).unwrap().id);
        }
    }
    let before = Prober::spawn();
    cgroup.write("cgroup.procs", &before.pid().to_string());
    assert_only_null_opens(&before.run());
    let prober = Prober::spawn();
    cgroup.write("cgroup.procs", &prober.pid().to_string());

    let outcomes = allow(Path::new("/proc"), prober.pid(), &[ZERO]).unwrap();

    let v2 = Outcome::V2 {
        dir: cgroup.path.clone(),
        replaced: programs,
    };
    assert!(outcomes.contains(&v2), "{outcomes:?}");
    let (now_flags, now_ids) = attached(&cgroup);
    assert_eq!(now_flags, flags);
    assert_eq!(now_ids.len(), programs, "replaced, not added: {now_ids:?}");
    assert!(
        now_ids.iter().all(|id| !old_ids.contains(id)),
        "{now_ids:?}"
    );
    assert_zero_and_null_open_but_not_full(&prober.run());
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn v2_extends_a_multi_program_in_place() {
    v2_scenario("multi", F_ALLOW_MULTI, 1);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn v2_extends_every_multi_program_once() {
    v2_scenario("multi2", F_ALLOW_MULTI, 2);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn v2_replaces_a_single_program() {
    v2_scenario("single", 0, 1);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn v2_replaces_an_overridable_program() {
    v2_scenario("override", F_ALLOW_OVERRIDE, 1);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn v2_never_attaches_where_nothing_was_attached() {
    require_root();
    let mount = visible_mount(Hierarchy::V2).expect("this test needs a visible cgroup2 mount");
    let cgroup = TempCgroup::new(&mount, "none");
    let prober = Prober::spawn();
    cgroup.write("cgroup.procs", &prober.pid().to_string());

    let outcomes = allow(Path::new("/proc"), prober.pid(), &[ZERO]).unwrap();

    assert!(
        !outcomes.iter().any(|o| matches!(o, Outcome::V2 { .. })),
        "{outcomes:?}"
    );
    assert!(attached(&cgroup).1.is_empty());
}

/// A v1 devices cgroup that denies everything but `/dev/null` (1:3).
fn denied_v1_cgroup(name: &str) -> TempCgroup {
    require_root();
    let mount = visible_mount(Hierarchy::V1Devices)
        .expect("this test needs a visible cgroup v1 devices mount (hybrid or v1 host)");
    let cgroup = TempCgroup::new(&mount, name);
    cgroup.write("devices.deny", "a");
    cgroup.write("devices.allow", "c 1:3 rwm");
    cgroup
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn v1_writes_rules_to_the_containers_devices_cgroup() {
    let cgroup = denied_v1_cgroup("v1");
    let before = Prober::spawn();
    cgroup.write("cgroup.procs", &before.pid().to_string());
    assert_only_null_opens(&before.run());
    let prober = Prober::spawn();
    cgroup.write("cgroup.procs", &prober.pid().to_string());

    let outcomes = allow(Path::new("/proc"), prober.pid(), &[ZERO]).unwrap();

    let v1 = Outcome::V1 {
        dir: cgroup.path.clone(),
    };
    assert!(outcomes.contains(&v1), "{outcomes:?}");
    let list = fs::read_to_string(cgroup.path.join("devices.list")).unwrap();
    assert!(list.lines().any(|l| l == "c 1:5 rw"), "{list}");
    assert_zero_and_null_open_but_not_full(&prober.run());
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn a_process_no_longer_held_gets_no_grant() {
    // The caller's pidfd says the process it checked is gone: whatever now
    // answers to the pid, its cgroup is left as it was.
    let cgroup = denied_v1_cgroup("v1-not-held");
    let prober = Prober::spawn();
    cgroup.write("cgroup.procs", &prober.pid().to_string());
    let before = fs::read_to_string(cgroup.path.join("devices.list")).unwrap();

    let err = allow_held(Path::new("/proc"), prober.pid(), &[ZERO], &|| false).unwrap_err();

    assert!(matches!(err, Error::NotHeld { .. }), "{err}");
    let after = fs::read_to_string(cgroup.path.join("devices.list")).unwrap();
    assert_eq!(before, after, "nothing granted");
    assert_only_null_opens(&prober.run());
}

/// A fake proc whose `<pid>/cgroup` is `cgroup`, with this process's real
/// mountinfo and fdinfo (so mount ids can be checked).
fn proc_with_cgroup_file(pid: u32, cgroup: &str, mountinfo: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join(pid.to_string())).unwrap();
    fs::create_dir_all(dir.path().join("self")).unwrap();
    fs::write(dir.path().join(format!("{pid}/cgroup")), cgroup).unwrap();
    fs::write(dir.path().join("self/mountinfo"), mountinfo).unwrap();
    std::os::unix::fs::symlink("/proc/self/fdinfo", dir.path().join("self/fdinfo")).unwrap();
    dir
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn missing_cgroup_dir_is_an_error_naming_the_path() {
    require_root();
    let mount = visible_mount(Hierarchy::V2).expect("this test needs a visible cgroup2 mount");
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let proc = proc_with_cgroup_file(9, "0::/ocinvh-no-such-cgroup\n", &mountinfo);

    let err = allow(proc.path(), 9, &[ZERO]).unwrap_err();

    let want = mount.join("ocinvh-no-such-cgroup");
    assert!(
        matches!(&err, Error::CgroupDirMissing { path } if *path == want),
        "{err}"
    );
    assert!(err.to_string().contains("ocinvh-no-such-cgroup"), "{err}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn skips_a_listed_mount_that_is_not_the_one_a_lookup_reaches() {
    require_root();
    let mount = visible_mount(Hierarchy::V2).expect("this test needs a visible cgroup2 mount");
    // Right place, right filesystem, but a mount id that is not the visible
    // one: what mountinfo shows for a cgroup2 mount hidden under another.
    let mountinfo = format!(
        "999999 1 0:99 / {} rw - cgroup2 cgroup2 rw\n",
        mount.display()
    );
    let proc = proc_with_cgroup_file(9, "0::/ocinvh-no-such-cgroup\n", &mountinfo);

    let outcomes = allow(proc.path(), 9, &[ZERO]).unwrap();

    assert_eq!(outcomes, [Outcome::Unrestricted]);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn cgroup_below_no_visible_mount_is_an_error() {
    require_root();
    let mount = visible_mount(Hierarchy::V2).expect("this test needs a visible cgroup2 mount");
    let real = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mounts = discovery::parse_mountinfo(&real).unwrap();
    let id = mounts
        .iter()
        .rev()
        .find(|m| m.mount_point == mount)
        .unwrap()
        .id;
    // The visible mount, as if it showed only /kubepods.
    let mountinfo = format!(
        "{id} 1 0:99 /kubepods {} rw - cgroup2 cgroup2 rw\n",
        mount.display()
    );
    let proc = proc_with_cgroup_file(9, "0::/elsewhere/ctr\n", &mountinfo);

    let err = allow(proc.path(), 9, &[ZERO]).unwrap_err();

    assert!(
        matches!(err, Error::CgroupNotVisible { pid: 9, .. }),
        "{err}"
    );
}

/// /dev/null, which every runc-like program already allows.
const NULL: CgroupRule = CgroupRule {
    kind: 'c',
    major: 1,
    minor: 3,
    access: "rw",
};

/// Attaches a freshly loaded runc-like program to `cgroup` with `flags`; returns its id.
fn attach_runc_like(cgroup: &TempCgroup, flags: u32) -> u32 {
    let prog = load_runc_like();
    let dir = cgroup.open();
    bpf_sys::prog_attach(dir.fd.as_fd(), &prog, CGROUP_DEVICE, flags, None)
        .unwrap_or_else(|e| panic!("attach to {}: {e}", cgroup.path.display()));
    bpf_sys::prog_info(&prog).unwrap().id
}

/// A parent cgroup and a child cgroup below it, for ancestor scenarios.
fn parent_and_child(name: &str) -> (TempCgroup, TempCgroup) {
    require_root();
    let mount = visible_mount(Hierarchy::V2).expect("this test needs a visible cgroup2 mount");
    let parent = TempCgroup::new(&mount, name);
    let child = TempCgroup::new(&parent.path, "ctr");
    (parent, child)
}

/// Checks that a shell in `cgroup` really is denied /dev/zero now.
fn assert_restricted(cgroup: &TempCgroup) {
    let before = Prober::spawn();
    cgroup.write("cgroup.procs", &before.pid().to_string());
    assert_only_null_opens(&before.run());
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn v2_refuses_a_grant_that_an_ancestors_program_denies_and_names_the_ancestor() {
    let (parent, child) = parent_and_child("anc-deny");
    attach_runc_like(&parent, F_ALLOW_MULTI);
    assert_restricted(&child);
    let prober = Prober::spawn();
    child.write("cgroup.procs", &prober.pid().to_string());

    let err = allow(Path::new("/proc"), prober.pid(), &[ZERO]).unwrap_err();

    let line = err.to_string();
    let want = format!(
        "device cgroup {} (an ancestor of the container's {}) restricts devices",
        parent.path.display(),
        child.path.display()
    );
    assert!(line.contains(&want), "{line}");
    assert!(line.contains("c 1:5 rw"), "{line}");
    assert!(attached(&child).1.is_empty(), "attached to the child");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn v2_leaves_the_containers_program_alone_when_an_ancestor_denies() {
    let (parent, child) = parent_and_child("anc-deny2");
    attach_runc_like(&parent, F_ALLOW_MULTI);
    let own = attach_runc_like(&child, F_ALLOW_MULTI);
    let prober = Prober::spawn();
    child.write("cgroup.procs", &prober.pid().to_string());

    let err = allow(Path::new("/proc"), prober.pid(), &[ZERO]).unwrap_err();

    assert!(matches!(&err, Error::AncestorRestricts { .. }), "{err}");
    assert_eq!(
        attached(&child).1,
        [own],
        "the container's program was changed"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn v2_passes_when_the_ancestors_programs_already_allow_the_rules() {
    let (parent, child) = parent_and_child("anc-allow");
    attach_runc_like(&parent, F_ALLOW_MULTI);
    let prober = Prober::spawn();
    child.write("cgroup.procs", &prober.pid().to_string());

    let outcomes = allow(Path::new("/proc"), prober.pid(), &[NULL]).unwrap();

    let want = Outcome::V2AllowedAbove {
        dir: child.path.clone(),
        programs: 1,
    };
    assert!(outcomes.contains(&want), "{outcomes:?}");
    assert!(attached(&child).1.is_empty(), "attached to the child");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn v2_extends_the_containers_program_when_ancestors_already_allow_the_rules() {
    let (parent, child) = parent_and_child("anc-allow2");
    // The parent allows /dev/zero and /dev/null, the container only /dev/null.
    let block = program::allow_block(&[ZERO]).unwrap();
    let insns = program::encode(&program::prepend(&block, &runc_like()));
    let prog = bpf_sys::prog_load(
        bpf_sys::PROG_TYPE_CGROUP_DEVICE,
        &insns,
        c"Apache-2.0",
        "test_zero_too",
        None,
    )
    .unwrap();
    bpf_sys::prog_attach(
        parent.open().fd.as_fd(),
        &prog,
        CGROUP_DEVICE,
        F_ALLOW_MULTI,
        None,
    )
    .unwrap();
    let own = attach_runc_like(&child, F_ALLOW_MULTI);
    assert_restricted(&child);
    let prober = Prober::spawn();
    child.write("cgroup.procs", &prober.pid().to_string());

    let outcomes = allow(Path::new("/proc"), prober.pid(), &[ZERO]).unwrap();

    let v2 = Outcome::V2 {
        dir: child.path.clone(),
        replaced: 1,
    };
    assert!(outcomes.contains(&v2), "{outcomes:?}");
    assert_ne!(attached(&child).1, [own]);
    assert_zero_and_null_open_but_not_full(&prober.run());
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn v2_extends_a_program_that_overrides_the_ancestors() {
    let (parent, child) = parent_and_child("anc-override");
    // Deny-all-but-null above, overridden below: the container gets only its own.
    attach_runc_like(&parent, F_ALLOW_OVERRIDE);
    attach_runc_like(&child, F_ALLOW_OVERRIDE);
    assert_restricted(&child);
    let prober = Prober::spawn();
    child.write("cgroup.procs", &prober.pid().to_string());

    let outcomes = allow(Path::new("/proc"), prober.pid(), &[ZERO]).unwrap();

    let v2 = Outcome::V2 {
        dir: child.path.clone(),
        replaced: 1,
    };
    assert!(outcomes.contains(&v2), "{outcomes:?}");
    assert_zero_and_null_open_but_not_full(&prober.run());
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn v2_names_a_restricting_ancestor_above_the_visible_mount() {
    let (grandparent, parent) = parent_and_child("anc-hidden");
    let child = TempCgroup::new(&parent.path, "ctr");
    attach_runc_like(&grandparent, F_ALLOW_MULTI);
    let prober = Prober::spawn();
    child.write("cgroup.procs", &prober.pid().to_string());
    // Only the parent is mounted, as in a cgroup namespace: the grandparent
    // is out of the hook's view.
    let real = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mounts = discovery::parse_mountinfo(&real).unwrap();
    let mount = visible_mount(Hierarchy::V2).unwrap();
    let id = mounts
        .iter()
        .rev()
        .find(|m| m.mount_point == mount)
        .unwrap()
        .id;
    let root = Path::new("/").join(parent.path.strip_prefix(&mount).unwrap());
    let mountinfo = format!(
        "{id} 1 0:99 {} {} rw - cgroup2 cgroup2 rw\n",
        root.display(),
        parent.path.display()
    );
    let cgroup = Path::new("/").join(child.path.strip_prefix(&mount).unwrap());
    let proc = proc_with_cgroup_file(
        prober.pid(),
        &format!("0::{}\n", cgroup.display()),
        &mountinfo,
    );

    let err = allow(proc.path(), prober.pid(), &[ZERO]).unwrap_err();

    let want = format!(
        "a device cgroup above {} (out of the hook's view; an ancestor of the container's {})",
        parent.path.display(),
        child.path.display()
    );
    assert!(err.to_string().contains(&want), "{err}");
}

/// Loads a program that denies every access: a runtime tightening the rules.
fn load_deny_all() -> bpf_sys::ProgFd {
    let insns = program::encode(&[
        program::Insn::new(program::ALU64_MOV_K, 0, 0, 0, 0),
        program::Insn::new(program::JMP_EXIT, 0, 0, 0, 0),
    ]);
    bpf_sys::prog_load(
        bpf_sys::PROG_TYPE_CGROUP_DEVICE,
        &insns,
        c"Apache-2.0",
        "test_deny_all",
        None,
    )
    .unwrap()
}

/// A cgroup whose only program (no `multi`) a "runtime" replaces with a
/// deny-all one at `step` of the hook's swap: the hook must fail and the
/// runtime's program must stay.
fn v2_single_program_race(name: &str, step: v2::Step) {
    require_root();
    let mount = visible_mount(Hierarchy::V2).expect("this test needs a visible cgroup2 mount");
    let cgroup = TempCgroup::new(&mount, name);
    attach_runc_like(&cgroup, 0);
    let tighter = load_deny_all();
    let tighter_id = bpf_sys::prog_info(&tighter).unwrap().id;
    let runtime = cgroup.open();
    let mut raced = false;
    let mut observe = |at: v2::Step| {
        if at == step {
            bpf_sys::prog_attach(runtime.fd.as_fd(), &tighter, CGROUP_DEVICE, 0, None).unwrap();
            raced = true;
        }
    };

    let err = v2::allow_observed(&cgroup.open(), &[ZERO], &mut observe).unwrap_err();

    assert!(raced, "the hook never reached {step:?}");
    assert!(
        matches!(&err, Error::ProgramChanged { found, .. } if *found == [tighter_id]),
        "{err}"
    );
    assert!(err.to_string().contains(&cgroup.path.display().to_string()));
    assert_eq!(
        attached(&cgroup),
        (0, vec![tighter_id]),
        "tightening undone"
    );
    let prober = Prober::spawn();
    cgroup.write("cgroup.procs", &prober.pid().to_string());
    let report = prober.run();
    assert!(!report.contains("zero: ok"), "{report}");
    assert!(!report.contains("null: ok"), "{report}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn v2_fails_when_a_single_program_changes_between_query_and_attach() {
    v2_single_program_race("race-before", v2::Step::BeforeRecheck);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn v2_fails_when_a_single_program_changes_right_after_the_attach() {
    v2_single_program_race("race-after", v2::Step::AfterAttach);
}

/// Attaches `n` allow-all programs to `cgroup` with `multi`.
fn attach_allow_all(cgroup: &TempCgroup, n: usize) {
    let insns = program::encode(&[
        program::Insn::new(program::ALU64_MOV_K, 0, 0, 0, 1),
        program::Insn::new(program::JMP_EXIT, 0, 0, 0, 0),
    ]);
    let dir = cgroup.open();
    for _ in 0..n {
        let prog = bpf_sys::prog_load(
            bpf_sys::PROG_TYPE_CGROUP_DEVICE,
            &insns,
            c"Apache-2.0",
            "test_allow_all",
            None,
        )
        .unwrap();
        bpf_sys::prog_attach(dir.fd.as_fd(), &prog, CGROUP_DEVICE, F_ALLOW_MULTI, None).unwrap();
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn v2_sees_more_effective_programs_than_one_cgroup_can_hold() {
    let (parent, child) = parent_and_child("many");
    attach_allow_all(&parent, 40);
    attach_allow_all(&child, 30);
    let dir = child.open();

    let (_, effective) =
        bpf_sys::prog_query(dir.fd.as_fd(), CGROUP_DEVICE, bpf_sys::F_QUERY_EFFECTIVE).unwrap();

    assert_eq!(effective.len(), 70);
    let prober = Prober::spawn();
    child.write("cgroup.procs", &prober.pid().to_string());
    let outcomes = allow(Path::new("/proc"), prober.pid(), &[ZERO]).unwrap();
    let v2 = Outcome::V2 {
        dir: child.path.clone(),
        replaced: 30,
    };
    assert!(outcomes.contains(&v2), "{outcomes:?}");
}

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

    fn open(&self) -> CgroupDir {
        CgroupDir {
            path: self.path.clone(),
            fd: fs::File::open(&self.path).unwrap().into(),
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
fn load_runc_like() -> std::os::fd::OwnedFd {
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
            bpf_sys::prog_attach(dir.fd.as_fd(), prog.as_fd(), CGROUP_DEVICE, flags, None).unwrap();
            old_ids.push(bpf_sys::prog_info(prog.as_fd()).unwrap().id);
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

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run make test")]
fn v1_writes_rules_to_the_containers_devices_cgroup() {
    require_root();
    let mount = visible_mount(Hierarchy::V1Devices)
        .expect("this test needs a visible cgroup v1 devices mount (hybrid or v1 host)");
    let cgroup = TempCgroup::new(&mount, "v1");
    cgroup.write("devices.deny", "a");
    cgroup.write("devices.allow", "c 1:3 rwm");
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

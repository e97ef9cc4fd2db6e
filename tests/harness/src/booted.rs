//! systemd booted as pid 1 of a Debian root (harness::debroot), as
//! shared/TESTBED.md describes it: these machines do not run systemd, and
//! the systemd cgroup driver (and its `daemon-reload`) needs a real one.
//!
//! A shell first moves itself into a fresh directory of the host's cgroup2
//! tree (`/sys/fs/cgroup/unified` on these hybrid hosts), then unshares the
//! pid, mount, cgroup, UTS, IPC and network namespaces; the new pid 1
//! mounts an overlay of the root (its upper layer in the test's scratch
//! directory, so the cached root is never written), a private `/dev`,
//! read-only `/proc/sys` and sysfs, and cgroup2 at `/sys/fs/cgroup`, binds
//! the paths the test needs at their own absolute paths (and scratch
//! directories for `/var/lib/docker` and `/var/lib/containerd`, which
//! overlay2 cannot keep on an overlay), pivots into it and execs systemd.
//! The units that could reach the host (kernel modules, sysctl, binfmt,
//! udev, the clock, rfkill, fstrim, gettys) are masked, and the limits the
//! engines' units raise (no `CAP_SYS_RESOURCE` here) are reset in drop-ins.
//!
//! With `nested` (Incus's unprivileged containers), a second proc and
//! sysfs, whole and uncovered, lie at `/.onh-kernelfs`, and `/sys` is
//! read-only by its mount rather than its superblock: the kernel lets a
//! user namespace mount its own proc and sysfs only while it sees one
//! fully visible.
//!
//! Dropping it kills its pid 1, which ends the pid namespace and with it
//! every process and mount; the cgroup directories left are removed.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::debroot::DebRoot;
use crate::runtime::cleanup::{remove_cgroup_tree, remove_tree_safely};
use crate::runtime::process::{run_bounded, Finished};
use crate::runtime::run::RUN_LIMIT;

/// How long systemd gets to boot (and its pid namespace to end).
const BOOT_LIMIT: Duration = Duration::from_secs(90);

/// Where the host's cgroup2 tree is on these hybrid hosts.
const UNIFIED: &str = "/sys/fs/cgroup/unified";

/// Units that would reach the host or wait for hardware, masked; and
/// `tmp.mount`, whose tmpfs would hide every path bound below `/tmp` (a
/// checkout there: the binary under test, its simulated hosts).
const MASKED: [&str; 20] = [
    "tmp.mount",
    "systemd-modules-load.service",
    "systemd-sysctl.service",
    "proc-sys-fs-binfmt_misc.automount",
    "systemd-binfmt.service",
    "systemd-udevd.service",
    "systemd-udev-trigger.service",
    "systemd-udevd-control.socket",
    "systemd-udevd-kernel.socket",
    "systemd-timesyncd.service",
    "systemd-rfkill.service",
    "systemd-rfkill.socket",
    "systemd-hwdb-update.service",
    "systemd-firstboot.service",
    "fstrim.timer",
    "getty.target",
    "console-getty.service",
    "serial-getty@.service",
    "getty@.service",
    "systemd-networkd-wait-online.service",
];

/// The engines' units whose limits and OOM score are reset.
const ENGINE_UNITS: [&str; 2] = ["containerd.service", "docker.service"];

/// The shell that becomes pid 1: `$1` the root, `$2` the scratch
/// directory, `$3` the cgroup directory, `$4` `nested` or not, then the
/// paths to bind.
const BOOT: &str = r#"set -e
root=$1 scratch=$2 cg=$3; shift 3
mkdir "$cg"
echo $$ > "$cg/cgroup.procs"
exec unshare --pid --fork --mount --propagation private --cgroup --uts --ipc --net sh -c '
set -e
root=$1 scratch=$2 nested=$3; shift 3
m=$scratch/merged
mkdir -p "$scratch/upper" "$scratch/work" "$m" "$scratch/docker" "$scratch/containerd"
mount -t overlay onh-booted -o "lowerdir=$root,upperdir=$scratch/upper,workdir=$scratch/work" "$m"
mount -t proc proc "$m/proc"
mount --bind "$m/proc/sys" "$m/proc/sys"
mount -o remount,bind,ro "$m/proc/sys"
if [ "$nested" = nested ]; then
  mount -t sysfs sysfs "$m/sys"
  mount -o remount,bind,ro "$m/sys"
  mkdir -p "$m/.onh-kernelfs/proc" "$m/.onh-kernelfs/sys"
  mount -t proc -o nosuid,nodev,noexec proc "$m/.onh-kernelfs/proc"
  mount -t sysfs sysfs "$m/.onh-kernelfs/sys"
else
  mount -t sysfs -o ro sysfs "$m/sys"
fi
mount -t cgroup2 cgroup2 "$m/sys/fs/cgroup"
mount -t tmpfs -o mode=755,nosuid tmpfs "$m/dev"
mknod -m 666 "$m/dev/null" c 1 3
mknod -m 666 "$m/dev/zero" c 1 5
mknod -m 666 "$m/dev/full" c 1 7
mknod -m 666 "$m/dev/random" c 1 8
mknod -m 666 "$m/dev/urandom" c 1 9
mknod -m 666 "$m/dev/tty" c 5 0
mkdir "$m/dev/pts" "$m/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$m/dev/pts"
ln -s pts/ptmx "$m/dev/ptmx"
mount -t tmpfs -o mode=1777 tmpfs "$m/dev/shm"
mkdir -p "$m/var/lib/docker" "$m/var/lib/containerd"
mount --bind "$scratch/docker" "$m/var/lib/docker"
mount --bind "$scratch/containerd" "$m/var/lib/containerd"
for path in "$@"; do mkdir -p "$m$path"; mount --rbind "$path" "$m$path"; done
hostname onh-booted
mkdir -p "$m/.oldroot"
cd "$m"
pivot_root . .oldroot
umount -l /.oldroot
rmdir /.oldroot
export container=oci-nvidia-hook
exec /usr/lib/systemd/systemd --system
' sh "$root" "$scratch" "$@""#;

/// systemd running as pid 1 of a root; killed when dropped.
pub struct Booted {
    /// The scratch directory: the overlay's upper layer, the engines' state, the log.
    pub dir: PathBuf,
    /// Its pid 1, as this host sees it.
    pub pid1: u32,
    child: Child,
    cgroup: PathBuf,
}

/// What a boot is given besides the root.
pub struct BootSetup<'a> {
    /// Host paths bound at their own absolute paths (the repository: the
    /// binary under test, simulated hosts).
    pub binds: &'a [&'a Path],
    /// Files written into the root's `/etc` before it boots (path below
    /// `/etc`, content).
    pub etc_files: &'a [(&'a str, String)],
    /// Links made before it boots (absolute path in the root, target).
    pub links: &'a [(&'a str, &'a Path)],
    /// Whether unprivileged containers start inside (Incus, LXC): a second
    /// proc and sysfs, whole and uncovered, are mounted at `/.onh-kernelfs`,
    /// since the kernel lets a user namespace mount its own only while one
    /// it sees is fully visible (the read-only `/proc/sys` covers the
    /// first), and `/sys` is read-only by its mount, not its superblock.
    pub nested: bool,
}

impl Booted {
    /// Boots `root` with `setup` in `dir` (emptied first) and waits until
    /// systemd says the system is running.
    pub fn boot(root: &DebRoot, dir: &Path, setup: &BootSetup) -> Booted {
        assert!(
            root.dir.join("usr/lib/systemd/systemd").is_file(),
            "no systemd in the {} root",
            root.suite
        );
        assert!(
            Path::new(UNIFIED).join("cgroup.procs").is_file(),
            "no cgroup2 tree at {UNIFIED}: these tests expect the hybrid hosts of shared/TESTBED.md"
        );
        remove_tree_safely(dir);
        let etc = dir.join("upper/etc");
        let units = etc.join("systemd/system");
        fs::create_dir_all(&units).unwrap();
        for unit in MASKED {
            symlink("/dev/null", units.join(unit)).unwrap();
        }
        for unit in ENGINE_UNITS {
            let drop_in = units.join(format!("{unit}.d"));
            fs::create_dir_all(&drop_in).unwrap();
            fs::write(
                drop_in.join("oci-nvidia-hook-test.conf"),
                "# No CAP_SYS_RESOURCE here, and no modprobe.\n\
                 [Service]\nLimitNPROC=\nLimitCORE=\nLimitNOFILE=\nOOMScoreAdjust=\nExecStartPre=\n",
            )
            .unwrap();
        }
        // With the root's own /tmp kept, its cleaning at boot (tmp.conf's
        // `D /tmp`) would reach into what is bound there: none.
        fs::create_dir_all(etc.join("tmpfiles.d")).unwrap();
        fs::write(etc.join("tmpfiles.d/tmp.conf"), "").unwrap();
        for (path, text) in setup.etc_files {
            let to = etc.join(path);
            fs::create_dir_all(to.parent().expect("a file under /etc")).unwrap();
            fs::write(&to, text).unwrap();
        }
        for (path, target) in setup.links {
            let at = dir.join("upper").join(path.trim_start_matches('/'));
            fs::create_dir_all(at.parent().expect("a path below /")).unwrap();
            symlink(target, at).unwrap();
        }
        let cgroup = Path::new(UNIFIED).join(format!("onh-booted-{}", std::process::id()));
        let log = fs::File::create(dir.join("boot.log")).unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", BOOT, "sh"])
            .arg(&root.dir)
            .arg(dir)
            .arg(&cgroup)
            .arg(if setup.nested { "nested" } else { "plain" })
            .args(setup.binds)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let child = cmd.spawn().expect("run the boot shell");
        let started = Instant::now();
        let pid1 = loop {
            if let Some(pid) = child_of(child.id()) {
                break pid;
            }
            assert!(
                started.elapsed() < BOOT_LIMIT,
                "no pid 1 started: {}",
                fs::read_to_string(dir.join("boot.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut booted = Booted {
            dir: dir.to_path_buf(),
            pid1,
            child,
            cgroup,
        };
        booted.wait_running(started);
        booted
    }

    /// Waits until `systemctl is-system-running` says `running`.
    fn wait_running(&mut self, started: Instant) {
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the booted root ended ({status}): {}",
                    fs::read_to_string(self.dir.join("boot.log")).unwrap_or_default()
                );
            }
            let state = self.run(&["systemctl", "is-system-running"]);
            match state.stdout.trim() {
                "running" => return,
                "degraded" => panic!(
                    "systemd booted degraded: {}",
                    self.run(&["systemctl", "--failed", "--no-pager"]).stdout
                ),
                _ => {}
            }
            assert!(
                started.elapsed() < BOOT_LIMIT,
                "systemd is not running after {BOOT_LIMIT:?}: {}{}\n{}",
                state.stdout,
                state.stderr,
                fs::read_to_string(self.dir.join("boot.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `argv` inside, in all of pid 1's namespaces, with a bare environment; bounded.
    pub fn run(&self, argv: &[&str]) -> Finished {
        run_bounded(self.command(argv), RUN_LIMIT)
    }

    /// `argv` inside, which must succeed; its stdout.
    pub fn ok(&self, argv: &[&str]) -> String {
        let out = self.run(argv);
        assert!(
            out.status.is_some_and(|s| s.success()),
            "{argv:?} in the booted root: {}{}",
            out.stdout,
            out.stderr
        );
        out.stdout
    }

    /// The command running `argv` inside.
    pub fn command(&self, argv: &[&str]) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg("-t")
            .arg(self.pid1.to_string())
            .args(["-a", "--"])
            .args(argv)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        cmd
    }

    /// What `path` (absolute, inside) is, seen from this host.
    pub fn path(&self, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{path}", self.pid1))
    }

    /// systemd's journal of the boot, for failure messages (its last lines).
    pub fn journal(&self, unit: &str) -> String {
        self.run(&["journalctl", "--no-pager", "-n", "40", "-u", unit])
            .stdout
    }
}

impl Drop for Booted {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.pid1 as i32), Signal::SIGKILL);
        let _ = self.child.wait();
        // The namespace's processes die with its pid 1; their cgroups empty.
        let deadline = Instant::now() + BOOT_LIMIT;
        while self.cgroup.exists() && Instant::now() < deadline {
            remove_cgroup_tree(&self.cgroup);
            if self.cgroup.exists() {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        remove_tree_safely(&self.dir);
    }
}

/// The child of `pid` in another pid namespace than this process's (not
/// a command the boot shell runs first), once there is one.
fn child_of(pid: u32) -> Option<u32> {
    let children = fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    let ours = fs::read_link("/proc/self/ns/pid").ok()?;
    children
        .split_whitespace()
        .filter_map(|c| c.parse::<u32>().ok())
        .find(|c| fs::read_link(format!("/proc/{c}/ns/pid")).is_ok_and(|ns| ns != ours))
}

//! Debian roots made by `debootstrap` and entered with `pivot_root`: the
//! one way the suites run another Debian's tools (tests/bullseye.rs: an old
//! glibc and runc; tests/trixie.rs: Debian 13's engines; tests/containerd2.rs
//! and tests/docker28.rs: sid's containerd 2.x, runc 1.3 and Docker 28) without touching
//! the host's apt sources or `/etc`.
//!
//! A root is made once into `/var/cache/oci-nvidia-hook/<suite>` (outside
//! the repository, reused by later runs): `debootstrap --variant=minbase`
//! into a side directory, then the suite's packages installed inside it
//! under a `policy-rc.d` that refuses every service start, and only then
//! renamed into place. A root whose dpkg status lacks some of the asked
//! packages gets those installed into it, once.
//!
//! Commands enter it in a private mount namespace (shared/TESTBED.md): the
//! root bound on itself with /proc, /dev, /sys, the cgroups (the host's
//! hybrid tree, or a cgroup2 mount for crun) and a fresh /run, the paths
//! the test needs bound at their own absolute paths, then `pivot_root` and
//! a lazy unmount of the old root. A plain chroot would not do: the hook's
//! `setns` into the container's mount namespace escapes it. Every mount
//! vanishes with the namespace.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::runtime::runtimes::find_tool;

/// Where the roots are kept between runs.
const CACHE: &str = "/var/cache/oci-nvidia-hook";

/// The suites whose mirror serves a frozen snapshot, its Release file past
/// its `Valid-Until` (shared/TESTBED.md): apt inside them is told so.
const FROZEN: [&str; 1] = ["sid"];

/// A Debian root made by debootstrap, ready to enter.
#[derive(Clone, Debug)]
pub struct DebRoot {
    /// The Debian suite (`bullseye`, `trixie`).
    pub suite: &'static str,
    /// The root directory on this host: `<cache>/<name>`.
    pub dir: PathBuf,
}

/// Which cgroup hierarchy a command in the root sees at `/sys/fs/cgroup`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cgroups {
    /// The host's tree as it is (here: hybrid v1 with cgroup2 at `unified`).
    Host,
    /// A cgroup2 mount alone (crun refuses the hybrid layout).
    V2,
}

/// How a command enters a root: what it sees besides the root's own files.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Host directories or files bound at their own absolute paths.
    pub binds: Vec<PathBuf>,
    /// Host files bound over another path (host path, path inside).
    pub file_binds: Vec<(PathBuf, PathBuf)>,
    /// The cgroup hierarchy it sees.
    pub cgroups: Cgroups,
}

impl Entry {
    /// Binds `paths` at their own paths, with the host's cgroups.
    pub fn binding(paths: &[&Path]) -> Entry {
        Entry {
            binds: paths.iter().map(|p| p.to_path_buf()).collect(),
            file_binds: Vec::new(),
            cgroups: Cgroups::Host,
        }
    }
}

impl DebRoot {
    /// The `suite` root holding `packages`, made (or completed) the first
    /// time; fails the test when debootstrap or apt fails.
    pub fn ensure(suite: &'static str, packages: &[&str]) -> DebRoot {
        DebRoot::ensure_named(suite, suite, packages)
    }

    /// A second root of `suite`, cached as `name` apart from the suite's
    /// own (packages that other suites' roots should not carry), holding
    /// `packages`; made or completed as [`DebRoot::ensure`] does.
    pub fn ensure_named(name: &str, suite: &'static str, packages: &[&str]) -> DebRoot {
        let dir = PathBuf::from(CACHE).join(name);
        let root = DebRoot { suite, dir };
        if !root.dir.join("usr/bin/apt-get").is_file() {
            root.bootstrap();
        }
        let have = root.installed();
        let missing: Vec<&str> = packages
            .iter()
            .copied()
            .filter(|p| !have.iter().any(|h| h == p))
            .collect();
        if !missing.is_empty() {
            root.install(&root.dir, &missing);
        }
        root
    }

    /// The packages dpkg records as installed in the root.
    pub fn installed(&self) -> Vec<String> {
        let status = fs::read_to_string(self.dir.join("var/lib/dpkg/status")).unwrap_or_default();
        status
            .split("\n\n")
            .filter(|stanza| stanza.lines().any(|l| l == "Status: install ok installed"))
            .filter_map(|stanza| stanza.lines().find_map(|l| l.strip_prefix("Package: ")))
            .map(str::to_string)
            .collect()
    }

    /// debootstrap into `<dir>.partial`, renamed into place once complete.
    fn bootstrap(&self) {
        let debootstrap = find_tool("debootstrap").expect(
            "debootstrap is not on PATH: install it (integration/install-deps, or `make test`)",
        );
        let partial = self.dir.with_extension("partial");
        let _ = fs::remove_dir_all(&partial);
        fs::create_dir_all(CACHE).expect("create the root cache");
        let status = Command::new(debootstrap)
            .args(["--variant=minbase", self.suite])
            .arg(&partial)
            .status()
            .expect("run debootstrap");
        assert!(
            status.success(),
            "debootstrap {} failed: {status}",
            self.suite
        );
        fs::rename(&partial, &self.dir).expect("move the debootstrap root into place");
    }

    /// `apt-get install --no-install-recommends PACKAGES` inside the root
    /// (a chroot in a private namespace with /proc: no engine runs here),
    /// with a `policy-rc.d` refusing service starts, then checked.
    fn install(&self, dir: &Path, packages: &[&str]) {
        let policy = dir.join("usr/sbin/policy-rc.d");
        fs::write(
            &policy,
            "#!/bin/sh\n# tests/harness debroot: no service starts in a test root\nexit 101\n",
        )
        .expect("write policy-rc.d");
        fs::set_permissions(&policy, fs::Permissions::from_mode(0o755)).unwrap();
        if FROZEN.contains(&self.suite) {
            fs::write(
                dir.join("etc/apt/apt.conf.d/99oci-nvidia-hook-frozen-mirror"),
                "// tests/harness debroot: the mirror serves a frozen snapshot\n\
                 Acquire::Check-Valid-Until \"false\";\n",
            )
            .expect("write the apt configuration");
        }
        self.chroot_script(
            r#"export DEBIAN_FRONTEND=noninteractive
apt-get -q -y update
apt-get -q -y install --no-install-recommends "$@"
apt-get clean"#,
            packages,
        );
        let have = self.installed();
        let still: Vec<&&str> = packages
            .iter()
            .filter(|p| !have.iter().any(|h| h == *p))
            .collect();
        assert!(
            still.is_empty(),
            "{still:?} still not installed in the {} root",
            self.suite
        );
    }

    /// Runs the shell `script` with `args` chrooted into the root, in a
    /// private namespace with /proc (setting the root up: no engine runs
    /// this way); fails the test when it fails.
    pub fn chroot_script(&self, script: &str, args: &[&str]) {
        const SETUP: &str = r#"set -e
root=$1 script=$2; shift 2
mount -t proc proc "$root/proc"
chroot "$root" sh -ec "$script" sh "$@""#;
        let status = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", SETUP, "sh"])
            .arg(&self.dir)
            .arg(script)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .status()
            .expect("run a script in the root");
        assert!(
            status.success(),
            "{script:?} {args:?} in the {} root failed: {status}",
            self.suite
        );
    }

    /// The command that runs `argv` inside the root, entered as `entry` says.
    pub fn command(&self, entry: &Entry, argv: &[&str]) -> Command {
        const SETUP: &str = r#"set -e
root=$1 cgroups=$2 nbinds=$3; shift 3
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t sysfs sysfs "$root/sys"
if [ "$cgroups" = v2 ]; then
  mount -t cgroup2 cgroup2 "$root/sys/fs/cgroup"
else
  mount --rbind /sys/fs/cgroup "$root/sys/fs/cgroup"
fi
mount -t tmpfs tmpfs "$root/run"
mkdir -p "$root/.oldroot"
while [ "$nbinds" -gt 0 ]; do
  src=$1 dst=$2; shift 2; nbinds=$((nbinds - 1))
  if [ -d "$src" ]; then mkdir -p "$root$dst"
  else mkdir -p "$root${dst%/*}"; [ -e "$root$dst" ] || : >"$root$dst"; fi
  mount --rbind "$src" "$root$dst"
done
cd "$root"
pivot_root . .oldroot
umount -l /.oldroot
cd /
exec "$@""#;
        let mut pairs: Vec<(&Path, &Path)> = entry
            .binds
            .iter()
            .map(|p| (p.as_path(), p.as_path()))
            .collect();
        pairs.extend(
            entry
                .file_binds
                .iter()
                .map(|(s, d)| (s.as_path(), d.as_path())),
        );
        // Shallower places first: a bind over /tmp must not hide a checkout
        // bound below it (a CI clone in /tmp).
        pairs.sort_by_key(|(_, dst)| dst.components().count());
        let mut cmd = Command::new("unshare");
        cmd.args(["-m", "--propagation", "private", "sh", "-c", SETUP, "sh"])
            .arg(&self.dir)
            .arg(match entry.cgroups {
                Cgroups::Host => "host",
                Cgroups::V2 => "v2",
            })
            .arg(pairs.len().to_string());
        for (src, dst) in pairs {
            cmd.arg(src).arg(dst);
        }
        cmd.args(argv)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        cmd
    }
}

/// Debian 13's engines (docker.io 26, podman 5, containerd 1.7, runc 1.1,
/// crun 1.21) and what the CRI client needs (grpcio, protobuf and protoc
/// for the CRI `api.proto`), all installed into one cached root.
pub const TRIXIE_ENGINES: [&str; 9] = [
    "docker.io",
    "docker-cli",
    "containerd",
    "podman",
    "crun",
    "runc",
    "python3-grpcio",
    "python3-protobuf",
    "protobuf-compiler",
];

/// The Debian 13 (trixie) root with [`TRIXIE_ENGINES`].
pub fn trixie() -> DebRoot {
    DebRoot::ensure("trixie", &TRIXIE_ENGINES)
}

/// Debian sid's containerd 2.1 (config version 3), runc 1.3 and docker.io
/// 28.5 (its CLI packaged apart, as in trixie), with what the CRI client
/// needs, in one cached root.
pub const SID_ENGINES: [&str; 7] = [
    "containerd",
    "runc",
    "docker.io",
    "docker-cli",
    "python3-grpcio",
    "python3-protobuf",
    "protobuf-compiler",
];

/// The Debian sid root with [`SID_ENGINES`].
pub fn sid() -> DebRoot {
    DebRoot::ensure("sid", &SID_ENGINES)
}

/// The HPC and system-container managers of docs/hpc.md that Debian sid
/// packages: Apptainer 1.4 and Incus's container-only daemon (with LXC 7's
/// liblxc and its `hooks/nvidia`), kept apart from [`SID_ENGINES`]' root.
pub const SID_HPC: [&str; 3] = ["apptainer", "incus-base", "systemd"];

/// The Debian sid root with [`SID_HPC`], cached as `sid-hpc`.
pub fn sid_hpc() -> DebRoot {
    DebRoot::ensure_named("sid-hpc", "sid", &SID_HPC)
}

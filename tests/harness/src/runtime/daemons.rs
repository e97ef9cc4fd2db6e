//! containerd and dockerd (Debian's docker.io: dockerd 20.10, containerd
//! 1.6), started for one test binary and stopped by pid when dropped, as
//! shared/TESTBED.md says they run here: scratch roots, private sockets, a
//! containerd namespace of their own, no iptables, no bridge.
//!
//! Both run in a private mount namespace, kept alive by a holder process,
//! in which an overlay covers `/etc`: there the hook's default config
//! (`/etc/oci-nvidia-hook/config.toml`, which Docker's `--gpus` and
//! containerd's `ctr run --gpus` leave the hook to find) points at the
//! simulated host, while the host's own `/etc` is never written. Hooks run
//! in that namespace too: runc inherits it from containerd's shim.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::cleanup::{cgroup_dirs, remove_tree_safely};
use super::oci_config::path_str;
use super::process::{run_bounded, Finished};
use super::run::RUN_LIMIT;
use super::runtimes::require_tool;
use crate::project::hook_binary;

/// How long a daemon gets to come up or go away.
const DAEMON_LIMIT: Duration = Duration::from_secs(60);

/// Where the host keeps state the daemons may add to, removed afterwards
/// if they were not there before.
const RUN_DIRS: [&str; 2] = ["/run/docker", "/run/containerd"];

/// containerd and dockerd, running; stopped when dropped.
pub struct Daemons {
    /// The scratch directory holding their roots, sockets and logs.
    pub dir: PathBuf,
    /// The unique part of names: containerd namespace, cgroup parent.
    pub tag: String,
    holder: Child,
    containerd: Option<Child>,
    dockerd: Option<Child>,
    run_dirs_before: Vec<bool>,
}

/// What the daemons are started with.
pub struct DaemonSetup<'a> {
    /// Our hook config, installed as `/etc/oci-nvidia-hook/config.toml` in their namespace.
    pub hook_config: &'a Path,
    /// Names our binary is linked under on dockerd's and ctr's PATH
    /// (`nvidia-container-runtime-hook`, `nvidia-container-cli`, …).
    pub links: &'a [&'a str],
    /// `--add-runtime NAME=PATH` for dockerd: NAME and the link PATH is
    /// named after (one of `links`, found in the daemons' `bin/`).
    pub runtimes: &'a [(&'a str, &'a str)],
    /// `--default-runtime`, when not runc.
    pub default_runtime: Option<&'a str>,
    /// dockerd's `--config-file` (a `daemon.json`), when one is given.
    pub docker_config: Option<&'a Path>,
    /// A directory bound over `/etc/cdi` in their namespace: the CDI specs
    /// the runtime wrapper and CDI-aware engines find there.
    pub cdi_dir: Option<&'a Path>,
}

impl Daemons {
    /// Starts both daemons in a private namespace under `dir`.
    pub fn start(dir: &Path, setup: &DaemonSetup) -> Daemons {
        for tool in ["containerd", "dockerd", "ctr", "unshare", "nsenter"] {
            require_tool(tool);
        }
        assert!(
            Path::new("/usr/bin/docker").is_file(),
            "/usr/bin/docker (Debian's docker.io) is missing: run integration/install-deps"
        );
        remove_tree_safely(dir);
        fs::create_dir_all(dir.join("etc-upper/oci-nvidia-hook")).unwrap();
        fs::create_dir_all(dir.join("etc-work")).unwrap();
        fs::copy(
            setup.hook_config,
            dir.join("etc-upper/oci-nvidia-hook/config.toml"),
        )
        .expect("copy the hook config");
        let bin = dir.join("bin");
        fs::create_dir_all(&bin).unwrap();
        for name in setup.links {
            symlink(hook_binary(), bin.join(name)).unwrap();
        }
        let tag = format!("onh{}", std::process::id());
        let run_dirs_before = RUN_DIRS.iter().map(|d| Path::new(d).exists()).collect();

        // The holder: a private mount namespace with the overlay on /etc.
        let ready = dir.join("ready");
        let holder = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c"])
            .arg(
                "mount -t overlay onh-etc -o lowerdir=/etc,upperdir=\"$1\",workdir=\"$2\" /etc \
                 && { [ -z \"$4\" ] || { mkdir -p /etc/cdi && mount --bind \"$4\" /etc/cdi; }; } \
                 && touch \"$3\" && exec sleep infinity",
            )
            .arg("sh")
            .arg(dir.join("etc-upper"))
            .arg(dir.join("etc-work"))
            .arg(&ready)
            .arg(setup.cdi_dir.map(path_str).unwrap_or_default())
            .stdin(Stdio::null())
            .spawn()
            .expect("run unshare");
        let mut daemons = Daemons {
            dir: dir.to_path_buf(),
            tag,
            holder,
            containerd: None,
            dockerd: None,
            run_dirs_before,
        };
        daemons.wait_for(&ready, "the holder's /etc overlay");

        let config = dir.join("containerd.toml");
        fs::write(
            &config,
            format!(
                "version = 2\nroot = {}\nstate = {}\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
                 [grpc]\n  address = {}\n[ttrpc]\n  address = {}\n",
                toml(&dir.join("ctd-root")),
                toml(&dir.join("ctd-state")),
                toml(&daemons.containerd_socket()),
                toml(&dir.join("ctd-ttrpc.sock")),
            ),
        )
        .unwrap();
        let containerd = daemons
            .in_namespace("containerd")
            .arg("--config")
            .arg(&config)
            .stdout(log_file(&dir.join("containerd.log")))
            .stderr(log_file(&dir.join("containerd.log")))
            .spawn()
            .expect("start containerd");
        daemons.containerd = Some(containerd);
        daemons.wait_for(&daemons.containerd_socket(), "containerd's socket");

        let mut dockerd = daemons.in_namespace("dockerd");
        dockerd
            .env_clear()
            .env("PATH", daemons.path_env())
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("docker.pid"))
            .arg("-H")
            .arg(format!("unix://{}", path_str(&daemons.docker_socket())))
            .arg("--containerd")
            .arg(daemons.containerd_socket())
            .arg("--containerd-namespace")
            .arg(&daemons.tag)
            .arg("--containerd-plugins-namespace")
            .arg(format!("{}-plugins", daemons.tag))
            .arg("--cgroup-parent")
            .arg(&daemons.tag)
            .args([
                "--iptables=false",
                "--ip6tables=false",
                "--ip-masq=false",
                "--bridge=none",
                "--storage-driver=overlay2",
            ]);
        for (name, link) in setup.runtimes {
            dockerd
                .arg("--add-runtime")
                .arg(format!("{name}={}", path_str(&bin.join(link))));
        }
        if let Some(name) = setup.default_runtime {
            dockerd.arg("--default-runtime").arg(name);
        }
        if let Some(file) = setup.docker_config {
            dockerd.arg("--config-file").arg(file);
        }
        let dockerd = dockerd
            .stdout(log_file(&dir.join("dockerd.log")))
            .stderr(log_file(&dir.join("dockerd.log")))
            .spawn()
            .expect("start dockerd");
        daemons.dockerd = Some(dockerd);
        daemons.wait_for(&daemons.docker_socket(), "dockerd's socket");
        let deadline = Instant::now() + DAEMON_LIMIT;
        while !daemons
            .docker(&["info"])
            .status
            .is_some_and(|s| s.success())
        {
            assert!(
                Instant::now() < deadline,
                "dockerd does not answer:\n{}",
                daemons.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        daemons
    }

    /// The PATH dockerd and ctr run with: our links first.
    pub fn path_env(&self) -> String {
        format!(
            "{}:/usr/sbin:/usr/bin:/sbin:/bin",
            path_str(&self.dir.join("bin"))
        )
    }

    /// The `config.json` containerd keeps for running container `id` of
    /// dockerd's namespace.
    pub fn task_config(&self, id: &str) -> PathBuf {
        self.dir
            .join("ctd-state/io.containerd.runtime.v2.task")
            .join(&self.tag)
            .join(id)
            .join("config.json")
    }

    /// containerd's GRPC socket.
    pub fn containerd_socket(&self) -> PathBuf {
        self.dir.join("ctd.sock")
    }

    /// dockerd's socket.
    pub fn docker_socket(&self) -> PathBuf {
        self.dir.join("docker.sock")
    }

    /// `program` run in the daemons' mount namespace.
    pub fn in_namespace(&self, program: &str) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg("-t")
            .arg(self.holder.id().to_string())
            .args(["-m", "--"])
            .arg(program);
        cmd
    }

    /// `docker -H … ARGS`, bounded.
    pub fn docker(&self, args: &[&str]) -> Finished {
        let mut cmd = Command::new("/usr/bin/docker");
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("HOME", &self.dir)
            .arg("-H")
            .arg(format!("unix://{}", path_str(&self.docker_socket())))
            .args(args);
        run_bounded(cmd, RUN_LIMIT)
    }

    /// Imports `rootfs` into dockerd as `image` (`tar`, then `docker
    /// import` with a PATH), since no registry is reachable; fails the test
    /// if either fails.
    pub fn import_rootfs(&self, rootfs: &Path, image: &str) {
        let tar = self.dir.join("rootfs.tar");
        let status = Command::new("tar")
            .arg("-C")
            .arg(rootfs)
            .arg("-cf")
            .arg(&tar)
            .arg(".")
            .status()
            .expect("run tar");
        assert!(status.success(), "tar of {} failed", rootfs.display());
        let out = self.docker(&[
            "import",
            "-c",
            "ENV PATH=/usr/bin:/bin",
            &path_str(&tar),
            image,
        ]);
        assert!(
            out.status.is_some_and(|s| s.success()),
            "docker import failed: {}\n{}",
            out.stderr,
            self.logs()
        );
    }

    /// `ctr -a … -n NAMESPACE ARGS`, bounded, in the daemons' namespace with
    /// our links on its PATH (`ctr run --gpus` looks `nvidia-container-cli` up there).
    pub fn ctr(&self, namespace: &str, args: &[&str]) -> Finished {
        let mut cmd = self.in_namespace("ctr");
        cmd.env_clear()
            .env("PATH", self.path_env())
            .arg("-a")
            .arg(self.containerd_socket())
            .arg("-n")
            .arg(namespace)
            .args(args);
        run_bounded(cmd, RUN_LIMIT)
    }

    /// Both daemons' logs, for failure messages.
    pub fn logs(&self) -> String {
        ["containerd.log", "dockerd.log"]
            .iter()
            .map(|name| {
                let text = fs::read_to_string(self.dir.join(name)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(30).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {name} (last lines)\n{}", tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn wait_for(&self, path: &Path, what: &str) {
        let deadline = Instant::now() + DAEMON_LIMIT;
        while !path.exists() {
            assert!(
                Instant::now() < deadline,
                "{what} did not appear at {}:\n{}",
                path.display(),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemons {
    fn drop(&mut self) {
        for child in [self.dockerd.take(), self.containerd.take()]
            .into_iter()
            .flatten()
        {
            stop(child);
        }
        let _ = self.holder.kill();
        let _ = self.holder.wait();
        // The shims outlive containerd briefly; their cgroups and state go with them.
        for dir in cgroup_dirs(|name| name.to_str().is_some_and(|n| n.starts_with(&self.tag))) {
            remove_cgroup_tree(&dir);
        }
        for (dir, existed) in RUN_DIRS.iter().zip(&self.run_dirs_before) {
            if !existed {
                let _ = fs::remove_dir_all(dir);
            }
        }
    }
}

/// SIGTERM, then SIGKILL if it lingers.
fn stop(mut child: Child) {
    let pid = Pid::from_raw(child.id() as i32);
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Removes an empty cgroup and its empty children, deepest first.
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&entry.path());
            }
        }
    }
    let _ = fs::remove_dir(dir);
}

fn log_file(path: &Path) -> Stdio {
    fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open a daemon log")
        .into()
}

/// A TOML basic string.
fn toml(path: &Path) -> String {
    format!(
        "\"{}\"",
        path_str(path).replace('\\', "\\\\").replace('"', "\\\"")
    )
}

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

use super::cleanup::{cgroup_dirs, remove_cgroup_tree, remove_tree_safely};
use super::oci_config::{path_str, CONTAINER_SCRIPT, NVIDIA_MAJOR};
use super::process::{run_bounded, Finished};
use super::run::{Run, RunFiles, RUN_LIMIT};
use super::runtimes::require_tool;
use super::runtimes::Runtime;
use crate::debroot::{DebRoot, Entry};
use crate::project::{hook_binary, repo};

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
    in_root: bool,
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
    /// More files for their `/etc` (path under it, host file to copy): CDI specs.
    pub etc_files: &'a [(&'a str, &'a Path)],
    /// The Debian root the daemons run from (harness::debroot: its
    /// dockerd, containerd and docker CLI), or this host's when `None`.
    pub root: Option<&'a DebRoot>,
    /// containerd with its CRI plugin instead of dockerd (harness::runtime::cri).
    pub cri: Option<CriSetup<'a>>,
}

/// containerd's CRI plugin, set up as a kubelet's node has it.
pub struct CriSetup<'a> {
    /// The sandbox (pause) image's reference, imported before any pod runs.
    pub sandbox_image: &'a str,
    /// Arguments after `nvidia-ctk runtime configure --runtime=containerd
    /// --config=FILE --drop-in-config=DIR/conf.d/99-nvidia.toml`, run on containerd's config before it starts (none: not run).
    pub configure: &'a [&'a str],
}

impl Daemons {
    /// Starts both daemons in a private namespace under `dir`.
    pub fn start(dir: &Path, setup: &DaemonSetup) -> Daemons {
        let mut daemons = Daemons::hold(dir, setup);
        let bin = dir.join("bin");

        let config = dir.join("containerd.toml");
        let plugins = match &setup.cri {
            None => "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n".to_string(),
            // No CAP_SYS_RESOURCE here: runc may not lower oom_score_adj (TESTBED.md).
            // runc listed as `containerd config default` lists it: a config
            // naming any runtime replaces the built-in list.
            Some(cri) => format!(
                "[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = {}\n  \
                 restrict_oom_score_adj = true\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  \
                 runtime_type = \"io.containerd.runc.v2\"\n",
                toml_string(cri.sandbox_image)
            ),
        };
        fs::write(
            &config,
            format!(
                "version = 2\nroot = {}\nstate = {}\n\
                 [grpc]\n  address = {}\n[ttrpc]\n  address = {}\n{plugins}",
                toml(&dir.join("ctd-root")),
                toml(&dir.join("ctd-state")),
                toml(&daemons.containerd_socket()),
                toml(&dir.join("ctd-ttrpc.sock")),
            ),
        )
        .unwrap();
        if let Some(cri) = setup.cri.as_ref().filter(|c| !c.configure.is_empty()) {
            let mut args = vec![
                "runtime".to_string(),
                "configure".into(),
                "--runtime=containerd".into(),
                format!("--config={}", path_str(&config)),
                // Never NVIDIA's default drop-in under the host's /etc.
                format!(
                    "--drop-in-config={}",
                    path_str(&dir.join("conf.d/99-nvidia.toml"))
                ),
            ];
            args.extend(cri.configure.iter().map(|a| a.to_string()));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            nvidia_ctk(dir, &args);
        }
        daemons.start_containerd(&config);
        if setup.cri.is_some() {
            return daemons;
        }

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

    /// Their private namespace alone, under `dir`: the `/etc` overlay with
    /// the hook config and `etc_files`, our `links` in `bin/`; no daemon
    /// yet ([`Daemons::start_containerd`]).
    pub fn hold(dir: &Path, setup: &DaemonSetup) -> Daemons {
        if setup.root.is_none() {
            for tool in ["containerd", "dockerd", "ctr", "unshare", "nsenter"] {
                require_tool(tool);
            }
            assert!(
                Path::new("/usr/bin/docker").is_file(),
                "/usr/bin/docker (Debian's docker.io) is missing: run integration/install-deps"
            );
        }
        remove_tree_safely(dir);
        fs::create_dir_all(dir.join("etc-upper/oci-nvidia-hook")).unwrap();
        fs::create_dir_all(dir.join("etc-work")).unwrap();
        fs::copy(
            setup.hook_config,
            dir.join("etc-upper/oci-nvidia-hook/config.toml"),
        )
        .expect("copy the hook config");
        for (rel, file) in setup.etc_files {
            let to = dir.join("etc-upper").join(rel);
            fs::create_dir_all(to.parent().expect("a file under /etc")).unwrap();
            fs::copy(file, &to).unwrap_or_else(|e| panic!("copy {} to {rel}: {e}", file.display()));
        }
        let bin = dir.join("bin");
        fs::create_dir_all(&bin).unwrap();
        for name in setup.links {
            symlink(hook_binary(), bin.join(name)).unwrap();
        }
        let tag = format!("onh{}", std::process::id());
        let run_dirs_before = RUN_DIRS.iter().map(|d| Path::new(d).exists()).collect();

        // The holder: a private mount namespace with the overlay on /etc.
        let ready = dir.join("ready");
        const HOLD: &str =
            "mount -t overlay onh-etc -o lowerdir=/etc,upperdir=\"$1\",workdir=\"$2\" /etc \
             && { [ -z \"$4\" ] || { mkdir -p /etc/cdi && mount --bind \"$4\" /etc/cdi; }; } \
             && touch \"$3\" && exec sleep infinity";
        let (upper, work) = (
            path_str(&dir.join("etc-upper")),
            path_str(&dir.join("etc-work")),
        );
        let cdi = setup.cdi_dir.map(path_str).unwrap_or_default();
        let hold = [
            "sh",
            "-c",
            HOLD,
            "sh",
            &upper,
            &work,
            &path_str(&ready),
            &cdi,
        ];
        let mut holder = match setup.root {
            // The repository (simulated hosts, bundles, this binary) at its own path.
            Some(root) => root.command(&Entry::binding(&[repo()]), &hold),
            None => {
                let mut cmd = Command::new("unshare");
                cmd.args(["-m", "--propagation", "private"]).args(hold);
                cmd
            }
        };
        let holder = holder.stdin(Stdio::null()).spawn().expect("run unshare");
        let daemons = Daemons {
            dir: dir.to_path_buf(),
            tag,
            holder,
            containerd: None,
            dockerd: None,
            run_dirs_before,
            in_root: setup.root.is_some(),
        };
        daemons.wait_for(&ready, "the holder's /etc overlay");
        daemons
    }

    /// Starts containerd in their namespace on `config` (a path there) and
    /// waits for its socket.
    pub fn start_containerd(&mut self, config: &Path) {
        let log = self.dir.join("containerd.log");
        let containerd = self
            .in_namespace("containerd")
            .arg("--config")
            .arg(config)
            .stdout(log_file(&log))
            .stderr(log_file(&log))
            .spawn()
            .expect("start containerd");
        self.containerd = Some(containerd);
        self.wait_for(&self.containerd_socket(), "containerd's socket");
    }

    /// Stops containerd (its shims' cgroups go when the daemons are dropped).
    pub fn stop_containerd(&mut self) {
        if let Some(child) = self.containerd.take() {
            stop(child);
        }
        let _ = fs::remove_file(self.containerd_socket());
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

    /// What `path` (absolute, and through no absolute symlink: that would
    /// resolve against this host's root) is in the daemons' namespace, seen
    /// from this host.
    pub fn ns_path(&self, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{path}", self.holder.id()))
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

    /// `docker -H … ARGS`, bounded (the root's docker CLI when they run in one).
    pub fn docker(&self, args: &[&str]) -> Finished {
        let mut cmd = if self.in_root {
            self.in_namespace("docker")
        } else {
            Command::new("/usr/bin/docker")
        };
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

    /// `docker run --rm --network none -v OUT:/out ARGS IMAGE sh -c SCRIPT`
    /// as a [`Run`], where SCRIPT first makes decoy nodes for
    /// `decoy_minors` (Docker's default rules allow mknod, not opening)
    /// and then runs the checker and nvidia-smi; OUT is `<dir>/<name>/out`.
    pub fn checker_run(
        &self,
        name: &str,
        args: &[&str],
        image: &str,
        decoy_minors: &[u32],
        hook_log: &Path,
    ) -> Run {
        self.script_run(name, args, image, &checker_script(decoy_minors), hook_log)
    }

    /// `docker run --rm --network none -v OUT:/out ARGS IMAGE sh -c SCRIPT`
    /// as a [`Run`], for a test's own script; OUT is `<dir>/<name>/out`.
    pub fn script_run(
        &self,
        name: &str,
        args: &[&str],
        image: &str,
        script: &str,
        hook_log: &Path,
    ) -> Run {
        let out_dir = self.dir.join(name).join("out");
        fs::create_dir_all(&out_dir).unwrap();
        let _ = fs::remove_file(hook_log);
        let volume = format!("{}:/out", path_str(&out_dir));
        let mut argv: Vec<&str> = vec!["run", "--rm", "--network", "none", "-v", &volume];
        argv.extend_from_slice(args);
        argv.extend_from_slice(&[image, "/bin/sh", "-c", script]);
        let started = Instant::now();
        let finished = self.docker(&argv);
        let elapsed = started.elapsed();
        eprintln!("{name}: docker run took {} ms", elapsed.as_millis());
        collect_run(name, finished, elapsed, &out_dir, hook_log)
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

/// A daemon-run container's outcome as a [`Run`]: `out_dir` is
/// `<run>/out`, the checker's /out.
pub fn collect_run(
    name: &str,
    finished: Finished,
    elapsed: Duration,
    out_dir: &Path,
    hook_log: &Path,
) -> Run {
    let run_dir = out_dir.parent().expect("out/ has a parent");
    Run::collect(
        Runtime::RuncV1,
        name,
        finished,
        elapsed,
        RunFiles {
            bundle: run_dir,
            rootfs: run_dir,
            hook_log,
        },
    )
}

/// The container's script: decoy `/dev/nvidiaN` nodes for `decoy_minors`
/// (made without a device-cgroup rule), then the checker and nvidia-smi.
pub fn checker_script(decoy_minors: &[u32]) -> String {
    let mut script = String::new();
    for minor in decoy_minors {
        script.push_str(&format!(
            "mknod /dev/nvidia{minor} c {NVIDIA_MAJOR} {minor}; "
        ));
    }
    script.push_str(CONTAINER_SCRIPT);
    script
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

fn log_file(path: &Path) -> Stdio {
    fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open a daemon log")
        .into()
}

/// A TOML basic string for `path`.
fn toml(path: &Path) -> String {
    toml_string(&path_str(path))
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Our spec for `host`, as `cdi generate` writes it, in `dir`.
pub fn our_spec(host: &crate::simhost::SimHost, dir: &Path) -> PathBuf {
    let spec = dir.join("nvidia.yaml");
    fs::write(&spec, host.stdout(&["cdi", "generate", "--output", "-"])).unwrap();
    spec
}

/// dockerd (and its containerd) from `root` in `dir`, on `daemon_json`
/// as our `nvidia-ctk runtime configure --runtime=docker --cdi.enabled`
/// leaves it: [`docker_configured`] with CDI on.
pub fn docker_with_cdi(
    dir: &Path,
    hook_config: &Path,
    daemon_json: &Path,
    host: &crate::simhost::SimHost,
    root: &DebRoot,
) -> Daemons {
    docker_configured(
        dir,
        hook_config,
        daemon_json,
        host,
        root,
        &["--cdi.enabled"],
    )
}

/// dockerd (and its containerd) from `root` in `dir`, on `daemon_json` as
/// our `nvidia-ctk runtime configure --runtime=docker CONFIGURE` leaves it
/// (the wrapper registered as the `nvidia` runtime), that file copied to
/// `/etc/docker/daemon.json` in their namespace (where dockerd reads it,
/// and doctor looks), with our spec for `host` in their `/etc/cdi` and the
/// hook's links on dockerd's PATH.
pub fn docker_configured(
    dir: &Path,
    hook_config: &Path,
    daemon_json: &Path,
    host: &crate::simhost::SimHost,
    root: &DebRoot,
    configure: &[&str],
) -> Daemons {
    let spec = our_spec(host, dir);
    let daemons_dir = dir.join("daemons");
    let mut args = vec![
        "runtime".to_string(),
        "configure".into(),
        "--runtime=docker".into(),
        format!("--config={}", path_str(daemon_json)),
        format!(
            "--nvidia-runtime-path={}",
            path_str(&daemons_dir.join("bin/nvidia-container-runtime"))
        ),
    ];
    args.extend(configure.iter().map(|a| a.to_string()));
    nvidia_ctk(dir, &args.iter().map(String::as_str).collect::<Vec<_>>());
    Daemons::start(
        &daemons_dir,
        &DaemonSetup {
            hook_config,
            links: &["nvidia-container-runtime-hook", "nvidia-container-runtime"],
            runtimes: &[],
            default_runtime: None,
            docker_config: Some(Path::new("/etc/docker/daemon.json")),
            cdi_dir: None,
            etc_files: &[
                ("cdi/nvidia.yaml", &spec),
                ("docker/daemon.json", daemon_json),
            ],
            root: Some(root),
            cri: None,
        },
    )
}

/// `nvidia-ctk ARGS` (this binary through a link of that name in `dir`),
/// which must succeed; its stdout.
pub fn nvidia_ctk(dir: &Path, args: &[&str]) -> String {
    let link = dir.join("nvidia-ctk");
    let _ = fs::remove_file(&link);
    symlink(hook_binary(), &link).unwrap();
    let mut cmd = Command::new(&link);
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .args(args);
    let out = run_bounded(cmd, RUN_LIMIT);
    assert!(
        out.status.is_some_and(|s| s.success()),
        "nvidia-ctk {args:?} failed: {}{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

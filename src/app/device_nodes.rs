//! `nvidia-ctk system create-device-nodes`: the NVIDIA driver's control
//! device nodes (`nvidiactl`, `nvidia-modeset`, `nvidia-uvm`,
//! `nvidia-uvm-tools`) made under a dev root, as the GPU Operator's MIG
//! manager asks before it writes a spec. Their names and numbers are the
//! ones discovery checks every node against ([`nodes::inspect`]), their
//! majors read from `/proc/devices`. A node already there with its numbers
//! is kept; anything else at its name is refused, never replaced. Kernel
//! modules are loaded only by the host's own `nvidia-modprobe`, never by a
//! program found elsewhere.

use std::ffi::OsStr;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::fcntl::{open, OFlag};
use nix::sys::stat::Mode;

use super::{Error, Result};
use crate::config::Config;
use crate::host::driver::nodes::{self, Node, NodeProblem, NodeRole, NodeState};
use crate::host::driver::proc;
use crate::sys::node::{char_device_at, Made};

/// The driver's own module loader, at the path its packages install it.
pub const NVIDIA_MODPROBE: &str = "/usr/bin/nvidia-modprobe";
/// The permission bits NVIDIA's tools give the nodes they make.
pub const NODE_MODE: u32 = 0o666;
/// `nvidia-modprobe`'s arguments loading `nvidia`, `nvidia-uvm` and
/// `nvidia-modeset`, in that order (each needs the one before).
const MODPROBE_ARGS: [&[&str]; 3] = [&[], &["-u"], &["-m"]];
/// The names `/proc/devices` gives the GPU driver's major: `nvidia` since
/// driver 550, `nvidia-frontend` before.
const GPU_MAJOR_NAMES: [&str; 2] = ["nvidia", "nvidia-frontend"];

/// What `create-device-nodes` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceNodes {
    /// Where `dev/` is: the config's dev root unless given.
    pub dev_root: Option<PathBuf>,
    /// Make the control nodes.
    pub control: bool,
    /// Load the kernel modules first, with the host's `nvidia-modprobe`.
    pub load_modules: bool,
    /// Print what would be done instead of doing it.
    pub dry_run: bool,
}

/// The calls on the host that making nodes needs: the real ones, or a
/// test's recorder.
pub trait HostCalls {
    /// Makes character device `major`:`minor` named `name` in `dir` with
    /// `mode`, or accepts the same device already there.
    fn mknod(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        mode: u32,
        major: u32,
        minor: u32,
    ) -> io::Result<Made>;
    /// Runs `program` with `args`; what went wrong when it did not exit 0.
    fn run(&self, program: &Path, args: &[&str]) -> std::result::Result<(), String>;
}

/// The host's own calls.
#[derive(Debug, Default)]
pub struct LinuxCalls;

impl HostCalls for LinuxCalls {
    fn mknod(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        mode: u32,
        major: u32,
        minor: u32,
    ) -> io::Result<Made> {
        char_device_at(dir, name, mode, major, minor)
    }

    fn run(&self, program: &Path, args: &[&str]) -> std::result::Result<(), String> {
        // Its own environment, not the caller's: it is set-user-ID root
        // on most hosts and needs nothing from ours.
        let out = Command::new(program)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            return Ok(());
        }
        let said = String::from_utf8_lossy(&out.stderr);
        let said = said.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        Err(format!("{}: {}", out.status, said.trim())
            .trim_end_matches([':', ' '])
            .to_string())
    }
}

/// What is done at one control node's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing there: make it.
    Make(Node),
    /// The node is there with its numbers: keep it.
    Keep(Node),
}

/// The steps for the control nodes among `inspected` (as
/// [`nodes::inspect`] judged them), or why none may be taken: a major
/// `/proc/devices` (at `devices`) lacks, or something else at a node's name.
pub fn steps(inspected: &[Node], has_gpu_major: bool, devices: &Path) -> Result<Vec<Step>> {
    if !has_gpu_major {
        return Err(Error::NoDeviceMajor {
            path: devices.to_path_buf(),
            name: GPU_MAJOR_NAMES[0],
        });
    }
    let mut steps = Vec::new();
    for node in inspected.iter().filter(|n| is_control(n.role)) {
        steps.push(match &node.state {
            NodeState::Ok { .. } => Step::Keep(node.clone()),
            NodeState::Missing => Step::Make(node.clone()),
            NodeState::Wrong(NodeProblem::NoMajor) => {
                return Err(Error::NoDeviceMajor {
                    path: devices.to_path_buf(),
                    name: "nvidia-uvm",
                })
            }
            NodeState::Wrong(problem) => {
                return Err(Error::NodeInTheWay {
                    path: node.host_path.clone(),
                    problem: problem.clone(),
                })
            }
        });
    }
    Ok(steps)
}

/// Whether a node of `role` is one of the control nodes made here.
fn is_control(role: NodeRole) -> bool {
    match role {
        NodeRole::Control | NodeRole::Modeset | NodeRole::Uvm | NodeRole::UvmTools => true,
        NodeRole::Gpu
        | NodeRole::Capability
        | NodeRole::ImexChannel
        | NodeRole::DrmCard
        | NodeRole::DrmRender
        | NodeRole::Dxg
        | NodeRole::Listed
        | NodeRole::Gated(_) => false,
    }
}

/// Loads the modules when asked, then makes the control nodes when asked,
/// under the dev root `asked` names (the config's otherwise), printing what
/// a dry run would do.
pub fn create_device_nodes(
    config: &Config,
    asked: &DeviceNodes,
    host: &impl HostCalls,
    out: &mut impl Write,
) -> Result<()> {
    if asked.load_modules {
        for args in MODPROBE_ARGS {
            let line = [NVIDIA_MODPROBE]
                .iter()
                .chain(args)
                .copied()
                .collect::<Vec<_>>();
            if asked.dry_run {
                writeln!(out, "{}", line.join(" "))?;
                continue;
            }
            host.run(Path::new(NVIDIA_MODPROBE), args)
                .map_err(|reason| Error::Modprobe {
                    command: line.join(" "),
                    reason,
                })?;
        }
    }
    if !asked.control {
        return Ok(());
    }
    let dev_root = asked.dev_root.as_ref().unwrap_or(&config.driver.dev_root);
    let devices = config.driver.proc_root.join("devices");
    let majors = proc::parse_char_majors(&devices, &proc::read_text(&devices)?)?;
    let has_gpu_major = GPU_MAJOR_NAMES.iter().any(|n| majors.contains_key(*n));
    let inspected = nodes::inspect(dev_root, &[], &majors);
    let steps = steps(&inspected, has_gpu_major, &devices)?;
    let dev = dev_root.join("dev");
    if asked.dry_run {
        for step in &steps {
            if let Step::Make(node) = step {
                writeln!(
                    out,
                    "mknod --mode={NODE_MODE:04o} {} c {} {}",
                    node.host_path.display(),
                    node.major,
                    node.minor
                )?;
            }
        }
        return Ok(());
    }
    let dir = open(
        dev.as_path(),
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| Error::DevDir {
        path: dev.clone(),
        source: errno.into(),
    })?;
    for step in &steps {
        let node = match step {
            Step::Keep(node) => {
                log::info!("{} exists", node.host_path.display());
                continue;
            }
            Step::Make(node) => node,
        };
        let name = node
            .host_path
            .strip_prefix(&dev)
            .map_err(|_| Error::DevDir {
                path: node.host_path.clone(),
                source: io::Error::other("not directly below the dev root's dev/"),
            })?;
        let failed = |source| Error::Mknod {
            path: node.host_path.clone(),
            major: node.major,
            minor: node.minor,
            source,
        };
        match host
            .mknod(
                dir.as_fd(),
                name.as_os_str(),
                NODE_MODE,
                node.major,
                node.minor,
            )
            .map_err(failed)?
        {
            Made::Created => log::info!(
                "created {} (c {}:{}, mode {NODE_MODE:04o})",
                node.host_path.display(),
                node.major,
                node.minor
            ),
            // Made by the driver since it was looked at.
            Made::Existed => log::info!("{} exists", node.host_path.display()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::fs;

    use super::*;

    const DEVICES: &str = "Character devices:\n  1 mem\n195 nvidia\n195 nvidia-modeset\n507 nvidia-uvm\n\nBlock devices:\n  7 loop\n";

    /// Records each call; its `mknod` leaves an empty file at the name
    /// (no character device can be made unprivileged), and its `run`
    /// writes `loaded` as `/proc/devices`, as loading the modules would.
    #[derive(Default)]
    struct FakeCalls {
        mknods: RefCell<Vec<(String, u32, u32, u32)>>,
        runs: RefCell<Vec<String>>,
        loaded: Option<(PathBuf, &'static str)>,
        run_fails: bool,
    }

    impl HostCalls for FakeCalls {
        fn mknod(
            &self,
            dir: BorrowedFd<'_>,
            name: &OsStr,
            mode: u32,
            major: u32,
            minor: u32,
        ) -> io::Result<Made> {
            self.mknods.borrow_mut().push((
                name.to_string_lossy().into_owned(),
                mode,
                major,
                minor,
            ));
            nix::fcntl::openat(
                dir,
                name,
                OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(mode),
            )?;
            Ok(Made::Created)
        }

        fn run(&self, program: &Path, args: &[&str]) -> std::result::Result<(), String> {
            let line = [program.to_str().unwrap_or("?")]
                .iter()
                .chain(args)
                .copied()
                .collect::<Vec<_>>()
                .join(" ");
            self.runs.borrow_mut().push(line);
            if self.run_fails {
                return Err("exit status: 1: could not load".into());
            }
            if let Some((path, text)) = &self.loaded {
                fs::write(path, text).map_err(|e| e.to_string())?;
            }
            Ok(())
        }
    }

    /// A config whose procfs and dev root are in `dir`, `/proc/devices`
    /// holding `devices`.
    fn host(dir: &Path, devices: &str) -> Config {
        fs::create_dir_all(dir.join("proc")).unwrap();
        fs::create_dir_all(dir.join("root/dev")).unwrap();
        fs::write(dir.join("proc/devices"), devices).unwrap();
        let mut config = Config::default();
        config.driver.proc_root = dir.join("proc");
        config.driver.dev_root = dir.join("root");
        config
    }

    fn asked(control: bool, load_modules: bool, dry_run: bool) -> DeviceNodes {
        DeviceNodes {
            dev_root: None,
            control,
            load_modules,
            dry_run,
        }
    }

    #[test]
    fn makes_the_four_control_nodes_with_nvidias_numbers_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let config = host(dir.path(), DEVICES);
        let calls = FakeCalls::default();
        let mut out = Vec::new();
        create_device_nodes(&config, &asked(true, false, false), &calls, &mut out).unwrap();
        assert_eq!(
            *calls.mknods.borrow(),
            [
                ("nvidiactl".into(), 0o666, 195, 255),
                ("nvidia-modeset".into(), 0o666, 195, 254),
                ("nvidia-uvm".into(), 0o666, 507, 0),
                ("nvidia-uvm-tools".into(), 0o666, 507, 1),
            ]
        );
        assert!(calls.runs.borrow().is_empty(), "no module loaded unasked");
        assert!(out.is_empty());
    }

    #[test]
    fn the_dev_root_given_wins_over_the_configs() {
        let dir = tempfile::tempdir().unwrap();
        let config = host(dir.path(), DEVICES);
        fs::create_dir_all(dir.path().join("other/dev")).unwrap();
        let calls = FakeCalls::default();
        let mut ask = asked(true, false, false);
        ask.dev_root = Some(dir.path().join("other"));
        create_device_nodes(&config, &ask, &calls, &mut Vec::new()).unwrap();
        assert!(dir.path().join("other/dev/nvidiactl").exists());
        assert!(!dir.path().join("root/dev/nvidiactl").exists());
    }

    #[test]
    fn a_dry_run_prints_the_mknods_and_modprobes_and_does_neither() {
        let dir = tempfile::tempdir().unwrap();
        let config = host(dir.path(), DEVICES);
        let calls = FakeCalls::default();
        let mut out = Vec::new();
        create_device_nodes(&config, &asked(true, true, true), &calls, &mut out).unwrap();
        let dev = dir.path().join("root/dev");
        let dev = dev.display();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(
                "/usr/bin/nvidia-modprobe\n/usr/bin/nvidia-modprobe -u\n/usr/bin/nvidia-modprobe -m\n\
                 mknod --mode=0666 {dev}/nvidiactl c 195 255\n\
                 mknod --mode=0666 {dev}/nvidia-modeset c 195 254\n\
                 mknod --mode=0666 {dev}/nvidia-uvm c 507 0\n\
                 mknod --mode=0666 {dev}/nvidia-uvm-tools c 507 1\n"
            )
        );
        assert!(calls.mknods.borrow().is_empty() && calls.runs.borrow().is_empty());
    }

    #[test]
    fn modules_are_loaded_by_the_hosts_nvidia_modprobe_before_the_majors_are_read() {
        let dir = tempfile::tempdir().unwrap();
        // Before: no driver in /proc/devices; nvidia-modprobe loads it.
        let config = host(dir.path(), "Character devices:\n  1 mem\n");
        let calls = FakeCalls {
            loaded: Some((dir.path().join("proc/devices"), DEVICES)),
            ..FakeCalls::default()
        };
        create_device_nodes(&config, &asked(true, true, false), &calls, &mut Vec::new()).unwrap();
        assert_eq!(
            *calls.runs.borrow(),
            [
                "/usr/bin/nvidia-modprobe",
                "/usr/bin/nvidia-modprobe -u",
                "/usr/bin/nvidia-modprobe -m"
            ]
        );
        assert_eq!(calls.mknods.borrow().len(), 4);
    }

    #[test]
    fn a_failing_nvidia_modprobe_is_one_line_and_nothing_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let config = host(dir.path(), DEVICES);
        let calls = FakeCalls {
            run_fails: true,
            ..FakeCalls::default()
        };
        let e = create_device_nodes(&config, &asked(true, true, false), &calls, &mut Vec::new())
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "/usr/bin/nvidia-modprobe failed: exit status: 1: could not load"
        );
        assert!(calls.mknods.borrow().is_empty());
    }

    #[test]
    fn without_the_drivers_majors_nothing_is_made_and_the_module_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let calls = FakeCalls::default();
        let config = host(dir.path(), "Character devices:\n  1 mem\n");
        let e = create_device_nodes(&config, &asked(true, false, false), &calls, &mut Vec::new())
            .unwrap_err();
        assert!(e.to_string().contains("lists no nvidia major"), "{e}");
        let config = host(dir.path(), "Character devices:\n195 nvidia-frontend\n");
        let e = create_device_nodes(&config, &asked(true, false, false), &calls, &mut Vec::new())
            .unwrap_err();
        assert!(e.to_string().contains("lists no nvidia-uvm major"), "{e}");
        assert!(calls.mknods.borrow().is_empty(), "refused before any mknod");
    }

    #[test]
    fn something_else_at_a_nodes_name_is_refused_before_anything_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let config = host(dir.path(), DEVICES);
        fs::write(dir.path().join("root/dev/nvidia-uvm-tools"), b"").unwrap();
        let calls = FakeCalls::default();
        let e = create_device_nodes(&config, &asked(true, false, false), &calls, &mut Vec::new())
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "refusing to replace {}: it is a regular file, not a character device; \
                 remove it to have it made",
                dir.path().join("root/dev/nvidia-uvm-tools").display()
            )
        );
        assert!(calls.mknods.borrow().is_empty());
    }

    #[test]
    fn without_control_devices_only_the_modules_are_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let config = host(dir.path(), "not even /proc/devices");
        let calls = FakeCalls::default();
        create_device_nodes(&config, &asked(false, true, false), &calls, &mut Vec::new()).unwrap();
        assert_eq!(calls.runs.borrow().len(), 3);
        assert!(calls.mknods.borrow().is_empty());
    }

    #[test]
    fn nodes_with_their_numbers_are_kept() {
        let node = |role, name: &str, state| Node {
            role,
            path: PathBuf::from("/dev").join(name),
            host_path: PathBuf::from("/r/dev").join(name),
            major: 195,
            minor: 255,
            state,
        };
        let inspected = [
            node(
                NodeRole::Control,
                "nvidiactl",
                NodeState::Ok {
                    mode: 0o600,
                    gid: 0,
                },
            ),
            node(NodeRole::Gpu, "nvidia0", NodeState::Missing),
            node(NodeRole::Modeset, "nvidia-modeset", NodeState::Missing),
        ];
        let steps = steps(&inspected, true, Path::new("/proc/devices")).unwrap();
        assert_eq!(
            steps,
            [
                Step::Keep(inspected[0].clone()),
                Step::Make(inspected[2].clone())
            ],
            "GPU nodes are not control nodes"
        );
        let wrong = [node(
            NodeRole::Control,
            "nvidiactl",
            NodeState::Wrong(NodeProblem::Numbers {
                found_major: 1,
                found_minor: 3,
                major: 195,
                minor: 255,
            }),
        )];
        let e = super::steps(&wrong, true, Path::new("/proc/devices")).unwrap_err();
        assert!(
            e.to_string()
                .contains("is character device 1:3, expected 195:255"),
            "{e}"
        );
    }
}

//! Running the hook binary directly, without a runtime (hook_direct.rs,
//! hostile.rs): a process of our own in a private mount namespace stands in
//! for a container's init, and a plain directory is its rootfs. The
//! stand-in only sleeps; nothing from its rootfs is ever run.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::old_kernel::OldKernel;
use crate::project::hook_binary;

/// Runs `oci-nvidia-hook --config CONFIG ARGS` with `stdin`, and a cleared environment.
pub fn hook_with_stdin(config: &Path, args: &[&str], stdin: &[u8]) -> Output {
    hook_with_stdin_on(None, config, args, stdin)
}

/// [`hook_with_stdin`], on `kernel` where one is given.
pub fn hook_with_stdin_on(
    kernel: Option<OldKernel>,
    config: &Path,
    args: &[&str],
    stdin: &[u8],
) -> Output {
    let mut all = vec!["--config", config.to_str().expect("a UTF-8 config path")];
    all.extend(args);
    named_with_stdin_on(kernel, "oci-nvidia-hook", &all, stdin)
}

/// Runs the binary under the name `argv0` (`nvidia-cdi-hook`) with `args`,
/// `stdin`, and a cleared environment.
pub fn named_with_stdin(argv0: &str, args: &[&str], stdin: &[u8]) -> Output {
    named_with_stdin_on(None, argv0, args, stdin)
}

/// [`named_with_stdin`], on `kernel` where one is given (some system calls
/// failing with `ENOSYS`).
pub fn named_with_stdin_on(
    kernel: Option<OldKernel>,
    argv0: &str,
    args: &[&str],
    stdin: &[u8],
) -> Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(hook_binary());
    cmd.arg0(argv0)
        .env_clear()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(kernel) = kernel {
        crate::old_kernel::play(&mut cmd, kernel);
    }
    let mut child = cmd.spawn().expect("run oci-nvidia-hook");
    let mut input = child.stdin.take().unwrap();
    // The hook may stop reading early (too large): ignore a broken pipe.
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().unwrap()
}

/// The OCI state a runtime hands a prestart hook for container `pid`.
pub fn state(pid: u32, bundle: &Path) -> Vec<u8> {
    format!(
        r#"{{"ociVersion":"1.0.2","id":"direct","status":"creating","pid":{pid},"bundle":"{}"}}"#,
        bundle.display()
    )
    .into_bytes()
}

/// A process in its own private mount namespace, standing in for a container's init.
pub struct Namespaced {
    child: Child,
    cgroup: Option<PathBuf>,
}

impl Namespaced {
    /// Starts the stand-in and waits until it is in its own mount namespace.
    pub fn start() -> Namespaced {
        let child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sleep", "120"])
            .spawn()
            .expect("run unshare (util-linux)");
        let pid = child.id();
        let ours = fs::read_link("/proc/self/ns/mnt").unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while fs::read_link(format!("/proc/{pid}/ns/mnt")).is_ok_and(|ns| ns == ours) {
            assert!(
                Instant::now() < deadline,
                "unshare did not enter a new mount namespace"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // Give it a devices cgroup of its own, so the hook's grants touch nothing shared.
        let devices = Path::new("/sys/fs/cgroup/devices");
        let cgroup = devices.is_dir().then(|| {
            let dir = devices.join(format!("oci-nvidia-hook-test-{pid}"));
            fs::create_dir(&dir).unwrap();
            fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
            dir
        });
        Namespaced { child, cgroup }
    }

    /// The stand-in's pid, for the hook's state.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Namespaced {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.cgroup {
            let _ = fs::remove_dir(dir);
        }
    }
}

/// A bundle whose rootfs is a plain directory, with a `/proc/driver/nvidia` to mask.
pub fn bundle(dir: &Path, env: &[&str]) -> PathBuf {
    let bundle = dir.join("bundle");
    for sub in ["rootfs/etc", "rootfs/dev", "rootfs/proc/driver/nvidia"] {
        fs::create_dir_all(bundle.join(sub)).unwrap();
    }
    fs::write(bundle.join("rootfs/etc/debian_version"), "12.11\n").unwrap();
    let env: Vec<String> = env.iter().map(|e| format!("\"{e}\"")).collect();
    fs::write(
        bundle.join("config.json"),
        format!(
            r#"{{"ociVersion":"1.0.2","root":{{"path":"rootfs"}},"process":{{"cwd":"/","args":["sh"],"user":{{"uid":0,"gid":0}},"env":[{}]}},"linux":{{"namespaces":[{{"type":"mount"}}]}}}}"#,
            env.join(",")
        ),
    )
    .unwrap();
    bundle
}

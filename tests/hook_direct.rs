//! The hook binary run directly, without a runtime: its refusals on bad
//! input, and injection into a process of our own in a private mount
//! namespace, where the rootfs can carry a `/proc/driver/nvidia` directory
//! to mask (no runtime lets a container's procfs show one without a driver).

use std::fs;
use std::path::Path;
use std::process::Command;

use harness::direct::{bundle, hook_with_stdin, state, Namespaced};
use harness::project::hook_binary;
use harness::refusal::failure;
use harness::simhost::{Fixture, SimHost};

/// Starts a stand-in container, runs the hook on `bundle` for it and expects
/// success; returns the container to look inside.
fn inject(config: &Path, bundle: &Path) -> Namespaced {
    let container = Namespaced::start();
    let out = hook_with_stdin(config, &["prestart"], &state(container.pid(), bundle));
    assert!(
        out.status.success(),
        "hook failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    container
}

/// Runs `cmd` inside `container`'s mount namespace; returns its stdout and stderr.
fn exec_in(container: &Namespaced, cmd: &str) -> String {
    let out = Command::new("nsenter")
        .args([
            "-t",
            &container.pid().to_string(),
            "-m",
            "--",
            "sh",
            "-c",
            cmd,
        ])
        .output()
        .expect("run nsenter");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn masks_proc_driver_nvidia_with_only_the_selected_gpu() {
    let sim = SimHost::shared(Fixture::synthetic(2));
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundle(
        dir.path(),
        &[
            "NVIDIA_VISIBLE_DEVICES=1",
            "NVIDIA_DRIVER_CAPABILITIES=utility",
        ],
    );
    let container = inject(&sim.config, &bundle);

    let masked = bundle.join("rootfs/proc/driver/nvidia");
    let m = masked.display();
    let bus = sim.facts.gpus[1].bus.as_str();
    let other = sim.facts.gpus[0].bus.as_str();
    let seen = exec_in(&container, &format!(
        "grep ' {m} ' /proc/self/mountinfo; cat {m}/params; echo; ls {m}/gpus; cat {m}/gpus/{bus}/information; \
         touch {m}/x 2>&1; echo x > {m}/gpus/{bus}/information 2>&1"
    ));
    assert!(
        seen.contains(" tmpfs ") && seen.contains(" ro,"),
        "a read-only tmpfs: {seen}"
    );
    assert!(
        seen.contains("ModifyDeviceFiles: 0") && !seen.contains("ModifyDeviceFiles: 1"),
        "{seen}"
    );
    assert!(
        seen.contains(bus) && !seen.contains(other),
        "only the selected GPU: {seen}"
    );
    assert!(seen.contains(&format!("Bus Location: \t {bus}")), "{seen}");
    assert_eq!(seen.matches("Read-only file system").count(), 2, "{seen}");
    // The host sees none of it: the mounts live in the container's namespace.
    assert_eq!(fs::read_dir(&masked).unwrap().count(), 0);
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains(&dir.path().display().to_string()),
        "{mountinfo}"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn mig_device_gets_its_access_files_in_the_masked_proc() {
    let sim = SimHost::shared(Fixture::synthetic(2).mig());
    let mig = &sim.facts.mig[1];
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundle(
        dir.path(),
        &[&format!("NVIDIA_VISIBLE_DEVICES={}", mig.uuid)],
    );
    let container = inject(&sim.config, &bundle);
    let masked = bundle.join("rootfs/proc/driver/nvidia");
    let gi = format!("capabilities/gpu{}/mig/gi{}", mig.gpu_minor, mig.gi);
    let seen = exec_in(
        &container,
        &format!(
            "cd {}; find capabilities -type f | sort; cat {gi}/access {gi}/ci{}/access",
            masked.display(),
            mig.ci
        ),
    );
    let expected_files = format!("{gi}/access\n{gi}/ci{}/access\n", mig.ci);
    assert!(
        seen.starts_with(&expected_files),
        "only this MIG device's files: {seen}"
    );
    assert!(
        seen.contains(&format!("DeviceFileMinor: {}", mig.gi_access_minor)),
        "{seen}"
    );
    assert!(
        seen.contains(&format!("DeviceFileMinor: {}", mig.ci_access_minor)),
        "{seen}"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn bind_mounts_are_read_only_and_exactly_the_host_files() {
    let sim = SimHost::shared(Fixture::synthetic(2));
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundle(dir.path(), &["NVIDIA_VISIBLE_DEVICES=0"]);
    let container = inject(&sim.config, &bundle);
    let lib = bundle.join("rootfs/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03");
    let host_lib = sim.facts.libraries["libcuda.so.1"].as_str();
    let seen = exec_in(&container, &format!(
        "cmp {} {host_lib} && echo same; echo x >> {} 2>&1; stat -c '%t:%T %a' {}/rootfs/dev/nvidia{}",
        lib.display(),
        lib.display(),
        bundle.display(),
        sim.facts.gpus[0].minor
    ));
    assert!(seen.contains("same"), "{seen}");
    assert!(seen.contains("Read-only file system"), "{seen}");
    let minor = sim.facts.gpus[0].minor;
    assert!(
        seen.contains(&format!("c3:{minor:x} 666")),
        "node 195:{minor}, mode 666: {seen}"
    );
    // On the host the target is an empty file, not the library.
    assert_eq!(fs::metadata(&lib).unwrap().len(), 0);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn bad_input_is_one_clear_line_and_no_panic() {
    let sim = SimHost::shared(Fixture::synthetic(2));
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundle(dir.path(), &["NVIDIA_VISIBLE_DEVICES=0"]);
    let container = Namespaced::start();
    let good = state(container.pid(), &bundle);
    let chrooted = Chrooted::start(dir.path());
    let grandchild = Grandchild::start();
    let huge = vec![b' '; 20 * 1024 * 1024];
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty stdin", Vec::new(), "stdin is empty"),
        ("not JSON", b"hello".to_vec(), "not valid OCI state JSON"),
        (
            "truncated",
            good[..good.len() / 2].to_vec(),
            "not valid OCI state JSON",
        ),
        ("20 MB", huge, "exceeds 1048576 bytes"),
        ("no pid", br#"{"id":"x","bundle":"/b"}"#.to_vec(), "no pid"),
        (
            "dead pid",
            state(999_999_999, &bundle),
            "999999999 does not exist",
        ),
        (
            "missing bundle",
            state(container.pid(), Path::new("/nonexistent/bundle")),
            "/nonexistent/bundle/config.json",
        ),
        (
            "own mount namespace",
            state(std::process::id(), &bundle),
            "createContainer",
        ),
        (
            "a process that pivoted",
            state(chrooted.pid(), &bundle),
            "not a container being created",
        ),
        (
            "another runtime's process",
            state(grandchild.pid(), &bundle),
            "not the runtime running this hook",
        ),
    ];
    for (what, input, needle) in cases {
        let err = failure(hook_with_stdin(&sim.config, &["prestart"], &input), &[what]);
        assert!(err.contains(needle), "{what}: {err}");
    }
    // A bundle without root.path.
    fs::write(bundle.join("config.json"), r#"{"ociVersion":"1.0.2"}"#).unwrap();
    let err = failure(
        hook_with_stdin(&sim.config, &["prestart"], &good),
        &["no root"],
    );
    assert!(err.contains("root.path"), "{err}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn missing_driver_is_an_error_and_leaves_the_container_untouched() {
    let sim = SimHost::fresh("no-driver", Fixture::synthetic(1));
    fs::remove_file(sim.path("proc/driver/nvidia/version")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundle(dir.path(), &["NVIDIA_VISIBLE_DEVICES=all"]);
    let container = Namespaced::start();
    let err = failure(
        hook_with_stdin(&sim.config, &["prestart"], &state(container.pid(), &bundle)),
        &["no driver"],
    );
    assert!(err.contains("NVIDIA kernel module not loaded"), "{err}");
    assert!(
        !bundle.join("rootfs/usr").exists()
            && fs::read_dir(bundle.join("rootfs/dev")).unwrap().count() == 0
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn not_a_gpu_container_is_left_alone() {
    let sim = SimHost::shared(Fixture::synthetic(2));
    let dir = tempfile::tempdir().unwrap();
    let container = Namespaced::start();
    // Whatever its other NVIDIA_* variables say, even unprivileged (this
    // bundle has no CAP_SYS_ADMIN): NVIDIA's hook reads none of them for a
    // container that asks for no GPU (container_config.go getNvidiaConfig).
    for env in [
        &["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void"][..],
        &["NVIDIA_VISIBLE_DEVICES=,"],
        &["NVIDIA_VISIBLE_DEVICES=0,void"],
        &["NVIDIA_DRIVER_CAPABILITIES=bogus"],
        &[
            "NVIDIA_MIG_CONFIG_DEVICES=all",
            "NVIDIA_MIG_MONITOR_DEVICES=junk",
        ],
        &["NVIDIA_VISIBLE_DEVICES=", "NVIDIA_REQUIRE_CUDA=cuda>>=99"],
    ] {
        let bundle = bundle(dir.path(), env);
        let out = hook_with_stdin(&sim.config, &["prestart"], &state(container.pid(), &bundle));
        assert!(
            out.status.success(),
            "{env:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!bundle.join("rootfs/usr").exists(), "{env:?}");
    }
}

#[test]
fn other_stages_are_refused() {
    for stage in ["createContainer", "startContainer", "poststart", "poststop"] {
        let out = hook_with_stdin(Path::new("/nonexistent.toml"), &[stage], b"");
        // The config is not even read: the stage is refused first.
        let out = if out.status.success() {
            panic!("{stage} accepted")
        } else {
            out
        };
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("/nonexistent.toml") || err.contains(stage),
            "{stage}: {err}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    fs::write(&config, "").unwrap();
    let err = failure(
        hook_with_stdin(&config, &["createContainer"], b""),
        &["createContainer"],
    );
    assert!(
        err.contains("\"createContainer\"") && err.contains("prestart or createRuntime"),
        "{err}"
    );
}

/// A process in its own mount namespace whose root is a directory of ours,
/// like a container that has already pivoted.
struct Chrooted(std::process::Child);

impl Chrooted {
    fn start(dir: &Path) -> Chrooted {
        let root = dir.join("chroot");
        fs::create_dir_all(&root).unwrap();
        fs::copy("/bin/busybox", root.join("busybox"))
            .expect("busybox-static (integration/install-deps)");
        let child = std::process::Command::new("unshare")
            .args(["-m", "--propagation", "private", "chroot"])
            .arg(&root)
            .args(["/busybox", "sleep", "120"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while fs::read_link(format!("/proc/{pid}/root")).is_ok_and(|r| r == Path::new("/")) {
            assert!(
                std::time::Instant::now() < deadline,
                "chroot did not happen"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Chrooted(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Chrooted {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A process in its own mount namespace, not pivoted, but started by another
/// process than the one running the hook: not the container being created.
struct Grandchild(std::process::Child, u32);

impl Grandchild {
    fn start() -> Grandchild {
        let mut shell = std::process::Command::new("sh")
            .args([
                "-c",
                "unshare -m --propagation private sleep 120 & echo $!; wait",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(shell.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let pid: u32 = line.trim().parse().unwrap();
        let ours = fs::read_link("/proc/self/ns/mnt").unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while fs::read_link(format!("/proc/{pid}/ns/mnt")).is_ok_and(|ns| ns == ours) {
            assert!(
                std::time::Instant::now() < deadline,
                "unshare did not happen"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Grandchild(shell, pid)
    }

    fn pid(&self) -> u32 {
        self.1
    }
}

impl Drop for Grandchild {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.1 as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A process in its own mount namespace, not pivoted, whose parent is pid 1:
/// how a service with a private mount namespace (systemd's `PrivateTmp`)
/// looks. `setsid -f` orphans it; it is killed when dropped.
struct Orphan(u32);

impl Orphan {
    fn start() -> Orphan {
        // The shell prints its pid, then becomes unshare, then sleep; stdout
        // is closed at that exec, so `output` returns once setsid has exited.
        let out = std::process::Command::new("setsid")
            .args(["-f", "sh", "-c"])
            .arg("echo $$; exec unshare -m sleep 30 >/dev/null 2>&1")
            .output()
            .expect("run setsid (util-linux)");
        assert!(out.status.success(), "setsid -f failed: {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let orphan = Orphan(stdout.trim().parse().expect("the orphan's pid"));
        let pid = orphan.0;
        let ours = fs::read_link("/proc/self/ns/mnt").unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c != "sleep\n")
            || fs::read_link(format!("/proc/{pid}/ns/mnt")).is_ok_and(|ns| ns == ours)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "unshare -m sleep did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let parent = stat.rsplit_once(')').unwrap().1.split_whitespace().nth(1);
        assert_eq!(
            parent,
            Some("1"),
            "the orphan must be pid 1's child (is a child subreaper above this test?): {stat}"
        );
        orphan
    }

    fn pid(&self) -> u32 {
        self.0
    }
}

impl Drop for Orphan {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0 as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn an_orphan_of_pid_1_is_not_the_container_being_created() {
    let sim = SimHost::shared(Fixture::synthetic(2));
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundle(dir.path(), &["NVIDIA_VISIBLE_DEVICES=0"]);
    let orphan = Orphan::start();
    let ns_before = fs::read_link(format!("/proc/{}/ns/mnt", orphan.pid())).unwrap();

    let out = hook_with_stdin(&sim.config, &["prestart"], &state(orphan.pid(), &bundle));

    let err = failure(out, &["an orphan of pid 1"]);
    assert!(
        err.contains(&format!(
            "process {} is not the container being created",
            orphan.pid()
        )) && err.contains("its parent 1 is not the runtime running this hook"),
        "{err}"
    );
    // Refused before anything changed: nothing injected, the orphan untouched.
    assert!(!bundle.join("rootfs/usr").exists());
    assert_eq!(
        fs::read_link(format!("/proc/{}/ns/mnt", orphan.pid())).unwrap(),
        ns_before
    );
}

/// Runs `wrapper` (argv) with the hook's own command line after it,
/// `prestart` with `config`, and `state` on its stdin, as a runtime that
/// starts its hooks through a wrapper would.
fn hook_through(wrapper: &[&str], config: &Path, state: &[u8]) -> std::process::Output {
    let mut child = std::process::Command::new(wrapper[0])
        .args(&wrapper[1..])
        .arg(hook_binary())
        .arg("--config")
        .arg(config)
        .arg("prestart")
        .env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the wrapped hook");
    let mut stdin = child.stdin.take().expect("the hook's stdin");
    std::io::Write::write_all(&mut stdin, state).expect("write the state");
    drop(stdin);
    child.wait_with_output().expect("wait for the hook")
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_forking_wrapper_between_the_runtime_and_the_hook_is_accepted() {
    let sim = SimHost::shared(Fixture::synthetic(2));
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundle(dir.path(), &["NVIDIA_VISIBLE_DEVICES=0"]);
    let container = Namespaced::start();

    // The shell forks the hook (a command follows it), so the hook's parent
    // is the wrapper, and the wrapper's the process that started the container.
    let out = hook_through(
        &["sh", "-c", "\"$0\" \"$@\"; exit $?"],
        &sim.config,
        &state(container.pid(), &bundle),
    );

    assert!(
        out.status.success(),
        "hook failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = exec_in(
        &container,
        &format!("ls {}", bundle.join("rootfs/dev").display()),
    );
    assert!(seen.contains("nvidiactl"), "injected: {seen}");
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn unwritable_device_cgroup_is_a_clear_error() {
    let sim = SimHost::shared(Fixture::synthetic(2));
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundle(dir.path(), &["NVIDIA_VISIBLE_DEVICES=0"]);
    let container = Namespaced::start();
    assert!(
        Path::new("/sys/fs/cgroup/devices").is_dir(),
        "this test needs the v1 devices hierarchy"
    );
    // The hook runs where the devices hierarchy is mounted read-only.
    let out = hook_through(
        &[
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount -o remount,bind,ro /sys/fs/cgroup/devices && exec \"$0\" \"$@\"",
        ],
        &sim.config,
        &state(container.pid(), &bundle),
    );
    let err = failure(out, &["read-only devices cgroup"]);
    assert!(
        err.contains("devices.allow") && err.contains("oci-nvidia-hook-test-"),
        "{err}"
    );
    // Nothing was injected: the cgroup step comes before the container is touched.
    assert!(!bundle.join("rootfs/usr").exists());
}

/// Docker runs the hook twice for a repeated `--gpus`, in the same
/// container: the second run finds the first's mounts, nodes, links, cache
/// and mask, stacks nothing and succeeds.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_second_run_for_the_same_container_stacks_nothing() {
    let sim = SimHost::shared(Fixture::synthetic(2));
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundle(
        dir.path(),
        &[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_DRIVER_CAPABILITIES=utility,compute",
        ],
    );
    let container = inject(&sim.config, &bundle);
    let mounts = |c: &Namespaced| {
        let mut lines: Vec<String> = exec_in(c, "cat /proc/self/mountinfo")
            .lines()
            .map(|l| l.split(' ').skip(4).collect::<Vec<_>>().join(" "))
            .collect();
        lines.sort();
        lines
    };
    let first = mounts(&container);
    let rootfs = fs::canonicalize(bundle.join("rootfs")).unwrap();
    let ours = first
        .iter()
        .filter(|l| l.starts_with(&rootfs.display().to_string()))
        .count();
    assert!(ours > 5, "the first run mounted: {first:#?}");
    let out = hook_with_stdin(&sim.config, &["prestart"], &state(container.pid(), &bundle));
    assert!(
        out.status.success(),
        "the second run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        mounts(&container),
        first,
        "the second run changed the mounts"
    );
}

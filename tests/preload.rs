//! The CVE-2025-23266 class: an image whose `ENV` sets `LD_PRELOAD`,
//! `LD_AUDIT`, `LD_LIBRARY_PATH` and `GCONV_PATH` to a library in the
//! image, the runtime handing that environment (and, at `createContainer`,
//! a working directory in the image) to a hook of ours. The library's
//! constructor appends to a marker file on the host and writes to stderr;
//! it must never run, for any entry point a runtime runs: the prestart
//! hook, our `cdi-hook` at createRuntime, `nvidia-cdi-hook` at
//! createContainer (a hook entry without `env`, as NVIDIA's specs write
//! it), and the runtime wrapper, through runc and crun.
//!
//! The binary under test is installed as `make install` installs it:
//! set-group-ID to an unprivileged group, which starts it in glibc's secure
//! mode (docs/design.md). Controls show the test can fail: the library
//! loads into a plain dynamically linked program given that environment,
//! and into a copy of our binary without the set-group-ID bit run by runc
//! at createContainer.
//!
//! Run as root: `make test`, or
//! `cargo test --features _test_as_root --test preload -- --nocapture`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use harness::project::hook_binary;
use harness::runtime::bundle::{hook_args, work_root, Bundle, Scenario};
use harness::runtime::oci_config::path_str;
use harness::runtime::run::serial;
use harness::runtime::runtimes::{require_tool, Runtime};
use harness::simhost::{Fixture, SimHost};

/// The library's constructor: proof on the host (the marker) and on stderr.
const EVIL_C: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void loaded(void) {
    const char *marker = MARKER;
    int fd = open(marker, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) { (void)!write(fd, "loaded\n", 7); close(fd); }
    fprintf(stderr, "EVIL LIBRARY LOADED\n");
}
unsigned int la_version(unsigned int v) { return v; }
"#;

/// The unprivileged group the installed binary is set-group-ID to (the Makefile's `SECURE_GROUP`).
const SECURE_GROUP: u32 = 65534;

/// The scratch directory, the library and the two copies of the binary.
struct Fixtures {
    dir: PathBuf,
    evil: PathBuf,
    marker: PathBuf,
    /// Installed as `make install` does: set-group-ID.
    installed: PathBuf,
    /// A plain copy: the control that the vector reaches a dynamic binary.
    plain: PathBuf,
}

impl Fixtures {
    fn build() -> Fixtures {
        require_tool("gcc");
        let dir = work_root().join("preload");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let marker = dir.join("MARKER");
        let source = dir.join("evil.c");
        std::fs::write(&source, EVIL_C).unwrap();
        let evil = dir.join("evil.so");
        let out = Command::new("gcc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&evil)
            .arg(format!("-DMARKER=\"{}\"", marker.display()))
            .arg(&source)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "gcc: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let copy = |name: &str| {
            let path = dir.join(name).join("oci-nvidia-hook");
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::copy(hook_binary(), &path).unwrap();
            path
        };
        let installed = copy("installed");
        std::os::unix::fs::chown(&installed, Some(0), Some(SECURE_GROUP)).unwrap();
        std::fs::set_permissions(&installed, std::fs::Permissions::from_mode(0o2755)).unwrap();
        let plain = copy("plain");
        for bin in [&installed, &plain] {
            for name in ["nvidia-cdi-hook", "nvidia-container-runtime"] {
                std::os::unix::fs::symlink("oci-nvidia-hook", bin.with_file_name(name)).unwrap();
            }
        }
        Fixtures {
            dir,
            evil,
            marker,
            installed,
            plain,
        }
    }

    /// How often the library was loaded so far.
    fn loads(&self) -> usize {
        std::fs::read_to_string(&self.marker)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }
}

/// The image's variables: the library in the image, reached through the
/// working directory (`/proc/self/cwd`, CVE-2025-23266's way) and through
/// the rootfs's host path, which a hook outside the container sees.
fn hostile_env(rootfs: &Path) -> Vec<(String, String)> {
    let root = rootfs.display();
    vec![
        (
            "LD_PRELOAD".into(),
            format!("/proc/self/cwd/evil.so:{root}/evil.so"),
        ),
        ("LD_AUDIT".into(), format!("{root}/evil.so")),
        (
            "LD_LIBRARY_PATH".into(),
            format!("/proc/self/cwd/lib:{root}/lib"),
        ),
        ("GCONV_PATH".into(), format!("{root}/gconv")),
    ]
}

/// Where our binary runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    Prestart,
    CdiHook,
    NvidiaCdiHook,
}

/// Runs a container whose one hook is `entry` of `binary` through
/// `runtime`, the image carrying the hostile environment; returns whether
/// the runtime succeeded and its stderr.
fn run_hooked(
    fx: &Fixtures,
    runtime: Runtime,
    entry: Entry,
    binary: &Path,
    name: &str,
) -> (bool, String) {
    runtime.require_tools();
    let _serial = serial();
    let host = SimHost::shared(Fixture::synthetic(1));
    let evil = fx.evil.clone();
    let prepare = move |root: &Path| {
        std::fs::copy(&evil, root.join("evil.so")).unwrap();
        std::fs::create_dir_all(root.join("lib")).unwrap();
        std::fs::copy(&evil, root.join("lib/libdl.so.2")).unwrap();
    };
    let scenario = Scenario::hooks_only(name, runtime, &host, &prepare);
    let bundle = Bundle::exiting(&scenario);
    let env = hostile_env(&bundle.rootfs());
    let env_strings: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let hook_config = bundle.dir.join("hook-config.toml");
    let (stage, hook) = match entry {
        // A runtime that hands the hook the image's environment: the worst case.
        Entry::Prestart => {
            let mut args = hook_args(&hook_config);
            args[0] = "oci-nvidia-hook".into();
            (
                "prestart",
                serde_json::json!({"path": path_str(binary), "args": args, "env": env_strings}),
            )
        }
        Entry::CdiHook => (
            "createRuntime",
            serde_json::json!({
                "path": path_str(binary),
                "args": ["oci-nvidia-hook", "--config", path_str(&hook_config), "cdi-hook",
                         "createRuntime", "--driver-version", host.facts.driver_version,
                         "--capabilities", "utility", "--layout", "debian"],
                "env": env_strings,
            }),
        ),
        // As NVIDIA's specs write it: no `env`, so runc hands it the container's.
        Entry::NvidiaCdiHook => (
            "createContainer",
            serde_json::json!({
                "path": path_str(&binary.with_file_name("nvidia-cdi-hook")),
                "args": ["nvidia-cdi-hook", "chmod", "--mode", "755", "--path", "/tmp"],
            }),
        ),
    };
    let id = format!("onh-preload-{name}-{}", std::process::id());
    let started = Instant::now();
    let (ok, stderr) = bundle.run_with_hooks(
        &scenario,
        &id,
        serde_json::json!({ stage: [hook] }),
        |config| {
            config["process"]["env"]
                .as_array_mut()
                .unwrap()
                .extend(env_strings.iter().cloned().map(serde_json::Value::from));
        },
    );
    eprintln!(
        "{name}: ok {ok} in {} ms: {stderr}",
        started.elapsed().as_millis()
    );
    (ok, stderr)
}

/// The library does load into a plain dynamically linked program given the
/// hostile environment and working directory: the vector is real.
fn assert_control_loads(fx: &Fixtures) {
    let rootfs = fx.dir.join("control-root");
    std::fs::create_dir_all(rootfs.join("lib")).unwrap();
    std::fs::copy(&fx.evil, rootfs.join("evil.so")).unwrap();
    let before = fx.loads();
    let out = Command::new("/bin/true")
        .env_clear()
        .envs(hostile_env(&rootfs))
        .current_dir(&rootfs)
        .output()
        .unwrap();
    assert!(
        fx.loads() > before && String::from_utf8_lossy(&out.stderr).contains("EVIL LIBRARY"),
        "control: the library did not load into /bin/true: the test could not fail"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn no_image_library_loads_into_any_entry_point() {
    let fx = Fixtures::build();
    assert_control_loads(&fx);

    // Control: runc hands a createContainer hook without `env` the image's
    // environment, and a plain dynamic copy of our binary loads it.
    let before = fx.loads();
    let (_, stderr) = run_hooked(
        &fx,
        Runtime::RuncV1,
        Entry::NvidiaCdiHook,
        &fx.plain,
        "control-runc",
    );
    assert!(
        fx.loads() > before,
        "control: runc's createContainer hook did not load the image's library into a \
         plain copy of the binary, so this test could not fail: {stderr}"
    );

    for runtime in [Runtime::RuncV1, Runtime::CrunV1] {
        for entry in [Entry::Prestart, Entry::CdiHook, Entry::NvidiaCdiHook] {
            let name = format!("{}-{entry:?}", runtime.name()).to_lowercase();
            let before = fx.loads();
            let (ok, stderr) = run_hooked(&fx, runtime, entry, &fx.installed, &name);
            assert_eq!(
                fx.loads(),
                before,
                "{name}: the image's library loaded into the installed binary: {stderr}"
            );
            assert!(!stderr.contains("EVIL LIBRARY"), "{name}: {stderr}");
            // It ran: the container started, or our line says why not.
            assert!(ok || stderr.contains("oci-nvidia-hook"), "{name}: {stderr}");
            if entry == Entry::NvidiaCdiHook {
                assert!(ok, "{name}: nvidia-cdi-hook chmod failed: {stderr}");
            }
        }
    }

    // The runtime wrapper, started by an engine with the hostile
    // environment and the image as its working directory.
    let rootfs = fx.dir.join("control-root");
    let before = fx.loads();
    let out = Command::new(fx.installed.with_file_name("nvidia-container-runtime"))
        .arg("--version")
        .env_clear()
        .envs(hostile_env(&rootfs))
        .current_dir(&rootfs)
        .output()
        .unwrap();
    assert_eq!(
        fx.loads(),
        before,
        "the runtime wrapper loaded the library: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&fx.dir);
}

//! The CVE-2025-23266 class, as tests/preload.rs and tests/packaging run
//! it against the shipped static binary: a library in the image that
//! `LD_PRELOAD`, `LD_AUDIT`, `LD_LIBRARY_PATH` and `GCONV_PATH` point at
//! (directly and through `/proc/self/cwd`), whose constructor appends to a
//! marker file on the host and writes to stderr; every entry point a
//! runtime runs started with that environment, and the marker counted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::runtime::bundle::{hook_args, work_root, Bundle, Scenario};
use crate::runtime::oci_config::path_str;
use crate::runtime::runtimes::{require_tool, Runtime};
use crate::simhost::{Fixture, SimHost};

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

/// Where a runtime runs our binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// `oci-nvidia-hook prestart`, handed the image's environment.
    Prestart,
    /// `oci-nvidia-hook cdi-hook createRuntime`, handed it too.
    CdiHook,
    /// `nvidia-cdi-hook chmod` at createContainer without `env`, as
    /// NVIDIA's specs write it: runc hands it the container's.
    NvidiaCdiHook,
}

/// The hook entry points, in the order they are tried.
pub const ENTRIES: [Entry; 3] = [Entry::Prestart, Entry::CdiHook, Entry::NvidiaCdiHook];

/// The image's library, built with gcc, and its marker.
pub struct EvilLibrary {
    /// The scratch directory holding both (removed by [`EvilLibrary::remove`]).
    pub dir: PathBuf,
    /// The shared library.
    pub library: PathBuf,
    marker: PathBuf,
}

impl EvilLibrary {
    /// Builds the library under the work root's `name` directory.
    pub fn build(name: &str) -> EvilLibrary {
        require_tool("gcc");
        let dir = work_root().join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let marker = dir.join("MARKER");
        let source = dir.join("evil.c");
        std::fs::write(&source, EVIL_C).unwrap();
        let library = dir.join("evil.so");
        let out = Command::new("gcc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&library)
            .arg(format!("-DMARKER=\"{}\"", marker.display()))
            .arg(&source)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "gcc: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        EvilLibrary {
            dir,
            library,
            marker,
        }
    }

    /// How often the library was loaded so far.
    pub fn loads(&self) -> usize {
        std::fs::read_to_string(&self.marker)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    /// Removes the scratch directory.
    pub fn remove(self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// The stand-in image root for the runtime wrapper's run: the library
    /// at its top and the hostile environment's target.
    fn control_root(&self) -> PathBuf {
        let rootfs = self.dir.join("control-root");
        std::fs::create_dir_all(rootfs.join("lib")).unwrap();
        std::fs::copy(&self.library, rootfs.join("evil.so")).unwrap();
        rootfs
    }

    /// The library does load into a plain dynamically linked program given
    /// the hostile environment and working directory: the vector is real.
    pub fn assert_control_loads(&self) {
        let rootfs = self.control_root();
        let before = self.loads();
        let out = Command::new("/bin/true")
            .env_clear()
            .envs(hostile_env(&rootfs))
            .current_dir(&rootfs)
            .output()
            .unwrap();
        assert!(
            self.loads() > before && String::from_utf8_lossy(&out.stderr).contains("EVIL LIBRARY"),
            "control: the library did not load into /bin/true: the test could not fail"
        );
    }

    /// Runs a container whose one hook is `entry` of `binary` (whose
    /// directory holds the `nvidia-cdi-hook` link) through `runtime`, the
    /// image carrying the hostile environment; returns whether the runtime
    /// succeeded and its stderr. The caller holds
    /// [`serial`](crate::runtime::run::serial) (a test of a suite that
    /// starts containers already does).
    pub fn run_hooked(
        &self,
        runtime: Runtime,
        entry: Entry,
        binary: &Path,
        name: &str,
    ) -> (bool, String) {
        runtime.require_tools();
        let host = SimHost::shared(Fixture::synthetic(1));
        let evil = self.library.clone();
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

    /// The library loads into none of `binary`'s entry points: each hook
    /// entry through each of `runtimes`, and the runtime wrapper (the
    /// `nvidia-container-runtime` link beside `binary`) started by an
    /// engine with the hostile environment and the image as its working
    /// directory. Each hook ran: the container started, or our line says
    /// why not; `nvidia-cdi-hook chmod` succeeded.
    pub fn assert_no_entry_point_loads(&self, binary: &Path, runtimes: &[Runtime], tag: &str) {
        for &runtime in runtimes {
            for entry in ENTRIES {
                let name = format!("{tag}-{}-{entry:?}", runtime.name()).to_lowercase();
                let before = self.loads();
                let (ok, stderr) = self.run_hooked(runtime, entry, binary, &name);
                assert_eq!(
                    self.loads(),
                    before,
                    "{name}: the image's library loaded into {}: {stderr}",
                    binary.display()
                );
                assert!(!stderr.contains("EVIL LIBRARY"), "{name}: {stderr}");
                assert!(ok || stderr.contains("oci-nvidia-hook"), "{name}: {stderr}");
                if entry == Entry::NvidiaCdiHook {
                    assert!(ok, "{name}: nvidia-cdi-hook chmod failed: {stderr}");
                }
            }
        }
        let rootfs = self.control_root();
        let before = self.loads();
        let out = Command::new(binary.with_file_name("nvidia-container-runtime"))
            .arg("--version")
            .env_clear()
            .envs(hostile_env(&rootfs))
            .current_dir(&rootfs)
            .output()
            .unwrap();
        assert_eq!(
            self.loads(),
            before,
            "the runtime wrapper beside {} loaded the library: {}",
            binary.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "the runtime wrapper's --version: {out:?}"
        );
    }
}

/// The image's variables: the library in the image, reached through the
/// working directory (`/proc/self/cwd`, CVE-2025-23266's way) and through
/// the rootfs's host path, which a hook outside the container sees.
pub fn hostile_env(rootfs: &Path) -> Vec<(String, String)> {
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

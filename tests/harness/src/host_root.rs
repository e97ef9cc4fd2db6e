//! A simulated host root for `doctor --host-root`: the engines' files
//! (hooks.d, CDI specs) and a procfs with the few processes doctor looks
//! for, built as real files beside a simulated GPU host. Each helper makes
//! one thing a real host has; the tests add one fault each.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use super::project::{hook_binary, repo};
use super::simhost::SimHost;

/// A host root next to a simulated GPU host.
#[derive(Debug, Clone)]
pub struct HostRoot {
    /// The tree doctor reads engines' files and processes from.
    pub dir: PathBuf,
    /// The GPU host (driver, dev and proc roots) its config points at.
    pub sim: SimHost,
}

/// Where Podman reads the hooks.d file the project ships.
pub const HOOKS_D: &str = "usr/share/containers/oci/hooks.d";

impl HostRoot {
    /// An empty host root `<sim>/hostroot-<name>`: several can share one
    /// simulated GPU host.
    pub fn empty(sim: SimHost, name: &str) -> HostRoot {
        let dir = sim.dir.join(format!("hostroot-{name}"));
        if dir.exists() {
            fs::remove_dir_all(&dir).expect("remove an old host root");
        }
        fs::create_dir_all(&dir).expect("create the host root");
        HostRoot { dir, sim }
    }

    /// A healthy host: our binary installed, the shipped hooks.d file
    /// pointing at it with the simulated host's config, nvidia-persistenced
    /// and a dockerd that finds our hook on its PATH.
    pub fn healthy(sim: SimHost, name: &str) -> HostRoot {
        let root = HostRoot::empty(sim, name);
        root.install_binary();
        root.install_hooks_d_file();
        root.process(77, "nvidia-persiste");
        root.dockerd(812, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin");
        root
    }

    /// A path inside the host root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel.trim_start_matches('/'))
    }

    /// `/usr/local/bin/oci-nvidia-hook`, a hard link to the binary under
    /// test (the same file, as `make install` makes a copy of it), and the
    /// compat link Docker's `--gpus` looks up.
    pub fn install_binary(&self) {
        let bin = self.path("usr/local/bin");
        fs::create_dir_all(&bin).unwrap();
        let installed = bin.join("oci-nvidia-hook");
        // A hard link is the very file (doctor knows it as itself); a copy
        // where the fixtures sit on another file system.
        if fs::hard_link(hook_binary(), &installed).is_err() {
            fs::copy(hook_binary(), &installed).expect("copy the binary into the host root");
        }
        symlink("oci-nvidia-hook", bin.join("nvidia-container-runtime-hook")).unwrap();
    }

    /// The project's hooks.d file, its args naming the simulated host's
    /// config. The config is linked at the same path inside the host root:
    /// doctor reads the hook's `--config` there, and runc's hook on this
    /// machine reads it at the real path.
    pub fn install_hooks_d_file(&self) {
        let shipped: Value =
            serde_json::from_slice(&fs::read(repo().join("hooks.d/oci-nvidia-hook.json")).unwrap())
                .unwrap();
        let config = self.sim.config.to_str().unwrap().to_string();
        let mut file = shipped;
        file["hook"]["args"] =
            serde_json::json!(["oci-nvidia-hook", "--config", config, "prestart"]);
        self.write_json(&format!("{HOOKS_D}/oci-nvidia-hook.json"), &file);
        let inside = self.path(&config);
        fs::create_dir_all(inside.parent().unwrap()).unwrap();
        if !inside.exists() {
            symlink(&self.sim.config, &inside).unwrap();
        }
    }

    /// Writes `value` as JSON at `rel`, creating directories.
    pub fn write_json(&self, rel: &str, value: &Value) {
        let path = self.path(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
    }

    /// A process `pid` named `comm` in the host root's procfs.
    pub fn process(&self, pid: u32, comm: &str) -> PathBuf {
        let dir = self.path(&format!("proc/{pid}"));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
        dir
    }

    /// A dockerd whose environment has `path` and whose root is this host root.
    pub fn dockerd(&self, pid: u32, path: &str) {
        let dir = self.process(pid, "dockerd");
        fs::write(
            dir.join("environ"),
            format!("HOME=/root\0PATH={path}\0LANG=C.UTF-8\0"),
        )
        .unwrap();
        // As /proc/<pid>/root is the process's root: here, the host root.
        symlink("../..", dir.join("root")).unwrap();
    }

    /// The host's CDI spec as `cdi generate` writes it, at `rel`.
    pub fn cdi_spec(&self, rel: &str) -> PathBuf {
        let path = self.path(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let out = self
            .sim
            .run(&["cdi", "generate", "--output", path.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "cdi generate: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        path
    }

    /// Runs `doctor --host-root <this> ARGS` with the simulated host's
    /// config and a cleared environment (plus `extra_env`).
    pub fn doctor(&self, args: &[&str], extra_env: &[(&str, &Path)]) -> Output {
        let mut cmd = Command::new(hook_binary());
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .arg("--config")
            .arg(&self.sim.config)
            .arg("doctor")
            .arg("--host-root")
            .arg(&self.dir)
            .args(args);
        for (key, value) in extra_env {
            cmd.env(key, value);
        }
        cmd.output().expect("run oci-nvidia-hook doctor")
    }

    /// `doctor --json`'s report, and its exit code.
    pub fn report(&self, args: &[&str]) -> (Value, i32) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.doctor(&all, &[]);
        let code = out.status.code().expect("doctor exited");
        let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "doctor --json printed no JSON ({e}); stdout: {}; stderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (json, code)
    }
}

/// One check of doctor's JSON report, as the suites read it; a field the
/// report leaves out or sets to null reads as empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The layer it belongs to (`host`, `wiring`, ...).
    pub layer: String,
    /// Its name (`kernel module`, `hooks.d`, ...).
    pub name: String,
    /// What it found.
    pub found: String,
    /// What to do about it.
    pub remedy: String,
}

/// The checks of `report` with `status`.
pub fn checks_with(report: &Value, status: &str) -> Vec<Check> {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["status"] == status)
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            Check {
                layer: s("layer"),
                name: s("name"),
                found: s("found"),
                remedy: s("remedy"),
            }
        })
        .collect()
}

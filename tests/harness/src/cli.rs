//! Running the hook binary's commands (`info`, `list`, the hook itself) as
//! a runtime would, with a cleared environment. Never judges what a
//! success printed; a failure is judged by refusal.rs.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use super::project::hook_binary;
use super::refusal::failure;
use super::simhost::SimHost;

/// Runs the hook binary with `config` and `args`, with a cleared environment as runtimes may do.
pub fn hook(config: &Path, args: &[&str]) -> Output {
    Command::new(hook_binary())
        .env_clear()
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .expect("run oci-nvidia-hook")
}

impl SimHost {
    /// Runs the hook binary with this host's config and `args`.
    pub fn run(&self, args: &[&str]) -> Output {
        hook(&self.config, args)
    }

    /// Runs the hook and returns its stdout, failing the test on a non-zero exit.
    pub fn stdout(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "oci-nvidia-hook {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    /// Runs the hook and parses its stdout as JSON.
    pub fn json(&self, args: &[&str]) -> Value {
        serde_json::from_str(&self.stdout(args)).expect("JSON output")
    }

    /// Runs the hook expecting failure; returns stderr, checked to be one line.
    pub fn failure(&self, args: &[&str]) -> String {
        failure(self.run(args), args)
    }
}

/// `cdi generate` on a host of `mode` (`wsl`, `csv`): `auto` writes the
/// spec `--mode MODE` writes, and `--mode nvml` is refused naming the host.
pub fn assert_auto_is_mode_and_nvml_refused(host: &SimHost, mode: &str) {
    assert_eq!(
        host.stdout(&["cdi", "generate", "--output", "-", "--format", "json"]),
        host.stdout(&["cdi", "generate", "--mode", mode, "--output", "-", "--format", "json"]),
    );
    let err = host.failure(&["cdi", "generate", "--mode", "nvml", "--output", "-"]);
    assert!(
        err.contains("--mode=nvml") && err.contains(&format!("{mode} host")),
        "{err}"
    );
}

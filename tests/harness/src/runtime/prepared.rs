//! Bundles made but not run, for tests that start their containers
//! themselves: many at once, one many times, or under a changed
//! `config.json` (tests/load.rs, rootless.rs, faults.rs). Only for runtimes
//! that take `config.json` (runc, crun), not Podman. Every container is
//! removed when its [`Prepared`] is dropped, even when the test failed.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::bundle::{Bundle, BundleExtras, Scenario};
use super::cleanup::Cleanup;
use super::process::Finished;
use super::run::{Run, RunFiles, Serial};
use super::runtimes::Runtime;

/// A bundle made but not run: the test starts [`Prepared::command`] itself,
/// many at once or many times, and may turn an outcome into a [`Run`] with
/// [`Prepared::finish`]. Dropping it removes the container and its
/// cgroups, as `container::run` does, even when the test failed.
pub struct Prepared {
    /// The runtime that runs it.
    pub runtime: Runtime,
    /// The scenario's name.
    pub name: String,
    /// The container id [`Prepared::command`] uses; unique to this test process.
    pub id: String,
    /// The bundle directory.
    pub bundle: PathBuf,
    /// The container's root filesystem.
    pub rootfs: PathBuf,
    /// The runtime's `--root`.
    pub state_root: PathBuf,
    /// Where the hook logs.
    pub hook_log: PathBuf,
    argv: Vec<String>,
    _guard: Cleanup,
}

/// Makes the bundle of `scenario` (with `extras`) without running it.
pub fn prepare(_serial: &Serial, scenario: &Scenario, extras: &BundleExtras) -> Prepared {
    scenario.runtime.require_tools();
    assert!(
        !scenario.runtime.is_podman(),
        "prepared bundles are for runtimes that take config.json, not podman"
    );
    let bundle = Bundle::create(scenario, extras);
    let id = format!("onh-{}-{}", scenario.name, std::process::id());
    let argv = bundle.runtime_argv(scenario, &id);
    let guard = Cleanup {
        runtime: scenario.runtime,
        id: id.clone(),
        state_root: bundle.state_root(),
        hooks_dir: bundle.hooks_dir(),
    };
    Prepared {
        runtime: scenario.runtime,
        name: scenario.name.to_string(),
        hook_log: extras.hook_log.clone().unwrap_or_else(|| bundle.hook_log()),
        rootfs: bundle.rootfs(),
        state_root: bundle.state_root(),
        bundle: bundle.dir,
        id,
        argv,
        _guard: guard,
    }
}

impl Prepared {
    /// The runtime's `run` of this bundle as [`Prepared::id`], inside the
    /// mount namespace the runtime needs. Not yet spawned.
    pub fn command(&self) -> Command {
        self.runtime.in_namespace(self.argv.clone())
    }

    /// The same bundle run as container `id` (a restart under a new id);
    /// `id` must start with [`Prepared::id`] so that leftovers are found.
    pub fn command_for(&self, id: &str) -> Command {
        assert!(id.starts_with(&self.id), "{id} must start with {}", self.id);
        let mut argv = self.argv.clone();
        *argv.last_mut().expect("the id is the last argument") = id.to_string();
        self.runtime.in_namespace(argv)
    }

    /// Removes container `id` (one started by [`Prepared::command_for`])
    /// and its leftover cgroups; harmless when it is already gone.
    pub fn delete(&self, id: &str) {
        drop(Cleanup {
            runtime: self.runtime,
            id: id.to_string(),
            state_root: self.state_root.clone(),
            hooks_dir: self.bundle.join("hooks.d"),
        });
    }

    /// Turns the outcome of [`Prepared::command`] into a [`Run`], as
    /// `container::run` does.
    pub fn finish(&self, finished: Finished, elapsed: Duration) -> Run {
        Run::collect(
            self.runtime,
            &self.name,
            finished,
            elapsed,
            RunFiles {
                bundle: &self.bundle,
                rootfs: &self.rootfs,
                hook_log: &self.hook_log,
            },
        )
    }
}

//! Simulated GPU hosts built by `integration/simhost`, which every suite
//! runs on. Fixtures live under the target directory, one tree per test
//! binary; nothing here touches the machine's own driver files.
//!
//! These tests need root (mknod, chroot for `ldconfig -r`). Without the
//! `_test_as_root` feature they show as ignored; with it they fail loudly
//! when not run as root, never pass silently.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

use super::project::repo;

/// A simulated GPU host on disk, with its self-description (`host.json`).
#[derive(Debug, Clone)]
pub struct SimHost {
    /// The fixture's top directory.
    pub dir: PathBuf,
    /// Its `config.toml`, pointing the hook at it.
    pub config: PathBuf,
    /// What the builder says it made.
    pub host: Value,
}

/// Panics with a clear message unless the tests run as root.
pub fn require_root() {
    if !nix::unistd::Uid::effective().is_root() {
        panic!("this test needs root (mknod, ldconfig -r); run it as root via `make test`");
    }
}

/// Where this test binary keeps its fixtures, apart from other test binaries.
fn fixture_root() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let name = exe
        .file_stem()
        .expect("test binary name")
        .to_string_lossy()
        .into_owned();
    crate::project::target_tmpdir().join("simhosts").join(name)
}

impl SimHost {
    /// Builds a fixture named `name` afresh, for tests that modify it.
    pub fn fresh(name: &str, flavour: &str, gpus: u32, cache_format: &str) -> SimHost {
        SimHost::fresh_with(name, flavour, gpus, cache_format, &[])
    }

    /// Builds a fixture afresh with extra `simhost` arguments (`--mig`).
    pub fn fresh_with(
        name: &str,
        flavour: &str,
        gpus: u32,
        cache_format: &str,
        extra: &[&str],
    ) -> SimHost {
        SimHost::fresh_at(
            &fixture_root().join(name),
            flavour,
            gpus,
            cache_format,
            extra,
        )
    }

    /// Builds a fixture afresh in `dir`, for a test whose fixture must sit
    /// somewhere in particular (outside a sandbox's private /tmp, say).
    pub fn fresh_at(
        dir: &Path,
        flavour: &str,
        gpus: u32,
        cache_format: &str,
        extra: &[&str],
    ) -> SimHost {
        require_root();
        let dir = dir.to_path_buf();
        let status = Command::new(repo().join("integration/simhost"))
            .args([
                "--flavour",
                flavour,
                "--gpus",
                &gpus.to_string(),
                "--cache-format",
                cache_format,
            ])
            .args(extra)
            .arg("--out")
            .arg(&dir)
            .status()
            .expect("run integration/simhost");
        assert!(
            status.success(),
            "integration/simhost failed for {}: {status}",
            dir.display()
        );
        let host: Value =
            serde_json::from_slice(&std::fs::read(dir.join("host.json")).expect("host.json"))
                .expect("host.json is JSON");
        SimHost {
            config: dir.join("config.toml"),
            dir,
            host,
        }
    }

    /// A fixture shared by every test of this binary that only reads it.
    pub fn shared(flavour: &str, gpus: u32, cache_format: &str) -> SimHost {
        let name = format!("shared-{flavour}-{gpus}-{cache_format}");
        SimHost::shared_named(&name, |name| {
            SimHost::fresh(name, flavour, gpus, cache_format)
        })
    }

    /// The fixture named `name`, built by `build` the first time this test
    /// binary asks for it, then shared by every test that only reads it.
    pub fn shared_named(name: &str, build: impl FnOnce(&str) -> SimHost) -> SimHost {
        static BUILT: OnceLock<Mutex<HashMap<String, SimHost>>> = OnceLock::new();
        let mut built = BUILT
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        built
            .entry(name.to_string())
            .or_insert_with(|| build(name))
            .clone()
    }

    /// A path inside the fixture.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }
}

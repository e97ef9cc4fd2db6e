//! Shared pieces of the integration tests: simulated GPU hosts built by
//! `integration/simhost`, and running the `oci-nvidia-hook` binary.
//!
//! These tests need root (mknod, chroot for `ldconfig -r`). Without the
//! `_test_as_root` feature they show as ignored; with it they fail loudly
//! when not run as root, never pass silently.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

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

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Where this test binary keeps its fixtures, apart from other test binaries.
fn fixture_root() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let name = exe
        .file_stem()
        .expect("test binary name")
        .to_string_lossy()
        .into_owned();
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("simhosts")
        .join(name)
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
        require_root();
        let dir = fixture_root().join(name);
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
            "integration/simhost failed for {name}: {status}"
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
        static BUILT: OnceLock<Mutex<HashMap<String, SimHost>>> = OnceLock::new();
        let name = format!("shared-{flavour}-{gpus}-{cache_format}");
        let mut built = BUILT
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        built
            .entry(name.clone())
            .or_insert_with(|| SimHost::fresh(&name, flavour, gpus, cache_format))
            .clone()
    }

    /// A MIG-flavoured synthetic host (GPU 0 and 1 in MIG mode, mock NVML), shared.
    pub fn shared_mig(gpus: u32) -> SimHost {
        static BUILT: OnceLock<Mutex<HashMap<u32, SimHost>>> = OnceLock::new();
        let mut built = BUILT
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        built
            .entry(gpus)
            .or_insert_with(|| {
                SimHost::fresh_with(
                    &format!("shared-mig-{gpus}"),
                    "synthetic",
                    gpus,
                    "new",
                    &["--mig"],
                )
            })
            .clone()
    }

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

    /// A path inside the fixture.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }
}

/// Runs the hook binary with `config` and `args`, with a cleared environment as runtimes may do.
pub fn hook(config: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oci-nvidia-hook"))
        .env_clear()
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .expect("run oci-nvidia-hook")
}

/// Checks a failed run: non-zero exit, one line on stderr, no panic. Returns that line.
pub fn failure(out: Output, args: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "{args:?} should fail; stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "{args:?} should print one line: {stderr}"
    );
    stderr
}

/// `host.json`'s string at `pointer`.
pub fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string at {pointer} in {v}"))
}

/// One `ldconfig -p` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    /// The name looked up.
    pub soname: String,
    /// `libc6,x86-64`, `libc6`, ...
    pub tag: String,
    /// The file the loader opens.
    pub path: String,
}

/// glibc's own listing of a cache file: the ground truth for what the
/// container's loader will find.
pub fn ldconfig_print(cache: &Path) -> Vec<CacheEntry> {
    let out = Command::new("ldconfig")
        .arg("-p")
        .arg("-C")
        .arg(cache)
        .output()
        .expect("run ldconfig -p");
    assert!(
        out.status.success(),
        "ldconfig -p -C {} failed: {}",
        cache.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| line.starts_with('\t'))
        .filter_map(|line| {
            let (left, path) = line.trim().split_once(" => ")?;
            let (soname, tag) = left.split_once(" (")?;
            Some(CacheEntry {
                soname: soname.to_string(),
                tag: tag.trim_end_matches(')').to_string(),
                path: path.to_string(),
            })
        })
        .collect()
}

/// The host's mount table as (mount point, fs type, source), sorted: what
/// must be the same before and after containers ran.
pub fn host_mounts() -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").expect("read mountinfo");
    let mut mounts: Vec<String> = text
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let point = *fields.get(4)?;
            let dash = fields.iter().position(|f| *f == "-")?;
            let fstype = fields.get(dash + 1)?;
            let source = fields.get(dash + 2)?;
            Some(format!("{point} {fstype} {source}"))
        })
        .collect();
    mounts.sort();
    mounts
}

/// Panics, listing what appeared and what disappeared, unless the host's
/// mount table is `before` again; `context` says what ran in between.
pub fn assert_mounts_unchanged(before: &[String], context: &str) {
    let after = host_mounts();
    if after != before {
        let added: Vec<_> = after.iter().filter(|m| !before.contains(m)).collect();
        let removed: Vec<_> = before.iter().filter(|m| !after.contains(m)).collect();
        panic!("the host's mount table changed: added {added:#?}, removed {removed:#?}{context}");
    }
}

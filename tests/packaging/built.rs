//! The packages under test, built once per test binary by
//! `packaging/build` (what `make deb` and `make rpm` run) from the binary
//! `make build` ships (static, with its embedded helper: `make test` builds
//! it first) and the manual pages and completions that
//! `packaging/docs.rs` (the `package-docs` example's code) writes. Also a
//! "previous build", the same tree at a lower version, to upgrade from.
//! Writes only under the target directory.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::docs;
use harness::glibc;
use harness::project::repo;

/// The version Cargo.toml gives the packages.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Built packages and the docs they were built with.
pub struct Built {
    /// Where the packages are.
    pub dir: PathBuf,
    /// The generated manual pages and completions.
    pub docs: PathBuf,
    /// Their version.
    pub version: String,
}

impl Built {
    /// The `.deb` of `package`.
    pub fn deb(&self, package: &str) -> PathBuf {
        let arch = if package == "oci-nvidia-hook" {
            dpkg_architecture()
        } else {
            "all".to_string()
        };
        let path = self
            .dir
            .join(format!("{package}_{}_{arch}.deb", self.version));
        assert!(path.is_file(), "{} was not built", path.display());
        path
    }

    /// The `.rpm` of `package`.
    pub fn rpm(&self, package: &str) -> PathBuf {
        let arch = if package == "oci-nvidia-hook" {
            std::env::consts::ARCH
        } else {
            "noarch"
        };
        let path = self
            .dir
            .join(format!("{package}-{}-1.{arch}.rpm", self.version));
        assert!(path.is_file(), "{} was not built", path.display());
        path
    }

    /// Both `.deb` files, the hook's first.
    pub fn debs(&self) -> Vec<PathBuf> {
        super::files::PACKAGES.iter().map(|p| self.deb(p)).collect()
    }
}

/// This tree's packages, both formats, at Cargo.toml's version.
pub fn current() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| build("current", None, &["deb", "rpm"]))
}

/// The same tree as a lower version (`<version>~previous`, which dpkg and
/// RPM both sort first), to upgrade from.
pub fn previous() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let version = format!("{VERSION}~previous");
        build("previous", Some(&version), &["deb"])
    })
}

/// Where this binary keeps its packages and docs.
pub fn work_dir() -> PathBuf {
    harness::project::target_tmpdir().join("packaging")
}

fn build(name: &str, version: Option<&str>, formats: &[&str]) -> Built {
    let root = work_dir().join(name);
    let _ = std::fs::remove_dir_all(&root);
    let docs_dir = root.join("docs");
    docs::write_all(&docs_dir).expect("write the manual pages and completions");
    let dir = root.join("packages");
    let mut cmd = Command::new(repo().join("packaging/build"));
    cmd.arg("--binary")
        .arg(shipped_binary())
        .arg("--probe")
        .arg(shipped_probe())
        .arg("--docs")
        .arg(&docs_dir)
        .arg("--out")
        .arg(&dir);
    if let Some(version) = version {
        cmd.args(["--version", version]);
    }
    let out = cmd.args(formats).output().expect("run packaging/build");
    assert!(
        out.status.success(),
        "packaging/build {formats:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Built {
        dir,
        docs: docs_dir,
        version: version.unwrap_or(VERSION).to_string(),
    }
}

/// The binary `make build` ships for this machine.
pub fn shipped_binary() -> PathBuf {
    glibc::shipped_binary(
        &format!("{}-unknown-linux-musl", std::env::consts::ARCH),
        "build",
    )
}

/// The helper it embeds: the one part of it that needs a glibc.
pub fn shipped_probe() -> PathBuf {
    glibc::shipped_probe(std::env::consts::ARCH, "build")
}

/// `dpkg --print-architecture`.
pub fn dpkg_architecture() -> String {
    let out = Command::new("dpkg")
        .arg("--print-architecture")
        .output()
        .expect("run dpkg --print-architecture");
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

//! Build script: records which git commit the binary is built from, for
//! `--version` (`OCI_NVIDIA_HOOK_COMMIT` in the crate's environment).
//!
//! From a git checkout it is `git rev-parse --short=12 HEAD`, read again
//! whenever HEAD moves. A tree without its own `.git` (a release tarball, or
//! one unpacked inside some other repository) takes `OCI_NVIDIA_HOOK_COMMIT`
//! from the environment when the packager sets it, else `unknown`: never
//! another repository's commit. It only reads; it never fails the build.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What `--version` says when the commit cannot be known.
const UNKNOWN: &str = "unknown";

fn main() {
    // Without a rerun-if-changed line, cargo would rerun this script (and
    // rebuild the crate) whenever any file of the package changed.
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=OCI_NVIDIA_HOOK_COMMIT");
    let commit = std::env::var("OCI_NVIDIA_HOOK_COMMIT")
        .ok()
        .filter(|c| is_commit(c))
        .or_else(git_commit)
        .unwrap_or_else(|| UNKNOWN.to_string());
    println!("cargo:rustc-env=OCI_NVIDIA_HOOK_COMMIT={commit}");
}

/// A commit id as git prints it: hexadecimal, 7 to 40 digits.
fn is_commit(text: &str) -> bool {
    (7..=40).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// HEAD's commit, when this package's directory is the top of a git work
/// tree; and the files whose change means HEAD moved, for cargo to watch.
fn git_commit() -> Option<String> {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    let top = git(&manifest_dir, &["rev-parse", "--show-toplevel"])?;
    if Path::new(&top).canonicalize().ok()? != manifest_dir.canonicalize().ok()? {
        return None;
    }
    let commit = git(&manifest_dir, &["rev-parse", "--short=12", "HEAD"])?;
    // HEAD names a branch, whose ref file moves on each commit; a packed
    // ref lives in packed-refs. A worktree keeps HEAD apart from the refs:
    // `--git-path` finds each where it is. A missing file would count as
    // changed on every build, so only files that exist are watched, and a
    // branch that is only in packed-refs has its directory watched: its
    // loose file appears there on its next commit.
    watch(&manifest_dir, "HEAD", false);
    watch(&manifest_dir, "packed-refs", false);
    if let Some(branch) = git(&manifest_dir, &["symbolic-ref", "-q", "HEAD"]) {
        watch(&manifest_dir, &branch, true);
    }
    is_commit(&commit).then_some(commit)
}

/// Tells cargo to rerun this script when git's file `name` changes (or,
/// with `or_directory`, its directory while the file does not exist).
fn watch(manifest_dir: &Path, name: &str, or_directory: bool) {
    let Some(path) = git(manifest_dir, &["rev-parse", "--git-path", name]) else {
        return;
    };
    let path = manifest_dir.join(path);
    let watched = if path.exists() {
        Some(path.as_path())
    } else if or_directory {
        path.parent().filter(|dir| dir.is_dir())
    } else {
        None
    };
    if let Some(watched) = watched {
        println!("cargo:rerun-if-changed={}", watched.display());
    }
}

/// `git ARGS` in `dir`, its first line of output when it succeeds.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let line = text.lines().next()?.trim().to_string();
    (!line.is_empty()).then_some(line)
}

//! `containerd config dump`: containerd's effective configuration (its
//! file, the files that imports, and its built-in defaults) as the host's
//! containerd prints it, for `nvidia-ctk runtime configure
//! --config-source=command` as kind, k3s and the GPU Operator's scripts
//! call it. The program is the host's: `--executable-path` when absolute,
//! else the name looked up in the system directories, never on the
//! caller's `PATH`. It runs with a bare environment, bounded in time and
//! in what it prints.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::super::{Error, Result};
use crate::util::this_program::{system_dirs, SYSTEM_PATH};

/// containerd's program name.
const NAME: &str = "containerd";

/// How long `config dump` may take: it only reads files.
const LIMIT: Duration = Duration::from_secs(10);

/// The most it may print (containerd 2.1's dump is about 12 KiB).
const MAX_OUTPUT: u64 = 4 << 20;

/// The most of its stderr kept for a failure's line.
const MAX_STDERR: u64 = 64 << 10;

/// What `containerd config dump` printed, and the command that printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dump {
    /// The command, as a failure or warning names it.
    pub command: String,
    /// Its output: the effective configuration, as TOML.
    pub text: String,
}

/// Runs the host's containerd (`executable`, or `containerd` from the
/// system directories) as `containerd --config CONFIG config dump`.
pub fn dump(executable: Option<&str>, config: &Path) -> Result<Dump> {
    let program = program(executable)?;
    let command = format!(
        "{} --config {} config dump",
        program.display(),
        config.display()
    );
    let fail = |reason: String| Error::Dump {
        command: command.clone(),
        reason,
    };
    let mut child = Command::new(&program)
        .arg("--config")
        .arg(config)
        .args(["config", "dump"])
        .env_clear()
        .env("PATH", SYSTEM_PATH)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(format!("cannot run it: {e}")))?;
    let stdout = child.stdout.take().map(|p| reader(p, MAX_OUTPUT + 1));
    let stderr = child.stderr.take().map(|p| reader(p, MAX_STDERR));
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(fail(format!(
                    "still running after {}s: killed",
                    LIMIT.as_secs()
                )));
            }
            Err(e) => return Err(fail(format!("cannot wait for it: {e}"))),
        }
    };
    let collect = |handle: Option<thread::JoinHandle<Vec<u8>>>| {
        handle.and_then(|h| h.join().ok()).unwrap_or_default()
    };
    let (out, err) = (collect(stdout), collect(stderr));
    if !status.success() {
        let err = String::from_utf8_lossy(&err);
        let line = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(fail(format!("{status}: {}", line.trim())));
    }
    if out.len() as u64 > MAX_OUTPUT {
        return Err(fail(format!("printed more than {} MiB", MAX_OUTPUT >> 20)));
    }
    let text = String::from_utf8(out).map_err(|_| fail("printed something not UTF-8".into()))?;
    Ok(Dump { command, text })
}

/// Reads up to `max` bytes of `pipe` on a thread of its own, so a child
/// that prints much never blocks on a full pipe; the rest is drained.
fn reader(mut pipe: impl Read + Send + 'static, max: u64) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut kept = Vec::new();
        let _ = (&mut pipe).take(max).read_to_end(&mut kept);
        let _ = std::io::copy(&mut pipe, &mut std::io::sink());
        kept
    })
}

/// The program to run: `executable` when absolute; a bare name (or none:
/// `containerd`) from the system directories.
fn program(executable: Option<&str>) -> Result<PathBuf> {
    let name = executable.filter(|e| !e.is_empty()).unwrap_or(NAME);
    let path = Path::new(name);
    if path.is_absolute() {
        return match path.is_file() {
            true => Ok(path.to_path_buf()),
            false => Err(Error::Executable {
                path: name.to_string(),
                reason: "no such file",
            }),
        };
    }
    if name.contains('/') {
        return Err(Error::Executable {
            path: name.to_string(),
            reason: "a relative path is not looked up: give it absolute",
        });
    }
    system_dirs()
        .map(|dir| Path::new(dir).join(name))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| Error::NoExecutable {
            name: name.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// An executable shell script `body` in `dir`.
    fn script(dir: &Path, body: &str) -> PathBuf {
        let path = dir.join("containerd");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn the_dump_is_what_the_program_prints_for_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let program = script(dir.path(), r##"echo "version = 3"; echo "# $*""##);
        let dump = dump(program.to_str(), Path::new("/etc/c.toml")).unwrap();
        assert_eq!(
            dump.text,
            "version = 3\n# --config /etc/c.toml config dump\n"
        );
        assert_eq!(
            dump.command,
            format!("{} --config /etc/c.toml config dump", program.display())
        );
    }

    #[test]
    fn a_failure_is_one_line_naming_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let program = script(
            dir.path(),
            "echo noise >&2; echo 'failed to load TOML' >&2; exit 3",
        );
        let err = dump(program.to_str(), Path::new("/c.toml"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "`{} --config /c.toml config dump` failed: exit status: 3: failed to load TOML",
                program.display()
            )
        );
    }

    #[test]
    fn output_past_the_bound_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let program = script(dir.path(), "head -c 5000000 /dev/zero | tr '\\0' x");
        let err = dump(program.to_str(), Path::new("/c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("printed more than 4 MiB"), "{err}");
    }

    #[test]
    fn relative_and_missing_programs_are_refused() {
        let err = program(Some("bin/containerd")).unwrap_err().to_string();
        assert_eq!(
            err,
            "--executable-path bin/containerd: a relative path is not looked up: give it absolute"
        );
        let err = program(Some("/nonexistent/containerd"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "--executable-path /nonexistent/containerd: no such file"
        );
        let name = "oci-nvidia-hook-test-no-such-engine";
        let err = program(Some(name)).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("{name} not found in {SYSTEM_PATH}: name the engine's program with --executable-path")
        );
    }
}

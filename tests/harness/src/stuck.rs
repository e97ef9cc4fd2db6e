//! A host file whose read does not return: `integration/stuck-fuse` (a
//! one-file FUSE filesystem that takes reads and never answers them)
//! mounted over it. A fifo cannot stand for such a file: the hook refuses
//! one by its type before anything reads it. For the tests of the
//! deadline on every start.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// A file whose reads block, until this drops (the server stopped, the
/// file unmounted and what was there before back in view).
pub struct StuckFile {
    path: PathBuf,
    server: Child,
}

impl StuckFile {
    /// Mounts a file whose reads block over `path`, an existing file;
    /// panics, naming what is missing, if that cannot be done (root,
    /// `/dev/fuse` and python3 are needed).
    pub fn over(path: &Path) -> StuckFile {
        StuckFile::mount(path, false)
    }

    /// Like [`StuckFile::over`], but the server stops taking requests once
    /// the file is open: its read waits, never taken, as on a hard NFS
    /// mount that stopped answering, until a fatal signal ends it.
    pub fn deaf_over(path: &Path) -> StuckFile {
        StuckFile::mount(path, true)
    }

    fn mount(path: &Path, deaf: bool) -> StuckFile {
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: load the fuse module (modprobe fuse)"
        );
        let script = crate::project::repo().join("integration/stuck-fuse");
        let mut server = Command::new("python3")
            .arg(&script)
            .args(deaf.then_some("--deaf"))
            .arg(path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {} (python3 needed): {e}", script.display()));
        let mut line = String::new();
        // The server prints one line once mounted, or exits saying why not.
        let _ = BufReader::new(server.stdout.take().expect("piped")).read_line(&mut line);
        if line.trim() != "ready" {
            let status = server.wait();
            panic!(
                "{} did not mount over {}: {status:?}",
                script.display(),
                path.display()
            );
        }
        StuckFile {
            path: path.to_path_buf(),
            server,
        }
    }
}

impl Drop for StuckFile {
    fn drop(&mut self) {
        // Its handler unmounts; a reader still waiting then fails.
        if let Ok(pid) = i32::try_from(self.server.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let _ = self.server.wait();
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .stderr(Stdio::null())
            .status();
    }
}

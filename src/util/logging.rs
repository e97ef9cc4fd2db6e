//! Sets up the log from the configuration file, never from the environment.
//!
//! Runtimes may clear a hook's environment, or pass an attacker's, and often
//! swallow its stderr. So the level and an optional log file come from the
//! config, every line goes to stderr, and also to the file when one is set.
//! Each record is written with one `write` to a file opened `O_APPEND`, so
//! concurrent hooks never interleave within a line.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use thiserror::Error;

use crate::config::LogConfig;

/// Why logging could not be set up.
#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot open log file {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
}

/// Writes each record to stderr and, if configured, to the log file.
struct Tee {
    file: Option<File>,
}

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // A failing stderr (closed by the runtime) must not stop the file copy.
        let _ = io::stderr().write_all(buf);
        if let Some(file) = &mut self.file {
            file.write_all(buf)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Installs the global logger. Call once, early in `main`.
pub fn init(config: &LogConfig) -> Result<(), Error> {
    let file = match config.file() {
        // A fifo with no reader blocks this open: the deadline names it.
        Some(path) => Some({
            let _waiting =
                crate::util::deadline::waiting_for(|| format!("the log file {}", path.display()));
            OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o640)
                .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
                .open(path)
                .map_err(|source| Error::Open {
                    path: path.to_path_buf(),
                    source,
                })?
        }),
        None => None,
    };
    // The deadline's line goes where the log goes.
    crate::util::deadline::log_to(file.as_ref());
    let pid = std::process::id();
    env_logger::Builder::new()
        .filter_level(config.level.into())
        .format(move |buf, record| {
            writeln!(
                buf,
                "oci-nvidia-hook[{pid}]: {}: {}",
                record.level().as_str().to_ascii_lowercase(),
                record.args()
            )
        })
        .target(env_logger::Target::Pipe(Box::new(Tee { file })))
        .try_init()
        .ok();
    SET_UP.store(true, Ordering::Relaxed);
    Ok(())
}

/// Whether [`init`] installed the logger: errors go to it then, to stderr before.
pub fn is_set_up() -> bool {
    SET_UP.load(Ordering::Relaxed)
}

/// Set once [`init`] succeeded.
static SET_UP: AtomicBool = AtomicBool::new(false);

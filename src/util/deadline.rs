//! A wall-clock bound on each entry point a runtime waits for: the
//! `prestart` and `createRuntime` hooks, `cdi-hook`, the NVIDIA-name fronts
//! (`nvidia-container-runtime-hook prestart`, `nvidia-container-cli
//! configure`) and the runtime wrapper's own work before it `exec`s the real
//! runtime. runc sets no timeout on hooks: one that blocks (a hung NFS
//! driver root, a stuck procfs read, a fifo for a log file) holds the
//! container start until a person kills it.
//!
//! One policy for every wait. The bound is `deadline-ms` in the config
//! ([`DEFAULT`] unless set), counted from the start of the process. A wait
//! with a bound of its own (the OCI state on stdin, the NVML and libcuda
//! query children) takes the lesser of that bound and what the deadline
//! leaves less a margin ([`clip`]), so it runs out first and fails with its
//! own error, the child killed. A wait with no bound of its own is cut by
//! the alarm ([`crate::sys::alarm`]), which writes one line naming the entry
//! point and what it was waiting for ([`waiting_for`]) and exits 1.
//!
//! Discovery and planning only read, so the alarm may end the process at
//! any point of them. Applying a plan makes changes the journal undoes:
//! there the process is [`hold`]ing, the alarm only marks the time as run
//! out (and interrupts a blocking syscall, which fails), and the steps
//! [`check`] between them, so that injection stops and the journal puts the
//! image back before the process exits with the same kind of line.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::sys::alarm;

/// The default bound: 15 s. NVIDIA's toolkit gives a driver RPC (NVML's)
/// 10 s, so a slow but answering NVML query, plus discovery and injection
/// (a few ms), fits; a start that takes longer is broken, not slow. It is
/// well under what callers tolerate: the kubelet's runtime request timeout
/// is 2 min, and containerd and Docker wait for runc without a bound.
pub const DEFAULT: Duration = Duration::from_secs(15);

/// Time kept back from inner bounds for reporting and undoing changes.
const MARGIN: Duration = Duration::from_millis(500);

/// The time ran out where an entry point could stop cleanly.
#[derive(Debug, Error)]
#[error("{entry}: gave up after {} ms (deadline-ms) waiting for {waiting}", bound.as_millis())]
pub struct Expired {
    /// The entry point.
    pub entry: &'static str,
    /// Its bound.
    pub bound: Duration,
    /// What it was waiting for.
    pub waiting: String,
}

/// The armed deadline, if any.
struct Armed {
    entry: &'static str,
    bound: Duration,
    at: Instant,
    waiting: String,
}

static ARMED: Mutex<Option<Armed>> = Mutex::new(None);

fn armed<T>(f: impl FnOnce(&mut Option<Armed>) -> T) -> T {
    let mut guard = ARMED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    f(&mut guard)
}

/// When this process began its command: every bound counts from there, so
/// the time before the configuration is read counts too.
static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// Marks the start of this process's command ([`entry`](crate::entry) calls
/// it first); a later call changes nothing.
pub fn start() {
    let _ = STARTED.set(Instant::now());
}

/// Loads the configuration of entry point `entry` (if a runtime waits for
/// it) under the default bound, then bounds the rest of the run by the
/// configuration's own (`bound` reads it); `None` runs unbounded.
pub fn bounded_load<T, E>(
    entry: Option<&'static str>,
    load: impl FnOnce() -> Result<T, E>,
    bound: impl FnOnce(&T) -> Duration,
) -> Result<T, E> {
    let started = *STARTED.get_or_init(Instant::now);
    if let Some(entry) = entry {
        arm(entry, DEFAULT, started);
    }
    let loaded = {
        let _waiting = waiting_for(|| "the config file".into());
        load()?
    };
    if let Some(entry) = entry {
        arm(entry, bound(&loaded), started);
    }
    Ok(loaded)
}

/// Bounds this process, the entry point `entry`, to `bound` from `started`;
/// arming again replaces the bound (the config's, once it is read, after
/// the default's while it is read). A process that cannot set the alarm
/// runs unbounded, and says so.
pub fn arm(entry: &'static str, bound: Duration, started: Instant) {
    let at = started + bound;
    let waiting = armed(|state| {
        let waiting = state
            .take()
            .map_or_else(|| String::from("the start"), |old| old.waiting);
        *state = Some(Armed {
            entry,
            bound,
            at,
            waiting: waiting.clone(),
        });
        waiting
    });
    alarm::set_head(
        format!(
            "oci-nvidia-hook[{}]: error: {entry}: gave up after {} ms (deadline-ms) waiting for ",
            std::process::id(),
            bound.as_millis()
        )
        .as_bytes(),
    );
    alarm::set_waiting(waiting.as_bytes());
    let left = at
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    if let Err(e) = alarm::arm(left) {
        log::warn!("{entry}: cannot set its deadline, running unbounded: {e}");
    }
}

/// Writes the alarm's line to `file` (the log file) as well as stderr.
pub fn log_to(file: Option<&std::fs::File>) {
    use std::os::fd::AsRawFd;
    alarm::also_to(file.map(AsRawFd::as_raw_fd));
}

/// Cancels the deadline: before the runtime wrapper `exec`s the real
/// runtime, and before the process reports its own error.
pub fn disarm() {
    if armed(Option::take).is_some() {
        let _ = alarm::disarm();
    }
}

/// What the process waits for until the guard drops, for the alarm's line.
#[must_use = "the label holds only while the guard lives"]
pub struct Waiting {
    previous: Option<String>,
}

/// Names what the process waits for now (`what` is formatted only when a
/// deadline is armed), until the returned guard drops.
pub fn waiting_for(what: impl FnOnce() -> String) -> Waiting {
    let previous = armed(|state| {
        state.as_mut().map(|armed| {
            let label = what();
            alarm::set_waiting(label.as_bytes());
            std::mem::replace(&mut armed.waiting, label)
        })
    });
    Waiting { previous }
}

/// [`waiting_for`] `what` and then `path`, as `format!("{what} {}",
/// path.display())` says it, without the formatting machinery: a start
/// names every host file it opens and reads this way.
pub fn waiting_on(what: &str, path: &Path) -> Waiting {
    waiting_for(|| label(what, path))
}

/// `what`, a space and `path`, as `Path::display` shows it.
fn label(what: &str, path: &Path) -> String {
    let path = path.to_string_lossy();
    let mut label = String::with_capacity(what.len() + 1 + path.len());
    label.push_str(what);
    label.push(' ');
    label.push_str(&path);
    label
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(previous) = self.previous.take() {
            armed(|state| {
                if let Some(armed) = state.as_mut() {
                    alarm::set_waiting(previous.as_bytes());
                    armed.waiting = previous;
                }
            });
        }
    }
}

/// `own`, an inner wait's bound, cut to what the deadline leaves less
/// [`MARGIN`] (at least 1 ms): so it runs out before the alarm.
pub fn clip(own: Duration) -> Duration {
    armed(|state| match state {
        Some(armed) => clip_to(
            own,
            armed.at.saturating_duration_since(Instant::now()),
            armed.bound,
        ),
        None => own,
    })
}

/// `own` cut to `left` of a deadline of `bound`, less the margin.
fn clip_to(own: Duration, left: Duration, bound: Duration) -> Duration {
    let margin = MARGIN.min(bound / 4);
    own.min(left.saturating_sub(margin))
        .max(Duration::from_millis(1))
}

/// Fails once the deadline passed: between steps that make changes, which
/// must then stop and be undone.
pub fn check() -> Result<(), Box<Expired>> {
    armed(|state| match state {
        Some(armed) if alarm::expired() || Instant::now() >= armed.at => Err(Box::new(Expired {
            entry: armed.entry,
            bound: armed.bound,
            waiting: armed.waiting.clone(),
        })),
        _ => Ok(()),
    })
}

/// Holds off the alarm's exit while changes are made that only the
/// process can undo; the alarm still marks the time as run out, for [`check`].
#[must_use = "the alarm is held off only while the guard lives"]
pub struct Held {
    was: bool,
}

/// Holds off the alarm until the returned guard drops (nested holds keep it held).
pub fn hold() -> Held {
    let was = armed(|state| state.is_some()) && !alarm::is_held();
    if was {
        alarm::hold(true);
    }
    Held { was }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Done and consistent, or undone: an alarm that came meanwhile is
        // not acted on here. A caller that stopped for it reports it; one
        // that finished has nothing left to wait for.
        if self.was {
            alarm::hold(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inner_bounds_run_out_before_the_deadline() {
        // Unarmed: an inner bound is its own.
        assert_eq!(clip(Duration::from_secs(10)), Duration::from_secs(10));
        assert!(check().is_ok());
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        // NVML's 10 s within the default 15 s: its own, with time to spare.
        assert_eq!(clip_to(s(10), s(15), s(15)), s(10));
        // Late in the run: what is left, less the margin for the line and undoing.
        assert_eq!(clip_to(s(10), s(3), s(15)), ms(2500));
        // A short deadline keeps a quarter of itself back.
        assert_eq!(clip_to(s(10), ms(200), ms(200)), ms(150));
        // Run out: the least wait, which fails at once with its own error.
        assert_eq!(clip_to(s(10), Duration::ZERO, s(15)), ms(1));
    }

    #[test]
    fn a_path_label_reads_as_display_shows_it() {
        use std::os::unix::ffi::OsStrExt;
        for path in [&b"/proc/driver/nvidia/version"[..], b"/odd \xff name/\n"] {
            let path = Path::new(std::ffi::OsStr::from_bytes(path));
            assert_eq!(
                label("reading", path),
                format!("reading {}", path.display())
            );
        }
    }
}

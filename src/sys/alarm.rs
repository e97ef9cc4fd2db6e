//! A wall-clock alarm that ends the process with a prepared line: the
//! mechanism under [`crate::util::deadline`].
//!
//! `SIGALRM`'s handler runs only async-signal-safe code: it reads atomics,
//! `write`s one line to stderr (and the log file, when one is set) and calls
//! `_exit(1)`. While the process is held ([`hold`]: undoable changes are
//! being made) it only records that the time ran out; it is installed
//! without `SA_RESTART`, so a blocking syscall then fails with `EINTR` and
//! the caller can stop and undo. Nothing here decides when or what to say.
//!
//! A handler runs only once the process returns from the kernel, and some
//! waits return for no signal but a fatal one: a hard NFS mount's, a FUSE
//! request the server never took. For those a second timer, [`BACKSTOP`]
//! after the alarm, sends `SIGKILL`: the process ends without its line (no
//! code of it can run), and the runtime reports the hook killed, instead of
//! waiting for it forever.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use nix::libc;
use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, SigmaskHow, Signal};

/// How long after the alarm `SIGKILL` ends a process that is still there:
/// one whose handler could not run, or whose undoing hangs itself.
pub const BACKSTOP: Duration = Duration::from_secs(1);

/// The kernel id of the backstop's POSIX timer, or -1 before it is made.
static KILL_TIMER: AtomicI32 = AtomicI32::new(-1);

/// Longest text of each part of the line; more is cut.
const PART_MAX: usize = 2048;

/// The line's start, fixed when armed, and what is waited for now.
static HEAD: Part = Part::new();
static WAITING: Part = Part::new();
/// Where the line goes besides stderr: the log file's descriptor, or -1.
static ALSO: AtomicI32 = AtomicI32::new(-1);
static HELD: AtomicBool = AtomicBool::new(false);
static EXPIRED: AtomicBool = AtomicBool::new(false);

/// Text a signal handler can read safely: bytes in atomics. Its length is
/// zeroed while it is rewritten, so an alarm then reads none of it rather
/// than half of it.
struct Part {
    bytes: [AtomicU8; PART_MAX],
    len: AtomicUsize,
}

impl Part {
    const fn new() -> Part {
        Part {
            bytes: [const { AtomicU8::new(0) }; PART_MAX],
            len: AtomicUsize::new(0),
        }
    }

    fn set(&self, text: &[u8]) {
        self.len.store(0, Ordering::SeqCst);
        let text = &text[..text.len().min(PART_MAX)];
        for (slot, byte) in self.bytes.iter().zip(text) {
            slot.store(*byte, Ordering::Relaxed);
        }
        self.len.store(text.len(), Ordering::SeqCst);
    }

    /// Appends this part to `out` from `at`; the new end.
    fn copy_to(&self, out: &mut [u8], at: usize) -> usize {
        let len = self.len.load(Ordering::SeqCst);
        let mut end = at;
        for slot in self.bytes.iter().take(len) {
            if end == out.len() {
                break;
            }
            out[end] = slot.load(Ordering::Relaxed);
            end += 1;
        }
        end
    }
}

/// Sets the line's start: what ran out, and after how long.
pub fn set_head(text: &[u8]) {
    HEAD.set(text);
}

/// Sets what the process is waiting for, the end of the line.
pub fn set_waiting(text: &[u8]) {
    WAITING.set(text);
}

/// Writes the line to descriptor `fd` too (the log file), or to stderr only (`None`).
pub fn also_to(fd: Option<i32>) {
    ALSO.store(fd.unwrap_or(-1), Ordering::SeqCst);
}

/// While `held`, the alarm only records that the time ran out.
pub fn hold(held: bool) {
    HELD.store(held, Ordering::SeqCst);
}

/// Whether the alarm is held off.
pub fn is_held() -> bool {
    HELD.load(Ordering::SeqCst)
}

/// Whether the alarm went off.
pub fn expired() -> bool {
    EXPIRED.load(Ordering::SeqCst)
}

extern "C" fn on_alarm(_: libc::c_int) {
    EXPIRED.store(true, Ordering::SeqCst);
    if HELD.load(Ordering::SeqCst) {
        return;
    }
    let mut line = [0u8; 2 * PART_MAX + 1];
    let end = HEAD.copy_to(&mut line, 0);
    let mut end = WAITING.copy_to(&mut line, end);
    line[end] = b'\n';
    end += 1;
    // SAFETY: `write` and `_exit` are async-signal-safe; `line` is a live
    // buffer of at least `end` bytes. A failed write changes nothing: the
    // process exits non-zero anyway.
    unsafe {
        libc::write(libc::STDERR_FILENO, line.as_ptr().cast(), end);
        let also = ALSO.load(Ordering::SeqCst);
        if also >= 0 {
            libc::write(also, line.as_ptr().cast(), end);
        }
        libc::_exit(1);
    }
}

/// Makes `SIGALRM` go off `after` from now (replacing any earlier alarm),
/// with the handler installed and the signal unblocked.
pub fn arm(after: Duration) -> io::Result<()> {
    let action = SigAction::new(
        SigHandler::Handler(on_alarm),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handler touches only atomics and async-signal-safe
    // calls; it replaces no handler anything else in the process relies on
    // (nothing else here uses `SIGALRM`).
    unsafe { sigaction(Signal::SIGALRM, &action) }.map_err(io::Error::from)?;
    // A runtime may start the hook with `SIGALRM` blocked.
    let mut alarm = SigSet::empty();
    alarm.add(Signal::SIGALRM);
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&alarm), None)
        .map_err(io::Error::from)?;
    EXPIRED.store(false, Ordering::SeqCst);
    set_timer(after)?;
    set_backstop(after.saturating_add(BACKSTOP))
}

/// Cancels the alarm: an interval timer outlives `execve`, and the real
/// runtime the wrapper becomes must not be killed by ours.
pub fn disarm() -> io::Result<()> {
    set_timer(Duration::ZERO)?;
    set_backstop(Duration::ZERO)
}

/// Makes `SIGKILL` come `after` from now (zero: never), through a POSIX
/// timer made on first use. Raw system calls: glibc before 2.34 has
/// `timer_create` in librt, which the binary does not link. The timer is
/// the process's own: `fork` does not copy it and `execve` deletes it.
fn set_backstop(after: Duration) -> io::Result<()> {
    let mut id = KILL_TIMER.load(Ordering::SeqCst);
    if id < 0 {
        if after.is_zero() {
            return Ok(());
        }
        // SAFETY: a zeroed sigevent is a valid value (the C struct has no
        // invariants beyond its fields); only the signal and the
        // notification kind are set.
        let mut event: libc::sigevent = unsafe { std::mem::zeroed() };
        event.sigev_signo = libc::SIGKILL;
        event.sigev_notify = libc::SIGEV_SIGNAL;
        let mut made: libc::c_int = -1;
        // SAFETY: timer_create(clock, &sigevent, &kernel_timer_t): both
        // pointers are to live values of the kernel's layout (sigevent is
        // the kernel's 64-byte struct; its timer id is an int).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_timer_create,
                libc::CLOCK_MONOTONIC,
                &mut event as *mut libc::sigevent,
                &mut made as *mut libc::c_int,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        KILL_TIMER.store(made, Ordering::SeqCst);
        id = made;
    }
    let value = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: libc::c_long::from(after.subsec_nanos()),
        },
    };
    // SAFETY: timer_settime(id, flags, &itimerspec, NULL old value): `id`
    // is the timer made above, `value` a live itimerspec.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_timer_settime,
            id,
            0,
            &value as *const libc::itimerspec,
            std::ptr::null_mut::<libc::itimerspec>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn set_timer(after: Duration) -> io::Result<()> {
    let value = libc::timeval {
        tv_sec: i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        tv_usec: i64::from(after.subsec_micros()),
    };
    let timer = libc::itimerval {
        it_interval: libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        },
        it_value: value,
    };
    // SAFETY: `timer` is a valid itimerval and a null old value is allowed.
    let rc = unsafe { libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

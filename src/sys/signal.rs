//! Signal dispositions the binary sets before anything else runs. It never
//! installs a handler: only `SIG_IGN`, which runs no code.

use std::io;

use nix::sys::signal::{signal, SigHandler, Signal};

/// Makes a write to a closed pipe fail with `EPIPE` (`list | head`) instead
/// of killing the process with `SIGPIPE`.
pub fn ignore_sigpipe() -> io::Result<()> {
    // SAFETY: `signal` is unsafe because a handler must be async-signal-safe
    // and must not race with other threads' handlers; `SIG_IGN` is no
    // handler at all, so neither concern arises, from any thread at any time.
    unsafe { signal(Signal::SIGPIPE, SigHandler::SigIgn) }
        .map(drop)
        .map_err(io::Error::from)
}

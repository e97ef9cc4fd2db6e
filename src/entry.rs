//! From a command line to an exit status, whichever name the binary was run
//! as: the front that name picks parses it ([`front::parse`]), the
//! application layer runs the operation ([`app::run`]: configuration, log,
//! work), and a failure leaves one line. `main` calls [`run`] and knows no
//! command.

use std::ffi::OsString;
use std::io::{self, Write};

use crate::app::{self, Invocation, Outcome};
use crate::{front, util::deadline, util::error_line, util::logging};

/// Exit statuses, as `main` returns them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Status {
    /// Done.
    Success = 0,
    /// Refused or failed, said on one line; or doctor's checks failed.
    Failure = 1,
}

/// Runs the command line `args` (`argv[0]` first) and flushes stdout.
pub fn run(args: Vec<OsString>) -> Status {
    deadline::start();
    let status = match front::parse(args) {
        Ok(Invocation::Run(operation, overrides)) => report(app::run(&operation, &overrides)),
        Ok(Invocation::Print(text)) => {
            print!("{text}");
            Status::Success
        }
        Ok(Invocation::Warn(text)) => {
            app::warn(&error_line::escape_controls(&text));
            Status::Success
        }
        Ok(Invocation::Nothing) => Status::Success,
        Err(e) => fail(&e),
    };
    match io::stdout().flush() {
        Err(e) if !is_broken_pipe(&e) => fail(&e),
        _ => status,
    }
}

/// The status of an operation's result; a failure said on one line.
fn report(result: app::Result<Outcome>) -> Status {
    // The run is over: what is left is saying how it went.
    deadline::disarm();
    let e = match result {
        Ok(Outcome::Done) => return Status::Success,
        // Doctor's report said what failed.
        Ok(Outcome::Unhealthy) => return Status::Failure,
        Err(e) => e,
    };
    if is_broken_pipe(&e) {
        return Status::Success;
    }
    if logging::is_set_up() {
        log::error!("{}", error_line::error(&e));
        return Status::Failure;
    }
    fail(&e)
}

/// Reports an error from before the logger exists: one line on stderr.
pub fn fail(e: &dyn std::error::Error) -> Status {
    eprintln!("oci-nvidia-hook: error: {}", error_line::error(e));
    Status::Failure
}

/// Whether the reader of our output went away, which is not a failure
/// (`list | head`): a broken pipe anywhere among `e` and its sources.
pub fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if e.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
        {
            return true;
        }
        next = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_pipe_is_found_among_the_sources_only() {
        let pipe = || io::Error::from(io::ErrorKind::BrokenPipe);
        assert!(is_broken_pipe(&pipe()));
        assert!(is_broken_pipe(&app::Error::Output(pipe())));
        assert!(!is_broken_pipe(&app::Error::Output(io::Error::from(
            io::ErrorKind::NotFound
        ))));
        assert!(!is_broken_pipe(&app::Error::Usage("x".into())));
    }

    #[test]
    fn doctor_unhealthy_fails_without_a_line_and_done_succeeds() {
        assert_eq!(report(Ok(Outcome::Unhealthy)), Status::Failure);
        assert_eq!(report(Ok(Outcome::Done)), Status::Success);
    }
}

//! From a command line to an exit status, whichever name the binary was run
//! as: the front that name picks ([`compat::dispatch`]), the command's run
//! (which loads the configuration and sets up the log when it needs them),
//! and the one line a failure leaves. `main` calls [`run`] and knows no
//! command.

use std::ffi::OsString;
use std::io::{self, Write};

use crate::compat::{self, nvidia_cli, Invocation};
use crate::{cli, deadline, logging, oneline};

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
    let status = match compat::dispatch(args) {
        Ok(Invocation::Ours(cli)) => report(cli::run(&cli)),
        Ok(Invocation::NvidiaCli(invocation)) => report(nvidia_cli::run(&invocation)),
        Ok(Invocation::Ctk(ctk)) => report(compat::ctk::run(&ctk)),
        Ok(Invocation::CdiHook(hook)) => report(compat::cdi_hook::run(&hook)),
        Ok(Invocation::Print(text)) => {
            print!("{text}");
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

/// The status of a command's result; a failure said on one line.
fn report<E: std::error::Error + 'static>(result: Result<(), E>) -> Status {
    // The run is over: what is left is saying how it went.
    deadline::disarm();
    let Err(e) = result else {
        return Status::Success;
    };
    if is_broken_pipe(&e) {
        return Status::Success;
    }
    // Doctor's report said what failed.
    if matches!(
        (&e as &dyn std::error::Error).downcast_ref::<cli::Error>(),
        Some(cli::Error::Unhealthy)
    ) {
        return Status::Failure;
    }
    if logging::is_set_up() {
        log::error!("{}", oneline::error(&e));
        return Status::Failure;
    }
    fail(&e)
}

/// Reports an error from before the logger exists: one line on stderr.
pub fn fail(e: &dyn std::error::Error) -> Status {
    eprintln!("oci-nvidia-hook: error: {}", oneline::error(e));
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
        assert!(is_broken_pipe(&cli::Error::Output(pipe())));
        assert!(!is_broken_pipe(&cli::Error::Output(io::Error::from(
            io::ErrorKind::NotFound
        ))));
        assert!(!is_broken_pipe(&cli::Error::Unhealthy));
    }
}

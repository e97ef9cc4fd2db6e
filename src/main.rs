//! The `oci-nvidia-hook` binary: parse options, set up logging, dispatch.
//!
//! `main` is the C entry point, not Rust's: the runtime waits for the hook
//! on every container start, and std's start-up (which reads
//! `/proc/self/maps` to place a stack guard and maps a signal stack) costs
//! about 80 µs of that. What of it the hook relies on is done here: a write
//! to a closed pipe is an error (`list | head`), not a fatal `SIGPIPE`, and
//! stdout is flushed before exit. A stack overflow is then a plain `SIGSEGV`.
#![no_main]
#![deny(unsafe_code)]

use std::ffi::{c_char, c_int};
use std::io::Write;
use std::time::Instant;

use oci_nvidia_hook::cli::{self, Cli};
use oci_nvidia_hook::compat::{self, nvidia_cli, Invocation};
use oci_nvidia_hook::config::Config;
use oci_nvidia_hook::{deadline, logging, sys};

/// The process entry point, called by the C runtime (std still reads the
/// arguments, which glibc hands it before `main`).
// `no_mangle` counts as unsafe code (the symbol could clash with another);
// this is the one C `main` of the binary, which is what `#![no_main]` wants.
#[allow(unsafe_code)]
#[no_mangle]
pub extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
    if let Err(e) = sys::signal::ignore_sigpipe() {
        return fail(&e) as c_int;
    }
    let status = run();
    match std::io::stdout().flush() {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => fail(&e) as c_int,
        _ => status as c_int,
    }
}

/// Exit statuses, as `main` returns them.
#[derive(Clone, Copy)]
#[repr(i32)]
enum Status {
    Success = 0,
    Failure = 1,
}

fn run() -> Status {
    let started = Instant::now();
    match compat::dispatch(std::env::args_os().collect()) {
        Ok(Invocation::Ours(cli)) => run_ours(cli, started),
        Ok(Invocation::NvidiaCli(invocation)) => run_nvidia_cli(&invocation, started),
        Ok(Invocation::Ctk(ctk)) => run_ctk(&ctk),
        Ok(Invocation::Print(text)) => {
            print!("{text}");
            Status::Success
        }
        Ok(Invocation::Nothing) => Status::Success,
        Err(e) => fail(&e),
    }
}

/// Bounds the entry point `entry` (if a runtime waits for it) by the
/// default deadline until the config is read, then by the config's.
fn bounded_config(
    entry: Option<&'static str>,
    started: Instant,
    load: impl FnOnce() -> Result<Config, Box<dyn std::error::Error>>,
) -> Result<Config, Box<dyn std::error::Error>> {
    if let Some(entry) = entry {
        deadline::arm(entry, deadline::DEFAULT, started);
    }
    let config = {
        let _waiting = deadline::waiting_for(|| "the config file".into());
        load()?
    };
    if let Some(entry) = entry {
        deadline::arm(entry, config.deadline(), started);
    }
    logging::init(&config.log)?;
    Ok(config)
}

/// Runs a command of NVIDIA's CLI's command line.
fn run_nvidia_cli(invocation: &nvidia_cli::Invocation, started: Instant) -> Status {
    let entry = matches!(invocation.command, nvidia_cli::args::Command::Configure(_))
        .then_some("nvidia-container-cli configure");
    let config = match bounded_config(entry, started, || Ok(nvidia_cli::config(invocation)?)) {
        Ok(config) => config,
        Err(e) => return fail(e.as_ref()),
    };
    let result = nvidia_cli::run(invocation, &config);
    deadline::disarm();
    match result {
        Ok(()) => Status::Success,
        Err(e) if e.is_broken_pipe() => Status::Success,
        Err(e) => {
            log::error!("{}", cli::one_line(&e));
            Status::Failure
        }
    }
}

/// Runs a command of NVIDIA's `nvidia-ctk`.
fn run_ctk(ctk: &compat::ctk::Ctk) -> Status {
    let config = match compat::ctk::config(ctk) {
        Ok(config) => config,
        Err(e) => return fail(&e),
    };
    if let Err(e) = logging::init(&config.log) {
        return fail(&e);
    }
    match compat::ctk::run(ctk, &config) {
        Ok(()) => Status::Success,
        Err(e) if e.is_broken_pipe() => Status::Success,
        Err(e) => {
            log::error!("{}", cli::one_line(&e));
            Status::Failure
        }
    }
}

/// Runs our own command line's command.
fn run_ours(cli: Cli, started: Instant) -> Status {
    // The runtime wrapper's caller reads errors from the runtime's log.
    let fail = |e: &dyn std::error::Error| {
        deadline::disarm();
        if let cli::Command::Runtime { args } = &cli.command {
            oci_nvidia_hook::runtime::log_failure(args, &cli::one_line(e));
        }
        fail(e)
    };
    // Doctor loads the config itself: a broken one is a finding, and a
    // failing check is its exit status, not an error line.
    if let cli::Command::Doctor(args) = &cli.command {
        return match cli::doctor(args, cli.config.as_deref()) {
            Ok(true) => Status::Success,
            Ok(false) => Status::Failure,
            Err(e) if e.is_broken_pipe() => Status::Success,
            Err(e) => fail(&e),
        };
    }
    let config = match bounded_config(cli.command.waited_for(), started, || {
        Ok(Config::load(cli.config.as_deref())?)
    }) {
        Ok(config) => config,
        Err(e) => return fail(e.as_ref()),
    };
    let result = cli::run(&cli.command, &config, cli.config.as_deref());
    deadline::disarm();
    match result {
        Ok(()) => Status::Success,
        Err(e) if e.is_broken_pipe() => Status::Success,
        Err(e) => {
            log::error!("{}", cli::one_line(&e));
            Status::Failure
        }
    }
}

/// Reports an error from before the logger exists: one line on stderr.
fn fail(e: &dyn std::error::Error) -> Status {
    eprintln!("oci-nvidia-hook: error: {}", cli::one_line(e));
    Status::Failure
}

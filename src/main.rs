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

use std::ffi::{c_char, c_int, OsString};
use std::io::Write;

use clap::Parser;
use oci_nvidia_hook::cli::{self, Cli};
use oci_nvidia_hook::compat::{runtime_hook, Front};
use oci_nvidia_hook::config::Config;
use oci_nvidia_hook::{logging, sys};

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
    let args: Vec<OsString> = std::env::args_os().collect();
    let front = Front::of(args.first().map(OsString::as_os_str).unwrap_or_default());
    // NVIDIA's command lines are ASCII; a stray byte is refused by name below.
    let lossy = || -> Vec<String> {
        args.iter()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    };
    let cli = match front {
        // The hook's own command lines skip clap's start-up (see `cli::fast`).
        Front::Ours => cli::fast::parse(&args).unwrap_or_else(|| Cli::parse_from(&args)),
        Front::RuntimeHook => match runtime_hook::parse(&lossy()) {
            Ok(runtime_hook::Parsed::Ours(cli)) => cli,
            Ok(runtime_hook::Parsed::Nothing) => return Status::Success,
            Ok(runtime_hook::Parsed::Version) => {
                println!("{} {}", runtime_hook::NAME, cli::version());
                return Status::Success;
            }
            Err(e) => return fail(&e),
        },
        // runc's command line, whole: nothing of it is ours to parse.
        Front::Runtime => Cli {
            config: None,
            command: cli::Command::Runtime {
                args: args.get(1..).unwrap_or_default().to_vec(),
            },
        },
    };
    run_ours(cli)
}

/// Runs our own command line's command.
fn run_ours(cli: Cli) -> Status {
    // The runtime wrapper's caller reads errors from the runtime's log.
    let fail = |e: &dyn std::error::Error| {
        if let cli::Command::Runtime { args } = &cli.command {
            oci_nvidia_hook::runtime::log_failure(args, &cli::one_line(e));
        }
        fail(e)
    };
    let config = match Config::load(cli.config.as_deref()) {
        Ok(config) => config,
        Err(e) => return fail(&e),
    };
    if let Err(e) = logging::init(&config.log) {
        return fail(&e);
    }
    match cli::run(&cli.command, &config, cli.config.as_deref()) {
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

//! The `oci-nvidia-hook` binary: everything is [`entry::run`]'s.
//!
//! `main` is the C entry point, not Rust's: the runtime waits for the hook
//! on every container start, and std's start-up (which reads
//! `/proc/self/maps` to place a stack guard and maps a signal stack) costs
//! about 80 µs of that. What of it the hook relies on is done here: a write
//! to a closed pipe is an error (`list | head`), not a fatal `SIGPIPE`, and
//! stdout is flushed before exit ([`entry::run`]). A stack overflow is then
//! a plain `SIGSEGV`. A binary started set-group-ID leaves the group first
//! of all ([`sys::process::leave_set_group_start`]).
#![no_main]
#![deny(unsafe_code)]

use std::ffi::c_int;

use oci_nvidia_hook::{entry, sys};

/// The static binary's allocator ([`sys::alloc`]): a 2 MiB size-class arena in
/// front of musl's `malloc`, for processes that live a few milliseconds.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: sys::alloc::Arena<{ 2 << 20 }> = sys::alloc::Arena::new();

/// The process entry point, called by the C runtime with the arguments
/// (which only glibc also hands std).
// `no_mangle` counts as unsafe code (the symbol could clash with another);
// this is the one C `main` of the binary, which is what `#![no_main]` wants.
#[allow(unsafe_code)]
#[no_mangle]
extern "C" fn main(argc: c_int, argv: sys::process::Argv) -> c_int {
    let args = sys::process::args(argc, argv);
    if let Err(e) = sys::process::leave_set_group_start() {
        return entry::fail(&e) as c_int;
    }
    if let Err(e) = sys::signal::ignore_sigpipe() {
        return entry::fail(&e) as c_int;
    }
    entry::run(args) as c_int
}

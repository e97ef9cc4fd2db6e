//! The one home of `unsafe` code: raw syscalls and foreign calls that no
//! safe wrapper (std, nix, rustix) offers, each behind a safe function whose
//! `SAFETY` comment says why its use is sound. Everything else in the crate
//! is `#![deny(unsafe_code)]` and calls these functions.
//!
//! Nothing here decides policy: callers pass descriptors and values already
//! checked, and get plain `io::Result`s back.

pub mod alarm;
pub mod alloc;
pub mod bpf;
pub mod confine;
pub mod mount;
pub mod node;
pub mod process;
pub mod signal;

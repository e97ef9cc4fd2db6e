//! Small pieces every part uses: bounded and checked reads of host files
//! ([`bounded`], [`hostfile`], [`reopen`]), bounded listings of the
//! image's directories ([`listing`]), atomic writes ([`atomic`]),
//! the deadline and the log ([`deadline`], [`logging`]), one-line errors
//! ([`oneline`]), globs ([`glob`]), and this program as others see it
//! ([`program`]).

pub mod atomic;
pub mod bounded_read;
pub mod deadline;
pub mod error_line;
pub mod glob;
pub mod hostfile;
pub mod listing;
pub mod logging;
pub mod reopen;
pub mod this_program;

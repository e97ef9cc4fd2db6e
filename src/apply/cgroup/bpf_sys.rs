//! The typed `bpf(2)` layer the device cgroup needs, and nothing else.
//!
//! Owns the kernel's constants, the retries (a too-small id buffer, an
//! interrupted verifier) and turning the kernel's answers into Rust values;
//! the raw calls and their `unsafe` live in [`crate::sys::bpf`]. It must
//! never decide policy, and it adds no context to errors: callers name the
//! command's operands.

#![forbid(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::os::fd::BorrowedFd;

use nix::errno::Errno;

use crate::sys::bpf as raw;
pub use crate::sys::bpf::ProgFd;

/// `enum bpf_attach_type`: `BPF_CGROUP_DEVICE`.
pub const CGROUP_DEVICE: u32 = 6;
/// `enum bpf_prog_type`: `BPF_PROG_TYPE_CGROUP_DEVICE`.
pub const PROG_TYPE_CGROUP_DEVICE: u32 = 15;
/// Attach flag: programs stack, and every one of them must allow.
pub const F_ALLOW_MULTI: u32 = 2;
/// Attach flag: swap `replace_bpf_fd` for the new program atomically (5.6+).
pub const F_REPLACE: u32 = 4;
/// Query flag: list the programs that apply, ancestors' included.
pub const F_QUERY_EFFECTIVE: u32 = 1;
/// `BPF_CGROUP_MAX_PROGS`: no cgroup holds more programs per attach type.
pub const MAX_PROGS: usize = 64;
/// Tries of a query whose count keeps growing, and of an interrupted load.
const TRIES: usize = 5;

/// What a program's info says, for checks and log lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgInfo {
    /// `enum bpf_prog_type`.
    pub prog_type: u32,
    /// The kernel's id, as `bpftool prog` prints it.
    pub id: u32,
    /// Maps the program uses: a program with maps cannot be reloaded from its dump.
    pub nr_map_ids: u32,
    /// The program's name, lossy.
    pub name: String,
    /// The translated instructions, as the kernel dumps them.
    pub xlated: Vec<u8>,
}

/// The errno of a raw call (which always sets one).
fn errno(e: io::Error) -> Errno {
    e.raw_os_error().map_or(Errno::EIO, Errno::from_raw)
}

/// `BPF_PROG_QUERY`: the cgroup's attach flags and the ids of the programs of
/// `attach_type` attached to it (with `F_QUERY_EFFECTIVE`: that apply to it;
/// ancestors' add up to more than [`MAX_PROGS`], so the buffer grows).
pub fn prog_query(
    cgroup: BorrowedFd<'_>,
    attach_type: u32,
    query_flags: u32,
) -> Result<(u32, Vec<u32>), Errno> {
    let mut ids = vec![0u32; MAX_PROGS];
    for _ in 0..TRIES {
        let count = raw::prog_query(cgroup, attach_type, query_flags, &mut ids).map_err(errno)?;
        if count.total <= ids.len() {
            ids.truncate(count.total);
            return Ok((count.attach_flags, ids));
        }
        ids = vec![0u32; count.total];
    }
    // Programs were attached faster than we could list them.
    Err(Errno::ENOSPC)
}

/// `BPF_PROG_GET_FD_BY_ID`: a descriptor for program `id`.
pub fn prog_get_fd_by_id(id: u32) -> Result<ProgFd, Errno> {
    raw::prog_get_fd_by_id(id).map_err(errno)
}

/// `BPF_OBJ_GET_INFO_BY_FD` for the program's id alone, copying no instruction.
pub fn prog_id(prog: &ProgFd) -> Result<u32, Errno> {
    raw::prog_info(prog, &mut [])
        .map(|head| head.id)
        .map_err(errno)
}

/// `BPF_OBJ_GET_INFO_BY_FD`, twice: once for the sizes, once for the instructions.
pub fn prog_info(prog: &ProgFd) -> Result<ProgInfo, Errno> {
    let head = raw::prog_info(prog, &mut []).map_err(errno)?;
    let mut xlated = vec![0u8; head.xlated_len];
    let head = if xlated.is_empty() {
        head
    } else {
        let again = raw::prog_info(prog, &mut xlated).map_err(errno)?;
        // The program cannot change, but never trust a length twice.
        xlated.truncate(again.xlated_len);
        again
    };
    let name_len = head.name.iter().position(|&b| b == 0).unwrap_or(16);
    Ok(ProgInfo {
        prog_type: head.prog_type,
        id: head.id,
        nr_map_ids: head.nr_map_ids,
        name: String::from_utf8_lossy(&head.name[..name_len]).into_owned(),
        xlated,
    })
}

/// `BPF_PROG_LOAD`. With `log`, the verifier writes its log there (level 1).
pub fn prog_load(
    prog_type: u32,
    insns: &[u64],
    license: &CStr,
    name: &str,
    mut log: Option<&mut [u8]>,
) -> Result<ProgFd, Errno> {
    let mut prog_name = [0u8; 16];
    // At most 15 bytes, so the name stays NUL-terminated.
    for (dst, src) in prog_name.iter_mut().zip(name.bytes().take(15)) {
        *dst = src;
    }
    // The kernel asks for a retry when the verifier was interrupted.
    let mut tries = 1;
    loop {
        match raw::prog_load(prog_type, insns, license, prog_name, log.as_deref_mut()) {
            Err(e) if e.raw_os_error() == Some(Errno::EAGAIN as i32) && tries < TRIES => tries += 1,
            other => return other.map_err(errno),
        }
    }
}

/// `BPF_PROG_ATTACH` of `prog` to `cgroup`, replacing `replace` when given.
pub fn prog_attach(
    cgroup: BorrowedFd<'_>,
    prog: &ProgFd,
    attach_type: u32,
    flags: u32,
    replace: Option<&ProgFd>,
) -> Result<(), Errno> {
    raw::prog_attach(cgroup, prog, attach_type, flags, replace).map_err(errno)
}

/// `BPF_PROG_DETACH` of `prog` from `cgroup`.
pub fn prog_detach(cgroup: BorrowedFd<'_>, prog: &ProgFd, attach_type: u32) -> Result<(), Errno> {
    raw::prog_detach(cgroup, prog, attach_type).map_err(errno)
}

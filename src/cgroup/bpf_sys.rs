//! The raw `bpf(2)` calls the device cgroup needs, and nothing else.
//!
//! Owns every `unsafe` block of the cgroup module: each call passes one
//! `#[repr(C)]` prefix of the kernel's `union bpf_attr`, zero-filled, with its
//! own size (the kernel zero-extends shorter attrs, so these prefixes work on
//! old and new kernels alike). It must never hand out a raw fd it does not own,
//! and it adds no context to errors: callers name the command's operands.

#![allow(unsafe_code)]

use std::ffi::CStr;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::errno::Errno;
use nix::libc;

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

const CMD_PROG_LOAD: libc::c_int = 5;
const CMD_PROG_ATTACH: libc::c_int = 8;
const CMD_PROG_DETACH: libc::c_int = 9;
const CMD_PROG_GET_FD_BY_ID: libc::c_int = 13;
const CMD_OBJ_GET_INFO_BY_FD: libc::c_int = 15;
const CMD_PROG_QUERY: libc::c_int = 16;

/// `bpf_attr` for `BPF_PROG_LOAD`, up to `expected_attach_type`.
#[repr(C)]
#[derive(Default)]
struct LoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `bpf_attr` for `BPF_PROG_ATTACH` and `BPF_PROG_DETACH`, up to `replace_bpf_fd`.
#[repr(C)]
#[derive(Default)]
struct AttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

/// `bpf_attr` for `BPF_PROG_QUERY`, up to `prog_cnt` and its padding.
#[repr(C)]
#[derive(Default)]
struct QueryAttr {
    target_fd: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
    _pad: u32,
}

/// `bpf_attr` for `BPF_PROG_GET_FD_BY_ID`.
#[repr(C)]
#[derive(Default)]
struct GetFdAttr {
    prog_id: u32,
    next_id: u32,
    open_flags: u32,
}

/// `bpf_attr` for `BPF_OBJ_GET_INFO_BY_FD`.
#[repr(C)]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// `struct bpf_prog_info`, up to `name`.
#[repr(C)]
#[derive(Default)]
struct RawProgInfo {
    prog_type: u32,
    id: u32,
    tag: [u8; 8],
    jited_prog_len: u32,
    xlated_prog_len: u32,
    jited_prog_insns: u64,
    xlated_prog_insns: u64,
    load_time: u64,
    created_by_uid: u32,
    nr_map_ids: u32,
    map_ids: u64,
    name: [u8; 16],
}

// The kernel reads these at fixed offsets: a size change is a layout bug.
const _: () = assert!(size_of::<LoadAttr>() == 72);
const _: () = assert!(size_of::<AttachAttr>() == 20);
const _: () = assert!(size_of::<QueryAttr>() == 32);
const _: () = assert!(size_of::<GetFdAttr>() == 12);
const _: () = assert!(size_of::<InfoAttr>() == 16);
const _: () = assert!(size_of::<RawProgInfo>() == 80);

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

/// Calls `bpf(cmd, attr, sizeof attr)`.
fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> Result<libc::c_long, Errno> {
    // SAFETY: `attr` is a live, exclusively borrowed `#[repr(C)]` prefix of
    // `union bpf_attr` and the size passed is exactly its size; any pointers
    // inside it were set by the caller to buffers that outlive this call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            size_of::<T>() as libc::c_uint,
        )
    };
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

/// Wraps a file descriptor the kernel just returned to us.
fn owned(ret: libc::c_long) -> Result<OwnedFd, Errno> {
    let fd = libc::c_int::try_from(ret).map_err(|_| Errno::EOVERFLOW)?;
    // SAFETY: `bpf(2)` returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fd_u32(fd: BorrowedFd<'_>) -> u32 {
    // Descriptors are never negative; the kernel takes them as u32.
    fd.as_raw_fd() as u32
}

/// `BPF_PROG_QUERY`: the cgroup's attach flags and the ids of the programs of
/// `attach_type` attached to it (with `F_QUERY_EFFECTIVE`: that apply to it).
pub fn prog_query(
    cgroup: BorrowedFd<'_>,
    attach_type: u32,
    query_flags: u32,
) -> Result<(u32, Vec<u32>), Errno> {
    let mut ids = vec![0u32; MAX_PROGS];
    let mut attr = QueryAttr {
        target_fd: fd_u32(cgroup),
        attach_type,
        query_flags,
        prog_ids: ids.as_mut_ptr() as u64,
        prog_cnt: MAX_PROGS as u32,
        ..Default::default()
    };
    bpf(CMD_PROG_QUERY, &mut attr)?;
    ids.truncate((attr.prog_cnt as usize).min(MAX_PROGS));
    Ok((attr.attach_flags, ids))
}

/// `BPF_PROG_GET_FD_BY_ID`: a descriptor for program `id`.
pub fn prog_get_fd_by_id(id: u32) -> Result<OwnedFd, Errno> {
    let mut attr = GetFdAttr {
        prog_id: id,
        ..Default::default()
    };
    owned(bpf(CMD_PROG_GET_FD_BY_ID, &mut attr)?)
}

/// `BPF_OBJ_GET_INFO_BY_FD`, twice: once for the sizes, once for the instructions.
pub fn prog_info(prog: BorrowedFd<'_>) -> Result<ProgInfo, Errno> {
    let mut raw = RawProgInfo::default();
    get_info(prog, &mut raw)?;
    let mut xlated = vec![0u8; raw.xlated_prog_len as usize];
    if !xlated.is_empty() {
        let len = raw.xlated_prog_len;
        raw = RawProgInfo {
            xlated_prog_len: len,
            xlated_prog_insns: xlated.as_mut_ptr() as u64,
            ..Default::default()
        };
        get_info(prog, &mut raw)?;
        // The program cannot change, but never trust a length twice.
        xlated.truncate((raw.xlated_prog_len.min(len)) as usize);
    }
    let name_len = raw.name.iter().position(|&b| b == 0).unwrap_or(16);
    Ok(ProgInfo {
        prog_type: raw.prog_type,
        id: raw.id,
        nr_map_ids: raw.nr_map_ids,
        name: String::from_utf8_lossy(&raw.name[..name_len]).into_owned(),
        xlated,
    })
}

fn get_info(prog: BorrowedFd<'_>, raw: &mut RawProgInfo) -> Result<(), Errno> {
    let mut attr = InfoAttr {
        bpf_fd: fd_u32(prog),
        info_len: size_of::<RawProgInfo>() as u32,
        info: raw as *mut RawProgInfo as u64,
    };
    bpf(CMD_OBJ_GET_INFO_BY_FD, &mut attr).map(drop)
}

/// `BPF_PROG_LOAD`. With `log`, the verifier writes its log there (level 1).
pub fn prog_load(
    prog_type: u32,
    insns: &[u64],
    license: &CStr,
    name: &str,
    log: Option<&mut [u8]>,
) -> Result<OwnedFd, Errno> {
    let mut prog_name = [0u8; 16];
    // At most 15 bytes, so the name stays NUL-terminated.
    for (dst, src) in prog_name.iter_mut().zip(name.bytes().take(15)) {
        *dst = src;
    }
    let (log_level, log_size, log_buf) = match log {
        Some(buf) => (1, buf.len() as u32, buf.as_mut_ptr() as u64),
        None => (0, 0, 0),
    };
    let mut attr = LoadAttr {
        prog_type,
        insn_cnt: u32::try_from(insns.len()).map_err(|_| Errno::E2BIG)?,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level,
        log_size,
        log_buf,
        prog_name,
        ..Default::default()
    };
    // The kernel asks for a retry when the verifier was interrupted.
    let mut tries = 0;
    loop {
        match bpf(CMD_PROG_LOAD, &mut attr) {
            Err(Errno::EAGAIN) if tries < 5 => tries += 1,
            other => return owned(other?),
        }
    }
}

/// `BPF_PROG_ATTACH` of `prog` to `cgroup`, replacing `replace` when given.
pub fn prog_attach(
    cgroup: BorrowedFd<'_>,
    prog: BorrowedFd<'_>,
    attach_type: u32,
    flags: u32,
    replace: Option<BorrowedFd<'_>>,
) -> Result<(), Errno> {
    let mut attr = AttachAttr {
        target_fd: fd_u32(cgroup),
        attach_bpf_fd: fd_u32(prog),
        attach_type,
        attach_flags: flags,
        replace_bpf_fd: replace.map(fd_u32).unwrap_or(0),
    };
    bpf(CMD_PROG_ATTACH, &mut attr).map(drop)
}

/// `BPF_PROG_DETACH` of `prog` from `cgroup`.
pub fn prog_detach(
    cgroup: BorrowedFd<'_>,
    prog: BorrowedFd<'_>,
    attach_type: u32,
) -> Result<(), Errno> {
    let mut attr = AttachAttr {
        target_fd: fd_u32(cgroup),
        attach_bpf_fd: fd_u32(prog),
        attach_type,
        ..Default::default()
    };
    bpf(CMD_PROG_DETACH, &mut attr).map(drop)
}

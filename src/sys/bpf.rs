//! The raw `bpf(2)` commands the device cgroup needs, behind safe functions.
//!
//! Owns every `unsafe` block that talks `bpf(2)`: each command passes one
//! `#[repr(C)]` prefix of the kernel's `union bpf_attr`, zero-filled, with its
//! own size (the kernel zero-extends shorter attrs, so these prefixes work on
//! old and new kernels alike), and every pointer in it comes from a slice or
//! reference the caller lends for the call. It must never hand out a raw fd
//! it does not own, never keep a pointer past the call, and it decides
//! nothing: `crate::apply::cgroup`'s typed layer retries, names operands, and checks.

use std::ffi::CStr;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::libc;

const CMD_PROG_LOAD: libc::c_int = 5;
const CMD_PROG_ATTACH: libc::c_int = 8;
const CMD_PROG_DETACH: libc::c_int = 9;
const CMD_PROG_GET_FD_BY_ID: libc::c_int = 13;
const CMD_OBJ_GET_INFO_BY_FD: libc::c_int = 15;
const CMD_PROG_QUERY: libc::c_int = 16;

/// `bpf_attr` for `BPF_PROG_LOAD`, up to `expected_attach_type`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
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
#[derive(Clone, Copy, Default)]
struct AttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

/// `bpf_attr` for `BPF_PROG_QUERY`, up to `prog_cnt` and its padding.
#[repr(C)]
#[derive(Clone, Copy, Default)]
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
#[derive(Clone, Copy, Default)]
struct GetFdAttr {
    prog_id: u32,
    next_id: u32,
    open_flags: u32,
}

/// `bpf_attr` for `BPF_OBJ_GET_INFO_BY_FD`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// `struct bpf_prog_info`, up to `name`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
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

/// A descriptor known to be a BPF program: only this module makes them, so
/// [`prog_info`] can trust the kernel to read its attr as a program's.
#[derive(Debug)]
pub struct ProgFd(OwnedFd);

impl AsFd for ProgFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// What `BPF_PROG_QUERY` answered besides the ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryCount {
    /// The cgroup's attach flags (0 for an effective query).
    pub attach_flags: u32,
    /// How many programs there are; only the first `ids.len()` were written
    /// when this is larger.
    pub total: usize,
}

/// The fixed part of `struct bpf_prog_info`, without its pointers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgInfoHead {
    /// `enum bpf_prog_type`.
    pub prog_type: u32,
    /// The kernel's id.
    pub id: u32,
    /// The translated program's length in bytes; more than the buffer lent
    /// means the copy was cut at the buffer's end.
    pub xlated_len: usize,
    /// How many maps the program uses.
    pub nr_map_ids: u32,
    /// The name, NUL-padded.
    pub name: [u8; 16],
}

/// Bytes of zeroes after each attr. The kernel reads only the size passed,
/// but writes some answers (a query's `revision`, since 6.6) at their offset
/// in the full `union bpf_attr`, whatever size was passed; the union is well
/// under this (about 160 bytes in 6.18), so such writes land here.
const ATTR_ROOM: usize = 256;

/// An attr followed by room for the rest of the union.
#[repr(C)]
struct Padded<T> {
    attr: T,
    room: [u8; ATTR_ROOM],
}

/// Calls `bpf(cmd, attr, sizeof attr)` and copies back what the kernel wrote.
///
/// # Safety
/// `T` must be the `#[repr(C)]` prefix of `union bpf_attr` that `cmd` reads,
/// and every pointer in it must be null (with a zero length) or point to
/// memory valid for the length the attr gives, for writes where the kernel
/// writes, until this returns.
unsafe fn bpf<T: Copy>(cmd: libc::c_int, attr: &mut T) -> io::Result<libc::c_long> {
    let mut padded = Padded {
        attr: *attr,
        room: [0; ATTR_ROOM],
    };
    // SAFETY: the caller upholds the contract above for the pointers inside;
    // `padded` is a live, exclusively borrowed local, valid for the size
    // passed and for any write the kernel makes within the union's size.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            &mut padded as *mut Padded<T> as *mut libc::c_void,
            size_of::<T>() as libc::c_uint,
        )
    };
    let result = if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    };
    *attr = padded.attr;
    result
}

/// Wraps a file descriptor `bpf(2)` just returned to us.
fn owned(ret: libc::c_long) -> io::Result<OwnedFd> {
    let fd =
        libc::c_int::try_from(ret).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    // SAFETY: `bpf(2)` returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A borrowed descriptor as the kernel's `__u32` field.
fn fd_u32(fd: BorrowedFd<'_>) -> u32 {
    // Descriptors are never negative.
    fd.as_raw_fd() as u32
}

/// A slice length as a `__u32` count; longer slices are lent only in part.
fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// `BPF_PROG_QUERY`: writes the ids of the programs of `attach_type` attached
/// to `cgroup` (with `query_flags` 1, `BPF_F_QUERY_EFFECTIVE`: that apply to
/// it) into `ids`. A too-small `ids` is not an error: see [`QueryCount::total`].
pub fn prog_query(
    cgroup: BorrowedFd<'_>,
    attach_type: u32,
    query_flags: u32,
    ids: &mut [u32],
) -> io::Result<QueryCount> {
    let mut attr = QueryAttr {
        target_fd: fd_u32(cgroup),
        attach_type,
        query_flags,
        prog_ids: if ids.is_empty() {
            0
        } else {
            ids.as_mut_ptr() as u64
        },
        prog_cnt: len_u32(ids.len()),
        ..Default::default()
    };
    // SAFETY: `QueryAttr` is the attr `BPF_PROG_QUERY` reads; `prog_ids` is
    // null or `ids`, writable for the `prog_cnt` u32s given.
    match unsafe { bpf(CMD_PROG_QUERY, &mut attr) } {
        Ok(_) => {}
        // The kernel wrote as many ids as fit and the real count into `prog_cnt`.
        Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {}
        Err(e) => return Err(e),
    }
    Ok(QueryCount {
        attach_flags: attr.attach_flags,
        total: attr.prog_cnt as usize,
    })
}

/// `BPF_PROG_GET_FD_BY_ID`: a descriptor for program `id`.
pub fn prog_get_fd_by_id(id: u32) -> io::Result<ProgFd> {
    let mut attr = GetFdAttr {
        prog_id: id,
        ..Default::default()
    };
    // SAFETY: `GetFdAttr` is the attr this command reads; it holds no pointers.
    owned(unsafe { bpf(CMD_PROG_GET_FD_BY_ID, &mut attr) }?).map(ProgFd)
}

/// `BPF_OBJ_GET_INFO_BY_FD` on a program, copying as much of its translated
/// instructions as fit into `xlated` (none when it is empty).
pub fn prog_info(prog: &ProgFd, xlated: &mut [u8]) -> io::Result<ProgInfoHead> {
    let mut raw = RawProgInfo {
        xlated_prog_len: len_u32(xlated.len()),
        xlated_prog_insns: if xlated.is_empty() {
            0
        } else {
            xlated.as_mut_ptr() as u64
        },
        ..Default::default()
    };
    let mut attr = InfoAttr {
        bpf_fd: fd_u32(prog.as_fd()),
        info_len: size_of::<RawProgInfo>() as u32,
        info: &mut raw as *mut RawProgInfo as u64,
    };
    // SAFETY: `InfoAttr` is the attr this command reads, and `prog` is a
    // program, so the kernel reads `raw` as `bpf_prog_info` (links and BTF
    // objects would read other pointers in it); `info` points to `raw`, writable for the `info_len` bytes given, and the only pointer in
    // `raw` is null or `xlated`, writable for `xlated_prog_len` bytes. Every
    // other length in `raw` is zero, so the kernel writes nothing else.
    unsafe { bpf(CMD_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(ProgInfoHead {
        prog_type: raw.prog_type,
        id: raw.id,
        xlated_len: raw.xlated_prog_len as usize,
        nr_map_ids: raw.nr_map_ids,
        name: raw.name,
    })
}

/// `BPF_PROG_LOAD` of `insns` (encoded `struct bpf_insn`s); with `log`, the
/// verifier writes its log there (level 1).
pub fn prog_load(
    prog_type: u32,
    insns: &[u64],
    license: &CStr,
    name: [u8; 16],
    log: Option<&mut [u8]>,
) -> io::Result<ProgFd> {
    let (log_level, log_size, log_buf) = match log {
        Some(buf) if !buf.is_empty() => (1, len_u32(buf.len()), buf.as_mut_ptr() as u64),
        _ => (0, 0, 0),
    };
    let insn_cnt =
        u32::try_from(insns.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?;
    let mut attr = LoadAttr {
        prog_type,
        insn_cnt,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level,
        log_size,
        log_buf,
        prog_name: name,
        ..Default::default()
    };
    // SAFETY: `LoadAttr` is the attr this command reads; `insns` points to
    // `insn_cnt` readable 8-byte instructions, `license` to a NUL-terminated
    // string, and `log_buf` is null (size 0) or the lent buffer, writable for
    // `log_size` bytes. The name is inline.
    owned(unsafe { bpf(CMD_PROG_LOAD, &mut attr) }?).map(ProgFd)
}

/// `BPF_PROG_ATTACH` of `prog` to `cgroup`, replacing `replace` when given.
pub fn prog_attach(
    cgroup: BorrowedFd<'_>,
    prog: &ProgFd,
    attach_type: u32,
    flags: u32,
    replace: Option<&ProgFd>,
) -> io::Result<()> {
    let mut attr = AttachAttr {
        target_fd: fd_u32(cgroup),
        attach_bpf_fd: fd_u32(prog.as_fd()),
        attach_type,
        attach_flags: flags,
        replace_bpf_fd: replace.map_or(0, |r| fd_u32(r.as_fd())),
    };
    // SAFETY: `AttachAttr` is the attr this command reads; it holds only
    // descriptors borrowed for the call, no pointers.
    unsafe { bpf(CMD_PROG_ATTACH, &mut attr) }.map(drop)
}

/// `BPF_PROG_DETACH` of `prog` from `cgroup`.
pub fn prog_detach(cgroup: BorrowedFd<'_>, prog: &ProgFd, attach_type: u32) -> io::Result<()> {
    let mut attr = AttachAttr {
        target_fd: fd_u32(cgroup),
        attach_bpf_fd: fd_u32(prog.as_fd()),
        attach_type,
        ..Default::default()
    };
    // SAFETY: as for `prog_attach`: descriptors only, no pointers.
    unsafe { bpf(CMD_PROG_DETACH, &mut attr) }.map(drop)
}

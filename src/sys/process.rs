//! Processes: a forked child that runs one closure and exits, and whether a
//! process held by a pidfd still exists. Neither waits for, signals nor
//! kills anything: timeouts and reaping are the caller's.

use std::ffi::{c_char, c_int, CStr, OsString};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStringExt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use nix::errno::Errno;
use nix::libc;
use nix::unistd::{fork, ForkResult, Pid};

/// Leaves a set-group-ID start. The shipped binary is static and needs no
/// set-ID bit (docs/design.md); an earlier one was installed set-group-ID
/// to an unprivileged group so that the kernel started it in glibc's secure
/// mode, and an administrator may still set the bit. Nothing of that group
/// is wanted: the real group is taken back as effective and saved group
/// too, and the process made dumpable again, as the kernel's set-ID start
/// left it not, so that its `/proc/self` is its caller's. A no-op for a
/// binary that was not started set-group-ID.
pub fn leave_set_group_start() -> io::Result<()> {
    let real = nix::unistd::getgid();
    if nix::unistd::getegid() == real {
        return Ok(());
    }
    nix::unistd::setresgid(real, real, real)?;
    nix::sys::prctl::set_dumpable(true)?;
    Ok(())
}

/// `main`'s `argv`, as the C runtime passes it: only the C runtime makes one
/// (it is the type of the binary's C `main`'s parameter, and has no
/// constructor), so [`args`] can read it without an `unsafe` caller.
#[repr(transparent)]
pub struct Argv(*const *const c_char);

/// The command line as the C runtime handed it to `main`. The binary has
/// its own C `main` (`#![no_main]`), and only glibc also gives std the
/// arguments before `main` runs; a static musl build has them from here
/// alone, so every build reads them here.
pub fn args(argc: c_int, argv: Argv) -> Vec<OsString> {
    let count = usize::try_from(argc).unwrap_or(0);
    let mut args = Vec::with_capacity(count);
    for i in 0..count {
        // SAFETY: an `Argv` is the C runtime's own: `argc` pointers to C
        // strings that live as long as the process, then a NULL.
        let arg = unsafe { *argv.0.add(i) };
        if arg.is_null() {
            break;
        }
        // SAFETY: as above.
        let bytes = unsafe { CStr::from_ptr(arg) }.to_bytes();
        args.push(OsString::from_vec(bytes.to_vec()));
    }
    args
}

/// Replaces this process (a forked child) by the program `image`, an
/// executable's bytes, run with `args` (its `argv[1..]`) from a sealed memfd:
/// an empty environment, `/` as working directory, and `stdout` as its
/// standard output. Returns only if that fails, with why.
///
/// The static binary carries its one dynamically linked helper this way
/// (the driver helper, `probe/`): nothing is written to disk, and no variable of the
/// caller's reaches the helper's loader.
pub fn exec_image(image: &[u8], args: &[&CStr], stdout: BorrowedFd<'_>) -> io::Error {
    match exec_image_or_fail(image, args, stdout) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

fn exec_image_or_fail(
    image: &[u8],
    args: &[&CStr],
    stdout: BorrowedFd<'_>,
) -> io::Result<std::convert::Infallible> {
    use rustix::fs::{fcntl_add_seals, memfd_create, MemfdFlags, SealFlags};
    let memfd = memfd_create(
        c"oci-nvidia-hook-probe",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    std::fs::File::from(memfd.try_clone()?).write_all(image)?;
    fcntl_add_seals(
        &memfd,
        SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
    )?;
    rustix::process::chdir("/")?;
    let mut argv: Vec<*const c_char> = Vec::with_capacity(args.len() + 2);
    argv.push(c"oci-nvidia-hook-probe".as_ptr());
    argv.extend(args.iter().map(|a| a.as_ptr()));
    argv.push(std::ptr::null());
    let envp: [*const c_char; 1] = [std::ptr::null()];
    // SAFETY: dup2 onto descriptor 1 of two valid descriptors; the borrowed
    // `stdout` outlives the call.
    if unsafe { libc::dup2(stdout.as_raw_fd(), 1) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: execveat(memfd, "", argv, envp, AT_EMPTY_PATH): `memfd` is a
    // live descriptor, the path an empty C string, and both vectors are
    // NULL-terminated arrays of C strings that live until the call returns
    // (it returns only on failure).
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            memfd.as_raw_fd(),
            c"".as_ptr(),
            argv.as_ptr(),
            envp.as_ptr(),
            libc::AT_EMPTY_PATH,
        );
    }
    Err(io::Error::last_os_error())
}

/// Forks a child that closes every descriptor but stdio and `keep`, runs
/// `child` and leaves with `_exit` and its status (101 if it panics); the
/// parent gets the child's pid. Driver code run in the child thus reaches
/// none of the hook's descriptors, and never returns into the hook's code.
///
/// Call it only while the process is single-threaded (the hook always is),
/// with a `child` that uses no descriptor it captured but `keep`.
pub(crate) fn fork_and_run<F: FnOnce() -> i32>(keep: BorrowedFd<'_>, child: F) -> io::Result<Pid> {
    // SAFETY: after fork the child has only this thread. Its copy of the
    // process is consistent where no other thread existed (the hook); in the
    // test harness, which has others, the child only allocates and writes to
    // a pipe, and glibc's fork handlers reset malloc's locks for it. The
    // child never returns from this function, so no caller's code runs twice.
    match unsafe { fork() }? {
        ForkResult::Child => {
            // A child that could not close the hook's descriptors runs no
            // driver code: it reports a status the caller counts as failure.
            let status = if close_all_but(keep.as_raw_fd()) {
                catch_unwind(AssertUnwindSafe(child)).unwrap_or(101)
            } else {
                CLOSE_FAILED
            };
            // SAFETY: `_exit` ends the child at once; unlike `exit`, it runs
            // none of the parent's atexit handlers or destructors on the
            // child's copy of its state.
            unsafe { libc::_exit(status) }
        }
        ForkResult::Parent { child } => Ok(child),
    }
}

/// The child's status when it could not close the hook's descriptors.
const CLOSE_FAILED: i32 = 126;

/// Closes every descriptor of the child but stdio and `keep`; false if that
/// could not be done. On kernels without `close_range(2)` (before 5.9:
/// RHEL 8's 4.18) each descriptor up to the soft `RLIMIT_NOFILE` (at most
/// 2^20) is closed instead.
fn close_all_but(keep: i32) -> bool {
    let keep = keep as libc::c_uint;
    let ranges = [(3, keep.saturating_sub(1)), (keep + 1, libc::c_uint::MAX)];
    for (first, last) in ranges {
        if first > last {
            continue;
        }
        // SAFETY: only called in the forked child, which then runs nothing
        // but `fork_and_run`'s closure (using no descriptor but `keep` and
        // stdio) and `_exit`: the owners of the closed descriptors, in the
        // child's copy of the caller's frames, never run again to use or
        // close them. The call takes plain integers.
        let ret = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0) };
        if ret == 0 {
            continue;
        }
        if Errno::last() != Errno::ENOSYS {
            return false;
        }
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(1 << 20);
        let end = soft.min(u64::from(last) + 1).min(1 << 20);
        for fd in u64::from(first)..end {
            // SAFETY: as above; closing a descriptor that is not open
            // fails with EBADF and changes nothing.
            unsafe { libc::close(fd as i32) };
        }
    }
    true
}

/// What tells that a process is still the one checked, across a window in
/// which its pid could come to name another: a pidfd (Linux 5.3), else the
/// start time `/proc/<pid>/stat` gave when it was checked, since a pid and
/// a start time together name one process.
#[derive(Debug, Clone, Copy)]
pub enum Hold<'a> {
    /// A pidfd of the process.
    Pidfd(BorrowedFd<'a>),
    /// Its start time, in clock ticks since boot.
    Started(u64),
}

/// Whether the process `hold` holds is still process `pid` of `proc`.
pub fn is_held(proc: &std::path::Path, pid: u32, hold: Hold<'_>) -> io::Result<bool> {
    match hold {
        Hold::Pidfd(fd) => pidfd_is_alive(fd),
        Hold::Started(then) => Ok(start_time(proc, pid)? == Some(then)),
    }
}

/// The start time of process `pid` of `proc` (the 22nd field of its
/// `stat`), or `None` where there is no such process.
pub fn start_time(proc: &std::path::Path, pid: u32) -> io::Result<Option<u64>> {
    use std::io::Read;
    let path = proc.join(pid.to_string()).join("stat");
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    // A stat line is some 300 bytes; its command name at most 64.
    let mut stat = String::new();
    match file.take(4096).read_to_string(&mut stat) {
        Ok(_) => {}
        // The process went away between the open and the read.
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(None),
        Err(e) => return Err(e),
    }
    stat_start_time(&stat)
        .map(Some)
        .ok_or_else(|| io::Error::other(format!("{}: no start time in it", path.display())))
}

/// The start time in a `/proc/<pid>/stat` line; the command name before it
/// may hold spaces and parentheses, so fields count from the last `)`.
fn stat_start_time(stat: &str) -> Option<u64> {
    // After the name: state is field 3, start time field 22.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// Whether the process `pidfd` refers to still exists (not yet reaped), by
/// `pidfd_send_signal(pidfd, 0)`, which sends nothing. While it does, its
/// pid cannot name another process, so what was read under `/proc/<pid>`
/// since the pidfd was opened was about it.
pub fn pidfd_is_alive(pidfd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: signal 0 sends nothing; a null siginfo with flags 0 is the
    // documented plain form, and the borrowed descriptor stays open for the
    // call. Nothing is read or written through a pointer.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if ret == 0 {
        return Ok(true);
    }
    match Errno::last() {
        Errno::ESRCH => Ok(false),
        // Not allowed to signal it (after switching to a container's
        // user), but that needs a process to refuse.
        Errno::EPERM => Ok(true),
        errno => Err(errno.into()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_process_is_held_by_its_start_time() {
        let line =
            "42 (runc:[2:INIT]) S 41 42 1 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 123456 1000 10";
        assert_eq!(super::stat_start_time(line), Some(123456));
        assert_eq!(super::stat_start_time("7 (a) b) (c) R 3"), None);
        let proc = std::path::Path::new("/proc");
        let me = std::process::id();
        let started = super::start_time(proc, me).unwrap().unwrap();
        assert!(super::is_held(proc, me, super::Hold::Started(started)).unwrap());
        assert!(!super::is_held(proc, me, super::Hold::Started(started + 1)).unwrap());
        assert!(!super::is_held(proc, 999_999_999, super::Hold::Started(started)).unwrap());
    }

    use std::os::fd::AsFd;

    use nix::sys::wait::waitpid;
    use rustix::process::{pidfd_open, PidfdFlags};

    use super::*;

    fn pidfd(pid: Pid) -> std::os::fd::OwnedFd {
        pidfd_open(
            rustix::process::Pid::from_raw(pid.as_raw()).unwrap(),
            PidfdFlags::empty(),
        )
        .unwrap()
    }

    #[test]
    fn a_pidfd_of_a_running_process_is_alive() {
        let ours = pidfd(nix::unistd::getpid());
        assert!(pidfd_is_alive(ours.as_fd()).unwrap());
    }

    #[test]
    fn a_pidfd_outlives_its_reaped_process_and_says_so() {
        let (reader, writer) = std::io::pipe().unwrap();
        let child = fork_and_run(writer.as_fd(), || 0).unwrap();
        let held = pidfd(child);
        drop((reader, writer));
        waitpid(child, None).unwrap();
        assert!(!pidfd_is_alive(held.as_fd()).unwrap());
    }

    #[test]
    fn a_panicking_child_exits_with_101_and_never_returns() {
        let (_reader, writer) = std::io::pipe().unwrap();
        let child = fork_and_run(writer.as_fd(), || panic!("in the child")).unwrap();
        let status = waitpid(child, None).unwrap();
        assert_eq!(
            status,
            nix::sys::wait::WaitStatus::Exited(child, 101),
            "{status:?}"
        );
    }
}

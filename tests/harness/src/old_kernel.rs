//! Old kernels, played by a seccomp filter: the system calls a kernel
//! before some version lacks fail with `ENOSYS` in the process started
//! (and in everything it starts), so that each fallback the hook takes on
//! such a kernel runs here, on a new one.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// A kernel older than some version, by the system calls it lacks.
#[derive(Debug, Clone, Copy)]
pub struct OldKernel {
    /// What it stands for, for messages.
    pub name: &'static str,
    /// The system calls that fail with `ENOSYS`, in groups.
    pub missing: &'static [&'static [libc::c_long]],
}

const OPENAT2: &[libc::c_long] = &[libc::SYS_openat2];
const STATX: &[libc::c_long] = &[libc::SYS_statx];
const MOUNT_API: &[libc::c_long] = &[
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
];
const PIDFD: &[libc::c_long] = &[
    libc::SYS_pidfd_open,
    libc::SYS_pidfd_send_signal,
    libc::SYS_pidfd_getfd,
];

/// No `openat2` (before 5.6): paths resolve by `pathrs`'s emulation.
pub const NO_OPENAT2: OldKernel = OldKernel {
    name: "no openat2 (Linux < 5.6)",
    missing: &[OPENAT2],
};

/// No `statx` (before 4.11), so no mount-root attribute (5.8) either.
pub const NO_STATX: OldKernel = OldKernel {
    name: "no statx mount-root attribute (Linux < 5.8)",
    missing: &[STATX],
};

/// No new mount API (before 5.2; `mount_setattr` before 5.12).
pub const NO_MOUNT_API: OldKernel = OldKernel {
    name: "no new mount API (Linux < 5.2)",
    missing: &[MOUNT_API],
};

/// No pidfds (before 5.3).
pub const NO_PIDFD: OldKernel = OldKernel {
    name: "no pidfds (Linux < 5.3)",
    missing: &[PIDFD],
};

/// All of them at once, and `close_range` (5.9): a 4.x kernel.
pub const LINUX_4: OldKernel = OldKernel {
    name: "none of them (Linux 4.x)",
    missing: &[OPENAT2, STATX, MOUNT_API, PIDFD, &[libc::SYS_close_range]],
};

/// Every old kernel played here.
pub const OLD_KERNELS: [OldKernel; 5] = [NO_OPENAT2, NO_STATX, NO_MOUNT_API, NO_PIDFD, LINUX_4];

/// The audit architecture seccomp reports for this machine's system calls.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// One classic BPF instruction (`struct sock_filter`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct SockFilter {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;

/// The filter: this architecture's calls in `missing` fail with `ENOSYS`,
/// everything else is allowed.
fn filter(missing: &[&[libc::c_long]]) -> Vec<SockFilter> {
    let missing: Vec<libc::c_long> = missing.concat();
    let n = u8::try_from(missing.len()).expect("fewer than 256 system calls");
    let op = |code, jt, jf, k| SockFilter { code, jt, jf, k };
    let mut program = vec![
        op(LD_W_ABS, 0, 0, ARCH),
        // Another architecture's call: allowed (past the checks).
        op(JEQ_K, 0, n + 1, AUDIT_ARCH),
        op(LD_W_ABS, 0, 0, NR),
    ];
    for (k, nr) in missing.iter().enumerate() {
        let k = k as u8;
        program.push(op(JEQ_K, n - k, 0, *nr as u32));
    }
    program.push(op(RET_K, 0, 0, RET_ALLOW));
    program.push(op(RET_K, 0, 0, RET_ERRNO | libc::ENOSYS as u32));
    program
}

/// Makes `cmd` start its program as on `kernel`: a seccomp filter is
/// installed in the child before it executes the program (as root, no
/// `no_new_privs` is needed, so the program runs exactly as it would).
pub fn play(cmd: &mut Command, kernel: OldKernel) {
    let program = filter(kernel.missing);
    // SAFETY: the closure runs in the forked child before exec and makes
    // one prctl call on data built before the fork; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: program.len() as u16,
                filter: program.as_ptr() as *mut libc::sock_filter,
            };
            let ret = libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &prog as *const libc::sock_fprog,
            );
            if ret == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A filtered child runs in seccomp's filter mode, and a program that
    /// falls back without statx (coreutils' stat) still works.
    #[test]
    fn a_played_kernel_filters_the_child() {
        if !nix::unistd::geteuid().is_root() {
            panic!("needs root (CAP_SYS_ADMIN) to install a filter without no_new_privs");
        }
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "stat / >/dev/null && cat /proc/self/status"]);
        play(&mut cmd, NO_STATX);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let status = String::from_utf8_lossy(&out.stdout);
        assert!(
            status
                .lines()
                .any(|l| l.starts_with("Seccomp:") && l.ends_with('2')),
            "{status}"
        );
    }
}

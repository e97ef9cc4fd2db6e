//! cgroup v2: extends the device programs already attached to a cgroup.
//!
//! Every attached `BPF_CGROUP_DEVICE` program must allow an access, so adding
//! one of ours could only restrict. Instead each attached program is reloaded
//! with our allow block in front of its own instructions and swapped in for
//! the old one. This must never leave the cgroup less restricted than the old
//! programs plus our rules, never attach a program when none was attached
//! (nothing restricts then), and load once per old program, not per device.

#![forbid(unsafe_code)]

use std::ffi::CStr;
use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;

use super::bpf_sys::{self, CGROUP_DEVICE, F_ALLOW_MULTI, F_REPLACE, PROG_TYPE_CGROUP_DEVICE};
use super::discovery::CgroupDir;
use super::program::{self, Insn};
use super::{Error, Result};
use crate::plan::CgroupRule;

const LICENSE: &CStr = c"Apache-2.0";
/// What `bpftool prog` shows for our programs.
const PROG_NAME: &str = "oci_nvidia_dev";
/// Room for the verifier's log when a load fails; the tail is what matters.
const LOG_SIZE: usize = 256 * 1024;
const LOG_TAIL: usize = 4096;

/// Grants `rules` in `dir`; returns how many attached programs were replaced,
/// 0 when none is attached (the cgroup does not restrict devices).
pub fn allow(dir: &CgroupDir, rules: &[CgroupRule]) -> Result<usize> {
    let cgroup_err = |cmd: &'static str| {
        move |errno| Error::BpfCgroup {
            cmd,
            path: dir.path.clone(),
            errno,
        }
    };
    let (flags, ids) = match bpf_sys::prog_query(dir.fd.as_fd(), CGROUP_DEVICE, 0) {
        // Without bpf(2) no program can be attached.
        Err(Errno::ENOSYS) => return Ok(0),
        other => other.map_err(cgroup_err("BPF_PROG_QUERY"))?,
    };
    if ids.is_empty() {
        return Ok(0);
    }
    warn_about_ancestors(dir, ids.len());

    let block = program::allow_block(rules)
        .map_err(|(rule, reason)| Error::UnsupportedRule { rule, reason })?;
    for &id in &ids {
        let new_id = replace(dir, flags, id, &block)?;
        log::debug!(
            "{}: device program {id} replaced by {new_id} ({} rules in front)",
            dir.path.display(),
            rules.len()
        );
    }
    Ok(ids.len())
}

/// Ancestors' programs run too and we leave them alone: say so when they exist.
fn warn_about_ancestors(dir: &CgroupDir, own: usize) {
    let flags = bpf_sys::F_QUERY_EFFECTIVE;
    if let Ok((_, effective)) = bpf_sys::prog_query(dir.fd.as_fd(), CGROUP_DEVICE, flags) {
        if effective.len() > own {
            log::warn!(
                "{}: {} device programs of ancestor cgroups also apply and are not extended",
                dir.path.display(),
                effective.len() - own
            );
        }
    }
}

/// Reloads program `id` with `block` in front and swaps it in; returns the new id.
fn replace(dir: &CgroupDir, flags: u32, id: u32, block: &[Insn]) -> Result<u32> {
    let prog_err = |cmd: &'static str| {
        move |errno| Error::BpfProgram {
            cmd,
            id,
            path: dir.path.clone(),
            errno,
        }
    };
    let not_reusable = |reason: &str| Error::ProgramNotReusable {
        id,
        path: dir.path.clone(),
        reason: reason.to_string(),
    };

    let old_fd = bpf_sys::prog_get_fd_by_id(id).map_err(prog_err("BPF_PROG_GET_FD_BY_ID"))?;
    let info = bpf_sys::prog_info(old_fd.as_fd()).map_err(prog_err("BPF_OBJ_GET_INFO_BY_FD"))?;
    if info.prog_type != PROG_TYPE_CGROUP_DEVICE {
        return Err(not_reusable(&format!(
            "it is of program type {}, not cgroup_device",
            info.prog_type
        )));
    }
    if info.nr_map_ids > 0 {
        return Err(not_reusable("it uses maps"));
    }
    if info.xlated.is_empty() {
        return Err(not_reusable(
            "the kernel hid its instructions (needs CAP_BPF or CAP_SYS_ADMIN)",
        ));
    }
    let old = program::decode(&info.xlated)
        .ok_or_else(|| not_reusable("its dump is not whole instructions"))?;
    program::check_reusable(&old).map_err(not_reusable)?;
    log::debug!(
        "{}: extending device program {id} ({:?}, {} instructions)",
        dir.path.display(),
        info.name,
        old.len()
    );

    let insns = program::encode(&program::prepend(block, &old));
    let new_fd = load(dir, id, &insns)?;
    attach(dir, flags, id, &old_fd, &new_fd)?;
    Ok(bpf_sys::prog_info(new_fd.as_fd()).map_or(0, |i| i.id))
}

/// Loads the extended program; on failure, loads again to get the verifier's log.
fn load(dir: &CgroupDir, id: u32, insns: &[u64]) -> Result<OwnedFd> {
    let load = |log| bpf_sys::prog_load(PROG_TYPE_CGROUP_DEVICE, insns, LICENSE, PROG_NAME, log);
    match load(None) {
        Ok(fd) => Ok(fd),
        Err(errno) => {
            let mut buf = vec![0u8; LOG_SIZE];
            // The second try may even succeed (a transient error); keep it then.
            if let Ok(fd) = load(Some(&mut buf)) {
                return Ok(fd);
            }
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            let start = end.saturating_sub(LOG_TAIL);
            Err(Error::Load {
                id,
                path: dir.path.clone(),
                errno,
                log: String::from_utf8_lossy(&buf[start..end])
                    .trim_end()
                    .to_string(),
            })
        }
    }
}

/// Puts `new` in place of `old` in the cgroup, in one step where the kernel can.
fn attach(dir: &CgroupDir, flags: u32, id: u32, old: &OwnedFd, new: &OwnedFd) -> Result<()> {
    let cg = dir.fd.as_fd();
    let err = |cmd: &'static str| {
        move |errno| Error::BpfProgram {
            cmd,
            id,
            path: dir.path.clone(),
            errno,
        }
    };
    if flags & F_ALLOW_MULTI == 0 {
        // A cgroup without `multi` holds one program, and attaching another
        // with the same flags swaps it atomically.
        return bpf_sys::prog_attach(cg, new.as_fd(), CGROUP_DEVICE, flags, None)
            .map_err(err("BPF_PROG_ATTACH"));
    }
    let replace = F_ALLOW_MULTI | F_REPLACE;
    match bpf_sys::prog_attach(cg, new.as_fd(), CGROUP_DEVICE, replace, Some(old.as_fd())) {
        Ok(()) => Ok(()),
        // Before 5.6 BPF_F_REPLACE is an unknown flag. Attaching first and
        // detaching second only ever makes the window more restrictive.
        Err(Errno::EINVAL) => {
            log::debug!(
                "{}: no BPF_F_REPLACE; attach, then detach",
                dir.path.display()
            );
            bpf_sys::prog_attach(cg, new.as_fd(), CGROUP_DEVICE, F_ALLOW_MULTI, None)
                .map_err(err("BPF_PROG_ATTACH"))?;
            bpf_sys::prog_detach(cg, old.as_fd(), CGROUP_DEVICE).map_err(err("BPF_PROG_DETACH"))
        }
        Err(errno) => Err(err("BPF_PROG_ATTACH (BPF_F_REPLACE)")(errno)),
    }
}

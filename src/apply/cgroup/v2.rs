//! cgroup v2: extends the device programs already attached to a cgroup.
//!
//! Every attached `BPF_CGROUP_DEVICE` program must allow an access, so adding
//! one of ours could only restrict. Instead each attached program is reloaded
//! with our allow block in front of its own instructions and swapped in for
//! the old one. This must never leave the cgroup less restricted than the old
//! programs plus our rules, never attach a program when none was attached
//! (nothing restricts then), and load once per old program, not per device.
//!
//! The programs of ancestor cgroups apply too and are not ours to change: a
//! grant they deny is refused, naming the ancestor, before anything changes.

#![forbid(unsafe_code)]

use std::ffi::CStr;
use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

use super::bpf_sys::{
    self, ProgFd, CGROUP_DEVICE, F_ALLOW_MULTI, F_QUERY_EFFECTIVE, F_REPLACE,
    PROG_TYPE_CGROUP_DEVICE,
};
use super::discovery::CgroupDir;
use super::eval;
use super::program::{self, Insn};
use super::{Ancestor, Error, Result};
use crate::planning::plan::CgroupRule;

const LICENSE: &CStr = c"Apache-2.0";
/// What `bpftool prog` shows for our programs.
const PROG_NAME: &str = "oci_nvidia_dev";
/// Room for the verifier's log when a load fails; the tail is what matters.
const LOG_SIZE: usize = 256 * 1024;
const LOG_TAIL: usize = 4096;

/// What granting in one cgroup2 directory came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// No device program applies to the cgroup: nothing restricts it.
    Unrestricted,
    /// The cgroup's own `replaced` programs were extended; the programs of
    /// its ancestors that apply too, if any, already allow every rule.
    Extended { replaced: usize },
    /// The cgroup has no program of its own, and the `programs` of its
    /// ancestors that apply already allow every rule: nothing was changed.
    AllowedAbove { programs: usize },
}

/// A point in the swap of a cgroup's only program (no `BPF_F_ALLOW_MULTI`)
/// where a test acts as a runtime racing with the hook would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The extended program is loaded; the last check of the attached one is next.
    BeforeRecheck,
    /// The extended program was just attached; the check that it is still there is next.
    AfterAttach,
}

/// Grants `rules` in `dir`, or fails when a program that applies to it
/// denies them and cannot be extended.
pub fn allow(dir: &CgroupDir, rules: &[CgroupRule]) -> Result<Grant> {
    allow_observed(dir, rules, &mut |_| {})
}

/// [`allow`], calling `observe` at each [`Step`] of a swap.
pub fn allow_observed(
    dir: &CgroupDir,
    rules: &[CgroupRule],
    observe: &mut dyn FnMut(Step),
) -> Result<Grant> {
    let cgroup_err = |cmd: &'static str| {
        move |errno| Error::BpfCgroup {
            cmd,
            path: dir.path.clone(),
            errno,
        }
    };
    let (flags, own) = match bpf_sys::prog_query(dir.fd.as_fd(), CGROUP_DEVICE, 0) {
        // Without bpf(2) no program can be attached.
        Err(Errno::ENOSYS) => return Ok(Grant::Unrestricted),
        other => other.map_err(cgroup_err("BPF_PROG_QUERY"))?,
    };
    // Every program that applies must allow an access: the cgroup's own, and
    // its ancestors' unless a nearer program overrides them (the kernel
    // computes that list; `multi` ancestors always stay in it).
    let (_, effective) = bpf_sys::prog_query(dir.fd.as_fd(), CGROUP_DEVICE, F_QUERY_EFFECTIVE)
        .map_err(cgroup_err("BPF_PROG_QUERY (BPF_F_QUERY_EFFECTIVE)"))?;
    let above = without(&effective, &own);
    if own.is_empty() && above.is_empty() {
        return Ok(Grant::Unrestricted);
    }

    let block = program::allow_block(rules)
        .map_err(|(rule, reason)| Error::UnsupportedRule { rule, reason })?;
    // Ours, attached here, cannot make an ancestor's program allow: those
    // must allow already. Checked first, so a refusal changes nothing.
    for &id in &above {
        if let Err(reason) = ancestor_allows(id, rules) {
            return Err(Error::AncestorRestricts {
                ancestor: locate(dir, id),
                path: dir.path.clone(),
                id,
                reason,
            });
        }
    }
    if !above.is_empty() {
        log::debug!(
            "{}: {} device program(s) of ancestors apply and already allow the rules",
            dir.path.display(),
            above.len()
        );
    }
    if own.is_empty() {
        return Ok(Grant::AllowedAbove {
            programs: above.len(),
        });
    }
    for &id in &own {
        let new_id = replace(dir, flags, id, &block, observe)?;
        log::debug!(
            "{}: device program {id} replaced by {new_id} ({} rules in front)",
            dir.path.display(),
            rules.len()
        );
    }
    Ok(Grant::Extended {
        replaced: own.len(),
    })
}

/// `effective` less one occurrence of each of `own`: the ancestors' programs
/// (one program may be attached at several levels, and then runs at each).
fn without(effective: &[u32], own: &[u32]) -> Vec<u32> {
    let mut rest = effective.to_vec();
    for id in own {
        if let Some(at) = rest.iter().position(|e| e == id) {
            rest.remove(at);
        }
    }
    rest
}

/// Whether ancestor program `id` allows every access `rules` grant; if not, why.
fn ancestor_allows(id: u32, rules: &[CgroupRule]) -> std::result::Result<(), String> {
    let fd = bpf_sys::prog_get_fd_by_id(id)
        .map_err(|e| format!("cannot be read: BPF_PROG_GET_FD_BY_ID: {e}"))?;
    let info = bpf_sys::prog_info(&fd)
        .map_err(|e| format!("cannot be read: BPF_OBJ_GET_INFO_BY_FD: {e}"))?;
    if info.xlated.is_empty() {
        return Err(
            "cannot be read: the kernel hid its instructions (needs CAP_BPF or CAP_SYS_ADMIN)"
                .to_string(),
        );
    }
    let insns = program::decode(&info.xlated)
        .ok_or("cannot be read: its dump is not whole instructions")?;
    for rule in rules {
        let (dev, mask) = program::rule_bits(rule).map_err(str::to_string)?;
        // Opening read-only, write-only and read-write each ask on their own.
        for access in (1..=mask).filter(|a| a & !mask == 0) {
            match eval::allows(&insns, dev, access, rule.major, rule.minor) {
                Ok(true) => {}
                Ok(false) => return Err(format!("({:?}) denies `{rule}`", info.name)),
                Err(why) => {
                    return Err(format!(
                        "({:?}) cannot be checked against `{rule}`: {why}",
                        info.name
                    ))
                }
            }
        }
    }
    Ok(())
}

/// The ancestor of `dir` that has program `id` attached, walking up through
/// `..` (a cgroup never moves to another parent) no further than the mount.
fn locate(dir: &CgroupDir, id: u32) -> Ancestor {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
    let mut current: Option<OwnedFd> = None;
    for path in dir.path.ancestors().skip(1).take(dir.depth) {
        let below = current.as_ref().map_or(dir.fd.as_fd(), |fd| fd.as_fd());
        let parent = match openat(below, "..", flags, Mode::empty()) {
            Ok(parent) => parent,
            Err(errno) => {
                log::debug!("cannot open {}: {errno}", path.display());
                return Ancestor::Unknown;
            }
        };
        match bpf_sys::prog_query(parent.as_fd(), CGROUP_DEVICE, 0) {
            Ok((_, ids)) if ids.contains(&id) => return Ancestor::Dir(path.to_path_buf()),
            Ok(_) => {}
            Err(errno) => {
                log::debug!("BPF_PROG_QUERY on {}: {errno}", path.display());
                return Ancestor::Unknown;
            }
        }
        current = Some(parent);
    }
    let mount = dir.path.ancestors().nth(dir.depth).unwrap_or(&dir.path);
    Ancestor::AboveMount(mount.to_path_buf())
}

/// Reloads program `id` with `block` in front and swaps it in; returns the new id.
fn replace(
    dir: &CgroupDir,
    flags: u32,
    id: u32,
    block: &[Insn],
    observe: &mut dyn FnMut(Step),
) -> Result<u32> {
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
    let info = bpf_sys::prog_info(&old_fd).map_err(prog_err("BPF_OBJ_GET_INFO_BY_FD"))?;
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
    // Only its id: its instructions are ours, just loaded.
    let new_id =
        bpf_sys::prog_id(&new_fd).map_err(prog_err("BPF_OBJ_GET_INFO_BY_FD (extended program)"))?;
    let swap = Swap {
        flags,
        old_id: id,
        old: &old_fd,
        new_id,
        new: &new_fd,
    };
    attach(dir, &swap, observe)?;
    Ok(new_id)
}

/// Loads the extended program; on failure, loads again to get the verifier's log.
fn load(dir: &CgroupDir, id: u32, insns: &[u64]) -> Result<ProgFd> {
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

/// One attached program and its extension, to be swapped.
struct Swap<'a> {
    /// The cgroup's attach flags, as queried.
    flags: u32,
    old_id: u32,
    old: &'a ProgFd,
    new_id: u32,
    new: &'a ProgFd,
}

/// Puts `new` in place of `old` in the cgroup, in one step where the kernel can.
fn attach(dir: &CgroupDir, swap: &Swap<'_>, observe: &mut dyn FnMut(Step)) -> Result<()> {
    let cg = dir.fd.as_fd();
    let id = swap.old_id;
    let err = |cmd: &'static str| {
        move |errno| Error::BpfProgram {
            cmd,
            id,
            path: dir.path.clone(),
            errno,
        }
    };
    if swap.flags & F_ALLOW_MULTI == 0 {
        // A cgroup without `multi` holds one program, and attaching another
        // with the same flags swaps it, whatever it is: the kernel has no
        // compare-and-swap here (BPF_F_REPLACE needs `multi`). A program the
        // runtime attached since our query would be overwritten by its old
        // rules plus ours, undoing a tightening. So the attached program is
        // checked by id just before and just after the attach, and any change
        // fails the hook, which makes the runtime abort the container.
        //
        // The window that remains: a program attached by someone else between
        // `expect_attached`'s BPF_PROG_QUERY and our BPF_PROG_ATTACH (a few
        // microseconds, two syscalls apart) is replaced by ours and leaves no
        // trace: the kernel does not say what an attach replaced, and the
        // check after sees only ours. Closing it needs `multi`.
        observe(Step::BeforeRecheck);
        expect_attached(
            dir,
            swap.flags,
            swap.old_id,
            "before the hook attached its extension",
        )?;
        bpf_sys::prog_attach(cg, swap.new, CGROUP_DEVICE, swap.flags, None)
            .map_err(err("BPF_PROG_ATTACH"))?;
        observe(Step::AfterAttach);
        // Ours is not detached on a change: it is no longer attached then.
        return expect_attached(
            dir,
            swap.flags,
            swap.new_id,
            "right after the hook attached its extension",
        );
    }
    let replace = F_ALLOW_MULTI | F_REPLACE;
    match bpf_sys::prog_attach(cg, swap.new, CGROUP_DEVICE, replace, Some(swap.old)) {
        Ok(()) => Ok(()),
        // Before 5.6 BPF_F_REPLACE is an unknown flag. Attaching first and
        // detaching second only ever makes the window more restrictive.
        Err(Errno::EINVAL) => {
            log::debug!(
                "{}: no BPF_F_REPLACE; attach, then detach",
                dir.path.display()
            );
            bpf_sys::prog_attach(cg, swap.new, CGROUP_DEVICE, F_ALLOW_MULTI, None)
                .map_err(err("BPF_PROG_ATTACH"))?;
            bpf_sys::prog_detach(cg, swap.old, CGROUP_DEVICE).map_err(err("BPF_PROG_DETACH"))
        }
        Err(errno) => Err(err("BPF_PROG_ATTACH (BPF_F_REPLACE)")(errno)),
    }
}

/// Fails unless `dir` holds exactly program `id`, attached with `flags`.
fn expect_attached(dir: &CgroupDir, flags: u32, id: u32, when: &'static str) -> Result<()> {
    let (now_flags, ids) =
        bpf_sys::prog_query(dir.fd.as_fd(), CGROUP_DEVICE, 0).map_err(|errno| {
            Error::BpfCgroup {
                cmd: "BPF_PROG_QUERY",
                path: dir.path.clone(),
                errno,
            }
        })?;
    if now_flags == flags && ids == [id] {
        return Ok(());
    }
    Err(Error::ProgramChanged {
        path: dir.path.clone(),
        expected: id,
        found: ids,
        when,
    })
}

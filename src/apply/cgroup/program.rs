//! The eBPF device program, as pure data: rules in, instructions out.
//!
//! Owns the allow block that is put in front of a container's existing
//! `BPF_CGROUP_DEVICE` program, and the checks that an existing program can be
//! reused. It must never write R1 (the context the old program reads), never
//! write R10, never touch the stack, and never grant mknod.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};

use crate::planning::plan::CgroupRule;

/// `struct bpf_cgroup_dev_ctx` offsets: the kernel passes these three words.
const CTX_ACCESS_TYPE: i16 = 0;
const CTX_MAJOR: i16 = 4;
const CTX_MINOR: i16 = 8;

/// `BPF_DEVCG_DEV_*`, the low half of `access_type`.
pub const DEV_BLOCK: u32 = 1;
/// `BPF_DEVCG_DEV_CHAR`.
pub const DEV_CHAR: u32 = 2;
/// `BPF_DEVCG_ACC_*`, the high half of `access_type`.
pub const ACC_MKNOD: u32 = 1;
/// `BPF_DEVCG_ACC_READ`.
pub const ACC_READ: u32 = 2;
/// `BPF_DEVCG_ACC_WRITE`.
pub const ACC_WRITE: u32 = 4;

/// Linux `dev_t` limits: larger numbers cannot name a device, and keeping them
/// below 2^31 lets a 64-bit compare with a sign-extended immediate be exact.
const MAX_MAJOR: u32 = (1 << 12) - 1;
const MAX_MINOR: u32 = (1 << 20) - 1;

// Opcodes (`linux/bpf_common.h`, `linux/bpf.h`).
pub(crate) const LDX_MEM_W: u8 = 0x61;
pub(crate) const ALU64_MOV_K: u8 = 0xb7;
pub(crate) const ALU64_MOV_X: u8 = 0xbf;
pub(crate) const ALU64_AND_K: u8 = 0x57;
pub(crate) const ALU64_RSH_K: u8 = 0x77;
pub(crate) const JMP_JNE_K: u8 = 0x55;
pub(crate) const JMP_JSET_K: u8 = 0x45;
pub(crate) const JMP_JEQ_K: u8 = 0x15;
pub(crate) const JMP_JLT_K: u8 = 0xa5;
pub(crate) const JMP_JLE_K: u8 = 0xb5;
pub(crate) const JMP_JA: u8 = 0x05;
pub(crate) const JMP_EXIT: u8 = 0x95;
const JMP_CALL: u8 = 0x85;
const LD_IMM_DW: u8 = 0x18;
/// R10 is the frame pointer; above it is the verifier's private AX.
const MAX_REG: u8 = 10;

// Registers of the allow block. R0 and R1 are not among them on purpose.
const R_ACCESS: u8 = 2;
const R_TYPE: u8 = 3;
const R_MAJOR: u8 = 4;
const R_MINOR: u8 = 5;

/// One instruction, field for field `struct bpf_insn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Opcode.
    pub code: u8,
    /// Destination register.
    pub dst: u8,
    /// Source register.
    pub src: u8,
    /// Jump or memory offset.
    pub off: i16,
    /// Immediate.
    pub imm: i32,
}

impl Insn {
    /// A constructor for tests and the builder alike.
    pub const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            dst,
            src,
            off,
            imm,
        }
    }

    /// The kernel's in-memory form (little-endian bit fields: dst low nibble).
    pub fn to_bytes(self) -> [u8; 8] {
        let off = self.off.to_le_bytes();
        let imm = self.imm.to_le_bytes();
        [
            self.code,
            (self.dst & 0xf) | (self.src << 4),
            off[0],
            off[1],
            imm[0],
            imm[1],
            imm[2],
            imm[3],
        ]
    }

    /// Reads one instruction as the kernel dumps it.
    pub fn from_bytes(b: [u8; 8]) -> Insn {
        Insn {
            code: b[0],
            dst: b[1] & 0xf,
            src: b[1] >> 4,
            off: i16::from_le_bytes([b[2], b[3]]),
            imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

/// Why a rule cannot be expressed; the caller adds the rule itself.
pub type RuleError = &'static str;

/// Decodes a kernel instruction dump (`xlated_prog_insns`).
pub fn decode(bytes: &[u8]) -> Option<Vec<Insn>> {
    if !bytes.len().is_multiple_of(8) {
        return None;
    }
    let insns = bytes.chunks_exact(8).map(|c| {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        Insn::from_bytes(b)
    });
    Some(insns.collect())
}

/// Encodes instructions as the words `BPF_PROG_LOAD` reads.
pub fn encode(insns: &[Insn]) -> Vec<u64> {
    insns
        .iter()
        .map(|i| u64::from_le_bytes(i.to_bytes()))
        .collect()
}

/// The `BPF_DEVCG_DEV_*` type and `BPF_DEVCG_ACC_*` mask a rule grants.
pub fn rule_bits(rule: &CgroupRule) -> Result<(u32, u32), RuleError> {
    let dev = match rule.kind {
        'c' => DEV_CHAR,
        'b' => DEV_BLOCK,
        _ => return Err("only `c` and `b` rules name one device"),
    };
    let mut mask = 0;
    for c in rule.access.chars() {
        mask |= match c {
            'r' => ACC_READ,
            'w' => ACC_WRITE,
            'm' => ACC_MKNOD,
            _ => return Err("access must be made of r, w and m"),
        };
    }
    if mask == 0 {
        return Err("access is empty");
    }
    if mask & ACC_MKNOD != 0 {
        return Err("mknod is never granted to a running container");
    }
    if rule.major > MAX_MAJOR || rule.minor > MAX_MINOR {
        return Err("major or minor is out of the kernel's range");
    }
    Ok((dev, mask))
}

/// Most rules one allow block takes; it keeps every jump within an `i16`.
pub const MAX_RULES: usize = 4096;

/// The allow block: returns 1 when the access matches a rule, else falls
/// through past its last instruction with R1 untouched and R0 unset, so it is
/// only valid in front of a program that decides the rest itself.
///
/// Rules are grouped by type and access, then by major, and each run of
/// consecutive minors is one range test: 8 GPUs (minors 0-7 and 254-255 under
/// major 195, plus UVM's two) take 19 instructions where one test per rule
/// took 72, and the kernel's verifier and JIT, which cost about 5 µs per
/// instruction here, run once per container start.
pub fn allow_block(rules: &[CgroupRule]) -> Result<Vec<Insn>, (CgroupRule, RuleError)> {
    if rules.len() > MAX_RULES {
        return Err((rules[MAX_RULES], "too many rules for one device program"));
    }
    // (type, access mask) -> major -> minors.
    let mut groups: BTreeMap<(u32, u32), BTreeMap<u32, BTreeSet<u32>>> = BTreeMap::new();
    for rule in rules {
        let (dev, mask) = rule_bits(rule).map_err(|e| (*rule, e))?;
        groups
            .entry((dev, mask))
            .or_default()
            .entry(rule.major)
            .or_default()
            .insert(rule.minor);
    }
    let mut out = vec![
        Insn::new(LDX_MEM_W, R_ACCESS, 1, CTX_ACCESS_TYPE, 0),
        Insn::new(ALU64_MOV_X, R_TYPE, R_ACCESS, 0, 0),
        Insn::new(ALU64_AND_K, R_TYPE, 0, 0, 0xffff),
        Insn::new(ALU64_RSH_K, R_ACCESS, 0, 0, 16),
        Insn::new(LDX_MEM_W, R_MAJOR, 1, CTX_MAJOR, 0),
        Insn::new(LDX_MEM_W, R_MINOR, 1, CTX_MINOR, 0),
    ];
    // Jumps to the shared `R0 = 1; exit`, patched once it is placed.
    let mut to_allow = Vec::new();
    // The casts are exact: rule_bits bounded every number below 2^31.
    for ((dev, mask), majors) in &groups {
        let type_test = out.len();
        out.push(Insn::new(JMP_JNE_K, R_TYPE, 0, 0, *dev as i32));
        // Any requested bit outside the mask (mknod among them) skips.
        out.push(Insn::new(JMP_JSET_K, R_ACCESS, 0, 0, !(*mask as i32)));
        for (major, minors) in majors {
            let major_test = out.len();
            out.push(Insn::new(JMP_JNE_K, R_MAJOR, 0, 0, *major as i32));
            for (first, last) in runs(minors) {
                if first != last {
                    // Below the run: past its upper test.
                    out.push(Insn::new(JMP_JLT_K, R_MINOR, 0, 1, first as i32));
                }
                to_allow.push(out.len());
                let test = if first == last { JMP_JEQ_K } else { JMP_JLE_K };
                out.push(Insn::new(test, R_MINOR, 0, 0, last as i32));
            }
            jump_here(&mut out, major_test);
        }
        jump_here(&mut out, type_test);
        jump_here(&mut out, type_test + 1);
    }
    // Nothing matched: skip the allow exit, into what follows the block.
    out.push(Insn::new(JMP_JA, 0, 0, 2, 0));
    for at in to_allow {
        jump_here(&mut out, at);
    }
    out.push(Insn::new(ALU64_MOV_K, 0, 0, 0, 1));
    out.push(Insn::new(JMP_EXIT, 0, 0, 0, 0));
    Ok(out)
}

/// Points the jump at `at` to the next instruction to be pushed. Offsets fit:
/// [`MAX_RULES`] rules make at most 5 instructions each.
fn jump_here(out: &mut [Insn], at: usize) {
    let off = out.len() - at - 1;
    out[at].off = i16::try_from(off).unwrap_or(i16::MAX);
}

/// Consecutive runs in sorted `minors`, as (first, last) pairs.
fn runs(minors: &BTreeSet<u32>) -> Vec<(u32, u32)> {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &minor in minors {
        match runs.last_mut() {
            Some((_, last)) if last.checked_add(1) == Some(minor) => *last = minor,
            _ => runs.push((minor, minor)),
        }
    }
    runs
}

/// Our block, then the old program unchanged: its jumps are relative to
/// themselves, so they still land where they did.
pub fn prepend(block: &[Insn], old: &[Insn]) -> Vec<Insn> {
    let mut out = Vec::with_capacity(block.len() + old.len());
    out.extend_from_slice(block);
    out.extend_from_slice(old);
    out
}

/// Refuses dumped programs that cannot be loaded again as they are: the
/// kernel's dump of calls and object references is not what was loaded.
pub fn check_reusable(old: &[Insn]) -> Result<(), &'static str> {
    if old.is_empty() {
        return Err("the kernel returned no instructions");
    }
    for insn in old {
        if insn.code == JMP_CALL {
            return Err("it calls helpers or functions, whose dump cannot be loaded again");
        }
        if insn.code == LD_IMM_DW && insn.src != 0 {
            return Err("it references maps or other kernel objects");
        }
        if insn.dst > MAX_REG || insn.src > MAX_REG {
            return Err("it was rewritten by JIT hardening (register AX)");
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "program_tests.rs"]
pub(super) mod tests;

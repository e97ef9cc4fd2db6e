//! Answers what an attached `BPF_CGROUP_DEVICE` program decides for one access.
//!
//! Owns a small eBPF interpreter over a concrete `bpf_cgroup_dev_ctx`: the
//! hook uses it to learn whether the programs of ancestor cgroups, which it
//! cannot extend, already allow what it is asked to grant. It must never
//! guess: any instruction outside the plain subset device programs use
//! (context loads, ALU, jumps, exit) makes the answer "cannot tell", which
//! callers treat like a denial.

#![forbid(unsafe_code)]

use super::program::Insn;

/// Why a program cannot be run here; the caller names the program.
pub type Unsupported = &'static str;

/// The kernel's cap on instructions the verifier walks: no accepted program
/// runs longer on one input.
const MAX_STEPS: usize = 1_000_000;
/// `sizeof(struct bpf_cgroup_dev_ctx)`: access_type, major, minor.
const CTX_SIZE: usize = 12;

// Instruction classes and fields (`linux/bpf_common.h`, `linux/bpf.h`).
const CLASS_LD: u8 = 0x00;
const CLASS_LDX: u8 = 0x01;
const CLASS_ALU: u8 = 0x04;
const CLASS_JMP: u8 = 0x05;
const CLASS_JMP32: u8 = 0x06;
const CLASS_ALU64: u8 = 0x07;
const SRC_X: u8 = 0x08;
const MODE_MEM: u8 = 0x60;
const LD_IMM_DW: u8 = 0x18;

/// A register's content: the verifier tracks the same distinction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Val {
    /// Never written (R0, R2..R9 at entry) or the frame pointer R10.
    Unset,
    /// The context pointer the kernel passes in R1.
    Ctx,
    /// A number.
    Scalar(u64),
}

/// Runs `insns` for a `dev_type` (`BPF_DEVCG_DEV_*`) device `major:minor`
/// accessed with `access` (`BPF_DEVCG_ACC_*`); true when it allows.
pub fn allows(
    insns: &[Insn],
    dev_type: u32,
    access: u32,
    major: u32,
    minor: u32,
) -> Result<bool, Unsupported> {
    let mut ctx = [0u8; CTX_SIZE];
    ctx[0..4].copy_from_slice(&((access << 16) | (dev_type & 0xffff)).to_le_bytes());
    ctx[4..8].copy_from_slice(&major.to_le_bytes());
    ctx[8..12].copy_from_slice(&minor.to_le_bytes());
    let mut regs = [Val::Unset; 11];
    regs[1] = Val::Ctx;
    let mut pc = 0usize;
    for _ in 0..MAX_STEPS {
        let insn = *insns.get(pc).ok_or("it runs past its last instruction")?;
        let dst = usize::from(insn.dst);
        if dst > 10 || insn.src > 10 {
            return Err("it uses a register beyond R10");
        }
        let class = insn.code & 0x07;
        let op = insn.code & 0xf0;
        let x = insn.code & SRC_X != 0;
        pc += 1;
        match class {
            CLASS_ALU | CLASS_ALU64 => {
                if dst == 10 {
                    return Err("it writes the frame pointer");
                }
                if insn.off != 0 {
                    return Err("it uses signed division or sign-extending moves");
                }
                let wide = class == CLASS_ALU64;
                // Only a 64-bit copy of the context pointer keeps it one.
                if op == 0xb0 && x && wide && regs[usize::from(insn.src)] == Val::Ctx {
                    regs[dst] = Val::Ctx;
                    continue;
                }
                let src = if x {
                    scalar(regs[usize::from(insn.src)])?
                } else if wide {
                    insn.imm as i64 as u64
                } else {
                    u64::from(insn.imm as u32)
                };
                // A move does not read its destination.
                let old = if op == 0xb0 { 0 } else { scalar(regs[dst])? };
                regs[dst] = Val::Scalar(alu(op, wide, old, src)?);
            }
            CLASS_LDX => {
                if insn.code & 0xe0 != MODE_MEM {
                    return Err("it loads other than plainly from memory");
                }
                if regs[usize::from(insn.src)] != Val::Ctx {
                    return Err("it reads memory other than its context (stack or maps)");
                }
                if dst == 10 {
                    return Err("it writes the frame pointer");
                }
                let size = [4usize, 2, 1, 8][usize::from((insn.code >> 3) & 0x03)];
                let start = usize::try_from(insn.off).map_err(|_| "it reads before its context")?;
                let bytes = ctx
                    .get(start..start + size)
                    .ok_or("it reads past its context")?;
                let mut word = [0u8; 8];
                word[..size].copy_from_slice(bytes);
                regs[dst] = Val::Scalar(u64::from_le_bytes(word));
            }
            CLASS_LD if insn.code == LD_IMM_DW => {
                if insn.src != 0 {
                    return Err("it references maps or other kernel objects");
                }
                if dst == 10 {
                    return Err("it writes the frame pointer");
                }
                let high = insns.get(pc).ok_or("its last 64-bit load is cut short")?;
                pc += 1;
                let value = u64::from(insn.imm as u32) | (u64::from(high.imm as u32) << 32);
                regs[dst] = Val::Scalar(value);
            }
            CLASS_JMP | CLASS_JMP32 => {
                let wide = class == CLASS_JMP;
                let taken = match op {
                    0x00 if wide => true,
                    0x90 if wide && !x => {
                        // EXIT: the kernel allows on any non-zero 32-bit return.
                        return Ok(scalar(regs[0])? as u32 != 0);
                    }
                    0x80 => return Err("it calls helpers or functions"),
                    0x00 | 0x90 => return Err("it uses a jump this interpreter does not know"),
                    _ => {
                        let a = scalar(regs[dst])?;
                        let b = if x {
                            scalar(regs[usize::from(insn.src)])?
                        } else {
                            insn.imm as i64 as u64
                        };
                        compare(op, wide, a, b)?
                    }
                };
                if taken {
                    let target = pc as i64 + i64::from(insn.off);
                    pc = usize::try_from(target).map_err(|_| "it jumps before its start")?;
                }
            }
            _ => return Err("it stores to memory or uses legacy packet loads"),
        }
    }
    Err("it runs longer than the verifier allows")
}

/// The number in a register; pointers and unset registers are not numbers.
fn scalar(val: Val) -> Result<u64, Unsupported> {
    match val {
        Val::Scalar(v) => Ok(v),
        Val::Ctx => Err("it computes with its context pointer"),
        Val::Unset => Err("it reads a register it never set"),
    }
}

/// One ALU operation; 32-bit ones work on the low halves and zero-extend.
fn alu(op: u8, wide: bool, dst: u64, src: u64) -> Result<u64, Unsupported> {
    let (dst, src) = if wide {
        (dst, src)
    } else {
        (dst & 0xffff_ffff, src & 0xffff_ffff)
    };
    let bits = if wide { 64 } else { 32 };
    // Shift counts are taken modulo the width, as the kernel's runtime does.
    let shift = (src & (bits - 1)) as u32;
    let out = match op {
        0x00 => dst.wrapping_add(src),
        0x10 => dst.wrapping_sub(src),
        0x20 => dst.wrapping_mul(src),
        // Division by zero gives 0 and modulo by zero keeps the dividend.
        0x30 => dst.checked_div(src).unwrap_or(0),
        0x90 => dst.checked_rem(src).unwrap_or(dst),
        0x40 => dst | src,
        0x50 => dst & src,
        0x60 => dst << shift,
        0x70 => dst >> shift,
        0x80 => dst.wrapping_neg(),
        0xa0 => dst ^ src,
        0xb0 => src,
        0xc0 if wide => ((dst as i64) >> shift) as u64,
        0xc0 => u64::from(((dst as u32 as i32) >> shift) as u32),
        _ => return Err("it uses an ALU operation this interpreter does not know"),
    };
    Ok(if wide { out } else { out & 0xffff_ffff })
}

/// Whether a conditional jump is taken; 32-bit jumps compare the low halves.
fn compare(op: u8, wide: bool, a: u64, b: u64) -> Result<bool, Unsupported> {
    let (a, b, sa, sb) = if wide {
        (a, b, a as i64, b as i64)
    } else {
        let (a, b) = (a as u32, b as u32);
        (
            u64::from(a),
            u64::from(b),
            i64::from(a as i32),
            i64::from(b as i32),
        )
    };
    Ok(match op {
        0x10 => a == b,
        0x20 => a > b,
        0x30 => a >= b,
        0x40 => a & b != 0,
        0x50 => a != b,
        0x60 => sa > sb,
        0x70 => sa >= sb,
        0xa0 => a < b,
        0xb0 => a <= b,
        0xc0 => sa < sb,
        0xd0 => sa <= sb,
        _ => return Err("it uses a jump this interpreter does not know"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::cgroup::program::tests::{each, run, runc_like};
    use crate::apply::cgroup::program::{
        self, ACC_READ, ACC_WRITE, ALU64_MOV_K, ALU64_MOV_X, DEV_CHAR, JMP_EXIT, LDX_MEM_W,
    };
    use crate::planning::plan::CgroupRule;

    fn agrees_with_rbpf(insns: &[Insn]) {
        each(|dev, major, minor, access| {
            let want = run(insns, dev, major, minor, access) != 0;
            let got = allows(insns, dev, access, major, minor).unwrap();
            assert_eq!(got, want, "type {dev} {major}:{minor} access {access:#b}");
        });
    }

    #[test]
    fn answers_as_the_reference_vm_for_a_runc_program() {
        agrees_with_rbpf(&runc_like());
    }

    #[test]
    fn answers_as_the_reference_vm_for_an_extended_program() {
        let rules = [CgroupRule {
            kind: 'c',
            major: 195,
            minor: 0,
            access: "rw",
        }];
        let block = program::allow_block(&rules).unwrap();

        agrees_with_rbpf(&program::prepend(&block, &runc_like()));
    }

    #[test]
    fn follows_a_copied_context_pointer_and_64_bit_constants() {
        let prog = [
            Insn::new(ALU64_MOV_X, 6, 1, 0, 0),
            Insn::new(LDX_MEM_W, 2, 6, 4, 0),
            Insn::new(LD_IMM_DW, 3, 0, 0, 195),
            Insn::new(0, 0, 0, 0, 1),
            Insn::new(ALU64_MOV_K, 0, 0, 0, 0),
            // Differs in the high half: not taken.
            Insn::new(0x5d, 2, 3, 1, 0),
            Insn::new(ALU64_MOV_K, 0, 0, 0, 1),
            Insn::new(JMP_EXIT, 0, 0, 0, 0),
        ];

        assert_eq!(allows(&prog, DEV_CHAR, ACC_READ, 195, 0), Ok(false));
    }

    #[test]
    fn compares_the_low_halves_in_32_bit_jumps() {
        let prog = [
            Insn::new(LDX_MEM_W, 2, 1, 4, 0),
            Insn::new(ALU64_MOV_K, 0, 0, 0, 0),
            // JMP32 JEQ 195: skips the deny exit when equal.
            Insn::new(0x16, 2, 0, 1, 195),
            Insn::new(JMP_EXIT, 0, 0, 0, 0),
            Insn::new(ALU64_MOV_K, 0, 0, 0, 1),
            Insn::new(JMP_EXIT, 0, 0, 0, 0),
        ];

        assert_eq!(
            allows(&prog, DEV_CHAR, ACC_READ | ACC_WRITE, 195, 3),
            Ok(true)
        );
        assert_eq!(allows(&prog, DEV_CHAR, ACC_READ, 194, 3), Ok(false));
    }

    #[test]
    fn cannot_tell_for_calls_stack_maps_or_endless_loops() {
        let exit1 = [
            Insn::new(ALU64_MOV_K, 0, 0, 0, 1),
            Insn::new(JMP_EXIT, 0, 0, 0, 0),
        ];
        let call = Insn::new(0x85, 0, 0, 0, 1);
        let store = Insn::new(0x63, 10, 2, -4, 0);
        let stack_load = Insn::new(LDX_MEM_W, 2, 10, -4, 0);
        let map = Insn::new(LD_IMM_DW, 1, 1, 0, 7);
        let past_ctx = Insn::new(LDX_MEM_W, 2, 1, 12, 0);
        let unset = Insn::new(ALU64_MOV_X, 0, 7, 0, 0);
        let endless = Insn::new(0x05, 0, 0, -1, 0);

        for bad in [call, store, stack_load, map, past_ctx, unset, endless] {
            let mut prog = vec![bad];
            if bad.code == LD_IMM_DW {
                prog.push(Insn::new(0, 0, 0, 0, 0));
            }
            prog.extend(exit1);
            assert!(
                allows(&prog, DEV_CHAR, ACC_READ, 1, 3).is_err(),
                "{bad:?} was run"
            );
        }
        assert!(allows(&[], DEV_CHAR, ACC_READ, 1, 3).is_err());
    }
}

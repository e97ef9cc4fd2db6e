//! Executes the built programs in the `rbpf` user-space VM over a matrix of
//! device type × major × minor × access, alone and in front of a hand-built
//! program shaped like runc's.

use super::*;

const ALU32_AND_K: u8 = 0x54;
const ALU32_RSH_K: u8 = 0x74;
const ALU32_MOV_X: u8 = 0xbc;
const ALU32_MOV_K: u8 = 0xb4;
const JMP_JNE_X: u8 = 0x5d;
/// Marks a jump to the end of the rule being assembled.
const END: i16 = i16::MIN;
/// What R0 holds before the program runs: any path that exits with it did not set R0.
const POISON: u64 = 0x7777;

const TYPES: [u32; 2] = [DEV_CHAR, DEV_BLOCK];
const MAJORS: [u32; 6] = [1, 8, 10, 136, 195, 4095];
const MINORS: [u32; 7] = [0, 3, 5, 7, 200, 255, 1_048_575];
const ACCESSES: [u32; 7] = [
    ACC_READ,
    ACC_WRITE,
    ACC_READ | ACC_WRITE,
    ACC_MKNOD,
    ACC_MKNOD | ACC_READ,
    ACC_MKNOD | ACC_WRITE,
    ACC_MKNOD | ACC_READ | ACC_WRITE,
];

fn rule(kind: char, major: u32, minor: u32, access: &'static str) -> CgroupRule {
    CgroupRule {
        kind,
        major,
        minor,
        access,
    }
}

fn granted() -> Vec<CgroupRule> {
    vec![
        rule('c', 195, 0, "rw"),
        rule('c', 195, 255, "rw"),
        rule('c', 1, 5, "rw"),
    ]
}

/// What [`granted`] means, written independently of the builder.
fn ours(dev: u32, major: u32, minor: u32, access: u32) -> bool {
    dev == DEV_CHAR
        && matches!((major, minor), (195, 0) | (195, 255) | (1, 5))
        && access & !(ACC_READ | ACC_WRITE) == 0
}

/// Assembles one runc-style rule: every check jumps to the rule's end, and
/// the rule allows when all checks pass.
fn runc_rule(mut checks: Vec<Insn>) -> Vec<Insn> {
    checks.push(Insn::new(ALU32_MOV_K, 0, 0, 0, 1));
    checks.push(Insn::new(JMP_EXIT, 0, 0, 0, 0));
    let len = checks.len();
    for (i, insn) in checks.iter_mut().enumerate() {
        if insn.off == END {
            insn.off = (len - i - 1) as i16;
        }
    }
    checks
}

/// A program shaped like runc's: a prologue loading type, access, major and
/// minor into R2..R5, rules that reuse those registers (and clobber R1), and
/// a default deny.
pub(in crate::apply::cgroup) fn runc_like() -> Vec<Insn> {
    let mut p = vec![
        Insn::new(LDX_MEM_W, 2, 1, 0, 0),
        Insn::new(ALU32_AND_K, 2, 0, 0, 0xffff),
        Insn::new(LDX_MEM_W, 3, 1, 0, 0),
        Insn::new(ALU32_RSH_K, 3, 0, 0, 16),
        Insn::new(LDX_MEM_W, 4, 1, 4, 0),
        Insn::new(LDX_MEM_W, 5, 1, 8, 0),
    ];
    // c 1:3 rwm
    p.extend(runc_rule(vec![
        Insn::new(JMP_JNE_K, 2, 0, END, DEV_CHAR as i32),
        Insn::new(JMP_JNE_K, 4, 0, END, 1),
        Insn::new(JMP_JNE_K, 5, 0, END, 3),
    ]));
    // c 136:* rwm
    p.extend(runc_rule(vec![
        Insn::new(JMP_JNE_K, 2, 0, END, DEV_CHAR as i32),
        Insn::new(JMP_JNE_K, 4, 0, END, 136),
    ]));
    // c 10:200 rw, with runc's access check through R1.
    p.extend(runc_rule(vec![
        Insn::new(JMP_JNE_K, 2, 0, END, DEV_CHAR as i32),
        Insn::new(ALU32_MOV_X, 1, 3, 0, 0),
        Insn::new(ALU32_AND_K, 1, 0, 0, (ACC_READ | ACC_WRITE) as i32),
        Insn::new(JMP_JNE_X, 1, 3, END, 0),
        Insn::new(JMP_JNE_K, 4, 0, END, 10),
        Insn::new(JMP_JNE_K, 5, 0, END, 200),
    ]));
    // b 8:0 r
    p.extend(runc_rule(vec![
        Insn::new(JMP_JNE_K, 2, 0, END, DEV_BLOCK as i32),
        Insn::new(ALU32_MOV_X, 1, 3, 0, 0),
        Insn::new(ALU32_AND_K, 1, 0, 0, ACC_READ as i32),
        Insn::new(JMP_JNE_X, 1, 3, END, 0),
        Insn::new(JMP_JNE_K, 4, 0, END, 8),
        Insn::new(JMP_JNE_K, 5, 0, END, 0),
    ]));
    p.push(Insn::new(ALU32_MOV_K, 0, 0, 0, 0));
    p.push(Insn::new(JMP_EXIT, 0, 0, 0, 0));
    p
}

/// What [`runc_like`] means.
fn old(dev: u32, major: u32, minor: u32, access: u32) -> bool {
    let within = |mask: u32| access & !mask == 0;
    match (dev, major, minor) {
        (DEV_CHAR, 1, 3) | (DEV_CHAR, 136, _) => true,
        (DEV_CHAR, 10, 200) => within(ACC_READ | ACC_WRITE),
        (DEV_BLOCK, 8, 0) => within(ACC_READ),
        _ => false,
    }
}

fn deny_tail() -> Vec<Insn> {
    vec![
        Insn::new(ALU64_MOV_K, 0, 0, 0, 0),
        Insn::new(JMP_EXIT, 0, 0, 0, 0),
    ]
}

/// Runs `insns` over one `bpf_cgroup_dev_ctx`, with R0 and R2..R9 poisoned first.
pub(in crate::apply::cgroup) fn run(
    insns: &[Insn],
    dev: u32,
    major: u32,
    minor: u32,
    access: u32,
) -> u64 {
    let mut prog = vec![Insn::new(ALU64_MOV_K, 0, 0, 0, POISON as i32)];
    prog.extend((2..=9).map(|r| Insn::new(ALU64_MOV_K, r, 0, 0, 0x5a5a_5a5a)));
    prog.extend_from_slice(insns);
    let bytes: Vec<u8> = prog.iter().flat_map(|i| i.to_bytes()).collect();
    let vm = rbpf::EbpfVmRaw::new(Some(&bytes)).expect("rbpf accepts the program");
    let mut ctx = [0u8; 12];
    ctx[0..4].copy_from_slice(&((access << 16) | dev).to_le_bytes());
    ctx[4..8].copy_from_slice(&major.to_le_bytes());
    ctx[8..12].copy_from_slice(&minor.to_le_bytes());
    vm.execute_program(&mut ctx).expect("the program runs")
}

/// Calls `f` for every point of the matrix.
pub(in crate::apply::cgroup) fn each(mut f: impl FnMut(u32, u32, u32, u32)) {
    for dev in TYPES {
        for major in MAJORS {
            for minor in MINORS {
                for access in ACCESSES {
                    f(dev, major, minor, access);
                }
            }
        }
    }
}

#[test]
fn grants_listed_char_devices_for_read_and_write_only() {
    let block = allow_block(&granted()).unwrap();
    let prog = prepend(&block, &deny_tail());

    each(|dev, major, minor, access| {
        let got = run(&prog, dev, major, minor, access);
        let want = u64::from(ours(dev, major, minor, access));
        assert_eq!(got, want, "type {dev} {major}:{minor} access {access:#b}");
    });
}

#[test]
fn never_grants_mknod_even_with_read_and_write() {
    let block = allow_block(&granted()).unwrap();
    let prog = prepend(&block, &deny_tail());

    for access in [ACC_MKNOD, ACC_MKNOD | ACC_READ | ACC_WRITE] {
        assert_eq!(run(&prog, DEV_CHAR, 195, 0, access), 0);
    }
}

#[test]
fn old_runc_rules_still_hold_behind_the_block() {
    let block = allow_block(&granted()).unwrap();
    let prog = prepend(&block, &runc_like());

    each(|dev, major, minor, access| {
        let got = run(&prog, dev, major, minor, access);
        let want = u64::from(ours(dev, major, minor, access) || old(dev, major, minor, access));
        assert_eq!(got, want, "type {dev} {major}:{minor} access {access:#b}");
    });
}

#[test]
fn runc_like_fixture_means_what_its_reference_says() {
    let prog = runc_like();

    each(|dev, major, minor, access| {
        let want = u64::from(old(dev, major, minor, access));
        assert_eq!(run(&prog, dev, major, minor, access), want);
    });
}

#[test]
fn every_path_sets_r0_to_zero_or_one() {
    let block = allow_block(&granted()).unwrap();

    for tail in [deny_tail(), runc_like()] {
        let prog = prepend(&block, &tail);
        each(|dev, major, minor, access| {
            let got = run(&prog, dev, major, minor, access);
            assert!(got <= 1, "R0 = {got:#x} for type {dev} {major}:{minor}");
        });
    }
}

#[test]
fn block_falls_through_to_the_old_program_without_deciding() {
    let block = allow_block(&granted()).unwrap();
    // A tail that exits without setting R0 shows what the block left there.
    let prog = prepend(&block, &[Insn::new(JMP_EXIT, 0, 0, 0, 0)]);

    assert_eq!(run(&prog, DEV_CHAR, 195, 0, ACC_READ), 1);
    assert_eq!(run(&prog, DEV_CHAR, 195, 1, ACC_READ), POISON);
    assert_eq!(run(&prog, DEV_CHAR, 195, 0, ACC_MKNOD), POISON);
}

#[test]
fn block_reads_only_the_context_and_never_writes_r1_or_r10() {
    let block = allow_block(&granted()).unwrap();

    for insn in &block {
        assert!(insn.dst != 1 && insn.dst != 10, "{insn:?} writes R1 or R10");
        if insn.code == LDX_MEM_W {
            assert_eq!(insn.src, 1, "{insn:?} loads from something else than ctx");
        }
    }
}

/// A host's worth of rules: 8 GPUs with scattered minors, nvidiactl and
/// modeset, UVM, a read-only block device and a read-only char device.
fn many() -> Vec<CgroupRule> {
    let mut rules: Vec<CgroupRule> = [0, 1, 2, 3, 5, 6, 7, 9, 255, 254]
        .into_iter()
        .map(|minor| rule('c', 195, minor, "rw"))
        .collect();
    rules.extend([
        rule('c', 508, 0, "rw"),
        rule('c', 508, 1, "rw"),
        rule('b', 195, 4, "r"),
        rule('c', 195, 4, "r"),
    ]);
    rules
}

fn in_many(dev: u32, major: u32, minor: u32, access: u32) -> bool {
    let rw = access & !(ACC_READ | ACC_WRITE) == 0;
    let r = access & !ACC_READ == 0;
    match (dev, major) {
        (DEV_CHAR, 195) => match minor {
            0..=3 | 5..=7 | 9 | 254 | 255 => rw,
            4 => r,
            _ => false,
        },
        (DEV_CHAR, 508) => minor <= 1 && rw,
        (DEV_BLOCK, 195) => minor == 4 && r,
        _ => false,
    }
}

#[test]
fn ranges_of_minors_grant_exactly_their_members() {
    let block = allow_block(&many()).unwrap();
    let prog = prepend(&block, &runc_like());

    for dev in TYPES {
        for major in [1, 8, 10, 136, 194, 195, 196, 507, 508, 509] {
            for minor in (0..=12).chain([200, 253, 254, 255, 256, 1_048_575]) {
                for access in ACCESSES {
                    let got = run(&prog, dev, major, minor, access);
                    let want = in_many(dev, major, minor, access) || old(dev, major, minor, access);
                    assert_eq!(
                        got,
                        u64::from(want),
                        "type {dev} {major}:{minor} access {access:#b}"
                    );
                }
            }
        }
    }
}

#[test]
fn block_does_not_grow_with_consecutive_minors() {
    let gpus = |n: u32| -> Vec<CgroupRule> {
        let mut rules: Vec<CgroupRule> = (0..n).map(|m| rule('c', 195, m, "rw")).collect();
        rules.extend([rule('c', 195, 255, "rw"), rule('c', 195, 254, "rw")]);
        rules.extend([rule('c', 508, 0, "rw"), rule('c', 508, 1, "rw")]);
        rules
    };
    let one = allow_block(&gpus(1)).unwrap().len();
    let eight = allow_block(&gpus(8)).unwrap().len();
    let sixteen = allow_block(&gpus(16)).unwrap().len();
    // Prologue 6, type and access 2, major 195 with two runs 5, UVM 3, exit 3.
    assert_eq!(eight, 19);
    assert_eq!(sixteen, eight);
    // One GPU: minor 0 is a single value, one test instead of two.
    assert_eq!(one, eight - 1);
    // Duplicates add nothing.
    let mut twice = gpus(8);
    twice.extend(gpus(8));
    assert_eq!(allow_block(&twice).unwrap().len(), eight);
}

#[test]
fn too_many_rules_are_refused_not_miscompiled() {
    let rules: Vec<CgroupRule> = (0..=MAX_RULES as u32)
        .map(|m| rule('c', 195, m * 2, "rw"))
        .collect();
    assert!(allow_block(&rules).is_err());
    assert!(allow_block(&rules[..MAX_RULES]).is_ok());
}

#[test]
fn rejects_rules_it_cannot_express() {
    let cases = [
        rule('a', 195, 0, "rw"),
        rule('c', 195, 0, "rwm"),
        rule('c', 195, 0, ""),
        rule('c', 195, 0, "rx"),
        rule('c', 4096, 0, "rw"),
        rule('c', 195, 1 << 20, "rw"),
    ];

    for bad in cases {
        let (which, _) = allow_block(&[bad]).unwrap_err();
        assert_eq!(which, bad);
    }
}

#[test]
fn encodes_registers_as_the_kernel_lays_them_out() {
    let insn = Insn::new(LDX_MEM_W, 2, 1, 8, -3);

    let bytes = insn.to_bytes();

    assert_eq!(bytes, [0x61, 0x12, 8, 0, 0xfd, 0xff, 0xff, 0xff]);
    assert_eq!(Insn::from_bytes(bytes), insn);
    assert_eq!(encode(&[insn])[0].to_le_bytes(), bytes);
    assert_eq!(decode(&bytes).unwrap(), vec![insn]);
    assert_eq!(decode(&bytes[..7]), None);
}

#[test]
fn accepts_a_runc_program_for_reuse() {
    assert_eq!(check_reusable(&runc_like()), Ok(()));
}

#[test]
fn refuses_to_reuse_programs_whose_dump_differs_from_what_was_loaded() {
    let call = Insn::new(0x85, 0, 0, 0, 1);
    let map = Insn::new(0x18, 1, 1, 0, 7);
    let ax = Insn::new(ALU64_MOV_K, 11, 0, 0, 1);

    for bad in [call, map, ax] {
        let mut prog = runc_like();
        prog.insert(6, bad);
        assert!(check_reusable(&prog).is_err(), "{bad:?}");
    }
    assert!(check_reusable(&[]).is_err());
}

//! Feeds arbitrary bytes to the ELF header check, for every architecture and
//! both kinds. Nothing may panic; every refusal is one line naming the file.
//! An accepted header has the ELF magic, the architecture's class and
//! machine; at most one architecture accepts it; a shared object is also an
//! executable; and only the first 64 bytes matter (that is all `check_file`
//! reads).

#![no_main]

mod common;

use std::path::Path;

use common::assert_one_line;
use libfuzzer_sys::fuzz_target;
use oci_nvidia_hook::host::elf::{self, check_header, Arch, Class, Kind};

const PATH: &str = "/usr/lib/x86_64-linux-gnu/libfuzz.so.1";

fuzz_target!(|data: &[u8]| {
    let path = Path::new(PATH);
    let head = &data[..data.len().min(64)];
    let mut accepted = Vec::new();
    for arch in [elf::X86_64, elf::I386, elf::AARCH64] {
        let mut ok = [false; 2];
        for (i, kind) in [Kind::SharedObject, Kind::Executable].into_iter().enumerate() {
            let result = check_header(path, data, arch, kind);
            match &result {
                Ok(()) => accepted_header(data, arch),
                Err(e) => {
                    let message = e.to_string();
                    assert_one_line(&message);
                    assert!(message.contains(PATH), "{message}");
                }
            }
            let from_head = check_header(path, head, arch, kind);
            assert_eq!(
                result.is_ok(),
                from_head.is_ok(),
                "{arch} {kind:?}: bytes past the 64-byte header changed the verdict: {result:?} vs {from_head:?}"
            );
            ok[i] = result.is_ok();
        }
        assert!(!ok[0] || ok[1], "{arch}: a shared object that is not an executable");
        if ok[1] {
            accepted.push(arch);
        }
    }
    assert!(accepted.len() <= 1, "several architectures accept it: {accepted:?}");
});

fn accepted_header(data: &[u8], arch: Arch) {
    assert!(data.starts_with(b"\x7fELF"), "{arch}: accepted without the magic");
    let class = match arch.class {
        Class::Elf32 => 1,
        Class::Elf64 => 2,
    };
    assert_eq!(data[4], class, "{arch}: wrong class accepted");
    let machine = [data[18], data[19]];
    let machine = match data[5] {
        2 => u16::from_be_bytes(machine),
        _ => u16::from_le_bytes(machine),
    };
    assert_eq!(machine, arch.machine, "{arch}: wrong machine accepted");
}

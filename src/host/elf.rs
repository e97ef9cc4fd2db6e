//! Checks that a host file is an ELF object of the kind and architecture we
//! are about to inject, reading only its 64-byte header.
//!
//! A library from the host cache that is of the wrong class or machine would
//! make the container's loader fail in confusing ways; we refuse it up front.
//! This module reads files but never follows a symlink itself: callers hand it
//! paths already resolved inside the driver root.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use goblin::elf::header::{
    EI_CLASS, ELFCLASS32, ELFCLASS64, EM_386, EM_AARCH64, EM_X86_64, ET_DYN, ET_EXEC,
};
use goblin::elf::Elf;
use serde::Serialize;
use thiserror::Error;

use crate::host::ldcache;

/// Size of an ELF64 header; an ELF32 header is shorter.
const HEADER_LEN: usize = 64;

/// An ELF class, the word size of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Class {
    /// ELFCLASS32.
    Elf32,
    /// ELFCLASS64.
    Elf64,
}

/// One architecture the hook can inject libraries for: how ELF and
/// `ld.so.cache` spell it, and where an image keeps its libraries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Arch {
    /// Debian's name, e.g. `x86_64`, `i386`.
    pub name: &'static str,
    /// The ELF class its objects have.
    pub class: Class,
    /// The ELF `e_machine` its objects have.
    pub machine: u16,
    /// The architecture bits `ldconfig` writes in a cache entry's flags.
    pub cache_flags: i32,
    /// The Debian multiarch directory, e.g. `/usr/lib/x86_64-linux-gnu`.
    pub debian_lib_dir: &'static str,
    /// The directory of RPM-family images, e.g. `/usr/lib64`.
    pub rpm_lib_dir: &'static str,
}

/// x86-64, the common GPU host.
pub const X86_64: Arch = Arch {
    name: "x86_64",
    class: Class::Elf64,
    machine: EM_X86_64,
    cache_flags: ldcache::FLAG_X8664_LIB64,
    debian_lib_dir: "/usr/lib/x86_64-linux-gnu",
    rpm_lib_dir: "/usr/lib64",
};

/// i386, the compat32 architecture of an x86-64 host.
pub const I386: Arch = Arch {
    name: "i386",
    class: Class::Elf32,
    machine: EM_386,
    cache_flags: ldcache::FLAG_I386,
    debian_lib_dir: "/usr/lib/i386-linux-gnu",
    rpm_lib_dir: "/usr/lib",
};

/// aarch64, Grace and Jetson-class hosts.
pub const AARCH64: Arch = Arch {
    name: "aarch64",
    class: Class::Elf64,
    machine: EM_AARCH64,
    cache_flags: ldcache::FLAG_AARCH64_LIB64,
    debian_lib_dir: "/usr/lib/aarch64-linux-gnu",
    rpm_lib_dir: "/usr/lib64",
};

impl Arch {
    /// The architecture this binary was built for, which is the host's.
    pub fn host() -> Arch {
        if cfg!(target_arch = "aarch64") {
            AARCH64
        } else {
            X86_64
        }
    }

    /// The 32-bit architecture that `compat32` adds, if the host has one.
    pub fn compat32(self) -> Option<Arch> {
        (self == X86_64).then_some(I386)
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// What an object is for: loaded by the loader, or run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A shared object, `ET_DYN`.
    SharedObject,
    /// A program: `ET_EXEC`, or a position-independent `ET_DYN`.
    Executable,
}

/// Why a file cannot be injected as the object we expected.
#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot read ELF header of {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not an ELF file")]
    NotElf { path: PathBuf },
    #[error("{path} has a malformed ELF header: {reason}")]
    Malformed { path: PathBuf, reason: String },
    #[error("{path} is ELF class {found}, expected {expected:?} for {arch}")]
    WrongClass {
        path: PathBuf,
        found: u8,
        expected: Class,
        arch: Arch,
    },
    #[error("{path} is for ELF machine {found}, expected {expected} ({arch})")]
    WrongMachine {
        path: PathBuf,
        found: u16,
        expected: u16,
        arch: Arch,
    },
    #[error("{path} has ELF type {found}, expected {expected}")]
    WrongType {
        path: PathBuf,
        found: u16,
        expected: &'static str,
    },
}

/// Result of an ELF check.
pub type Result<T> = std::result::Result<T, Error>;

/// Checks that `path` is an ELF object of `kind` for `arch`, reading only its header.
pub fn check_file(path: &Path, arch: Arch, kind: Kind) -> Result<()> {
    let mut header = [0u8; HEADER_LEN];
    let len = read_prefix(path, &mut header).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    check_header(path, &header[..len], arch, kind)
}

/// Reads as much of the first `buf.len()` bytes as the file has.
fn read_prefix(path: &Path, buf: &mut [u8]) -> std::io::Result<usize> {
    let (mut file, _) = crate::util::hostfile::open_regular(path)?;
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// Checks header bytes; `path` only names the file in errors.
pub fn check_header(path: &Path, bytes: &[u8], arch: Arch, kind: Kind) -> Result<()> {
    if !bytes.starts_with(b"\x7fELF") {
        return Err(Error::NotElf {
            path: path.to_path_buf(),
        });
    }
    let header = Elf::parse_header(bytes).map_err(|e| Error::Malformed {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let class = header.e_ident[EI_CLASS];
    let expected_class = match arch.class {
        Class::Elf32 => ELFCLASS32,
        Class::Elf64 => ELFCLASS64,
    };
    if class != expected_class {
        return Err(Error::WrongClass {
            path: path.to_path_buf(),
            found: class,
            expected: arch.class,
            arch,
        });
    }
    if header.e_machine != arch.machine {
        return Err(Error::WrongMachine {
            path: path.to_path_buf(),
            found: header.e_machine,
            expected: arch.machine,
            arch,
        });
    }
    let type_ok = match kind {
        Kind::SharedObject => header.e_type == ET_DYN,
        Kind::Executable => header.e_type == ET_EXEC || header.e_type == ET_DYN,
    };
    if !type_ok {
        return Err(Error::WrongType {
            path: path.to_path_buf(),
            found: header.e_type,
            expected: match kind {
                Kind::SharedObject => "ET_DYN (shared object)",
                Kind::Executable => "ET_EXEC or ET_DYN (executable)",
            },
        });
    }
    Ok(())
}

/// Largest program header table or dynamic section read for a SONAME;
/// real libraries have a few hundred bytes of each.
const MAX_TABLE: u64 = 64 * 1024;

/// Longest SONAME read.
const MAX_SONAME: usize = 4096;

/// A shared object's SONAME and architecture, as `ldconfig` records them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedObject {
    /// Its `DT_SONAME`.
    pub soname: String,
    /// The architecture it is for.
    pub arch: Arch,
}

/// The SONAME and architecture of `file` (already opened as a checked
/// regular file), read with a few bounded `pread`s of its headers and
/// dynamic section, never mapping or loading it; `None` for anything that is
/// not a little-endian shared object of a known architecture with a SONAME.
pub fn shared_object(file: &std::fs::File) -> Option<SharedObject> {
    let (arch, soname) = object_parts(file)?;
    Some(SharedObject {
        soname: soname?,
        arch,
    })
}

/// [`shared_object`], a shared object without a SONAME named by its file
/// name `name`, as `ldconfig` enters such a library in the cache.
pub fn loader_object(file: &std::fs::File, name: &str) -> Option<SharedObject> {
    let (arch, soname) = object_parts(file)?;
    Some(SharedObject {
        soname: soname.unwrap_or_else(|| name.to_string()),
        arch,
    })
}

/// The architecture of a little-endian shared object of a known
/// architecture, and its SONAME if it has one.
fn object_parts(file: &std::fs::File) -> Option<(Arch, Option<String>)> {
    let read = |offset: u64, len: u64| read_at_most(file, offset, len, MAX_TABLE);
    let header = read(0, 52)?;
    let wide = little_endian_wide(&header)?;
    let header = if wide { read(0, 64)? } else { header };
    let u16_at =
        |b: &[u8], at: usize| Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?));
    let u32_at =
        |b: &[u8], at: usize| Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?));
    let u64_at =
        |b: &[u8], at: usize| Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?));
    let word = |b: &[u8], at: usize| {
        if wide {
            u64_at(b, at)
        } else {
            u32_at(b, at).map(u64::from)
        }
    };
    if u16_at(&header, 16)? != ET_DYN {
        return None;
    }
    let machine = u16_at(&header, 18)?;
    let arch = [X86_64, I386, AARCH64]
        .into_iter()
        .find(|a| a.machine == machine && (a.class == Class::Elf64) == wide)?;
    let (phoff, phentsize, phnum) = if wide {
        (
            u64_at(&header, 32)?,
            u16_at(&header, 54)?,
            u16_at(&header, 56)?,
        )
    } else {
        (
            u64::from(u32_at(&header, 28)?),
            u16_at(&header, 42)?,
            u16_at(&header, 44)?,
        )
    };
    let table = read(phoff, u64::from(phentsize) * u64::from(phnum))?;
    // Program headers: (type, offset, vaddr, filesz).
    let phdrs: Vec<(u32, u64, u64, u64)> = table
        .chunks_exact(usize::from(phentsize.max(1)))
        .filter_map(|ph| {
            Some(if wide {
                (
                    u32_at(ph, 0)?,
                    u64_at(ph, 8)?,
                    u64_at(ph, 16)?,
                    u64_at(ph, 32)?,
                )
            } else {
                (u32_at(ph, 0)?, word(ph, 4)?, word(ph, 8)?, word(ph, 16)?)
            })
        })
        .collect();
    const PT_LOAD: u32 = 1;
    const PT_DYNAMIC: u32 = 2;
    const DT_STRTAB: u64 = 5;
    const DT_SONAME: u64 = 14;
    let Some(&(_, dyn_offset, _, dyn_size)) = phdrs.iter().find(|p| p.0 == PT_DYNAMIC) else {
        return Some((arch, None));
    };
    let dynamic = read(dyn_offset, dyn_size)?;
    let entry = if wide { 16 } else { 8 };
    let (mut strtab, mut soname) = (None, None);
    for d in dynamic.chunks_exact(entry) {
        let (tag, value) = (word(d, 0)?, word(d, entry / 2)?);
        match tag {
            0 => break,
            DT_STRTAB => strtab = Some(value),
            DT_SONAME => soname = Some(value),
            _ => {}
        }
    }
    let Some(soname) = soname else {
        return Some((arch, None));
    };
    // DT_STRTAB is an address: the file offset is the PT_LOAD's that holds it.
    let strtab = strtab?;
    let &(_, load_offset, load_vaddr, _) = phdrs
        .iter()
        .find(|p| p.0 == PT_LOAD && p.2 <= strtab && strtab - p.2 < p.3)?;
    let at = (strtab - load_vaddr)
        .checked_add(load_offset)?
        .checked_add(soname)?;
    let mut name = vec![0u8; MAX_SONAME];
    let len = std::os::unix::fs::FileExt::read_at(file, &mut name, at).ok()?;
    let end = name.get(..len)?.iter().position(|&b| b == 0)?;
    name.truncate(end);
    let soname = String::from_utf8(name)
        .ok()
        .filter(|s| !s.is_empty() && !s.contains('/'))?;
    Some((arch, Some(soname)))
}

/// `len` bytes of `file` at `offset`; none where `len` is past `most`.
fn read_at_most(file: &std::fs::File, offset: u64, len: u64, most: u64) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    if len > most {
        return None;
    }
    let mut buf = vec![0u8; usize::try_from(len).ok()?];
    file.read_exact_at(&mut buf, offset).ok()?;
    Some(buf)
}

/// Whether the little-endian ELF whose header starts `header` is 64-bit;
/// `None` for anything else.
fn little_endian_wide(header: &[u8]) -> Option<bool> {
    if !header.starts_with(b"\x7fELF") || header.get(5) != Some(&1) {
        return None;
    }
    match header.get(EI_CLASS) {
        Some(&ELFCLASS64) => Some(true),
        Some(&ELFCLASS32) => Some(false),
        _ => None,
    }
}

/// Largest section header string table or note section read for a note.
const MAX_NOTE_SECTION: u64 = 1024 * 1024;

/// The descriptor of the note of `owner` in section `section` (an
/// `SHT_NOTE`) of the little-endian ELF `file`, read with a few bounded
/// `pread`s: NVIDIA's CUDA compat libraries say in one
/// (`.note.cuda.fwd_compatibility`, owner `NVIDIA Corporation`) which CUDA
/// they support. `None` for a file without it, or malformed.
pub fn note(file: &std::fs::File, section: &str, owner: &str) -> Option<Vec<u8>> {
    const SHT_NOTE: u32 = 7;
    let read = |offset: u64, len: u64, most: u64| read_at_most(file, offset, len, most);
    let header = read(0, 64, 64).or_else(|| read(0, 52, 52))?;
    let wide = little_endian_wide(&header)?;
    let u16_at =
        |b: &[u8], at: usize| Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?));
    let u32_at =
        |b: &[u8], at: usize| Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?));
    let word = |b: &[u8], at: usize| -> Option<u64> {
        if wide {
            Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
        } else {
            u32_at(b, at).map(u64::from)
        }
    };
    // e_shoff, e_shentsize, e_shnum, e_shstrndx; then sh_name, sh_type,
    // sh_offset, sh_size, sh_addralign within each section header.
    let (shoff, entsize, num, strndx) = if wide {
        (
            word(&header, 0x28)?,
            u16_at(&header, 0x3A)?,
            u16_at(&header, 0x3C)?,
            u16_at(&header, 0x3E)?,
        )
    } else {
        (
            word(&header, 0x20)?,
            u16_at(&header, 0x2E)?,
            u16_at(&header, 0x30)?,
            u16_at(&header, 0x32)?,
        )
    };
    let (at_offset, at_size, at_align) = if wide { (24, 32, 48) } else { (16, 20, 32) };
    let table = read(shoff, u64::from(entsize) * u64::from(num), MAX_TABLE)?;
    let entry = |i: u16| table.get(usize::from(i) * usize::from(entsize)..);
    let strtab = entry(strndx)?;
    let names = read(
        word(strtab, at_offset)?,
        word(strtab, at_size)?,
        MAX_NOTE_SECTION,
    )?;
    let found = (0..num).filter_map(entry).find(|sh| {
        let named = u32_at(sh, 0)
            .and_then(|at| names.get(usize::try_from(at).ok()?..))
            .and_then(|rest| rest.split(|b| *b == 0).next())
            == Some(section.as_bytes());
        named && u32_at(sh, 4) == Some(SHT_NOTE)
    })?;
    let data = read(
        word(found, at_offset)?,
        word(found, at_size)?,
        MAX_NOTE_SECTION,
    )?;
    // Name and descriptor are padded to the section's alignment, as NVIDIA reads them.
    let align = usize::try_from(word(found, at_align)?.max(1)).ok()?;
    let pad = |n: usize| n.div_ceil(align) * align;
    let namesz = usize::try_from(u32_at(&data, 0)?).ok()?;
    let descsz = usize::try_from(u32_at(&data, 4)?).ok()?;
    let name = data.get(12..12 + pad(namesz))?;
    let trimmed = |b: &[u8]| -> Vec<u8> {
        let end = b.iter().rposition(|c| *c != 0).map_or(0, |i| i + 1);
        let start = b[..end].iter().position(|c| *c != 0).unwrap_or(end);
        b[start..end].to_vec()
    };
    if trimmed(name) != owner.as_bytes() {
        return None;
    }
    let start = 12 + pad(namesz);
    Some(trimmed(data.get(start..start + descsz)?))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal little-endian ELF header, enough for `check_header`.
    pub(crate) fn header(class: u8, machine: u16, e_type: u16) -> Vec<u8> {
        let mut h = vec![0u8; HEADER_LEN];
        h[..4].copy_from_slice(b"\x7fELF");
        h[EI_CLASS] = class;
        h[5] = 1; // ELFDATA2LSB
        h[6] = 1; // EV_CURRENT
        h[16..18].copy_from_slice(&e_type.to_le_bytes());
        h[18..20].copy_from_slice(&machine.to_le_bytes());
        h[20..24].copy_from_slice(&1u32.to_le_bytes());
        if class == ELFCLASS32 {
            h.truncate(52);
        }
        h
    }

    /// A 64-bit x86-64 shared object holding one note of `owner` with
    /// `desc` in section `section` (and the section name table).
    pub(crate) fn with_note(section: &str, owner: &str, desc: &[u8]) -> Vec<u8> {
        let mut elf = header(ELFCLASS64, EM_X86_64, ET_DYN);
        elf.resize(HEADER_LEN, 0);
        let pad4 = |v: &mut Vec<u8>| v.resize(v.len().div_ceil(4) * 4, 0);
        let names = format!("\0.shstrtab\0{section}\0").into_bytes();
        let names_at = elf.len() as u64;
        elf.extend(&names);
        pad4(&mut elf);
        let note_at = elf.len() as u64;
        let mut note = Vec::new();
        note.extend((owner.len() as u32 + 1).to_le_bytes());
        note.extend((desc.len() as u32).to_le_bytes());
        note.extend(1u32.to_le_bytes());
        note.extend(owner.as_bytes());
        note.push(0);
        pad4(&mut note);
        note.extend(desc);
        pad4(&mut note);
        elf.extend(&note);
        let shoff = elf.len() as u64;
        let section_header = |name: u32, kind: u32, at: u64, size: u64| {
            let mut sh = vec![0u8; 64];
            sh[0..4].copy_from_slice(&name.to_le_bytes());
            sh[4..8].copy_from_slice(&kind.to_le_bytes());
            sh[24..32].copy_from_slice(&at.to_le_bytes());
            sh[32..40].copy_from_slice(&size.to_le_bytes());
            sh[48..56].copy_from_slice(&4u64.to_le_bytes());
            sh
        };
        elf.extend(vec![0u8; 64]);
        elf.extend(section_header(1, 3, names_at, names.len() as u64));
        elf.extend(section_header(11, 7, note_at, note.len() as u64));
        elf[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        elf[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
        elf[0x3C..0x3E].copy_from_slice(&3u16.to_le_bytes());
        elf[0x3E..0x40].copy_from_slice(&1u16.to_le_bytes());
        elf
    }

    #[test]
    fn a_note_is_read_by_section_and_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("libcuda.so.1.1");
        let desc = br#"{"Format": 1, "CUDA Version": "13.2"}"#;
        std::fs::write(
            &path,
            with_note(".note.cuda.fwd_compatibility", "NVIDIA Corporation", desc),
        )
        .unwrap();
        let file = std::fs::File::open(&path).unwrap();
        assert_eq!(
            note(&file, ".note.cuda.fwd_compatibility", "NVIDIA Corporation").as_deref(),
            Some(&desc[..])
        );
        assert_eq!(
            note(&file, ".note.cuda.fwd_compatibility", "Someone Else"),
            None
        );
        assert_eq!(note(&file, ".note.other", "NVIDIA Corporation"), None);
        std::fs::write(&path, header(ELFCLASS64, EM_X86_64, ET_DYN)).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        assert_eq!(
            note(&file, ".note.cuda.fwd_compatibility", "NVIDIA Corporation"),
            None
        );
    }

    fn check(bytes: &[u8], arch: Arch, kind: Kind) -> Result<()> {
        check_header(Path::new("/lib/x.so"), bytes, arch, kind)
    }

    /// A shared object without a SONAME is entered by its file name, as
    /// `ldconfig` enters it (NVIDIA 535's `libnvidia-vulkan-producer`);
    /// `shared_object` still wants a SONAME.
    #[test]
    fn a_library_without_a_soname_is_named_by_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("libnvidia-vulkan-producer.so.535.261.03");
        std::fs::write(&path, header(ELFCLASS64, EM_X86_64, ET_DYN)).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        assert!(shared_object(&file).is_none());
        let object = loader_object(&file, "libnvidia-vulkan-producer.so.535.261.03").unwrap();
        assert_eq!(object.soname, "libnvidia-vulkan-producer.so.535.261.03");
        assert_eq!(object.arch.machine, X86_64.machine);
        // Not a shared object: nothing.
        std::fs::write(&path, header(ELFCLASS64, EM_X86_64, 2)).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        assert!(loader_object(&file, "x").is_none());
    }
    #[test]
    fn accepts_shared_object_of_the_right_arch() {
        check(
            &header(ELFCLASS64, EM_X86_64, ET_DYN),
            X86_64,
            Kind::SharedObject,
        )
        .unwrap();
        check(
            &header(ELFCLASS32, EM_386, ET_DYN),
            I386,
            Kind::SharedObject,
        )
        .unwrap();
        check(
            &header(ELFCLASS64, EM_AARCH64, ET_DYN),
            AARCH64,
            Kind::SharedObject,
        )
        .unwrap();
    }

    #[test]
    fn rejects_wrong_class() {
        let err = check(
            &header(ELFCLASS32, EM_386, ET_DYN),
            X86_64,
            Kind::SharedObject,
        )
        .unwrap_err();
        assert!(matches!(err, Error::WrongClass { found: 1, .. }), "{err}");
        assert!(err.to_string().contains("/lib/x.so"));
    }

    #[test]
    fn rejects_wrong_machine() {
        let err = check(
            &header(ELFCLASS64, EM_AARCH64, ET_DYN),
            X86_64,
            Kind::SharedObject,
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                Error::WrongMachine {
                    found: EM_AARCH64,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn rejects_executable_where_library_expected() {
        let err = check(
            &header(ELFCLASS64, EM_X86_64, ET_EXEC),
            X86_64,
            Kind::SharedObject,
        )
        .unwrap_err();
        assert!(
            matches!(err, Error::WrongType { found: ET_EXEC, .. }),
            "{err}"
        );
        check(
            &header(ELFCLASS64, EM_X86_64, ET_EXEC),
            X86_64,
            Kind::Executable,
        )
        .unwrap();
    }

    #[test]
    fn rejects_non_elf_and_truncated_headers() {
        assert!(matches!(
            check(b"#!/bin/sh\n", X86_64, Kind::Executable),
            Err(Error::NotElf { .. })
        ));
        assert!(matches!(
            check(b"", X86_64, Kind::Executable),
            Err(Error::NotElf { .. })
        ));
        let full = header(ELFCLASS64, EM_X86_64, ET_DYN);
        for len in 4..40 {
            assert!(
                check(&full[..len], X86_64, Kind::SharedObject).is_err(),
                "length {len}"
            );
        }
    }

    #[test]
    fn the_host_architecture_is_the_running_binary_s_machine() {
        let exe = std::env::current_exe().unwrap();
        let mut own = [0u8; HEADER_LEN];
        let len = read_prefix(&exe, &mut own).unwrap();
        let machine = Elf::parse_header(&own[..len]).unwrap().e_machine;
        assert_eq!(Arch::host().machine, machine);
        // Each 64-bit architecture refuses the other's objects.
        for (arch, other) in [(X86_64, EM_AARCH64), (AARCH64, EM_X86_64)] {
            let err =
                check(&header(ELFCLASS64, other, ET_DYN), arch, Kind::SharedObject).unwrap_err();
            assert!(matches!(err, Error::WrongMachine { .. }), "{arch}: {err}");
            check(
                &header(ELFCLASS64, arch.machine, ET_DYN),
                arch,
                Kind::SharedObject,
            )
            .unwrap();
        }
        assert_eq!(AARCH64.debian_lib_dir, "/usr/lib/aarch64-linux-gnu");
        assert_eq!(AARCH64.compat32(), None);
    }

    #[test]
    fn checks_a_real_file_by_reading_its_header() {
        let exe = std::env::current_exe().unwrap();
        check_file(&exe, Arch::host(), Kind::Executable).unwrap();
        let err = check_file(
            Path::new("/nonexistent/libx.so"),
            X86_64,
            Kind::SharedObject,
        )
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/libx.so"), "{err}");
    }
}

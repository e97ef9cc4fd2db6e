//! The glibc versions a binary needs, read with goblin from its
//! version-needed section (`.gnu.version_r`): an independent reading of
//! what `packaging/check-glibc` reads with readelf, and the package
//! dependencies derive from.

use std::fmt;
use std::path::Path;

/// A `GLIBC_x.y[.z]` version, ordered by number (2.17 after 2.9).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct GlibcVersion(Vec<u32>);

impl fmt::Display for GlibcVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u32::to_string).collect();
        f.write_str(&parts.join("."))
    }
}

impl GlibcVersion {
    /// Parses `2.17`; panics on anything else, naming it.
    pub fn parse(text: &str) -> Self {
        let parts = text
            .split('.')
            .map(|p| {
                p.parse()
                    .unwrap_or_else(|e| panic!("glibc version {text:?}: {e}"))
            })
            .collect();
        GlibcVersion(parts)
    }
}

/// Every `GLIBC_` version the ELF file at `path` needs, lowest first, from
/// any library (libc.so.6, libpthread.so.0, libdl.so.2, …).
pub fn needed(path: &Path) -> Vec<GlibcVersion> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let elf = goblin::elf::Elf::parse(&bytes)
        .unwrap_or_else(|e| panic!("{} is no ELF file goblin reads: {e}", path.display()));
    let mut versions = Vec::new();
    if let Some(verneed) = &elf.verneed {
        for file in verneed.iter() {
            for aux in file.iter() {
                let name = elf.dynstrtab.get_at(aux.vna_name).unwrap_or_default();
                if let Some(version) = name.strip_prefix("GLIBC_") {
                    if version.starts_with(|c: char| c.is_ascii_digit()) {
                        versions.push(GlibcVersion::parse(version));
                    }
                }
            }
        }
    }
    versions.sort();
    versions.dedup();
    versions
}

/// The glibc the shipped binaries are linked for (the Makefile's GLIBC_FLOOR).
pub const FLOOR: &str = "2.17";

/// The binary `make TARGET` ships for the Rust target `triple`
/// (`target/TRIPLE/release/oci-nvidia-hook`): static, so it needs no glibc
/// at all (checked), and the helper it embeds, for the same machine, needs
/// no newer glibc than [`FLOOR`] ([`shipped_probe`]); panics naming the
/// make target when either is missing.
pub fn shipped_binary(triple: &str, make_target: &str) -> std::path::PathBuf {
    let bin = crate::project::repo().join(format!("target/{triple}/release/oci-nvidia-hook"));
    assert!(
        bin.is_file(),
        "{} is missing: run `make {make_target}` first (`make test` does)",
        bin.display()
    );
    let needed = needed(&bin);
    assert!(
        needed.is_empty(),
        "{} is meant to be static, but needs glibc {needed:?}",
        bin.display()
    );
    let arch = triple.split('-').next().unwrap_or(triple);
    shipped_probe(arch, make_target);
    bin
}

/// The helper program `make TARGET` embeds in the binary for `arch`
/// (`x86_64`, `aarch64`): the driver helper (probe/), the one part that loads driver
/// code, checked to need no newer glibc than [`FLOOR`].
pub fn shipped_probe(arch: &str, make_target: &str) -> std::path::PathBuf {
    let probe = crate::project::repo().join(format!(
        "target/probe/{arch}-linux-gnu.{FLOOR}/oci-nvidia-hook-probe"
    ));
    assert!(
        probe.is_file(),
        "{} is missing: run `make {make_target}` first (`make test` does)",
        probe.display()
    );
    let highest = needed(&probe).pop().expect("a GLIBC_ version");
    assert!(
        highest <= GlibcVersion::parse(FLOOR),
        "{} needs glibc {highest}, newer than {FLOOR}",
        probe.display()
    );
    probe
}

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
/// (`target/TRIPLE/release/oci-nvidia-hook`), checked to need no newer
/// glibc than [`FLOOR`]; panics naming the make target when it is missing.
pub fn shipped_binary(triple: &str, make_target: &str) -> std::path::PathBuf {
    let bin = crate::project::repo().join(format!("target/{triple}/release/oci-nvidia-hook"));
    assert!(
        bin.is_file(),
        "{} is missing: run `make {make_target}` first (`make test` does)",
        bin.display()
    );
    let highest = needed(&bin).pop().expect("a GLIBC_ version");
    assert!(
        highest <= GlibcVersion::parse(FLOOR),
        "{} needs glibc {highest}, newer than {FLOOR}",
        bin.display()
    );
    bin
}

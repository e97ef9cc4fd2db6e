//! Selects the driver's libraries from the driver root's `ld.so.cache`.
//!
//! A host's cache usually also lists libraries of an older driver, and the
//! first entry for a SONAME is often the stale one. So every candidate is
//! resolved inside the driver root, kept only if its file name carries the
//! running kernel module's version, and checked to be an ELF shared object of
//! the entry's architecture. Nothing outside the driver root is ever used.
//! The catalogue's families are found here; what else the driver ships
//! beside them is found by scanning their directories ([`super::scan`]).

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::catalog::{self, LibrarySpec};
use super::root::DriverRoot;
use super::Error;
use crate::host::elf::{self, Arch};
use crate::host::ldcache::LdCacheEntry;
use crate::planning::request::{Capabilities, Capability};

/// A driver library found on the host, ready to inject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Library {
    /// The capability that brings it; `None` for a driver library of no
    /// known family, which every capability brings.
    pub capability: Option<Capability>,
    /// Its development link name: the catalogue prefix it matched, or its
    /// SONAME up to `.so` ([`catalog::dev_name`]).
    pub prefix: String,
    /// The name programs load it by, e.g. `libcuda.so.1`.
    pub soname: String,
    /// Its architecture.
    pub arch: &'static str,
    /// The real file on the host (no symlink), e.g. `/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.261.03`.
    pub path: PathBuf,
}

/// A library of a requested capability that the host does not have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MissingLibrary {
    /// The capability that wanted it.
    pub capability: Capability,
    /// Its SONAME prefix.
    pub prefix: &'static str,
    /// Whether the capability cannot work without it.
    pub core: bool,
}

impl Library {
    /// A library named `soname` at `path`, placed by its family
    /// ([`classify`]); `None` where `scope` does not bring it or the name
    /// is no library's.
    pub fn new(soname: &str, arch: Arch, path: PathBuf, scope: &Capabilities) -> Option<Library> {
        let (capability, prefix) = classify(soname)?;
        wanted(capability, scope).then(|| Library {
            capability,
            prefix,
            soname: soname.to_string(),
            arch: arch.name,
            path,
        })
    }

    /// Whether a container asking for `caps` gets it.
    pub fn wanted_by(&self, caps: &Capabilities) -> bool {
        wanted(self.capability, caps)
    }
}

/// A library's capability and development link name, from its SONAME: a
/// known family's, or, for a driver library of none, no capability (every
/// capability brings it) and its name up to `.so`.
pub fn classify(soname: &str) -> Option<(Option<Capability>, String)> {
    match catalog::library_for(soname) {
        Some(spec) => Some((Some(spec.capability), spec.prefix.to_string())),
        None => Some((None, catalog::dev_name(soname)?.to_string())),
    }
}

/// Whether `caps` brings a library of `capability`; one of no family
/// comes with any capability but compat32, which only widens the others.
fn wanted(capability: Option<Capability>, caps: &Capabilities) -> bool {
    match capability {
        Some(c) => caps.contains(c),
        None => caps.iter().any(|c| c != Capability::Compat32),
    }
}

/// The architectures libraries are taken for: the host's, and its 32-bit
/// one when `compat32` is in scope.
pub fn archs(host: Arch, scope: &Capabilities) -> impl Iterator<Item = Arch> {
    let compat32 = scope
        .contains(Capability::Compat32)
        .then(|| host.compat32())
        .flatten();
    [Some(host), compat32].into_iter().flatten()
}

/// Picks the libraries of `scope`'s catalogue families out of `entries`
/// for the host architecture, and for its 32-bit one when `compat32` is in
/// scope.
pub fn select(
    root: &DriverRoot,
    entries: &[LdCacheEntry],
    version: &str,
    host: Arch,
    scope: &Capabilities,
) -> Vec<Library> {
    let suffix = format!(".so.{version}");
    let mut found: Vec<Library> = Vec::new();
    for entry in entries.iter().filter(|e| e.is_elf()) {
        let Some(arch) = archs(host, scope).find(|a| a.cache_flags == entry.arch()) else {
            continue;
        };
        // A family versioned on its own is only taken beside the running
        // driver's libraries, by the scan.
        let Some(spec) = catalog::library_for(&entry.soname)
            .filter(|s| s.versioned && scope.contains(s.capability))
        else {
            continue;
        };
        let Some(path) = candidate(root, entry, &suffix) else {
            continue;
        };
        match found
            .iter_mut()
            // Both paths come from the same resolution: compare their bytes,
            // not their parsed components.
            .find(|l| l.path.as_os_str() == path.as_os_str() && l.arch == arch.name)
        {
            // ldconfig may list one file under several names (the SONAME, the
            // development link): keep the versioned SONAME, and read the ELF
            // header once.
            Some(known) => {
                if is_better_soname(spec, &entry.soname, &known.soname) {
                    known.soname = entry.soname.clone();
                }
            }
            None if !elf_ok(entry, &path, arch) => {}
            None => found.push(Library {
                capability: Some(spec.capability),
                prefix: spec.prefix.to_string(),
                soname: entry.soname.clone(),
                arch: arch.name,
                path,
            }),
        }
    }
    found
}

/// The libraries of `scope` that libnvidia-container lists and `found`
/// lacks for the host architecture.
pub fn missing(found: &[Library], host: Arch, scope: &Capabilities) -> Vec<MissingLibrary> {
    catalog::LIBRARIES
        .iter()
        .filter(|spec| spec.expected && scope.contains(spec.capability))
        .filter(|spec| {
            !found
                .iter()
                .any(|l| l.prefix == spec.prefix && l.arch == host.name)
        })
        .map(|spec| MissingLibrary {
            capability: spec.capability,
            prefix: spec.prefix,
            core: spec.core,
        })
        .collect()
}

/// Resolves one cache entry and returns its real file if it is of the running
/// driver and a regular file; says why not in the log.
pub(super) fn candidate(root: &DriverRoot, entry: &LdCacheEntry, suffix: &str) -> Option<PathBuf> {
    let resolved = match root.resolve(entry.path.as_ref()) {
        Ok(r) => r,
        Err(Error::NotFound { .. }) => {
            log::debug!(
                "skipping {} ({}): dangling cache entry",
                entry.path,
                entry.soname
            );
            return None;
        }
        Err(e) => {
            log::warn!("skipping {} ({}): {e}", entry.path, entry.soname);
            return None;
        }
    };
    let name = resolved.inner.file_name()?.to_string_lossy();
    if !name.ends_with(suffix) {
        log::debug!(
            "skipping {} -> {}: not of the running driver (want *{suffix})",
            entry.path,
            resolved.inner.display()
        );
        return None;
    }
    if !resolved.metadata.is_file() {
        log::warn!(
            "skipping {}: {} is not a regular file",
            entry.path,
            resolved.host.display()
        );
        return None;
    }
    Some(resolved.host)
}

/// Whether `path`, the real file of `entry`, is a shared object of `arch`; says why not in the log.
fn elf_ok(entry: &LdCacheEntry, path: &Path, arch: Arch) -> bool {
    match elf::check_file(path, arch, elf::Kind::SharedObject) {
        Ok(()) => true,
        Err(e) => {
            log::warn!("skipping {}: {e}", entry.path);
            false
        }
    }
}

/// Whether `new` names the library better than `old`: a versioned SONAME
/// (`libcuda.so.1`) beats the bare development name (`libcuda.so`).
fn is_better_soname(spec: &LibrarySpec, new: &str, old: &str) -> bool {
    old == spec.prefix && new != spec.prefix
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::symlink;
    use std::path::Path;

    use goblin::elf::header::{
        ELFCLASS32, ELFCLASS64, EM_386, EM_AARCH64, EM_X86_64, ET_DYN, ET_EXEC,
    };

    use super::*;
    use crate::host::elf::tests::header;
    use crate::host::elf::{AARCH64, I386, X86_64};
    use crate::host::ldcache::{
        FLAG_AARCH64_LIB64, FLAG_ELF, FLAG_ELF_LIBC6, FLAG_I386, FLAG_X8664_LIB64,
    };

    const V: &str = "535.261.03";
    const X86: i32 = FLAG_ELF_LIBC6 | FLAG_X8664_LIB64;

    struct Host {
        _dir: tempfile::TempDir,
        root: DriverRoot,
        entries: Vec<LdCacheEntry>,
    }

    impl Host {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let root = DriverRoot::new(dir.path());
            Host {
                _dir: dir,
                root,
                entries: Vec::new(),
            }
        }

        fn file(&self, inner: &str, bytes: &[u8]) {
            let host = self.root.host_path(Path::new(inner));
            fs::create_dir_all(host.parent().unwrap()).unwrap();
            fs::write(host, bytes).unwrap();
        }

        fn link(&self, inner: &str, target: &str) {
            let host = self.root.host_path(Path::new(inner));
            fs::create_dir_all(host.parent().unwrap()).unwrap();
            symlink(target, host).unwrap();
        }

        fn entry(&mut self, flags: i32, soname: &str, path: &str) {
            self.entries.push(LdCacheEntry {
                flags,
                soname: soname.into(),
                path: path.into(),
                hwcap: 0,
            });
        }

        fn select(&self, caps: &str) -> (Vec<Library>, Vec<MissingLibrary>) {
            self.select_on(X86_64, caps)
        }

        fn select_on(&self, host: Arch, caps: &str) -> (Vec<Library>, Vec<MissingLibrary>) {
            let scope = Capabilities::parse(caps).unwrap();
            let found = select(&self.root, &self.entries, V, host, &scope);
            let missing = missing(&found, host, &scope);
            (found, missing)
        }
    }

    fn so64() -> Vec<u8> {
        header(ELFCLASS64, EM_X86_64, ET_DYN)
    }

    fn names(libs: &[Library]) -> Vec<String> {
        libs.iter()
            .map(|l| l.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn rejects_library_of_another_driver_version() {
        let mut host = Host::new();
        host.file("/usr/lib/stale/libcuda.so.470.256.02", &so64());
        host.link("/usr/lib/stale/libcuda.so.1", "libcuda.so.470.256.02");
        host.file("/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03", &so64());
        host.link(
            "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
            "libcuda.so.535.261.03",
        );
        host.entry(X86, "libcuda.so.1", "/usr/lib/stale/libcuda.so.1");
        host.entry(
            X86,
            "libcuda.so.1",
            "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        );
        let (libs, _) = host.select("compute");
        assert_eq!(names(&libs), ["libcuda.so.535.261.03"]);
        assert_eq!(libs[0].soname, "libcuda.so.1");
        assert_eq!(libs[0].arch, "x86_64");
    }

    /// An arm64 host (Grace) and an x86-64 one, each with the other's
    /// libcuda beside its own, as a multiarch host or a copied tree has.
    fn two_arch_host() -> Host {
        let mut host = Host::new();
        for (dir, machine, flags) in [
            ("aarch64-linux-gnu", EM_AARCH64, FLAG_AARCH64_LIB64),
            ("x86_64-linux-gnu", EM_X86_64, FLAG_X8664_LIB64),
        ] {
            let real = format!("/usr/lib/{dir}/libcuda.so.{V}");
            host.file(&real, &header(ELFCLASS64, machine, ET_DYN));
            host.link(&format!("/usr/lib/{dir}/libcuda.so.1"), &real);
            host.entry(
                FLAG_ELF_LIBC6 | flags,
                "libcuda.so.1",
                &format!("/usr/lib/{dir}/libcuda.so.1"),
            );
        }
        host
    }

    #[test]
    fn each_host_architecture_takes_its_own_libraries_only() {
        let host = two_arch_host();
        for (arch, dir) in [
            (AARCH64, "/usr/lib/aarch64-linux-gnu/"),
            (X86_64, "/usr/lib/x86_64-linux-gnu/"),
        ] {
            let (libs, missing) = host.select_on(arch, "compute");
            assert_eq!(names(&libs), [format!("libcuda.so.{V}")], "{arch}");
            assert_eq!(libs[0].arch, arch.name);
            assert!(
                libs[0]
                    .path
                    .starts_with(host.root.host_path(Path::new(dir))),
                "{arch}: {}",
                libs[0].path.display()
            );
            assert!(missing.iter().all(|m| m.prefix != "libcuda.so"));
        }
    }

    #[test]
    fn a_library_of_the_other_machine_is_refused_whatever_the_cache_says() {
        // Each cache entry claims the host's architecture but points at the
        // other machine's object: the ELF header decides.
        for (arch, flags, wrong) in [
            (AARCH64, FLAG_AARCH64_LIB64, EM_X86_64),
            (X86_64, FLAG_X8664_LIB64, EM_AARCH64),
        ] {
            let mut host = Host::new();
            let real = format!("/usr/lib/{}/libcuda.so.{V}", arch.name);
            host.file(&real, &header(ELFCLASS64, wrong, ET_DYN));
            host.entry(FLAG_ELF_LIBC6 | flags, "libcuda.so.1", &real);
            let (libs, missing) = host.select_on(arch, "compute");
            assert!(libs.is_empty(), "{arch} took {:?}", names(&libs));
            assert!(
                missing.iter().any(|m| m.prefix == "libcuda.so"),
                "{arch}: {missing:?}"
            );
        }
    }

    #[test]
    fn arm64_has_no_compat32() {
        let mut host = two_arch_host();
        let real = format!("/usr/lib/i386-linux-gnu/libcuda.so.{V}");
        host.file(&real, &header(ELFCLASS32, EM_386, ET_DYN));
        host.entry(FLAG_ELF_LIBC6 | FLAG_I386, "libcuda.so.1", &real);
        let (libs, _) = host.select_on(AARCH64, "compute,compat32");
        assert_eq!(libs.iter().map(|l| l.arch).collect::<Vec<_>>(), ["aarch64"]);
    }

    #[test]
    fn follows_alternatives_and_reroots_absolute_links() {
        let mut host = Host::new();
        host.file(
            "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.535.261.03",
            &so64(),
        );
        host.link(
            "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.1",
            "libnvidia-ml.so.535.261.03",
        );
        host.link(
            "/etc/alternatives/nvidia--libnvidia-ml.so.1-x86_64-linux-gnu",
            "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.1",
        );
        host.link(
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
            "/etc/alternatives/nvidia--libnvidia-ml.so.1-x86_64-linux-gnu",
        );
        host.entry(
            X86,
            "libnvidia-ml.so.1",
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
        );
        let (libs, _) = host.select("utility");
        assert_eq!(names(&libs), ["libnvidia-ml.so.535.261.03"]);
        assert!(libs[0].path.starts_with(host.root.path()));
    }

    #[test]
    fn refuses_link_that_escapes_the_root() {
        let mut host = Host::new();
        host.link(
            "/usr/lib/libcuda.so.1",
            "../../../../../../../tmp/libcuda.so.535.261.03",
        );
        host.entry(X86, "libcuda.so.1", "/usr/lib/libcuda.so.1");
        let (libs, missing) = host.select("compute");
        assert!(libs.is_empty());
        assert!(missing.iter().any(|m| m.prefix == "libcuda.so" && m.core));
    }

    #[test]
    fn rejects_wrong_elf_class_and_non_shared_objects() {
        let mut host = Host::new();
        host.file(
            "/usr/lib/libcuda.so.535.261.03",
            &header(ELFCLASS32, EM_386, ET_DYN),
        );
        host.file(
            "/usr/lib/libnvidia-ml.so.535.261.03",
            &header(ELFCLASS64, EM_X86_64, ET_EXEC),
        );
        host.file("/usr/lib/libnvidia-cfg.so.535.261.03", b"not an elf");
        host.entry(X86, "libcuda.so.1", "/usr/lib/libcuda.so.535.261.03");
        host.entry(
            X86,
            "libnvidia-ml.so.1",
            "/usr/lib/libnvidia-ml.so.535.261.03",
        );
        host.entry(
            X86,
            "libnvidia-cfg.so.1",
            "/usr/lib/libnvidia-cfg.so.535.261.03",
        );
        let (libs, _) = host.select("compute,utility");
        assert!(libs.is_empty(), "{libs:?}");
    }

    #[test]
    fn rejects_directory_where_a_library_is_expected() {
        let mut host = Host::new();
        fs::create_dir_all(
            host.root
                .host_path(Path::new("/usr/lib/libcuda.so.535.261.03")),
        )
        .unwrap();
        host.entry(X86, "libcuda.so.1", "/usr/lib/libcuda.so.535.261.03");
        assert!(host.select("compute").0.is_empty());
    }

    #[test]
    fn selects_by_capability_and_reports_missing() {
        let mut host = Host::new();
        host.file("/usr/lib/libcuda.so.535.261.03", &so64());
        host.file("/usr/lib/libnvidia-ml.so.535.261.03", &so64());
        host.entry(X86, "libcuda.so.1", "/usr/lib/libcuda.so.535.261.03");
        host.entry(
            X86,
            "libnvidia-ml.so.1",
            "/usr/lib/libnvidia-ml.so.535.261.03",
        );
        let (libs, missing) = host.select("utility");
        assert_eq!(names(&libs), ["libnvidia-ml.so.535.261.03"]);
        assert!(missing.iter().all(|m| m.capability == Capability::Utility));
        assert!(missing
            .iter()
            .any(|m| m.prefix == "libnvidia-cfg.so" && !m.core));
        assert!(!missing.iter().any(|m| m.prefix == "libnvidia-ml.so"));
    }

    #[test]
    fn compat32_selects_i386_entries_only_when_asked() {
        let mut host = Host::new();
        host.file("/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03", &so64());
        host.file(
            "/usr/lib/i386-linux-gnu/libcuda.so.535.261.03",
            &header(ELFCLASS32, EM_386, ET_DYN),
        );
        host.entry(
            X86,
            "libcuda.so.1",
            "/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03",
        );
        // An i386 object that does not link libc is cached as plain FLAG_ELF.
        host.entry(
            FLAG_ELF | FLAG_I386,
            "libcuda.so.1",
            "/usr/lib/i386-linux-gnu/libcuda.so.535.261.03",
        );
        let (libs, _) = host.select("compute");
        assert_eq!(libs.len(), 1);
        let (libs, _) = host.select("compute,compat32");
        let archs: Vec<_> = libs.iter().map(|l| l.arch).collect();
        assert_eq!(archs, ["x86_64", I386.name]);
    }

    #[test]
    fn one_file_listed_twice_is_kept_once_with_its_soname() {
        let mut host = Host::new();
        host.file("/usr/lib/libcuda.so.535.261.03", &so64());
        host.link("/usr/lib/libcuda.so.1", "libcuda.so.535.261.03");
        host.link("/usr/lib/libcuda.so", "libcuda.so.1");
        host.entry(X86, "libcuda.so", "/usr/lib/libcuda.so");
        host.entry(X86, "libcuda.so.1", "/usr/lib/libcuda.so.1");
        let (libs, _) = host.select("compute");
        assert_eq!(libs.len(), 1);
        assert_eq!(libs[0].soname, "libcuda.so.1");
    }

    #[test]
    fn a_family_versioned_on_its_own_is_left_to_the_scan() {
        let mut host = Host::new();
        host.file("/usr/lib/libnvidia-nvvm70.so.4", &so64());
        host.entry(
            X86,
            "libnvidia-nvvm70.so.4",
            "/usr/lib/libnvidia-nvvm70.so.4",
        );
        let (libs, missing) = host.select("compute");
        assert!(libs.is_empty(), "{libs:?}");
        assert!(missing.iter().all(|m| m.prefix != "libnvidia-nvvm70.so"));
    }

    #[test]
    fn a_library_is_classified_by_its_soname() {
        assert_eq!(
            classify("libnvidia-nvvm70.so.4"),
            Some((Some(Capability::Compute), "libnvidia-nvvm70.so".into()))
        );
        assert_eq!(
            classify("libnvidia-brandnew.so.1"),
            Some((None, "libnvidia-brandnew.so".into()))
        );
        assert_eq!(classify("nvidia"), None);
    }

    #[test]
    fn ignores_other_architectures_and_libraries() {
        let mut host = Host::new();
        host.file("/usr/lib/libcuda.so.535.261.03", &so64());
        host.file("/usr/lib/libcudart.so.535.261.03", &so64());
        host.entry(
            FLAG_ELF_LIBC6 | 0x0a00,
            "libcuda.so.1",
            "/usr/lib/libcuda.so.535.261.03",
        );
        host.entry(X86, "libcudart.so.12", "/usr/lib/libcudart.so.535.261.03");
        assert!(host.select("all").0.is_empty());
    }
}

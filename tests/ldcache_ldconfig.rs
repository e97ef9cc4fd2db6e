//! Our `ld.so.cache` parser against glibc's own reader: for each format that
//! `ldconfig -c` writes, `ldconfig -p` and `LdCache::parse` must list the
//! same entries in the same order.

use harness::simhost::{CacheFormat, Fixture, SimHost};
use oci_nvidia_hook::host::ldcache::{self, Format, LdCache};

/// `ldconfig -p -C FILE` as (soname, arch tag, path), in file order.
fn ldconfig_print(cache: &std::path::Path) -> Vec<(String, String, String)> {
    harness::ldconfig::ldconfig_print(cache)
        .into_iter()
        .map(|e| (e.soname, e.tag, e.path))
        .collect()
}

/// How `ldconfig -p` names an entry's flags.
fn tag(flags: i32) -> &'static str {
    match (
        flags & ldcache::FLAG_TYPE_MASK,
        flags & ldcache::FLAG_ARCH_MASK,
    ) {
        (ldcache::FLAG_ELF_LIBC6, ldcache::FLAG_X8664_LIB64) => "libc6,x86-64",
        (ldcache::FLAG_ELF_LIBC6, ldcache::FLAG_I386) => "libc6",
        (ldcache::FLAG_ELF, ldcache::FLAG_I386) => "ELF",
        _ => "other",
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn parser_agrees_with_ldconfig_for_every_format() {
    for (format, expected) in [
        (CacheFormat::New, Format::New),
        (CacheFormat::Old, Format::Old),
        (CacheFormat::Compat, Format::Compat),
    ] {
        let sim = SimHost::shared(Fixture::synthetic(1).cache_format(format));
        let path = sim.path("driver/etc/ld.so.cache");
        let cache = LdCache::parse(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(cache.format, expected, "{format:?}");
        let ours: Vec<(String, String, String)> = cache
            .entries
            .iter()
            .map(|e| (e.soname.clone(), tag(e.flags).to_string(), e.path.clone()))
            .collect();
        let theirs = ldconfig_print(&path);
        assert!(
            theirs.len() > 20,
            "{format:?}: fixture cache too small: {theirs:?}"
        );
        assert_eq!(ours, theirs, "{format:?}");
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn parser_reads_this_machines_own_cache() {
    harness::simhost::require_root();
    let path = std::path::Path::new("/etc/ld.so.cache");
    let cache = LdCache::parse(&std::fs::read(path).unwrap()).unwrap();
    let ours: Vec<(String, String)> = cache
        .entries
        .iter()
        .map(|e| (e.soname.clone(), e.path.clone()))
        .collect();
    let theirs: Vec<(String, String)> = ldconfig_print(path)
        .into_iter()
        .map(|(s, _, p)| (s, p))
        .collect();
    assert_eq!(ours, theirs);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn writer_sorts_like_ldconfig_and_glibc_reads_it() {
    let sim = SimHost::shared(Fixture::synthetic(1));
    let written_by_ldconfig =
        LdCache::parse(&std::fs::read(sim.path("driver/etc/ld.so.cache")).unwrap()).unwrap();
    let mut ours = written_by_ldconfig.clone();
    ours.entries.reverse();
    ours.sort_for_lookup();
    let keys = |c: &LdCache| {
        c.entries
            .iter()
            .map(|e| (e.soname.clone(), e.flags))
            .collect::<Vec<_>>()
    };
    assert_eq!(keys(&ours), keys(&written_by_ldconfig));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ld.so.cache");
    std::fs::write(&path, ours.to_bytes()).unwrap();
    let theirs = ldconfig_print(&path);
    let mine: Vec<(String, String, String)> = ours
        .entries
        .iter()
        .map(|e| (e.soname.clone(), tag(e.flags).to_string(), e.path.clone()))
        .collect();
    assert_eq!(theirs, mine);
}

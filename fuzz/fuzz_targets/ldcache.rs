//! Feeds arbitrary bytes to the `ld.so.cache` parser (an image's own cache is
//! hostile input). Nothing may panic; every refusal is one line. A cache that
//! parses must survive the writer: its entries, written as they are or sorted
//! for lookup, parse back unchanged in the new format, and the sorted order
//! is the loader's (descending, with a consistent comparison).

#![no_main]

mod common;

use std::cmp::Ordering;

use common::assert_one_line;
use libfuzzer_sys::fuzz_target;
use oci_nvidia_hook::host::ldcache::{libcmp, Format, LdCache, LdCacheEntry};

fuzz_target!(|data: &[u8]| {
    let mut cache = match LdCache::parse(data) {
        Ok(cache) => cache,
        Err(e) => {
            assert_one_line(&e.to_string());
            return;
        }
    };
    round_trip(&cache);
    cache.sort_for_lookup();
    round_trip(&cache);
    for pair in cache.entries.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let order = lookup_order(a, b);
        assert_ne!(order, Ordering::Greater, "unsorted: {a:?} then {b:?}");
        assert_eq!(
            libcmp(&a.soname, &b.soname),
            libcmp(&b.soname, &a.soname).reverse(),
            "libcmp is not antisymmetric on {:?} and {:?}",
            a.soname,
            b.soname
        );
    }
    let mut again = cache.clone();
    again.sort_for_lookup();
    assert_eq!(again.entries, cache.entries, "sorting is not idempotent");
});

/// The writer's output parses back to the same entries, in the new format.
fn round_trip(cache: &LdCache) {
    let bytes = cache.to_bytes();
    let again = LdCache::parse(&bytes)
        .unwrap_or_else(|e| panic!("written cache does not parse: {e}: {bytes:02x?}"));
    assert_eq!(again.format, Format::New);
    assert_eq!(again.entries, cache.entries);
}

/// `sort_for_lookup`'s order: `Less` or `Equal` when `a` may come before `b`.
fn lookup_order(a: &LdCacheEntry, b: &LdCacheEntry) -> Ordering {
    libcmp(&b.soname, &a.soname)
        .then(b.flags.cmp(&a.flags))
        .then(b.hwcap.cmp(&a.hwcap))
}

//! Makes injected libraries visible to the image's dynamic loader without
//! executing anything: we rewrite the image's `/etc/ld.so.cache` ourselves
//! (its entries plus ours, sorted as glibc's lookup expects) and add an
//! `/etc/ld.so.conf.d/` entry so a later `ldconfig` in the container keeps them.

use crate::ldcache::{self, Format, LdCache, LdCacheEntry};
use crate::plan::LoaderEntry;

/// Name of our `ld.so.conf.d` file; `000-` sorts it first.
pub const CONF_NAME: &str = "000-oci-nvidia-hook.conf";

/// The image's cache (if it has one) with our entries added. An image entry
/// for the same SONAME and architecture is dropped so that ours is found.
pub fn merged_cache(image: Option<&[u8]>, ours: &[LoaderEntry]) -> Result<Vec<u8>, ldcache::Error> {
    let mut cache = match image {
        Some(data) => LdCache::parse(data)?,
        None => LdCache {
            format: Format::New,
            entries: Vec::new(),
        },
    };
    cache.entries.retain(|e| {
        !ours
            .iter()
            .any(|o| o.soname == e.soname && o.flags == e.flags)
    });
    cache.entries.extend(ours.iter().map(|o| LdCacheEntry {
        flags: o.flags,
        soname: o.soname.clone(),
        path: o.path.to_string_lossy().into_owned(),
        hwcap: 0,
    }));
    cache.sort_for_lookup();
    Ok(cache.to_bytes())
}

/// The `ld.so.conf.d` file listing our library directories.
pub fn conf_file(dirs: &[std::path::PathBuf]) -> Vec<u8> {
    let mut text = String::from("# Written by oci-nvidia-hook: NVIDIA driver libraries.\n");
    for dir in dirs {
        text.push_str(&dir.to_string_lossy());
        text.push('\n');
    }
    text.into_bytes()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::ldcache::{FLAG_ELF_LIBC6, FLAG_I386, FLAG_X8664_LIB64};

    const X86: i32 = FLAG_ELF_LIBC6 | FLAG_X8664_LIB64;

    fn ours() -> Vec<LoaderEntry> {
        vec![
            LoaderEntry {
                soname: "libcuda.so.1".into(),
                path: PathBuf::from("/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
                arch: "x86_64",
                flags: X86,
            },
            LoaderEntry {
                soname: "libcuda.so.1".into(),
                path: PathBuf::from("/usr/lib/i386-linux-gnu/libcuda.so.1"),
                arch: "i386",
                flags: FLAG_ELF_LIBC6 | FLAG_I386,
            },
        ]
    }

    fn image_cache(entries: &[(&str, &str, i32)]) -> Vec<u8> {
        LdCache {
            format: Format::New,
            entries: entries
                .iter()
                .map(|(soname, path, flags)| LdCacheEntry {
                    flags: *flags,
                    soname: soname.to_string(),
                    path: path.to_string(),
                    hwcap: 0,
                })
                .collect(),
        }
        .to_bytes()
    }

    #[test]
    fn keeps_image_entries_and_adds_ours_sorted() {
        let image = image_cache(&[("libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6", X86)]);
        let merged = LdCache::parse(&merged_cache(Some(&image), &ours()).unwrap()).unwrap();
        let names: Vec<(&str, &str)> = merged
            .entries
            .iter()
            .map(|e| (e.soname.as_str(), e.path.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
                ("libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so.1"),
                ("libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"),
            ]
        );
    }

    #[test]
    fn replaces_an_image_entry_for_the_same_library() {
        let image = image_cache(&[
            ("libcuda.so.1", "/usr/local/cuda/compat/libcuda.so.1", X86),
            (
                "libcuda.so.1",
                "/usr/lib/i386-linux-gnu/old/libcuda.so.1",
                FLAG_ELF_LIBC6 | FLAG_I386,
            ),
        ]);
        let merged = LdCache::parse(&merged_cache(Some(&image), &ours()[..1]).unwrap()).unwrap();
        let paths: Vec<&str> = merged.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                "/usr/lib/i386-linux-gnu/old/libcuda.so.1"
            ]
        );
    }

    #[test]
    fn first_of_our_entries_for_a_name_stays_first() {
        let mut ours = ours();
        ours.insert(
            0,
            LoaderEntry {
                soname: "libcuda.so.1".into(),
                path: PathBuf::from("/usr/local/cuda/compat/libcuda.so.550.54.15"),
                arch: "x86_64",
                flags: X86,
            },
        );
        let merged = LdCache::parse(&merged_cache(None, &ours).unwrap()).unwrap();
        let paths: Vec<&str> = merged.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths[0], "/usr/local/cuda/compat/libcuda.so.550.54.15",
            "glibc takes the first match"
        );
        assert_eq!(paths[1], "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
    }

    #[test]
    fn image_without_cache_gets_ours_only() {
        let merged = LdCache::parse(&merged_cache(None, &ours()).unwrap()).unwrap();
        assert_eq!(merged.entries.len(), 2);
    }

    #[test]
    fn corrupt_image_cache_is_an_error() {
        assert!(merged_cache(Some(b"glibc-ld.so.cache1.1 truncated"), &ours()).is_err());
    }

    #[test]
    fn conf_lists_directories() {
        let text =
            String::from_utf8(conf_file(&[PathBuf::from("/usr/lib/x86_64-linux-gnu")])).unwrap();
        assert!(text.ends_with("\n/usr/lib/x86_64-linux-gnu\n"), "{text}");
    }
}

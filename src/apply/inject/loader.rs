//! Makes injected libraries visible to the image's dynamic loader without
//! executing anything: we rewrite the image's `/etc/ld.so.cache` ourselves
//! (its entries plus ours, sorted as glibc's lookup expects) and add an
//! `/etc/ld.so.conf.d/` entry so a later `ldconfig` in the container keeps them.
//!
//! The image's cache is read and merged before the rootfs is touched, and
//! both files are written last, whole, under hidden names, then put in
//! place, the cache last of all, renamed over the image's: the loader never
//! sees half a cache, and a failed injection leaves the image's own (see
//! `inject`'s module documentation). A file that already
//! holds what we would write (a reused rootfs) is left alone. Image files
//! are opened only once resolved inside the rootfs and checked to be regular.

use std::io::Read;
use std::os::fd::AsFd;
use std::path::Path;

use pathrs::Root;

use super::journal::Journal;
use super::place::{kind_at, Dirs};
use super::slot::Slot;
use super::staged::Staged;
use super::userns::Edit;
use super::{Error, Result};
use crate::host::ldcache::{self, Format, LdCache, LdCacheEntry};
use crate::planning::plan::{LoaderEntry, Plan};
use crate::util::reopen::{self, Expect, Reopener};

/// The image's loader cache.
const CACHE: &str = "/etc/ld.so.cache";

/// Where our `ld.so.conf.d` file goes.
const CONF_DIR: &str = "/etc/ld.so.conf.d";

/// Largest image `ld.so.cache` we read; real ones are well under 1 MiB.
const MAX_IMAGE_CACHE: u64 = 32 * 1024 * 1024;

/// Largest `ld.so.conf.d` file of ours we read back; ours are a few lines.
const MAX_CONF: u64 = 64 * 1024;

/// Name of our `ld.so.conf.d` file; `000-` sorts it first.
pub const CONF_NAME: &str = "000-oci-nvidia-hook.conf";

/// The image's cache (if it has one) with our entries added. An image entry
/// for the same SONAME and architecture is dropped so that ours is found.
pub fn merged_cache(
    image: Option<&[u8]>,
    ours: &[LoaderEntry],
) -> std::result::Result<Vec<u8>, ldcache::Error> {
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

/// The loader update for a plan, read and merged, to be committed last.
#[derive(Debug)]
pub(super) struct Update {
    /// The image's cache as read, if it has one.
    old_cache: Option<Vec<u8>>,
    /// The image's cache with our entries.
    cache: Vec<u8>,
    /// What our `ld.so.conf.d` file holds now, if it is there.
    old_conf: Option<Vec<u8>>,
    /// What it will hold.
    conf: Vec<u8>,
}

impl Update {
    /// Reads the image's cache and our conf file and merges ours in; `None`
    /// when the plan adds nothing to the loader.
    pub fn read(root: &Root, reopener: &Reopener, plan: &Plan) -> Result<Option<Update>> {
        if plan.loader_entries.is_empty() {
            return Ok(None);
        }
        let cache_path = Path::new(CACHE);
        let old_cache = read_image_file(root, reopener, cache_path, MAX_IMAGE_CACHE)?;
        let cache = merged_cache(old_cache.as_deref(), &plan.loader_entries).map_err(|source| {
            Error::ImageCache {
                path: cache_path.to_path_buf(),
                source,
            }
        })?;
        // Whatever the image has there is replaced, unless it is a
        // directory: that would have to be removed with all it holds.
        let old_conf = match read_image_file(root, reopener, &conf_path(), MAX_CONF) {
            Ok(old) => old,
            Err(
                e @ Error::Exists {
                    found: "directory", ..
                },
            ) => return Err(e),
            Err(_) => None,
        };
        Ok(Some(Update {
            old_cache,
            cache,
            old_conf,
            conf: conf_file(&plan.loader_dirs),
        }))
    }

    /// Writes both files under hidden names, then swaps them in, the
    /// image's cache last; a file already right is left alone.
    pub fn commit(self, dirs: &mut Dirs<'_>, journal: &mut Journal) -> Result<()> {
        let conf = dirs.slot(&conf_path(), journal)?;
        let cache = dirs.slot(Path::new(CACHE), journal)?;

        let conf = stage_unless_same(conf, self.old_conf.as_deref(), &self.conf, journal)?;
        let cache = match stage_unless_same(cache, self.old_cache.as_deref(), &self.cache, journal)
        {
            Ok(cache) => cache,
            Err(e) => {
                conf.into_iter().for_each(Staged::discard);
                return Err(e);
            }
        };
        if let Some(conf) = conf {
            if let Err(e) = conf.install(self.old_conf.is_some(), journal) {
                cache.into_iter().for_each(Staged::discard);
                return Err(e);
            }
        }
        // The image's cache, replaced outright: nothing can fail after it.
        match cache {
            Some(cache) if self.old_cache.is_some() => cache.install_last(journal),
            Some(cache) => cache.install(false, journal),
            None => Ok(()),
        }
    }
}

fn conf_path() -> std::path::PathBuf {
    Path::new(CONF_DIR).join(CONF_NAME)
}

/// Stages `data` for `slot` unless the regular file there (not a link to
/// one) already holds it, as `old` (read through the same path) says. A
/// reused rootfs already has our files: rewriting them would cost a new
/// inode and, on ext4, a data flush for each container start.
fn stage_unless_same(
    slot: Slot,
    old: Option<&[u8]>,
    data: &[u8],
    journal: &Journal,
) -> Result<Option<Staged>> {
    if old == Some(data) && kind_at(slot.place())? == Some("regular file") {
        return Ok(None);
    }
    let edit = if old.is_some() {
        Edit::Replace
    } else {
        Edit::Add
    };
    journal.may(slot.place(), edit)?;
    Staged::file(slot, data).map(Some)
}

/// Reads a file of the image, following links only inside the rootfs; what
/// they reach must be a regular file, and only then is it opened.
pub(super) fn read_image_file(
    root: &Root,
    reopener: &Reopener,
    path: &Path,
    limit: u64,
) -> Result<Option<Vec<u8>>> {
    let handle = match reopen::resolve_in(root, path) {
        Ok(Some(h)) => h,
        Ok(None) => return Ok(None),
        Err(source) => {
            return Err(Error::Resolve {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let (file, size) = reopener
        .reopen_sized(handle.as_fd(), path, Expect::File)
        .map_err(super::kind_error)?;
    // Room for all of it and a byte more: the read that finds the end.
    let capacity = usize::try_from(size.min(limit))
        .unwrap_or(0)
        .saturating_add(1);
    let mut data = Vec::with_capacity(capacity);
    file.take(limit)
        .read_to_end(&mut data)
        .map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(Some(data))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::host::ldcache::{FLAG_ELF_LIBC6, FLAG_I386, FLAG_X8664_LIB64};

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

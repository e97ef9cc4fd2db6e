//! What NVIDIA's `nvidia-cdi-hook` reads of a container to plan its
//! edits: the libraries in a spec's `--folder`s (what `ldconfig` would
//! scan), a file of the image (our CUDA compat `ld.so.conf.d` entry), the
//! GPU nodes in its `/dev`; and the one edit step of theirs that is not
//! ours too, setting permission bits, which [`super::apply`] makes and
//! undoes like every other change of a plan.
//!
//! Every path is resolved inside the rootfs; an image entry is opened only
//! once its `O_PATH` descriptor showed it is a regular file or directory;
//! nothing is executed or mapped.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, Mode};
use pathrs::Root;

use super::journal::{Change, Journal};
use super::{kind_error, Error, Result};
use crate::host::elf;
use crate::host::ldcache::{self, libcmp};
use crate::planning::plan::{LoaderEntry, Symlink};
use crate::util::reopen::{self, kind_name, Expect, Reopener};

/// The loader's view of some folders of the rootfs: the SONAME links to
/// make and the cache entries to add, as `ldconfig` would.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Libraries {
    /// `folder/SONAME -> file`, where no other entry holds the SONAME.
    pub symlinks: Vec<Symlink>,
    /// One entry per SONAME and architecture.
    pub entries: Vec<LoaderEntry>,
}

/// The most files one scan reads as shared objects (each an ELF header and
/// at most 68 KiB of tables): a library directory of the largest CUDA
/// images holds some 3,000.
pub const MAX_OBJECTS: usize = 8192;

/// Scans `folders` of the rootfs at `rootfs` for shared objects (names
/// `lib*.so*` that are regular files); a folder the image lacks is skipped.
/// For each SONAME the newest file (by `ldconfig`'s version order) wins.
pub fn libraries(rootfs: &Path, folders: &[PathBuf]) -> Result<Libraries> {
    let root = open_root(rootfs)?;
    let reopener = Reopener::open().map_err(Error::Reopen)?;
    let mut found = Libraries::default();
    let mut inspected = 0;
    for folder in folders {
        let Some(handle) = resolve(&root, folder)? else {
            log::debug!("{}: not in the container, skipped", folder.display());
            continue;
        };
        let dir = reopener
            .reopen(handle.as_fd(), folder, Expect::Directory)
            .map_err(kind_error)?;
        // SONAME and flags -> the newest file holding it.
        let mut newest: BTreeMap<(String, i32), OsString> = BTreeMap::new();
        for name in list(&dir, folder)? {
            let name = name.as_os_str();
            let bytes = name.as_bytes();
            if !bytes.starts_with(b"lib") || !bytes.windows(3).any(|w| w == b".so") {
                continue;
            }
            let path = folder.join(name);
            let Ok(fd) = openat(
                dir.as_fd(),
                name,
                OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) else {
                continue;
            };
            // Links are the loader's names for files; only files are read.
            if !fstat(fd.as_fd()).is_ok_and(|s| kind_name(s.st_mode) == "regular file") {
                continue;
            }
            inspected += 1;
            if inspected > MAX_OBJECTS {
                return Err(Error::TooManyObjects {
                    folder: folder.clone(),
                    bound: MAX_OBJECTS,
                });
            }
            let file = reopener
                .reopen(fd.as_fd(), &path, Expect::File)
                .map_err(kind_error)?;
            let Some(object) = elf::loader_object(&file, &name.to_string_lossy()) else {
                continue;
            };
            let key = (
                object.soname,
                ldcache::FLAG_ELF_LIBC6 | object.arch.cache_flags,
            );
            let name = name.to_os_string();
            match newest.get(&key) {
                Some(known)
                    if libcmp(&known.to_string_lossy(), &name.to_string_lossy()).is_ge() => {}
                _ => {
                    newest.insert(key, name);
                }
            }
        }
        for ((soname, flags), file) in newest {
            // An earlier folder's library of that SONAME is the loader's.
            if found
                .entries
                .iter()
                .any(|e| e.soname == soname && e.flags == flags)
            {
                continue;
            }
            let link = folder.join(&soname);
            if file.as_os_str() != std::ffi::OsStr::new(&soname) {
                // A file of the image's own under that name is the loader's.
                match openat(
                    dir.as_fd(),
                    soname.as_str(),
                    OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                ) {
                    Ok(fd)
                        if !fstat(fd.as_fd()).is_ok_and(|s| kind_name(s.st_mode) == "symlink") => {}
                    _ => found.symlinks.push(Symlink {
                        path: link.clone(),
                        target: PathBuf::from(&file),
                    }),
                }
            }
            let arch = [elf::X86_64, elf::I386, elf::AARCH64]
                .into_iter()
                .find(|a| ldcache::FLAG_ELF_LIBC6 | a.cache_flags == flags)
                .map_or("unknown", |a| a.name);
            found.entries.push(LoaderEntry {
                soname,
                path: link,
                arch,
                flags,
            });
        }
    }
    Ok(found)
}

/// Sets the permission bits of the directory, regular file or character
/// device at `path` of `root` to `mode`; the change made, to undo, or
/// `None` where there is no such entry or its bits are already `mode`.
pub(super) fn set_mode(
    root: &Root,
    reopener: &Reopener,
    path: &Path,
    mode: u32,
    journal: &Journal,
) -> Result<Option<Change>> {
    let Some(handle) = resolve(root, path)? else {
        log::debug!("{}: not in the container, skipped", path.display());
        return Ok(None);
    };
    let stat = fstat(handle.as_fd()).map_err(|errno| Error::Stat {
        path: path.to_path_buf(),
        source: errno.into(),
    })?;
    let found = kind_name(stat.st_mode);
    if !matches!(found, "directory" | "regular file" | "character device") {
        return Err(Error::Exists {
            path: path.to_path_buf(),
            found,
            expected: "directory, regular file or character device",
        });
    }
    let old = stat.st_mode & 0o7777;
    if old == mode {
        return Ok(None);
    }
    journal.may_change_mode(handle.as_fd(), path)?;
    reopener
        .chmod(handle.as_fd(), path, mode)
        .map_err(Error::Reopen)?;
    Ok(Some(Change::Mode {
        handle,
        path: path.to_path_buf(),
        old,
    }))
}

/// The regular file at `path` of the rootfs (at most 1 MiB of it), if
/// there is one; anything else there is refused.
pub fn read_file(rootfs: &Path, path: &Path) -> Result<Option<Vec<u8>>> {
    let root = open_root(rootfs)?;
    read_in(&root, &Reopener::open().map_err(Error::Reopen)?, path)
}

fn read_in(root: &Root, reopener: &Reopener, path: &Path) -> Result<Option<Vec<u8>>> {
    super::loader::read_image_file(root, reopener, path, 1 << 20)
}

/// The minors of the GPU nodes (`/dev/nvidiaN`, character devices) in the
/// rootfs's `/dev`.
pub fn gpu_minors(rootfs: &Path) -> Result<Vec<u32>> {
    let root = open_root(rootfs)?;
    let reopener = Reopener::open().map_err(Error::Reopen)?;
    let dev = Path::new("/dev");
    let Some(handle) = resolve(&root, dev)? else {
        return Ok(Vec::new());
    };
    let dir = reopener
        .reopen(handle.as_fd(), dev, Expect::Directory)
        .map_err(kind_error)?;
    let mut minors = Vec::new();
    for entry in list(&dir, dev)? {
        let name = entry.as_bytes();
        let Some(digits) = name.strip_prefix(b"nvidia") else {
            continue;
        };
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            continue;
        }
        let stat = nix::sys::stat::fstatat(
            dir.as_fd(),
            entry.as_os_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        );
        if let Some(stat) = stat
            .ok()
            .filter(|s| kind_name(s.st_mode) == "character device")
        {
            minors.push(nix::sys::stat::minor(stat.st_rdev) as u32);
        }
    }
    minors.sort_unstable();
    Ok(minors)
}

/// The names in the directory `dir` (container path `path`), bounded
/// ([`crate::util::listing`]).
fn list(dir: &std::fs::File, path: &Path) -> Result<Vec<OsString>> {
    Ok(crate::util::listing::names(dir.as_fd(), path)?)
}

fn open_root(rootfs: &Path) -> Result<Root> {
    Root::open(rootfs).map_err(|source| Error::OpenRoot {
        path: rootfs.to_path_buf(),
        source,
    })
}

fn resolve(root: &Root, path: &Path) -> Result<Option<pathrs::Handle>> {
    reopen::resolve_in(root, path).map_err(|source| Error::Resolve {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::symlink;

    use super::*;

    /// A real shared object of the host's, with its SONAME.
    fn host_library() -> (PathBuf, String) {
        let dir = Path::new(elf::Arch::host().debian_lib_dir);
        for entry in fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name().into_string().unwrap();
            if name.starts_with("libz.so.1.") && path.is_file() && !path.is_symlink() {
                return (path, "libz.so.1".into());
            }
        }
        panic!("no libz.so.1.* in {}", dir.display());
    }

    #[test]
    fn libraries_get_their_soname_link_and_entry_and_images_files_are_kept() {
        let (lib, soname) = host_library();
        let root = tempfile::tempdir().unwrap();
        let folder = root.path().join("usr/lib/x");
        fs::create_dir_all(&folder).unwrap();
        let file = lib.file_name().unwrap();
        fs::copy(&lib, folder.join(file)).unwrap();
        // Not libraries: a script named like one, a fifo, a link out of the root.
        fs::write(folder.join("libfake.so.1"), "#!/bin/sh\n").unwrap();
        nix::unistd::mkfifo(
            &folder.join("libfifo.so.1"),
            Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        symlink("/etc/passwd", folder.join("libout.so.1")).unwrap();
        let found = libraries(
            root.path(),
            &[PathBuf::from("/usr/lib/x"), "/absent".into()],
        )
        .unwrap();
        assert_eq!(
            found.symlinks,
            [Symlink {
                path: PathBuf::from("/usr/lib/x").join(&soname),
                target: PathBuf::from(file)
            }]
        );
        assert_eq!(found.entries.len(), 1, "{found:?}");
        assert_eq!(found.entries[0].soname, soname);
        assert_eq!(
            found.entries[0].flags,
            ldcache::FLAG_ELF_LIBC6 | elf::Arch::host().cache_flags
        );
        // A regular file of the image's under the SONAME is left alone.
        fs::copy(&lib, folder.join(&soname)).unwrap();
        let found = libraries(root.path(), &[PathBuf::from("/usr/lib/x")]).unwrap();
        assert!(found.symlinks.is_empty(), "{found:?}");
    }
}

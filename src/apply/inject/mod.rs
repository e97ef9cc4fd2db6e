//! Applies a plan inside the container's mount namespace, before `pivot_root`.
//!
//! The container image is hostile. Every path inside the rootfs is resolved
//! with `pathrs` (`openat2(RESOLVE_IN_ROOT)`, or its emulation on old
//! kernels), targets are created `O_EXCL|O_NOFOLLOW`, and mounts go onto the
//! resolved descriptor. Nothing is ever executed, nothing from the image is
//! mounted, and sources are host descriptors opened before entering the
//! namespace ([`Sources`]). The privileged syscalls sit behind [`Sys`].
//!
//! A failure leaves the image as it was. A plain-directory rootfs (runc by
//! hand) outlives the container, so every change is written to an in-memory
//! journal as it is made, and undone in reverse order when a later step
//! fails: mounts are detached, then the directories, mount targets, nodes and
//! links the hook created are removed. An image entry in the way of ours (a
//! symlink at a mount target, a file or other link at a SONAME link, the
//! image's `/etc/ld.so.cache`) is never deleted while something can still
//! fail: ours takes its place by `renameat2(RENAME_EXCHANGE)` (a hard link
//! then `rename` where the filesystem lacks it), which leaves the image's
//! entry under a hidden name beside it, to be put back on failure and
//! removed only once everything succeeded. The loader cache and our
//! `ld.so.conf.d` file are read and merged before the rootfs is touched,
//! written in full under hidden names, and swapped in last; the image's
//! cache, the very last change, by a plain `rename` over it, as nothing can
//! fail after it (an exchange would copy an overlay's lower file up whole
//! only to delete it). A step that cannot be undone is named in the same
//! one-line error. The bookkeeping costs a successful injection no syscall
//! on a reused rootfs, and one `unlink` per image entry it replaced.
//!
//! Modules: `place` finds and changes entries of the rootfs, `staged` swaps
//! whole new entries in, `journal` undoes or finishes those changes,
//! `loader` updates the image's loader cache, `procmask` covers
//! `/proc/driver/nvidia`, `sources` opens the host side, and `sys` is the
//! seam.

pub mod container_files;
mod journal;
mod loader;
mod place;
mod procmask;
mod slot;
mod sources;
mod staged;
mod sys;
pub mod userns;

use std::ffi::OsString;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use pathrs::Root;
use thiserror::Error;

pub use loader::{conf_file, merged_cache, CONF_NAME};
pub use slot::Place;
pub use sources::{mask_params, Source, Sources, DEVICE_OPTIONS};
pub use sys::{LinuxSys, NodeMade, Sys};

use crate::host::ldcache;
use crate::planning::plan::{MountKind, NodeMode, Plan};
use crate::planning::userns::MappedRoot;
use crate::util::deadline;
use crate::util::reopen;
use journal::{Change, Journal, Mountpoint};
use place::{
    mount_target, replace_with_file, replace_with_symlink, Dirs, MountTarget, TargetFiles,
};
use slot::Target;

/// Why injection failed; each error names the path inside the container or on the host.
#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot open the container rootfs {path}: {source}")]
    OpenRoot {
        path: PathBuf,
        source: pathrs::error::Error,
    },
    #[error("cannot resolve {path} inside the container rootfs: {source}")]
    Resolve {
        path: PathBuf,
        source: pathrs::error::Error,
    },
    #[error("refusing {path} in the container: it exists as a {found}, expected a {expected}")]
    Exists {
        path: PathBuf,
        found: &'static str,
        expected: &'static str,
    },
    #[error("refusing {path} in the container: {refused}")]
    PathShape {
        path: PathBuf,
        /// What is wrong with its shape.
        refused: &'static str,
    },
    #[error("cannot create {what} {path} in the container: {source}")]
    Create {
        /// What was being created: "directory", "mount target", ...
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("cannot open {path} in the container: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("cannot create symlink {path} -> {target} in the container: {source}")]
    Symlink {
        path: PathBuf,
        target: PathBuf,
        source: io::Error,
    },
    #[error("cannot remove {path} in the container: {source}")]
    Remove { path: PathBuf, source: io::Error },
    #[error("cannot write {path} in the container: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("cannot read {path} in the container image: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot put {staged:?} in place of {path} in the container: {source}")]
    Swap {
        path: PathBuf,
        /// The hidden name ours was written under, beside `path`.
        staged: OsString,
        source: io::Error,
    },
    #[error("cannot put back the image's {path}: ours replaced it as the last change, keeping nothing aside")]
    Overwritten { path: PathBuf },
    #[error("bad loader cache {path} in the container image: {source}")]
    ImageCache {
        path: PathBuf,
        source: ldcache::Error,
    },
    #[error("cannot mknod {path} (c {major}:{minor}) in the container: {source}")]
    Mknod {
        path: PathBuf,
        major: u32,
        minor: u32,
        source: io::Error,
    },
    #[error("device node {path} is {found}, expected {expected}")]
    NodeMismatch {
        path: PathBuf,
        expected: String,
        found: String,
    },
    #[error("cannot stat {path}: {source}")]
    Stat { path: PathBuf, source: io::Error },
    #[error("{what} mount onto {target} in the container failed: {source}")]
    Mount {
        target: PathBuf,
        what: &'static str,
        source: io::Error,
    },
    #[error("cannot enter mount namespace {path}: {source}")]
    Namespace { path: PathBuf, source: io::Error },
    #[error("cannot open host source {path}: {source}")]
    Source { path: PathBuf, source: io::Error },
    #[error("host source {path} is a {found}, expected a {expected}")]
    SourceKind {
        path: PathBuf,
        expected: &'static str,
        found: &'static str,
    },
    #[error(transparent)]
    Reopen(reopen::Error),
    #[error(transparent)]
    Deadline(#[from] Box<deadline::Expired>),
    #[error("{cause}; {count} of the changes made could not be undone, first: {first}")]
    Undo {
        /// Why injection stopped.
        cause: Box<Error>,
        /// How many changes are left in the container.
        count: usize,
        /// The first change (the latest made) that could not be undone.
        first: Box<Error>,
    },
    #[error("cannot act as the container's root (uid {uid}, gid {gid}): {source}")]
    Identity {
        uid: u32,
        gid: u32,
        source: io::Error,
    },
    #[error(transparent)]
    Listing(#[from] crate::util::listing::Error),
    #[error("refusing {folder} in the image: it holds more than {bound} shared objects, the most the hook reads of one scan")]
    TooManyObjects { folder: PathBuf, bound: usize },
    #[error("refusing to change {path}: the container's root (uid {uid}, gid {gid} of the host) could not: {why}")]
    BeyondContainerRoot {
        path: PathBuf,
        uid: u32,
        gid: u32,
        why: String,
    },
}

/// Result of injection.
pub type Result<T> = std::result::Result<T, Error>;

/// Counts of what was injected, for the hook's log line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Device nodes created or bound.
    pub devices: usize,
    /// Files and directories bind-mounted.
    pub mounts: usize,
    /// Symlinks created.
    pub symlinks: usize,
    /// Entries added to the loader cache.
    pub loader_entries: usize,
    /// Small files of ours written (one already holding it is left alone).
    pub files: usize,
    /// Entries whose permission bits changed.
    pub modes: usize,
}

/// The most of an image file a written file of ours is compared with.
const MAX_WRITTEN: u64 = 1 << 20;

/// Injects `plan` into the rootfs at `rootfs`, as seen from the current
/// (container) mount namespace, taking host data from `sources`. On failure
/// what was done is undone (see the module documentation).
/// `acting_as` is the container's root where its user namespace is not the
/// hook's: no change is made that it could not make itself.
pub fn apply(
    sys: &impl Sys,
    plan: &Plan,
    sources: &mut Sources,
    rootfs: &Path,
    acting_as: Option<&MappedRoot>,
) -> Result<Summary> {
    let root = Root::open(rootfs).map_err(|source| Error::OpenRoot {
        path: rootfs.to_path_buf(),
        source,
    })?;
    // Read before anything changes: an image cache that cannot be merged
    // refuses the container with nothing to undo.
    let loader = loader::Update::read(&root, &sources.reopener, plan)?;
    // From the first change on, the deadline stops injection between
    // steps, and the journal undoes what was done (see `crate::util::deadline`).
    let _held = deadline::hold();
    let _waiting = deadline::waiting_on("injecting into", rootfs);
    let mut injection = Injection {
        sys,
        dirs: Dirs::new(&root),
        files: TargetFiles::default(),
        journal: Journal::acting_as(acting_as.cloned()),
    };
    match injection.inject(plan, sources, &root, loader) {
        Ok(summary) => {
            injection.journal.finish();
            Ok(summary)
        }
        Err(cause) => {
            let mut failed = injection.journal.undo(sys, &root);
            match failed.len() {
                0 => Err(cause),
                count => Err(Error::Undo {
                    cause: Box::new(cause),
                    count,
                    first: Box::new(failed.swap_remove(0)),
                }),
            }
        }
    }
}

/// One injection in progress: the rootfs's directories, the file mount
/// target others are linked to, and what was changed.
struct Injection<'r, S> {
    sys: &'r S,
    dirs: Dirs<'r>,
    files: TargetFiles,
    journal: Journal,
}

impl<S: Sys> Injection<'_, S> {
    /// Every step in order; the loader update, which replaces image files, last.
    fn inject(
        &mut self,
        plan: &Plan,
        sources: &mut Sources,
        root: &Root,
        loader: Option<loader::Update>,
    ) -> Result<Summary> {
        let mut summary = Summary::default();
        let journal = &mut self.journal;

        for (index, node) in plan.devices.iter().enumerate() {
            deadline::check()?;
            let slot = self.dirs.slot(&node.path, journal)?;
            match plan.node_mode {
                NodeMode::Mknod => {
                    journal.may(slot.place(), userns::Edit::Add)?;
                    let made = self
                        .sys
                        .mknod(slot.place(), node.mode, node.major, node.minor)?;
                    if made == NodeMade::Created {
                        journal.record(Change::Created(slot));
                    }
                }
                NodeMode::Bind => {
                    let source = sources
                        .devices
                        .get(index)
                        .ok_or_else(|| missing_source(&node.host_path))?;
                    match mount_target(
                        &slot,
                        Target::File,
                        Some(source.id),
                        &mut self.files,
                        journal,
                    )? {
                        MountTarget::Ready(target) => {
                            self.sys.bind_mount(
                                source,
                                target.as_fd(),
                                slot.place(),
                                DEVICE_OPTIONS,
                            )?;
                            journal.record(Change::Mounted(Mountpoint::Entry(slot)));
                        }
                        MountTarget::Mounted => {}
                    }
                }
            }
            summary.devices += 1;
        }

        for (index, mount) in plan.mounts.iter().enumerate() {
            deadline::check()?;
            let source = sources
                .mounts
                .get(index)
                .ok_or_else(|| missing_source(&mount.source))?;
            let target = if matches!(
                mount.kind,
                MountKind::Directory | MountKind::State | MountKind::Tree
            ) {
                Target::Directory
            } else {
                Target::File
            };
            let slot = self.dirs.slot(&mount.destination, journal)?;
            match mount_target(&slot, target, Some(source.id), &mut self.files, journal)? {
                MountTarget::Ready(target) => {
                    self.sys
                        .bind_mount(source, target.as_fd(), slot.place(), mount.options)?;
                    journal.record(Change::Mounted(Mountpoint::Entry(slot)));
                }
                MountTarget::Mounted => {}
            }
            summary.mounts += 1;
        }

        for link in &plan.symlinks {
            deadline::check()?;
            let slot = self.dirs.slot(&link.path, journal)?;
            replace_with_symlink(slot, &link.target, journal)?;
            summary.symlinks += 1;
        }

        for file in &plan.files {
            deadline::check()?;
            let data = file.data.as_bytes();
            // A file already holding it is left alone (a reused rootfs).
            let held = loader::read_image_file(root, &sources.reopener, &file.path, MAX_WRITTEN)?;
            let slot = self.dirs.slot(&file.path, journal)?;
            if replace_with_file(slot, data, held.as_deref() == Some(data), journal)? {
                summary.files += 1;
            }
        }

        for change in &plan.modes {
            deadline::check()?;
            if let Some(done) = container_files::set_mode(
                root,
                &sources.reopener,
                &change.path,
                change.mode,
                journal,
            )? {
                journal.record(done);
                summary.modes += 1;
            }
        }

        deadline::check()?;
        if let Some(mask) = &plan.proc_mask {
            procmask::mask(self.sys, root, &mask.path, sources, journal)?;
        }

        deadline::check()?;
        if let Some(update) = loader {
            update.commit(&mut self.dirs, journal)?;
            summary.loader_entries = plan.loader_entries.len();
        }
        Ok(summary)
    }
}

/// A reopen refused for its type is the image's entry in the way.
fn kind_error(e: reopen::Error) -> Error {
    match e {
        reopen::Error::Kind {
            path,
            found,
            expected,
        } => Error::Exists {
            path,
            found,
            expected,
        },
        other => Error::Reopen(other),
    }
}

fn missing_source(path: &Path) -> Error {
    Error::Source {
        path: path.to_path_buf(),
        source: io::Error::other("not opened before entering the container"),
    }
}

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
mod tests;

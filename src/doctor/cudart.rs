//! The CUDA runtimes an image carries, found where images keep them rather
//! than where a loader config points: NVIDIA's pip wheels
//! (`…/site-packages/nvidia/*/lib/libcudart.so.*`, the way PyTorch images
//! get CUDA), conda prefixes (`$PREFIX/lib`, with `conda-meta`), the
//! toolkit under `/usr/local/cuda*`, the distribution's library
//! directories, and then any `libcudart.so.*` a bounded walk of the image
//! finds.
//!
//! Only directories are opened, and only names are read: each directory is
//! opened from its parent's descriptor as `O_PATH | O_NOFOLLOW`, its type
//! checked, then reopened for listing ([`Reopener`]), so a link is never
//! followed (nothing leaves the root, and no loop is walked) and no device
//! node or fifo is opened. The walk stops at [`MAX_DEPTH`] directories
//! deep and after [`MAX_ENTRIES`] entries.
//!
//! A runtime's version comes from its file name (`libcudart.so.12.4.127`)
//! or, where the name has the major alone (`libcudart.so.12`, as the
//! wheels ship it), from what installed it: the wheel's `.dist-info`
//! directory name (`nvidia_cuda_runtime_cu12-12.2.140.dist-info`), the
//! conda package's `conda-meta` record (`cuda-cudart-12.4.127-0.json`), or
//! the toolkit's directory (`cuda-12.4`). Failing those, the major alone
//! is known, and the runtime counts as that major's `.0`.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::dir::{Dir, Type};
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;
use pathrs::Root;

use super::glob;
use crate::host::driver::CudaVersion;
use crate::util::reopen::{Expect, Reopener};

/// How deep the walk goes, in directories below the root (the deepest
/// place a runtime sits in real images is 9: a conda env's wheel).
pub const MAX_DEPTH: usize = 12;

/// How many directory entries the walk reads at most.
pub const MAX_ENTRIES: usize = 100_000;

/// Top-level directories that are not the image's files.
const SKIP_TOP: &[&str] = &["proc", "sys", "dev", "run", "tmp"];

/// Where images keep CUDA runtimes, as paths of name patterns (`*` within
/// a component): looked at first, before the walk's bound can cut them off.
const PLACES: &[(&str, Kind)] = &[
    ("usr/local/cuda*/lib64", Kind::Toolkit),
    ("usr/local/cuda*/targets/*/lib", Kind::Toolkit),
    ("usr/lib/python3*/*-packages/nvidia/*/lib", Kind::Wheel),
    (
        "usr/local/lib/python3*/*-packages/nvidia/*/lib",
        Kind::Wheel,
    ),
    ("opt/*/lib/python3*/*-packages/nvidia/*/lib", Kind::Wheel),
    (
        "opt/*/envs/*/lib/python3*/*-packages/nvidia/*/lib",
        Kind::Wheel,
    ),
    (
        "root/.local/lib/python3*/*-packages/nvidia/*/lib",
        Kind::Wheel,
    ),
    ("opt/*/lib", Kind::Conda),
    ("opt/*/targets/*/lib", Kind::Conda),
    ("opt/*/envs/*/lib", Kind::Conda),
    ("opt/*/envs/*/targets/*/lib", Kind::Conda),
    ("usr/lib/x86_64-linux-gnu", Kind::System),
    ("usr/lib/aarch64-linux-gnu", Kind::System),
    ("usr/lib64", Kind::System),
];

/// What put a runtime where it was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// NVIDIA's pip wheel (`nvidia-cuda-runtime-cu12`, `nvidia-cuda-runtime`).
    Wheel,
    /// A conda prefix.
    Conda,
    /// The CUDA toolkit under `/usr/local/cuda*`.
    Toolkit,
    /// The distribution's library directories.
    System,
    /// Found by the walk, elsewhere.
    Elsewhere,
}

impl Kind {
    /// How a finding names it.
    fn word(self) -> &'static str {
        match self {
            Kind::Wheel => "pip wheel",
            Kind::Conda => "conda",
            Kind::Toolkit => "CUDA toolkit",
            Kind::System => "system library",
            Kind::Elsewhere => "found by the walk",
        }
    }
}

/// Where a runtime's minor version was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Minor {
    /// Its file name (`libcudart.so.12.4.127`).
    Name,
    /// What installed it: a dist-info, a conda record, a toolkit directory.
    Installed(String),
    /// Nowhere: the name has the major alone.
    Unknown,
}

/// One CUDA runtime library in the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runtime {
    /// Its CUDA version (the major's `.0` when only the major is known).
    pub cuda: CudaVersion,
    /// Where its minor came from.
    pub minor: Minor,
    /// Its path in the image.
    pub path: String,
    /// What put it there.
    pub kind: Kind,
}

impl Runtime {
    /// Where it was read, for a finding: `pip wheel
    /// /usr/lib/…/libcudart.so.12 (nvidia_cuda_runtime_cu12-12.2.140.dist-info)`.
    pub fn shown(&self) -> String {
        match &self.minor {
            Minor::Name => format!("{} {}", self.kind.word(), self.path),
            Minor::Installed(source) => format!("{} {} ({source})", self.kind.word(), self.path),
            Minor::Unknown => format!(
                "{} {} (CUDA {} from its name; the minor is not known)",
                self.kind.word(),
                self.path,
                self.cuda.major()
            ),
        }
    }
}

/// What a search of the image found.
#[derive(Debug, Default)]
pub struct Search {
    /// The runtimes, each path once, in the order found.
    pub runtimes: Vec<Runtime>,
    /// Whether the walk stopped at its bound before it had seen everything.
    pub cut: bool,
}

impl Search {
    /// The runtime with the highest CUDA: the one the ceiling holds against the driver.
    pub fn highest(&self) -> Option<&Runtime> {
        self.runtimes
            .iter()
            .fold(None, |best: Option<&Runtime>, r| {
                if best.is_none_or(|b| r.cuda > b.cuda) {
                    Some(r)
                } else {
                    best
                }
            })
    }
}

/// A directory of the image open for listing, and its path there.
struct Opened {
    dir: File,
    path: String,
}

/// The image's directories, opened without following links.
struct Walker {
    reopener: Reopener,
    entries: usize,
    max_entries: usize,
    cut: bool,
}

impl Walker {
    /// `name` in `parent`, if it is a directory (a link is not followed).
    fn open(&self, parent: &Opened, name: &str) -> Option<Opened> {
        let fd: OwnedFd = openat(
            parent.dir.as_fd(),
            name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let path = format!("{}/{name}", parent.path.trim_end_matches('/'));
        let dir = self
            .reopener
            .reopen(fd.as_fd(), Path::new(&path), Expect::Directory)
            .ok()?;
        Some(Opened { dir, path })
    }

    /// The names in `dir`, with whether each is a directory (`None`: the
    /// file system did not say), counted against the bound.
    fn list(&mut self, dir: &Opened) -> Vec<(String, Option<bool>)> {
        let Ok(clone) = dir.dir.try_clone() else {
            return Vec::new();
        };
        let Ok(mut listing) = Dir::from_fd(clone.into()) else {
            return Vec::new();
        };
        let mut names = Vec::new();
        for entry in listing.iter().flatten() {
            if self.entries >= self.max_entries {
                self.cut = true;
                break;
            }
            self.entries += 1;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name == "." || name == ".." {
                continue;
            }
            let is_dir = entry.file_type().map(|t| t == Type::Directory);
            names.push((name.to_string(), is_dir));
        }
        names
    }

    /// The directories `pattern` (components of name patterns) matches below `dir`.
    fn matching(&mut self, dir: Opened, pattern: &[&str], out: &mut Vec<Opened>) {
        let Some((first, rest)) = pattern.split_first() else {
            out.push(dir);
            return;
        };
        if !first.contains('*') {
            if let Some(child) = self.open(&dir, first) {
                self.matching(child, rest, out);
            }
            return;
        }
        for (name, is_dir) in self.list(&dir) {
            if is_dir != Some(false) && glob(first.as_bytes(), name.as_bytes()) {
                if let Some(child) = self.open(&dir, &name) {
                    self.matching(child, rest, out);
                }
            }
        }
    }
}

/// The CUDA of a `libcudart.so.<version>` name, and whether its minor is known.
fn from_name(name: &str) -> Option<(CudaVersion, bool)> {
    let version = name.strip_prefix("libcudart.so.")?;
    let parts: Vec<&str> = version.split('.').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    Some((CudaVersion::parse(version)?, parts.len() >= 2))
}

/// The `<version>` of the first `<prefix><version><suffix>` name in `dir`.
fn versioned_entry(
    walker: &mut Walker,
    dir: &Opened,
    prefixes: &[&str],
    until: char,
) -> Option<(String, String)> {
    walker.list(dir).into_iter().find_map(|(name, _)| {
        let rest = prefixes.iter().find_map(|p| name.strip_prefix(p))?;
        let version = rest.split(until).next()?;
        CudaVersion::parse(version).map(|_| (version.to_string(), name.clone()))
    })
}

/// The minor of a runtime whose name gives the major alone, from what
/// installed it: its wheel's dist-info, its conda record, its toolkit dir.
fn installed_version(
    walker: &mut Walker,
    root: &Opened,
    lib: &str,
    kind: Kind,
) -> Option<(CudaVersion, String)> {
    let components: Vec<&str> = lib.trim_start_matches('/').split('/').collect();
    let open_path = |walker: &mut Walker, parts: &[&str]| -> Option<Opened> {
        let mut dir = Opened {
            dir: root.dir.try_clone().ok()?,
            path: root.path.clone(),
        };
        for part in parts {
            dir = walker.open(&dir, part)?;
        }
        Some(dir)
    };
    let found = match kind {
        // …/site-packages/nvidia/<package>/lib: the dist-info sits in site-packages.
        Kind::Wheel => {
            let site = open_path(walker, components.get(..components.len().checked_sub(3)?)?)?;
            // `nvidia_cuda_runtime_cu12-12.2.140.dist-info`: the version
            // runs from the first `-` to `.dist-info`.
            walker.list(&site).into_iter().find_map(|(name, _)| {
                let stem = name.strip_suffix(".dist-info")?;
                let (package, version) = stem.split_once('-')?;
                package
                    .starts_with("nvidia_cuda_runtime")
                    .then(|| (version.to_string(), name.clone()))
            })
        }
        // $PREFIX/lib or $PREFIX/targets/<arch>/lib: the record sits in $PREFIX/conda-meta.
        Kind::Conda => {
            let up = if components.iter().rev().nth(2) == Some(&"targets") {
                3
            } else {
                1
            };
            let prefix = open_path(walker, components.get(..components.len().checked_sub(up)?)?)?;
            let meta = walker.open(&prefix, "conda-meta")?;
            versioned_entry(walker, &meta, &["cuda-cudart-", "cudatoolkit-"], '-')
                .map(|(v, name)| (v, format!("conda-meta/{name}")))
        }
        // /usr/local/cuda-12.4/…
        Kind::Toolkit => components.get(2).and_then(|d| {
            let version = d.strip_prefix("cuda-")?;
            Some((version.to_string(), format!("/usr/local/{d}")))
        }),
        Kind::System | Kind::Elsewhere => None,
    }?;
    let (version, source) = found;
    let parts = version.split('.').count();
    (parts >= 2).then_some(())?;
    Some((CudaVersion::parse(&version)?, source))
}

/// Adds the `libcudart.so.*` of `dir` to `search`.
fn collect(walker: &mut Walker, root: &Opened, dir: &Opened, kind: Kind, search: &mut Search) {
    let named: Vec<(String, CudaVersion, bool)> = walker
        .list(dir)
        .into_iter()
        .filter(|(_, is_dir)| *is_dir != Some(true))
        .filter_map(|(name, _)| from_name(&name).map(|(cuda, exact)| (name, cuda, exact)))
        .collect();
    for (name, cuda, exact) in &named {
        let (name, cuda, exact) = (name, *cuda, *exact);
        // `libcudart.so.12` beside `libcudart.so.12.5.82` is its link.
        if !exact
            && named
                .iter()
                .any(|(_, c, e)| *e && c.major() == cuda.major())
        {
            continue;
        }
        let path = format!("{}/{name}", dir.path.trim_end_matches('/'));
        if search.runtimes.iter().any(|r| r.path == path) {
            continue;
        }
        let (cuda, minor) = if exact {
            (cuda, Minor::Name)
        } else {
            match installed_version(walker, root, &dir.path, kind) {
                Some((full, source)) if full.major() == cuda.major() => {
                    (full, Minor::Installed(source))
                }
                _ => (cuda, Minor::Unknown),
            }
        };
        search.runtimes.push(Runtime {
            cuda,
            minor,
            path,
            kind,
        });
    }
}

/// Whether a directory path the walk found is one of [`PLACES`], and which.
fn kind_of(path: &str) -> Kind {
    let inner = path.trim_start_matches('/');
    PLACES
        .iter()
        .find(|(pattern, _)| {
            let (p, n): (Vec<&str>, Vec<&str>) =
                (pattern.split('/').collect(), inner.split('/').collect());
            p.len() == n.len()
                && p.iter()
                    .zip(&n)
                    .all(|(p, n)| glob(p.as_bytes(), n.as_bytes()))
        })
        .map_or(Kind::Elsewhere, |(_, kind)| *kind)
}

/// The walk, depth first, one open directory per level: any
/// `libcudart.so.*` below `dir`, until the bound.
fn walk(walker: &mut Walker, top: &Opened, dir: Opened, depth: usize, search: &mut Search) {
    if walker.cut {
        return;
    }
    let names = walker.list(&dir);
    if names
        .iter()
        .any(|(n, d)| *d != Some(true) && n.starts_with("libcudart.so."))
    {
        collect(walker, top, &dir, kind_of(&dir.path), search);
    }
    if depth >= MAX_DEPTH {
        return;
    }
    for (name, is_dir) in names {
        if is_dir == Some(false) || (depth == 0 && SKIP_TOP.contains(&name.as_str())) {
            continue;
        }
        if let Some(child) = walker.open(&dir, &name) {
            walk(walker, top, child, depth + 1, search);
        }
    }
}

/// Every CUDA runtime the image at `root` keeps: [`PLACES`] first, then the
/// bounded walk.
pub fn find(root: &Root) -> Search {
    find_within(root, MAX_ENTRIES)
}

/// [`find`], reading at most `max_entries` directory entries.
fn find_within(root: &Root, max_entries: usize) -> Search {
    let mut search = Search::default();
    let Ok(reopener) = Reopener::open() else {
        return search;
    };
    let Ok(handle) = root.resolve("/") else {
        return search;
    };
    let Ok(dir) = reopener.reopen(handle.as_fd(), Path::new("/"), Expect::Directory) else {
        return search;
    };
    let top = Opened {
        dir,
        path: "/".into(),
    };
    let mut walker = Walker {
        reopener,
        entries: 0,
        max_entries,
        cut: false,
    };
    for (pattern, kind) in PLACES {
        let parts: Vec<&str> = pattern.split('/').collect();
        let mut dirs = Vec::new();
        if let Ok(start) = top.dir.try_clone() {
            let start = Opened {
                dir: start,
                path: "/".into(),
            };
            walker.matching(start, &parts, &mut dirs);
        }
        for dir in dirs {
            collect(&mut walker, &top, &dir, *kind, &mut search);
        }
    }
    if let Ok(start) = top.dir.try_clone() {
        let start = Opened {
            dir: start,
            path: "/".into(),
        };
        walk(&mut walker, &top, start, 0, &mut search);
    }
    search.cut = walker.cut;
    search
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::symlink;

    use super::*;

    fn file(root: &Path, path: &str) {
        let path = root.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, b"").unwrap();
    }

    fn v(text: &str) -> CudaVersion {
        CudaVersion::parse(text).unwrap()
    }

    #[test]
    fn finds_a_pytorch_wheels_runtime_and_its_version_from_the_dist_info() {
        let dir = tempfile::tempdir().unwrap();
        let site = "usr/local/lib/python3.11/site-packages";
        file(
            dir.path(),
            &format!("{site}/nvidia/cuda_runtime/lib/libcudart.so.12"),
        );
        fs::create_dir_all(dir.path().join(format!(
            "{site}/nvidia_cuda_runtime_cu12-12.4.127.dist-info"
        )))
        .unwrap();
        fs::create_dir_all(dir.path().join(format!("{site}/torch-2.5.1.dist-info"))).unwrap();
        let search = find(&Root::open(dir.path()).unwrap());
        let found = search.highest().unwrap();
        assert_eq!(found.cuda, v("12.4"));
        assert_eq!(found.kind, Kind::Wheel);
        assert!(
            found
                .shown()
                .contains("nvidia_cuda_runtime_cu12-12.4.127.dist-info"),
            "{}",
            found.shown()
        );
        assert!(!search.cut);
    }

    #[test]
    fn a_cuda_13_wheel_without_its_dist_info_counts_as_13_0() {
        let dir = tempfile::tempdir().unwrap();
        file(
            dir.path(),
            "opt/conda/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13",
        );
        let found = find(&Root::open(dir.path()).unwrap());
        let found = found.highest().unwrap();
        assert_eq!((found.cuda, found.kind), (v("13.0"), Kind::Wheel));
        assert!(
            found.shown().contains("minor is not known"),
            "{}",
            found.shown()
        );
    }

    #[test]
    fn finds_conda_prefixes_and_the_toolkit_and_takes_the_highest() {
        let dir = tempfile::tempdir().unwrap();
        // A conda env's cuda-cudart 12.4, its lib holding only the major's link target name.
        file(
            dir.path(),
            "opt/conda/envs/train/targets/x86_64-linux/lib/libcudart.so.12",
        );
        file(
            dir.path(),
            "opt/conda/envs/train/conda-meta/cuda-cudart-12.6.77-0.json",
        );
        file(dir.path(), "usr/local/cuda-11.8/lib64/libcudart.so.11.8.89");
        symlink("cuda-11.8", dir.path().join("usr/local/cuda")).unwrap();
        let search = find(&Root::open(dir.path()).unwrap());
        let kinds: Vec<(Kind, CudaVersion)> =
            search.runtimes.iter().map(|r| (r.kind, r.cuda)).collect();
        assert!(
            kinds.contains(&(Kind::Conda, v("12.6"))),
            "{:?}",
            search.runtimes
        );
        assert!(
            kinds.contains(&(Kind::Toolkit, v("11.8"))),
            "{:?}",
            search.runtimes
        );
        // The link /usr/local/cuda is not followed: the toolkit is found once.
        assert_eq!(search.runtimes.len(), 2, "{:?}", search.runtimes);
        let highest = search.highest().unwrap();
        assert!(
            highest
                .shown()
                .contains("conda-meta/cuda-cudart-12.6.77-0.json"),
            "{}",
            highest.shown()
        );
    }

    #[test]
    fn the_walk_finds_a_runtime_anywhere_but_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        file(outside.path(), "libcudart.so.13.0.48");
        file(dir.path(), "app/vendor/cuda/libcudart.so.12.8.57");
        symlink(outside.path(), dir.path().join("app/escape")).unwrap();
        // A loop through a link is not walked either.
        symlink("/", dir.path().join("app/loop")).unwrap();
        let search = find(&Root::open(dir.path()).unwrap());
        assert_eq!(search.runtimes.len(), 1, "{:?}", search.runtimes);
        let found = &search.runtimes[0];
        assert_eq!(found.path, "/app/vendor/cuda/libcudart.so.12.8.57");
        assert_eq!((found.kind, found.cuda), (Kind::Elsewhere, v("12.8")));
    }

    #[test]
    fn the_walk_stops_at_its_depth() {
        let dir = tempfile::tempdir().unwrap();
        let deep = (0..=MAX_DEPTH)
            .map(|i| format!("d{i}"))
            .collect::<Vec<_>>()
            .join("/");
        file(dir.path(), &format!("{deep}/libcudart.so.12.1.105"));
        let shallow = (0..MAX_DEPTH - 1)
            .map(|i| format!("d{i}"))
            .collect::<Vec<_>>()
            .join("/");
        file(dir.path(), &format!("{shallow}/libcudart.so.12.0.107"));
        let search = find(&Root::open(dir.path()).unwrap());
        let paths: Vec<&str> = search.runtimes.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(paths.len(), 1, "{paths:?}");
        assert!(paths[0].ends_with("libcudart.so.12.0.107"));
    }

    #[test]
    fn the_walk_stops_after_its_entries_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..40 {
            fs::create_dir_all(dir.path().join(format!("a/{i:02}"))).unwrap();
        }
        // Reached only past a listing longer than the bound.
        file(dir.path(), "a/lib/libcudart.so.12.2.140");
        let root = Root::open(dir.path()).unwrap();
        let search = find_within(&root, 20);
        assert!(search.cut && search.runtimes.is_empty(), "{search:?}");
        let search = find_within(&root, 1000);
        assert!(!search.cut && search.runtimes.len() == 1, "{search:?}");
    }

    #[test]
    fn special_files_named_as_runtimes_are_listed_but_never_opened() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("usr/lib/x86_64-linux-gnu");
        fs::create_dir_all(&lib).unwrap();
        nix::unistd::mkfifo(
            &lib.join("libcudart.so.12.2.140"),
            Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        // Opening the fifo would block: the search returns.
        let search = find(&Root::open(dir.path()).unwrap());
        assert_eq!(search.highest().unwrap().cuda, v("12.2"));
    }

    #[test]
    fn matches_names_as_globs_and_reads_versions_from_names() {
        assert!(glob(b"python3*", b"python3.11"));
        assert!(glob(b"*-packages", b"dist-packages"));
        assert!(!glob(b"cuda*", b"cudnn"));
        assert_eq!(from_name("libcudart.so.12.4.127"), Some((v("12.4"), true)));
        assert_eq!(from_name("libcudart.so.13"), Some((v("13.0"), false)));
        assert_eq!(from_name("libcudart.so.12.4.127.bak"), None);
        assert_eq!(from_name("libcudart_static.a"), None);
    }
}

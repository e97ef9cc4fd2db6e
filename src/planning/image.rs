//! What the hook reads from the container image: where it keeps libraries,
//! and whether it ships CUDA forward-compatibility libraries.
//!
//! The image is hostile. Everything is resolved inside its rootfs with
//! `pathrs`; entries are examined with `*at` calls that never follow a
//! symlink, through `O_PATH` descriptors that open nothing, and only an
//! entry found to be a regular file is opened to be read (an image's device
//! node opened by the hook, as root on the host, could act on the device);
//! a compat library is judged by its file name and its ELF header only.
//! Nothing from the image is executed, loaded, mounted or written here
//! (CVE-2024-0132, CVE-2025-23359).

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;
use pathrs::Root;
use serde::Serialize;
use thiserror::Error;

use crate::config::CompatMode;
use crate::host::driver::CudaVersion;
use crate::host::elf::{self, Arch};
use crate::planning::compat_rule::{self, FwdNote};
use crate::util::reopen::{self, Expect, Reopener};

/// Where CUDA images keep forward-compatibility libraries.
pub const COMPAT_DIR: &str = "/usr/local/cuda/compat";

/// Why the image could not be examined.
#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot open container rootfs {path}: {source}")]
    Root {
        path: PathBuf,
        source: pathrs::error::Error,
    },
    #[error("cannot read {path} in the container image: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error(transparent)]
    Listing(#[from] crate::util::listing::Error),
}

/// Result of examining the image.
pub type Result<T> = std::result::Result<T, Error>;

/// Where an image keeps its libraries, which decides library destinations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImageLayout {
    /// Debian and Ubuntu: `/usr/lib/x86_64-linux-gnu`, `/usr/lib/i386-linux-gnu`.
    #[default]
    Debian,
    /// RPM-family images: `/usr/lib64`, `/usr/lib`.
    Rpm,
}

impl ImageLayout {
    /// The library directory for `arch` in this layout.
    pub fn lib_dir(self, arch: Arch) -> &'static Path {
        Path::new(match self {
            ImageLayout::Debian => arch.debian_lib_dir,
            ImageLayout::Rpm => arch.rpm_lib_dir,
        })
    }
}

/// CUDA forward-compatibility libraries the image ships, of a driver branch newer than the host's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Compat {
    /// Their directory in the image.
    pub dir: PathBuf,
    /// The driver version they come from, e.g. `550.54.15`.
    pub driver_version: String,
    /// The CUDA version that driver supports; `None` for a branch this
    /// hook's table does not know (its CUDA is then never claimed).
    pub cuda: Option<CudaVersion>,
    /// Their file names, each `<name>.so.<driver_version>`.
    pub files: Vec<String>,
}

/// What the image tells the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Image {
    /// Where it keeps libraries.
    pub layout: ImageLayout,
    /// Newer CUDA compat libraries, to be preferred by the loader.
    pub compat: Option<Compat>,
}

impl From<ImageLayout> for Image {
    /// An image known only by its layout, as `list` plans for.
    fn from(layout: ImageLayout) -> Image {
        Image {
            layout,
            compat: None,
        }
    }
}

/// What the host offers that an image's CUDA compat libraries are judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostOffers<'a> {
    /// Its driver version, as libnvidia-container judges it (the prestart
    /// hook's compat mode): the compat driver must be of a newer branch.
    Driver(&'a str),
    /// `nvidia-cdi-hook enable-cuda-compat`'s `--host-driver-version` and
    /// `--host-cuda-version`, judged as NVIDIA's v1.20.0 hook judges them
    /// ([`compat_rule::uses_compat`]).
    HookFlags {
        /// `--host-driver-version`, if given.
        driver: Option<&'a str>,
        /// `--host-cuda-version`, if given.
        cuda: Option<&'a str>,
    },
}

impl Image {
    /// The compat libraries in `dir` of the rootfs at `rootfs` that are newer
    /// than what the host offers, as `nvidia-cdi-hook enable-cuda-compat`
    /// looks for them.
    pub fn compat_in(rootfs: &Path, dir: &Path, host: HostOffers<'_>) -> Result<Option<Compat>> {
        let root = Root::open(rootfs).map_err(|source| Error::Root {
            path: rootfs.to_path_buf(),
            source,
        })?;
        find_compat(&root, dir, host)
    }

    /// Examines the rootfs at `rootfs` for a host running `host_driver`.
    pub fn inspect(rootfs: &Path, host_driver: &str, mode: CompatMode) -> Result<Image> {
        let root = Root::open(rootfs).map_err(|source| Error::Root {
            path: rootfs.to_path_buf(),
            source,
        })?;
        let layout = match crate::util::reopen::resolve_in(&root, Path::new("/etc/debian_version"))
        {
            Ok(Some(_)) => ImageLayout::Debian,
            Ok(None) | Err(_) => ImageLayout::Rpm,
        };
        let compat = match mode {
            CompatMode::Disabled => None,
            CompatMode::Ldconfig => find_compat(
                &root,
                Path::new(COMPAT_DIR),
                HostOffers::Driver(host_driver),
            )?,
        };
        Ok(Image { layout, compat })
    }
}

/// The image's compat libraries in `dir_path`, if it has any newer than
/// what the host offers: of a newer driver branch, or supporting a newer CUDA.
fn find_compat(root: &Root, dir_path: &Path, host: HostOffers<'_>) -> Result<Option<Compat>> {
    let Ok(Some(handle)) = crate::util::reopen::resolve_in(root, dir_path) else {
        return Ok(None);
    };
    let read_err = |reason: String| Error::Read {
        path: dir_path.to_path_buf(),
        reason,
    };
    let reopener = Reopener::open().map_err(|e| read_err(e.to_string()))?;
    let dir_file = reopener
        .reopen(handle.as_fd(), dir_path, Expect::Directory)
        .map_err(|e| read_err(e.to_string()))?;
    let mut names: Vec<String> = crate::util::listing::names(dir_file.as_fd(), dir_path)?
        .into_iter()
        .filter_map(|name| name.into_string().ok())
        .collect();
    names.sort();
    // `libcuda.so.<version>` names the compat driver; the other libraries carry the same version.
    let Some(version) = names
        .iter()
        .filter_map(|n| n.strip_prefix("libcuda.so."))
        .filter(|v| {
            v.matches('.').count() >= 1
                && v.split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .max_by(|a, b| compare_versions(a, b))
        .map(str::to_string)
    else {
        return Ok(None);
    };
    // The compat libcuda's own note (NVIDIA's 1.20 hook reads it: Orin's
    // compat libcuda is `libcuda.so.1.1`, of no branch).
    let note = fwd_note(
        &reopener,
        handle.as_fd(),
        dir_path,
        &format!("libcuda.so.{version}"),
    );
    let used = match host {
        // Only a newer driver *branch* counts: libnvidia-container ignores
        // compat libraries of the host's own branch or an older one
        // (src/cli/compat_mode.c:61-90, `filter_by_major_version`).
        HostOffers::Driver(host_driver) => newer_branch(&version, host_driver),
        HostOffers::HookFlags { driver, cuda } => {
            compat_rule::uses_compat(&version, note.as_ref(), driver, cuda)
        }
    };
    if !used {
        log::debug!(
            "image's CUDA compat driver {version} (note {note:?}) is not used on a host offering {host:?}"
        );
        return Ok(None);
    }
    // The CUDA the note names, else the compat driver's branch's.
    let cuda = note
        .as_ref()
        .and_then(|n| CudaVersion::parse(&n.cuda))
        .or_else(|| cuda_of_driver(&version));
    // Entries are judged with *at calls on the directory whose listing was
    // read (its O_PATH handle), never following a link.
    let suffix = format!(".so.{version}");
    let mut files = Vec::new();
    for name in names.iter().filter(|n| n.ends_with(&suffix)) {
        match regular_elf_library(&reopener, handle.as_fd(), dir_path, name) {
            Ok(()) => files.push(name.clone()),
            Err(reason) => log::warn!(
                "ignoring {}/{name} in the image: {reason}",
                dir_path.display()
            ),
        }
    }
    if !files.iter().any(|f| f.starts_with("libcuda.so.")) {
        return Ok(None);
    }
    Ok(Some(Compat {
        dir: dir_path.to_path_buf(),
        driver_version: version,
        cuda,
        files,
    }))
}

/// Checks that `name` in `dir` is a regular file (not a link) holding an ELF
/// shared object of the host's architecture, reading only its header. The
/// entry is looked at through `O_PATH` first: only a regular file is opened.
fn regular_elf_library(
    reopener: &Reopener,
    dir: BorrowedFd<'_>,
    dir_path: &Path,
    name: &str,
) -> std::result::Result<(), String> {
    let entry = openat(
        dir,
        OsStr::new(name),
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot look it up: {e}"))?;
    // `reopen` checks the type with fstat before it opens anything.
    let file = reopener
        .reopen(entry.as_fd(), &dir_path.join(name), Expect::File)
        .map_err(|e| match e {
            reopen::Error::Kind { found, .. } => format!("it is a {found}, not a regular file"),
            other => other.to_string(),
        })?;
    let mut header = [0u8; 64];
    let len = (&file)
        .read(&mut header)
        .map_err(|e| format!("cannot read: {e}"))?;
    elf::check_header(
        Path::new(name),
        &header[..len],
        Arch::host(),
        elf::Kind::SharedObject,
    )
    .map_err(|e| e.to_string())
}

/// The note section NVIDIA's compat libraries carry their CUDA version in.
const FWD_COMPAT_NOTE: &str = ".note.cuda.fwd_compatibility";

/// The forward-compatibility note of `name` in `dir` (`{"CUDA Version":
/// "13.2", "Driver": [...]}`), the file opened as [`regular_elf_library`]
/// opens it; `None` without one that reads.
fn fwd_note(
    reopener: &Reopener,
    dir: BorrowedFd<'_>,
    dir_path: &Path,
    name: &str,
) -> Option<FwdNote> {
    let entry = openat(
        dir,
        OsStr::new(name),
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let file = reopener
        .reopen(entry.as_fd(), &dir_path.join(name), Expect::File)
        .ok()?;
    let note = FwdNote::parse(&elf::note(&file, FWD_COMPAT_NOTE, "NVIDIA Corporation")?);
    log::debug!("{}/{name}: its note says {note:?}", dir_path.display());
    note
}

/// Whether driver `version` is of a newer branch (major version) than
/// `host`. NVIDIA compares the digits as text, over the library's major's
/// length; for majors of equal length, as every branch since 100 has, that
/// is this numeric comparison.
fn newer_branch(version: &str, host: &str) -> bool {
    let major = |v: &str| v.split('.').next().and_then(|m| m.parse::<u64>().ok());
    matches!((major(version), major(host)), (Some(v), Some(h)) if v > h)
}

/// Compares dotted version numbers numerically, component by component.
pub fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    let parse = |s: &str| -> Vec<u64> { s.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    let (a, b) = (parse(a), parse(b));
    for i in 0..a.len().max(b.len()) {
        let ord = a.get(i).unwrap_or(&0).cmp(b.get(i).unwrap_or(&0));
        if ord.is_ne() {
            return ord;
        }
    }
    std::cmp::Ordering::Equal
}

/// The CUDA version a driver branch supports (NVIDIA's CUDA toolkit release notes).
pub fn cuda_of_driver(version: &str) -> Option<CudaVersion> {
    const BRANCHES: &[(u32, i32)] = &[
        (450, 11000),
        (455, 11010),
        (460, 11020),
        (465, 11030),
        (470, 11040),
        (495, 11050),
        (510, 11060),
        (515, 11070),
        (520, 11080),
        (525, 12000),
        (530, 12010),
        (535, 12020),
        (545, 12030),
        (550, 12040),
        (555, 12050),
        (560, 12060),
        (565, 12070),
        (570, 12080),
        (575, 12090),
        (580, 13000),
    ];
    let major: u32 = version.split('.').next()?.parse().ok()?;
    BRANCHES
        .iter()
        .rev()
        .enumerate()
        // A branch past the table's last supports at least its CUDA.
        .find(|(at, (branch, _))| major >= *branch && (*at == 0 || major < branch + 10))
        .map(|(_, entry)| entry)
        .map(|(_, cuda)| CudaVersion(*cuda))
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::{symlink, OpenOptionsExt};

    use goblin::elf::header::{ELFCLASS32, ELFCLASS64, EM_386, EM_X86_64, ET_DYN};

    use super::*;
    use crate::host::elf::tests::header;

    fn rootfs() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("usr/local/cuda/compat")).unwrap();
        dir
    }

    fn compat(dir: &Path) -> PathBuf {
        dir.join("usr/local/cuda/compat")
    }

    fn inspect(dir: &Path) -> Image {
        Image::inspect(dir, "535.261.03", CompatMode::Ldconfig).unwrap()
    }

    #[test]
    fn finds_newer_compat_libraries() {
        let dir = rootfs();
        let so = header(ELFCLASS64, EM_X86_64, ET_DYN);
        fs::write(compat(dir.path()).join("libcuda.so.550.54.15"), &so).unwrap();
        fs::write(
            compat(dir.path()).join("libnvidia-ptxjitcompiler.so.550.54.15"),
            &so,
        )
        .unwrap();
        symlink(
            "libcuda.so.550.54.15",
            compat(dir.path()).join("libcuda.so.1"),
        )
        .unwrap();
        let found = inspect(dir.path()).compat.unwrap();
        assert_eq!(found.driver_version, "550.54.15");
        assert_eq!(found.cuda, Some(CudaVersion(12040)));
        assert_eq!(
            found.files,
            [
                "libcuda.so.550.54.15",
                "libnvidia-ptxjitcompiler.so.550.54.15"
            ]
        );
        assert!(
            Image::inspect(dir.path(), "535.261.03", CompatMode::Disabled)
                .unwrap()
                .compat
                .is_none()
        );
    }

    /// `enable-cuda-compat --host-cuda-version` (NVIDIA 1.19's Jetson form):
    /// libraries whose note names a newer CUDA than the host's are used, from
    /// the directory `--cuda-compat-container-root` names; without a note,
    /// none are, as NVIDIA's 1.20 hook decides.
    #[test]
    fn a_host_cuda_version_compares_cuda_versions_in_the_root_given() {
        let dir = rootfs();
        let other = dir.path().join("opt/compat");
        fs::create_dir_all(&other).unwrap();
        let desc = br#"{"Format": 1, "CUDA Version": "12.4", "Driver": [535, 550]}"#;
        let with_note =
            crate::host::elf::tests::with_note(FWD_COMPAT_NOTE, "NVIDIA Corporation", desc);
        fs::write(other.join("libcuda.so.550.54.15"), &with_note).unwrap();
        let found = |cuda: &str, dir_in: &str| {
            Image::compat_in(
                dir.path(),
                Path::new(dir_in),
                HostOffers::HookFlags {
                    driver: None,
                    cuda: Some(cuda),
                },
            )
            .unwrap()
        };
        let compat = found("12.2", "/opt/compat").unwrap();
        assert_eq!(compat.dir, Path::new("/opt/compat"));
        assert_eq!(compat.cuda, Some(CudaVersion(12040)));
        assert!(found("12.4", "/opt/compat").is_none());
        assert!(found("12.8", "/opt/compat").is_none());
        // The default directory holds none.
        assert!(found("12.2", COMPAT_DIR).is_none());
        // Without the note, a host CUDA version takes none.
        let so = header(ELFCLASS64, EM_X86_64, ET_DYN);
        fs::write(other.join("libcuda.so.550.54.15"), &so).unwrap();
        assert!(found("12.2", "/opt/compat").is_none());
    }

    /// `enable-cuda-compat --host-driver-version` with a note listing the
    /// branches the compat driver serves: the host's branch must be listed
    /// and its driver older, as NVIDIA's 1.20 hook decides; without the
    /// note, the majors compare.
    #[test]
    fn a_host_driver_version_is_judged_by_the_notes_branches() {
        let dir = rootfs();
        let desc =
            br#"{"Format": 1, "CUDA Version": "13.1", "Driver": [535, 550, 570, 575, 580, 590]}"#;
        let lib = compat(dir.path()).join("libcuda.so.590.44.01");
        fs::write(
            &lib,
            crate::host::elf::tests::with_note(FWD_COMPAT_NOTE, "NVIDIA Corporation", desc),
        )
        .unwrap();
        let found = |driver: &str| {
            Image::compat_in(
                dir.path(),
                Path::new(COMPAT_DIR),
                HostOffers::HookFlags {
                    driver: Some(driver),
                    cuda: None,
                },
            )
            .unwrap()
        };
        let compat = found("580.105.08").unwrap();
        assert_eq!(compat.cuda, Some(CudaVersion(13010)));
        assert!(found("590.10.00").is_some(), "the host's branch, older");
        assert!(found("560.35.03").is_none(), "a branch the note lacks");
        assert!(found("590.50.00").is_none(), "a newer host driver");
        fs::write(&lib, header(ELFCLASS64, EM_X86_64, ET_DYN)).unwrap();
        assert!(found("560.35.03").is_some(), "no note: a newer major");
        assert!(found("590.10.00").is_none(), "no note: the same major");
    }

    /// Orin's compat libcuda (`libcuda.so.1.1`, of no branch) names its CUDA
    /// in its `.note.cuda.fwd_compatibility`, which NVIDIA's 1.20 hook reads:
    /// used where it is newer than `--host-cuda-version`.
    #[test]
    fn the_compat_libcudas_note_names_its_cuda() {
        let dir = rootfs();
        let orin = dir.path().join("usr/local/cuda/compat_orin");
        fs::create_dir_all(&orin).unwrap();
        let desc = br#"{"Format": 1, "CUDA Version": "13.2"}"#;
        fs::write(
            orin.join("libcuda.so.1.1"),
            crate::host::elf::tests::with_note(FWD_COMPAT_NOTE, "NVIDIA Corporation", desc),
        )
        .unwrap();
        let found = |cuda: &str| {
            Image::compat_in(
                dir.path(),
                Path::new("/usr/local/cuda/compat_orin"),
                HostOffers::HookFlags {
                    driver: None,
                    cuda: Some(cuda),
                },
            )
            .unwrap()
        };
        let compat = found("12.6").unwrap();
        assert_eq!(compat.cuda, Some(CudaVersion(13020)));
        assert_eq!(compat.files, ["libcuda.so.1.1"]);
        assert!(found("13.2").is_none(), "not newer than the host's");
        // Without the note, a version of no branch supports no known CUDA.
        fs::write(
            orin.join("libcuda.so.1.1"),
            header(ELFCLASS64, EM_X86_64, ET_DYN),
        )
        .unwrap();
        assert!(found("12.6").is_none());
    }

    /// A branch past the table's last supports at least its CUDA; one
    /// below or between the table's branches claims none.
    #[test]
    fn a_drivers_cuda_is_the_tables_or_a_lower_bound_past_it() {
        assert_eq!(cuda_of_driver("535.261.03"), Some(CudaVersion(12020)));
        assert_eq!(cuda_of_driver("580.65.06"), Some(CudaVersion(13000)));
        assert_eq!(cuda_of_driver("610.10"), Some(CudaVersion(13000)));
        assert_eq!(cuda_of_driver("333.88.99"), None);
        assert_eq!(cuda_of_driver("440.1"), None);
    }

    #[test]
    fn ignores_compat_not_newer_than_the_host() {
        let dir = rootfs();
        fs::write(
            compat(dir.path()).join("libcuda.so.525.85.12"),
            header(ELFCLASS64, EM_X86_64, ET_DYN),
        )
        .unwrap();
        assert!(inspect(dir.path()).compat.is_none());
    }

    /// NVIDIA's ldconfig mode keeps only compat libraries whose major is
    /// greater than the host driver's: `strncmp(nvrm_version, lib_major) >= 0`
    /// drops the rest (libnvidia-container src/cli/compat_mode.c:78-83).
    #[test]
    fn ignores_compat_of_the_hosts_own_branch_even_when_newer() {
        let dir = rootfs();
        let so = header(ELFCLASS64, EM_X86_64, ET_DYN);
        fs::write(compat(dir.path()).join("libcuda.so.470.300.01"), &so).unwrap();
        let found = Image::inspect(dir.path(), "470.256.02", CompatMode::Ldconfig)
            .unwrap()
            .compat;
        assert!(found.is_none(), "{found:?}");
        let found = Image::inspect(dir.path(), "535.261.03", CompatMode::Ldconfig)
            .unwrap()
            .compat;
        assert!(found.is_none(), "an older branch: {found:?}");
        // The next branch is taken, whatever the host's minor.
        let found = Image::inspect(dir.path(), "465.19.01", CompatMode::Ldconfig)
            .unwrap()
            .compat
            .unwrap();
        assert_eq!(found.driver_version, "470.300.01");
    }

    #[test]
    fn refuses_links_and_wrong_elves_as_compat_libraries() {
        let dir = rootfs();
        // A link to a host file, and an ELF of the wrong class: neither counts.
        symlink(
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            compat(dir.path()).join("libcuda.so.550.54.15"),
        )
        .unwrap();
        assert!(inspect(dir.path()).compat.is_none());
        fs::remove_file(compat(dir.path()).join("libcuda.so.550.54.15")).unwrap();
        fs::write(
            compat(dir.path()).join("libcuda.so.550.54.15"),
            header(ELFCLASS32, EM_386, ET_DYN),
        )
        .unwrap();
        assert!(inspect(dir.path()).compat.is_none());
        fs::remove_file(compat(dir.path()).join("libcuda.so.550.54.15")).unwrap();
        fs::create_dir(compat(dir.path()).join("libcuda.so.550.54.15")).unwrap();
        assert!(inspect(dir.path()).compat.is_none());
    }

    /// Whether `path` is opened (inotify `IN_OPEN`) while `act` runs.
    fn opened_during(path: &Path, act: impl FnOnce()) -> bool {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).unwrap();
        inotify.add_watch(path, AddWatchFlags::IN_OPEN).unwrap();
        act();
        match inotify.read_events() {
            Ok(events) => !events.is_empty(),
            Err(nix::errno::Errno::EAGAIN) => false,
            Err(e) => panic!("reading inotify events: {e}"),
        }
    }

    /// Inspects `dir`, whose compat libcuda is the special file `entry`:
    /// it must be ignored without ever being opened.
    fn inspect_without_opening(dir: &Path, entry: &Path) {
        // The watch sees an open, so that its silence below means something.
        let open_it = || {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(nix::libc::O_NONBLOCK)
                .open(entry)
                .unwrap();
        };
        assert!(opened_during(entry, open_it), "the watch sees opens");
        let mut image = None;
        let opened = opened_during(entry, || image = Some(inspect(dir)));
        assert!(!opened, "{} was opened", entry.display());
        assert!(image.unwrap().compat.is_none());
    }

    #[test]
    fn a_fifo_named_as_a_compat_library_is_never_opened() {
        let dir = rootfs();
        let fifo = compat(dir.path()).join("libcuda.so.550.54.15");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o644)).unwrap();
        inspect_without_opening(dir.path(), &fifo);
    }

    #[test]
    #[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
    fn a_device_node_named_as_a_compat_library_is_never_opened() {
        let dir = rootfs();
        let node = compat(dir.path()).join("libcuda.so.550.54.15");
        // /dev/null's numbers: a harmless device that an open would reach.
        nix::sys::stat::mknod(
            &node,
            nix::sys::stat::SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        inspect_without_opening(dir.path(), &node);
    }

    #[test]
    fn compat_dir_linked_to_the_host_is_resolved_inside_the_rootfs() {
        let dir = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        fs::write(
            host.path().join("libcuda.so.550.54.15"),
            header(ELFCLASS64, EM_X86_64, ET_DYN),
        )
        .unwrap();
        fs::create_dir_all(dir.path().join("usr/local/cuda")).unwrap();
        symlink(host.path(), dir.path().join("usr/local/cuda/compat")).unwrap();
        assert!(
            inspect(dir.path()).compat.is_none(),
            "the host's directory is never read"
        );
    }

    #[test]
    fn detects_layout() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(inspect(dir.path()).layout, ImageLayout::Rpm);
        fs::create_dir(dir.path().join("etc")).unwrap();
        symlink("/etc/debian_version", dir.path().join("etc/debian_version")).unwrap();
        assert_eq!(
            inspect(dir.path()).layout,
            ImageLayout::Rpm,
            "a link out of the rootfs does not count"
        );
        fs::remove_file(dir.path().join("etc/debian_version")).unwrap();
        fs::write(dir.path().join("etc/debian_version"), "12\n").unwrap();
        assert_eq!(inspect(dir.path()).layout, ImageLayout::Debian);
    }

    #[test]
    fn versions_compare_numerically() {
        use std::cmp::Ordering::*;
        assert_eq!(compare_versions("550.54.15", "535.261.03"), Greater);
        assert_eq!(compare_versions("535.261.03", "535.261.3"), Equal);
        assert_eq!(compare_versions("535.54", "535.54.1"), Less);
        assert_eq!(cuda_of_driver("535.261.03"), Some(CudaVersion(12020)));
        assert_eq!(cuda_of_driver("470.256.02"), Some(CudaVersion(11040)));
        assert_eq!(cuda_of_driver("580.65.06"), Some(CudaVersion(13000)));
        assert_eq!(cuda_of_driver("390.157"), None);
    }
}

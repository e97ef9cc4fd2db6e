use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use goblin::elf::header::{ELFCLASS32, ELFCLASS64, EM_386, EM_X86_64, ET_DYN};

use super::*;
use crate::host::elf::tests::header;
use crate::host::elf::{I386, X86_64};
use crate::planning::request::Capability;

const V: &str = "535.261.03";

struct Host {
    _dir: tempfile::TempDir,
    root: DriverRoot,
}

impl Host {
    fn new() -> Host {
        let dir = tempfile::tempdir().unwrap();
        let root = DriverRoot::new(dir.path());
        Host { _dir: dir, root }
    }

    fn file(&self, inner: &str, bytes: &[u8]) -> PathBuf {
        let host = self.root.host_path(Path::new(inner));
        fs::create_dir_all(host.parent().unwrap()).unwrap();
        fs::write(&host, bytes).unwrap();
        host
    }

    fn link(&self, inner: &str, target: &str) {
        let host = self.root.host_path(Path::new(inner));
        fs::create_dir_all(host.parent().unwrap()).unwrap();
        symlink(target, host).unwrap();
    }

    /// A library the loader cache gave, at `inner`.
    fn cached(&self, inner: &str, soname: &str) -> Library {
        let path = self.file(inner, &so64());
        Library::new(soname, X86_64, path, &Capabilities::all()).unwrap()
    }

    fn extend(&self, found: &mut Vec<Library>, caps: &str, search: &[&str]) {
        let search: Vec<PathBuf> = search.iter().map(PathBuf::from).collect();
        let scope = Capabilities::parse(caps).unwrap();
        extend(&self.root, found, V, X86_64, &scope, &search);
    }
}

fn so64() -> Vec<u8> {
    header(ELFCLASS64, EM_X86_64, ET_DYN)
}

fn names(libs: &[Library]) -> Vec<String> {
    let mut names: Vec<String> = libs
        .iter()
        .map(|l| l.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

const LIB: &str = "/usr/lib/x86_64-linux-gnu";

#[test]
fn takes_every_library_of_the_running_driver_beside_the_cached_ones() {
    let host = Host::new();
    let mut found = vec![host.cached(&format!("{LIB}/libcuda.so.{V}"), "libcuda.so.1")];
    host.file(&format!("{LIB}/libnvidia-present.so.{V}"), &so64());
    host.file(&format!("{LIB}/libnvidia-brandnew.so.{V}"), &so64());
    host.file(&format!("{LIB}/vdpau/libvdpau_nvidia.so.{V}"), &so64());
    host.file(&format!("{LIB}/libc.so.6"), &so64());
    host.extend(&mut found, "all", &[]);
    assert_eq!(
        names(&found),
        [
            format!("libcuda.so.{V}"),
            format!("libnvidia-brandnew.so.{V}"),
            format!("libnvidia-present.so.{V}"),
            format!("libvdpau_nvidia.so.{V}"),
        ]
    );
    let of = |name: &str| found.iter().find(|l| l.path.ends_with(name)).unwrap();
    let present = of(&format!("libnvidia-present.so.{V}"));
    assert_eq!(present.capability, Some(Capability::Graphics));
    assert_eq!(present.prefix, "libnvidia-present.so");
    let unknown = of(&format!("libnvidia-brandnew.so.{V}"));
    assert_eq!(unknown.capability, None);
    assert_eq!(unknown.prefix, "libnvidia-brandnew.so");
    // No SONAME in a bare header: the file's name stands for it.
    assert_eq!(unknown.soname, format!("libnvidia-brandnew.so.{V}"));
    let vdpau = of(&format!("libvdpau_nvidia.so.{V}"));
    assert_eq!(vdpau.capability, Some(Capability::Video));
}

#[test]
fn rejects_libraries_of_another_driver_version() {
    let host = Host::new();
    let mut found = vec![host.cached(&format!("{LIB}/libcuda.so.{V}"), "libcuda.so.1")];
    host.file(&format!("{LIB}/libnvidia-present.so.470.256.02"), &so64());
    // A name of the running driver, linked to a stale file.
    host.file(&format!("{LIB}/libnvidia-old.so.470.256.02"), &so64());
    host.link(
        &format!("{LIB}/libnvidia-old.so.{V}"),
        "libnvidia-old.so.470.256.02",
    );
    host.extend(&mut found, "all", &[]);
    assert_eq!(names(&found), [format!("libcuda.so.{V}")]);
}

#[test]
fn the_capabilities_place_known_families_and_unknown_ones_come_with_any() {
    let host = Host::new();
    let mut found = vec![host.cached(&format!("{LIB}/libcuda.so.{V}"), "libcuda.so.1")];
    host.file(&format!("{LIB}/libnvidia-present.so.{V}"), &so64());
    host.file(&format!("{LIB}/libnvidia-brandnew.so.{V}"), &so64());
    host.extend(&mut found, "compute", &[]);
    assert_eq!(
        names(&found),
        [
            format!("libcuda.so.{V}"),
            format!("libnvidia-brandnew.so.{V}")
        ]
    );
    let compute = Capabilities::parse("compute").unwrap();
    let compat32 = Capabilities::parse("compat32").unwrap();
    assert!(found.iter().all(|l| l.wanted_by(&compute)));
    assert!(found.iter().all(|l| !l.wanted_by(&compat32)));
}

#[test]
fn own_versioned_families_come_only_from_the_drivers_directories() {
    let host = Host::new();
    let mut found = vec![host.cached(&format!("{LIB}/libcuda.so.{V}"), "libcuda.so.1")];
    host.file(&format!("{LIB}/libnvidia-egl-gbm.so.1.1.0"), &so64());
    host.link(
        &format!("{LIB}/libnvidia-egl-gbm.so.1"),
        "libnvidia-egl-gbm.so.1.1.0",
    );
    host.file(&format!("{LIB}/libnvidia-nvvm70.so.4"), &so64());
    // A directory of no running driver's library: its NVVM 7.0 may be stale.
    host.file("/usr/lib/old/libnvidia-nvvm70.so.4", &so64());
    host.extend(&mut found, "compute,graphics", &["/usr/lib/old"]);
    assert_eq!(
        names(&found),
        [
            format!("libcuda.so.{V}"),
            "libnvidia-egl-gbm.so.1.1.0".to_string(),
            "libnvidia-nvvm70.so.4".to_string(),
        ]
    );
    let nvvm70 = found.iter().find(|l| l.prefix == "libnvidia-nvvm70.so");
    assert_eq!(nvvm70.and_then(|l| l.capability), Some(Capability::Compute));
    // One file under two names is taken once.
    assert_eq!(found.len(), 3);
}

#[test]
fn a_cache_without_the_driver_is_searched_around() {
    let host = Host::new();
    host.file(&format!("/usr/lib64/libcuda.so.{V}"), &so64());
    host.link("/usr/lib64/libcuda.so.1", &format!("libcuda.so.{V}"));
    host.file(&format!("/usr/lib64/libnvidia-ml.so.{V}"), &so64());
    host.file("/usr/lib64/libnvidia-egl-wayland.so.1.1.10", &so64());
    // The stale driver's directory, searched too: nothing of it is taken.
    host.file(
        "/lib/x86_64-linux-gnu/libnvidia-egl-wayland.so.1.1.9",
        &so64(),
    );
    host.file("/lib/x86_64-linux-gnu/libcuda.so.470.256.02", &so64());
    let mut found = Vec::new();
    host.extend(&mut found, "compute,utility,graphics", &[]);
    assert_eq!(
        names(&found),
        [
            format!("libcuda.so.{V}"),
            "libnvidia-egl-wayland.so.1.1.10".to_string(),
            format!("libnvidia-ml.so.{V}"),
        ]
    );
}

#[test]
fn configured_search_paths_come_first_and_stay_inside_the_root() {
    let host = Host::new();
    host.file(&format!("/usr/local/glibc/usr/lib/libcuda.so.{V}"), &so64());
    host.file(&format!("/usr/lib64/libcuda.so.{V}"), &so64());
    // A link out of the root is resolved inside it.
    host.link("/opt/escape", "../../../../../../tmp");
    let mut found = Vec::new();
    host.extend(
        &mut found,
        "compute",
        &["/usr/local/glibc/usr/lib", "/opt/escape"],
    );
    // The standard directory's copy has the same SONAME: the first wins.
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0]
        .path
        .starts_with(host.root.host_path(Path::new("/usr/local/glibc/usr/lib"))));
    assert!(found.iter().all(|l| l.path.starts_with(host.root.path())));
}

#[test]
fn the_search_runs_only_where_the_cache_lacks_the_host_driver() {
    let host = Host::new();
    let mut found = vec![host.cached(
        &format!("{LIB}/nvidia/current/libcuda.so.{V}"),
        "libcuda.so.1",
    )];
    host.file(&format!("/usr/lib64/libnvidia-ml.so.{V}"), &so64());
    host.extend(&mut found, "compute,utility", &[]);
    assert_eq!(names(&found), [format!("libcuda.so.{V}")]);
}

#[test]
fn files_of_another_architecture_or_not_libraries_are_refused() {
    let host = Host::new();
    let mut found = vec![host.cached(&format!("{LIB}/libcuda.so.{V}"), "libcuda.so.1")];
    host.file(
        &format!("{LIB}/libnvidia-i386.so.{V}"),
        &header(ELFCLASS32, EM_386, ET_DYN),
    );
    host.file(&format!("{LIB}/libnvidia-text.so.{V}"), b"not an elf");
    fs::create_dir_all(
        host.root
            .host_path(Path::new(&format!("{LIB}/libnvidia-dir.so.{V}"))),
    )
    .unwrap();
    host.extend(&mut found, "all", &[]);
    assert_eq!(names(&found), [format!("libcuda.so.{V}")]);
}

#[test]
fn compat32_directories_are_scanned_for_their_own_architecture() {
    let host = Host::new();
    let mut found = vec![host.cached(&format!("{LIB}/libcuda.so.{V}"), "libcuda.so.1")];
    let i386 = host.file(
        &format!("/usr/lib/i386-linux-gnu/libcuda.so.{V}"),
        &header(ELFCLASS32, EM_386, ET_DYN),
    );
    found.push(Library::new("libcuda.so.1", I386, i386, &Capabilities::all()).unwrap());
    host.file(
        &format!("/usr/lib/i386-linux-gnu/libnvidia-ptxjitcompiler.so.{V}"),
        &header(ELFCLASS32, EM_386, ET_DYN),
    );
    host.extend(&mut found, "compute,compat32", &[]);
    let i386: Vec<_> = found.iter().filter(|l| l.arch == "i386").collect();
    assert_eq!(i386.len(), 2, "{found:?}");
}

#[test]
fn the_number_of_files_checked_is_bounded() {
    let host = Host::new();
    let mut found = vec![host.cached(&format!("{LIB}/libcuda.so.{V}"), "libcuda.so.1")];
    for i in 0..MAX_FILES + 5 {
        host.file(&format!("{LIB}/libnvidia-n{i:05}.so.{V}"), &so64());
    }
    host.extend(&mut found, "all", &[]);
    assert_eq!(found.len(), 1 + MAX_FILES);
}

#[test]
fn names_are_judged_by_the_running_drivers_suffix() {
    let names = Names::new(V);
    assert_eq!(
        names.judge(&format!("libcuda.so.{V}")),
        Some(Named::Versioned)
    );
    assert_eq!(
        names.judge("libnvidia-egl-xcb.so.1.0.2"),
        Some(Named::OwnVersion)
    );
    assert_eq!(names.judge(&format!("libglxserver_nvidia.so.{V}")), None);
    assert_eq!(names.judge(&format!("nvidia_drv.so.{V}")), None);
    assert_eq!(names.judge("libcuda.so.470.256.02"), None);
    assert_eq!(names.judge(&format!("libcuda.so.{V}.bak")), None);
}

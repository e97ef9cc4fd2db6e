use std::os::unix::fs::symlink;

use goblin::elf::header::{ELFCLASS64, EM_AARCH64, ET_DYN};

use super::*;
use crate::host::elf::tests::header;

/// A real shared object of the host's (its libz), and its SONAME.
fn host_library() -> (PathBuf, &'static str) {
    let dir = Path::new(Arch::host().debian_lib_dir);
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().into_string().unwrap();
        if name.starts_with("libz.so.1.") && entry.path().is_file() && !entry.path().is_symlink() {
            return (entry.path(), "libz.so.1");
        }
    }
    panic!("no libz.so.1.* in {}", dir.display());
}

struct Sim {
    dir: tempfile::TempDir,
}

impl Sim {
    fn new() -> Sim {
        let sim = Sim {
            dir: tempfile::tempdir().unwrap(),
        };
        fs::create_dir_all(sim.root().join("etc")).unwrap();
        fs::create_dir_all(sim.dir.path().join("proc")).unwrap();
        fs::create_dir_all(sim.dir.path().join("sys")).unwrap();
        fs::create_dir_all(sim.dir.path().join("devroot/dev")).unwrap();
        sim
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("driver")
    }

    fn config(&self) -> DriverConfig {
        DriverConfig {
            root: self.root(),
            dev_root: self.dir.path().join("devroot"),
            proc_root: self.dir.path().join("proc"),
            sys_root: self.dir.path().join("sys"),
            snapshot_dir: None,
            library_search_paths: Vec::new(),
            csv: CsvSelection::default(),
        }
    }

    fn write(&self, inner: &str, bytes: &[u8]) -> PathBuf {
        let path = self.root().join(inner.trim_start_matches('/'));
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, bytes).unwrap();
        path
    }

    fn link(&self, inner: &str, target: &str) {
        let path = self.root().join(inner.trim_start_matches('/'));
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        symlink(target, path).unwrap();
    }

    fn csv(&self, name: &str, text: &str) {
        self.write(&format!("{}/{name}", format::DIR), text.as_bytes());
    }
}

const LIB: &str = "/usr/lib/nvidia";

#[test]
fn a_tegra_host_has_nv_tegra_release_or_a_tegra_soc_family_and_no_native_driver() {
    let sim = Sim::new();
    let config = sim.config();
    assert!(!detect(&config), "nothing of Tegra's");
    fs::create_dir_all(config.sys_root.join("devices/soc0")).unwrap();
    fs::write(config.sys_root.join(SOC_FAMILY), "Tegra\n").unwrap();
    assert!(detect(&config), "the SoC family, in any case");
    fs::write(config.sys_root.join(SOC_FAMILY), "jetson-tegra\n").unwrap();
    assert!(!detect(&config), "the family must start with tegra");
    sim.write(TEGRA_RELEASE, b"# R36 (release), REVISION: 4.3\n");
    assert!(detect(&config), "/etc/nv_tegra_release in the driver root");
    fs::create_dir_all(config.proc_root.join("driver/nvidia")).unwrap();
    assert!(!detect(&config), "a loaded native driver is served as one");
    assert!(has_tegra_files(&config));
}

#[test]
fn the_release_file_counts_only_inside_the_driver_root() {
    let sim = Sim::new();
    let outside = sim.dir.path().join("nv_tegra_release");
    fs::write(&outside, "R36").unwrap();
    // An absolute link is re-rooted: it names the root's own /nv_tegra_release, absent.
    sim.link(TEGRA_RELEASE, outside.to_str().unwrap());
    assert!(!has_tegra_files(&sim.config()));
}

#[test]
fn base_files_are_read_from_the_driver_roots_csv_dir_and_others_only_when_named() {
    let sim = Sim::new();
    sim.csv("drivers.csv", "lib, /a\n");
    sim.csv("devices.csv", "dev, /dev/nvmap\n");
    sim.csv("cuda.csv", "dir, /usr/local/cuda\n");
    let root = DriverRoot::new(sim.root());
    let dir = sim.root().join(format::DIR.trim_start_matches('/'));
    assert_eq!(
        csv_files(&root, &CsvSelection::default()),
        vec![dir.join("devices.csv"), dir.join("drivers.csv")]
    );
    assert_eq!(
        all_csv_files(&root),
        vec![
            dir.join("cuda.csv"),
            dir.join("devices.csv"),
            dir.join("drivers.csv")
        ]
    );
    let named = CsvSelection {
        files: Some(vec![dir.join("cuda.csv")]),
        ..CsvSelection::default()
    };
    assert_eq!(csv_files(&root, &named), vec![dir.join("cuda.csv")]);
    let all = CsvSelection {
        all: true,
        ..CsvSelection::default()
    };
    assert_eq!(csv_files(&root, &all), all_csv_files(&root));
    // An empty file is skipped, as NVIDIA skips it; an unreadable one too.
    sim.csv("l4t.csv", "# nothing\n");
    let (read, entries) = read_entries(&[
        dir.join("l4t.csv"),
        dir.join("absent.csv"),
        dir.join("drivers.csv"),
    ]);
    assert_eq!(read, vec![dir.join("drivers.csv")]);
    assert_eq!(entries.len(), 1);
}

#[test]
fn a_csv_host_without_csv_files_says_where_it_looked() {
    let sim = Sim::new();
    let err = discover(&sim.config(), &CsvSelection::default(), Arch::host()).unwrap_err();
    assert!(
        err.to_string().contains(format::DIR) && err.to_string().contains("drivers"),
        "{err}"
    );
}

#[test]
fn every_entry_is_checked_and_what_fails_is_skipped_with_why() {
    let sim = Sim::new();
    let host = Arch::host();
    let (lib, soname) = host_library();
    let libcuda = format!("{LIB}/libcuda.so.1.1");
    fs::create_dir_all(sim.root().join(&LIB[1..])).unwrap();
    fs::copy(&lib, sim.root().join(&libcuda[1..])).unwrap();
    // A listed link to it, a two-link chain, one out of the root's files.
    sim.link(&format!("{LIB}/libcuda.so"), "libcuda.so.1.1");
    sim.link("/usr/lib/libcuda.so", "nvidia/libcuda.so");
    // Data, a library of another architecture, a directory, a regular file listed as a link.
    sim.write("/usr/share/nvidia/nvidia_icd.json", b"{}");
    sim.write(
        &format!("{LIB}/libnvarm.so"),
        &header(ELFCLASS64, EM_AARCH64, ET_DYN),
    );
    fs::create_dir_all(sim.root().join("usr/local/cuda-12.6/bin")).unwrap();
    sim.link("/usr/local/cuda", "cuda-12.6");
    sim.write("/usr/lib/plain.so", b"x");
    sim.write(TEGRA_RELEASE, b"R36\n");
    let dev = sim.dir.path().join("devroot/dev");
    fs::write(dev.join("nvmap"), b"").unwrap();
    let text = format!(
        "dev, /dev/nvmap\n\
         dev, /dev/nvhost-absent\n\
         dev, /dev/../etc/passwd\n\
         lib, {libcuda}\n\
         lib, /usr/share/nvidia/nvidia_icd.json\n\
         lib, {LIB}/libnvarm.so\n\
         lib, /usr/lib/absent.so\n\
         sym, /usr/lib/libcuda.so\n\
         sym, /usr/lib/plain.so\n\
         sym, {LIB}/ignored.so\n\
         dir, /usr/local/cuda\n\
         dir, /usr/lib/plain.so\n"
    );
    let entries = format::parse(Path::new("/x.csv"), &text);
    let root = DriverRoot::new(sim.root());
    let (csv, nodes) = inventory(
        &root,
        &sim.config().dev_root,
        vec![],
        &entries,
        &["**/ignored.so".into()],
        host,
    );
    assert!(nodes.is_empty(), "a regular file is no node: {nodes:?}");
    let skipped: Vec<(EntryKind, &str)> = csv
        .skipped
        .iter()
        .map(|s| (s.kind, s.path.to_str().unwrap()))
        .collect();
    assert_eq!(
        skipped,
        vec![
            (EntryKind::Dev, "/dev/nvmap"),
            (EntryKind::Dev, "/dev/nvhost-absent"),
            (EntryKind::Dev, "/dev/../etc/passwd"),
            (EntryKind::Lib, "/usr/lib/nvidia/libnvarm.so"),
            (EntryKind::Lib, "/usr/lib/absent.so"),
            (EntryKind::Sym, "/usr/lib/plain.so"),
            (EntryKind::Dir, "/usr/lib/plain.so"),
        ],
        "{:#?}",
        csv.skipped
    );
    assert!(csv.skipped[0].reason.contains("not a character device"));
    let listed: Vec<(&str, Option<&str>)> = csv
        .files_listed
        .iter()
        .map(|f| (f.inner.to_str().unwrap(), f.soname.as_deref()))
        .collect();
    assert_eq!(
        listed,
        vec![
            (libcuda.as_str(), Some(soname)),
            ("/usr/share/nvidia/nvidia_icd.json", None),
        ]
    );
    let links: Vec<(&str, &str)> = csv
        .links
        .iter()
        .map(|l| (l.path.to_str().unwrap(), l.target.to_str().unwrap()))
        .collect();
    assert_eq!(
        links,
        vec![
            ("/usr/lib/libcuda.so", "nvidia/libcuda.so"),
            ("/usr/lib/nvidia/libcuda.so", "libcuda.so.1.1"),
        ]
    );
    assert_eq!(csv.dirs.len(), 1);
    assert_eq!(csv.dirs[0].inner, Path::new("/usr/local/cuda"));
    assert_eq!(csv.dirs[0].host, sim.root().join("usr/local/cuda-12.6"));
    assert_eq!(
        csv.release.as_ref().unwrap().inner,
        Path::new(TEGRA_RELEASE)
    );
    assert_eq!(csv.library_dirs(), vec![PathBuf::from(LIB)]);
    let libs = csv.libraries(host);
    assert_eq!(libs.len(), 1);
    assert_eq!(
        (libs[0].soname.as_str(), libs[0].prefix.as_str()),
        (soname, "libz.so")
    );
}

#[test]
fn a_link_escaping_the_root_ends_inside_it_or_is_skipped() {
    let sim = Sim::new();
    let outside = sim.dir.path().join("secret.so");
    fs::write(&outside, b"secret").unwrap();
    sim.link("/usr/lib/libout.so", outside.to_str().unwrap());
    sim.link("/usr/lib/libup.so", "../../../../../../../../secret.so");
    let entries = format::parse(
        Path::new("/x.csv"),
        "sym, /usr/lib/libout.so\nsym, /usr/lib/libup.so\nlib, /usr/lib/libout.so\n",
    );
    let root = DriverRoot::new(sim.root());
    let (csv, _) = inventory(
        &root,
        Path::new("/nonexistent"),
        vec![],
        &entries,
        &[],
        Arch::host(),
    );
    assert!(csv.files_listed.is_empty(), "{:?}", csv.files_listed);
    assert_eq!(csv.skipped.len(), 3, "{:?}", csv.skipped);
}

#[test]
fn a_char_device_is_taken_with_its_own_numbers() {
    let dir = tempfile::tempdir().unwrap();
    // /dev/null is a character device everywhere the tests run.
    let dev_root = dir.path();
    fs::create_dir_all(dev_root.join("dev")).unwrap();
    symlink("/dev/null", dev_root.join("dev/null-link")).unwrap();
    let entries = format::parse(Path::new("/x.csv"), "dev, null-link\n");
    let root = DriverRoot::new(dir.path());
    let (csv, nodes) = inventory(&root, dev_root, vec![], &entries, &[], Arch::host());
    assert!(nodes.is_empty(), "a link is not taken: {nodes:?}");
    assert!(
        csv.skipped[0].reason.contains("symlink"),
        "{:?}",
        csv.skipped
    );
    let entries = format::parse(Path::new("/x.csv"), "dev, /null\n");
    let (_, nodes) = inventory(
        &root,
        Path::new("/dev"),
        vec![],
        &entries,
        &[],
        Arch::host(),
    );
    assert_eq!(nodes.len(), 1);
    assert_eq!((nodes[0].major, nodes[0].minor), (1, 3));
    assert_eq!(nodes[0].path, Path::new("/null"));
    assert_eq!(nodes[0].role, NodeRole::Listed);
}

#[test]
fn the_l4t_release_stands_in_for_a_driver_version() {
    let line = "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025\n";
    assert_eq!(release_version(line).as_deref(), Some("R36.4.3"));
    assert_eq!(release_version("# R32 (release)\n").as_deref(), Some("R32"));
    assert_eq!(release_version("36.4\n"), None);
    assert_eq!(release_version(""), None);
}

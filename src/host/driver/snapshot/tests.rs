//! The snapshot against driver roots made in temporary directories.

use std::os::unix::fs::{symlink, PermissionsExt};

use super::*;
use crate::host::driver::DriverRoot;

/// A driver root with a library reached through a link, and what
/// resolving it examined, ready to snapshot.
struct Host {
    dir: tempfile::TempDir,
    root: PathBuf,
    snapshots: PathBuf,
    key: Key,
    files: RootFiles,
    examined: Vec<(PathBuf, Metadata)>,
}

impl Host {
    fn new() -> Host {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("driver");
        let lib = root.join("usr/lib/x86_64-linux-gnu");
        fs::create_dir_all(lib.join("nvidia")).unwrap();
        fs::write(lib.join("nvidia/libcuda.so.535.261.03"), b"\x7fELF").unwrap();
        symlink("nvidia/libcuda.so.535.261.03", lib.join("libcuda.so.1")).unwrap();
        fs::create_dir_all(root.join("etc")).unwrap();
        fs::write(root.join("etc/ld.so.cache"), b"glibc-ld.so.cache1.1").unwrap();
        fs::create_dir_all(root.join("usr/bin")).unwrap();
        fs::write(root.join("usr/bin/nvidia-smi"), b"\x7fELF").unwrap();
        let firmware = root.join("lib/firmware/nvidia/535.261.03");
        fs::create_dir_all(&firmware).unwrap();
        fs::write(firmware.join("gsp_ga10x.bin"), b"gsp").unwrap();
        let driver = DriverRoot::new(&root);
        let cache = driver.resolve(Path::new("/etc/ld.so.cache")).unwrap();
        let found = |inner: &str, capability| HostFile {
            capability,
            path: driver.resolve(Path::new(inner)).unwrap().host,
            destination: PathBuf::from(inner),
        };
        let binaries = vec![found("/usr/bin/nvidia-smi", Some(Capability::Utility))];
        let firmware = vec![found("/lib/firmware/nvidia/535.261.03/gsp_ga10x.bin", None)];
        let resolved = driver
            .resolve(Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1"))
            .unwrap();
        let files = RootFiles {
            libraries: vec![Library {
                capability: Some(Capability::Compute),
                prefix: "libcuda.so".into(),
                soname: "libcuda.so.1".into(),
                arch: Arch::host().name,
                path: resolved.host,
            }],
            missing_libraries: vec![MissingLibrary {
                capability: Capability::Utility,
                prefix: "libnvidia-ml.so",
                core: true,
            }],
            binaries,
            missing_binaries: vec!["nvidia-debugdump"],
            firmware,
            configs: Vec::new(),
            cache: Some(cache.host),
        };
        let key = Key::new(&root, "compute,utility".into(), Arch::host(), "535.261.03");
        Host {
            snapshots: dir.path().join("snapshots"),
            examined: driver.examined(),
            dir,
            root,
            key,
            files,
        }
    }

    /// Stores the snapshot as if a minute had passed since the host was made.
    fn store(&self) {
        store_at(
            &self.snapshots,
            &self.key,
            &self.files,
            &self.examined,
            later(),
        )
        .unwrap();
    }

    fn load(&self) -> Result<RootFiles> {
        load(&self.snapshots, &self.key)
    }

    fn file(&self) -> PathBuf {
        self.snapshots.join(self.key.file_name())
    }

    /// The stored snapshot's JSON, decoded.
    fn json(&self) -> serde_json::Value {
        let data = fs::read(self.file()).unwrap();
        serde_json::from_slice(unseal(&self.file(), &data).unwrap()).unwrap()
    }

    /// Rewrites the stored snapshot's JSON with `edit`, sealed again:
    /// what a writer that knows the format could put there.
    fn rewrite(&self, edit: impl FnOnce(&mut serde_json::Value)) {
        let mut json = self.json();
        edit(&mut json);
        fs::write(self.file(), seal(serde_json::to_vec(&json).unwrap())).unwrap();
    }

    fn library_path(&self) -> String {
        self.files.libraries[0].path.to_str().unwrap().to_string()
    }
}

fn later() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 60
}

#[test]
fn a_stored_snapshot_gives_back_what_was_found() {
    let host = Host::new();
    assert!(matches!(host.load(), Err(Error::SnapshotMissing { .. })));
    host.store();
    assert_eq!(host.load().unwrap(), host.files);
    let mode = fs::metadata(&host.snapshots).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let mode = fs::metadata(host.file()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn it_is_not_written_while_what_it_examined_may_still_change_unseen() {
    let host = Host::new();
    let now = later() - 60;
    let err = store_at(&host.snapshots, &host.key, &host.files, &host.examined, now);
    assert!(
        matches!(err, Err(Error::SnapshotUnsettled { .. })),
        "{err:?}"
    );
    assert!(!host.file().exists());
}

#[test]
fn any_change_under_the_root_makes_it_stale() {
    fn lib(h: &Host) -> PathBuf {
        h.root.join("usr/lib/x86_64-linux-gnu")
    }
    type Change = fn(&Host);
    let changes: [(&str, Change, &str); 5] = [
        (
            "the library rewritten in place",
            |h| fs::write(lib(h).join("nvidia/libcuda.so.535.261.03"), b"\x7fELF2").unwrap(),
            "nvidia/libcuda.so.535.261.03",
        ),
        (
            "a file added beside the link",
            |h| fs::write(lib(h).join("libcuda.so.550.54.15"), b"").unwrap(),
            "x86_64-linux-gnu",
        ),
        (
            "the link pointed elsewhere",
            |h| {
                fs::remove_file(lib(h).join("libcuda.so.1")).unwrap();
                symlink("nvidia/libcuda.so.550.54.15", lib(h).join("libcuda.so.1")).unwrap();
            },
            "x86_64-linux-gnu",
        ),
        (
            "a directory renamed into place",
            |h| {
                fs::create_dir(lib(h).join("new")).unwrap();
                fs::rename(lib(h).join("nvidia"), lib(h).join("old")).unwrap();
                fs::rename(lib(h).join("new"), lib(h).join("nvidia")).unwrap();
            },
            "x86_64-linux-gnu",
        ),
        (
            "the library's mode changed",
            |h| {
                let path = lib(h).join("nvidia/libcuda.so.535.261.03");
                fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
            },
            "nvidia/libcuda.so.535.261.03",
        ),
    ];
    for (case, change, named) in changes {
        let host = Host::new();
        host.store();
        change(&host);
        match host.load() {
            Err(Error::SnapshotStale { examined, .. }) => {
                assert!(examined.ends_with(named), "{case}: {}", examined.display())
            }
            other => panic!("{case}: {other:?}"),
        }
    }
}

#[test]
fn another_driver_scope_or_root_does_not_match() {
    let host = Host::new();
    host.store();
    let mut other = host.key.clone();
    other.driver = "550.54.15".into();
    // Same file (one per root, scope and architecture), another driver.
    assert!(matches!(
        load(&host.snapshots, &other),
        Err(Error::SnapshotOtherKey { .. })
    ));
    other = host.key.clone();
    other.scope = "compute".into();
    assert!(matches!(
        load(&host.snapshots, &other),
        Err(Error::SnapshotMissing { .. })
    ));
}

#[test]
#[cfg_attr(
    not(feature = "_test_as_root"),
    ignore = "needs root: the snapshot must be root's; run `make test`"
)]
fn a_snapshot_anyone_but_root_could_have_written_is_refused() {
    use std::os::unix::fs::chown;
    type Tamper = fn(&Host);
    let cases: [(&str, Tamper); 5] = [
        ("the file owned by another user", |h| {
            chown(h.file(), Some(1000), None).unwrap()
        }),
        ("the file writable by others", |h| {
            fs::set_permissions(h.file(), fs::Permissions::from_mode(0o666)).unwrap()
        }),
        ("the directory writable by others", |h| {
            fs::set_permissions(&h.snapshots, fs::Permissions::from_mode(0o777)).unwrap()
        }),
        ("the directory owned by another user", |h| {
            chown(&h.snapshots, Some(1000), None).unwrap()
        }),
        ("the file a link to another", |h| {
            let elsewhere = h.dir.path().join("elsewhere.json");
            fs::rename(h.file(), &elsewhere).unwrap();
            symlink(&elsewhere, h.file()).unwrap();
        }),
    ];
    for (case, tamper) in cases {
        let host = Host::new();
        host.store();
        tamper(&host);
        let err = host.load().unwrap_err();
        assert!(
            matches!(err, Error::SnapshotUnsafe { .. } | Error::SnapshotIo { .. }),
            "{case}: {err}"
        );
    }
}

/// Loads `host`'s snapshot after `edit`, which must be refused as
/// `expected` says, naming `named`; and leaves it refused.
fn refused(host: &Host, case: &str, named: &str, expected: fn(&Error) -> bool) {
    let err = host.load().unwrap_err();
    assert!(expected(&err), "{case}: {err}");
    assert!(err.is_refusal(), "{case}: {err}");
    assert!(err.to_string().contains(named), "{case}: {err}");
}

/// A path rewriting a library's (root and library path given).
type PathEdit = fn(&str, &str) -> String;

/// Checks that a snapshot naming each of `cases` instead of its
/// library, in its library list alone or in its stamp too, is refused
/// as unsafe, naming the path.
fn paths_refused(cases: &[(&str, PathEdit)]) {
    for (case, edit) in cases {
        let host = Host::new();
        host.store();
        let bad = edit(&host.root.to_string_lossy(), &host.library_path());
        for both in [false, true] {
            host.store();
            host.rewrite(|json| {
                json["libraries"][0]["path"] = bad.clone().into();
                if both {
                    for stamp in json["stamps"].as_array_mut().unwrap() {
                        if stamp["path"] == host.library_path().as_str() {
                            stamp["path"] = bad.clone().into();
                        }
                    }
                }
            });
            refused(&host, case, &bad, |e| {
                matches!(e, Error::SnapshotUnsafe { .. })
            });
        }
    }
}

#[test]
fn a_snapshot_with_dot_or_dot_dot_components_is_refused() {
    paths_refused(&[
        ("up and out of the root", |root, _| {
            format!("{root}/usr/lib/../../../../etc/shadow")
        }),
        ("up and back into the root", |root, lib| {
            lib.replacen(root, &format!("{root}/usr/.."), 1)
        }),
        ("through a dot", |root, lib| {
            lib.replacen(root, &format!("{root}/."), 1)
        }),
    ]);
}

#[test]
fn a_snapshot_with_relative_or_empty_paths_is_refused() {
    paths_refused(&[
        ("relative", |_, lib| lib.trim_start_matches('/').into()),
        ("through an empty component", |root, lib| {
            lib.replacen(root, &format!("{root}/"), 1)
        }),
        ("with a trailing slash", |_, lib| format!("{lib}/")),
    ]);
}

#[test]
fn a_snapshot_naming_files_outside_the_root_is_refused() {
    paths_refused(&[
        ("another host file", |_, _| "/etc/shadow".into()),
        // A prefix of the root's name is not the root.
        ("beside the root", |root, _| format!("{root}2/libcuda.so.1")),
    ]);
}

#[test]
fn a_path_normal_and_under_the_root_is_still_resolved_inside_it() {
    // A link inside the root up and out of it: the path is normal and
    // under the root, its stamp's lstat may match, but resolved inside
    // the root it is not the file stamped.
    let host = Host::new();
    host.store();
    // Only the inputs stamped, not the directories on the way: so that
    // nothing but resolving inside the root can tell.
    let cache = host.files.cache.as_ref().unwrap();
    let inputs: Vec<String> = [&host.root, cache]
        .into_iter()
        .chain(host.files.libraries.iter().map(|l| &l.path))
        .chain(host.files.binaries.iter().map(|b| &b.path))
        .chain(host.files.firmware.iter().map(|f| &f.path))
        .map(|p| p.to_string_lossy().to_string())
        .collect();
    host.rewrite(|json| {
        json["stamps"]
            .as_array_mut()
            .unwrap()
            .retain(|s| inputs.iter().any(|i| s["path"] == i.as_str()))
    });
    assert_eq!(host.load().unwrap(), host.files);
    let lib = host.root.join("usr/lib/x86_64-linux-gnu");
    let outside = host.dir.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::rename(lib.join("nvidia"), outside.join("nvidia")).unwrap();
    let up = "../".repeat(lib.strip_prefix("/").unwrap().components().count());
    symlink(
        format!("{up}{}", outside.join("nvidia").display()),
        lib.join("nvidia"),
    )
    .unwrap();
    // Through the host's own lookup it is the very file stamped.
    let stamped = fs::metadata(&host.files.libraries[0].path).unwrap();
    assert_eq!(
        stamped.ino(),
        fs::metadata(outside.join("nvidia/libcuda.so.535.261.03"))
            .unwrap()
            .ino()
    );
    match host.load() {
        Err(Error::SnapshotStale { examined, .. }) => {
            assert_eq!(examined, host.files.libraries[0].path)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_snapshot_of_names_this_build_does_not_know_is_refused() {
    let host = Host::new();
    host.store();
    host.rewrite(|json| json["libraries"][0]["prefix"] = "libfoo.so".into());
    refused(&host, "unknown library", "libfoo.so", |e| {
        matches!(e, Error::SnapshotDecode { .. })
    });
}

/// Checks that `host`'s snapshot, its stamps edited by `edit`, is
/// refused as incomplete (or `expected`), naming `named`.
fn stamps_refused(
    host: &Host,
    case: &str,
    named: &str,
    edit: impl FnOnce(&mut serde_json::Value),
    expected: fn(&Error) -> bool,
) {
    host.store();
    host.rewrite(edit);
    refused(host, case, named, expected);
}

fn incomplete(e: &Error) -> bool {
    matches!(e, Error::SnapshotIncomplete { .. })
}

#[test]
fn a_snapshot_with_an_empty_stamp_list_is_refused() {
    let host = Host::new();
    let root = host.root.to_string_lossy().to_string();
    stamps_refused(
        &host,
        "no stamps at all",
        &root,
        |json| json["stamps"].as_array_mut().unwrap().clear(),
        incomplete,
    );
}

#[test]
fn a_snapshot_with_no_stamp_list_is_refused() {
    let host = Host::new();
    stamps_refused(
        &host,
        "no stamp list",
        "stamps",
        |json| {
            json.as_object_mut().unwrap().remove("stamps");
        },
        |e| matches!(e, Error::SnapshotDecode { .. }),
    );
}

#[test]
fn a_snapshot_with_a_partial_stamp_list_is_refused() {
    let host = Host::new();
    let shown = |p: &Path| p.to_string_lossy().to_string();
    let inputs = [
        ("the root", shown(&host.root)),
        ("the cache", shown(host.files.cache.as_ref().unwrap())),
        ("a library", host.library_path()),
        ("a program", shown(&host.files.binaries[0].path)),
        ("a firmware file", shown(&host.files.firmware[0].path)),
    ];
    for (case, dropped) in inputs {
        stamps_refused(
            &host,
            &format!("no stamp of {case}"),
            &dropped,
            |json| {
                let stamps = json["stamps"].as_array_mut().unwrap();
                let before = stamps.len();
                stamps.retain(|s| s["path"] != dropped.as_str());
                assert_eq!(stamps.len(), before - 1, "{case} was stamped");
            },
            incomplete,
        );
    }
}

#[test]
fn a_snapshot_with_an_emptied_stamp_is_refused() {
    // A stamp of the right path whose other fields are gone does not
    // decode; one zeroed decodes and is stale.
    let host = Host::new();
    let lib = host.library_path();
    stamps_refused(
        &host,
        "a stamp of its path alone",
        "missing field",
        |json| {
            for stamp in json["stamps"].as_array_mut().unwrap() {
                if stamp["path"] == lib.as_str() {
                    *stamp = serde_json::json!({ "path": lib });
                }
            }
        },
        |e| matches!(e, Error::SnapshotDecode { .. }),
    );
    host.store();
    host.rewrite(|json| {
        for stamp in json["stamps"].as_array_mut().unwrap() {
            if stamp["path"] == lib.as_str() {
                for field in ["dev", "ino", "mode", "size"] {
                    stamp[field] = 0.into();
                }
            }
        }
    });
    assert!(matches!(host.load(), Err(Error::SnapshotStale { .. })));
}

#[test]
fn a_stamp_is_checked_on_its_path_resolved_inside_the_root() {
    let host = Host::new();
    host.store();
    // The library's directory replaced by a link to the very same
    // files: lstat of the library still matches, but the path no longer
    // resolves inside the root without a link.
    let lib = host.root.join("usr/lib/x86_64-linux-gnu");
    fs::rename(lib.join("nvidia"), host.dir.path().join("moved")).unwrap();
    symlink(host.dir.path().join("moved"), lib.join("nvidia")).unwrap();
    assert!(matches!(host.load(), Err(Error::SnapshotStale { .. })));
}

#[test]
fn a_torn_truncated_or_byte_flipped_snapshot_is_refused() {
    let host = Host::new();
    host.store();
    let data = fs::read(host.file()).unwrap();
    for len in [0, 1, data.len() / 2, data.len() - 18, data.len() - 1] {
        fs::write(host.file(), &data[..len]).unwrap();
        refused(&host, &format!("{len} bytes"), "", |e| {
            matches!(e, Error::SnapshotDecode { .. })
        });
    }
    for at in 0..data.len() {
        let mut flipped = data.clone();
        flipped[at] ^= 0x01;
        fs::write(host.file(), &flipped).unwrap();
        let err = host.load().unwrap_err();
        assert!(err.is_refusal(), "byte {at} flipped: {err}");
    }
    fs::write(host.file(), &data).unwrap();
    assert_eq!(host.load().unwrap(), host.files);
}

#[test]
fn a_link_directory_or_fifo_at_its_name_is_refused_without_being_opened() {
    type Put = fn(&Host);
    let cases: [(&str, Put, &str); 3] = [
        (
            "a link",
            |h| {
                let elsewhere = h.dir.path().join("elsewhere.json");
                fs::rename(h.file(), &elsewhere).unwrap();
                symlink(&elsewhere, h.file()).unwrap();
            },
            "symlink",
        ),
        (
            "a directory",
            |h| {
                fs::remove_file(h.file()).unwrap();
                fs::create_dir(h.file()).unwrap();
            },
            "directory",
        ),
        (
            "a fifo",
            |h| {
                fs::remove_file(h.file()).unwrap();
                nix::unistd::mkfifo(&h.file(), Mode::from_bits_truncate(0o600)).unwrap();
            },
            "fifo",
        ),
    ];
    for (case, put, found) in cases {
        let host = Host::new();
        host.store();
        put(&host);
        // A fifo opened for reading would block here.
        refused(&host, case, found, |e| {
            matches!(e, Error::SnapshotUnsafe { .. })
        });
    }
}

#[test]
fn a_refused_snapshot_is_discarded_by_name_and_replaced() {
    let host = Host::new();
    host.store();
    let elsewhere = host.dir.path().join("elsewhere.json");
    fs::rename(host.file(), &elsewhere).unwrap();
    symlink(&elsewhere, host.file()).unwrap();
    discard(&host.snapshots, &host.key).unwrap();
    // The link went, not what it pointed to.
    assert!(fs::symlink_metadata(host.file()).is_err());
    assert!(elsewhere.exists());
    discard(&host.snapshots, &host.key).unwrap();
    // A fifo at the name is replaced by the next store, never written through.
    nix::unistd::mkfifo(&host.file(), Mode::from_bits_truncate(0o600)).unwrap();
    host.store();
    assert_eq!(host.load().unwrap(), host.files);
}

#[test]
fn only_normal_absolute_paths_are_normal() {
    for (path, normal) in [
        ("/", true),
        ("/usr/lib/libcuda.so.1", true),
        ("usr/lib", false),
        ("", false),
        ("/usr/./lib", false),
        ("/usr/../lib", false),
        ("/usr//lib", false),
        ("/usr/lib/", false),
        ("/..", false),
    ] {
        assert_eq!(is_normal(Path::new(path)), normal, "{path:?}");
    }
}

#[test]
fn a_normal_path_is_under_the_root_as_strip_prefix_says() {
    let inner = |root: &str, path: &str| {
        NormalRoot::new(Path::new(root))
            .inner(Path::new(path))
            .map(|b| String::from_utf8(b.to_vec()).unwrap())
    };
    assert_eq!(inner("/drv", "/drv").as_deref(), Some(""));
    assert_eq!(inner("/drv", "/drv/usr/lib").as_deref(), Some("usr/lib"));
    assert_eq!(
        inner("/drv/./", "/drv/usr").as_deref(),
        Some("usr"),
        "the root is made normal"
    );
    assert_eq!(inner("//drv//x/", "/drv/x/y").as_deref(), Some("y"));
    assert_eq!(
        inner("/drv", "/drvx/usr"),
        None,
        "a sibling sharing its bytes"
    );
    assert_eq!(inner("/drv", "/usr"), None);
    assert_eq!(inner("/", "/usr/lib").as_deref(), Some("usr/lib"));
    assert_eq!(inner("/", "/").as_deref(), Some(""));
    for (root, path) in [
        ("/drv", "/drv/a/b"),
        ("/drv/", "/drv"),
        ("/", "/a"),
        ("/a", "/ab"),
    ] {
        let by_components = Path::new(path)
            .strip_prefix(root)
            .ok()
            .map(|p| p.to_str().unwrap().to_string());
        assert_eq!(inner(root, path), by_components, "{root} {path}");
    }
}

//! The packages a lab host installs (`make deb`, `make rpm`;
//! docs/install.md), built by `packaging/build` from this tree, and
//! installed on this machine for real:
//!
//! - the shipped config sets every documented key to its default, each with
//!   its meaning; `--version` names the commit; a man page per command;
//! - the packaged binary is the static one `make build` ships; the .deb
//!   depends on the glibc its embedded helper needs (the helper's own
//!   symbol versions), the .rpm requires the same, and packaging/check-glibc
//!   holds both to a floor;
//! - both .deb files and both .rpm files hold exactly what
//!   `packaging/files` lists, with its modes; lintian finds no error and no
//!   warning that an override does not explain;
//! - `dpkg -i` of both: the binary static and 0755, so that no
//!   `LD_PRELOAD` and the like an image hands an entry point of it
//!   (prestart, cdi-hook, nvidia-cdi-hook, the runtime wrapper) loads; the units enabled, man pages open, bash completes;
//!   Podman with no `--hooks-dir` starts a GPU container through the
//!   packaged hooks.d file, and Docker's `--gpus all` through the compat
//!   package's `/usr/bin/nvidia-container-runtime-hook`, both on a
//!   simulated host the installed conffile points at;
//! - `dpkg -r` keeps only the modified conffile (and the units' records),
//!   `--purge` leaves the file system as it was;
//! - an upgrade from the previous build keeps a modified conffile.
//!
//! The installed `oci-nvidia-hook doctor` walks the packaged setup: the
//! hooks.d file it finds is the package's. Installing the .rpm needs a
//! RHEL-family system, which this is not.
//!
//! Every install is undone by a drop guard ([`HostGuard`]): the packages
//! purged, the files they would have replaced put back. Needs root, dpkg-dev,
//! rpm, lintian, man, Podman, runc and docker.io (integration/install-deps):
//! `make test`, or `cargo test --features _test_as_root --test packaging`.

// The packages under test and the machine they are installed on: this
// suite's own pieces, beside it.
mod built;
/// The packages' manual pages and completions (the package-docs example's code).
#[path = "../../packaging/docs.rs"]
mod docs;
mod files;
mod host;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::built::{Built, VERSION};
use crate::files::{expected, Expected, Format, CONFFILE, PACKAGES};
use crate::host::{dpkg, status, HostGuard};
use clap::CommandFactory;
use harness::glibc;
use harness::mounts::{assert_mounts_unchanged, host_mounts};
use harness::preload::EvilLibrary;
use harness::project::{documents, hook_binary, repo};
use harness::runtime::bundle::{copy_template, template_rootfs, work_root, write_hook_config};
use harness::runtime::cleanup::{remove_tree_safely, Cleanup};
use harness::runtime::daemons::{DaemonSetup, Daemons};
use harness::runtime::expected::node_specs;
use harness::runtime::injected::{assert_injected, Expected as Injected};
use harness::runtime::oci_config::CONTAINER_SCRIPT;
use harness::runtime::process::run_bounded;
use harness::runtime::run::{serial, Run, RunFiles, RUN_LIMIT};
use harness::runtime::runtimes::{podman_run_args, Runtime};
use harness::simhost::{require_root, Fixture, SimHost};
use oci_nvidia_hook::config::Config;
use oci_nvidia_hook::front::cdi_hook::CdiHook;
use oci_nvidia_hook::front::ctk::Ctk;
use oci_nvidia_hook::front::ours::Cli;

/// The packaged hooks.d file, which Podman reads when given no --hooks-dir.
const HOOKS_D_FILE: &str = "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json";
/// The packaged binary.
const BINARY: &str = "/usr/bin/oci-nvidia-hook";
/// The unprivileged group a set-group-ID file of packaging/files belongs to
/// (nogroup; none is listed since the binary became static).
const SECURE_GID: u32 = 65534;
/// The compat package's link that dockerd must find on its PATH.
const RUNTIME_HOOK_LINK: &str = "/usr/bin/nvidia-container-runtime-hook";
/// The units the main package enables, and the links enabling makes.
const ENABLED_LINKS: [&str; 2] = [
    "/etc/systemd/system/multi-user.target.wants/oci-nvidia-hook-cdi.service",
    "/etc/systemd/system/paths.target.wants/oci-nvidia-hook-cdi.path",
];

fn sim() -> SimHost {
    SimHost::shared(Fixture::real(4))
}

/// Panics naming the Debian package when `tool` is not on PATH.
fn require_tool(tool: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(tool).is_file()));
    assert!(
        found,
        "`{tool}` is not on PATH: install {package} (integration/install-deps, or `make test`)"
    );
}

// ---- the shipped files, without installing ----

/// The config keys docs/configuration.md's table documents, dotted
/// (`driver.root`).
fn documented_keys() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(repo().join("docs/configuration.md")).unwrap();
    let section = doc
        .strip_prefix("# Configuration\n")
        .expect("docs/configuration.md starts with its Configuration heading");
    let section = section.split("\n## ").next().unwrap();
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

/// The conffile names every key docs/configuration.md documents, each
/// commented out at the built-in default (so installing it changes nothing
/// and NVIDIA's file shows through), and each is preceded by a comment that
/// gives its default.
#[test]
fn shipped_config_sets_every_documented_key_to_its_default() {
    let path = repo().join("packaging/config.toml");
    let shipped = std::fs::read_to_string(&path).unwrap();
    let set: toml::Table = shipped.parse().unwrap();
    fn sets_nothing(table: &toml::Table) -> bool {
        table
            .values()
            .all(|v| v.as_table().is_some_and(sets_nothing))
    }
    assert!(sets_nothing(&set), "the shipped config sets a key: {set:?}");
    // Every key line uncommented.
    let text: String = shipped
        .lines()
        .map(|line| match line.strip_prefix('#') {
            Some(rest)
                if rest.starts_with(|c: char| c.is_ascii_lowercase()) && rest.contains(" = ") =>
            {
                rest
            }
            _ => line,
        })
        .map(|line| format!("{line}\n"))
        .collect();
    let parsed = Config::parse(&path, &text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        parsed,
        Config::default(),
        "the shipped config is not the defaults"
    );

    let table: toml::Table = text.parse().unwrap();
    // Every leaf, dotted: `runtime.cdi.spec-dirs` for a key of `[runtime.cdi]`.
    fn leaves(prefix: &str, table: &toml::Table, keys: &mut BTreeSet<String>) {
        for (key, value) in table {
            let name = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            match value.as_table() {
                Some(section) => leaves(&name, section, keys),
                None => {
                    keys.insert(name);
                }
            }
        }
    }
    let mut keys = BTreeSet::new();
    leaves("", &table, &mut keys);
    let documented = documented_keys();
    assert!(
        documented.len() >= 10,
        "docs/configuration.md's key table: {documented:?}"
    );
    assert_eq!(
        keys, documented,
        "the shipped keys against docs/configuration.md's table"
    );

    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with('#') || line.starts_with('[') || line.trim().is_empty() {
            continue;
        }
        let comment: Vec<&str> = lines[..i]
            .iter()
            .rev()
            .take_while(|l| l.starts_with('#'))
            .copied()
            .collect();
        assert!(
            !comment.is_empty() && comment.iter().any(|l| l.contains("Default:")),
            "{line:?} has no comment giving its meaning and default"
        );
    }
}

/// The package ships the README and every document it links to (docs/),
/// under /usr/share/doc/oci-nvidia-hook with the same layout, so the links
/// of the installed copy resolve.
#[test]
fn every_document_is_shipped() {
    let list = std::fs::read_to_string(repo().join("packaging/files")).unwrap();
    let shipped: BTreeSet<(String, String)> = list
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            match cols[..] {
                ["oci-nvidia-hook", "all", _, "file", dest, source] => {
                    Some((dest.to_string(), source.to_string()))
                }
                _ => None,
            }
        })
        .collect();
    let documents = documents();
    assert!(documents.len() > 10, "the documents: {documents:?}");
    for document in documents {
        let document = document.display().to_string();
        let dest = format!("/usr/share/doc/oci-nvidia-hook/{document}");
        assert!(
            shipped.contains(&(dest.clone(), document.clone())),
            "packaging/files does not ship {document} as {dest}"
        );
    }
}

/// `--version` prints Cargo.toml's version and the commit of this checkout.
#[test]
fn version_names_the_commit_it_was_built_from() {
    let out = Command::new(hook_binary())
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    let git = Command::new("git")
        .arg("-C")
        .arg(repo())
        .args(["rev-parse", "--short=12", "HEAD"])
        .output();
    let commit = match git {
        Ok(o) if o.status.success() => String::from_utf8(o.stdout).unwrap().trim().to_string(),
        // Not a checkout (a tarball): build.rs says so.
        _ => "unknown".to_string(),
    };
    assert_eq!(
        line.trim(),
        format!("oci-nvidia-hook {VERSION} (commit {commit})")
    );
}

/// One manual page per command and subcommand, each rendering without a
/// warning from man.
#[test]
fn manual_pages_cover_every_command() {
    require_tool("man", "man-db");
    let dir = tempfile::tempdir().unwrap();
    docs::write_all(dir.path()).unwrap();
    fn names(cmd: &clap::Command, prefix: &str, out: &mut BTreeSet<String>) {
        for sub in cmd.get_subcommands() {
            let name = format!("{prefix}-{}", sub.get_name());
            out.insert(format!("{name}.1"));
            names(sub, &name, out);
        }
    }
    // Ours in the main package; nvidia-ctk's and nvidia-cdi-hook's in the compat package.
    for (subdir, commands) in [
        ("man", vec![(Cli::command(), "oci-nvidia-hook")]),
        (
            "man-compat",
            vec![
                (Ctk::command(), "nvidia-ctk"),
                (CdiHook::command(), "nvidia-cdi-hook"),
            ],
        ),
    ] {
        let mut want = BTreeSet::new();
        for (cmd, top) in commands {
            want.insert(format!("{top}.1"));
            names(&cmd, top, &mut want);
            want.remove(&format!("{top}-help.1"));
        }
        let have: BTreeSet<String> = std::fs::read_dir(dir.path().join(subdir))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(have, want);
        for page in &have {
            assert_man_page_opens(
                &dir.path().join(subdir).join(page),
                page.trim_end_matches(".1"),
            );
        }
    }
}

/// `man -l PAGE` renders it with no warning, and its NAME is `name`.
fn assert_man_page_opens(page: &Path, name: &str) {
    let out = Command::new("man")
        .env("MANWIDTH", "80")
        .args(["--warnings", "-l"])
        .arg(page)
        .output()
        .expect("run man");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "man -l {}: {}",
        page.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let after_name = text.split("NAME").nth(1).unwrap_or_default();
    assert!(
        after_name.trim_start().starts_with(name),
        "{}'s NAME is not {name}:\n{text}",
        page.display()
    );
}

// ---- the built packages' contents ----

/// What `dpkg-deb -c` lists, without directories: path -> (mode, target).
fn deb_contents(deb: &Path) -> BTreeMap<String, Expected> {
    let out = Command::new("dpkg-deb")
        .arg("-c")
        .arg(deb)
        .output()
        .unwrap();
    assert!(out.status.success(), "dpkg-deb -c {}", deb.display());
    let mut files = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (perms, owner, path) = (cols[0], cols[1], cols[5]);
        let (user, group) = owner.split_once('/').unwrap();
        assert_eq!(user, "root", "{line}");
        if perms.starts_with('d') {
            assert_eq!(group, "root", "{line}");
            continue;
        }
        let link = (cols.get(6) == Some(&"->")).then(|| cols[7].to_string());
        files.insert(
            path.trim_start_matches('.').to_string(),
            Expected {
                mode: mode_of(perms),
                group: group.to_string(),
                link,
                conffile: false,
            },
        );
    }
    files
}

/// `-rwxr-xr-x` as 0o755, `-rwxr-sr-x` as 0o2755 (`S`: set-group-ID
/// without group execute).
fn mode_of(perms: &str) -> u32 {
    let bits = perms[1..]
        .chars()
        .fold(0, |mode, c| (mode << 1) | u32::from(c != '-' && c != 'S'));
    let setgid = matches!(perms.chars().nth(6), Some('s' | 'S'));
    bits | if setgid { 0o2000 } else { 0 }
}

/// Each .deb holds exactly the files packaging/files lists for it, with
/// their modes and link targets, owned by root (a set-group-ID file, if
/// one were listed, by nogroup); the conffile is declared.
#[test]
#[cfg_attr(
    not(feature = "_test_as_root"),
    ignore = "needs the packaging tools: run `make test`"
)]
fn debs_hold_exactly_the_listed_files() {
    require_tool("dpkg-shlibdeps", "dpkg-dev");
    let built = built::current();
    for package in PACKAGES {
        let deb = built.deb(package);
        let mut want = expected(package, Format::Deb, &built.docs);
        let conffiles: Vec<String> = want
            .iter_mut()
            .filter(|(_, e)| e.conffile)
            .map(|(p, e)| {
                e.conffile = false;
                p.clone()
            })
            .collect();
        assert_eq!(deb_contents(&deb), want, "{}", deb.display());
        let out = Command::new("dpkg-deb")
            .args(["-I"])
            .arg(&deb)
            .arg("conffiles")
            .output()
            .unwrap();
        let declared: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(declared, conffiles, "{package}'s conffiles");
    }
    // The hooks.d file points at the packages' binary and sets its env.
    let hooks = built.dir.join("hooks-extract");
    let _ = std::fs::remove_dir_all(&hooks);
    let status = Command::new("dpkg-deb")
        .arg("-x")
        .arg(built.deb("oci-nvidia-hook"))
        .arg(&hooks)
        .status()
        .unwrap();
    assert!(status.success());
    let file: serde_json::Value = serde_json::from_slice(
        &std::fs::read(hooks.join(HOOKS_D_FILE.trim_start_matches('/'))).unwrap(),
    )
    .unwrap();
    assert_eq!(file["hook"]["path"], "/usr/bin/oci-nvidia-hook");
    assert_eq!(
        file["hook"]["args"],
        serde_json::json!(["oci-nvidia-hook", "prestart"])
    );
    assert!(file["hook"]["env"]
        .as_array()
        .is_some_and(|e| !e.is_empty()));
}

/// The .deb's `Depends` is libc6 at the embedded helper's own highest
/// `GLIBC_` version (goblin's reading of it), not dpkg-shlibdeps' own, and
/// the .rpm's `Requires` the same; `packaging/check-glibc` passes both
/// packages at that version and fails them, naming what they declare, at
/// the one below it.
#[test]
#[cfg_attr(
    not(feature = "_test_as_root"),
    ignore = "needs the packaging tools: run `make test`"
)]
fn packages_need_the_glibc_their_binary_needs() {
    require_tool("dpkg-shlibdeps", "dpkg-dev");
    require_tool("rpm", "rpm");
    let built = built::current();
    let probe = built::shipped_probe();
    assert!(
        glibc::needed(&built::shipped_binary()).is_empty(),
        "the shipped binary is static"
    );
    let needed = glibc::needed(&probe);
    let highest = needed.last().expect("the helper needs a GLIBC_ version");
    let (deb, rpm) = (built.deb("oci-nvidia-hook"), built.rpm("oci-nvidia-hook"));
    let stdout = |cmd: &mut Command| {
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{cmd:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let depends = stdout(Command::new("dpkg-deb").arg("-f").arg(&deb).arg("Depends"));
    assert_eq!(depends.trim(), format!("libc6 (>= {highest})"));
    let requires = stdout(Command::new("rpm").args(["-qp", "--requires"]).arg(&rpm));
    let rpm_highest = requires
        .lines()
        .filter_map(|l| l.split_once("(GLIBC_"))
        .filter_map(|(_, v)| v.split_once(')'))
        .map(|(v, _)| glibc::GlibcVersion::parse(v))
        .max();
    assert_eq!(rpm_highest.as_ref(), Some(highest), "{requires}");

    let check = |args: &[&str]| {
        Command::new(repo().join("packaging/check-glibc"))
            .args(args)
            .output()
            .unwrap()
    };
    let highest_text = highest.to_string();
    let (deb_arg, rpm_arg) = (deb.to_str().unwrap(), rpm.to_str().unwrap());
    let out = check(&["--highest", probe.to_str().unwrap()]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), highest_text);
    let out = check(&[&highest_text, deb_arg, rpm_arg]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let below = needed
        .iter()
        .rev()
        .nth(1)
        .map_or("2.0".to_string(), ToString::to_string);
    let out = check(&[&below, deb_arg, rpm_arg]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for named in [
        format!("{deb_arg} depends on glibc {highest}"),
        format!("{rpm_arg} requires glibc {highest}"),
    ] {
        assert!(stderr.contains(&named), "{stderr}");
    }
}

/// Each .rpm lists exactly the files packaging/files lists for RPM, with
/// their modes, root-owned (a set-group-ID file, if one were listed, by nobody); the conffile is `%config(noreplace)`; the
/// compat package requires this version and conflicts with NVIDIA's.
#[test]
#[cfg_attr(
    not(feature = "_test_as_root"),
    ignore = "needs the packaging tools: run `make test`"
)]
fn rpms_list_the_listed_files_with_their_modes() {
    require_tool("rpmbuild", "rpm");
    let built = built::current();
    for package in PACKAGES {
        let rpm = built.rpm(package);
        let out = Command::new("rpm")
            .args(["-qp", "--qf"])
            .arg("[%{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} %{FILEFLAGS:fflags}|%{FILENAMES}|%{FILELINKTOS}\n]")
            .arg(&rpm)
            .output()
            .unwrap();
        assert!(out.status.success(), "rpm -qp {}", rpm.display());
        let mut have = BTreeMap::new();
        let mut dirs = Vec::new();
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let mut parts = line.split('|');
            let (head, path, target) = (
                parts.next().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap(),
            );
            let head: Vec<&str> = head.split_whitespace().collect();
            let (user, group) = head[1].split_once(':').unwrap();
            assert_eq!(user, "root", "{line}");
            if head[0].starts_with('d') {
                assert_eq!(group, "root", "{line}");
                dirs.push(path.to_string());
                continue;
            }
            let flags = head.get(2).copied().unwrap_or("");
            have.insert(
                path.to_string(),
                Expected {
                    mode: mode_of(head[0]),
                    group: group.to_string(),
                    link: (!target.is_empty()).then(|| target.to_string()),
                    conffile: flags.contains('c') && flags.contains('n'),
                },
            );
        }
        assert_eq!(
            have,
            expected(package, Format::Rpm, &built.docs),
            "{}",
            rpm.display()
        );
        if package == "oci-nvidia-hook" {
            assert_eq!(
                dirs,
                [
                    "/etc/oci-nvidia-hook",
                    "/usr/share/doc/oci-nvidia-hook",
                    "/usr/share/doc/oci-nvidia-hook/docs",
                    "/usr/share/doc/oci-nvidia-hook/docs/benchmarks",
                ]
            );
        } else {
            assert!(dirs.is_empty(), "{dirs:?}");
        }
    }
    let query = |what: &str| {
        let out = Command::new("rpm")
            .arg("-qp")
            .arg(what)
            .arg(built.rpm("oci-nvidia-hook-compat"))
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(query("--requires").contains(&format!("oci-nvidia-hook = {VERSION}-1")));
    let conflicts = query("--conflicts");
    for nvidia in ["nvidia-container-toolkit", "libnvidia-container-tools"] {
        assert!(conflicts.lines().any(|l| l == nvidia), "{conflicts}");
    }

    // rpm's own resolver, in a scratch database: the compat package's
    // requirement is met by the hook at this version, and what it provides
    // does not count against what it conflicts with. The hook itself goes
    // in without its libc requirements, which a scratch database lacks.
    let root = tempfile::tempdir().unwrap();
    let rpm = |args: &[&str], package: &str| {
        let out = Command::new("rpm")
            .arg("--root")
            .arg(root.path())
            .args(args)
            .arg(built.rpm(package))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "rpm {args:?} {package}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let init = Command::new("rpm")
        .arg("--root")
        .arg(root.path())
        .arg("--initdb")
        .status()
        .unwrap();
    assert!(init.success());
    rpm(&["-i", "--justdb", "--nodeps"], "oci-nvidia-hook");
    rpm(&["-i", "--justdb"], "oci-nvidia-hook-compat");
}

/// lintian reports no error and no warning that an override does not
/// cover, and every override says why.
#[test]
#[cfg_attr(
    not(feature = "_test_as_root"),
    ignore = "needs the packaging tools: run `make test`"
)]
fn lintian_finds_nothing_unexplained() {
    require_tool("lintian", "lintian");
    let built = built::current();
    let out = Command::new("lintian")
        .args(["--fail-on", "error,warning", "--pedantic"])
        .args(built.debs())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let complaints: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("E:") || l.starts_with("W:"))
        .collect();
    assert!(
        out.status.success() && complaints.is_empty(),
        "lintian: {}\n{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for package in ["oci-nvidia-hook", "oci-nvidia-hook-compat"] {
        let overrides = std::fs::read_to_string(
            repo().join(format!("packaging/debian/{package}.lintian-overrides")),
        )
        .unwrap();
        let lines: Vec<&str> = overrides.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.starts_with("oci-nvidia-hook") {
                assert!(
                    i > 0 && lines[i - 1].starts_with('#'),
                    "the override {line:?} has no comment saying why"
                );
            }
        }
    }
}

// ---- installed on this machine ----

/// Every path the .debs install, for [`HostGuard::take`] to move aside.
fn installed_paths(built: &Built) -> Vec<String> {
    let mut paths: Vec<String> = PACKAGES
        .iter()
        .flat_map(|p| expected(p, Format::Deb, &built.docs).into_keys())
        .collect();
    paths.push("/etc/oci-nvidia-hook".to_string());
    paths.extend(ENABLED_LINKS.iter().map(|l| l.to_string()));
    paths
}

/// Where a test keeps what it moved aside.
fn backup_dir(test: &str) -> PathBuf {
    built::work_dir().join("moved-aside").join(test)
}

/// Both packages installed with `dpkg -i`, and what that must give: both
/// known to dpkg at the built version, every listed file in place with its
/// mode and group (the static binary 0755 root:root: no set-ID bit, which
/// a static binary needs none of), the units enabled (deb-systemd-helper
/// works without systemd running).
fn install(built: &Built) {
    dpkg(&["-i"], &built.debs());
    for package in PACKAGES {
        assert_eq!(status(package), Some(format!("ii {}", built.version)));
        for (path, want) in expected(package, Format::Deb, &built.docs) {
            let meta = std::fs::symlink_metadata(&path)
                .unwrap_or_else(|e| panic!("{path} is not installed: {e}"));
            assert_eq!(meta.file_type().is_symlink(), want.link.is_some(), "{path}");
            if want.link.is_none() {
                assert_eq!(meta.mode() & 0o7777, want.mode, "{path}'s mode");
                let gid = if want.group == "root" { 0 } else { SECURE_GID };
                assert_eq!((meta.uid(), meta.gid()), (0, gid), "{path}'s owner");
            }
        }
    }
    let binary = std::fs::metadata(BINARY).unwrap();
    assert_eq!(
        (binary.mode() & 0o7777, binary.gid()),
        (0o755, 0),
        "{BINARY} is not 0755 root:root"
    );
    assert!(
        glibc::needed(Path::new(BINARY)).is_empty(),
        "{BINARY} is not the static binary"
    );
    for link in ENABLED_LINKS {
        assert!(
            std::fs::read_link(link).is_ok(),
            "{link} is missing: the unit was not enabled"
        );
    }
}

/// The installed bash completion loads and completes subcommands and flags.
fn assert_bash_completes() {
    let script = r#"
        source /usr/share/bash-completion/completions/oci-nvidia-hook || exit 1
        spec=$(complete -p oci-nvidia-hook) || exit 1
        fn=${spec##*-F }; fn=${fn%% *}
        complete_line() {
            COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
            COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
            "$fn" oci-nvidia-hook "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
            echo "${COMPREPLY[*]}"
        }
        complete_line oci-nvidia-hook cd
        complete_line oci-nvidia-hook list --cap
    "#;
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", script])
        .output()
        .expect("run bash");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        out.status.success() && lines.len() == 2,
        "bash completion: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["cdi", "cdi-hook"]
    );
    assert_eq!(lines[1].trim(), "--capabilities");
}

/// Podman run with no `--hooks-dir` (so from the packaged hooks.d file)
/// on a container that asks for every GPU.
fn podman_with_packaged_hook(host: &SimHost, log: &Path) -> Run {
    Runtime::Podman.require_tools();
    let dir = work_root().join("bundles").join("packaged-podman");
    remove_tree_safely(&dir);
    std::fs::create_dir_all(dir.join("out")).unwrap();
    let rootfs = dir.join("rootfs");
    copy_template(host, &rootfs);
    let id = format!("onh-packaged-{}", std::process::id());
    let mut argv: Vec<String> = [
        "podman",
        "--runtime",
        "runc",
        "--cgroup-manager=cgroupfs",
        "--events-backend=file",
    ]
    .map(String::from)
    .to_vec();
    argv.extend(podman_run_args(
        &id,
        &dir.join("out"),
        &[("NVIDIA_VISIBLE_DEVICES", "all")],
        &[],
        &rootfs,
        &["/bin/sh", "-c", CONTAINER_SCRIPT],
    ));
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    let guard = Cleanup {
        runtime: Runtime::Podman,
        id,
        state_root: dir.join("state"),
        hooks_dir: dir.join("unused-hooks-dir"),
    };
    let _ = std::fs::remove_file(log);
    let started = Instant::now();
    let finished = run_bounded(cmd, RUN_LIMIT);
    let elapsed = started.elapsed();
    drop(guard);
    Run::collect(
        Runtime::Podman,
        "packaged-podman",
        finished,
        elapsed,
        RunFiles {
            bundle: &dir,
            rootfs: &rootfs,
            hook_log: log,
        },
    )
}

/// dockerd started with only the system directories on its PATH, so that
/// `--gpus` reaches the compat package's link; one `--gpus all` container.
fn docker_with_packaged_link(host: &SimHost, log: &Path) -> Run {
    let dir = work_root().join("docker").join("packaged");
    let daemons = Daemons::start(
        &dir,
        &DaemonSetup {
            hook_config: Path::new(CONFFILE),
            links: &[],
            runtimes: &[],
            default_runtime: None,
            docker_config: None,
            cdi_dir: None,
            etc_files: &[],
            root: None,
            cri: None,
        },
    );
    // The name dockerd finds is the package's link, not one of ours.
    let found = daemons
        .path_env()
        .split(':')
        .map(|d| Path::new(d).join("nvidia-container-runtime-hook"))
        .find(|p| p.exists());
    assert_eq!(found.as_deref(), Some(Path::new(RUNTIME_HOOK_LINK)));

    let image = "onh-packaged:test";
    daemons.import_rootfs(&template_rootfs(host), image);

    let run = daemons.checker_run("packaged-docker", &["--gpus", "all"], image, &[], log);
    drop(daemons);
    run
}

/// Every GPU of the host injected, through the real 535 libraries.
fn assert_all_gpus(run: &Run, host: &SimHost) {
    let minors: Vec<u32> = host.facts.gpus.iter().map(|g| g.minor).collect();
    assert_injected(
        run,
        host,
        &Injected {
            nodes: &node_specs(host, &minors),
            real_libraries: true,
        },
    );
}

/// Installs both packages, uses them as a lab host would (man, bash
/// completion, Podman from the packaged hooks.d file, Docker's `--gpus`
/// through the compat link, each reading the installed conffile pointed at
/// a simulated host), then removes and purges them: `-r` keeps only the
/// modified conffile and the units' records, `--purge` leaves the file
/// system listing exactly as before.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn debs_install_serve_podman_and_docker_and_purge_without_a_trace() {
    let _serial = serial();
    require_tool("dpkg-shlibdeps", "dpkg-dev");
    require_tool("man", "man-db");
    let built = built::current();
    let host = sim();
    template_rootfs(&host);
    let mounts_before = host_mounts();
    let guard = HostGuard::take(&installed_paths(built), &backup_dir("install"));

    install(built);
    let version = Command::new(BINARY).arg("--version").output().unwrap();
    assert!(
        String::from_utf8_lossy(&version.stdout)
            .starts_with(&format!("oci-nvidia-hook {VERSION} (commit ")),
        "{version:?}"
    );
    let pages: Vec<PathBuf> = expected("oci-nvidia-hook", Format::Deb, &built.docs)
        .into_keys()
        .chain(expected("oci-nvidia-hook-compat", Format::Deb, &built.docs).into_keys())
        .filter(|p| p.starts_with("/usr/share/man/"))
        .map(PathBuf::from)
        .collect();
    assert!(pages.len() > 10, "{pages:?}");
    for page in &pages {
        let name = page
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_end_matches(".1.gz");
        // NVIDIA's names open the command's own page.
        let shown = if name.starts_with("nvidia-container") {
            "oci-nvidia-hook"
        } else {
            name
        };
        assert_man_page_opens(page, shown);
    }
    assert_bash_completes();

    // The installed conffile, pointed at the simulated host: the hook
    // Podman and dockerd run read it (dockerd's namespace carries a copy
    // in its /etc overlay, see Daemons).
    let log = built::work_dir().join("packaged-hook.log");
    write_hook_config(&host, Path::new(CONFFILE), &log, "debug");
    let modified = std::fs::read_to_string(CONFFILE).unwrap();

    // doctor, as installed, finds the packaged hooks.d file and its binary.
    let doctor = Command::new(BINARY)
        .env_clear()
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&doctor.stdout)
        .unwrap_or_else(|e| panic!("doctor --json: {e}: {doctor:?}"));
    let hooks = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["found"].as_str().is_some_and(|f| {
                f.contains("/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json")
            })
        })
        .unwrap_or_else(|| panic!("doctor does not see the packaged hooks.d file: {report:#}"));
    assert_eq!(hooks["status"], "ok", "{hooks:#}");

    // No library of the image loads into an entry point of the packaged
    // binary: the hook's stages through runc, nvidia-cdi-hook and the
    // runtime wrapper through the compat links.
    let evil = EvilLibrary::build("packaged-preload");
    evil.assert_control_loads();
    evil.assert_no_entry_point_loads(Path::new(BINARY), &[Runtime::RuncV1], "packaged");
    evil.remove();

    let run = podman_with_packaged_hook(&host, &log);
    assert_all_gpus(&run, &host);
    let run = docker_with_packaged_link(&host, &log);
    assert_all_gpus(&run, &host);
    assert_mounts_unchanged(&mounts_before, "after the containers");

    // dpkg -r: only the conffile stays (and dpkg's and the units' records,
    // which --purge clears).
    dpkg(&["-r", "oci-nvidia-hook-compat", "oci-nvidia-hook"], &[]);
    assert_eq!(status("oci-nvidia-hook"), Some(format!("rc {VERSION}")));
    assert_eq!(status("oci-nvidia-hook-compat"), None);
    for package in PACKAGES {
        for path in expected(package, Format::Deb, &built.docs).into_keys() {
            let kept = std::fs::symlink_metadata(&path).is_ok();
            assert_eq!(kept, path == CONFFILE, "{path} after dpkg -r");
        }
    }
    assert_eq!(
        std::fs::read_to_string(CONFFILE).unwrap(),
        modified,
        "the modified conffile after dpkg -r"
    );

    dpkg(&["--purge", "oci-nvidia-hook"], &[]);
    assert_eq!(status("oci-nvidia-hook"), None);
    assert!(!Path::new(CONFFILE).exists(), "the conffile after --purge");
    guard.finish();
}

/// Installing this build over the previous one (a lower version) keeps the
/// administrator's edit of the conffile without asking, and the units
/// stay enabled.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn upgrade_from_the_previous_build_keeps_a_modified_conffile() {
    let _serial = serial();
    require_root();
    require_tool("dpkg-shlibdeps", "dpkg-dev");
    let previous = built::previous();
    let current = built::current();
    let guard = HostGuard::take(&installed_paths(current), &backup_dir("upgrade"));

    install(previous);
    let shipped = std::fs::read_to_string(CONFFILE).unwrap();
    let edited = shipped.replace("level = \"info\"", "level = \"debug\"");
    assert_ne!(edited, shipped);
    std::fs::write(CONFFILE, &edited).unwrap();

    install(current);
    assert_eq!(
        std::fs::read_to_string(CONFFILE).unwrap(),
        edited,
        "the upgrade replaced the modified conffile"
    );
    assert!(!Path::new(&format!("{CONFFILE}.dpkg-new")).exists());
    assert!(!Path::new(&format!("{CONFFILE}.dpkg-dist")).exists());

    dpkg(
        &["--purge", "oci-nvidia-hook-compat", "oci-nvidia-hook"],
        &[],
    );
    guard.finish();
}

//! A spec against this host: each device node it names is there, of its
//! type and with its numbers; each file it bind-mounts and each hook
//! program exists; a spec of ours was made for the running driver. Only
//! `lstat`s and `stat`s what the spec names: never opens, writes or runs it.

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::rules::is_bind;
use super::{edits_of, list, Problem};
use crate::specs::cdi_hook_args::{SpecMade, HOOK_COMMAND};

/// What the host checks read besides the files the spec names.
pub struct Host<'a> {
    /// The tree whose `dev/` holds the nodes, for a node without `hostPath`.
    pub dev_root: &'a Path,
    /// The running driver's version, asked only of a spec of ours; the
    /// error in words when it cannot be known.
    pub driver_version: &'a mut dyn FnMut() -> Result<String, String>,
    /// The IMEX major and the GPUs' DRM nodes, asked only of a spec of
    /// NVIDIA's kinds; the error in words when they cannot be known.
    pub devices: &'a mut dyn FnMut() -> Result<super::HostDevices, String>,
}

/// Checks every edits object of `doc` against `host`.
pub(super) fn check(doc: &Value, host: &mut Host<'_>, problems: &mut Vec<Problem>) {
    let mut running: Option<Result<String, String>> = None;
    // A host without the driver is one problem, however many hooks ask.
    let mut told_no_driver = false;
    for (at, edits) in edits_of(doc) {
        for (node_at, node) in list(edits, &at, "deviceNodes") {
            check_node(node, &node_at, host.dev_root, problems);
        }
        for (mount_at, mount) in list(edits, &at, "mounts") {
            let source = mount.get("hostPath").and_then(Value::as_str);
            if let Some(source) = source.filter(|s| s.starts_with('/') && is_bind(mount)) {
                if let Err(why) = exists(Path::new(source)) {
                    problems.push(Problem::new(&mount_at, why));
                }
            }
        }
        for (hook_at, hook) in list(edits, &at, "hooks") {
            let program = hook.get("path").and_then(Value::as_str);
            if let Some(program) = program.filter(|p| p.starts_with('/')) {
                if let Some(why) = program_problem(Path::new(program)) {
                    problems.push(Problem::new(&hook_at, why));
                }
            }
            match recorded_driver(hook) {
                None => {}
                Some(None) => problems.push(Problem::new(
                    &hook_at,
                    format!("a {HOOK_COMMAND} hook that records no --driver-version: run oci-nvidia-hook cdi generate"),
                )),
                Some(Some(made)) => match running.get_or_insert_with(&mut *host.driver_version) {
                    Ok(runs) if made != runs => problems.push(Problem::new(
                        &hook_at,
                        format!("stale: made for driver {made}, the host runs {runs}: run oci-nvidia-hook cdi generate"),
                    )),
                    Ok(_) => {}
                    Err(_) if told_no_driver => {}
                    Err(why) => {
                        told_no_driver = true;
                        problems.push(Problem::new(
                            &hook_at,
                            format!("{} the spec was made for: {why}", super::kinds::NO_DRIVER),
                        ));
                    }
                },
            }
        }
    }
}

/// For a hook of ours (`args[1]` is `cdi-hook`): the driver version it
/// records, `Some(None)` when it records none. `None` for any other hook.
fn recorded_driver(hook: &Value) -> Option<Option<&str>> {
    let args: Vec<&str> = hook
        .get("args")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    SpecMade::recorded_driver(&args)
}

/// One device node: its host node (`hostPath`, else `path` under the dev
/// root) is a device of the spec's type and numbers. A link is refused as
/// runc refuses one: the runtime reads the node itself, not its target.
fn check_node(node: &Value, at: &str, dev_root: &Path, problems: &mut Vec<Problem>) {
    let get = |key| node.get(key).and_then(Value::as_str);
    let host: PathBuf = match (get("hostPath"), get("path")) {
        (Some(host), _) if host.starts_with('/') => PathBuf::from(host),
        (None, Some(path)) if path.starts_with('/') => dev_root.join(&path[1..]),
        // Relative or empty: reported by the rules already.
        _ => return,
    };
    let meta = match fs::symlink_metadata(&host) {
        Ok(meta) => meta,
        Err(e) => {
            problems.push(Problem::new(at, missing(&host, &e)));
            return;
        }
    };
    let kind = meta.file_type();
    let actual = if kind.is_char_device() {
        'c'
    } else if kind.is_block_device() {
        'b'
    } else if kind.is_fifo() {
        'p'
    } else {
        problems.push(Problem::new(
            at,
            format!(
                "{} is {} on this host, not a device node",
                host.display(),
                file_kind(&meta)
            ),
        ));
        return;
    };
    // `u` (unbuffered) is a character device; an unknown type is the
    // rules' to report, and none lets the runtime take the host's.
    let wanted = match get("type") {
        Some("c" | "u") => Some('c'),
        Some("b") => Some('b'),
        Some("p") => Some('p'),
        _ => None,
    };
    let rdev = meta.rdev();
    let numbers = (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev));
    let is = if actual == 'p' {
        format!("{} is p", host.display())
    } else {
        format!("{} is {actual} {}:{}", host.display(), numbers.0, numbers.1)
    };
    if let Some(wanted) = wanted.filter(|w| *w != actual) {
        problems.push(Problem::new(
            at,
            format!("{is} on this host, the spec says type {wanted}"),
        ));
        return;
    }
    if actual == 'p' {
        return;
    }
    let number = |key| node.get(key).and_then(Value::as_i64);
    let (major, minor) = (number("major"), number("minor"));
    let differs = |n: Option<i64>, actual: u64| n.is_some_and(|n| u64::try_from(n) != Ok(actual));
    if differs(major, numbers.0) || differs(minor, numbers.1) {
        let show = |n: Option<i64>| n.map_or("?".to_string(), |n| n.to_string());
        problems.push(Problem::new(
            at,
            format!(
                "{is} on this host, the spec says {}:{}",
                show(major),
                show(minor)
            ),
        ));
    }
}

/// Whether `path` exists (through links: a bind mount follows them).
fn exists(path: &Path) -> Result<(), String> {
    fs::metadata(path).map(drop).map_err(|e| missing(path, &e))
}

/// Why a hook's program cannot run, if it cannot: absent, not a file, or
/// executable by nobody.
fn program_problem(program: &Path) -> Option<String> {
    match fs::metadata(program) {
        Err(e) => Some(format!("hook program {}", missing(program, &e))),
        Ok(meta) if !meta.is_file() => Some(format!(
            "hook program {} is {}, not a file",
            program.display(),
            file_kind(&meta)
        )),
        Ok(meta) if meta.permissions().mode() & 0o111 == 0 => Some(format!(
            "hook program {} is not executable",
            program.display()
        )),
        Ok(_) => None,
    }
}

/// A failed `stat` in words.
fn missing(path: &Path, e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::NotFound {
        format!("{} does not exist on this host", path.display())
    } else {
        format!("cannot inspect {}: {e}", path.display())
    }
}

/// What a file that is no device node is, for messages.
fn file_kind(meta: &fs::Metadata) -> &'static str {
    let kind = meta.file_type();
    if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_file() {
        "a regular file"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Runs the host checks on `doc` with `dev_root` and a driver that runs `running`.
    fn problems(doc: &Value, dev_root: &Path, running: Result<&str, &str>) -> Vec<String> {
        let mut asked = 0;
        let mut driver = || {
            asked += 1;
            running.map(str::to_string).map_err(str::to_string)
        };
        let mut found = Vec::new();
        check(
            doc,
            &mut Host {
                dev_root,
                driver_version: &mut driver,
                devices: &mut || Ok(crate::specs::cdi::validate::HostDevices::default()),
            },
            &mut found,
        );
        assert!(asked <= 1, "the driver is asked once at most");
        found.iter().map(ToString::to_string).collect()
    }

    fn spec(edits: Value) -> Value {
        json!({"cdiVersion": "0.5.0", "kind": "a/b", "devices": [], "containerEdits": edits})
    }

    /// `/dev/null` is c 1:3 on every Linux host.
    fn null_node(extra: Value) -> Value {
        let mut node = json!({"path": "/dev/null", "type": "c"});
        node.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        node
    }

    #[test]
    fn a_node_with_the_hosts_numbers_passes_and_a_wrong_one_is_named() {
        let doc = spec(json!({"deviceNodes": [
            null_node(json!({"major": 1, "minor": 3})),
            null_node(json!({"major": 1, "minor": 7})),
            null_node(json!({})),
            null_node(json!({"type": "b"})),
        ]}));
        assert_eq!(
            problems(&doc, Path::new("/"), Ok("1")),
            [
                "containerEdits.deviceNodes[1]: /dev/null is c 1:3 on this host, the spec says 1:7",
                "containerEdits.deviceNodes[3]: /dev/null is c 1:3 on this host, the spec says type b",
            ]
        );
    }

    #[test]
    fn a_node_without_host_path_is_looked_for_under_the_dev_root() {
        let root = tempfile::tempdir().unwrap();
        fs::create_dir(root.path().join("dev")).unwrap();
        fs::write(root.path().join("dev/nvidia0"), "").unwrap();
        let doc = spec(json!({"deviceNodes": [
            {"path": "/dev/nvidia0", "major": 195, "minor": 0},
            {"path": "/dev/nvidia1"},
            {"path": "/dev/nvidia2", "hostPath": "/dev/null"},
        ]}));
        let dev = root.path().join("dev").display().to_string();
        assert_eq!(
            problems(&doc, root.path(), Ok("1")),
            [
                format!("containerEdits.deviceNodes[0]: {dev}/nvidia0 is a regular file on this host, not a device node"),
                format!("containerEdits.deviceNodes[1]: {dev}/nvidia1 does not exist on this host"),
            ]
        );
    }

    #[test]
    fn a_linked_node_is_refused_as_runc_refuses_it() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("null");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        let doc = spec(json!({"deviceNodes": [{"path": "/dev/x", "hostPath": link}]}));
        assert_eq!(
            problems(&doc, Path::new("/"), Ok("1")),
            [format!(
                "containerEdits.deviceNodes[0]: {} is a symbolic link on this host, not a device node",
                link.display()
            )]
        );
    }

    #[test]
    fn bind_sources_and_hook_programs_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libcuda.so.1");
        fs::write(&lib, "").unwrap();
        let gone = dir.path().join("gone.so");
        let doc = spec(json!({
            "mounts": [
                {"hostPath": lib, "containerPath": "/lib/libcuda.so.1"},
                {"hostPath": gone, "containerPath": "/lib/gone.so", "options": ["ro", "bind"]},
                {"hostPath": "tmpfs", "containerPath": "/tmp", "type": "tmpfs"},
            ],
            "hooks": [
                {"hookName": "createRuntime", "path": "/bin/sh"},
                {"hookName": "createRuntime", "path": lib},
                {"hookName": "createRuntime", "path": dir.path()},
            ]
        }));
        let lib = lib.display();
        assert_eq!(
            problems(&doc, Path::new("/"), Ok("1")),
            [
                format!(
                    "containerEdits.mounts[1]: {} does not exist on this host",
                    gone.display()
                ),
                format!("containerEdits.hooks[1]: hook program {lib} is not executable"),
                format!(
                    "containerEdits.hooks[2]: hook program {} is a directory, not a file",
                    dir.path().display()
                ),
            ]
        );
    }

    fn our_hook(version: Option<&str>) -> Value {
        let mut args = vec!["oci-nvidia-hook", "cdi-hook", "createRuntime"];
        if let Some(v) = version {
            args.extend(["--driver-version", v]);
        }
        json!({"hookName": "createRuntime", "path": "/bin/sh", "args": args})
    }

    #[test]
    fn a_spec_of_ours_made_for_another_driver_is_stale() {
        let fresh = spec(json!({"hooks": [our_hook(Some("535.261.03"))]}));
        assert_eq!(
            problems(&fresh, Path::new("/"), Ok("535.261.03")),
            Vec::<String>::new()
        );
        assert_eq!(
            problems(&fresh, Path::new("/"), Ok("550.54.15")),
            ["containerEdits.hooks[0]: stale: made for driver 535.261.03, the host runs 550.54.15: run oci-nvidia-hook cdi generate"]
        );
        let unrecorded = spec(json!({"hooks": [our_hook(None)]}));
        assert_eq!(
            problems(&unrecorded, Path::new("/"), Ok("535.261.03")),
            ["containerEdits.hooks[0]: a cdi-hook hook that records no --driver-version: run oci-nvidia-hook cdi generate"]
        );
    }

    #[test]
    fn no_driver_is_one_problem_and_another_vendors_hook_never_asks() {
        let ours =
            spec(json!({"hooks": [our_hook(Some("535.261.03")), our_hook(Some("535.261.03"))]}));
        let found = problems(
            &ours,
            Path::new("/"),
            Err("NVIDIA kernel module not loaded"),
        );
        assert_eq!(
            found,
            ["containerEdits.hooks[0]: cannot check the driver the spec was made for: NVIDIA kernel module not loaded"]
        );
        let theirs = spec(
            json!({"hooks": [{"hookName": "prestart", "path": "/bin/sh", "args": ["x", "y"]}]}),
        );
        let mut asked = false;
        let mut driver = || {
            asked = true;
            Err("unreachable".to_string())
        };
        let mut found = Vec::new();
        check(
            &theirs,
            &mut Host {
                dev_root: Path::new("/"),
                driver_version: &mut driver,
                devices: &mut || Ok(crate::specs::cdi::validate::HostDevices::default()),
            },
            &mut found,
        );
        assert!(found.is_empty(), "{found:?}");
        assert!(!asked, "the driver is asked only about a spec of ours");
    }
}

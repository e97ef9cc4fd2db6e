//! Just enough of runc's (and crun's) command line: skip the global flags,
//! find the command, and for `create` and `run` the bundle. Everything is
//! passed on unchanged; a flag we do not know is taken for a boolean, so a
//! newer runtime's flags cannot make us misread the command.

use std::ffi::OsString;
use std::path::PathBuf;

/// Global flags that take a value (runc 1.1 and crun), when not given as `--flag=value`.
const VALUED_GLOBALS: [&str; 6] = [
    "log",
    "log-format",
    "root",
    "criu",
    "rootless",
    "cgroup-manager",
];

/// The commands that create a container from a bundle.
const CREATING: [&str; 2] = ["create", "run"];

/// A flag's name without its dashes and `=value`, if `arg` is a flag.
fn flag_name(arg: &str) -> Option<(&str, bool)> {
    let name = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-'))?;
    if name.is_empty() {
        return None;
    }
    Some(match name.split_once('=') {
        Some((name, _)) => (name, true),
        None => (name, false),
    })
}

/// The command and the arguments after it, global flags skipped. A
/// non-UTF-8 argument is neither a flag nor a command we act on.
pub fn command(args: &[OsString]) -> Option<(&str, &[OsString])> {
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].to_str()?;
        match flag_name(arg) {
            Some((name, inline)) => {
                i += if !inline && VALUED_GLOBALS.contains(&name) {
                    2
                } else {
                    1
                };
            }
            None => return Some((arg, &args[i + 1..])),
        }
    }
    None
}

/// Where the caller asked the runtime to log (`--log PATH`), and whether
/// as JSON (`--log-format json`): containerd's shim reads the runtime's
/// error from there, not from stderr.
pub fn log_file(args: &[OsString]) -> Option<(PathBuf, bool)> {
    let mut log = None;
    let mut json = false;
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].to_str()?;
        let Some((name, inline)) = flag_name(arg) else {
            break;
        };
        let value = if inline {
            arg.split_once('=').map(|(_, v)| OsString::from(v))
        } else if VALUED_GLOBALS.contains(&name) {
            i += 1;
            args.get(i).cloned()
        } else {
            None
        };
        match (name, value) {
            ("log", Some(path)) => log = Some(PathBuf::from(path)),
            ("log-format", Some(format)) => json = format == "json",
            _ => {}
        }
        i += 1;
    }
    log.map(|path| (path, json))
}

/// The bundle of a `create` or `run`: `--bundle`/`-b` (Go flags: one or
/// two dashes, `=value` or the next argument), else the working directory
/// as runc takes it. `None` for every other command.
pub fn bundle_of(args: &[OsString]) -> Option<PathBuf> {
    let (command, rest) = command(args)?;
    if !CREATING.contains(&command) {
        return None;
    }
    let mut rest = rest.iter();
    while let Some(arg) = rest.next() {
        let Some(arg) = arg.to_str() else { continue };
        if arg == "--" {
            break;
        }
        match flag_name(arg) {
            Some(("bundle" | "b", true)) => {
                return arg.split_once('=').map(|(_, v)| PathBuf::from(v));
            }
            Some(("bundle" | "b", false)) => return rest.next().map(PathBuf::from),
            _ => {}
        }
    }
    Some(PathBuf::from("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn finds_the_bundle_of_create_and_run_as_containerd_and_podman_pass_them() {
        for (args, bundle) in [
            (
                &[
                    "--root",
                    "/run/containerd/runc/moby",
                    "--log",
                    "/b/log.json",
                    "--log-format",
                    "json",
                    "create",
                    "--bundle",
                    "/b",
                    "--pid-file",
                    "/b/init.pid",
                    "id",
                ][..],
                "/b",
            ),
            (&["--systemd-cgroup", "run", "-b", "/x", "id"], "/x"),
            (&["--root=/r", "create", "--bundle=/y", "id"], "/y"),
            (&["create", "-bundle", "/z", "id"], "/z"),
            (&["--debug", "run", "id"], "."),
        ] {
            assert_eq!(
                bundle_of(&strings(args)),
                Some(PathBuf::from(bundle)),
                "{args:?}"
            );
        }
    }

    #[test]
    fn other_commands_have_no_bundle_to_edit() {
        for args in [
            &["--root", "/r", "start", "id"][..],
            &["state", "id"],
            &["delete", "--force", "id"],
            &["exec", "--process", "/p.json", "id"],
            &["features"],
            &["--version"],
            &[],
        ] {
            assert_eq!(bundle_of(&strings(args)), None, "{args:?}");
        }
    }

    #[test]
    fn finds_the_runtime_log_containerd_reads_errors_from() {
        assert_eq!(
            log_file(&strings(&[
                "--root",
                "/r",
                "--log",
                "/b/log.json",
                "--log-format",
                "json",
                "create",
                "--log",
                "x"
            ])),
            Some((PathBuf::from("/b/log.json"), true))
        );
        assert_eq!(
            log_file(&strings(&["--log=/b/log", "create"])),
            Some((PathBuf::from("/b/log"), false))
        );
        assert_eq!(log_file(&strings(&["create", "--log", "/x"])), None);
    }

    #[test]
    fn a_value_that_looks_like_a_command_is_skipped_with_its_flag() {
        assert_eq!(
            command(&strings(&["--root", "create", "state", "id"])),
            Some(("state", &strings(&["id"])[..]))
        );
    }
}

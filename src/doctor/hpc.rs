//! The container managers that call `nvidia-container-cli configure`
//! themselves, from their own hooks (docs/hpc.md): LXC containers (and
//! Incus's, which LXC runs) whose mount hook is LXC's `hooks/nvidia`,
//! enroot's `98-nvidia.sh`, Apptainer's and SingularityCE's
//! `use nvidia-container-cli = yes`. Each setup found is reported with
//! whether `nvidia-container-cli` on the system PATH is this program. It
//! only reads their configuration files, bounded, and never runs them.

use std::path::{Path, PathBuf};

use super::programs::find_program;
use super::{Check, HostRoot, Layer};
use crate::host::driver::DriverRoot;
use crate::util::this_program::SYSTEM_PATH;

const L: Layer = Layer::Wiring;

/// The most of one configuration file read.
const MAX_CONFIG: usize = 1 << 20;

/// LXC container configurations: LXC's own, and those Incus writes for
/// each instance it starts.
const LXC_CONFIGS: [(&str, &str); 2] = [("/var/lib/lxc", "config"), ("/var/log/incus", "lxc.conf")];

/// LXC's default configuration, which every new container copies.
const LXC_DEFAULT: &str = "/etc/lxc/default.conf";

/// enroot's hook files that call `nvidia-container-cli` (`99-nvidia.sh`
/// before enroot 3.2).
const ENROOT_HOOKS: [&str; 2] = [
    "/etc/enroot/hooks.d/98-nvidia.sh",
    "/etc/enroot/hooks.d/99-nvidia.sh",
];

/// Apptainer's and SingularityCE's configuration files.
const APPTAINER_CONFIGS: [&str; 4] = [
    "/etc/apptainer/apptainer.conf",
    "/usr/local/etc/apptainer/apptainer.conf",
    "/etc/singularity/singularity.conf",
    "/usr/local/etc/singularity/singularity.conf",
];

/// A manager found calling `nvidia-container-cli`, and where it was seen.
#[derive(Debug, PartialEq, Eq)]
struct Caller {
    /// The manager.
    name: &'static str,
    /// The files that say so.
    seen: Vec<String>,
}

/// Reports each manager set up to call `nvidia-container-cli`, and
/// whether it reaches this program; true when one does.
pub(super) fn check(host: &HostRoot, out: &mut Vec<Check>) -> bool {
    let callers = callers(host);
    if callers.is_empty() {
        return false;
    }
    let cli = find_program(
        &DriverRoot::new(host.root()),
        SYSTEM_PATH,
        crate::util::this_program::CLI_NAME,
    );
    for caller in &callers {
        let what = format!(
            "{} calls nvidia-container-cli ({})",
            caller.name,
            caller.seen.join(", ")
        );
        match &cli {
            None => out.push(Check::fail(
                L,
                "nvidia-container-cli callers",
                format!("{what}, which is not on PATH: its GPU containers fail to start"),
                "install oci-nvidia-hook-compat (it links nvidia-container-cli to \
                 oci-nvidia-hook): docs/hpc.md",
            )),
            Some(found) => out.push(Check::ok(
                L,
                "nvidia-container-cli callers",
                format!(
                    "{what} → {} ({})",
                    found.shown,
                    if found.ours {
                        "oci-nvidia-hook"
                    } else {
                        "not oci-nvidia-hook"
                    }
                ),
            )),
        }
    }
    cli.is_some_and(|found| found.ours)
}

/// The managers set up to call `nvidia-container-cli` on `host`.
fn callers(host: &HostRoot) -> Vec<Caller> {
    let mut lxc = Vec::new();
    let mut files: Vec<PathBuf> = vec![host.path(LXC_DEFAULT)];
    for (dir, name) in LXC_CONFIGS {
        let Ok(entries) = std::fs::read_dir(host.path(dir)) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries.flatten().map(|e| e.path().join(name)).collect();
        found.sort();
        files.extend(found);
    }
    for file in files {
        if read(&file).is_some_and(|text| has_nvidia_mount_hook(&text)) {
            lxc.push(shown(host, &file));
        }
    }
    let enroot: Vec<String> = ENROOT_HOOKS
        .iter()
        .filter(|p| host.path(p).is_file())
        .map(|p| p.to_string())
        .collect();
    let apptainer: Vec<String> = APPTAINER_CONFIGS
        .iter()
        .filter(|p| read(&host.path(p)).is_some_and(|t| uses_nvidia_container_cli(&t)))
        .map(|p| p.to_string())
        .collect();
    [("LXC", lxc), ("enroot", enroot), ("Apptainer", apptainer)]
        .into_iter()
        .filter(|(_, seen)| !seen.is_empty())
        .map(|(name, seen)| Caller { name, seen })
        .collect()
}

/// `file` as the host names it.
fn shown(host: &HostRoot, file: &Path) -> String {
    match file.strip_prefix(host.root()) {
        Ok(inner) if host.root() != Path::new("/") => format!("/{}", inner.display()),
        _ => file.display().to_string(),
    }
}

/// A configuration file's text; `None` when absent or unreadable.
fn read(path: &Path) -> Option<String> {
    let bytes = crate::util::hostfile::read(path, MAX_CONFIG).ok()?;
    String::from_utf8(bytes).ok()
}

/// An LXC configuration whose `lxc.hook.mount` is LXC's `hooks/nvidia`.
fn has_nvidia_mount_hook(text: &str) -> bool {
    text.lines().any(|line| {
        let Some((key, value)) = line.trim().split_once('=') else {
            return false;
        };
        key.trim() == "lxc.hook.mount" && value.trim().ends_with("hooks/nvidia")
    })
}

/// Apptainer's `use nvidia-container-cli = yes` (its `--nvccli` by default).
fn uses_nvidia_container_cli(text: &str) -> bool {
    text.lines().any(|line| {
        let Some((key, value)) = line.trim().split_once('=') else {
            return false;
        };
        key.split_whitespace().collect::<Vec<_>>() == ["use", "nvidia-container-cli"]
            && value.trim().eq_ignore_ascii_case("yes")
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn host_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = dir.path().join(path.trim_start_matches('/'));
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn finds_lxc_enroot_and_apptainer_set_up_to_call_the_cli() {
        let dir = host_with(&[
            (
                "/var/lib/lxc/c1/config",
                "lxc.idmap = u 0 100000 65536\nlxc.hook.mount = /usr/share/lxc/hooks/nvidia\n",
            ),
            // Commented out, another hook: not a caller.
            (
                "/var/lib/lxc/c2/config",
                "# lxc.hook.mount = /usr/share/lxc/hooks/nvidia\n",
            ),
            (
                "/var/lib/lxc/c3/config",
                "lxc.hook.mount = /usr/share/lxc/hooks/clonehostname\n",
            ),
            (
                "/var/log/incus/i1/lxc.conf",
                "lxc.hook.mount=/usr/share/lxc/hooks/nvidia\n",
            ),
            (
                "/etc/enroot/hooks.d/98-nvidia.sh",
                "exec nvidia-container-cli\n",
            ),
            (
                "/etc/apptainer/apptainer.conf",
                "# use nvidia-container-cli = yes\nuse nvidia-container-cli = YES\n",
            ),
            (
                "/etc/singularity/singularity.conf",
                "use nvidia-container-cli = no\n",
            ),
        ]);
        let found = callers(&HostRoot::new(dir.path()));
        assert_eq!(
            found,
            [
                Caller {
                    name: "LXC",
                    seen: vec![
                        "/var/lib/lxc/c1/config".into(),
                        "/var/log/incus/i1/lxc.conf".into()
                    ],
                },
                Caller {
                    name: "enroot",
                    seen: vec!["/etc/enroot/hooks.d/98-nvidia.sh".into()],
                },
                Caller {
                    name: "Apptainer",
                    seen: vec!["/etc/apptainer/apptainer.conf".into()],
                },
            ]
        );
    }

    #[test]
    fn a_caller_without_the_cli_on_path_fails_and_none_says_nothing() {
        let dir = host_with(&[("/etc/enroot/hooks.d/98-nvidia.sh", "")]);
        let mut out = Vec::new();
        assert!(!check(&HostRoot::new(dir.path()), &mut out));
        assert_eq!(out.len(), 1, "{out:?}");
        let text = format!("{:?}", out[0]);
        assert!(
            text.contains("enroot") && text.contains("oci-nvidia-hook-compat"),
            "{text}"
        );
        assert!(super::super::any_failed(&out));
        let empty = tempfile::tempdir().unwrap();
        let mut out = Vec::new();
        assert!(!check(&HostRoot::new(empty.path()), &mut out));
        assert!(out.is_empty(), "{out:?}");
    }
}

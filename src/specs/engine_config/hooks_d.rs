//! The OCI hooks.d directories Podman and CRI-O read, and the files in
//! them. Read: which directories ([`dirs`]: Podman's two and CRI-O's
//! `hooks_dir`), which files count ([`files`]: a file of Podman's first
//! directory that the second overrides by name does not) and what each
//! says ([`HookFile`], as containers/common reads version 1.0.0). Written:
//! the file `nvidia-ctk runtime configure --config-mode=oci-hook` prints
//! ([`oci_hook`]).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::json;

use super::{with_extension, Error, HostRoot, Result};

/// Podman's hooks.d directories, the second overriding the first file by file.
pub const PODMAN_DIRS: [&str; 2] = [
    "/usr/share/containers/oci/hooks.d",
    "/etc/containers/oci/hooks.d",
];

/// The prestart hook the hooks.d file runs unless told.
pub const DEFAULT_HOOK_PATH: &str = "/usr/bin/nvidia-container-runtime-hook";

/// A hooks.d file, as containers/common reads version 1.0.0.
#[derive(Debug, Deserialize)]
pub struct HookFile {
    /// What it runs.
    pub hook: HookEntry,
    /// The stages it runs at.
    #[serde(default)]
    pub stages: Vec<String>,
}

/// The `hook` object of a hooks.d file.
#[derive(Debug, Deserialize)]
pub struct HookEntry {
    /// The program.
    pub path: String,
    /// Its argv.
    #[serde(default)]
    pub args: Vec<String>,
    /// Its environment, when the file sets one.
    pub env: Option<Vec<String>>,
}

impl HookFile {
    /// The hooks.d file at `file` (a path on this machine).
    pub fn load(file: &Path) -> Result<HookFile> {
        let data = std::fs::read(file).map_err(|source| Error::Read {
            path: file.to_path_buf(),
            source,
        })?;
        serde_json::from_slice(&data).map_err(|source| Error::NotHookFile {
            path: file.to_path_buf(),
            source,
        })
    }
}

/// The hooks.d directories engines read: Podman's, then each of CRI-O's
/// `hooks_dir` not among them.
pub fn dirs(crio_dirs: &[String]) -> Vec<String> {
    let mut dirs: Vec<String> = PODMAN_DIRS.iter().map(|d| d.to_string()).collect();
    for dir in crio_dirs {
        if !dirs.contains(dir) {
            dirs.push(dir.clone());
        }
    }
    dirs
}

/// The `*.json` files of `dirs` (under the host root), in each directory's
/// lower-cased name order; a file of Podman's first directory that the
/// second one overrides by name is left out, as Podman leaves it.
pub fn files(host: &HostRoot, dirs: &[String]) -> Vec<PathBuf> {
    let list = |dir: &str| -> Vec<PathBuf> {
        let mut files = with_extension(&host.path(dir), "json");
        files.sort_by_key(|p| p.file_name().map(|n| n.to_string_lossy().to_lowercase()));
        files
    };
    let overriding: Vec<_> = list(PODMAN_DIRS[1])
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_os_string()))
        .collect();
    let mut files = Vec::new();
    for dir in dirs {
        for file in list(dir) {
            let shadowed = dir == PODMAN_DIRS[0]
                && file
                    .file_name()
                    .is_some_and(|n| overriding.iter().any(|o| o == n));
            if !shadowed && !files.contains(&file) {
                files.push(file);
            }
        }
    }
    files
}

/// The hooks.d file (`--config-mode=oci-hook`) that runs `hook prestart`
/// for every container, its PATH the standard directories and the hook's
/// own, as NVIDIA's tool writes it.
pub fn oci_hook(hook: &Path) -> Result<String> {
    let mut dirs: Vec<&str> = crate::util::this_program::system_dirs().collect();
    let dir = hook.parent().and_then(Path::to_str).unwrap_or("/");
    if !dirs.contains(&dir) {
        dirs.push(dir);
    }
    let name = hook
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let entry = json!({
        "version": "1.0.0",
        "hook": {
            "path": hook,
            "args": [name, "prestart"],
            "env": [format!("PATH={}", dirs.join(":"))],
        },
        "when": {"always": true, "commands": [".*"]},
        "stages": ["prestart"],
    });
    serde_json::to_string_pretty(&entry)
        .map(|s| s + "\n")
        .map_err(Error::Json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::specs::engine_config::tests::host_with;

    #[test]
    fn the_hook_file_is_nvidias() {
        let hook = oci_hook(Path::new("/usr/bin/nvidia-container-runtime-hook")).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&hook).unwrap();
        assert_eq!(
            parsed,
            json!({
                "version": "1.0.0",
                "hook": {
                    "path": "/usr/bin/nvidia-container-runtime-hook",
                    "args": ["nvidia-container-runtime-hook", "prestart"],
                    "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                },
                "when": {"always": true, "commands": [".*"]},
                "stages": ["prestart"],
            })
        );
        let elsewhere = oci_hook(Path::new("/opt/nvidia/hook")).unwrap();
        assert!(
            elsewhere.contains(
                "\"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/nvidia\""
            ),
            "{elsewhere}"
        );
    }

    #[test]
    fn podmans_second_directory_overrides_the_first_by_name() {
        let (dir, host) = host_with(&[
            ("/usr/share/containers/oci/hooks.d/a.json", "{}"),
            ("/usr/share/containers/oci/hooks.d/B.json", "{}"),
            ("/etc/containers/oci/hooks.d/a.json", "{}"),
            ("/etc/containers/oci/hooks.d/notes.txt", ""),
            ("/crio/hooks/c.json", "{}"),
        ]);
        let crio = ["/crio/hooks".to_string(), PODMAN_DIRS[1].to_string()];
        let found: Vec<String> = files(&host, &dirs(&crio))
            .iter()
            .map(|f| f.strip_prefix(dir.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(
            found,
            [
                "usr/share/containers/oci/hooks.d/B.json",
                "etc/containers/oci/hooks.d/a.json",
                "crio/hooks/c.json"
            ]
        );
    }

    #[test]
    fn a_hook_file_that_does_not_parse_is_named() {
        let (dir, _host) = host_with(&[("/h/x.json", "{\"hook\": 1}")]);
        let err = HookFile::load(&dir.path().join("h/x.json")).unwrap_err();
        assert!(
            err.to_string()
                .contains("x.json is not a hooks.d file: invalid type"),
            "{err}"
        );
        let err = HookFile::load(&dir.path().join("h/none.json")).unwrap_err();
        assert!(err.to_string().starts_with("cannot read "), "{err}");
    }
}

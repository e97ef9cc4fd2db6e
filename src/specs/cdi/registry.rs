//! The CDI devices of the spec directories, any vendor's, resolved as CDI's
//! own cache resolves them (`pkg/cdi` cache): every `.json` and `.yaml`
//! file of each directory is read, a spec that breaks CDI's rules is
//! skipped (and named if a container asks for one of its devices), a
//! device defined in a later directory overrides one of an earlier
//! directory, and one defined twice in the same directory is refused. A
//! request then becomes one set of container edits: each spec's own edits
//! once, before the first of its devices, then each device's, with the
//! device nodes completed from the host node as CDI completes them.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::dirs::{read_spec_text, spec_files};
use super::name::Qualified;
use super::spec::{ContainerEdits, DeviceNode, Spec};
use super::validate;
use super::Error;

/// Result of resolving CDI devices.
pub type Result<T> = std::result::Result<T, Error>;

/// One spec file as read.
#[derive(Debug)]
struct Loaded {
    path: PathBuf,
    spec: Spec,
}

/// Where a device name leads: its spec, the device's place in it, and the
/// directory's priority (its place in the list).
#[derive(Debug, Clone, Copy)]
struct Found {
    spec: usize,
    device: usize,
    priority: usize,
}

/// The devices of the spec directories.
#[derive(Debug, Default)]
pub struct Registry {
    dirs: Vec<PathBuf>,
    specs: Vec<Loaded>,
    devices: BTreeMap<Qualified, Found>,
    conflicts: BTreeMap<Qualified, (PathBuf, PathBuf)>,
    broken: Vec<(PathBuf, String)>,
}

impl Registry {
    /// Reads every spec of `dirs`, given in increasing priority.
    pub fn load(dirs: &[PathBuf]) -> Registry {
        let mut registry = Registry {
            dirs: dirs.to_vec(),
            ..Registry::default()
        };
        for (priority, dir) in dirs.iter().enumerate() {
            for path in spec_files(dir) {
                match read_spec(&path) {
                    Ok(spec) => registry.add(priority, path, spec),
                    Err(why) => {
                        log::warn!("CDI spec {} skipped: {why}", path.display());
                        registry.broken.push((path, why));
                    }
                }
            }
        }
        registry
    }

    fn add(&mut self, priority: usize, path: PathBuf, spec: Spec) {
        let index = self.specs.len();
        for (device, d) in spec.devices.iter().enumerate() {
            let name = Qualified {
                kind: spec.kind.clone(),
                name: d.name.clone(),
            };
            let found = Found {
                spec: index,
                device,
                priority,
            };
            match self.devices.get(&name) {
                Some(old) if old.priority == priority => {
                    let first = self.specs[old.spec].path.clone();
                    self.conflicts.insert(name, (first, path.clone()));
                }
                _ => {
                    // A later directory overrides: the conflict, if any, was
                    // between lower-priority specs and no longer matters.
                    self.conflicts.remove(&name);
                    self.devices.insert(name, found);
                }
            }
        }
        self.specs.push(Loaded { path, spec });
    }

    /// Every device name defined, in order.
    pub fn names(&self) -> impl Iterator<Item = &Qualified> {
        self.devices
            .keys()
            .filter(|n| !self.conflicts.contains_key(*n))
    }

    /// The container edits for `names`, in CDI's order: a spec's own edits
    /// before its first device's, then each device's. A name asked twice
    /// is taken once.
    pub fn edits(&self, names: &[Qualified]) -> Result<ContainerEdits> {
        let mut edits = ContainerEdits::default();
        let mut specs_seen: Vec<usize> = Vec::new();
        let mut names_seen: Vec<&Qualified> = Vec::new();
        for name in names {
            if names_seen.contains(&name) {
                continue;
            }
            names_seen.push(name);
            if let Some((first, second)) = self.conflicts.get(name) {
                return Err(Error::DeviceConflict {
                    name: name.clone(),
                    first: first.clone(),
                    second: second.clone(),
                });
            }
            let found = self.devices.get(name).ok_or_else(|| self.unknown(name))?;
            let loaded = &self.specs[found.spec];
            let mut add = |more: &ContainerEdits| -> Result<()> {
                let mut more = more.clone();
                for node in &mut more.device_nodes {
                    complete_node(node).map_err(|reason| Error::DeviceNode {
                        name: name.clone(),
                        path: loaded.path.clone(),
                        reason,
                    })?;
                }
                edits.append(&more);
                Ok(())
            };
            if !specs_seen.contains(&found.spec) {
                specs_seen.push(found.spec);
                add(&loaded.spec.container_edits)?;
            }
            add(&loaded.spec.devices[found.device].container_edits)?;
        }
        Ok(edits)
    }

    fn unknown(&self, name: &Qualified) -> Error {
        let dirs: Vec<String> = self.dirs.iter().map(|d| d.display().to_string()).collect();
        let broken = match self.broken.as_slice() {
            [] => String::new(),
            [(path, why)] => format!(" (skipped {}: {why})", path.display()),
            [(path, why), rest @ ..] => format!(
                " (skipped {}: {why}; and {} more)",
                path.display(),
                rest.len()
            ),
        };
        Error::UnknownDevice {
            name: name.clone(),
            dirs: dirs.join(", "),
            broken,
        }
    }
}

/// Reads one spec file, refusing what CDI's parser refuses.
fn read_spec(path: &Path) -> std::result::Result<Spec, String> {
    let text = read_spec_text(path)?;
    let report = validate::check(&text);
    if let Some(problem) = report.problems.first() {
        return Err(problem.to_string());
    }
    serde_yaml::from_str(&text).map_err(|e| e.to_string())
}

/// Completes `node` from its host node as CDI does (`fillMissingInfo`):
/// the host path defaults to the path; a node that names its type and
/// numbers (or is a FIFO) is taken as it is; else the host node gives
/// what is missing, and must be of the type named.
fn complete_node(node: &mut DeviceNode) -> std::result::Result<(), String> {
    if node.host_path.is_none() {
        node.host_path = Some(node.path.clone());
    }
    let kind = node.kind.as_deref().unwrap_or("");
    if !kind.is_empty() && (node.major.unwrap_or(0) != 0 || kind == "p") {
        return Ok(());
    }
    let host = node.host_path.clone().unwrap_or_default();
    let meta = fs::symlink_metadata(&host)
        .map_err(|e| format!("cannot stat host device {}: {e}", host.display()))?;
    let ft = meta.file_type();
    let found = if ft.is_block_device() {
        "b"
    } else if ft.is_char_device() {
        "c"
    } else if ft.is_fifo() {
        "p"
    } else {
        return Err(format!("host path {} is not a device node", host.display()));
    };
    if kind.is_empty() {
        node.kind = Some(found.into());
    } else if kind != found && !(kind == "u" && found == "c") {
        return Err(format!(
            "{} is of type {kind} but host device {} is of type {found}",
            node.path.display(),
            host.display()
        ));
    }
    if node.file_mode.is_none() {
        node.file_mode = Some(meta.permissions().mode() & 0o7777);
    }
    if found != "p" && node.major.unwrap_or(0) == 0 {
        let rdev = meta.rdev();
        node.major = Some(nix::sys::stat::major(rdev) as i64);
        node.minor = Some(nix::sys::stat::minor(rdev) as i64);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, file: &str, text: &str) {
        fs::create_dir_all(dir).unwrap();
        fs::write(dir.join(file), text).unwrap();
        fs::set_permissions(dir.join(file), fs::Permissions::from_mode(0o644)).unwrap();
    }

    /// A spec anyone but its owner may write, or one another user owns, is
    /// skipped, in one line: its hooks would run as root (issue 40).
    #[test]
    fn a_spec_others_may_change_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let etc = tmp.path().join("etc");
        write(&etc, "nvidia.yaml", GPU);
        fs::set_permissions(etc.join("nvidia.yaml"), fs::Permissions::from_mode(0o664)).unwrap();
        let registry = Registry::load(std::slice::from_ref(&etc));
        assert_eq!(registry.names().count(), 0);
        let err = registry
            .edits(&[q("nvidia.com/gpu=0")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("writable by its group (mode 0664)"), "{err}");
        assert!(!err.contains('\n'), "{err}");
        fs::set_permissions(etc.join("nvidia.yaml"), fs::Permissions::from_mode(0o644)).unwrap();
        assert!(Registry::load(std::slice::from_ref(&etc)).names().count() > 0);
    }

    /// Owned by another user (root makes it so): refused, naming the uid.
    #[test]
    #[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
    fn a_spec_another_user_owns_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let etc = tmp.path().join("etc");
        write(&etc, "nvidia.yaml", GPU);
        std::os::unix::fs::chown(etc.join("nvidia.yaml"), Some(4242), None).unwrap();
        let registry = Registry::load(std::slice::from_ref(&etc));
        let err = registry
            .edits(&[q("nvidia.com/gpu=0")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("owned by uid 4242, not root"), "{err}");
    }

    fn q(text: &str) -> Qualified {
        Qualified::parse(text).unwrap()
    }

    const GPU: &str = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ncontainerEdits:\n  env: [SPEC=1]\ndevices:\n- name: \"0\"\n  containerEdits:\n    env: [DEV=0]\n- name: all\n  containerEdits:\n    env: [DEV=all]\n";

    #[test]
    fn a_spec_edits_once_before_its_first_device_and_names_resolve_by_kind() {
        let tmp = tempfile::tempdir().unwrap();
        let etc = tmp.path().join("etc");
        write(&etc, "nvidia.yaml", GPU);
        write(
            &etc,
            "other.json",
            r#"{"cdiVersion":"0.3.0","kind":"example.com/dev","devices":[{"name":"x","containerEdits":{"env":["X=1"]}}]}"#,
        );
        let registry = Registry::load(&[etc]);
        let edits = registry
            .edits(&[
                q("nvidia.com/gpu=0"),
                q("example.com/dev=x"),
                q("nvidia.com/gpu=all"),
                q("nvidia.com/gpu=0"),
            ])
            .unwrap();
        assert_eq!(edits.env, ["SPEC=1", "DEV=0", "X=1", "DEV=all"]);
        assert_eq!(
            registry
                .names()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            [
                "example.com/dev=x",
                "nvidia.com/gpu=0",
                "nvidia.com/gpu=all"
            ]
        );
    }

    #[test]
    fn a_later_directory_overrides_and_one_directory_twice_conflicts() {
        let tmp = tempfile::tempdir().unwrap();
        let (etc, run) = (tmp.path().join("etc"), tmp.path().join("run"));
        write(&etc, "a.yaml", GPU);
        write(&etc, "b.yaml", GPU);
        let registry = Registry::load(std::slice::from_ref(&etc));
        let err = registry.edits(&[q("nvidia.com/gpu=0")]).unwrap_err();
        assert!(
            matches!(&err, Error::DeviceConflict { first, second, .. } if first.ends_with("a.yaml") && second.ends_with("b.yaml")),
            "{err}"
        );
        write(&run, "late.yaml", &GPU.replace("DEV=0", "LATE=0"));
        let registry = Registry::load(&[etc, run]);
        let edits = registry.edits(&[q("nvidia.com/gpu=0")]).unwrap();
        assert_eq!(edits.env, ["SPEC=1", "LATE=0"]);
    }

    #[test]
    fn an_unknown_name_is_refused_naming_the_directories_and_a_broken_spec() {
        let tmp = tempfile::tempdir().unwrap();
        let etc = tmp.path().join("etc");
        write(
            &etc,
            "bad.yaml",
            "cdiVersion: 9.9.9\nkind: nvidia.com/gpu\ndevices: []\n",
        );
        let missing = tmp.path().join("none");
        let registry = Registry::load(&[etc.clone(), missing.clone()]);
        let err = registry
            .edits(&[q("nvidia.com/gpu=7")])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!(
                "unknown CDI device nvidia.com/gpu=7: no spec in {}, {} defines it (skipped {}: cdiVersion: unknown CDI version \"9.9.9\"",
                etc.display(),
                missing.display(),
                etc.join("bad.yaml").display()
            )),
            "{err}"
        );
    }

    #[test]
    fn device_nodes_are_completed_from_the_host_node() {
        let tmp = tempfile::tempdir().unwrap();
        let etc = tmp.path().join("etc");
        write(
            &etc,
            "null.yaml",
            "cdiVersion: 0.3.0\nkind: example.com/null\ndevices:\n- name: a\n  containerEdits:\n    deviceNodes:\n    - path: /dev/null\n- name: b\n  containerEdits:\n    deviceNodes:\n    - path: /dev/null\n      type: b\n- name: c\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia9\n      type: c\n      major: 195\n      minor: 9\n",
        );
        let registry = Registry::load(&[etc]);
        let node = &registry
            .edits(&[q("example.com/null=a")])
            .unwrap()
            .device_nodes[0];
        assert_eq!(
            (node.kind.as_deref(), node.major, node.minor, node.file_mode),
            (Some("c"), Some(1), Some(3), Some(0o666))
        );
        assert_eq!(node.host_path.as_deref(), Some(Path::new("/dev/null")));
        let err = registry
            .edits(&[q("example.com/null=b")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("is of type b but host device /dev/null is of type c"),
            "{err}"
        );
        // Fully given: no host node needed.
        let node = &registry
            .edits(&[q("example.com/null=c")])
            .unwrap()
            .device_nodes[0];
        assert_eq!((node.major, node.minor), (Some(195), Some(9)));
    }
}

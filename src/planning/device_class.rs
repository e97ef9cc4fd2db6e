//! The feature-gated device classes, one row each: the variable a
//! container enables one with (`NVIDIA_GDS=enabled`, exactly, as NVIDIA's
//! `internal/modifier/gated.go` compares it), the names below `/dev` its
//! nodes have, the files and sockets it brings beside them, and what
//! `doctor` tells a host to do when a node is wrong. Request parsing,
//! discovery, planning, `list --enable` and `doctor` read this table and
//! nothing else: a class is one row here (and its tests). CDI specs carry
//! none of them, as NVIDIA's do not: a container enables them by variable.
//! IMEX channels are asked for by number, not enabled, and are no row.
//! Imports nothing of the crate, so that `request` and `driver` both can.

use serde::{Serialize, Serializer};

/// The classes, in the order discovery looks for their nodes.
pub const CLASSES: &[Row] = &[
    Row {
        name: "nvswitch",
        label: "NvSwitch",
        role: "nv-switch",
        variable: "NVIDIA_NVSWITCH",
        nodes: &[DevName::prefix("", "nvidia-nvswitch")],
        files: &[("run/nvidia-fabricmanager/socket", FileKind::Socket)],
        files_need_node: false,
        remedy: RELOAD,
        unprivileged_when_strict: false,
    },
    Row {
        name: "gds",
        label: "Gds",
        role: "gds",
        variable: "NVIDIA_GDS",
        nodes: &[DevName::prefix("", "nvidia-fs")],
        files: &[
            ("run/udev", FileKind::Directory),
            ("etc/cufile.json", FileKind::File),
        ],
        files_need_node: true,
        remedy: RELOAD,
        unprivileged_when_strict: false,
    },
    Row {
        name: "mofed",
        label: "Mofed",
        role: "mofed",
        variable: "NVIDIA_MOFED",
        nodes: &[
            DevName::prefix("infiniband", "uverbs"),
            DevName::exact("infiniband", "rdma_cm"),
            DevName::prefix("infiniband", "umad"),
        ],
        files: &[],
        files_need_node: false,
        remedy: RELOAD,
        unprivileged_when_strict: false,
    },
    Row {
        name: "gdrcopy",
        label: "Gdrcopy",
        role: "gdrcopy",
        variable: "NVIDIA_GDRCOPY",
        nodes: &[DevName::exact("", "gdrdrv")],
        files: &[],
        files_need_node: false,
        remedy: RELOAD,
        unprivileged_when_strict: false,
    },
];

/// What `doctor` says to do about a gated device's wrong or missing node:
/// their drivers are not NVIDIA's, and udev makes their nodes.
const RELOAD: &str = "reload the device's driver module so that udev makes its node";

/// One device class.
#[derive(Debug)]
pub struct Row {
    /// The name `list --enable` takes.
    pub name: &'static str,
    /// The name `info` gives it beside its files.
    pub label: &'static str,
    /// The name `info --json` gives its nodes' role and its files' gate.
    pub role: &'static str,
    /// The variable that enables it when set to `enabled`.
    pub variable: &'static str,
    /// The names below `/dev` its nodes have, as NVIDIA's discoverers
    /// look for them (`internal/discover/{nvswitch,gds,mofed,gdrcopy}.go`).
    pub nodes: &'static [DevName],
    /// The files it brings beside its nodes, relative to the driver root:
    /// GDS's udev database and `cufile.json` (NVIDIA's
    /// `internal/discover/gds.go`), NVSwitch's fabric manager socket.
    pub files: &'static [(&'static str, FileKind)],
    /// Whether its files come only where the host has one of its nodes
    /// (GDS's, as gds.go adds them).
    pub files_need_node: bool,
    /// What `doctor` tells a host whose node of it is missing or wrong.
    pub remedy: &'static str,
    /// Whether an unprivileged container's variable enables it under the
    /// strict policy (`accept-env-when-unprivileged = false`), where the
    /// image's `ENV`, which can set the variable, decides nothing policy
    /// has not allowed. No class's: the device plugin's mounts carry none,
    /// so there only a privileged container (or an administrator's
    /// `--enable`) enables one.
    pub unprivileged_when_strict: bool,
}

/// A name below `/dev` a class's nodes have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevName {
    /// The directory below `/dev`, empty for `/dev` itself.
    pub dir: &'static str,
    /// The name, or what names start with.
    pub name: &'static str,
    /// Whether the name is the whole name, not a prefix.
    pub exact: bool,
}

impl DevName {
    /// Names starting with `name` in `dir`.
    const fn prefix(dir: &'static str, name: &'static str) -> DevName {
        DevName {
            dir,
            name,
            exact: false,
        }
    }

    /// The one name `name` in `dir`.
    const fn exact(dir: &'static str, name: &'static str) -> DevName {
        DevName {
            dir,
            name,
            exact: true,
        }
    }

    /// Whether an entry of its directory named `entry` is one of its nodes.
    pub fn matches(&self, entry: &str) -> bool {
        if self.exact {
            entry == self.name
        } else {
            entry.starts_with(self.name)
        }
    }
}

/// What a gated device's file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileKind {
    /// A directory, bound read-only.
    Directory,
    /// A regular file.
    File,
    /// A daemon's unix socket.
    Socket,
}

/// One class, a row of [`CLASSES`]: what a node's role and a request name.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Class(usize);

impl Class {
    /// Every class, in the table's order.
    pub fn all() -> impl Iterator<Item = Class> {
        (0..CLASSES.len()).map(Class)
    }

    /// The class `list --enable` names `name`.
    pub fn named(name: &str) -> Option<Class> {
        Class::all().find(|c| c.row().name == name)
    }

    /// Its row.
    pub fn row(self) -> &'static Row {
        // Only `all` makes a class, from an index of the table.
        &CLASSES[self.0]
    }

    /// Its bit in a set of classes.
    fn bit(self) -> u32 {
        1 << self.0
    }
}

impl std::fmt::Debug for Class {
    /// Its label: `info` prints a file's class so.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.row().label)
    }
}

impl Serialize for Class {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.row().role)
    }
}

/// A set of classes: those a request enables.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Set(u32);

// A set holds one bit per class.
const _: () = assert!(CLASSES.len() <= 32);

impl Set {
    /// The classes whose variable `lookup` gives as `enabled`, exactly
    /// (`lookup` reads a container's environment).
    pub fn enabled_by<'a>(lookup: impl Fn(&str) -> Option<&'a str>) -> Set {
        let mut set = Set::default();
        for class in Class::all() {
            if lookup(class.row().variable) == Some("enabled") {
                set.insert(class);
            }
        }
        set
    }

    /// Adds `class`.
    pub fn insert(&mut self, class: Class) {
        self.0 |= class.bit();
    }

    /// Whether it holds `class`.
    pub fn contains(&self, class: Class) -> bool {
        self.0 & class.bit() != 0
    }

    /// Whether it holds any class.
    pub fn any(&self) -> bool {
        self.0 != 0
    }

    /// Those of it an unprivileged container may enable under the strict
    /// policy, as each row's `unprivileged_when_strict` says; and the rest.
    pub fn split_strict(self) -> (Set, Set) {
        let (mut kept, mut dropped) = (Set::default(), Set::default());
        for class in Class::all().filter(|c| self.contains(*c)) {
            match class.row().unprivileged_when_strict {
                true => kept.insert(class),
                false => dropped.insert(class),
            }
        }
        (kept, dropped)
    }

    /// The names of its classes' variables, comma-joined.
    pub fn variables(&self) -> String {
        let names: Vec<&str> = Class::all()
            .filter(|c| self.contains(*c))
            .map(|c| c.row().variable)
            .collect();
        names.join(",")
    }
}

impl Serialize for Set {
    /// Each class's name with whether the set holds it.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(CLASSES.len()))?;
        for class in Class::all() {
            map.serialize_entry(class.row().name, &self.contains(class))?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_class_has_its_own_name_role_and_variable() {
        for (i, a) in CLASSES.iter().enumerate() {
            assert!(a.variable.starts_with("NVIDIA_"), "{}", a.name);
            assert!(!a.nodes.is_empty(), "{}: a class brings nodes", a.name);
            assert!(!a.remedy.is_empty(), "{}", a.name);
            for b in &CLASSES[i + 1..] {
                assert_ne!(a.name, b.name);
                assert_ne!(a.role, b.role);
                assert_ne!(a.variable, b.variable);
            }
        }
        assert_eq!(
            Class::all().map(|c| c.row().variable).collect::<Vec<_>>(),
            [
                "NVIDIA_NVSWITCH",
                "NVIDIA_GDS",
                "NVIDIA_MOFED",
                "NVIDIA_GDRCOPY"
            ]
        );
    }

    #[test]
    fn names_match_exactly_or_by_prefix() {
        let mofed = Class::named("mofed").unwrap().row();
        let matched = |entry| mofed.nodes.iter().any(|n| n.matches(entry));
        assert!(matched("uverbs0") && matched("rdma_cm") && matched("umad1"));
        assert!(!matched("rdma_cm0") && !matched("other"));
        assert_eq!(Class::named("nope"), None);
    }

    #[test]
    fn a_set_holds_what_it_was_given_and_serializes_by_name() {
        let gds = Class::named("gds").unwrap();
        let mut set = Set::default();
        assert!(!set.any());
        set.insert(gds);
        assert!(set.any() && set.contains(gds));
        assert!(!set.contains(Class::named("mofed").unwrap()));
        assert_eq!(
            serde_json::to_string(&set).unwrap(),
            r#"{"nvswitch":false,"gds":true,"mofed":false,"gdrcopy":false}"#
        );
        let nvswitch = Class::named("nvswitch").unwrap();
        assert_eq!(serde_json::to_string(&nvswitch).unwrap(), r#""nv-switch""#);
        assert_eq!(format!("{nvswitch:?}"), "NvSwitch");
    }
}

//! The Container Device Interface spec as plain data, the shape of CDI's
//! own `specs-go` types: what `cdi generate` writes, `cdi validate` reads,
//! and the runtime wrapper's edits share. Serde does the encoding; nothing
//! here reads the host.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The kind our specs declare, as NVIDIA's do: users write `nvidia.com/gpu=0`.
pub const KIND: &str = "nvidia.com/gpu";

/// A CDI spec file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// The lowest CDI version that expresses the content (see [`required_version`]).
    pub cdi_version: String,
    /// `vendor/class`.
    pub kind: String,
    /// Spec-level annotations (CDI 0.6.0); we write none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The devices users name.
    #[serde(default)]
    pub devices: Vec<Device>,
    /// Edits every container that takes any device of this spec gets.
    #[serde(default, skip_serializing_if = "ContainerEdits::is_empty")]
    pub container_edits: ContainerEdits,
}

/// One named device and what it adds to a container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    /// The name after `kind=`: `0`, `GPU-…`, `all`, `0:1`, `MIG-…`.
    pub name: String,
    /// Device-level annotations (CDI 0.6.0); we write none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// What the device adds.
    #[serde(default)]
    pub container_edits: ContainerEdits,
}

/// Edits a runtime makes to a container's OCI spec. The CDI spec and the
/// runtime wrapper's `config.json` carry the same edits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerEdits {
    /// `KEY=VALUE`, appended to `process.env`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Device nodes, with their cgroup permissions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<DeviceNode>,
    /// OCI hooks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<Hook>,
    /// Bind mounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
}

impl ContainerEdits {
    /// Whether there is nothing to edit (CDI refuses a device without edits).
    pub fn is_empty(&self) -> bool {
        self.env.is_empty()
            && self.device_nodes.is_empty()
            && self.hooks.is_empty()
            && self.mounts.is_empty()
    }
}

/// A device node the runtime creates and allows in the device cgroup.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceNode {
    /// Its path in the container.
    pub path: PathBuf,
    /// The host node, where it is not at `path` (CDI 0.5.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<PathBuf>,
    /// `c` for the character devices we write.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Major number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major: Option<i64>,
    /// Minor number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<i64>,
    /// Permission bits of the node the runtime creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_mode: Option<u32>,
    /// Device cgroup access, e.g. `rw`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
    /// Owner of the created node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Group of the created node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
}

/// A mount the runtime adds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    /// The host file or directory.
    pub host_path: PathBuf,
    /// Where it goes in the container.
    pub container_path: PathBuf,
    /// Mount options, e.g. `ro`, `nosuid`, `bind`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// Mount type (CDI 0.4.0), `bind` for ours.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// An OCI hook the runtime adds at `hook_name`'s stage.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hook {
    /// The OCI stage: `createRuntime` for ours.
    pub hook_name: String,
    /// The program, absolute.
    pub path: PathBuf,
    /// Its argv, `argv[0]` included.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Its whole environment: ours always sets one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Seconds the runtime waits for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
}

/// The CDI versions in order; consumers refuse versions newer than they know.
pub const VERSIONS: [&str; 8] = [
    "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0",
];

/// The lowest CDI version that expresses `spec`, as CDI's producers
/// compute it: 0.3.0 at least; 0.4.0 for a mount `type`; 0.5.0 for a
/// device name that starts with a digit or a node `hostPath`; 0.6.0 for
/// annotations or a dot in the class. Podman 4.3 accepts up to 0.5.0.
pub fn required_version(spec: &Spec) -> &'static str {
    let edits = || {
        spec.devices
            .iter()
            .map(|d| &d.container_edits)
            .chain([&spec.container_edits])
    };
    let class_has_dot = spec
        .kind
        .split_once('/')
        .is_some_and(|(_, class)| class.contains('.'));
    if !spec.annotations.is_empty()
        || spec.devices.iter().any(|d| !d.annotations.is_empty())
        || class_has_dot
    {
        return "0.6.0";
    }
    let digit_name = spec.devices.iter().any(|d| {
        d.name
            .chars()
            .next()
            .is_some_and(|c| !c.is_ascii_alphabetic())
    });
    if digit_name || edits().any(|e| e.device_nodes.iter().any(|n| n.host_path.is_some())) {
        return "0.5.0";
    }
    if edits().any(|e| e.mounts.iter().any(|m| m.kind.is_some())) {
        return "0.4.0";
    }
    "0.3.0"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(names: &[&str]) -> Spec {
        Spec {
            cdi_version: String::new(),
            kind: KIND.into(),
            devices: names
                .iter()
                .map(|name| Device {
                    name: (*name).into(),
                    container_edits: ContainerEdits {
                        env: vec!["A=1".into()],
                        ..ContainerEdits::default()
                    },
                    ..Device::default()
                })
                .collect(),
            ..Spec::default()
        }
    }

    #[test]
    fn version_is_the_lowest_that_expresses_the_content() {
        let mut s = spec(&["GPU-1", "all"]);
        assert_eq!(required_version(&s), "0.3.0");
        s.container_edits.mounts.push(Mount {
            kind: Some("bind".into()),
            ..Mount::default()
        });
        assert_eq!(required_version(&s), "0.4.0");
        s.devices[0].container_edits.device_nodes.push(DeviceNode {
            host_path: Some("/sim/dev/nvidia0".into()),
            ..DeviceNode::default()
        });
        assert_eq!(required_version(&s), "0.5.0");
        assert_eq!(required_version(&spec(&["0", "all"])), "0.5.0");
        let mut annotated = spec(&["all"]);
        annotated.annotations.insert("a".into(), "b".into());
        assert_eq!(required_version(&annotated), "0.6.0");
    }

    #[test]
    fn empty_fields_are_left_out_and_names_are_cdis() {
        let mut s = spec(&["0"]);
        s.cdi_version = "0.5.0".into();
        s.container_edits.device_nodes.push(DeviceNode {
            path: "/dev/nvidiactl".into(),
            kind: Some("c".into()),
            major: Some(195),
            minor: Some(255),
            file_mode: Some(0o666),
            permissions: Some("rw".into()),
            ..DeviceNode::default()
        });
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(
            json,
            r#"{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"0","containerEdits":{"env":["A=1"]}}],"containerEdits":{"deviceNodes":[{"path":"/dev/nvidiactl","type":"c","major":195,"minor":255,"fileMode":438,"permissions":"rw"}]}}"#
        );
        let back: Spec = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
    }
}

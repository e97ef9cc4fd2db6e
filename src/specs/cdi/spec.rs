//! The Container Device Interface spec as plain data, the shape of CDI's
//! own `specs-go` types: what `cdi generate` writes, `cdi validate` reads,
//! and the runtime wrapper's edits share. Serde does the encoding; nothing
//! here reads the host.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The kind our specs declare, as NVIDIA's do: users write `nvidia.com/gpu=0`.
pub const KIND: &str = crate::planning::request::CDI_KIND;

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
    /// Supplementary groups of the container's process (CDI 0.7.0); 0 is skipped.
    #[serde(
        rename = "additionalGids",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub additional_gids: Vec<u32>,
    /// The Intel RDT class of service (CDI 0.7.0), as another vendor's spec may set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intel_rdt: Option<IntelRdt>,
    /// Host network interfaces moved into the container (CDI 1.1.0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub net_devices: Vec<NetDevice>,
}

/// `intelRdt`: written to the OCI spec's `linux.intelRdt` as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IntelRdt {
    /// The resctrl group.
    #[serde(rename = "closID", default, skip_serializing_if = "Option::is_none")]
    pub clos_id: Option<String>,
    /// L3 cache allocation schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l3_cache_schema: Option<String>,
    /// Memory bandwidth schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bw_schema: Option<String>,
    /// Every schema line (CDI 1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schemata: Option<Vec<String>>,
    /// Cache monitoring (CDI 0.7.0 to 1.0.0).
    #[serde(rename = "enableCMT", default, skip_serializing_if = "is_false")]
    pub enable_cmt: bool,
    /// Memory bandwidth monitoring (CDI 0.7.0 to 1.0.0).
    #[serde(rename = "enableMBM", default, skip_serializing_if = "is_false")]
    pub enable_mbm: bool,
    /// Monitoring (CDI 1.1.0).
    #[serde(default, skip_serializing_if = "is_false")]
    pub enable_monitoring: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A host network interface a container gets, under `name` there (CDI 1.1.0).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetDevice {
    /// The interface on the host.
    pub host_interface_name: String,
    /// Its name in the container.
    pub name: String,
}

impl ContainerEdits {
    /// Whether there is nothing to edit (CDI refuses a device without edits).
    pub fn is_empty(&self) -> bool {
        self.env.is_empty()
            && self.device_nodes.is_empty()
            && self.hooks.is_empty()
            && self.mounts.is_empty()
            && self.additional_gids.is_empty()
            && self.intel_rdt.is_none()
            && self.net_devices.is_empty()
    }

    /// Appends `other`'s edits, as CDI merges a spec's and its devices'
    /// before applying them once; a later `intelRdt` replaces an earlier.
    pub fn append(&mut self, other: &ContainerEdits) {
        self.env.extend(other.env.iter().cloned());
        self.device_nodes.extend(other.device_nodes.iter().cloned());
        self.hooks.extend(other.hooks.iter().cloned());
        self.mounts.extend(other.mounts.iter().cloned());
        self.additional_gids
            .extend(other.additional_gids.iter().copied());
        if other.intel_rdt.is_some() {
            self.intel_rdt.clone_from(&other.intel_rdt);
        }
        self.net_devices.extend(other.net_devices.iter().cloned());
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
pub const VERSIONS: [&str; 10] = [
    "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0",
];

/// The lowest CDI version that expresses `spec`, as CDI's producers
/// compute it (`specs-go` MinimumRequiredVersion): 0.3.0 at least; 0.4.0
/// for a mount `type`; 0.5.0 for a device name that starts with a digit or
/// a node `hostPath`; 0.6.0 for annotations or a dot in the class; 0.7.0
/// for `intelRdt` or `additionalGids`; 1.1.0 for `netDevices` or 1.1's RDT
/// fields. 0.8.0 and 1.0.0 added no field, so no content needs them.
/// Podman 4.3 accepts up to 0.5.0.
pub fn required_version(spec: &Spec) -> &'static str {
    let edits = || {
        spec.devices
            .iter()
            .map(|d| &d.container_edits)
            .chain([&spec.container_edits])
    };
    if edits().any(|e| {
        !e.net_devices.is_empty()
            || e.intel_rdt
                .as_ref()
                .is_some_and(|r| r.schemata.is_some() || r.enable_monitoring)
    }) {
        return "1.1.0";
    }
    if edits().any(|e| e.intel_rdt.is_some() || !e.additional_gids.is_empty()) {
        return "0.7.0";
    }
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
        annotated.devices[0]
            .container_edits
            .additional_gids
            .push(44);
        assert_eq!(required_version(&annotated), "0.7.0");
        annotated.container_edits.intel_rdt = Some(IntelRdt {
            clos_id: Some("gpu".into()),
            ..IntelRdt::default()
        });
        assert_eq!(required_version(&annotated), "0.7.0");
        annotated.devices[0]
            .container_edits
            .net_devices
            .push(NetDevice {
                host_interface_name: "eth1".into(),
                name: "net0".into(),
            });
        assert_eq!(required_version(&annotated), "1.1.0");
        let mut rdt = spec(&["all"]);
        rdt.container_edits.intel_rdt = Some(IntelRdt {
            enable_monitoring: true,
            ..IntelRdt::default()
        });
        assert_eq!(required_version(&rdt), "1.1.0");
    }

    #[test]
    fn every_version_is_known_and_in_order() {
        let mut sorted = VERSIONS;
        sorted.sort();
        assert_eq!(sorted, VERSIONS);
        assert!(VERSIONS.contains(&"1.1.0") && VERSIONS.contains(&"1.0.0"));
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

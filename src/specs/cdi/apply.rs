//! Container edits applied to an OCI runtime spec (`config.json`), as a
//! CDI runtime applies a spec's edits: what the runtime wrapper writes, so
//! that the runtime itself creates the nodes, grants the device cgroup,
//! makes the mounts and runs our hook. The spec is edited as JSON: every
//! field we do not touch is kept as it was, in its order.

use super::spec::ContainerEdits;
use super::Error;
use crate::specs::cdi_hook_args::HOOK_COMMAND;
use serde_json::{json, Map, Value};

/// Result of editing.
pub type Result<T> = std::result::Result<T, Error>;

/// Whether `spec` already carries our hook: a spec we edited, left alone.
pub fn is_edited(spec: &Value) -> bool {
    ["createRuntime", "prestart"].iter().any(|stage| {
        spec.pointer(&format!("/hooks/{stage}"))
            .and_then(Value::as_array)
            .is_some_and(|hooks| {
                hooks
                    .iter()
                    .any(|h| h.pointer("/args/1").and_then(Value::as_str) == Some(HOOK_COMMAND))
            })
    })
}

/// The OCI hook stages a CDI hook may name.
pub const HOOK_STAGES: [&str; 6] = [
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

/// Applies `edits` to `spec` as CDI's library does (`ContainerEdits.Apply`):
/// a variable replaces the one of its name where it stands, else is
/// appended; a device node replaces the one at its path in `linux.devices`,
/// owned by the process's user unless it names its owner, with an allow
/// rule for a block or character node (`rwm` unless it says, none for
/// `none`); a mount replaces the one at its destination, and the mounts are
/// then ordered by depth, parents first, keeping their order otherwise;
/// hooks join their stage; `netDevices` fill `linux.netDevices`; `intelRdt`
/// sets `linux.intelRdt`; additional groups join the process's, except 0.
/// Nodes must be complete (type and numbers): see `registry`.
pub fn apply(spec: &mut Value, edits: &ContainerEdits) -> Result<()> {
    if let Some(hook) = edits
        .hooks
        .iter()
        .find(|h| !HOOK_STAGES.contains(&h.hook_name.as_str()))
    {
        return Err(Error::HookStage {
            stage: hook.hook_name.clone(),
        });
    }
    let root = object(spec, "the spec")?;
    let user_id = |key: &str| {
        root.get("process")
            .and_then(|p| p.pointer(&format!("/user/{key}")))
            .and_then(Value::as_u64)
            .filter(|id| *id > 0)
    };
    let (uid, gid) = (user_id("uid"), user_id("gid"));
    if !edits.env.is_empty() {
        let process = child_object(root, "process", "process")?;
        let env = child_array(process, "env", "process.env")?;
        for var in &edits.env {
            let name = env_name(var);
            match env
                .iter_mut()
                .find(|e| e.as_str().is_some_and(|e| env_name(e) == name))
            {
                Some(slot) => *slot = Value::String(var.clone()),
                None => env.push(Value::String(var.clone())),
            }
        }
    }
    if !edits.device_nodes.is_empty() {
        let linux = child_object(root, "linux", "linux")?;
        let devices = child_array(linux, "devices", "linux.devices")?;
        for node in &edits.device_nodes {
            let path = node.path.to_string_lossy();
            devices.retain(|d| d.get("path").and_then(Value::as_str) != Some(&path));
            let mut device = Map::new();
            device.insert("path".into(), Value::String(path.into_owned()));
            device.insert("type".into(), json!(node.kind.as_deref().unwrap_or("c")));
            device.insert("major".into(), json!(node.major.unwrap_or_default()));
            device.insert("minor".into(), json!(node.minor.unwrap_or_default()));
            if let Some(mode) = node.file_mode {
                device.insert("fileMode".into(), json!(mode));
            }
            if let Some(uid) = node.uid.map(u64::from).or(uid) {
                device.insert("uid".into(), json!(uid));
            }
            if let Some(gid) = node.gid.map(u64::from).or(gid) {
                device.insert("gid".into(), json!(gid));
            }
            devices.push(Value::Object(device));
        }
        let resources = child_object(linux, "resources", "linux.resources")?;
        let rules = child_array(resources, "devices", "linux.resources.devices")?;
        for node in &edits.device_nodes {
            let kind = node.kind.as_deref().unwrap_or("c");
            if !matches!(kind, "b" | "c") {
                continue;
            }
            let access = match node.permissions.as_deref() {
                None | Some("") => "rwm",
                Some("none") => "",
                Some(given) => given,
            };
            rules.push(json!({
                "allow": true,
                "type": kind,
                "major": node.major.unwrap_or_default(),
                "minor": node.minor.unwrap_or_default(),
                "access": access,
            }));
        }
    }
    if !edits.net_devices.is_empty() {
        let linux = child_object(root, "linux", "linux")?;
        let net = child_object(linux, "netDevices", "linux.netDevices")?;
        for dev in &edits.net_devices {
            net.insert(dev.host_interface_name.clone(), json!({"name": dev.name}));
        }
    }
    if !edits.mounts.is_empty() {
        let mounts = child_array(root, "mounts", "mounts")?;
        for mount in &edits.mounts {
            let destination = mount.container_path.to_string_lossy();
            mounts.retain(|m| m.get("destination").and_then(Value::as_str) != Some(&destination));
            let mut entry = Map::new();
            entry.insert("destination".into(), json!(mount.container_path));
            entry.insert(
                "type".into(),
                json!(mount.kind.as_deref().unwrap_or("bind")),
            );
            entry.insert("source".into(), json!(mount.host_path));
            if !mount.options.is_empty() {
                entry.insert("options".into(), json!(mount.options));
            }
            mounts.push(Value::Object(entry));
        }
        // Stable: equal depths keep their order.
        mounts.sort_by_key(|m| m.get("destination").and_then(Value::as_str).map(depth));
    }
    for hook in &edits.hooks {
        let hooks = child_object(root, "hooks", "hooks")?;
        let stage = child_array(hooks, &hook.hook_name, "a hooks stage")?;
        let mut entry = Map::new();
        entry.insert("path".into(), json!(hook.path));
        if !hook.args.is_empty() {
            entry.insert("args".into(), json!(hook.args));
        }
        if !hook.env.is_empty() {
            entry.insert("env".into(), json!(hook.env));
        }
        if let Some(timeout) = hook.timeout {
            entry.insert("timeout".into(), json!(timeout));
        }
        stage.push(Value::Object(entry));
    }
    if let Some(rdt) = &edits.intel_rdt {
        let linux = child_object(root, "linux", "linux")?;
        linux.insert("intelRdt".into(), json!(rdt));
    }
    let gids: Vec<u32> = edits
        .additional_gids
        .iter()
        .copied()
        .filter(|g| *g != 0)
        .collect();
    if !gids.is_empty() {
        let process = child_object(root, "process", "process")?;
        let user = child_object(process, "user", "process.user")?;
        let list = child_array(user, "additionalGids", "process.user.additionalGids")?;
        for gid in gids {
            if !list.iter().any(|g| g.as_u64() == Some(u64::from(gid))) {
                list.push(json!(gid));
            }
        }
    }
    Ok(())
}

/// A variable's name: what comes before its first `=`.
fn env_name(var: &str) -> &str {
    var.split_once('=').map_or(var, |(n, _)| n)
}

/// How many components a mount destination has, as CDI and Docker order them.
fn depth(destination: &str) -> usize {
    let mut clean: Vec<&str> = Vec::new();
    for component in destination.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                clean.pop();
            }
            name => clean.push(name),
        }
    }
    clean.len()
}

fn object<'a>(value: &'a mut Value, field: &'static str) -> Result<&'a mut Map<String, Value>> {
    value.as_object_mut().ok_or(Error::Shape {
        field,
        expected: "an object",
    })
}

fn child_object<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
    field: &'static str,
) -> Result<&'a mut Map<String, Value>> {
    let value = parent
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if value.is_null() {
        *value = Value::Object(Map::new());
    }
    object(value, field)
}

fn child_array<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
    field: &'static str,
) -> Result<&'a mut Vec<Value>> {
    let value = parent
        .entry(key.to_string())
        .or_insert_with(|| Value::Array(Vec::new()));
    if value.is_null() {
        *value = Value::Array(Vec::new());
    }
    value.as_array_mut().ok_or(Error::Shape {
        field,
        expected: "an array",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::specs::cdi::spec::{DeviceNode, Hook, Mount};

    fn edits() -> ContainerEdits {
        ContainerEdits {
            env: vec!["NVIDIA_VISIBLE_DEVICES=void".into()],
            device_nodes: vec![DeviceNode {
                path: "/dev/nvidia0".into(),
                kind: Some("c".into()),
                major: Some(195),
                minor: Some(0),
                file_mode: Some(0o666),
                permissions: Some("rw".into()),
                ..DeviceNode::default()
            }],
            hooks: vec![Hook {
                hook_name: "createRuntime".into(),
                path: "/usr/bin/oci-nvidia-hook".into(),
                args: vec!["oci-nvidia-hook".into(), HOOK_COMMAND.into()],
                env: vec!["PATH=/usr/bin".into()],
                timeout: None,
            }],
            mounts: vec![Mount {
                host_path: "/usr/lib/libcuda.so.535".into(),
                container_path: "/usr/lib/x86_64-linux-gnu/libcuda.so.535".into(),
                options: vec!["ro".into(), "bind".into()],
                kind: Some("bind".into()),
            }],
            ..ContainerEdits::default()
        }
    }

    #[test]
    fn edits_land_where_runc_reads_them_and_the_rest_is_kept_in_order() {
        let mut spec: Value = serde_json::from_str(
            r#"{"ociVersion":"1.0.2","zzz":{"b":1,"a":2},"process":{"env":["A=1","NVIDIA_VISIBLE_DEVICES=0"],"cwd":"/"},
                "root":{"path":"rootfs"},"linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}]},"x-unknown":true}}"#,
        )
        .unwrap();
        assert!(!is_edited(&spec));
        apply(&mut spec, &edits()).unwrap();
        assert_eq!(
            spec["process"]["env"],
            json!(["A=1", "NVIDIA_VISIBLE_DEVICES=void"])
        );
        assert_eq!(
            spec["linux"]["devices"],
            json!([{"path":"/dev/nvidia0","type":"c","major":195,"minor":0,"fileMode":438}])
        );
        assert_eq!(
            spec["linux"]["resources"]["devices"],
            json!([{"allow":false,"access":"rwm"},{"allow":true,"type":"c","major":195,"minor":0,"access":"rw"}])
        );
        assert_eq!(spec["mounts"][0]["options"], json!(["ro", "bind"]));
        assert_eq!(
            spec["hooks"]["createRuntime"][0]["env"],
            json!(["PATH=/usr/bin"])
        );
        assert!(is_edited(&spec));
        // Untouched fields keep their order and content.
        let text = serde_json::to_string(&spec).unwrap();
        assert!(
            text.starts_with(r#"{"ociVersion":"1.0.2","zzz":{"b":1,"a":2},"process""#),
            "{text}"
        );
        assert!(text.contains(r#""x-unknown":true"#), "{text}");
    }

    #[test]
    fn a_spec_of_the_wrong_shape_is_refused_naming_the_field() {
        let mut spec = json!({"process": {"env": "A=1"}});
        let err = apply(&mut spec, &edits());
        assert!(
            matches!(
                err,
                Err(Error::Shape {
                    field: "process.env",
                    expected: "an array"
                })
            ),
            "{err:?}"
        );
    }

    #[test]
    fn cdi_edits_replace_in_place_order_mounts_and_take_the_processs_owner() {
        use crate::specs::cdi::spec::{IntelRdt, NetDevice};
        let mut spec = json!({
            "process": {"user": {"uid": 1000, "gid": 1000, "additionalGids": [5]},
                        "env": ["PATH=/bin", "X=old", "Y=1"]},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                       {"destination": "/etc/x", "type": "bind", "source": "/old"},
                       {"destination": "/dev/pts", "type": "devpts", "source": "devpts"}],
            "linux": {"devices": [{"path": "/dev/x", "type": "c", "major": 1, "minor": 1}]}
        });
        let edits = ContainerEdits {
            env: vec!["X=new".into(), "Z=2".into()],
            device_nodes: vec![
                DeviceNode {
                    path: "/dev/x".into(),
                    kind: Some("c".into()),
                    major: Some(10),
                    minor: Some(200),
                    permissions: Some("none".into()),
                    ..DeviceNode::default()
                },
                DeviceNode {
                    path: "/dev/fifo".into(),
                    kind: Some("p".into()),
                    uid: Some(0),
                    ..DeviceNode::default()
                },
            ],
            mounts: vec![
                Mount {
                    host_path: "/host/a/b".into(),
                    container_path: "/a/b/c".into(),
                    ..Mount::default()
                },
                Mount {
                    host_path: "/new".into(),
                    container_path: "/etc/x".into(),
                    ..Mount::default()
                },
            ],
            additional_gids: vec![0, 5, 44],
            intel_rdt: Some(IntelRdt {
                clos_id: Some("gpu".into()),
                ..IntelRdt::default()
            }),
            net_devices: vec![NetDevice {
                host_interface_name: "eth1".into(),
                name: "net0".into(),
            }],
            ..ContainerEdits::default()
        };
        apply(&mut spec, &edits).unwrap();
        assert_eq!(
            spec["process"]["env"],
            json!(["PATH=/bin", "X=new", "Y=1", "Z=2"])
        );
        assert_eq!(
            spec["linux"]["devices"],
            json!([{"path":"/dev/x","type":"c","major":10,"minor":200,"uid":1000,"gid":1000},
                   {"path":"/dev/fifo","type":"p","major":0,"minor":0,"uid":0,"gid":1000}])
        );
        assert_eq!(
            spec["linux"]["resources"]["devices"],
            json!([{"allow":true,"type":"c","major":10,"minor":200,"access":""}]),
            "a FIFO gets no cgroup rule, none grants nothing"
        );
        let destinations: Vec<&str> = spec["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["destination"].as_str().unwrap())
            .collect();
        assert_eq!(destinations, ["/proc", "/dev/pts", "/etc/x", "/a/b/c"]);
        assert_eq!(spec["mounts"][2]["source"], "/new");
        assert_eq!(spec["process"]["user"]["additionalGids"], json!([5, 44]));
        assert_eq!(spec["linux"]["intelRdt"], json!({"closID": "gpu"}));
        assert_eq!(
            spec["linux"]["netDevices"],
            json!({"eth1": {"name": "net0"}})
        );
    }

    #[test]
    fn a_hook_at_no_oci_stage_is_refused_before_anything_changes() {
        let mut spec = json!({"process": {"env": []}});
        let mut bad = edits();
        bad.hooks[0].hook_name = "preStart".into();
        let err = apply(&mut spec, &bad);
        assert!(
            matches!(&err, Err(Error::HookStage { stage }) if stage == "preStart"),
            "{err:?}"
        );
        assert_eq!(spec, json!({"process": {"env": []}}));
    }
}

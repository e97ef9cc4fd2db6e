//! Container edits applied to an OCI runtime spec (`config.json`), as a
//! CDI runtime applies a spec's edits: what the runtime wrapper writes, so
//! that the runtime itself creates the nodes, grants the device cgroup,
//! makes the mounts and runs our hook. The spec is edited as JSON: every
//! field we do not touch is kept as it was, in its order.

use super::spec::ContainerEdits;
use super::Error;
use crate::callback::HOOK_COMMAND;
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

/// Applies `edits` to `spec`: environment variables replace those of the
/// same name; device nodes join `linux.devices` (one per path) with an
/// allow rule each in `linux.resources.devices`; mounts are appended; hooks
/// join their stage.
pub fn apply(spec: &mut Value, edits: &ContainerEdits) -> Result<()> {
    let root = object(spec, "the spec")?;
    if !edits.env.is_empty() {
        let process = child_object(root, "process", "process")?;
        let env = child_array(process, "env", "process.env")?;
        for var in &edits.env {
            let name = var.split_once('=').map_or(var.as_str(), |(n, _)| n);
            env.retain(|e| {
                e.as_str()
                    .is_none_or(|e| e.split_once('=').map_or(e, |(n, _)| n) != name)
            });
            env.push(Value::String(var.clone()));
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
            device.insert("uid".into(), json!(node.uid.unwrap_or(0)));
            device.insert("gid".into(), json!(node.gid.unwrap_or(0)));
            devices.push(Value::Object(device));
        }
        let resources = child_object(linux, "resources", "linux.resources")?;
        let rules = child_array(resources, "devices", "linux.resources.devices")?;
        for node in &edits.device_nodes {
            rules.push(json!({
                "allow": true,
                "type": node.kind.as_deref().unwrap_or("c"),
                "major": node.major.unwrap_or_default(),
                "minor": node.minor.unwrap_or_default(),
                "access": node.permissions.as_deref().unwrap_or("rwm"),
            }));
        }
    }
    if !edits.mounts.is_empty() {
        let mounts = child_array(root, "mounts", "mounts")?;
        for mount in &edits.mounts {
            mounts.push(json!({
                "destination": mount.container_path,
                "type": mount.kind.as_deref().unwrap_or("bind"),
                "source": mount.host_path,
                "options": mount.options,
            }));
        }
    }
    for hook in &edits.hooks {
        let hooks = child_object(root, "hooks", "hooks")?;
        let stage = child_array(hooks, &hook.hook_name, "a hooks stage")?;
        let mut entry = Map::new();
        entry.insert("path".into(), json!(hook.path));
        entry.insert("args".into(), json!(hook.args));
        entry.insert("env".into(), json!(hook.env));
        if let Some(timeout) = hook.timeout {
            entry.insert("timeout".into(), json!(timeout));
        }
        stage.push(Value::Object(entry));
    }
    Ok(())
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
    use crate::cdi::spec::{DeviceNode, Hook, Mount};

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
            json!([{"path":"/dev/nvidia0","type":"c","major":195,"minor":0,"fileMode":438,"uid":0,"gid":0}])
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
}

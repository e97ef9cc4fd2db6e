//! CDI's rules beyond the schema's shape, as its Go library applies them
//! when a runtime loads a spec (`pkg/cdi`: the spec's `validate`, the
//! vendor, class and device name parsers, the edits' `Validate`; `specs-go`:
//! the version a spec's content needs): a known `cdiVersion` high enough for
//! the content, `vendor/class` and device name syntax, unique names, no
//! device without edits, `NAME=VALUE` variables, OCI hook stages, node types
//! and permissions. Plus absolute paths, which the OCI runtime spec asks of
//! what the edits become. Reads the document only, never the host; values
//! of the wrong type were reported by `shape` and are skipped here.

use std::collections::hash_map::{Entry, HashMap};

use serde_json::Value;

use super::{edits_of, field, list, Problem};
use crate::specs::cdi::apply::HOOK_STAGES;
use crate::specs::cdi::name::{device_name_problem, kind_problem};
use crate::specs::cdi::spec::{required_version, Spec, VERSIONS};

/// Node types CDI accepts (`""` lets the runtime take the host node's).
const NODE_TYPES: [&str; 5] = ["", "b", "c", "u", "p"];

/// Checks everything CDI's parser checks beyond the shape. `spec` is the
/// document read as our types, when it could be.
pub(super) fn check(doc: &Value, spec: Option<&Spec>, problems: &mut Vec<Problem>) {
    if let Some(version) = doc.get("cdiVersion").and_then(Value::as_str) {
        check_version(version, spec, problems);
    }
    if let Some(kind) = doc.get("kind").and_then(Value::as_str) {
        if let Some(why) = kind_problem(kind) {
            problems.push(Problem::new("kind", why));
        }
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, (at, device)) in list(doc, "", "devices").into_iter().enumerate() {
        if let Some(name) = device.get("name").and_then(Value::as_str) {
            let name_at = field(&at, "name");
            if let Some(why) = device_name_problem(name) {
                problems.push(Problem::new(&name_at, why));
            }
            match seen.entry(name) {
                Entry::Occupied(first) => problems.push(Problem::new(
                    &name_at,
                    format!(
                        "{name:?} also names devices[{}]: device names must be unique",
                        first.get()
                    ),
                )),
                Entry::Vacant(slot) => {
                    slot.insert(i);
                }
            }
        }
        if let Some(edits) = device.get("containerEdits").filter(|e| e.is_object()) {
            if is_empty(edits) {
                problems.push(Problem::new(
                    &field(&at, "containerEdits"),
                    "a device with no edits: CDI refuses it",
                ));
            }
        }
    }
    for (at, edits) in edits_of(doc) {
        check_edits(edits, &at, problems);
    }
}

/// `cdiVersion`: one CDI knows, and one that can express the content.
fn check_version(version: &str, spec: Option<&Spec>, problems: &mut Vec<Problem>) {
    let Some(have) = rank(version) else {
        problems.push(Problem::new(
            "cdiVersion",
            format!(
                "unknown CDI version {version:?}: CDI knows {}",
                VERSIONS.join(", ")
            ),
        ));
        return;
    };
    let Some(spec) = spec else {
        return;
    };
    let needed = required_version(spec);
    if rank(needed).is_some_and(|need| have < need) {
        problems.push(Problem::new(
            "cdiVersion",
            format!("{version} cannot express this spec, which needs {needed} at least"),
        ));
    }
}

/// A version's place in [`VERSIONS`], which is in order.
fn rank(version: &str) -> Option<usize> {
    VERSIONS.iter().position(|v| *v == version)
}

/// Whether a device's edits add nothing: CDI refuses such a device.
fn is_empty(edits: &Value) -> bool {
    let none = |key: &str| match edits.get(key) {
        None | Some(Value::Null) => true,
        Some(Value::Array(items)) => items.is_empty(),
        Some(_) => false,
    };
    [
        "env",
        "deviceNodes",
        "hooks",
        "mounts",
        "additionalGids",
        "netDevices",
    ]
    .into_iter()
    .all(none)
        && edits.get("intelRdt").is_none_or(Value::is_null)
}

/// One `containerEdits`' values.
fn check_edits(edits: &Value, at: &str, problems: &mut Vec<Problem>) {
    check_env(edits, at, problems);
    for (node_at, node) in list(edits, at, "deviceNodes") {
        let get = |key| node.get(key).and_then(Value::as_str);
        absolute(get("path"), &field(&node_at, "path"), problems);
        if let Some(host) = get("hostPath") {
            absolute(Some(host), &field(&node_at, "hostPath"), problems);
        }
        if let Some(kind) = get("type").filter(|t| !NODE_TYPES.contains(t)) {
            problems.push(Problem::new(
                &field(&node_at, "type"),
                format!("{kind:?} is not a node type CDI takes (b, c, u or p)"),
            ));
        }
        if let Some(perms) =
            get("permissions").filter(|p| *p != "none" && p.chars().any(|c| !"rwm".contains(c)))
        {
            problems.push(Problem::new(
                &field(&node_at, "permissions"),
                format!("{perms:?}: device cgroup permissions are r, w and m only, or none"),
            ));
        }
    }
    for (mount_at, mount) in list(edits, at, "mounts") {
        let get = |key| mount.get(key).and_then(Value::as_str);
        if is_bind(mount) {
            absolute(get("hostPath"), &field(&mount_at, "hostPath"), problems);
        } else if get("hostPath") == Some("") {
            problems.push(Problem::new(&field(&mount_at, "hostPath"), "empty"));
        }
        absolute(
            get("containerPath"),
            &field(&mount_at, "containerPath"),
            problems,
        );
    }
    for (hook_at, hook) in list(edits, at, "hooks") {
        if let Some(stage) = hook
            .get("hookName")
            .and_then(Value::as_str)
            .filter(|s| !HOOK_STAGES.contains(s))
        {
            problems.push(Problem::new(
                &field(&hook_at, "hookName"),
                format!(
                    "{stage:?} is not an OCI hook stage ({})",
                    HOOK_STAGES.join(", ")
                ),
            ));
        }
        absolute(
            hook.get("path").and_then(Value::as_str),
            &field(&hook_at, "path"),
            problems,
        );
        check_env(hook, &hook_at, problems);
    }
    check_net_devices(edits, at, problems);
}

/// `netDevices` (CDI 1.1.0): both names given, and neither taken twice.
fn check_net_devices(edits: &Value, at: &str, problems: &mut Vec<Problem>) {
    let mut hosts: HashMap<&str, usize> = HashMap::new();
    let mut names: HashMap<&str, usize> = HashMap::new();
    for (i, (dev_at, dev)) in list(edits, at, "netDevices").into_iter().enumerate() {
        for (key, seen) in [("hostInterfaceName", &mut hosts), ("name", &mut names)] {
            let Some(value) = dev.get(key).and_then(Value::as_str) else {
                continue;
            };
            let key_at = field(&dev_at, key);
            if value.is_empty() {
                problems.push(Problem::new(&key_at, "empty"));
            } else if let Some(first) = seen.insert(value, i) {
                problems.push(Problem::new(
                    &key_at,
                    format!("{value:?} is also netDevices[{first}]'s: each interface goes in once"),
                ));
            }
        }
    }
}

/// `env` of edits or of a hook: `NAME=VALUE` each, the name not empty.
fn check_env(parent: &Value, at: &str, problems: &mut Vec<Problem>) {
    for (var_at, var) in list(parent, at, "env") {
        if let Some(var) = var.as_str().filter(|v| v.find('=').is_none_or(|i| i == 0)) {
            problems.push(Problem::new(&var_at, format!("{var:?} is not NAME=VALUE")));
        }
    }
}

/// Whether a mount binds a host path: CDI's `type` absent or `bind`, or a
/// `bind` option. Other mounts (tmpfs, proc) name a source, not a path.
pub(super) fn is_bind(mount: &Value) -> bool {
    let binds = |s: &str| matches!(s, "bind" | "rbind");
    mount.get("type").and_then(Value::as_str).is_none_or(binds)
        || mount
            .get("options")
            .and_then(Value::as_array)
            .is_some_and(|o| o.iter().filter_map(Value::as_str).any(binds))
}

/// A path the OCI runtime spec wants absolute; absent ones were reported
/// by `shape` when required.
fn absolute(path: Option<&str>, at: &str, problems: &mut Vec<Problem>) {
    match path {
        Some("") => problems.push(Problem::new(at, "empty: CDI wants an absolute path")),
        Some(p) if !p.starts_with('/') => {
            problems.push(Problem::new(at, format!("{p:?} is not an absolute path")))
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn problems(doc: &Value) -> Vec<String> {
        let spec: Option<Spec> = serde_json::from_value(doc.clone()).ok();
        let mut found = Vec::new();
        check(doc, spec.as_ref(), &mut found);
        found.iter().map(ToString::to_string).collect()
    }

    fn node(path: &str) -> Value {
        json!({"deviceNodes": [{"path": path}]})
    }

    fn doc(version: &str, names: &[&str]) -> Value {
        let devices: Vec<Value> = names
            .iter()
            .map(|n| json!({"name": n, "containerEdits": node("/dev/x")}))
            .collect();
        json!({"cdiVersion": version, "kind": "nvidia.com/gpu", "devices": devices})
    }

    #[test]
    fn vendor_class_and_device_names_follow_cdis_parser() {
        for good in ["nvidia.com/gpu", "a/b", "vendor_x.io/class-1", "a-b.c/x_y"] {
            assert_eq!(kind_problem(good), None, "{good}");
        }
        for (bad, why) in [
            ("nvidia.com", "is not vendor/class"),
            ("/gpu", "is not vendor/class"),
            ("nvidia.com/", "is not vendor/class"),
            (
                "1vendor/gpu",
                "the vendor must start with a letter, not '1'",
            ),
            (
                "vendor-/gpu",
                "the vendor must end with a letter or digit, not '-'",
            ),
            ("ven dor/gpu", "the vendor holds ' '"),
            (
                "nvidia.com/_gpu",
                "the class must start with a letter, not '_'",
            ),
            ("nvidia.com/gpu/x", "the class holds '/'"),
            ("nvidia.com/gpu:", "the class holds ':'"),
        ] {
            let got = kind_problem(bad).unwrap_or_default();
            assert!(got.contains(why), "{bad}: {got}");
        }
        for good in ["0", "GPU-6d48d5d1-733b", "0:1", "MIG-a.b_c", "all", "x"] {
            assert_eq!(device_name_problem(good), None, "{good}");
        }
        for (bad, why) in [
            ("", "the device name is empty"),
            ("-0", "must start with a letter or digit, not '-'"),
            ("a b", "holds ' '"),
            ("gpu/0", "holds '/'"),
            ("gpu-", "must end with a letter or digit, not '-'"),
        ] {
            let got = device_name_problem(bad).unwrap_or_default();
            assert!(got.contains(why), "{bad:?}: {got}");
        }
    }

    #[test]
    fn the_version_must_be_known_and_express_the_content() {
        assert_eq!(problems(&doc("0.5.0", &["0", "all"])), Vec::<String>::new());
        assert_eq!(
            problems(&doc("0.4.0", &["0", "all"])),
            ["cdiVersion: 0.4.0 cannot express this spec, which needs 0.5.0 at least"]
        );
        assert_eq!(
            problems(&doc("1.2", &["a"])),
            ["cdiVersion: unknown CDI version \"1.2\": CDI knows 0.1.0, 0.2.0, 0.3.0, 0.4.0, 0.5.0, 0.6.0, 0.7.0, 0.8.0, 1.0.0, 1.1.0"]
        );
        let mut dotted = doc("0.5.0", &["a"]);
        dotted["kind"] = json!("nvidia.com/gpu.x");
        assert_eq!(
            problems(&dotted),
            ["cdiVersion: 0.5.0 cannot express this spec, which needs 0.6.0 at least"]
        );
        let mut rdt = doc("0.6.0", &["a"]);
        rdt["containerEdits"] = json!({"intelRdt": {"closID": "x"}});
        assert_eq!(
            problems(&rdt),
            ["cdiVersion: 0.6.0 cannot express this spec, which needs 0.7.0 at least"]
        );
        for version in ["0.8.0", "1.0.0", "1.1.0"] {
            assert_eq!(
                problems(&doc(version, &["0"])),
                Vec::<String>::new(),
                "{version}"
            );
        }
        let mut net = doc("1.0.0", &["a"]);
        net["devices"][0]["containerEdits"]["netDevices"] = json!([
            {"hostInterfaceName": "eth1", "name": "net0"},
            {"hostInterfaceName": "eth1", "name": ""}
        ]);
        assert_eq!(
            problems(&net),
            [
                "cdiVersion: 1.0.0 cannot express this spec, which needs 1.1.0 at least",
                "devices[0].containerEdits.netDevices[1].hostInterfaceName: \"eth1\" is also netDevices[0]'s: each interface goes in once",
                "devices[0].containerEdits.netDevices[1].name: empty",
            ]
        );
        net["cdiVersion"] = json!("1.1.0");
        net["devices"][0]["containerEdits"]["netDevices"] =
            json!([{"hostInterfaceName": "eth1", "name": "net0"}]);
        assert_eq!(problems(&net), Vec::<String>::new());
    }

    #[test]
    fn names_are_unique_and_devices_edit_something() {
        let mut d = doc("0.5.0", &["0", "1", "0"]);
        d["devices"][1]["containerEdits"] = json!({"env": []});
        assert_eq!(
            problems(&d),
            [
                "devices[1].containerEdits: a device with no edits: CDI refuses it",
                "devices[2].name: \"0\" also names devices[0]: device names must be unique",
            ]
        );
    }

    #[test]
    fn edits_need_absolute_paths_known_stages_and_name_value_pairs() {
        let mut d = doc("0.5.0", &["a"]);
        d["containerEdits"] = json!({
            "env": ["A=1", "=x", "B"],
            "deviceNodes": [{"path": "dev/x", "hostPath": "", "type": "x", "permissions": "rwx"}],
            "mounts": [
                {"hostPath": "lib", "containerPath": "/lib"},
                {"hostPath": "tmpfs", "containerPath": "tmp", "type": "tmpfs"}
            ],
            "hooks": [{"hookName": "preStart", "path": "hook", "env": ["PATH"]}]
        });
        assert_eq!(
            problems(&d),
            [
                "containerEdits.env[1]: \"=x\" is not NAME=VALUE",
                "containerEdits.env[2]: \"B\" is not NAME=VALUE",
                "containerEdits.deviceNodes[0].path: \"dev/x\" is not an absolute path",
                "containerEdits.deviceNodes[0].hostPath: empty: CDI wants an absolute path",
                "containerEdits.deviceNodes[0].type: \"x\" is not a node type CDI takes (b, c, u or p)",
                "containerEdits.deviceNodes[0].permissions: \"rwx\": device cgroup permissions are r, w and m only, or none",
                "containerEdits.mounts[0].hostPath: \"lib\" is not an absolute path",
                "containerEdits.mounts[1].containerPath: \"tmp\" is not an absolute path",
                "containerEdits.hooks[0].hookName: \"preStart\" is not an OCI hook stage (prestart, createRuntime, createContainer, startContainer, poststart, poststop)",
                "containerEdits.hooks[0].path: \"hook\" is not an absolute path",
                "containerEdits.hooks[0].env[0]: \"PATH\" is not NAME=VALUE",
            ]
        );
    }
}

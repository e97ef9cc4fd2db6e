//! The CDI JSON schema (`schema.json`, `defs.json`), written out by hand:
//! which fields each object takes, of which type, and which are required.
//! Fields the schema leaves open are refused here when CDI's own parser
//! refuses them (it reads specs with `yaml.UnmarshalStrict`, so a field it
//! does not know fails the whole spec). Only the shape: what values mean is
//! `rules`' business.

use serde_json::Value;

use super::{field, index, Problem};

/// What a value must be.
#[derive(Debug, Clone, Copy)]
pub(super) enum Shape {
    /// A string.
    String,
    /// `true` or `false`.
    Bool,
    /// An integer within `i64`.
    Int64,
    /// An integer within `u32`.
    Uint32,
    /// A list of values of one shape.
    ArrayOf(&'static Shape),
    /// An object of string values (annotations).
    StringMap,
    /// An object with these fields, and no other.
    Object(&'static [Field]),
}

/// One field of an object.
#[derive(Debug, Clone, Copy)]
pub(super) struct Field {
    name: &'static str,
    shape: Shape,
    required: bool,
}

const fn optional(name: &'static str, shape: Shape) -> Field {
    Field {
        name,
        shape,
        required: false,
    }
}

const fn required(name: &'static str, shape: Shape) -> Field {
    Field {
        name,
        shape,
        required: true,
    }
}

const STRINGS: Shape = Shape::ArrayOf(&Shape::String);

/// `defs.json#/definitions/DeviceNode`, with `fileMode` (CDI's Go type has
/// it; the schema leaves it open).
const DEVICE_NODE: &[Field] = &[
    required("path", Shape::String),
    optional("hostPath", Shape::String),
    optional("type", Shape::String),
    optional("major", Shape::Int64),
    optional("minor", Shape::Int64),
    optional("fileMode", Shape::Uint32),
    optional("permissions", Shape::String),
    optional("uid", Shape::Uint32),
    optional("gid", Shape::Uint32),
];

/// `defs.json#/definitions/Mount`.
const MOUNT: &[Field] = &[
    required("hostPath", Shape::String),
    required("containerPath", Shape::String),
    optional("options", STRINGS),
    optional("type", Shape::String),
];

/// `defs.json#/definitions/Hook`.
const HOOK: &[Field] = &[
    required("hookName", Shape::String),
    required("path", Shape::String),
    optional("args", STRINGS),
    optional("env", STRINGS),
    optional("timeout", Shape::Uint32),
];

/// `containerEdits.intelRdt` (CDI 0.7.0; `schemata` and `enableMonitoring` 1.1.0).
const INTEL_RDT: &[Field] = &[
    optional("closID", Shape::String),
    optional("l3CacheSchema", Shape::String),
    optional("memBwSchema", Shape::String),
    optional("schemata", STRINGS),
    optional("enableCMT", Shape::Bool),
    optional("enableMBM", Shape::Bool),
    optional("enableMonitoring", Shape::Bool),
];

/// `containerEdits.netDevices[]` (CDI 1.1.0).
const NET_DEVICE: &[Field] = &[
    required("hostInterfaceName", Shape::String),
    required("name", Shape::String),
];

/// `defs.json#/definitions/containerEdits`, with 0.7.0's `additionalGids`.
/// The schema's `env` items carry a misspelt `ref`, so it checks nothing
/// there; CDI's Go type is a list of strings, which is what we ask.
pub(super) const EDITS: &[Field] = &[
    optional("env", STRINGS),
    optional("deviceNodes", Shape::ArrayOf(&Shape::Object(DEVICE_NODE))),
    optional("hooks", Shape::ArrayOf(&Shape::Object(HOOK))),
    optional("mounts", Shape::ArrayOf(&Shape::Object(MOUNT))),
    optional("intelRdt", Shape::Object(INTEL_RDT)),
    optional("additionalGids", Shape::ArrayOf(&Shape::Uint32)),
    optional("netDevices", Shape::ArrayOf(&Shape::Object(NET_DEVICE))),
];

/// `schema.json#/properties/devices/items`.
const DEVICE: &[Field] = &[
    required("name", Shape::String),
    optional("annotations", Shape::StringMap),
    required("containerEdits", Shape::Object(EDITS)),
];

/// `schema.json`: the document.
pub(super) const SPEC: Shape = Shape::Object(&[
    required("cdiVersion", Shape::String),
    required("kind", Shape::String),
    optional("annotations", Shape::StringMap),
    required("devices", Shape::ArrayOf(&Shape::Object(DEVICE))),
    optional("containerEdits", Shape::Object(EDITS)),
]);

/// Checks `value`, found at `at`, against `shape`, adding a problem for
/// each mismatch; goes on into the parts that have the right type.
pub(super) fn check(value: &Value, shape: Shape, at: &str, problems: &mut Vec<Problem>) {
    let wrong = |wanted: &str| Problem::new(at, format!("is {}, CDI wants {wanted}", what(value)));
    match shape {
        Shape::String if !value.is_string() => problems.push(wrong("a string")),
        Shape::Bool if !value.is_boolean() => problems.push(wrong("true or false")),
        Shape::Int64 => integer(
            value,
            at,
            i64::MIN as i128,
            i64::MAX as i128,
            "int64",
            problems,
        ),
        Shape::Uint32 => integer(value, at, 0, u32::MAX as i128, "uint32", problems),
        Shape::ArrayOf(item) => match value {
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    check(v, *item, &index(at, i), problems);
                }
            }
            _ => problems.push(wrong("a list")),
        },
        Shape::StringMap => match value {
            Value::Object(map) => {
                for (key, v) in map {
                    check(v, Shape::String, &field(at, key), problems);
                }
            }
            _ => problems.push(wrong("an object of strings")),
        },
        Shape::Object(fields) => match value {
            Value::Object(map) => {
                for f in fields {
                    match map.get(f.name) {
                        Some(v) => check(v, f.shape, &field(at, f.name), problems),
                        None if f.required => problems
                            .push(Problem::new(&field(at, f.name), "missing: CDI requires it")),
                        None => {}
                    }
                }
                for key in map.keys() {
                    if !fields.iter().any(|f| f.name == key) {
                        problems.push(Problem::new(
                            &field(at, key),
                            "unknown field: CDI's parser refuses a spec with a field it does not know",
                        ));
                    }
                }
            }
            _ => problems.push(wrong("an object")),
        },
        Shape::String | Shape::Bool => {}
    }
}

/// An integer within `min..=max`. `3.0` is none: the schema would take
/// it, but CDI's Go types (`int64`, `uint32`) refuse it.
fn integer(value: &Value, at: &str, min: i128, max: i128, name: &str, problems: &mut Vec<Problem>) {
    let n = match value {
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from)),
        _ => None,
    };
    match n {
        None => problems.push(Problem::new(
            at,
            format!("is {}, CDI wants an integer ({name})", what(value)),
        )),
        Some(n) if n < min || n > max => problems.push(Problem::new(
            at,
            format!("{n} is out of range for {name} ({min} to {max})"),
        )),
        Some(_) => {}
    }
}

/// A value's type in words, with the value when short, for messages.
pub(super) fn what(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("{b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.len() <= 64 => format!("the string {s:?}"),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn problems(doc: Value) -> Vec<String> {
        let mut found = Vec::new();
        check(&doc, SPEC, "", &mut found);
        found.iter().map(ToString::to_string).collect()
    }

    fn minimal() -> Value {
        json!({
            "cdiVersion": "0.3.0",
            "kind": "vendor.com/device",
            "devices": [{"name": "a", "containerEdits": {"deviceNodes": [{"path": "/dev/card1"}]}}]
        })
    }

    #[test]
    fn the_schemas_minimal_example_has_the_right_shape() {
        assert_eq!(problems(minimal()), Vec::<String>::new());
    }

    #[test]
    fn required_fields_are_named_where_they_are_missing() {
        assert_eq!(
            problems(json!({})),
            [
                "cdiVersion: missing: CDI requires it",
                "kind: missing: CDI requires it",
                "devices: missing: CDI requires it"
            ]
        );
        let mut doc = minimal();
        doc["devices"][0]["containerEdits"] = json!({
            "deviceNodes": [{"hostPath": "/dev/x"}],
            "mounts": [{"hostPath": "/a"}],
            "hooks": [{"path": "/bin/true"}]
        });
        assert_eq!(
            problems(doc),
            [
                "devices[0].containerEdits.deviceNodes[0].path: missing: CDI requires it",
                "devices[0].containerEdits.hooks[0].hookName: missing: CDI requires it",
                "devices[0].containerEdits.mounts[0].containerPath: missing: CDI requires it"
            ]
        );
    }

    #[test]
    fn wrong_types_and_ranges_are_refused_with_the_value() {
        let mut doc = minimal();
        doc["kind"] = json!(7);
        doc["devices"][0]["containerEdits"]["deviceNodes"][0] = json!({"path": "/dev/x", "major": "195", "minor": 1.5, "uid": -1, "gid": 4294967296u64});
        doc["devices"][0]["containerEdits"]["hooks"] =
            json!([{"hookName": "prestart", "path": "/p", "args": "a b", "timeout": 3.0}]);
        assert_eq!(
            problems(doc),
            [
                "kind: is the number 7, CDI wants a string",
                "devices[0].containerEdits.deviceNodes[0].major: is the string \"195\", CDI wants an integer (int64)",
                "devices[0].containerEdits.deviceNodes[0].minor: is the number 1.5, CDI wants an integer (int64)",
                "devices[0].containerEdits.deviceNodes[0].uid: -1 is out of range for uint32 (0 to 4294967295)",
                "devices[0].containerEdits.deviceNodes[0].gid: 4294967296 is out of range for uint32 (0 to 4294967295)",
                "devices[0].containerEdits.hooks[0].args: is the string \"a b\", CDI wants a list",
                "devices[0].containerEdits.hooks[0].timeout: is the number 3.0, CDI wants an integer (uint32)",
            ]
        );
    }

    #[test]
    fn unknown_fields_are_refused_as_cdis_strict_parser_does() {
        let mut doc = minimal();
        doc["extra"] = json!(1);
        doc["devices"][0]["containerEdits"]["deviceNodes"][0]["weird key"] = json!(true);
        assert_eq!(
            problems(doc),
            [
                "devices[0].containerEdits.deviceNodes[0][\"weird key\"]: unknown field: CDI's parser refuses a spec with a field it does not know",
                "extra: unknown field: CDI's parser refuses a spec with a field it does not know",
            ]
        );
    }

    #[test]
    fn later_versions_fields_have_a_shape_too() {
        let mut doc = minimal();
        doc["annotations"] = json!({"a": "b", "c": 1});
        doc["containerEdits"] =
            json!({"intelRdt": {"enableCMT": "yes"}, "additionalGids": [5, -5]});
        assert_eq!(
            problems(doc),
            [
                "annotations.c: is the number 1, CDI wants a string",
                "containerEdits.intelRdt.enableCMT: is the string \"yes\", CDI wants true or false",
                "containerEdits.additionalGids[1]: -5 is out of range for uint32 (0 to 4294967295)",
            ]
        );
    }

    #[test]
    fn a_document_that_is_not_an_object_is_one_problem() {
        assert_eq!(
            problems(json!([1])),
            ["the document is a list, CDI wants an object"]
        );
        assert_eq!(
            problems(Value::Null),
            ["the document is null, CDI wants an object"]
        );
    }
}

//! `cdi validate`: checks a CDI spec, ours or another vendor's, YAML or JSON,
//! against the CDI schema (`shape`, written by hand), CDI's own parser rules
//! (`rules`) and this host (`host`), and reports every problem it finds,
//! each at the JSON path of the offending item, rather than stopping at the
//! first. It only reads: it never writes, and never opens or runs what a
//! spec names.

mod host;
mod kinds;
mod rules;
mod shape;

use std::fmt;

use serde_json::Value;

pub use host::Host;
pub use kinds::HostDevices;

use super::spec::Spec;
use crate::config::Config;
use crate::planning::planner;
use crate::planning::request::Capabilities;

/// One thing wrong with a spec: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The JSON path of the offending item, e.g.
    /// `devices[2].containerEdits.deviceNodes[0]`; empty for the document.
    pub at: String,
    /// What is wrong, in words.
    pub what: String,
}

impl Problem {
    fn new(at: &str, what: impl Into<String>) -> Problem {
        Problem {
            at: at.to_string(),
            what: what.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.at.is_empty() {
            write!(f, "the document {}", self.what)
        } else {
            write!(f, "{}: {}", self.at, self.what)
        }
    }
}

/// What checking one spec found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Every problem, in document order within each kind of check.
    pub problems: Vec<Problem>,
    /// How many devices the spec lists.
    pub devices: usize,
    /// Its `cdiVersion`, when it has one.
    pub cdi_version: Option<String>,
}

/// Checks the spec `text` against the schema and CDI's rules, without
/// looking at the host.
pub fn check(text: &str) -> Report {
    check_document(text).0
}

/// Checks the spec `text` against the schema, CDI's rules and `host`.
pub fn validate(text: &str, host: &mut Host<'_>) -> Report {
    let (mut report, doc) = check_document(text);
    if let Some(doc) = doc {
        host::check(&doc, host, &mut report.problems);
        kinds::check(&doc, host.devices, &mut report.problems);
    }
    report
}

/// What the running driver says of the IMEX channels and each GPU's DRM
/// nodes, for NVIDIA's kinds; the error in words when there is no driver.
pub fn host_devices(config: &Config) -> Result<HostDevices, String> {
    let scope = Capabilities::parse("graphics").map_err(|e| e.to_string())?;
    let inventory = planner::inventory(config, &scope).map_err(|e| e.to_string())?;
    let gpu_drm = inventory
        .gpus
        .iter()
        .map(|gpu| {
            let nodes = inventory
                .drm_of(&gpu.bus)
                .map(|drm| drm.nodes.iter().map(|n| n.path.clone()).collect())
                .unwrap_or_default();
            (gpu.minor, nodes)
        })
        .collect();
    Ok(HostDevices {
        imex_major: inventory.imex_major,
        gpu_drm,
    })
}

/// The running driver's version, as the inventory reads it from the
/// kernel module's procfs file; the error in words when there is none.
pub fn running_driver(config: &Config) -> Result<String, String> {
    planner::inventory(config, &Capabilities::empty())
        .map(|inventory| inventory.driver_version)
        .map_err(|e| e.to_string())
}

/// The document-only checks, and the document for the host's.
fn check_document(text: &str) -> (Report, Option<Value>) {
    let mut report = Report::default();
    // serde_yaml reads JSON too: JSON is YAML.
    let doc: Value = match serde_yaml::from_str(text) {
        Ok(doc) => doc,
        Err(e) => {
            report
                .problems
                .push(Problem::new("", format!("is neither YAML nor JSON: {e}")));
            return (report, None);
        }
    };
    shape::check(&doc, shape::SPEC, "", &mut report.problems);
    let spec: Option<Spec> = match serde_json::from_value(doc.clone()) {
        Ok(spec) => Some(spec),
        Err(e) => {
            // `shape` explains why in its own words; say it if it did not.
            if report.problems.is_empty() {
                report.problems.push(Problem::new(
                    "",
                    format!("cannot be read as a CDI spec: {e}"),
                ));
            }
            None
        }
    };
    rules::check(&doc, spec.as_ref(), &mut report.problems);
    // The document as a whole: a key given twice is lost in `doc` (the
    // last wins) but refused by CDI's strict YAML reader, as by ours.
    if report.problems.is_empty() {
        if let Err(e) = serde_yaml::from_str::<Spec>(text) {
            report.problems.push(Problem::new(
                "",
                format!("cannot be read as a CDI spec: {e}"),
            ));
        }
    }
    report.devices = doc
        .get("devices")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    report.cdi_version = doc
        .get("cdiVersion")
        .and_then(Value::as_str)
        .map(str::to_string);
    (report, Some(doc))
}

/// The JSON path of field `name` of the object at `at`.
fn field(at: &str, name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !plain {
        // serde_json's string encoding is a JSON string: quoted, escaped.
        let quoted = serde_json::to_string(name).unwrap_or_default();
        format!("{at}[{quoted}]")
    } else if at.is_empty() {
        name.to_string()
    } else {
        format!("{at}.{name}")
    }
}

/// The JSON path of item `i` of the list at `at`.
fn index(at: &str, i: usize) -> String {
    format!("{at}[{i}]")
}

/// The items of the list `key` of the object at `at`, each with its JSON
/// path; none when it is absent or no list.
fn list<'a>(parent: &'a Value, at: &str, key: &str) -> Vec<(String, &'a Value)> {
    let list_at = field(at, key);
    parent
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, v)| (index(&list_at, i), v))
        .collect()
}

/// Every `containerEdits` object of `doc`, the spec's first, each with its
/// JSON path.
fn edits_of(doc: &Value) -> Vec<(String, &Value)> {
    let mut found = Vec::new();
    if let Some(edits) = doc.get("containerEdits").filter(|e| e.is_object()) {
        found.push(("containerEdits".to_string(), edits));
    }
    for (at, device) in list(doc, "", "devices") {
        if let Some(edits) = device.get("containerEdits").filter(|e| e.is_object()) {
            found.push((field(&at, "containerEdits"), edits));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Found by fuzz/fuzz_targets/cdi_spec.rs: a key given twice.
    #[test]
    fn a_key_given_twice_is_refused_as_cdi_refuses_it() {
        let text = "cdiVersion: 0.3.0\nkind: nvidia.com/gpu\ndevices:\n- name: gpu0\n  containerEdits:\n    env: [A=1]\n    env: [B=2]\n";
        let report = super::check(text);
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert!(
            report.problems[0].what.contains("duplicate"),
            "{}",
            report.problems[0]
        );
    }

    use super::*;
    use crate::planning::image::ImageLayout;
    use crate::planning::planner::SpecMade;
    use crate::specs::cdi::edits::Callback;
    use crate::specs::cdi::spec::{required_version, ContainerEdits, Device, DeviceNode, KIND};
    use crate::specs::cdi::Format;

    /// A spec as `cdi generate` shapes it, on nodes every host has.
    fn ours() -> Spec {
        let node = |path: &str, minor: i64| DeviceNode {
            path: path.into(),
            kind: Some("c".into()),
            major: Some(1),
            minor: Some(minor),
            file_mode: Some(0o666),
            permissions: Some("rw".into()),
            ..DeviceNode::default()
        };
        let device = |name: &str, node: DeviceNode| Device {
            name: name.into(),
            container_edits: ContainerEdits {
                device_nodes: vec![node],
                ..ContainerEdits::default()
            },
            ..Device::default()
        };
        let callback = Callback {
            program: "/bin/sh".into(),
            config: None,
            made: SpecMade {
                driver_version: "535.261.03".into(),
                capabilities: "compute,utility".into(),
                layout: ImageLayout::Debian,
                mig_layout: Some("none".into()),
                roots: Default::default(),
            },
        };
        let mut spec = Spec {
            kind: KIND.into(),
            devices: vec![
                device("0", node("/dev/null", 3)),
                device(
                    "GPU-6d48d5d1-733b-20cf-6426-f7541bcf8ff9",
                    node("/dev/null", 3),
                ),
                device("all", node("/dev/zero", 5)),
            ],
            container_edits: ContainerEdits {
                env: vec!["NVIDIA_VISIBLE_DEVICES=void".into()],
                hooks: vec![callback.hook()],
                ..ContainerEdits::default()
            },
            ..Spec::default()
        };
        spec.cdi_version = required_version(&spec).into();
        spec
    }

    fn text(spec: &Spec, format: Format) -> String {
        String::from_utf8(format.encode(spec).unwrap()).unwrap()
    }

    fn validate_on(text: &str, running: &str) -> Report {
        let mut driver = || Ok(running.to_string());
        validate(
            text,
            &mut Host {
                dev_root: Path::new("/"),
                driver_version: &mut driver,
                devices: &mut || Ok(HostDevices::default()),
            },
        )
    }

    #[test]
    fn our_spec_is_clean_in_yaml_and_json() {
        for format in [Format::Yaml, Format::Json] {
            let report = validate_on(&text(&ours(), format), "535.261.03");
            assert_eq!(report.problems, [], "{format}");
            assert_eq!(report.devices, 3);
            assert_eq!(report.cdi_version.as_deref(), Some("0.5.0"));
        }
    }

    #[test]
    fn every_problem_is_reported_not_just_the_first() {
        let mut spec = ours();
        spec.cdi_version = "0.3.0".into();
        spec.devices[1].name = "GPU 1".into();
        spec.devices[2].container_edits.device_nodes[0].minor = Some(7);
        let report = validate_on(&text(&spec, Format::Yaml), "550.54.15");
        let lines: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "cdiVersion: 0.3.0 cannot express this spec, which needs 0.5.0 at least",
                "devices[1].name: \"GPU 1\": the device name holds ' ', which CDI does not take",
                "containerEdits.hooks[0]: stale: made for driver 535.261.03, the host runs 550.54.15: run oci-nvidia-hook cdi generate",
                "devices[2].containerEdits.deviceNodes[0]: /dev/zero is c 1:5 on this host, the spec says 1:7",
            ]
        );
    }

    #[test]
    fn a_yaml_number_where_a_name_belongs_is_a_type_problem() {
        let report = check("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: 0\n  containerEdits:\n    env: [A=1]\n");
        let lines: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            ["devices[0].name: is the number 0, CDI wants a string"]
        );
    }

    #[test]
    fn text_that_is_no_spec_is_one_problem() {
        for (text, start) in [
            (
                "{\"cdiVersion\": ",
                "the document is neither YAML nor JSON: ",
            ),
            (
                "a: 1\n---\nb: 2\n",
                "the document is neither YAML nor JSON: ",
            ),
            ("", "the document is null, CDI wants an object"),
            ("- 1\n", "the document is a list, CDI wants an object"),
        ] {
            let report = check(text);
            assert_eq!(report.problems.len(), 1, "{text:?}: {:?}", report.problems);
            let line = report.problems[0].to_string();
            assert!(line.starts_with(start), "{text:?}: {line}");
        }
    }

    #[test]
    fn json_paths_quote_names_that_are_not_identifiers() {
        assert_eq!(field("", "kind"), "kind");
        assert_eq!(field("devices[0]", "name"), "devices[0].name");
        assert_eq!(field("a", "x.y"), "a[\"x.y\"]");
        assert_eq!(field("a", "x\"\n"), "a[\"x\\\"\\n\"]");
        assert_eq!(index("devices", 2), "devices[2]");
    }
}

//! What NVIDIA's kinds mean, checked against this host: an
//! `nvidia.com/imex-channel` device is the channel node its name numbers,
//! with the driver's IMEX major; the DRM nodes in an `nvidia.com/gpu`
//! device are those of that device's GPU, as sysfs says. Reads only the
//! inventory's answers, never the spec's files.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{field, list, Problem};
use crate::host::driver::nodes::IMEX_DIR;
use crate::planning::request::MAX_IMEX_CHANNEL;
use crate::specs::cdi::generate::IMEX_KIND;

/// How a problem that the driver cannot be asked begins.
pub(super) const NO_DRIVER: &str = "cannot check the driver";

/// The kind of the GPU spec.
const GPU_KIND: &str = "nvidia.com/gpu";

/// What the host's driver says of the devices NVIDIA's kinds name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostDevices {
    /// The IMEX channels' major (`nvidia-caps-imex-channels` in `/proc/devices`).
    pub imex_major: Option<u32>,
    /// Each GPU's `/dev/nvidiaN` minor and its DRM nodes' paths in a container.
    pub gpu_drm: Vec<(u32, Vec<PathBuf>)>,
}

/// Checks the devices of `doc`, when its kind is NVIDIA's, against `host`
/// (asked only then).
pub(super) fn check(
    doc: &Value,
    host: &mut dyn FnMut() -> Result<HostDevices, String>,
    problems: &mut Vec<Problem>,
) {
    let kind = doc.get("kind").and_then(Value::as_str);
    if kind != Some(IMEX_KIND) && kind != Some(GPU_KIND) {
        return;
    }
    let host = match host() {
        Ok(host) => host,
        // A host without the driver is one problem: our hook's check may
        // have said so already.
        Err(_) if problems.iter().any(|p| p.what.starts_with(NO_DRIVER)) => return,
        Err(why) => {
            problems.push(Problem::new("kind", format!("{NO_DRIVER}: {why}")));
            return;
        }
    };
    for (at, device) in list(doc, "", "devices") {
        let nodes = device
            .get("containerEdits")
            .map(|edits| list(edits, &field(&at, "containerEdits"), "deviceNodes"))
            .unwrap_or_default();
        if kind == Some(IMEX_KIND) {
            imex_device(&at, device, &nodes, &host, problems);
        } else {
            gpu_device(&nodes, &host, problems);
        }
    }
}

/// An IMEX channel device: named by its channel, holding that channel's node.
fn imex_device(
    at: &str,
    device: &Value,
    nodes: &[(String, &Value)],
    host: &HostDevices,
    problems: &mut Vec<Problem>,
) {
    let name = device.get("name").and_then(Value::as_str).unwrap_or("");
    let Some(channel) = name
        .parse::<u32>()
        .ok()
        .filter(|c| *c <= MAX_IMEX_CHANNEL && name.bytes().all(|b| b.is_ascii_digit()))
    else {
        problems.push(Problem::new(
            &field(at, "name"),
            format!(
                "{name:?}: an {IMEX_KIND} device is named by its channel, 0 to {MAX_IMEX_CHANNEL}"
            ),
        ));
        return;
    };
    let path = format!("/dev/{IMEX_DIR}/channel{channel}");
    let mine: Vec<&(String, &Value)> = nodes
        .iter()
        .filter(|(_, n)| n.get("path").and_then(Value::as_str) == Some(path.as_str()))
        .collect();
    if mine.is_empty() {
        problems.push(Problem::new(
            at,
            format!("IMEX channel {channel} without its node {path}"),
        ));
    }
    for (node_at, node) in nodes {
        let node_path = node.get("path").and_then(Value::as_str).unwrap_or("");
        if node_path != path {
            problems.push(Problem::new(
                node_at,
                format!("{node_path} in IMEX channel {channel}: only {path} belongs there"),
            ));
        }
    }
    for (node_at, node) in mine {
        let number = |key| node.get(key).and_then(Value::as_u64);
        if number("minor").is_some_and(|m| m != u64::from(channel)) {
            problems.push(Problem::new(
                node_at,
                format!(
                    "{path}: minor {:?}, the channel is {channel}",
                    number("minor")
                ),
            ));
        }
        match (number("major"), host.imex_major) {
            (Some(_), None) => problems.push(Problem::new(
                node_at,
                "the driver has no nvidia-caps-imex-channels major in /proc/devices (an IMEX-capable driver, 550 or later, loaded?)",
            )),
            (Some(major), Some(imex)) if major != u64::from(imex) => problems.push(Problem::new(
                node_at,
                format!("{path}: major {major}, the driver's nvidia-caps-imex-channels is {imex}"),
            )),
            _ => {}
        }
    }
}

/// A GPU device: the DRM nodes in it are its GPU's.
fn gpu_device(nodes: &[(String, &Value)], host: &HostDevices, problems: &mut Vec<Problem>) {
    let paths: Vec<(&str, &str)> = nodes
        .iter()
        .filter_map(|(at, n)| Some((at.as_str(), n.get("path").and_then(Value::as_str)?)))
        .collect();
    let minors: Vec<u32> = paths
        .iter()
        .filter_map(|(_, p)| p.strip_prefix("/dev/nvidia")?.parse().ok())
        .collect();
    for (at, path) in paths.iter().filter(|(_, p)| p.starts_with("/dev/dri/")) {
        let owner = host
            .gpu_drm
            .iter()
            .find(|(_, drm)| drm.iter().any(|d| d == Path::new(path)));
        match owner {
            Some((minor, _)) if minors.contains(minor) => {}
            Some((minor, _)) => problems.push(Problem::new(
                at,
                format!(
                    "{path} is the DRM node of the GPU at /dev/nvidia{minor}, not of this device's"
                ),
            )),
            None => problems.push(Problem::new(
                at,
                format!("{path} is no GPU's DRM node on this host (sysfs)"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn host() -> HostDevices {
        HostDevices {
            imex_major: Some(508),
            gpu_drm: vec![
                (
                    0,
                    vec!["/dev/dri/card1".into(), "/dev/dri/renderD128".into()],
                ),
                (
                    1,
                    vec!["/dev/dri/card2".into(), "/dev/dri/renderD129".into()],
                ),
            ],
        }
    }

    fn problems(doc: Value, host: HostDevices) -> Vec<String> {
        let mut found = Vec::new();
        check(&doc, &mut || Ok(host.clone()), &mut found);
        found.iter().map(ToString::to_string).collect()
    }

    fn device(name: &str, nodes: Value) -> Value {
        json!({"name": name, "containerEdits": {"deviceNodes": nodes}})
    }

    fn spec(kind: &str, devices: Vec<Value>) -> Value {
        json!({"cdiVersion": "0.5.0", "kind": kind, "devices": devices})
    }

    fn channel(n: u32, major: u32) -> Value {
        json!({"path": format!("/dev/nvidia-caps-imex-channels/channel{n}"), "type": "c",
               "major": major, "minor": n})
    }

    #[test]
    fn imex_devices_are_their_channels_with_the_drivers_major() {
        let table: Vec<(&str, Value, HostDevices, Vec<&str>)> = vec![
            ("ours", spec(IMEX_KIND, vec![device("1", json!([channel(1, 508)]))]), host(), vec![]),
            (
                "another major",
                spec(IMEX_KIND, vec![device("1", json!([channel(1, 509)]))]),
                host(),
                vec!["major 509, the driver's nvidia-caps-imex-channels is 508"],
            ),
            (
                "a name that is no channel",
                spec(IMEX_KIND, vec![device("all", json!([channel(1, 508)]))]),
                host(),
                vec!["devices[0].name: \"all\": an nvidia.com/imex-channel device is named by its channel"],
            ),
            (
                "another channel's node",
                spec(IMEX_KIND, vec![device("2", json!([channel(1, 508)]))]),
                host(),
                vec!["IMEX channel 2 without its node", "only /dev/nvidia-caps-imex-channels/channel2 belongs there"],
            ),
            (
                "a driver without IMEX",
                spec(IMEX_KIND, vec![device("0", json!([channel(0, 508)]))]),
                HostDevices { imex_major: None, ..host() },
                vec!["no nvidia-caps-imex-channels major"],
            ),
            (
                "another vendor's kind is not ours to judge",
                spec("example.com/imex-channel", vec![device("x", json!([]))]),
                host(),
                vec![],
            ),
        ];
        for (what, doc, host, want) in table {
            let got = problems(doc, host);
            assert_eq!(got.len(), want.len(), "{what}: {got:?}");
            for (got, want) in got.iter().zip(&want) {
                assert!(got.contains(want), "{what}: {got:?} lacks {want:?}");
            }
        }
    }

    #[test]
    fn a_gpu_devices_drm_nodes_are_its_gpus() {
        let node = |path: &str| json!({"path": path});
        let table: Vec<(&str, Vec<&str>, Vec<&str>)> = vec![
            (
                "its own",
                vec!["/dev/nvidia1", "/dev/dri/card2", "/dev/dri/renderD129"],
                vec![],
            ),
            (
                "another GPU's",
                vec!["/dev/nvidia1", "/dev/dri/card1"],
                vec!["/dev/dri/card1 is the DRM node of the GPU at /dev/nvidia0"],
            ),
            (
                "no GPU's",
                vec!["/dev/nvidia0", "/dev/dri/card7"],
                vec!["/dev/dri/card7 is no GPU's DRM node"],
            ),
            ("none", vec!["/dev/nvidia0"], vec![]),
        ];
        for (what, nodes, want) in table {
            let nodes: Vec<Value> = nodes.into_iter().map(node).collect();
            let got = problems(spec(GPU_KIND, vec![device("0", json!(nodes))]), host());
            assert_eq!(got.len(), want.len(), "{what}: {got:?}");
            for (got, want) in got.iter().zip(&want) {
                assert!(got.contains(want), "{what}: {got:?} lacks {want:?}");
            }
        }
    }
}

//! `cdi generate`, `cdi list` and `cdi validate` on simulated GPU hosts.
//! The generated spec validates against the real CDI JSON schema (Debian's
//! copy, fetched by integration/install-deps, checked by Debian's
//! python3-jsonschema), names every device a user or the device plugin may
//! ask for, each with its nodes; `cdi validate` finds what is wrong with a
//! spec where it is, and agrees with the schema; bad input is one line on
//! stderr and leaves no file behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

use harness::cdi_schema::{schema_dir, schema_errors};
use harness::cli::hook;
use harness::json::s;
use harness::project::hook_binary;
use harness::refusal::failure;
use harness::simhost::{Driver, Fixture, GpuFacts, SimHost};
use oci_nvidia_hook::specs::cdi::spec::{required_version, Spec, VERSIONS};

/// The highest cdiVersion Podman 4.3.1 (Debian 12's) accepts.
const PODMAN_CEILING: &str = "0.5.0";

/// A spec as text, read as our validator and CDI read it (YAML, which JSON is).
fn parse(text: &str) -> Value {
    serde_yaml::from_str(text).unwrap_or_else(|e| panic!("not YAML: {e}\n{text}"))
}

/// Generates the spec of `sim` into `dir/name`, with `args`; returns its path.
fn generate_to(sim: &SimHost, dir: &Path, name: &str, args: &[&str]) -> PathBuf {
    let file = dir.join(name);
    let mut all = vec!["cdi", "generate", "--output", file.to_str().unwrap()];
    all.extend_from_slice(args);
    sim.stdout(&all);
    file
}

/// `cdi validate FILE` with `config`.
fn validate(config: &Path, file: &Path) -> Output {
    hook(config, &["cdi", "validate", file.to_str().unwrap()])
}

/// Runs `cdi validate` expecting problems: their stdout lines, the path of
/// the file cut off each; checks the count on stderr's one line.
fn problems(config: &Path, file: &Path) -> Vec<String> {
    let args = ["cdi", "validate", file.to_str().unwrap()];
    let out = validate(config, file);
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    let err = failure(out, &args);
    let prefix = format!("{}: ", file.display());
    let lines: Vec<String> = stdout
        .lines()
        .map(|l| {
            l.strip_prefix(&prefix)
                .unwrap_or_else(|| panic!("{l:?} does not name {}", file.display()))
                .to_string()
        })
        .collect();
    let noun = if lines.len() == 1 {
        "problem"
    } else {
        "problems"
    };
    assert!(
        err.trim_end()
            .ends_with(&format!("{} {noun} in {}", lines.len(), file.display())),
        "{err}"
    );
    lines
}

/// The list at `pointer` in `doc`, `[]` when absent.
fn items<'a>(doc: &'a Value, pointer: &str) -> &'a [Value] {
    doc.pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The device names of a spec, in order.
fn names(spec: &Value) -> Vec<String> {
    items(spec, "/devices")
        .iter()
        .map(|d| s(d, "/name").to_string())
        .collect()
}

/// The spec names exactly `expected`, in order, and `cdi list` prints each
/// as a fully qualified name.
fn assert_names_listed(sim: &SimHost, spec: &Value, expected: &[String]) {
    assert_eq!(names(spec), expected);
    let listed: Vec<String> = expected
        .iter()
        .map(|n| format!("nvidia.com/gpu={n}"))
        .collect();
    assert_eq!(
        sim.stdout(&["cdi", "list"]).lines().collect::<Vec<_>>(),
        listed
    );
}

/// A device's nodes as (path, hostPath, major, minor).
fn nodes_of(device: &Value) -> Vec<(String, String, u64, u64)> {
    items(device, "/containerEdits/deviceNodes")
        .iter()
        .map(|n| {
            assert_eq!(n["type"], "c", "{n}");
            assert_eq!(n["permissions"], "rw", "{n}");
            (
                s(n, "/path").to_string(),
                s(n, "/hostPath").to_string(),
                n["major"].as_u64().unwrap(),
                n["minor"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The device named `name` of `spec`.
fn device<'a>(spec: &'a Value, name: &str) -> &'a Value {
    items(spec, "/devices")
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no device {name} in {:?}", names(spec)))
}

/// The 535 real-flavour 4-GPU host, shared by this suite.
fn real() -> SimHost {
    SimHost::shared(Fixture::real(4))
}

/// A host whose running driver is 470.256.02.
fn host_470() -> SimHost {
    SimHost::shared(Fixture::synthetic(2).driver(Driver::R470))
}

/// A config whose procfs has no NVIDIA driver.
fn no_driver_config(dir: &Path) -> PathBuf {
    let proc_root = dir.join("proc");
    std::fs::create_dir(&proc_root).unwrap();
    let config = dir.join("no-driver.toml");
    std::fs::write(
        &config,
        format!("[driver]\nproc-root = \"{}\"\n", proc_root.display()),
    )
    .unwrap();
    config
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn generated_specs_validate_against_the_cdi_schema_in_yaml_and_json() {
    let out = tempfile::tempdir().unwrap();
    for (sim, host) in [
        (real(), "real"),
        (SimHost::shared(Fixture::synthetic(2).mig()), "mig"),
    ] {
        for format in ["yaml", "json"] {
            let file = generate_to(
                &sim,
                out.path(),
                &format!("{host}.{format}"),
                &["--format", format],
            );
            let text = std::fs::read_to_string(&file).unwrap();
            if format == "json" {
                serde_json::from_str::<Value>(&text).expect("--format json writes JSON");
            }
            let doc = parse(&text);
            assert_eq!(
                schema_errors(&[&doc]),
                [Vec::<String>::new()],
                "{host} {format}: {text}"
            );

            // The lowest version that expresses it, which Podman 4.3.1 takes.
            let spec: Spec = serde_json::from_value(doc.clone()).unwrap();
            assert_eq!(spec.cdi_version, required_version(&spec), "{host} {format}");
            let rank = |v: &str| VERSIONS.iter().position(|k| *k == v).unwrap();
            assert!(
                rank(&spec.cdi_version) <= rank(PODMAN_CEILING),
                "{host} {format}: cdiVersion {} is above Podman 4.3.1's {PODMAN_CEILING}",
                spec.cdi_version
            );

            // One hook, at createRuntime, with its own environment.
            let hooks = items(&doc, "/containerEdits/hooks");
            assert_eq!(hooks.len(), 1, "{host} {format}");
            assert_eq!(hooks[0]["hookName"], "createRuntime");
            assert!(!items(&hooks[0], "/env").is_empty(), "{}", hooks[0]);
            assert!(!text.contains("createContainer"), "{host} {format}");

            // And our own validator finds it clean on the host it was made on.
            let checked = validate(&sim.config, &file);
            let stdout = String::from_utf8_lossy(&checked.stdout);
            assert!(
                checked.status.success(),
                "{host} {format}: {stdout}{}",
                String::from_utf8_lossy(&checked.stderr)
            );
            assert_eq!(
                stdout,
                format!(
                    "{}: ok: {} devices, cdiVersion {}\n",
                    file.display(),
                    spec.devices.len(),
                    spec.cdi_version
                )
            );
        }
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn every_gpu_is_named_by_index_and_uuid_with_its_own_node() {
    let sim = real();
    let spec = parse(&sim.stdout(&["cdi", "generate", "--output", "-"]));
    let dev = format!("{}/dev", sim.facts.dev_root);
    let mut gpus: Vec<&GpuFacts> = sim.facts.gpus.iter().collect();
    gpus.sort_by_key(|g| g.index);
    assert_eq!(gpus.len(), 4);

    let mut expected: Vec<String> = Vec::new();
    for gpu in &gpus {
        expected.push(gpu.index.to_string());
        expected.push(gpu.uuid.clone());
    }
    expected.push("all".into());
    assert_names_listed(&sim, &spec, &expected);

    let node = |minor: u64| {
        (
            format!("/dev/nvidia{minor}"),
            format!("{dev}/nvidia{minor}"),
            195,
            minor,
        )
    };
    let mut all = Vec::new();
    for gpu in &gpus {
        let minor = u64::from(gpu.minor);
        all.push(node(minor));
        for name in [gpu.index.to_string(), gpu.uuid.clone()] {
            assert_eq!(nodes_of(device(&spec, &name)), [node(minor)], "{name}");
        }
    }
    let mut got_all = nodes_of(device(&spec, "all"));
    got_all.sort();
    all.sort();
    assert_eq!(got_all, all);

    // Every container of the spec gets the control nodes.
    let uvm = u64::from(sim.facts.uvm_major);
    let common = nodes_of(&json!({"containerEdits": spec["containerEdits"]}));
    let control = |name: &str, major: u64, minor: u64| {
        (
            format!("/dev/{name}"),
            format!("{dev}/{name}"),
            major,
            minor,
        )
    };
    assert_eq!(
        common,
        [
            control("nvidiactl", 195, 255),
            control("nvidia-uvm", uvm, 0),
            control("nvidia-uvm-tools", uvm, 1),
            control("nvidia-modeset", 195, 254),
        ]
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn mig_devices_are_named_by_position_and_uuid_with_their_caps_nodes() {
    let sim = SimHost::shared(Fixture::synthetic(2).mig());
    let spec = parse(&sim.stdout(&["cdi", "generate", "--output", "-"]));
    let dev = format!("{}/dev", sim.facts.dev_root);
    let caps = u64::from(sim.facts.caps_major);
    let migs = &sim.facts.mig;
    assert_eq!(migs.len(), 4, "the MIG host has four MIG devices");

    let mut expected: Vec<String> = Vec::new();
    let mut gpus: Vec<&GpuFacts> = sim.facts.gpus.iter().collect();
    gpus.sort_by_key(|g| g.index);
    for gpu in &gpus {
        expected.push(gpu.index.to_string());
        expected.push(gpu.uuid.clone());
    }
    for mig in migs {
        expected.push(format!("{}:{}", mig.gpu, mig.mig_index));
        expected.push(mig.uuid.clone());
    }
    expected.push("all".into());
    assert_names_listed(&sim, &spec, &expected);

    for mig in migs {
        let parent = u64::from(mig.gpu_minor);
        let cap = |minor: u32, node: &str| {
            (
                format!("/dev/nvidia-caps/nvidia-cap{minor}"),
                node.to_string(),
                caps,
                u64::from(minor),
            )
        };
        let want = vec![
            (
                format!("/dev/nvidia{parent}"),
                format!("{dev}/nvidia{parent}"),
                195,
                parent,
            ),
            cap(mig.gi_access_minor, &mig.gi_access_node),
            cap(mig.ci_access_minor, &mig.ci_access_node),
        ];
        let position = format!("{}:{}", mig.gpu, mig.mig_index);
        for name in [position.as_str(), &mig.uuid] {
            assert_eq!(nodes_of(device(&spec, name)), want, "{name}");
        }
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn validate_calls_a_spec_made_for_another_driver_stale() {
    let sim = real();
    let dir = tempfile::tempdir().unwrap();
    let running = sim.facts.driver_version.as_str();

    // The recorded version edited, as if the driver had been upgraded since.
    let file = generate_to(&sim, dir.path(), "nvidia.yaml", &[]);
    let mut doc = parse(&std::fs::read_to_string(&file).unwrap());
    let args = doc["containerEdits"]["hooks"][0]["args"]
        .as_array_mut()
        .unwrap();
    let at = args.iter().position(|a| a == "--driver-version").unwrap();
    args[at + 1] = json!("550.54.15");
    std::fs::write(&file, serde_yaml::to_string(&doc).unwrap()).unwrap();
    assert_eq!(
        problems(&sim.config, &file),
        [format!("containerEdits.hooks[0]: stale: made for driver 550.54.15, the host runs {running}: run oci-nvidia-hook cdi generate")]
    );

    // Made on a host running 470, checked on one running 535.
    let old = host_470();
    let old_file = generate_to(&old, dir.path(), "nvidia-470.json", &[]);
    assert_eq!(
        problems(&sim.config, &old_file),
        [format!("containerEdits.hooks[0]: stale: made for driver {}, the host runs {running}: run oci-nvidia-hook cdi generate", old.facts.driver_version.as_str())]
    );

    // Without a driver the check cannot run: one problem saying so.
    let fresh = generate_to(&sim, dir.path(), "fresh.yaml", &[]);
    let lines = problems(&no_driver_config(dir.path()), &fresh);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("containerEdits.hooks[0]: cannot check the driver the spec was made for: NVIDIA kernel module not loaded"),
        "{lines:?}"
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn validate_names_each_problem_at_its_json_path() {
    let sim = real();
    let dir = tempfile::tempdir().unwrap();
    let fresh =
        parse(&std::fs::read_to_string(generate_to(&sim, dir.path(), "nvidia.yaml", &[])).unwrap());
    let node = &fresh["devices"][2]["containerEdits"]["deviceNodes"][0];
    let (host_node, minor) = (
        s(node, "/hostPath").to_string(),
        node["minor"].as_u64().unwrap(),
    );
    let gone = sim.path("driver/usr/lib/x86_64-linux-gnu/libgone.so.1");

    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Edit, String)> = vec![
        (
            "wrong-minor",
            Box::new(move |d| d["devices"][2]["containerEdits"]["deviceNodes"][0]["minor"] = json!(minor + 10)),
            format!("devices[2].containerEdits.deviceNodes[0]: {host_node} is c 195:{minor} on this host, the spec says 195:{}", minor + 10),
        ),
        (
            "missing-mount-source",
            Box::new({
                let gone = gone.clone();
                move |d| d["containerEdits"]["mounts"][0]["hostPath"] = json!(gone)
            }),
            format!("containerEdits.mounts[0]: {} does not exist on this host", gone.display()),
        ),
        (
            "bad-name",
            Box::new(|d| d["devices"][0]["name"] = json!("gpu 0")),
            "devices[0].name: \"gpu 0\": the device name holds ' ', which CDI does not take".into(),
        ),
        (
            "missing-field",
            Box::new(|d| {
                d["devices"][1].as_object_mut().unwrap().remove("containerEdits");
            }),
            "devices[1].containerEdits: missing: CDI requires it".into(),
        ),
    ];
    let mut everything = fresh.clone();
    let mut all_lines = Vec::new();
    for (name, edit, line) in &cases {
        let mut doc = fresh.clone();
        edit(&mut doc);
        edit(&mut everything);
        all_lines.push(line.clone());
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, serde_yaml::to_string(&doc).unwrap()).unwrap();
        assert_eq!(problems(&sim.config, &file), [line.as_str()], "{name}");
    }
    // All at once: every one reported, not just the first.
    let file = dir.path().join("everything.json");
    std::fs::write(&file, everything.to_string()).unwrap();
    let mut got = problems(&sim.config, &file);
    got.sort();
    all_lines.sort();
    assert_eq!(got, all_lines);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn validator_and_schema_agree_on_schema_invalid_documents() {
    let dir = tempfile::tempdir().unwrap();
    let config = no_driver_config(dir.path());
    let minimal = || {
        json!({
            "cdiVersion": "0.5.0",
            "kind": "vendor.com/device",
            "devices": [{"name": "dev0", "containerEdits": {"deviceNodes": [{"path": "/dev/null"}]}}]
        })
    };
    let with = |pointer: &str, value: Value| {
        let mut doc = minimal();
        *doc.pointer_mut(pointer).unwrap() = value;
        doc
    };
    let edits = "/devices/0/containerEdits";
    // Each schema-invalid, with the JSON path our validator names.
    let cases: Vec<(Value, &str)> = vec![
        (json!({}), "cdiVersion"),
        (json!([]), "the document is a list"),
        (
            json!({"kind": "vendor.com/device", "devices": []}),
            "cdiVersion",
        ),
        (with("/kind", json!(7)), "kind"),
        (with("/devices", json!({"name": "dev0"})), "devices"),
        (
            with("/devices/0", json!({"name": "dev0"})),
            "devices[0].containerEdits",
        ),
        (with("/devices/0/name", json!(0)), "devices[0].name"),
        (
            with(edits, json!({"deviceNodes": [{"hostPath": "/dev/null"}]})),
            "devices[0].containerEdits.deviceNodes[0].path",
        ),
        (
            with(
                edits,
                json!({"deviceNodes": [{"path": "/dev/null", "major": "1"}]}),
            ),
            "devices[0].containerEdits.deviceNodes[0].major",
        ),
        (
            with(
                edits,
                json!({"deviceNodes": [{"path": "/dev/null", "uid": -1}]}),
            ),
            "devices[0].containerEdits.deviceNodes[0].uid",
        ),
        (
            with(edits, json!({"mounts": [{"hostPath": "/dev/null"}]})),
            "devices[0].containerEdits.mounts[0].containerPath",
        ),
        (
            with(
                edits,
                json!({"mounts": [{"hostPath": "/a", "containerPath": "/a", "options": "ro"}]}),
            ),
            "devices[0].containerEdits.mounts[0].options",
        ),
        (
            with(edits, json!({"hooks": [{"path": "/bin/sh"}]})),
            "devices[0].containerEdits.hooks[0].hookName",
        ),
        (
            with(
                edits,
                json!({"hooks": [{"hookName": "prestart", "path": "/bin/sh", "timeout": -5}]}),
            ),
            "devices[0].containerEdits.hooks[0].timeout",
        ),
        (
            with(edits, json!({"deviceNodes": {"path": "/dev/null"}})),
            "devices[0].containerEdits.deviceNodes",
        ),
    ];
    let docs: Vec<&Value> = cases.iter().map(|(doc, _)| doc).collect();
    let verdicts = schema_errors(&docs);
    for (i, ((doc, at), errors)) in cases.iter().zip(&verdicts).enumerate() {
        assert!(
            !errors.is_empty(),
            "the schema takes case {i}, which this test says it refuses: {doc}"
        );
        let file = dir.path().join(format!("case-{i}.json"));
        std::fs::write(&file, doc.to_string()).unwrap();
        let lines = problems(&config, &file);
        assert!(
            lines.iter().any(|l| l.starts_with(at)),
            "case {i} {doc}: the schema says {errors:?}; we say {lines:?}, nothing at {at}"
        );
    }

    // And both take the schema's own valid examples, as far as the
    // document goes (their nodes and files are on no host).
    let good_dir = schema_dir().join("testdata/good");
    let mut good: Vec<Value> = Vec::new();
    for name in listing(&good_dir) {
        good.push(parse(
            &std::fs::read_to_string(good_dir.join(name)).unwrap(),
        ));
    }
    assert!(!good.is_empty(), "no examples in {}", good_dir.display());
    good.push(minimal());
    let verdicts = schema_errors(&good.iter().collect::<Vec<_>>());
    for (doc, errors) in good.iter().zip(verdicts) {
        assert_eq!(errors, Vec::<String>::new(), "{doc}");
        let report = oci_nvidia_hook::specs::cdi::validate::check(&doc.to_string());
        assert_eq!(report.problems, [], "{doc}");
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn generate_without_the_driver_is_one_line_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = no_driver_config(dir.path());
    let out = dir.path().join("cdi");
    std::fs::create_dir(&out).unwrap();
    let file = out.join("nvidia.yaml");
    let args = ["cdi", "generate", "--output", file.to_str().unwrap()];
    let err = failure(hook(&config, &args), &args);
    assert!(err.contains("NVIDIA kernel module not loaded"), "{err}");
    assert_eq!(listing(&out), Vec::<String>::new());
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn an_unknown_name_strategy_is_one_line_and_writes_nothing() {
    let sim = real();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nvidia.yaml");
    let file = file.to_str().unwrap();
    for args in [
        &[
            "cdi",
            "generate",
            "--output",
            file,
            "--device-name-strategy",
            "index,serial",
        ][..],
        &["cdi", "list", "--device-name-strategy", "serial"][..],
    ] {
        let err = sim.failure(args);
        assert!(
            err.contains("unknown device name strategy \"serial\""),
            "{err}"
        );
    }
    assert_eq!(listing(dir.path()), Vec::<String>::new());
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn an_unwritable_output_directory_is_one_line_and_writes_nothing() {
    let sim = real();
    let dir = tempfile::tempdir().unwrap();

    // A directory that does not exist: refused, and not created.
    let file = dir.path().join("absent/nvidia.yaml");
    let err = sim.failure(&["cdi", "generate", "--output", file.to_str().unwrap()]);
    assert!(err.contains("absent/"), "{err}");
    assert_eq!(listing(dir.path()), Vec::<String>::new());

    // A read-only directory: bound read-only onto itself in a mount
    // namespace of the command's own, which takes the mount away with it.
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let script = r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@""#;
    let args = [
        "cdi",
        "generate",
        "--output",
        &format!("{}/nvidia.yaml", ro.display()),
    ];
    let out = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(&ro)
        .arg(hook_binary())
        .arg("--config")
        .arg(&sim.config)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .expect("run unshare (util-linux)");
    let err = failure(out, &args);
    assert!(err.contains("Read-only file system"), "{err}");
    assert_eq!(listing(&ro), Vec::<String>::new());
}

/// On the `--extras` host: the GPU spec (each GPU's DRM nodes in its device)
/// and the IMEX spec beside it validate clean; another GPU's DRM node in a
/// device, and a channel with another major or under another name, do not.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn validate_knows_the_imex_spec_and_each_gpus_drm_nodes() {
    let sim = SimHost::shared(Fixture::synthetic(2).extras());
    let extras = sim.facts.extras.as_ref().expect("an --extras host");
    let dir = tempfile::tempdir().unwrap();
    let gpu_file = generate_to(
        &sim,
        dir.path(),
        "nvidia.yaml",
        &["--device-name-strategy", "index"],
    );
    let imex_file = dir.path().join("nvidia-imex-channel.yaml");
    for file in [&gpu_file, &imex_file] {
        let checked = validate(&sim.config, file);
        assert!(
            checked.status.success(),
            "{}: {}{}",
            file.display(),
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
    }

    // GPU 1's device given GPU 0's card node instead of its own.
    let mut doc = parse(&std::fs::read_to_string(&gpu_file).unwrap());
    let devices = doc["devices"].as_array_mut().unwrap();
    let at = devices
        .iter()
        .position(|d| d["name"] == "1")
        .expect("device 1");
    let other = extras.drm_of(&sim.facts.gpus[0].bus);
    let nodes = devices[at]["containerEdits"]["deviceNodes"]
        .as_array_mut()
        .unwrap();
    let card = nodes
        .iter()
        .position(|n| {
            n["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/dev/dri/card"))
        })
        .expect("GPU 1's device has its card node");
    let minor: u32 = other
        .card
        .trim_start_matches("/dev/dri/card")
        .parse()
        .unwrap();
    nodes[card] = json!({"path": other.card, "type": "c", "major": 226, "minor": minor});
    std::fs::write(&gpu_file, serde_yaml::to_string(&doc).unwrap()).unwrap();
    let found = problems(&sim.config, &gpu_file);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with(&format!("devices[{at}].containerEdits.deviceNodes[{card}]: {} is the DRM node of the GPU at /dev/nvidia{}", other.card, sim.facts.gpus[0].minor)),
        "{found:?}"
    );

    // Channel 1 with another major, and named 7.
    let mut doc = parse(&std::fs::read_to_string(&imex_file).unwrap());
    let devices = doc["devices"].as_array_mut().unwrap();
    let one = devices
        .iter()
        .position(|d| d["name"] == "1")
        .expect("channel 1");
    devices[one]["containerEdits"]["deviceNodes"][0]["major"] = json!(extras.imex_major + 1);
    let zero = devices
        .iter()
        .position(|d| d["name"] == "0")
        .expect("channel 0");
    devices[zero]["name"] = json!("7");
    std::fs::write(&imex_file, serde_yaml::to_string(&doc).unwrap()).unwrap();
    let found = problems(&sim.config, &imex_file);
    let joined = found.join("\n");
    assert!(
        joined.contains(&format!(
            "major {}, the driver's nvidia-caps-imex-channels is {}",
            extras.imex_major + 1,
            extras.imex_major
        )),
        "{joined}"
    );
    assert!(
        joined.contains("IMEX channel 7 without its node /dev/nvidia-caps-imex-channels/channel7"),
        "{joined}"
    );
}

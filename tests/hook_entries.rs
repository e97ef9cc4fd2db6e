//! Every hook entry the project ships (hooks.d/), documents (the JSON blocks
//! of README.md and of every Markdown file in docs/), generates (the CDI
//! spec's hook, at `createRuntime` only) or has its tests generate (the
//! runtime harness's `config.json` for runc and crun, and its hooks.d file
//! for Podman) sets `env` explicitly: a hook must never inherit an
//! environment it did not choose, and the runtime passes its own when `env`
//! is absent. Reads files and builds JSON only; needs no root.

use std::path::{Path, PathBuf};

use serde_json::Value;

use harness::project::{documents, hook_binary, repo};
use harness::runtime::oci_config::{config_json, hooks_d_file, ContainerConfig};
use oci_nvidia_hook::planning::image::ImageLayout;
use oci_nvidia_hook::planning::planner::SpecMade;
use oci_nvidia_hook::specs::cdi::spec::{ContainerEdits, Spec, KIND};
use oci_nvidia_hook::specs::cdi::{Callback, Format, HOOK_STAGE};

/// A hook entry found in a document, with where it was found.
struct Entry {
    /// The file, block and stage, for messages.
    place: String,
    /// The OCI hook object (`path`, `args`, `env`, ...).
    hook: Value,
}

/// The hook entries in `doc`: a hooks.d file's `hook`, every entry of
/// every stage under a `hooks` object (a `config.json` or a fragment of
/// one), and every entry of a `hooks` list (a CDI spec's `containerEdits`,
/// each naming its stage in `hookName`), at any depth.
fn hook_entries(doc: &Value, place: &str) -> Vec<Entry> {
    let mut found = Vec::new();
    match doc {
        Value::Object(map) => {
            if map.contains_key("stages") {
                if let Some(hook) = map.get("hook") {
                    found.push(Entry {
                        place: format!("{place}: hooks.d `hook`"),
                        hook: hook.clone(),
                    });
                }
            }
            if let Some(Value::Array(entries)) = map.get("hooks") {
                for (i, hook) in entries.iter().enumerate() {
                    found.push(Entry {
                        place: format!("{place}: hooks[{i}]"),
                        hook: hook.clone(),
                    });
                }
            }
            if let Some(Value::Object(stages)) = map.get("hooks") {
                for (stage, entries) in stages {
                    let entries = entries
                        .as_array()
                        .unwrap_or_else(|| panic!("{place}: hooks.{stage} is not an array"));
                    for (i, hook) in entries.iter().enumerate() {
                        found.push(Entry {
                            place: format!("{place}: hooks.{stage}[{i}]"),
                            hook: hook.clone(),
                        });
                    }
                }
            }
            for value in map.values() {
                found.extend(hook_entries(value, place));
            }
        }
        Value::Array(items) => {
            for item in items {
                found.extend(hook_entries(item, place));
            }
        }
        _ => {}
    }
    found
}

/// Panics unless every entry's `env` is a non-empty list of `NAME=value`
/// strings.
fn assert_env_set(entries: &[Entry]) {
    for entry in entries {
        let env = entry.hook.get("env").unwrap_or_else(|| {
            panic!(
                "{}: the hook entry sets no `env`, so it would inherit the runtime's: {}",
                entry.place, entry.hook
            )
        });
        let vars = env
            .as_array()
            .unwrap_or_else(|| panic!("{}: `env` is not a list: {env}", entry.place));
        assert!(
            !vars.is_empty(),
            "{}: `env` is empty: {}",
            entry.place,
            entry.hook
        );
        for var in vars {
            let ok = var
                .as_str()
                .and_then(|v| v.split_once('='))
                .is_some_and(|(name, _)| !name.is_empty());
            assert!(ok, "{}: `env` holds {var}, not NAME=value", entry.place);
        }
    }
}

/// The ```json blocks of a Markdown file: (first line number, text).
fn json_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (n, line) in markdown.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match open.take() {
            None if fence && line.trim() == "```json" => open = Some((n + 2, String::new())),
            None => {}
            Some(block) if fence => blocks.push(block),
            Some((start, mut text)) => {
                text.push_str(line);
                text.push('\n');
                open = Some((start, text));
            }
        }
    }
    assert!(open.is_none(), "an unclosed ```json block");
    blocks
}

/// A JSON block: a whole document, or the members of an object (as
/// docs/hook.md shows a `config.json`'s `"hooks": {…}`).
fn parse_block(text: &str, place: &str) -> Value {
    serde_json::from_str(text)
        .or_else(|_| serde_json::from_str(&format!("{{{text}}}")))
        .unwrap_or_else(|e| panic!("{place} is neither JSON nor an object's members: {e}"))
}

#[test]
fn shipped_hooks_d_files_set_env() {
    let dir = repo().join("hooks.d");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("hooks.d entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(
        files.iter().any(|f| f.ends_with("oci-nvidia-hook.json")),
        "no hooks.d/oci-nvidia-hook.json in {files:?}"
    );
    for file in &files {
        let place = file.strip_prefix(repo()).unwrap().display().to_string();
        let doc = read_json(file);
        let entries = hook_entries(&doc, &place);
        assert_eq!(entries.len(), 1, "{place}: one `hook` in a hooks.d file");
        assert_env_set(&entries);
    }
}

#[test]
fn hook_entries_documented_in_the_docs_set_env() {
    let mut entries = Vec::new();
    for document in documents() {
        let text = std::fs::read_to_string(repo().join(&document))
            .unwrap_or_else(|e| panic!("read {}: {e}", document.display()));
        for (line, text) in json_blocks(&text) {
            let place = format!("{}, the JSON block at line {line}", document.display());
            entries.extend(hook_entries(&parse_block(&text, &place), &place));
        }
    }
    // The docs show a hooks.d file and config.json entries for both stages
    // the hook runs at (docs/hook.md); finding fewer means this parser
    // missed some.
    for kind in ["hooks.d `hook`", "hooks.prestart[", "hooks.createRuntime["] {
        assert!(
            entries.iter().any(|e| e.place.contains(kind)),
            "no {kind} entry found in the JSON blocks of README.md and docs/"
        );
    }
    assert_env_set(&entries);
}

#[test]
fn hook_entries_the_test_harness_generates_set_env() {
    let args = [
        "oci-nvidia-hook",
        "--config",
        "/test/hook-config.toml",
        "prestart",
    ]
    .map(String::from);
    // runc and crun: the bundle's config.json.
    let config = config_json(&ContainerConfig {
        hostname: "hook-entries",
        env: &[("NVIDIA_VISIBLE_DEVICES", "all")],
        args: None,
        out_dir: Path::new("/test/out"),
        binds: &[],
        decoy_minors: &[],
        decoys: &[],
        hook: Some((hook_binary(), &args)),
    });
    let entries = hook_entries(&config, "the harness's config.json");
    assert_eq!(entries.len(), 1, "one prestart hook in {config}");
    assert_env_set(&entries);
    // Podman: the shipped hooks.d file, rewritten for the hook under test.
    let shipped = read_json(&repo().join("hooks.d/oci-nvidia-hook.json"));
    let file = hooks_d_file(shipped, hook_binary(), &args);
    let entries = hook_entries(&file, "the harness's hooks.d file");
    assert_eq!(entries.len(), 1, "one hook in {file}");
    assert_env_set(&entries);
}

#[test]
fn the_hook_a_cdi_spec_gets_sets_env_and_runs_at_create_runtime() {
    // The spec's hook as `cdi generate` makes it (the one Callback::hook),
    // in both of the spec's encodings, read back as a runtime reads them.
    // Generating on a simulated host needs root: tests/cdi.rs does that.
    let callback = Callback {
        program: hook_binary().to_path_buf(),
        config: Some("/etc/oci-nvidia-hook/config.toml".into()),
        made: SpecMade {
            driver_version: "535.261.03".into(),
            capabilities: "compute,utility".into(),
            layout: ImageLayout::Debian,
            mig_layout: Some("0:1:0".into()),
            roots: Default::default(),
        },
    };
    let spec = Spec {
        cdi_version: "0.5.0".into(),
        kind: KIND.into(),
        container_edits: ContainerEdits {
            hooks: vec![callback.hook()],
            ..ContainerEdits::default()
        },
        ..Spec::default()
    };
    for format in [Format::Yaml, Format::Json] {
        let text = format.encode(&spec).expect("encode the spec");
        let doc: Value = serde_yaml::from_slice(&text).expect("read the spec back");
        let entries = hook_entries(&doc, &format!("a generated CDI spec ({format})"));
        assert_eq!(entries.len(), 1, "one hook in {doc}");
        assert_env_set(&entries);
        for entry in &entries {
            assert_eq!(
                entry.hook["hookName"], HOOK_STAGE,
                "{}: the CDI hook runs at createRuntime, never createContainer",
                entry.place
            );
        }
    }
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

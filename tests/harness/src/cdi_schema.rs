//! The real CDI JSON schema (Debian's `schema.json` and `defs.json`, which
//! integration/install-deps extracts) and Debian's python3-jsonschema, as
//! the judge of the specs the project writes and of our own validator.
//! Fails loudly when either is missing; never stands in for them.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// Where install-deps puts the schema, unless `CDI_SCHEMA_DIR` says otherwise.
const SCHEMA_DIR: &str = "/var/cache/oci-nvidia-hook/cdi-schema";

/// Debian's Python, which install-deps gives python3-jsonschema.
const PYTHON: &str = "/usr/bin/python3";

/// Validates each JSON file named after the schema directory against
/// `schema.json` (its `$ref`s into `defs.json` resolved from the same
/// directory); prints one JSON line per file: its errors, each `path: message`.
const VALIDATOR: &str = r#"
import json, pathlib, sys
import jsonschema
schema_dir = pathlib.Path(sys.argv[1])
schema = json.loads((schema_dir / "schema.json").read_text())
defs = json.loads((schema_dir / "defs.json").read_text())
base = schema_dir.as_uri() + "/"
resolver = jsonschema.RefResolver(base_uri=base, referrer=schema, store={base + "defs.json": defs})
validator = jsonschema.Draft7Validator(schema, resolver=resolver)
for path in sys.argv[2:]:
    doc = json.loads(pathlib.Path(path).read_text())
    errors = sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    print(json.dumps(["/".join(map(str, e.absolute_path)) + ": " + e.message for e in errors]))
"#;

/// The CDI schema directory, checked to hold both files.
pub fn schema_dir() -> PathBuf {
    let dir =
        std::env::var_os("CDI_SCHEMA_DIR").map_or_else(|| PathBuf::from(SCHEMA_DIR), PathBuf::from);
    for file in ["schema.json", "defs.json"] {
        let path = dir.join(file);
        assert!(
            path.is_file(),
            "{} is missing: run integration/install-deps (it extracts Debian's CDI schema there)",
            path.display()
        );
    }
    dir
}

/// The real schema's errors for each document (none for a valid one).
pub fn schema_errors(docs: &[&Value]) -> Vec<Vec<String>> {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = docs
        .iter()
        .enumerate()
        .map(|(i, doc)| {
            let file = dir.path().join(format!("{i}.json"));
            std::fs::write(&file, doc.to_string()).unwrap();
            file
        })
        .collect();
    let out = Command::new(PYTHON)
        .arg("-c")
        .arg(VALIDATOR)
        .arg(schema_dir())
        .args(&files)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {PYTHON}: {e} (run integration/install-deps)"));
    assert!(
        out.status.success(),
        "the schema validator failed (python3-jsonschema missing? run integration/install-deps): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Vec<String>> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("the validator prints JSON"))
        .collect();
    assert_eq!(lines.len(), docs.len(), "one answer per document");
    lines
}

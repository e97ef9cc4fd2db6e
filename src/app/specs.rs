//! `nvidia-ctk cdi list`: the devices of every spec in the spec
//! directories, any vendor's, as NVIDIA's prints them: one fully qualified
//! name a line, sorted.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::Result;
use crate::specs::cdi::dirs::{read_spec_text, spec_files, SPEC_DIRS};

/// The part of any vendor's spec `list` reads.
#[derive(Deserialize)]
struct Listed {
    kind: String,
    #[serde(default)]
    devices: Vec<Named>,
}

/// A device, by name.
#[derive(Deserialize)]
struct Named {
    name: String,
}

/// `cdi list`: every device of every spec that parses, `kind=name`, sorted;
/// a spec that does not parse is named in a warning and skipped, as CDI's
/// cache skips it.
pub fn run(spec_dirs: &[PathBuf], out: &mut impl Write) -> Result<()> {
    let dirs: Vec<PathBuf> = if spec_dirs.is_empty() {
        SPEC_DIRS.iter().map(PathBuf::from).collect()
    } else {
        spec_dirs.to_vec()
    };
    let mut names = BTreeSet::new();
    for file in dirs.iter().flat_map(|d| spec_files(d)) {
        match read_spec(&file) {
            Ok(spec) => {
                for device in spec.devices {
                    names.insert(format!("{}={}", spec.kind, device.name));
                }
            }
            Err(reason) => log::warn!("{}: skipped: {reason}", file.display()),
        }
    }
    log::info!("Found {} CDI devices", names.len());
    for name in &names {
        writeln!(out, "{}", crate::util::error_line::escape_controls(name))?;
    }
    out.flush()?;
    Ok(())
}

/// The spec in `file`, YAML or JSON, its kind `vendor/class`.
fn read_spec(file: &Path) -> std::result::Result<Listed, String> {
    let text = read_spec_text(file)?;
    let spec: Listed = serde_yaml::from_str(&text).map_err(|e| e.to_string())?;
    match spec.kind.split_once('/') {
        Some((vendor, class)) if !vendor.is_empty() && !class.is_empty() => Ok(spec),
        _ => Err(format!("kind {:?} is not vendor/class", spec.kind)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_prints_every_vendors_devices_sorted_once() {
        let etc = tempfile::tempdir().unwrap();
        let var_run = tempfile::tempdir().unwrap();
        std::fs::write(
            etc.path().join("nvidia.yaml"),
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"1\"\n  containerEdits: {}\n- name: \"0\"\n  containerEdits: {}\n",
        )
        .unwrap();
        std::fs::write(
            var_run.path().join("other.json"),
            r#"{"cdiVersion":"0.6.0","kind":"example.com/net","devices":[{"name":"eth","containerEdits":{}}]}"#,
        )
        .unwrap();
        std::fs::write(
            var_run.path().join("dup.yaml"),
            "kind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n",
        )
        .unwrap();
        std::fs::write(var_run.path().join("broken.yaml"), "kind: [\n").unwrap();
        std::fs::write(
            var_run.path().join("notes.txt"),
            "kind: x.com/y\ndevices:\n- name: z\n",
        )
        .unwrap();
        let mut out = Vec::new();
        run(&[etc.path().into(), var_run.path().into()], &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "example.com/net=eth\nnvidia.com/gpu=0\nnvidia.com/gpu=1\n"
        );
    }
}

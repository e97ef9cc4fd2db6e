//! Encodes a spec and writes it where runtimes read specs, atomically: a
//! runtime that scans the directory while we write sees the old spec or
//! the new one, never half of one, and a failure leaves no partial file.

use std::fmt;
use std::path::Path;

use super::{Error, Result, Spec};
use crate::util::atomic;

/// Where a spec goes by default: the transient directory, regenerated at boot.
pub const DEFAULT_OUTPUT: &str = "/var/run/cdi/nvidia.yaml";

/// The mode of a written spec: runtimes read it, only root writes it.
const MODE: u32 = 0o644;

/// How a spec is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// YAML, as NVIDIA's specs and the default file name.
    Yaml,
    /// JSON.
    Json,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Yaml => "yaml",
            Format::Json => "json",
        })
    }
}

impl Format {
    /// The format a file name implies: `.json` is JSON, anything else YAML.
    pub fn of(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some("json") => Format::Json,
            _ => Format::Yaml,
        }
    }

    /// `spec`, encoded, ending in a newline.
    pub fn encode(self, spec: &Spec) -> Result<Vec<u8>> {
        let encoded = match self {
            Format::Yaml => serde_yaml::to_string(spec).map_err(|e| e.to_string()),
            Format::Json => serde_json::to_string_pretty(spec)
                .map(|s| s + "\n")
                .map_err(|e| e.to_string()),
        };
        encoded
            .map(String::into_bytes)
            .map_err(|reason| Error::Encode {
                format: self,
                reason,
            })
    }
}

/// Writes `data` to `path` through a temporary file beside it, renamed
/// over `path` once complete and synced; mode 0644.
pub fn write_atomically(path: &Path, data: &[u8]) -> Result<()> {
    let options = atomic::Options {
        mode: MODE,
        sync: true,
    };
    atomic::replace(path, data, options)
        .map_err(|atomic::Error { path, source }| Error::Write { path, source })
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn writes_through_a_temporary_file_with_mode_0644() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nvidia.yaml");
        fs::write(&path, "old").unwrap();
        write_atomically(&path, b"new\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new\n");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o644);
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left");
    }

    #[test]
    fn a_missing_directory_fails_naming_the_file_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent/nvidia.yaml");
        let err = write_atomically(&path, b"x").unwrap_err().to_string();
        assert!(err.contains("absent/.nvidia.yaml."), "{err}");
        assert!(!dir.path().join("absent").exists());
    }

    #[test]
    fn format_follows_the_extension() {
        assert_eq!(Format::of(Path::new("/etc/cdi/nvidia.json")), Format::Json);
        assert_eq!(Format::of(Path::new("/etc/cdi/nvidia.yaml")), Format::Yaml);
    }
}

//! Whether `nvidia-cdi-hook enable-cuda-compat` prefers an image's CUDA
//! forward-compatibility libraries: decided as NVIDIA's v1.20.0 hook
//! decides it (its `cmd/nvidia-cdi-hook/cudacompat/`, and the anchor binary
//! run side by side on the same images, ../shared/anchor):
//!
//! - the compat `libcuda`'s `.note.cuda.fwd_compatibility` note, when it
//!   has one that reads, decides: with both driver versions known, the
//!   host's branch must be one the note lists and the compat driver newer
//!   than the host's (so a newer driver of the host's own branch counts,
//!   and a newer branch the note does not list does not); without them,
//!   the note's CUDA version must be newer than `--host-cuda-version`;
//! - without a note, a `--host-cuda-version` (even one that does not read)
//!   means no; else the compat driver's major must be greater than the
//!   host driver's, as NVIDIA's hooks have always judged it.
//!
//! Versions are read as NVIDIA reads them (Masterminds semver, loose): an
//! optional `v`, one to three numeric parts, leading zeros allowed.

use serde::Deserialize;

/// What a compat `libcuda`'s `.note.cuda.fwd_compatibility` says (JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct FwdNote {
    /// The CUDA version the compat driver supports, `13.1`; empty when the
    /// note names none.
    #[serde(rename = "CUDA Version", default)]
    pub cuda: String,
    /// The host driver branches it serves as a forward-compatibility driver.
    #[serde(rename = "Driver", default)]
    pub drivers: Vec<u64>,
}

impl FwdNote {
    /// The note's descriptor read as NVIDIA reads it: NUL padding trimmed,
    /// JSON; `None` when it does not read (NVIDIA then judges as if there
    /// were no note).
    pub fn parse(descriptor: &[u8]) -> Option<FwdNote> {
        let start = descriptor.iter().position(|b| *b != 0)?;
        let end = descriptor.iter().rposition(|b| *b != 0)? + 1;
        serde_json::from_slice(&descriptor[start..end]).ok()
    }
}

/// A version as NVIDIA's hook parses it: `major[.minor[.patch]]`, with an
/// optional `v`, pre-release (`-rc1`) and build (`+meta`) part.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Version {
    numbers: [u64; 3],
    /// A release sorts after its pre-releases.
    release: bool,
    pre: String,
}

impl Version {
    fn parse(text: &str) -> Option<Version> {
        let text = text.strip_prefix('v').unwrap_or(text);
        let text = text.split_once('+').map_or(text, |(v, _)| v);
        let (core, pre) = match text.split_once('-') {
            Some((core, pre)) if !pre.is_empty() => (core, Some(pre)),
            Some(_) => return None,
            None => (text, None),
        };
        let mut numbers = [0u64; 3];
        let mut parts = core.split('.');
        for slot in &mut numbers {
            match parts.next() {
                Some(part) if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) => {
                    *slot = part.parse().ok()?;
                }
                Some(_) => return None,
                None => break,
            }
        }
        if parts.next().is_some() || core.is_empty() {
            return None;
        }
        Some(Version {
            numbers,
            release: pre.is_none(),
            pre: pre.unwrap_or_default().to_string(),
        })
    }
}

/// Whether the compat libraries of driver `compat_driver` (the compat
/// `libcuda.so.<compat_driver>`), whose note is `note`, are preferred on a
/// host given as `--host-driver-version` / `--host-cuda-version`
/// (an empty flag is no flag), as NVIDIA's v1.20.0 hook decides.
pub fn uses_compat(
    compat_driver: &str,
    note: Option<&FwdNote>,
    host_driver: Option<&str>,
    host_cuda: Option<&str>,
) -> bool {
    let host_driver = host_driver.filter(|v| !v.is_empty());
    let host_cuda = host_cuda.filter(|v| !v.is_empty());
    let compat = Version::parse(compat_driver);
    let host = host_driver.and_then(Version::parse);
    match note {
        Some(note) => match (compat, host) {
            (Some(compat), Some(host)) => note.drivers.contains(&host.numbers[0]) && compat > host,
            _ => match (
                Version::parse(&note.cuda),
                host_cuda.and_then(Version::parse),
            ) {
                (Some(compat_cuda), Some(host_cuda)) => compat_cuda > host_cuda,
                _ => false,
            },
        },
        None if host_cuda.is_some() => false,
        None => matches!((compat, host), (Some(c), Some(h)) if c.numbers[0] > h.numbers[0]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The note of NVIDIA's 590.44.01 compat libcuda (its testdata).
    fn note_590() -> FwdNote {
        FwdNote {
            cuda: "13.1".into(),
            drivers: vec![535, 550, 570, 575, 580, 590],
        }
    }

    /// Orin's compat libcuda (`libcuda.so.1.1`): a CUDA version, no branches.
    fn note_orin() -> FwdNote {
        FwdNote {
            cuda: "13.2".into(),
            drivers: Vec::new(),
        }
    }

    /// Each case as NVIDIA's v1.20.0 `nvidia-cdi-hook enable-cuda-compat`
    /// answered it on an image holding that compat libcuda (with that note,
    /// or none), run here from ../shared/anchor: (compat driver, note, host
    /// driver, host CUDA, whether it wrote its `00-compat-*.conf`).
    #[test]
    fn decides_as_nvidias_v1_20_hook() {
        let d = note_590();
        let o = note_orin();
        type Case<'a> = (&'a str, Option<&'a FwdNote>, &'a str, &'a str, bool);
        let cases: &[Case] = &[
            // The note's branches: the host's branch listed, the compat newer.
            ("590.44.01", Some(&d), "580.105.08", "", true),
            ("590.44.01", Some(&d), "535.261.03", "", true),
            ("590.44.01", Some(&d), "560.35.03", "", false),
            ("590.44.01", Some(&d), "99.1.1", "", false),
            // The host's own branch, older or not.
            ("590.44.01", Some(&d), "590.10.00", "", true),
            ("590.44.01", Some(&d), "590.44.01", "", false),
            ("590.44.01", Some(&d), "590.50.00", "", false),
            // Versions read loosely: leading zeros, fewer parts.
            ("590.44.01", Some(&d), "580.0105.08", "", true),
            ("590.44.01", Some(&d), "580.105", "", true),
            ("590.44.01", Some(&d), "580", "", true),
            // Both flags: the driver decides when it reads.
            ("590.44.01", Some(&d), "560.35.03", "12.6", false),
            ("590.44.01", Some(&d), "580.1.1", "twelve", true),
            ("590.44.01", Some(&d), "R36.4.3", "12.6", true),
            // Only the CUDA version: the note's CUDA must be newer.
            ("590.44.01", Some(&d), "", "12.6", true),
            ("590.44.01", Some(&d), "", "13.1", false),
            ("1.1", Some(&o), "", "12.6", true),
            ("1.1", Some(&o), "", "13.2", false),
            ("1.1", Some(&o), "", "13.10", false),
            // Orin's note lists no branch: a host driver never matches it.
            ("1.1", Some(&o), "540.4.0", "", false),
            ("1.1", Some(&o), "540.4.0", "12.6", false),
            // No note: a CUDA version says no; else the majors compare.
            ("333.88.99", None, "222.55.66", "", true),
            ("333.88.99", None, "99.55.66", "", true),
            ("333.88.99", None, "0222.1", "", true),
            ("222.88.99", None, "222.55.66", "", false),
            ("1.1", None, "540.4.0", "", false),
            ("333.88.99", None, "R36.4.3", "", false),
            ("550.54.15", None, "", "12.2", false),
            ("333.88.99", None, "222.55.66", "12.2", false),
            ("333.88.99", None, "222.55.66", "twelve", false),
            ("333.88.99", None, "", "", false),
        ];
        for (compat, note, driver, cuda, expected) in cases {
            assert_eq!(
                uses_compat(compat, *note, Some(driver), Some(cuda)),
                *expected,
                "compat {compat}, note {note:?}, host driver {driver:?}, host CUDA {cuda:?}"
            );
        }
        // A note that names no CUDA version decides no on the CUDA form.
        assert!(!uses_compat(
            "1.1",
            Some(&FwdNote::default()),
            None,
            Some("12.6")
        ));
    }

    /// The note's JSON as NVIDIA's testdata carries it; one that does not
    /// read is no note (NVIDIA 1.20 then falls back to the majors).
    #[test]
    fn the_note_reads_as_nvidias_json() {
        let text = br#"{"Format": 1, "CUDA Version": "12.9", "Driver": [535, 550, 560, 565, 570, 575], "Device": [1, 2, 7]}"#;
        let mut padded = text.to_vec();
        padded.extend([0, 0, 0]);
        let note = FwdNote::parse(&padded).unwrap();
        assert_eq!(note.cuda, "12.9");
        assert_eq!(note.drivers, [535, 550, 560, 565, 570, 575]);
        let orin = FwdNote::parse(br#"{"Format": 1, "CUDA Version": "13.2"}"#).unwrap();
        assert_eq!(orin, note_orin());
        assert_eq!(FwdNote::parse(br#"{"Format": 1, "CUDA"#), None);
        assert_eq!(FwdNote::parse(br#"{"Driver": "535"}"#), None);
        assert_eq!(FwdNote::parse(b"\0\0"), None);
    }

    #[test]
    fn versions_read_as_nvidias() {
        let v = |t: &str| Version::parse(t).map(|v| v.numbers);
        assert_eq!(v("580.105.08"), Some([580, 105, 8]));
        assert_eq!(v("v12.6"), Some([12, 6, 0]));
        assert_eq!(v("0222.1"), Some([222, 1, 0]));
        for bad in ["", "R36.4.3", "1.2.3.4", "12.", ".1", "twelve", "1-"] {
            assert_eq!(v(bad), None, "{bad}");
        }
        let order = |a: &str, b: &str| Version::parse(a).unwrap() > Version::parse(b).unwrap();
        assert!(order("13.10", "13.2"));
        assert!(order("590.44.01", "590.10.00"));
        assert!(order("1.0.0", "1.0.0-rc1"));
    }
}

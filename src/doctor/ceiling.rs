//! The CUDA ceiling: which CUDA version an image's runtime needs, against
//! the one the host driver supports, and the three ways out when the image
//! asks for more ("CUDA driver version is insufficient for CUDA runtime
//! version").
//!
//! The first Linux driver of each CUDA toolkit comes from NVIDIA's CUDA
//! Toolkit release notes, table "CUDA Toolkit and Corresponding Driver
//! Versions", column "Toolkit Driver Version, Linux x86_64":
//! <https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html>
//! (cross-checked against the copy Meson keeps of it,
//! `mesonbuild/modules/cuda.py`, `_DRIVER_TABLE_VERSION`). Each row is the
//! first release of that minor version (GA, or 11.0's RC), so it names the
//! first driver whose `cuDriverGetVersion` reports that CUDA.
//!
//! Minor version compatibility (CUDA ≥ 11): a runtime of a newer minor
//! release runs on a driver of the same major release family, except for
//! features that need the newer driver (PTX compiled by the newer toolkit
//! is refused, `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`). So a newer minor is a
//! warning, a newer major a failure. Forward compatibility (an image's
//! `cuda-compat` libraries) only works on data-center GPUs.
//!
//! Pure: no file is read here.

use crate::host::driver::CudaVersion;

/// CUDA `major.minor` → the first Linux driver for it (see the module doc).
pub const FIRST_DRIVER: &[((u32, u32), &str)] = &[
    ((7, 0), "346.46"),
    ((7, 5), "352.31"),
    ((8, 0), "367.48"),
    ((9, 0), "384.81"),
    ((9, 1), "390.46"),
    ((9, 2), "396.26"),
    ((10, 0), "410.48"),
    ((10, 1), "418.39"),
    ((10, 2), "440.33"),
    ((11, 0), "450.36.06"),
    ((11, 1), "455.23"),
    ((11, 2), "460.27.03"),
    ((11, 3), "465.19.01"),
    ((11, 4), "470.42.01"),
    ((11, 5), "495.29.05"),
    ((11, 6), "510.39.01"),
    ((11, 7), "515.43.04"),
    ((11, 8), "520.61.05"),
    ((12, 0), "525.60.13"),
    ((12, 1), "530.30.02"),
    ((12, 2), "535.54.03"),
    ((12, 3), "545.23.06"),
    ((12, 4), "550.54.14"),
    ((12, 5), "555.42.02"),
    ((12, 6), "560.28.03"),
    // There was no CUDA 12.7.
    ((12, 8), "570.26"),
    ((12, 9), "575.51.03"),
    ((13, 0), "580.65.06"),
    ((13, 1), "590.44.01"),
    ((13, 2), "595.45.04"),
    ((13, 3), "610.43.02"),
];

/// The first Linux driver that supports CUDA `major.minor`, if the table
/// knows that version (a minor that was never released, such as 12.7, takes
/// the next one's).
pub fn first_driver(major: u32, minor: u32) -> Option<&'static str> {
    FIRST_DRIVER
        .iter()
        .find(|((ma, mi), _)| (*ma, *mi) >= (major, minor))
        .filter(|((ma, _), _)| *ma == major)
        .map(|(_, driver)| *driver)
}

/// How an image's CUDA fares on a driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The driver supports it.
    Fits,
    /// A newer minor of the driver's major: runs under minor version
    /// compatibility, without the newer driver's features.
    MinorAbove,
    /// A newer major: the runtime refuses to start.
    MajorAbove,
}

/// Judges an image's CUDA against the CUDA the driver supports.
pub fn judge(image: CudaVersion, driver: CudaVersion) -> Verdict {
    if image <= driver {
        Verdict::Fits
    } else if image.major() == driver.major() && image.major() >= 11 {
        Verdict::MinorAbove
    } else {
        Verdict::MajorAbove
    }
}

/// Whether a GPU model is a data-center part, where forward compatibility
/// works, judged from its name as `/proc` gives it: `Some(false)` for
/// consumer and workstation names, `None` when the name does not say.
pub fn data_center(model: &str) -> Option<bool> {
    let upper = model.to_ascii_uppercase();
    let words: Vec<&str> = upper
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    if words
        .iter()
        .any(|w| ["GEFORCE", "TITAN", "QUADRO", "RTX"].contains(w))
    {
        return Some(false);
    }
    // NVIDIA's data-center boards: Tesla, and the product letters of
    // Volta to Blackwell followed by a number (V100, A100, A30, H100, H200,
    // L4, L40S, B200, GH200…). Turing's only one is the T4: T400 to T1000
    // are workstation cards.
    let data_center = words.iter().any(|w| {
        *w == "TESLA"
            || *w == "T4"
            || ["V", "A", "H", "L", "B", "GH", "GB"].iter().any(|letter| {
                w.strip_prefix(letter)
                    .is_some_and(|rest| rest.bytes().next().is_some_and(|b| b.is_ascii_digit()))
            })
    });
    data_center.then_some(true)
}

/// The three ways out when an image's CUDA is above the driver's.
pub fn remedy(
    image: CudaVersion,
    driver: CudaVersion,
    driver_version: &str,
    model: Option<&str>,
) -> String {
    let component = |n: i32| u32::try_from(n).unwrap_or(0);
    let upgrade = match first_driver(component(image.major()), component(image.minor())) {
        Some(first) => format!(
            "upgrade the host driver to {first} or newer (the first with CUDA {image}, per \
             NVIDIA's release notes; this host runs {driver_version})"
        ),
        None => format!(
            "upgrade the host driver to one that supports CUDA {image} (newer than any this \
             doctor knows; this host runs {driver_version})"
        ),
    };
    let gpu = match model.map(|m| (m, data_center(m))) {
        Some((m, Some(true))) => format!("this host's {m} is one"),
        Some((m, Some(false))) => format!("this host's {m} is not one"),
        Some((m, None)) => format!("check whether this host's {m} is one"),
        None => "this host shows no GPU".to_string(),
    };
    format!(
        "use an image built for CUDA {driver} or older; or {upgrade}; or use forward \
         compatibility: an image that ships cuda-compat-{}-{} (/usr/local/cuda/compat), which \
         works only on data-center GPUs ({gpu})",
        image.major(),
        image.minor()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_first_driver_of_each_cuda() {
        assert_eq!(first_driver(12, 6), Some("560.28.03"));
        assert_eq!(first_driver(12, 2), Some("535.54.03"));
        assert_eq!(first_driver(13, 0), Some("580.65.06"));
        assert_eq!(first_driver(11, 4), Some("470.42.01"));
        // 12.7 was never released: CUDA 12.8's driver is the first above it.
        assert_eq!(first_driver(12, 7), Some("570.26"));
        assert_eq!(first_driver(14, 0), None);
        assert_eq!(first_driver(12, 10), None);
    }

    #[test]
    fn the_table_is_sorted_and_its_drivers_rise() {
        for pair in FIRST_DRIVER.windows(2) {
            assert!(pair[0].0 < pair[1].0, "{pair:?}");
            let (a, b) = (pair[0].1, pair[1].1);
            assert_eq!(
                crate::planning::image::compare_versions(a, b),
                std::cmp::Ordering::Less,
                "{a} then {b}"
            );
        }
    }

    #[test]
    fn judges_minor_and_major_above_the_driver() {
        let v = |t: &str| CudaVersion::parse(t).unwrap();
        assert_eq!(judge(v("12.2"), v("12.2")), Verdict::Fits);
        assert_eq!(judge(v("11.8"), v("12.2")), Verdict::Fits);
        assert_eq!(judge(v("12.6.3"), v("12.2")), Verdict::MinorAbove);
        assert_eq!(judge(v("13.0"), v("12.2")), Verdict::MajorAbove);
        // Before CUDA 11 there was no minor version compatibility.
        assert_eq!(judge(v("10.2"), v("10.1")), Verdict::MajorAbove);
        assert_eq!(CudaVersion(12020), v("12.2"));
        assert_eq!(CudaVersion::parse("v12.6.20240820"), Some(v("12.6")));
        assert_eq!(CudaVersion::parse("twelve"), None);
    }

    #[test]
    fn tells_data_center_gpus_by_name() {
        assert_eq!(data_center("NVIDIA H100 80GB HBM3"), Some(true));
        assert_eq!(data_center("NVIDIA A100-SXM4-80GB"), Some(true));
        assert_eq!(data_center("Tesla T4"), Some(true));
        assert_eq!(data_center("NVIDIA L40S"), Some(true));
        assert_eq!(data_center("NVIDIA T1000"), None);
        assert_eq!(data_center("NVIDIA L40"), Some(true));
        assert_eq!(data_center("NVIDIA GeForce RTX 4090"), Some(false));
        assert_eq!(data_center("NVIDIA RTX A6000"), Some(false));
        assert_eq!(data_center("Quadro RTX 8000"), Some(false));
    }

    #[test]
    fn the_remedy_names_both_versions_the_first_driver_and_forward_compatibility() {
        let text = remedy(
            CudaVersion::parse("12.6").unwrap(),
            CudaVersion::parse("12.2").unwrap(),
            "535.261.03",
            Some("NVIDIA H100 80GB HBM3"),
        );
        for needle in [
            "CUDA 12.2 or older",
            "560.28.03",
            "535.261.03",
            "cuda-compat-12-6",
            "data-center",
            "H100 80GB HBM3 is one",
        ] {
            assert!(text.contains(needle), "{needle:?} in {text}");
        }
    }
}

//! The `CUDA_VERSION` of a legacy CUDA image, read as NVIDIA's hook reads it
//! to form the rule `cuda>=MAJOR.MINOR` (toolkit
//! `internal/config/image/cuda_image.go`, `parseMajorMinorVersion`).
//!
//! NVIDIA accepts exactly the Go semantic versions of `golang.org/x/mod/semver`
//! after one optional leading `v`, and fails the container on anything else.
//! This module must accept the same set, no more and no less: a looser reader
//! would start containers NVIDIA refuses. It never panics.

/// `MAJOR` and `MINOR` of a `CUDA_VERSION` value, `None` where NVIDIA's hook
/// refuses it: `[v]MAJOR[.MINOR[.PATCH[-PRERELEASE][+BUILD]]]`, numbers
/// without leading zeros, a prerelease or build only after a patch, and major
/// and minor within 32 bits (`strconv.ParseUint(…, 10, 32)`). A missing minor
/// is 0.
pub(super) fn major_minor(value: &str) -> Option<(u32, u32)> {
    let text = value.strip_prefix('v').unwrap_or(value);
    let (major, rest) = number(text)?;
    let (minor, rest) = if rest.is_empty() {
        ("0", rest)
    } else {
        number(rest.strip_prefix('.')?)?
    };
    if !rest.is_empty() {
        let (_patch, rest) = number(rest.strip_prefix('.')?)?;
        let rest = match rest.strip_prefix('-') {
            Some(prerelease) => after_prerelease(prerelease)?,
            None => rest,
        };
        if let Some(build) = rest.strip_prefix('+') {
            identifiers(build, |_| true)?;
        } else if !rest.is_empty() {
            return None;
        }
    }
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The digits at the start of `text` and what follows; semver refuses a
/// number with a leading zero.
fn number(text: &str) -> Option<(&str, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, rest) = text.split_at(digits);
    if number.is_empty() || (number.len() > 1 && number.starts_with('0')) {
        return None;
    }
    Some((number, rest))
}

/// What follows a prerelease (everything up to a `+`), when it is valid:
/// its numeric identifiers must not have leading zeros.
fn after_prerelease(text: &str) -> Option<&str> {
    let end = text.find('+').unwrap_or(text.len());
    let (prerelease, rest) = text.split_at(end);
    let leading_zero =
        |id: &str| id.len() > 1 && id.starts_with('0') && id.bytes().all(|b| b.is_ascii_digit());
    identifiers(prerelease, |id| !leading_zero(id))?;
    Some(rest)
}

/// Dot-separated identifiers: none empty, each of `[0-9A-Za-z-]` and
/// accepted by `also`.
fn identifiers(text: &str, also: impl Fn(&str) -> bool) -> Option<()> {
    let valid = |id: &str| {
        !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') && also(id)
    };
    text.split('.').all(valid).then_some(())
}

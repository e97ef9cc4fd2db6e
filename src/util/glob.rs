//! File-name globs as Go's `filepath.Match` reads one path component:
//! containerd's `imports` and the places doctor looks for an image's CUDA
//! use them.

/// Whether a file name matches a glob component: `*` for any run of
/// bytes, `?` for one.
pub fn matches(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            matches(&pattern[1..], name) || (!name.is_empty() && matches(pattern, &name[1..]))
        }
        (Some(b'?'), Some(_)) => matches(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => matches(&pattern[1..], &name[1..]),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_go_does() {
        assert!(matches(b"*.toml", b"99-nvidia.toml"));
        assert!(!matches(b"*.toml", b"README"));
        assert!(matches(b"9?-*.toml", b"99-nvidia.toml"));
    }
}

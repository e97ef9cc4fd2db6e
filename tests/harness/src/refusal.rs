//! A failed run of the hook, judged as the project's rule says every
//! failure must look: exit 1, one line on stderr naming the cause, no
//! panic. Judges the shape of a failure only, not its words.

use std::process::Output;

/// Checks a failed run: non-zero exit, one line on stderr, no panic. Returns that line.
pub fn failure(out: Output, args: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "{args:?} should fail; stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "{args:?} should print one line: {stderr}"
    );
    stderr
}

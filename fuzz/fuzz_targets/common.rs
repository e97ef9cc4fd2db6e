//! Shared by the fuzz targets: `mod common;` in each.

/// Every error the hook prints must stay on one line, whatever the input held:
/// a runtime logs it as one line, and a newline from a hostile image or state
/// could forge a log line.
pub fn assert_one_line(message: &str) {
    assert!(
        !message.contains('\n') && !message.contains('\r'),
        "message spans lines: {message:?}"
    );
}

//! Keeps messages on one line. Errors quote untrusted text (a container's
//! values, serde's and toml's echo of them), which may hold newlines or
//! other control characters; a hook's failure must stay one line on stderr
//! and in the log.

/// `text` with every control character escaped (`\n`, `\r`, `\t`, `\u{…}`).
pub fn escape_controls(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_string();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// An error and its sources on one line: each source's text once, joined
/// by `: `, controls escaped. `main`'s error line and `doctor`'s findings.
pub fn error(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let more = e.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = e.source();
    }
    escape_controls(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_control_characters_only() {
        assert_eq!(escape_controls("plain ünïcode"), "plain ünïcode");
        assert_eq!(escape_controls("a\nb\rc\td\u{1b}"), "a\\nb\\rc\\td\\u{1b}");
    }
}

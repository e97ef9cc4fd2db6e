//! Prints doctor's checks: as text grouped by layer, wrapped to an
//! 80-column terminal, coloured only when the caller says so (a terminal,
//! and no `NO_COLOR`), ending with one summary line that names the layer at
//! fault; or as JSON with the same content. Pure formatting: it decides
//! nothing about the checks.

use std::io::{self, Write};

use serde::Serialize;

use super::{Check, Layer, Status};

/// The width the text fits.
const WIDTH: usize = 80;

/// Where a check's text starts, after `  fail  `.
const INDENT: usize = 8;

/// How to print the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Render {
    /// Text for a terminal; with ANSI colours when `colour`.
    Text { colour: bool },
    /// JSON for scripts.
    Json,
}

/// The counts and the layer at fault, as the summary line and JSON give them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Checks that passed.
    pub ok: usize,
    /// Checks that warn.
    pub warn: usize,
    /// Checks that fail.
    pub fail: usize,
    /// The first layer with a failure: fix it first, later layers may follow from it.
    pub fault_layer: Option<Layer>,
    /// The first layer with a warning, when nothing failed.
    pub warn_layer: Option<Layer>,
}

/// Counts `checks` and finds the layer at fault.
pub fn summarize(checks: &[Check]) -> Summary {
    let count = |s: Status| checks.iter().filter(|c| c.status == s).count();
    let first = |s: Status| {
        checks
            .iter()
            .filter(|c| c.status == s)
            .map(|c| c.layer)
            .min()
    };
    let fault_layer = first(Status::Fail);
    Summary {
        ok: count(Status::Ok),
        warn: count(Status::Warn),
        fail: count(Status::Fail),
        fault_layer,
        warn_layer: if fault_layer.is_none() {
            first(Status::Warn)
        } else {
            None
        },
    }
}

/// The whole report as JSON.
#[derive(Serialize)]
struct Report<'a> {
    checks: &'a [Check],
    summary: Summary,
}

/// Writes `checks` as `render` says.
pub fn write(checks: &[Check], render: Render, out: &mut impl Write) -> io::Result<()> {
    match render {
        Render::Json => {
            let report = Report {
                checks,
                summary: summarize(checks),
            };
            serde_json::to_writer_pretty(&mut *out, &report)?;
            writeln!(out)
        }
        Render::Text { colour } => write_text(checks, colour, out),
    }
}

/// ANSI colour of a status word.
fn colour_of(status: Status) -> &'static str {
    match status {
        Status::Ok => "\x1b[32m",
        Status::Warn => "\x1b[33m",
        Status::Fail => "\x1b[1;31m",
    }
}

fn write_text(checks: &[Check], colour: bool, out: &mut impl Write) -> io::Result<()> {
    let paint = |text: &str, code: &str| {
        if colour {
            format!("{code}{text}\x1b[0m")
        } else {
            text.to_string()
        }
    };
    let mut layers: Vec<Layer> = checks.iter().map(|c| c.layer).collect();
    layers.sort();
    layers.dedup();
    for (i, layer) in layers.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        writeln!(out, "{}", paint(layer.title(), "\x1b[1m"))?;
        for check in checks.iter().filter(|c| c.layer == *layer) {
            let word = check.status.word();
            let lines = wrap(&format!("{}: {}", check.name, check.found), INDENT);
            for (n, line) in lines.iter().enumerate() {
                if n == 0 {
                    let pad = " ".repeat(INDENT - 2 - word.len());
                    writeln!(out, "  {}{pad}{line}", paint(word, colour_of(check.status)))?;
                } else {
                    writeln!(out, "{}{line}", " ".repeat(INDENT))?;
                }
            }
            if let Some(remedy) = &check.remedy {
                let lines = wrap(&format!("fix: {remedy}"), INDENT + 5);
                for (n, line) in lines.iter().enumerate() {
                    let indent = if n == 0 { INDENT } else { INDENT + 5 };
                    writeln!(out, "{}{line}", " ".repeat(indent))?;
                }
            }
        }
    }
    writeln!(out)?;
    writeln!(out, "{}", summary_line(&summarize(checks)))
}

/// The last line: the counts and the layer to look at first.
pub fn summary_line(s: &Summary) -> String {
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    match (s.fault_layer, s.warn_layer) {
        (Some(layer), _) => format!(
            "doctor: {} failed, {}, {} ok: the fault is in the {} layer",
            s.fail,
            plural(s.warn, "warning", "warnings"),
            s.ok,
            layer.title()
        ),
        (None, Some(layer)) => format!(
            "doctor: nothing failed, {}, {} ok: see the {} layer",
            plural(s.warn, "warning", "warnings"),
            s.ok,
            layer.title()
        ),
        (None, None) => format!("doctor: all {} checks ok", s.ok),
    }
}

/// `text` cut into lines that fit the width after `indent` columns: at
/// spaces, and inside a word (a long path) only where it alone is too long.
fn wrap(text: &str, indent: usize) -> Vec<String> {
    let width = WIDTH.saturating_sub(indent).max(20);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let mut word: Vec<char> = word.chars().collect();
        loop {
            let used = line.chars().count();
            let sep = usize::from(used > 0);
            let room = width.saturating_sub(used + sep);
            if word.len() <= room {
                if sep == 1 {
                    line.push(' ');
                }
                line.extend(word.iter());
                break;
            }
            if used > 0 && (word.len() <= width || room == 0) {
                lines.push(std::mem::take(&mut line));
                continue;
            }
            // A word longer than a whole line: fill this line and go on.
            let take = if used == 0 { width } else { room };
            if sep == 1 {
                line.push(' ');
            }
            line.extend(word.drain(..take));
            lines.push(std::mem::take(&mut line));
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checks() -> Vec<Check> {
        vec![
            Check::ok(Layer::Host, "kernel module", "NVIDIA 535.261.03 loaded"),
            Check::fail(
                Layer::Host,
                "/dev/nvidia-uvm",
                format!("/{} is missing", "very-long-directory-name/".repeat(6)),
                "create it: `nvidia-modprobe -u -c=0`, and then check again with a long \
                 sentence that needs wrapping over more than one line",
            ),
            Check::warn(Layer::Wiring, "hooks.d", "no env", "add env"),
        ]
    }

    #[test]
    fn text_is_grouped_by_layer_fits_80_columns_and_ends_with_the_summary() {
        let mut out = Vec::new();
        write(&checks(), Render::Text { colour: false }, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        for line in text.lines() {
            assert!(line.chars().count() <= WIDTH, "{line:?} is too wide");
        }
        assert!(!text.contains('\x1b'));
        let host = text.find("host driver\n").unwrap();
        let wiring = text.find("runtime wiring\n").unwrap();
        assert!(host < wiring);
        assert!(
            text.contains("  fail  /dev/nvidia-uvm: /very-long"),
            "{text}"
        );
        assert!(text.contains("        fix: create it"), "{text}");
        let last = text.lines().last().unwrap();
        assert_eq!(
            last,
            "doctor: 1 failed, 1 warning, 1 ok: the fault is in the host driver layer"
        );
    }

    #[test]
    fn colour_only_when_asked() {
        let mut out = Vec::new();
        write(&checks(), Render::Text { colour: true }, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\x1b[1;31mfail\x1b[0m"), "{text}");
    }

    #[test]
    fn json_holds_every_check_and_the_layer_at_fault() {
        let mut out = Vec::new();
        write(&checks(), Render::Json, &mut out).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(json["checks"].as_array().unwrap().len(), 3);
        assert_eq!(json["checks"][1]["status"], "fail");
        assert_eq!(json["checks"][1]["layer"], "host");
        assert_eq!(json["summary"]["fault_layer"], "host");
        assert_eq!(json["summary"]["fail"], 1);
    }

    #[test]
    fn summary_names_a_warning_layer_when_nothing_failed() {
        let only_warn = vec![Check::warn(Layer::Wiring, "x", "y", "z")];
        assert_eq!(
            summary_line(&summarize(&only_warn)),
            "doctor: nothing failed, 1 warning, 0 ok: see the runtime wiring layer"
        );
        let ok = vec![Check::ok(Layer::Host, "x", "y")];
        assert_eq!(summary_line(&summarize(&ok)), "doctor: all 1 checks ok");
    }

    #[test]
    fn wraps_at_spaces_and_cuts_only_words_longer_than_a_line() {
        let lines = wrap(&format!("a {} b", "x".repeat(100)), 8);
        assert!(lines.iter().all(|l| l.chars().count() <= 72), "{lines:?}");
        assert_eq!(
            lines.concat().replace(' ', ""),
            format!("a{}b", "x".repeat(100))
        );
        assert_eq!(wrap("short", 8), ["short"]);
    }
}

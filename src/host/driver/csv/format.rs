//! NVIDIA's CSV mount specs: the files L4T's packages leave in
//! `/etc/nvidia-container-runtime/host-files-for-container.d/`, one entry
//! a line, `TYPE, PATH` (`dev`, `lib`, `sym` or `dir`). A line NVIDIA
//! cannot read (no comma, an unknown type, no path) is skipped, as NVIDIA
//! skips it; a path keeps any commas after the first. Every file is read
//! bounded: its size, its lines and how many files are read at all.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// The directory L4T's packages leave their CSV files in.
pub const DIR: &str = "/etc/nvidia-container-runtime/host-files-for-container.d";

/// The files NVIDIA's runtime reads unless the image sets
/// `NVIDIA_REQUIRE_JETPACK=csv-mounts=all`, and `nvidia-ctk cdi generate`
/// reads unless given `--csv.file`.
pub const BASE_FILES: [&str; 3] = ["devices.csv", "drivers.csv", "l4t.csv"];

/// Largest CSV file read: L4T's largest lists a few hundred paths.
pub const MAX_FILE: usize = 1024 * 1024;
/// Most entries taken from one file.
pub const MAX_LINES: usize = 16 * 1024;
/// Most CSV files read from the directory.
pub const MAX_FILES: usize = 256;

/// What an entry lists, which decides how it is looked for and injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntryKind {
    /// `dev`: a character device under the dev root.
    Dev,
    /// `lib`: a library or other regular file under the driver root.
    Lib,
    /// `sym`: a symlink under the driver root, recreated in the container.
    Sym,
    /// `dir`: a directory under the driver root.
    Dir,
}

impl EntryKind {
    /// The type as the CSV files spell it.
    pub fn name(self) -> &'static str {
        match self {
            EntryKind::Dev => "dev",
            EntryKind::Lib => "lib",
            EntryKind::Sym => "sym",
            EntryKind::Dir => "dir",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "dev" => EntryKind::Dev,
            "lib" => EntryKind::Lib,
            "sym" => EntryKind::Sym,
            "dir" => EntryKind::Dir,
            _ => return None,
        })
    }
}

/// One line of a CSV file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// What it lists.
    pub kind: EntryKind,
    /// The path, as the file gives it.
    pub path: PathBuf,
}

/// The entries of `text` (one CSV file), in order, at most [`MAX_LINES`];
/// lines NVIDIA would skip are skipped, each logged.
pub fn parse(source: &Path, text: &str) -> Vec<Entry> {
    let mut entries = Vec::new();
    for line in text.lines() {
        let Some((kind, path)) = line.trim().split_once(',') else {
            if !line.trim().is_empty() {
                log::debug!("{}: skipping {line:?}: no comma", source.display());
            }
            continue;
        };
        let (kind, path) = (kind.trim(), path.trim());
        let Some(kind) = EntryKind::parse(kind).filter(|_| !path.is_empty()) else {
            log::debug!("{}: skipping {line:?}", source.display());
            continue;
        };
        if entries.len() == MAX_LINES {
            log::warn!(
                "{}: more than {MAX_LINES} entries; the rest are ignored",
                source.display()
            );
            break;
        }
        entries.push(Entry {
            kind,
            path: PathBuf::from(path),
        });
    }
    entries
}

/// Whether `name` is a CSV file's name as NVIDIA takes it: ending in
/// `.csv` (any case), and more than that.
pub fn is_csv_name(name: &str) -> bool {
    name.len() > 4
        && name
            .get(name.len() - 4..)
            .is_some_and(|ext| ext.eq_ignore_ascii_case(".csv"))
}

/// Whether a `sym` entry's `path` matches one of NVIDIA's ignore patterns:
/// a shell glob on the whole path, or with a leading `**/` on its file name.
pub fn ignored(patterns: &[String], path: &Path) -> bool {
    patterns
        .iter()
        .any(|pattern| match pattern.strip_prefix("**/") {
            Some(name_pattern) => path
                .file_name()
                .is_some_and(|name| glob_match(name_pattern, &name.to_string_lossy())),
            None => glob_match(pattern, &path.to_string_lossy()),
        })
}

/// A shell glob as Go's `filepath.Match` reads it: `*` and `?` never match
/// `/`, `[...]` is a class (`^` or `!` negates, `a-z` ranges), `\` escapes.
fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    matches_from(&p, &n)
}

fn matches_from(p: &[char], n: &[char]) -> bool {
    match p.first() {
        None => n.is_empty(),
        Some('*') => {
            // Any run of non-separators, shortest first.
            let mut taken = 0;
            loop {
                if matches_from(&p[1..], &n[taken..]) {
                    return true;
                }
                if taken == n.len() || n[taken] == '/' {
                    return false;
                }
                taken += 1;
            }
        }
        Some('?') => n.first().is_some_and(|c| *c != '/') && matches_from(&p[1..], &n[1..]),
        Some('[') => match (n.first(), class(&p[1..])) {
            (Some(c), Some((matched, used))) if *c != '/' => {
                matched(*c) && matches_from(&p[1 + used..], &n[1..])
            }
            _ => false,
        },
        Some('\\') if p.len() > 1 => n.first() == Some(&p[1]) && matches_from(&p[2..], &n[1..]),
        Some(c) => n.first() == Some(c) && matches_from(&p[1..], &n[1..]),
    }
}

/// A `[...]` class after its `[`: whether a character is in it, and how
/// many pattern characters it used (its `]` included); `None` unclosed.
#[allow(clippy::type_complexity)]
fn class(p: &[char]) -> Option<(Box<dyn Fn(char) -> bool + '_>, usize)> {
    let negated = matches!(p.first(), Some('^' | '!'));
    let start = usize::from(negated);
    let end = start + p[start..].iter().skip(1).position(|c| *c == ']')? + 1;
    let body = &p[start..end];
    let matched = move |c: char| {
        let mut i = 0;
        let mut hit = false;
        while i < body.len() {
            if i + 2 < body.len() && body[i + 1] == '-' {
                hit |= body[i] <= c && c <= body[i + 2];
                i += 3;
            } else {
                hit |= body[i] == c;
                i += 1;
            }
        }
        hit != negated
    };
    Some((Box::new(matched), end + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_type_comma_path_and_others_are_skipped_as_nvidia_skips_them() {
        let text = "dev, /dev/nvmap\n\
                    \n\
                    \t\n\
                    ,\n\
                    dev,\n\
                    dev ,/a/path,with,commas\n\
                    not-dev ,/a/path\n\
                    # a comment\n\
                      lib,  /usr/lib/libcuda.so.1.1  \n\
                    sym, /usr/lib/libcuda.so\n\
                    dir, /usr/local/cuda\n";
        let entries = parse(Path::new("/x.csv"), text);
        let got: Vec<(EntryKind, &str)> = entries
            .iter()
            .map(|e| (e.kind, e.path.to_str().unwrap()))
            .collect();
        assert_eq!(
            got,
            vec![
                (EntryKind::Dev, "/dev/nvmap"),
                (EntryKind::Dev, "/a/path,with,commas"),
                (EntryKind::Lib, "/usr/lib/libcuda.so.1.1"),
                (EntryKind::Sym, "/usr/lib/libcuda.so"),
                (EntryKind::Dir, "/usr/local/cuda"),
            ]
        );
    }

    #[test]
    fn a_file_gives_at_most_max_lines_entries() {
        let text = "lib, /l\n".repeat(MAX_LINES + 5);
        assert_eq!(parse(Path::new("/x.csv"), &text).len(), MAX_LINES);
    }

    #[test]
    fn csv_names_end_in_csv_in_any_case() {
        assert!(is_csv_name("drivers.csv"));
        assert!(is_csv_name("L4T.CSV"));
        assert!(!is_csv_name(".csv"));
        assert!(!is_csv_name("drivers.csv.bak"));
        assert!(!is_csv_name("csv"));
    }

    #[test]
    fn ignore_patterns_are_globs_on_the_path_or_with_star_star_on_the_name() {
        let patterns = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let link = Path::new("/usr/lib/aarch64-linux-gnu/libv4l/plugins/nv/libv4l2_nvargus.so");
        // NVIDIA's tests: a bare `*.so` matches no absolute path, `**/*.so` matches the name.
        assert!(!ignored(&patterns(&["*.so"]), link));
        assert!(ignored(&patterns(&["**/*.so"]), link));
        assert!(ignored(
            &patterns(&["/usr/lib/aarch64-linux-gnu/libv4l/*/nv/*"]),
            link
        ));
        assert!(!ignored(&patterns(&["/usr/lib/*"]), link), "* stops at /");
        assert!(ignored(
            &patterns(&["**/libcuda.so.[0-9]"]),
            Path::new("/l/libcuda.so.1")
        ));
        assert!(!ignored(
            &patterns(&["**/libcuda.so.[!1]"]),
            Path::new("/l/libcuda.so.1")
        ));
        assert!(ignored(
            &patterns(&["**/lib?uda.so"]),
            Path::new("/l/libcuda.so")
        ));
        assert!(!ignored(
            &patterns(&["**/[unclosed"]),
            Path::new("/l/[unclosed")
        ));
    }
}

//! What `/checker` (integration/checker.c) prints inside the container,
//! parsed: device nodes and what opening each gave, injected files and
//! their mount flags, links, what dlopen of libcuda and libnvidia-ml gave,
//! the loader cache, `ld.so.conf.d`, the masked procfs and the mounts; then
//! nvidia-smi's output and exit code. Parses only; judges nothing.

use std::collections::BTreeMap;

/// One device node the checker found under /dev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// `c`, `b`, `d`, `f`, `l`, ...
    pub kind: char,
    /// (major, minor) for device nodes.
    pub numbers: Option<(u32, u32)>,
    /// Its permission bits, in octal.
    pub mode: String,
    /// `ok` or the errno name; None when it was not opened (not a device).
    pub open: Option<String>,
}

/// An injected regular file and the flags of the mount it is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFacts {
    /// Its size in bytes.
    pub size: u64,
    /// The mount is read-only.
    pub read_only: bool,
    /// The mount is nosuid.
    pub nosuid: bool,
    /// The mount is nodev.
    pub nodev: bool,
    /// The mount is noexec.
    pub noexec: bool,
}

/// The `cuda` or `nvml` line: what dlopen of the SONAME gave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Library {
    /// The loaded file's path, or the SONAME when dlopen failed.
    pub path: String,
    /// dlopen succeeded.
    pub loaded: bool,
    /// The line's `key=value` fields (`rc`, `version`, ...).
    pub fields: BTreeMap<String, String>,
    /// dlerror's message, when dlopen failed.
    pub msg: Option<String>,
}

impl Library {
    /// The value of `key` on the line.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }
}

/// The checker's output, parsed (see the format in integration/checker.c),
/// plus what nvidia-smi printed after it.
#[derive(Debug, Clone, Default)]
pub struct CheckerReport {
    /// The `checker done` line was seen.
    pub complete: bool,
    /// Device nodes (and directories) under /dev/nvidia*, by path.
    pub nodes: BTreeMap<String, Node>,
    /// `ok` or the errno name of opening /dev/null.
    pub devnull: Option<String>,
    /// Injected regular files, by path.
    pub files: BTreeMap<String, FileFacts>,
    /// Symlinks in the library and binary directories: path → target.
    pub links: BTreeMap<String, String>,
    /// What dlopen of libcuda.so.1 and cuDriverGetVersion gave.
    pub cuda: Option<Library>,
    /// What dlopen of libnvidia-ml.so.1 gave.
    pub nvml: Option<Library>,
    /// The `ldcache` line's fields (`libcuda.so.1` → `yes`, ...).
    pub ldcache: BTreeMap<String, String>,
    /// `ld.so.conf.d` file → its lines.
    pub ldconf: BTreeMap<String, Vec<String>>,
    /// Entries of the masked /proc/driver/nvidia, with their fields.
    pub procnv: Vec<String>,
    /// Mounts the checker reports, as "point {fields}".
    pub mounts: Vec<String>,
    /// nvidia-smi's stdout (after the checker's) and the run's stderr.
    pub smi_output: String,
    /// nvidia-smi's exit code (the `smi_exit=` line).
    pub smi_exit: Option<i32>,
}

/// A line split into its kind, subject, positional words, `key=value`
/// fields and a trailing free-text field (`msg=` or `line=`, which run to
/// the end of the line).
struct Fact<'a> {
    kind: &'a str,
    subject: &'a str,
    words: Vec<&'a str>,
    fields: BTreeMap<String, String>,
    msg: Option<String>,
}

/// The fields whose value is free text to the end of the line.
const FREE_TEXT_KEYS: [&str; 2] = ["msg", "line"];

impl<'a> Fact<'a> {
    fn parse(line: &'a str) -> Option<Fact<'a>> {
        let free_text = FREE_TEXT_KEYS
            .iter()
            .filter_map(|key| {
                let marker = format!(" {key}=");
                line.find(&marker).map(|at| (at, at + marker.len(), *key))
            })
            .min();
        let (head, free) = match free_text {
            Some((at, value, key)) => (&line[..at], Some((key, line[value..].to_string()))),
            None => (line, None),
        };
        let mut tokens = head.split(' ');
        let kind = tokens.next()?;
        let subject = tokens.next()?;
        let mut words = Vec::new();
        let mut fields = BTreeMap::new();
        for token in tokens {
            match token.split_once('=') {
                Some((k, v)) => {
                    fields.insert(k.to_string(), v.to_string());
                }
                None => words.push(token),
            }
        }
        let mut msg = None;
        match free {
            Some(("msg", text)) => msg = Some(text),
            Some((key, text)) => {
                fields.insert(key.to_string(), text);
            }
            None => {}
        }
        Some(Fact {
            kind,
            subject,
            words,
            fields,
            msg,
        })
    }

    fn flag(&self, key: &str) -> bool {
        self.fields.get(key).map(String::as_str) == Some("1")
    }
}

impl CheckerReport {
    /// Parses the container's stdout; `stderr` joins nvidia-smi's output
    /// (the shell's "not found" goes there).
    pub fn parse(stdout: &str, stderr: &str) -> CheckerReport {
        let mut report = CheckerReport::default();
        let mut smi = String::new();
        for line in stdout.lines() {
            if report.complete {
                match line.strip_prefix("smi_exit=") {
                    Some(code) => report.smi_exit = code.trim().parse().ok(),
                    None => {
                        smi.push_str(line);
                        smi.push('\n');
                    }
                }
                continue;
            }
            if line == "checker done" {
                report.complete = true;
                continue;
            }
            if let Some(fact) = Fact::parse(line) {
                report.add(fact);
            }
        }
        smi.push_str(stderr);
        report.smi_output = smi;
        report
    }

    fn add(&mut self, fact: Fact) {
        let subject = fact.subject.to_string();
        match fact.kind {
            "node" => {
                let kind = fact.words.first().and_then(|w| w.chars().next());
                let numbers = fact.words.get(1).and_then(|n| {
                    let (major, minor) = n.split_once(':')?;
                    Some((major.parse().ok()?, minor.parse().ok()?))
                });
                self.nodes.insert(
                    subject,
                    Node {
                        kind: kind.unwrap_or('?'),
                        numbers,
                        mode: fact.fields.get("mode").cloned().unwrap_or_default(),
                        open: fact.fields.get("open").cloned(),
                    },
                );
            }
            "devnull" => self.devnull = fact.fields.get("open").cloned(),
            "file" => {
                let facts = FileFacts {
                    size: fact
                        .fields
                        .get("size")
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0),
                    read_only: fact.flag("ro"),
                    nosuid: fact.flag("nosuid"),
                    nodev: fact.flag("nodev"),
                    noexec: fact.flag("noexec"),
                };
                self.files.insert(subject, facts);
            }
            "link" => {
                let target = fact.fields.get("target").cloned().unwrap_or_default();
                self.links.insert(subject, target);
            }
            "cuda" | "nvml" => {
                let library = Library {
                    path: subject,
                    loaded: fact.fields.get("dlopen").map(String::as_str) == Some("ok"),
                    fields: fact.fields,
                    msg: fact.msg,
                };
                if fact.kind == "cuda" {
                    self.cuda = Some(library);
                } else {
                    self.nvml = Some(library);
                }
            }
            "ldcache" => self.ldcache = fact.fields,
            "ldconf" => {
                let line = fact.fields.get("line").cloned().unwrap_or_default();
                self.ldconf.entry(subject).or_default().push(line);
            }
            "procnv" => self.procnv.push(format!("{subject} {:?}", fact.fields)),
            "mount" => self.mounts.push(format!("{subject} {:?}", fact.fields)),
            _ => {}
        }
    }

    /// `/dev/nvidiaN` nodes, by N: the GPU nodes, not nvidiactl or uvm.
    pub fn gpu_nodes(&self) -> BTreeMap<u32, &Node> {
        self.nodes
            .iter()
            .filter_map(|(path, node)| {
                let n = path.strip_prefix("/dev/nvidia")?.parse().ok()?;
                Some((n, node))
            })
            .collect()
    }
}

//! The flow stays one-way: no module of `src/` imports a module that
//! imports it back, at the top level (config, request, driver, plan, …) or
//! among the sibling submodules of one module (driver's proc, nodes, …).
//! Read from the source text, so the check runs without building anything.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Every `.rs` file below `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The wings that group the crate's units (`src/planning/planner/` is the
/// unit `planner`): the rules hold between units, whatever wing each is in.
const WINGS: [&str; 5] = ["planning", "host", "apply", "specs", "util"];

/// `path` without the wing it starts with, if it does and goes on: a
/// unit's path.
fn unwinged(mut path: Vec<String>) -> Vec<String> {
    if path.len() > 1 && WINGS.contains(&path[0].as_str()) {
        path.remove(0);
    }
    path
}

/// The directory of a unit's path (`[planner]` → `src/planning/planner`).
fn unit_dir(src: &Path, path: &[String]) -> PathBuf {
    let plain = src.join(path.join("/"));
    if path.is_empty() {
        return plain;
    }
    WINGS
        .iter()
        .map(|wing| src.join(wing).join(path.join("/")))
        .find(|dir| dir.exists() || dir.with_extension("rs").exists())
        .unwrap_or(plain)
}

/// The module path of a source file, as a unit's: `src/host/driver/proc.rs`
/// → `[driver, proc]`, `src/host/driver/mod.rs` → `[driver]`; `lib.rs` and
/// `main.rs` are the crate.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    unwinged(raw_module_of(src, file))
}

/// The module path of a source file as written: `src/host/driver/proc.rs`
/// → `[host, driver, proc]`.
fn raw_module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("below src/");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Whether a file is test code, which may reach anywhere.
fn is_test(module: &[String]) -> bool {
    module.iter().any(|m| m == "tests" || m.ends_with("_tests"))
}

/// The code of a file without its `#[cfg(test)]` module, whose imports don't count.
fn non_test_code(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests")
        .or_else(|| text.find("#[cfg(test)]\npub(crate) mod tests"))
        .map_or(text, |at| &text[..at])
}

/// The code without `//` comments, whose paths name nothing imported.
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module paths a file names with `crate::a::b…`, in `use` lines or inline,
/// with `use crate::{a, b::c}` groups expanded.
fn crate_references(text: &str) -> Vec<Vec<String>> {
    references(text, "crate::")
}

/// The paths a file names after `prefix` (`crate::`, `super::`).
fn references(text: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut refs = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        rest = &rest[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let path: Vec<String> = item
                    .trim()
                    .split("::")
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect();
                if !path.is_empty() {
                    refs.push(path);
                }
            }
            continue;
        }
        let path: Vec<String> = rest
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .next()
            .unwrap_or_default()
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        refs.push(unwinged(path));
    }
    refs
}

/// A cycle in `graph`, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

/// Import edges at one level: between top-level modules (`parent` empty),
/// or between the children of `parent`.
fn edges(src: &Path, parent: &[String]) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let module = module_of(src, &file);
        if is_test(&module) || module.len() <= parent.len() || !module.starts_with(parent) {
            continue;
        }
        let from = module[parent.len()].clone();
        let text = fs::read_to_string(&file).expect("read source");
        let code = without_comments(non_test_code(&text));
        let code = code.as_str();
        let mut targets = crate_references(code);
        // `super::x` from a child names a sibling.
        if module.len() == parent.len() + 1 && !parent.is_empty() {
            for path in references(code, "super::") {
                let mut full = parent.to_vec();
                full.extend(path);
                targets.push(full);
            }
        }
        for target in targets {
            if target.len() > parent.len() && target.starts_with(parent) {
                let to = &target[parent.len()];
                let mut path = parent.to_vec();
                path.push(to.clone());
                let dir = unit_dir(src, &path);
                let is_module = dir.with_extension("rs").exists() || dir.join("mod.rs").exists();
                if *to != from && !to.is_empty() && is_module {
                    graph.entry(from.clone()).or_default().insert(to.clone());
                }
            }
        }
    }
    graph
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let top = edges(&src, &[]);
    assert!(
        top.contains_key("hook") && top["hook"].contains("planner"),
        "the reader found no edges: {top:?}"
    );
    if let Some(cycle) = find_cycle(&top) {
        panic!(
            "import cycle between top-level modules: {}",
            cycle.join(" → ")
        );
    }
    let parents: BTreeSet<String> = top.keys().cloned().collect();
    for parent in parents {
        let graph = edges(&src, std::slice::from_ref(&parent));
        if let Some(cycle) = find_cycle(&graph) {
            panic!("import cycle inside {parent}: {}", cycle.join(" → "));
        }
    }
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("image", &["config"][..]),
        ("plan", &["image"]),
        ("config", &["plan"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
    .collect();
    assert!(find_cycle(&graph).is_some());
    let acyclic: BTreeMap<String, BTreeSet<String>> = [("plan", &["image"][..])]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
        .collect();
    assert!(find_cycle(&acyclic).is_none());
}

/// A directory of this run's for a made-up `src/` tree.
fn scratch_tree(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("architecture-{name}-{}", std::process::id()))
}

/// Writes `text` to `rel` below `dir`, making its directories.
fn write_file(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

#[test]
fn the_reader_sees_use_lines_groups_and_super_paths() {
    let dir = scratch_tree("imports");
    let write = |rel: &str, text: &str| write_file(&dir, rel, text);
    write("lib.rs", "pub mod driver;\npub mod plan;\n");
    write("plan.rs", "use crate::{driver::Inventory, request};\n");
    write("driver/mod.rs", "mod a;\nmod b;\nuse crate::plan::Plan;\n");
    write("driver/a.rs", "use super::{b::Thing, Error};\n");
    write(
        "driver/b.rs",
        "use crate::driver::a::Other;\n#[cfg(test)]\nmod tests {\n    use crate::plan::X;\n}\n",
    );
    let top = edges(&dir, &[]);
    let inner = edges(&dir, &["driver".to_string()]);
    fs::remove_dir_all(&dir).unwrap();
    assert!(find_cycle(&top).is_some(), "{top:?}");
    assert_eq!(find_cycle(&inner).map(|c| c.len()), Some(3), "{inner:?}");
    assert!(top["plan"].contains("driver") && top["driver"].contains("plan"));
}

#[test]
fn unsafe_code_lives_in_src_sys_alone() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    assert!(
        lib.contains("#![deny(unsafe_code)]"),
        "lib.rs must deny unsafe code"
    );
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut found = Vec::new();
    for file in files {
        if file.starts_with(src.join("sys")) {
            continue;
        }
        let text = fs::read_to_string(&file).expect("read source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            let allowed = code.contains("#[allow(unsafe_code)]")
                && (file.ends_with("main.rs") || text.lines().nth(n + 1) == Some("pub mod sys;"));
            if (code.contains("unsafe ")
                || code.contains("unsafe{")
                || code.contains("allow(unsafe_code)"))
                && !allowed
            {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "unsafe code outside src/sys:\n{}",
        found.join("\n")
    );
}

/// The non-test code of every source file of `src/`, comments removed,
/// with its module path.
fn code_by_module(src: &Path) -> Vec<(Vec<String>, PathBuf, String)> {
    let mut files = Vec::new();
    sources(src, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|file| {
            let module = module_of(src, &file);
            if is_test(&module) {
                return None;
            }
            let text = fs::read_to_string(&file).expect("read source");
            let code = without_comments(non_test_code(&text));
            Some((module, file, code))
        })
        .collect()
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn only_the_planner_calls_discovery() {
    let mut found = Vec::new();
    let mut planner_calls = 0;
    for (module, file, code) in code_by_module(&src()) {
        let calls = ["Inventory::discover", "discover_with_snapshot("]
            .iter()
            .map(|call| code.matches(call).count())
            .sum::<usize>();
        match module.first().map(String::as_str) {
            Some("planner") => planner_calls += calls,
            // Discovery itself.
            Some("driver") => {}
            _ if calls > 0 => found.push(file.display().to_string()),
            _ => {}
        }
    }
    assert!(
        planner_calls >= 2,
        "the reader found no discovery call in the planner"
    );
    assert!(
        found.is_empty(),
        "discovery called outside the planner (use planner::plan, plan_each_device or inventory): {}",
        found.join(", ")
    );
}

#[test]
fn the_planner_offers_its_entry_points_only() {
    let text = fs::read_to_string(src().join("planning/planner/mod.rs"))
        .expect("read planning/planner/mod.rs");
    let code = without_comments(non_test_code(&text));
    let public: Vec<&str> = code
        .lines()
        .filter_map(|line| line.strip_prefix("pub fn "))
        .filter_map(|rest| rest.split(['(', '<']).next())
        .collect();
    assert_eq!(
        public,
        ["plan", "inventory", "examine", "plan_each_device"],
        "a consumer must not sequence the planner's steps itself"
    );
}

/// What consumers of the planner may share with each other: the CDI
/// format (its spec, its names, the directories specs are read from and the
/// devices they define) and a plan as container edits, which the runtime
/// wrapper writes into a `config.json` as a CDI spec carries them, and the
/// error those return.
const SHARED: [&str; 9] = [
    "spec", "dirs", "name", "registry", "edits", "apply", "Spec", "Callback", "Error",
];

/// The planner's entry points, as a consumer calls them.
const PLANNER_CALLS: [&str; 4] = [
    "planner::plan(",
    "planner::inventory(",
    "planner::examine(",
    "planner::plan_each_device(",
];

/// `code` cut into the functions it defines (each from its `fn` line to
/// the next one's), with the name of each.
fn functions(code: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in code.lines() {
        let trimmed = line.trim_start();
        let rest = ["fn ", "pub fn ", "pub(crate) fn ", "pub(super) fn "]
            .iter()
            .find_map(|start| trimmed.strip_prefix(start));
        if let Some(rest) = rest {
            let name = rest.split(['(', '<']).next().unwrap_or_default();
            out.push((name.to_string(), String::new()));
        }
        if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// The planner calls in `code`.
fn planner_calls(code: &str) -> usize {
    PLANNER_CALLS
        .iter()
        .map(|call| code.matches(call).count())
        .sum()
}

#[test]
fn each_consumer_makes_one_planner_call() {
    let mut found = Vec::new();
    let mut doctor = Vec::new();
    let mut seen = 0;
    for (module, file, code) in code_by_module(&src()) {
        if module.first().map(String::as_str) == Some("planner") {
            continue;
        }
        for (name, body) in functions(&code) {
            let calls = planner_calls(&body);
            seen += calls;
            if calls > 1 {
                found.push(format!("{}: {name} makes {calls}", file.display()));
            }
            if calls > 0 && module.first().map(String::as_str) == Some("doctor") {
                doctor.push(format!("{}: {name}", file.display()));
            }
        }
    }
    assert!(seen >= 8, "the reader found {seen} planner calls");
    assert!(
        found.is_empty(),
        "a function calls the planner more than once (one call returns all it needs):\n{}",
        found.join("\n")
    );
    // Doctor is one consumer, spread over its layers' files.
    assert_eq!(
        doctor.len(),
        1,
        "doctor must make one planner call (planner::examine): {doctor:?}"
    );
}

#[test]
fn the_function_reader_counts_planner_calls_per_function() {
    let code = "fn a() {\n    planner::plan(c, i)?;\n    planner::inventory(c, s)?;\n}\n\
                pub(super) fn b() {\n    planner::examine(c, s, None)\n}\n";
    let counted: Vec<(String, usize)> = functions(code)
        .into_iter()
        .map(|(name, body)| (name, planner_calls(&body)))
        .collect();
    assert_eq!(counted, [("a".to_string(), 2), ("b".to_string(), 1)]);
}

/// The types deriving `thiserror::Error` in `code`: `enum Error`, `struct Expired`.
fn error_types(code: &str) -> Vec<String> {
    let mut types = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[derive(") {
        rest = &rest[at + "#[derive(".len()..];
        let end = rest.find(")]").unwrap_or(rest.len());
        let derives_error = rest[..end]
            .split(',')
            .any(|d| matches!(d.trim(), "Error" | "thiserror::Error"));
        if !derives_error {
            continue;
        }
        let item = rest[end..]
            .split_whitespace()
            .skip_while(|w| *w != "enum" && *w != "struct")
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        types.push(
            item.split(['{', '(', '<', ';'])
                .next()
                .unwrap_or_default()
                .to_string(),
        );
    }
    types
}

/// Where `src` breaks "one error type per module": each top-level module
/// has at most one type deriving `thiserror::Error`, in its own file
/// (`src/x.rs` or `src/x/mod.rs`); its submodules return that one.
fn error_types_out_of_place(src: &Path) -> (usize, Vec<String>) {
    let mut by_module: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut found = Vec::new();
    let mut total = 0;
    for (module, file, code) in code_by_module(src) {
        let Some(top) = module.first() else { continue };
        for item in error_types(&code) {
            total += 1;
            let at = format!("{}: {item}", file.display());
            if module.len() > 1 {
                found.push(format!("{at} (in a submodule: use crate::{top}::Error)"));
            }
            by_module.entry(top.clone()).or_default().push(at);
        }
    }
    for (top, items) in by_module {
        if items.len() > 1 {
            found.push(format!(
                "{top} has {} error types: {}",
                items.len(),
                items.join(", ")
            ));
        }
    }
    (total, found)
}

#[test]
fn each_module_has_one_error_type() {
    let (total, found) = error_types_out_of_place(&src());
    assert!(total >= 20, "the reader found {total} error types");
    assert!(
        found.is_empty(),
        "one thiserror error type per module, in the module's own file:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_error_reader_finds_a_second_error_and_one_in_a_submodule() {
    let dir = scratch_tree("errors");
    let write = |rel: &str, text: &str| write_file(&dir, rel, text);
    write(
        "driver/mod.rs",
        "#[derive(Debug, Error)]\npub enum Error {}\n#[derive(Debug, Clone)]\nstruct Plain;\n",
    );
    write(
        "driver/snapshot.rs",
        "/// Why.\n#[derive(Debug, thiserror::Error, PartialEq)]\n#[error(\"x\")]\npub struct Refused { a: u8 }\n",
    );
    write(
        "plan.rs",
        "#[derive(Debug, Error)]\npub enum Error {}\n#[derive(Debug, Error)]\npub enum Other {}\n",
    );
    write(
        "image.rs",
        "#[derive(Debug, Error)]\npub enum Error {}\n#[cfg(test)]\nmod tests {\n#[derive(Debug, Error)]\nenum T {}\n}\n",
    );
    let (total, found) = error_types_out_of_place(&dir);
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(total, 5, "{found:?}");
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found[0].contains("struct Refused"), "{found:?}");
    assert!(
        found.iter().any(|f| f.starts_with("plan has 2")),
        "{found:?}"
    );
}

#[test]
fn consumers_do_not_call_each_other() {
    // The hook, the CDI spec, the runtime wrapper and doctor each make their
    // own planner call; the fronts parse and the application layer routes to them.
    let consumers = ["hook", "cdi", "runtime", "doctor"];
    let fronts = ["front", "app"];
    let mut found = Vec::new();
    let mut seen = 0;
    for (module, file, code) in code_by_module(&src()) {
        let Some(from) = module.first().map(String::as_str) else {
            continue;
        };
        if !consumers.contains(&from) {
            continue;
        }
        for target in crate_references(&code) {
            let Some(to) = target.first().map(String::as_str) else {
                continue;
            };
            seen += 1;
            let shared = to == "cdi" && target.get(1).is_some_and(|m| SHARED.contains(&m.as_str()));
            if to != from && (fronts.contains(&to) || (consumers.contains(&to) && !shared)) {
                found.push(format!("{}: crate::{}", file.display(), target.join("::")));
            }
        }
    }
    assert!(seen > 0, "the reader found no reference");
    assert!(
        found.is_empty(),
        "a consumer calls another consumer or a command line:\n{}",
        found.join("\n")
    );
}

#[test]
fn main_knows_no_command() {
    let text = fs::read_to_string(src().join("main.rs")).expect("read main.rs");
    let code = without_comments(&text);
    for word in ["Command", "Operation", "front::", "app::", "Config"] {
        assert!(
            !code.contains(word),
            "main.rs names {word}: routing and commands belong to entry, front and app"
        );
    }
    assert!(
        code.contains("entry::run("),
        "main.rs must hand the command line to entry::run"
    );
}

/// The fronts: each parses one command line. `common` and `hooks` hold
/// what several read the same way and are no front.
const FRONTS: [&str; 5] = ["ours", "runtime_hook", "nvidia_cli", "ctk", "cdi_hook"];

/// The fronts a front's file names, through `crate::front::` or `super::`.
fn fronts_named(module: &[String], code: &str) -> Vec<String> {
    let Some(own) = module.get(1).filter(|_| module[0] == "front") else {
        return Vec::new();
    };
    let up = "super::".repeat(module.len() - 1);
    crate_references(code)
        .into_iter()
        .filter_map(|path| (path.first()? == "front").then(|| path.get(1).cloned())?)
        .chain(
            references(code, &up)
                .into_iter()
                .filter_map(|path| path.first().cloned()),
        )
        .filter(|to| to != own && FRONTS.contains(&to.as_str()))
        .collect()
}

#[test]
fn fronts_import_no_front() {
    let mut found = Vec::new();
    let mut fronts = BTreeSet::new();
    for (module, file, code) in code_by_module(&src()) {
        if module.first().map(String::as_str) == Some("front") {
            if let Some(front) = module.get(1).filter(|f| FRONTS.contains(&f.as_str())) {
                fronts.insert(front.clone());
            }
        }
        for to in fronts_named(&module, &code) {
            found.push(format!("{}: front {to}", file.display()));
        }
    }
    assert_eq!(fronts.len(), FRONTS.len(), "the reader found {fronts:?}");
    assert!(
        found.is_empty(),
        "a front imports another front (share through front::common or front::hooks):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_front_reader_finds_a_front_named_through_crate_or_super() {
    let module = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        fronts_named(
            &module(&["front", "ctk"]),
            "use super::{common::VERSION, ours::Cli};\n"
        ),
        ["ours"]
    );
    assert_eq!(
        fronts_named(
            &module(&["front", "ctk", "cdi"]),
            "use super::super::cdi_hook::X;\n"
        ),
        ["cdi_hook"]
    );
    assert_eq!(
        fronts_named(
            &module(&["front", "ours"]),
            "let x = crate::front::nvidia_cli::parse(a);\n"
        ),
        ["nvidia_cli"]
    );
    assert!(fronts_named(
        &module(&["front", "ours", "fast"]),
        "use super::{Cli, Command};\n"
    )
    .is_empty());
    assert!(fronts_named(&module(&["app", "list"]), "use crate::front::ours::Cli;\n").is_empty());
}

/// Calls that load the configuration or set up the log, and the modules
/// besides the application layer that may make them: doctor reads config
/// files to judge them (a file that fails is its finding), and the
/// modules that define them.
const SET_UP: [(&str, &[&str]); 3] = [
    ("Config::load(", &["config", "doctor"]),
    ("bounded_load(", &["deadline"]),
    ("logging::init(", &["logging"]),
];

#[test]
fn only_the_application_layer_loads_the_config_and_sets_up_the_log() {
    let mut found = Vec::new();
    let mut in_app = 0;
    for (module, file, code) in code_by_module(&src()) {
        let top = module.first().map(String::as_str).unwrap_or_default();
        for (call, allowed) in SET_UP {
            let calls = code.matches(call).count();
            if top == "app" {
                in_app += calls;
            } else if calls > 0 && !allowed.contains(&top) {
                found.push(format!("{}: {call}", file.display()));
            }
        }
    }
    assert!(in_app >= 3, "the reader found {in_app} set-up calls in app");
    assert!(
        found.is_empty(),
        "the configuration is loaded and the log set up once, by app::run:\n{}",
        found.join("\n")
    );
}

/// The request policy settings of the configuration, which only the
/// planner reads (and `config`, which defines them).
const POLICY: [&str; 6] = [
    ".accept_volume_mounts",
    ".accept_env_when_unprivileged",
    ".disable_require",
    ".grant_device_cgroup",
    ".ignore_imex_channel_requests",
    ".no_additional_gids",
];

#[test]
fn only_the_planner_reads_request_policy() {
    let mut found = Vec::new();
    let mut in_planner = 0;
    for (module, file, code) in code_by_module(&src()) {
        let top = module.first().map(String::as_str).unwrap_or_default();
        for setting in POLICY {
            let reads = code.matches(setting).count();
            match top {
                "planner" => in_planner += reads,
                "config" => {}
                _ if reads > 0 => found.push(format!("{}: {setting}", file.display())),
                _ => {}
            }
        }
    }
    assert!(
        in_planner >= 3,
        "the reader found {in_planner} reads in the planner"
    );
    assert!(
        found.is_empty(),
        "request policy read outside the planner (ask planner::plan):\n{}",
        found.join("\n")
    );
}

/// The calls that change a container, which only the one apply sequence
/// (`hook::Target`) makes, besides `inject` itself.
const APPLY_STEPS: [&str; 3] = ["inject::apply(", "enter_mount_namespace(", "Sources::open("];

#[test]
fn one_apply_sequence_changes_containers() {
    let mut found = Vec::new();
    let mut in_target = 0;
    for (module, file, code) in code_by_module(&src()) {
        let at: Vec<&str> = module.iter().map(String::as_str).collect();
        for step in APPLY_STEPS {
            let calls = code.matches(step).count();
            match at.as_slice() {
                ["hook", "target"] => in_target += calls,
                ["inject", ..] | ["hook", "fake"] => {}
                _ if calls > 0 => found.push(format!("{}: {step}", file.display())),
                _ => {}
            }
        }
    }
    assert!(
        in_target >= 4,
        "the reader found {in_target} steps in hook::target"
    );
    assert!(
        found.is_empty(),
        "a container changed outside hook::Target::apply:\n{}",
        found.join("\n")
    );
}

/// The `match` blocks of `code` over `NodeRole` (an arm's pattern line
/// starts with `NodeRole::` or `| NodeRole::`) that have a wildcard arm
/// (`_ =>`, `_ if …`) of their own: each by the line it starts on.
fn wildcard_role_matches(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("match ") {
        let start = from + at;
        from = start + "match ".len();
        let word = code[..start]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        let Some(open) = code[from..].find('{').map(|o| from + o) else {
            break;
        };
        if !word {
            continue;
        }
        // The block's own text: its arms, without what nested blocks hold.
        let mut depth = 0;
        let mut own = String::new();
        for c in code[open..].chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 1 => break,
                '}' => depth -= 1,
                _ if depth == 1 => own.push(c),
                _ => {}
            }
        }
        let lines = || own.lines().map(str::trim_start);
        let over_roles =
            lines().any(|l| l.starts_with("NodeRole::") || l.starts_with("| NodeRole::"));
        let wildcard = lines().any(|l| l.starts_with("_ =>") || l.starts_with("_ if "));
        if over_roles && wildcard {
            let line = code[start..].lines().next().unwrap_or_default().trim();
            found.push(line.to_string());
        }
    }
    found
}

#[test]
fn no_match_over_node_roles_has_a_wildcard_arm() {
    // A new role (or device class) must fail to compile until every map
    // of roles says what it gets: a `_ =>` arm would give it nothing.
    let mut found = Vec::new();
    let mut seen = 0;
    for (_, file, code) in code_by_module(&src()) {
        seen += code.matches("NodeRole::").count();
        for line in wildcard_role_matches(&code) {
            found.push(format!("{}: {line}", file.display()));
        }
    }
    assert!(seen >= 20, "the reader found {seen} NodeRole paths");
    assert!(
        found.is_empty(),
        "a match over NodeRole with a wildcard arm (list the roles instead):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_role_match_reader_finds_wildcards_at_its_own_level_only() {
    let code = "fn a(r: NodeRole) -> bool {\n    match r {\n        NodeRole::Gpu => true,\n        _ => false,\n    }\n}\n\
                fn b(r: NodeRole) -> u8 {\n    let f = |x| match x {\n        NodeRole::Gpu\n        | NodeRole::Dxg => 1,\n        NodeRole::Uvm => match y {\n            _ => 2,\n        },\n    };\n    0\n}\n\
                fn c(s: Stat) -> bool {\n    match s {\n        Stat::Missing => true,\n        _ => false,\n    }\n}\n\
                fn d(n: u8) {\n    let rematch = 1;\n}\n";
    assert_eq!(wildcard_role_matches(code), ["match r {"]);
}

/// Where container engines keep their configuration: a string literal of
/// product code that names one of these, or a path below one, is an
/// engine path.
const ENGINE_PLACES: [&str; 7] = [
    "/etc/docker",
    "/etc/containerd",
    "/etc/crio",
    "/etc/containers",
    "/usr/share/containers",
    "/etc/cdi",
    "/var/run/cdi",
];

/// The string literals of `code` that name an engine path, as written.
fn engine_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find('"') {
        rest = &rest[at + 1..];
        let end = rest.find('"').unwrap_or(rest.len());
        let literal = &rest[..end];
        let names_one = ENGINE_PLACES.iter().any(|place| {
            literal
                .strip_prefix(place)
                .is_some_and(|below| below.is_empty() || below.starts_with('/'))
        });
        if names_one {
            found.push(literal.to_string());
        }
        rest = &rest[(end + 1).min(rest.len())..];
    }
    found
}

#[test]
fn each_engine_path_is_written_once() {
    let mut written: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (_, file, code) in code_by_module(&src()) {
        for path in engine_paths(&code) {
            written
                .entry(path)
                .or_default()
                .push(file.display().to_string());
        }
    }
    assert!(
        written.len() >= 8,
        "the reader found {} engine paths: {written:?}",
        written.len()
    );
    let twice: Vec<String> = written
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .map(|(path, files)| format!("{path:?} in {}", files.join(", ")))
        .collect();
    assert!(
        twice.is_empty(),
        "an engine path is written more than once (engine_config holds each engine's paths):\n{}",
        twice.join("\n")
    );
    // The CDI directories are the CDI standard's, shared by every engine
    // (config.rs, cdi/): every other engine path is its engine's model's.
    let model = src().join("specs/engine_config");
    let elsewhere: Vec<String> = written
        .iter()
        .filter(|(path, _)| !path.starts_with("/etc/cdi") && !path.starts_with("/var/run/cdi"))
        .flat_map(|(path, files)| {
            files
                .iter()
                .filter(|file| !Path::new(file).starts_with(&model))
                .map(move |file| format!("{path:?} in {file}"))
        })
        .collect();
    assert!(
        elsewhere.is_empty(),
        "an engine path is written outside src/engine_config:\n{}",
        elsewhere.join("\n")
    );
}

#[test]
fn the_engine_path_reader_finds_literals_of_engine_places_only() {
    let code = "const A: &str = \"/etc/docker/daemon.json\";\n\
                let b = [\"/etc/cdi\", \"/etc/cdictl\", \"see /etc/crio\"];\n\
                let c = concat!(dir!(), \"/99-nvidia.conf\");\n";
    assert_eq!(engine_paths(code), ["/etc/docker/daemon.json", "/etc/cdi"]);
}

/// The most product lines a source file holds: past it, a file is split.
const MAX_PRODUCT_LINES: usize = 700;

#[test]
fn no_file_holds_more_than_700_product_lines() {
    let mut files = Vec::new();
    sources(&src(), &mut files);
    let long: Vec<String> = files
        .iter()
        .filter(|file| !is_test(&module_of(&src(), file)))
        .filter_map(|file| {
            let text = fs::read_to_string(file).expect("read source");
            let lines = non_test_code(&text).lines().count();
            (lines > MAX_PRODUCT_LINES).then(|| format!("{}: {lines}", file.display()))
        })
        .collect();
    assert!(files.len() > 50, "the reader found {} files", files.len());
    assert!(
        long.is_empty(),
        "files past {MAX_PRODUCT_LINES} product lines (split them):\n{}",
        long.join("\n")
    );
}

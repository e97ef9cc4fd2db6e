//! NVIDIA's config file, `/etc/nvidia-container-runtime/config.toml`: each
//! key of NVIDIA's v1.20 schema ([`KEYS`]), what it does here, and its
//! value translated into ours.
//!
//! A host set up by NVIDIA's instructions keeps its settings when our
//! packages replace NVIDIA's: every key with an equivalent takes effect
//! (ours wins where our file sets the same thing), and every other key is
//! accounted for in a [`Report`] that doctor prints and the first start
//! logs. Nothing in NVIDIA's file is dropped without a word.

use std::path::{Path, PathBuf};

use toml::{Table, Value};

/// Where NVIDIA's toolkit keeps its config file, and where we read it unless
/// our own file's `nvidia-config` names another (or `""`, none).
pub const DEFAULT_PATH: &str = "/etc/nvidia-container-runtime/config.toml";

/// How a key's value is written in NVIDIA's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `true` / `false`.
    Bool,
    /// A string.
    String,
    /// A list of strings.
    List,
}

/// How a key's value becomes ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Translate {
    /// The same value.
    Same,
    /// The opposite boolean (`no-cgroups` against `grant-device-cgroup`).
    Not,
    /// NVIDIA's logrus level names (`warning`, `trace`, `panic`, …).
    Level,
    /// `nvidia-container-runtime.mode`: every value is ours.
    RuntimeMode,
    /// `modes.legacy.cuda-compat-mode`: `hook` is ours, `mount` is not.
    CompatMode,
    /// `features.disable-cuda-compat-lib-hook`: `true` turns compat off.
    DisableCompat,
    /// A list that asks for nothing while it is empty; otherwise not done here, for this reason.
    EmptyList(&'static str),
}

/// What a key of NVIDIA's does here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Here {
    /// It sets our key at this path, its value translated.
    Ours(&'static [&'static str], Translate),
    /// It has nothing to do here, for this reason: we do that job another way.
    NoEffect(&'static str),
    /// It asks for something we do not do, for this reason.
    Unhonoured(&'static str),
}

/// One key of NVIDIA's v1.20 config schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// Its dotted name, as `nvidia-ctk config --set` takes it.
    pub name: &'static str,
    /// How its value is written.
    pub kind: Kind,
    /// NVIDIA's default, as TOML, for the default file.
    pub default: &'static str,
    /// Whether NVIDIA's default file has it commented out.
    pub commented: bool,
    /// What it does here.
    pub here: Here,
}

const fn key(name: &'static str, kind: Kind, default: &'static str, here: Here) -> Key {
    Key {
        name,
        kind,
        default,
        commented: false,
        here,
    }
}

const fn commented(name: &'static str, kind: Kind, default: &'static str, here: Here) -> Key {
    Key {
        name,
        kind,
        default,
        commented: true,
        here,
    }
}

use Here::{NoEffect, Ours, Unhonoured};
use Kind::{Bool, List, String as Str};
use Translate::{CompatMode, DisableCompat, EmptyList, Level, Not, RuntimeMode, Same};

const NO_CLI: &str = "no nvidia-container-cli is run: the hook does its work itself";
const NO_LDCONFIG: &str =
    "no ldconfig is run, from the image or the host: the loader cache is written in Rust";
const CSV_ROOT: &str = "the CSV mount specs are read from the driver root's \
                        /etc/nvidia-container-runtime/host-files-for-container.d";
const CSV_COMPAT: &str =
    "a CSV host's edits carry no enable-cuda-compat: NVIDIA's do only where NVML answers";
const JIT_EDITS: &str =
    "jit-cdi edits come from the planner as legacy's do; nvcdi's options do not apply";

/// Every key of NVIDIA's v1.20 config (`api/config/v1`), in the order of
/// NVIDIA's default file.
pub const KEYS: [Key; 37] = [
    commented("accept-nvidia-visible-devices-as-volume-mounts", Bool, "false", Ours(&["accept-volume-mounts"], Same)),
    commented("accept-nvidia-visible-devices-envvar-when-unprivileged", Bool, "true", Ours(&["accept-env-when-unprivileged"], Same)),
    key("disable-require", Bool, "false", Ours(&["disable-require"], Same)),
    key("supported-driver-capabilities", Str, "\"compat32,compute,display,graphics,ngx,utility,video\"", Ours(&["supported-capabilities"], Same)),
    commented("swarm-resource", Str, "\"DOCKER_RESOURCE_GPU\"", Unhonoured("Docker Swarm's resource variables are not read: a container asks with NVIDIA_VISIBLE_DEVICES")),
    commented("features.allow-cuda-compat-libs-from-container", Bool, "false", NoEffect("an image's compat libraries are judged by the hook itself (cuda-compat.mode)")),
    commented("features.allow-ldconfig-from-container", Bool, "false", NoEffect(NO_LDCONFIG)),
    commented("features.allow-unknown-oci-spec-fields", Bool, "false", NoEffect("the runtime wrapper always keeps fields it does not know")),
    commented("features.disable-cuda-compat-lib-hook", Bool, "false", Ours(&["cuda-compat", "mode"], DisableCompat)),
    commented("features.disable-imex-channel-creation", Bool, "false", Unhonoured("requested IMEX channels always get their nodes")),
    commented("features.ignore-imex-channel-requests", Bool, "false", Ours(&["ignore-imex-channel-requests"], Same)),
    commented("features.no-additional-gids-for-device-nodes", Bool, "false", Ours(&["no-additional-gids"], Same)),
    commented("nvidia-container-cli.debug", Str, "\"/var/log/nvidia-container-toolkit.log\"", Ours(&["log", "file"], Same)),
    key("nvidia-container-cli.environment", List, "[]", Ours(&[], EmptyList(NO_CLI))),
    commented("nvidia-container-cli.ldcache", Str, "\"/etc/ld.so.cache\"", Unhonoured("the loader cache is read at the driver root's etc/ld.so.cache")),
    key("nvidia-container-cli.ldconfig", Str, "\"@/sbin/ldconfig\"", NoEffect(NO_LDCONFIG)),
    key("nvidia-container-cli.load-kmods", Bool, "true", NoEffect("the hook never loads kernel modules: the driver's are loaded at boot (the refresh unit runs nvidia-modprobe)")),
    commented("nvidia-container-cli.no-cgroups", Bool, "false", Ours(&["grant-device-cgroup"], Not)),
    commented("nvidia-container-cli.no-pivot", Bool, "false", NoEffect("the hook never pivots: it works on descriptors it resolved in the root")),
    commented("nvidia-container-cli.path", Str, "\"/usr/bin/nvidia-container-cli\"", NoEffect(NO_CLI)),
    commented("nvidia-container-cli.root", Str, "\"/run/nvidia/driver\"", Ours(&["driver", "root"], Same)),
    commented("nvidia-container-cli.user", Str, "\"root:video\"", NoEffect(NO_CLI)),
    commented("nvidia-container-runtime.debug", Str, "\"/var/log/nvidia-container-runtime.log\"", Ours(&["log", "file"], Same)),
    key("nvidia-container-runtime.log-level", Str, "\"info\"", Ours(&["log", "level"], Level)),
    key("nvidia-container-runtime.mode", Str, "\"auto\"", Ours(&["runtime", "mode"], RuntimeMode)),
    key("nvidia-container-runtime.runtimes", List, "[\"runc\", \"crun\"]", Ours(&["runtime", "runtimes"], Same)),
    key("nvidia-container-runtime.modes.cdi.annotation-prefixes", List, "[\"cdi.k8s.io/\"]", Ours(&["runtime", "cdi", "annotation-prefixes"], Same)),
    key("nvidia-container-runtime.modes.cdi.default-kind", Str, "\"nvidia.com/gpu\"", Ours(&["runtime", "cdi", "default-kind"], Same)),
    key("nvidia-container-runtime.modes.cdi.spec-dirs", List, "[\"/etc/cdi\", \"/var/run/cdi\"]", Ours(&["runtime", "cdi", "spec-dirs"], Same)),
    commented("nvidia-container-runtime.modes.csv.compat-container-root", Str, "\"\"", NoEffect(CSV_COMPAT)),
    key("nvidia-container-runtime.modes.csv.mount-spec-path", Str, "\"/etc/nvidia-container-runtime/host-files-for-container.d\"", NoEffect(CSV_ROOT)),
    commented("nvidia-container-runtime.modes.jit-cdi.nvcdi-disable-hooks", List, "[]", Ours(&[], EmptyList(JIT_EDITS))),
    commented("nvidia-container-runtime.modes.jit-cdi.nvcdi-feature-flags", List, "[]", Ours(&[], EmptyList(JIT_EDITS))),
    key("nvidia-container-runtime.modes.legacy.cuda-compat-mode", Str, "\"ldconfig\"", Ours(&["cuda-compat", "mode"], CompatMode)),
    key("nvidia-container-runtime-hook.path", Str, "\"nvidia-container-runtime-hook\"", NoEffect("the runtime wrapper edits the spec itself and adds no prestart hook")),
    key("nvidia-container-runtime-hook.skip-mode-detection", Bool, "false", NoEffect("the hook has no modes: it always injects from the container's request")),
    key("nvidia-ctk.path", Str, "\"nvidia-ctk\"", NoEffect("specs' hooks run this program, whatever name it is called by")),
];

/// Whether `text` is a config file in NVIDIA's format: it parses, and a
/// top-level key of it is one only NVIDIA's schema has.
pub fn is_nvidias(text: &str) -> bool {
    let Ok(table) = text.parse::<Table>() else {
        return false;
    };
    table.keys().any(|top| {
        top != "disable-require"
            && all().any(|k| k.name == top || k.name.starts_with(&format!("{top}.")))
    })
}

/// The key named `name`, if NVIDIA's schema has it.
pub fn find(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// Every key, in the default file's order.
pub fn all() -> impl Iterator<Item = &'static Key> {
    KEYS.iter()
}

/// What became of one key set in NVIDIA's file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// It set our key.
    Applied {
        /// Ours, dotted.
        ours: String,
    },
    /// Our file sets the same thing (or a key of NVIDIA's before it by
    /// name does), and wins.
    Overridden {
        /// Ours, dotted.
        ours: String,
    },
    /// It has no effect here; why.
    NoEffect(&'static str),
    /// What it asks is not done here; why.
    Unhonoured(&'static str),
    /// NVIDIA's v1.20 schema has no such key (NVIDIA ignores it too).
    Unknown,
}

/// One key found in NVIDIA's file, and its fate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// NVIDIA's dotted name.
    pub key: String,
    /// Its value, as TOML.
    pub value: String,
    /// What became of it.
    pub fate: Fate,
}

/// What NVIDIA's config file contributed to the configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The file read; `None` when there was none to read.
    pub path: Option<PathBuf>,
    /// Every key set in it, by name.
    pub findings: Vec<Finding>,
    /// A digest of its bytes, so a note about it is made once per content.
    pub digest: u64,
}

impl Report {
    /// The keys whose request is not done here: doctor's warnings, and the
    /// first start's log.
    pub fn unhonoured(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| matches!(f.fate, Fate::Unhonoured(_)))
    }
}

/// Why a key of NVIDIA's file could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadValue {
    /// NVIDIA's dotted name.
    pub key: String,
    /// The value, as TOML.
    pub value: String,
    /// What was expected.
    pub reason: String,
}

/// NVIDIA's file's keys as ours: the table to lay under our own file's,
/// and what became of each key. `ours` is our own file's table: a key it
/// sets is reported overridden and left out.
pub fn translate(
    path: &Path,
    nvidia: &Table,
    ours: &Table,
    digest: u64,
) -> Result<(Table, Report), BadValue> {
    let mut report = Report {
        path: Some(path.to_path_buf()),
        findings: Vec::new(),
        digest,
    };
    let mut table = Table::new();
    let mut set = Vec::new();
    flatten("", nvidia, &mut set);
    for (name, value) in set {
        let fate = match find(&name) {
            None => Fate::Unknown,
            Some(key) => fate(key, &value, ours, &mut table)?,
        };
        report.findings.push(Finding {
            key: name,
            value: show(&value),
            fate,
        });
    }
    Ok((table, report))
}

/// What becomes of `key` = `value`, putting its translation into `table`.
fn fate(key: &Key, value: &Value, ours: &Table, table: &mut Table) -> Result<Fate, BadValue> {
    let bad = |reason: &str| BadValue {
        key: key.name.to_string(),
        value: show(value),
        reason: reason.to_string(),
    };
    let typed = match (key.kind, value) {
        (Kind::Bool, Value::Boolean(_)) | (Kind::String, Value::String(_)) => true,
        (Kind::List, Value::Array(items)) => items.iter().all(Value::is_str),
        _ => false,
    };
    if !typed {
        return Err(bad(match key.kind {
            Kind::Bool => "expected true or false",
            Kind::String => "expected a string",
            Kind::List => "expected a list of strings",
        }));
    }
    let (path, translate) = match key.here {
        Here::NoEffect(why) => return Ok(Fate::NoEffect(why)),
        Here::Unhonoured(why) => return Ok(Fate::Unhonoured(why)),
        Here::Ours(path, translate) => (path, translate),
    };
    let ours_value = match translated(translate, value) {
        Ok(Some(v)) => v,
        Ok(None) => return Ok(Fate::NoEffect("its value asks for nothing")),
        Err(why) => return Ok(Fate::Unhonoured(why)),
    };
    let dotted = path.join(".");
    if lookup(ours, path).is_some() || lookup(table, path).is_some() {
        return Ok(Fate::Overridden { ours: dotted });
    }
    insert(table, path, ours_value);
    Ok(Fate::Applied { ours: dotted })
}

/// `value` as ours: `None` when it asks for nothing, an error naming why
/// when it asks for what is not done here.
fn translated(translate: Translate, value: &Value) -> Result<Option<Value>, &'static str> {
    let text = value.as_str().unwrap_or_default();
    Ok(Some(match translate {
        Translate::Same => value.clone(),
        Translate::Not => Value::Boolean(!value.as_bool().unwrap_or_default()),
        Translate::Level => Value::String(
            match text {
                "panic" | "fatal" | "error" => "error",
                "warning" | "warn" => "warn",
                "trace" | "debug" => "debug",
                other => other,
            }
            .into(),
        ),
        Translate::RuntimeMode => value.clone(),
        Translate::CompatMode => match text {
            "hook" | "ldconfig" => Value::String("ldconfig".into()),
            "mount" => {
                return Err("compat libraries are put first in the loader cache (ldconfig), never mounted over the driver's")
            }
            _ => value.clone(),
        },
        Translate::DisableCompat => match value.as_bool() {
            Some(true) => Value::String("disabled".into()),
            _ => return Ok(None),
        },
        Translate::EmptyList(why) => match value.as_array().is_some_and(|a| a.is_empty()) {
            true => return Ok(None),
            false => return Err(why),
        },
    }))
}

/// `value` as TOML writes it, for messages: strings quoted, lists bracketed.
fn show(value: &Value) -> String {
    match value {
        Value::String(text) => format!("{text:?}"),
        Value::Integer(n) => n.to_string(),
        Value::Float(n) => n.to_string(),
        Value::Boolean(b) => b.to_string(),
        Value::Datetime(d) => d.to_string(),
        Value::Array(items) => {
            let shown: Vec<String> = items.iter().map(show).collect();
            format!("[{}]", shown.join(", "))
        }
        Value::Table(_) => "{…}".into(),
    }
}

/// Every key of `table` below `prefix`, dotted, by name.
fn flatten(prefix: &str, table: &Table, out: &mut Vec<(String, Value)>) {
    for (name, value) in table {
        let dotted = match prefix {
            "" => name.clone(),
            _ => format!("{prefix}.{name}"),
        };
        match value {
            Value::Table(inner) => flatten(&dotted, inner, out),
            other => out.push((dotted, other.clone())),
        }
    }
}

/// The value at `path` in `table`.
pub(super) fn lookup<'t>(table: &'t Table, path: &[&str]) -> Option<&'t Value> {
    let (last, parents) = path.split_last()?;
    let mut at = table;
    for name in parents {
        at = at.get(*name)?.as_table()?;
    }
    at.get(*last)
}

/// Puts `value` at `path` in `table`, making the tables on the way.
fn insert(table: &mut Table, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = table;
    for name in parents {
        let entry = at
            .entry(name.to_string())
            .or_insert_with(|| Value::Table(Table::new()));
        if !entry.is_table() {
            *entry = Value::Table(Table::new());
        }
        let Value::Table(inner) = entry else { return };
        at = inner;
    }
    at.insert(last.to_string(), value);
}

/// `under` with `over`'s keys laid on it, table by table.
pub(super) fn merge(mut under: Table, over: &Table) -> Table {
    for (name, value) in over {
        match (under.get_mut(name), value) {
            (Some(Value::Table(below)), Value::Table(above)) => {
                let merged = merge(std::mem::take(below), above);
                *below = merged;
            }
            _ => {
                under.insert(name.clone(), value.clone());
            }
        }
    }
    under
}

/// NVIDIA's default file, as `nvidia-ctk config default` prints it.
pub fn default_file() -> String {
    let mut out = String::new();
    let mut section = "";
    for key in all() {
        let (table, name) = key.name.rsplit_once('.').unwrap_or(("", key.name));
        if table != section {
            out.push_str(&format!("\n[{table}]\n"));
            section = table;
        }
        let hash = if key.commented { "#" } else { "" };
        out.push_str(&format!("{hash}{name} = {}\n", key.default));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(nvidia: &str, ours: &str) -> Result<(Table, Report), BadValue> {
        translate(
            Path::new("/n.toml"),
            &nvidia.parse().unwrap(),
            &ours.parse().unwrap(),
            0,
        )
    }

    fn fate_of<'r>(report: &'r Report, key: &str) -> &'r Fate {
        &report.findings.iter().find(|f| f.key == key).unwrap().fate
    }

    /// The keys NVIDIA's v1.20 `nvidia-ctk` knows: the `toml:"…"` tags of
    /// `api/config/v1` (config.go, cli.go, runtime.go, hook.go, features.go,
    /// toolkit-cli.go), read from the built v1.20.0 binary.
    #[test]
    fn the_table_is_nvidias_v1_20_schema() {
        let names: Vec<&str> = all().map(|k| k.name).collect();
        assert_eq!(names.len(), 37);
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "a key listed twice");
        for leaf in [
            "allow-cuda-compat-libs-from-container",
            "allow-ldconfig-from-container",
            "allow-unknown-oci-spec-fields",
            "compat-container-root",
            "cuda-compat-mode",
            "disable-cuda-compat-lib-hook",
            "disable-imex-channel-creation",
            "ignore-imex-channel-requests",
            "no-additional-gids-for-device-nodes",
            "no-cgroups",
            "no-pivot",
            "nvcdi-disable-hooks",
            "nvcdi-feature-flags",
            "skip-mode-detection",
            "swarm-resource",
            "mount-spec-path",
        ] {
            assert!(names.iter().any(|n| n.ends_with(leaf)), "{leaf} is missing");
        }
    }

    /// NVIDIA's documented multi-tenant hardening takes effect.
    #[test]
    fn hardening_keys_become_ours() {
        let (table, report) = run(
            "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n\
             accept-nvidia-visible-devices-as-volume-mounts = true\n",
            "",
        )
        .unwrap();
        assert_eq!(table["accept-env-when-unprivileged"], Value::Boolean(false));
        assert_eq!(table["accept-volume-mounts"], Value::Boolean(true));
        assert!(report
            .findings
            .iter()
            .all(|f| matches!(f.fate, Fate::Applied { .. })));
    }

    #[test]
    fn ours_wins_where_both_set_a_key() {
        let (table, report) = run(
            "disable-require = true\n[nvidia-container-cli]\nroot = \"/run/nvidia/driver\"\n",
            "disable-require = false\n",
        )
        .unwrap();
        assert!(!table.contains_key("disable-require"));
        assert_eq!(
            lookup(&table, &["driver", "root"]).unwrap().as_str(),
            Some("/run/nvidia/driver")
        );
        assert_eq!(
            fate_of(&report, "disable-require"),
            &Fate::Overridden {
                ours: "disable-require".into()
            }
        );
    }

    /// NVIDIA's rootless Docker instructions: `no-cgroups = true`.
    #[test]
    fn no_cgroups_turns_the_cgroup_grant_off() {
        let (table, _) = run("[nvidia-container-cli]\nno-cgroups = true\n", "").unwrap();
        assert_eq!(table["grant-device-cgroup"], Value::Boolean(false));
    }

    #[test]
    fn values_translate_as_nvidia_means_them() {
        let (table, report) = run(
            "[nvidia-container-runtime]\nlog-level = \"warning\"\nmode = \"jit-cdi\"\n\
             [nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = \"hook\"\n\
             [features]\ndisable-cuda-compat-lib-hook = true\n",
            "",
        )
        .unwrap();
        assert_eq!(
            lookup(&table, &["log", "level"]).unwrap().as_str(),
            Some("warn")
        );
        assert_eq!(
            lookup(&table, &["runtime", "mode"]).unwrap().as_str(),
            Some("jit-cdi")
        );
        // Two keys of NVIDIA's for one of ours: the first by name takes it
        // (here the feature, which turns compat off), the other is reported.
        assert_eq!(
            lookup(&table, &["cuda-compat", "mode"]).unwrap().as_str(),
            Some("disabled")
        );
        assert!(matches!(
            fate_of(
                &report,
                "nvidia-container-runtime.modes.legacy.cuda-compat-mode"
            ),
            Fate::Overridden { .. }
        ));
    }

    #[test]
    fn what_is_not_done_here_is_reported_never_dropped() {
        let (table, report) = run(
            "swarm-resource = \"DOCKER_RESOURCE_GPU\"\nbogus = 1\n\
             [nvidia-container-cli]\nldconfig = \"@/sbin/ldconfig\"\nload-kmods = true\n\
             [nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = \"mount\"\n\
             [nvidia-container-runtime.modes.jit-cdi]\nnvcdi-feature-flags = [\"x\"]\n",
            "",
        )
        .unwrap();
        assert!(table.is_empty(), "{table:?}");
        let mut unhonoured: Vec<&str> = report.unhonoured().map(|f| f.key.as_str()).collect();
        unhonoured.sort();
        assert_eq!(
            unhonoured,
            [
                "nvidia-container-runtime.modes.jit-cdi.nvcdi-feature-flags",
                "nvidia-container-runtime.modes.legacy.cuda-compat-mode",
                "swarm-resource",
            ]
        );
        assert_eq!(fate_of(&report, "bogus"), &Fate::Unknown);
        assert!(matches!(
            fate_of(&report, "nvidia-container-cli.ldconfig"),
            Fate::NoEffect(_)
        ));
    }

    /// NVIDIA's `mode = "csv"` (a Jetson's default file sets it) is ours.
    #[test]
    fn csv_mode_is_ours() {
        let (table, report) = run("[nvidia-container-runtime]\nmode = \"csv\"\n", "").unwrap();
        assert_eq!(table["runtime"]["mode"].as_str(), Some("csv"), "{table:?}");
        assert_eq!(report.unhonoured().count(), 0);
    }

    #[test]
    fn a_value_of_the_wrong_type_names_its_key() {
        let err = run("[nvidia-container-cli]\nno-cgroups = \"yes\"\n", "").unwrap_err();
        assert_eq!(err.key, "nvidia-container-cli.no-cgroups");
        assert_eq!(err.reason, "expected true or false");
    }

    /// `nvidia-ctk config default` of NVIDIA's v1.20.0, the sections and
    /// their keys (recorded from the built program).
    #[test]
    fn the_default_file_has_nvidias_shape() {
        let text = default_file();
        for line in [
            "#accept-nvidia-visible-devices-as-volume-mounts = false\n",
            "supported-driver-capabilities = \"compat32,compute,display,graphics,ngx,utility,video\"\n",
            "[nvidia-container-cli]\n",
            "load-kmods = true\n",
            "#no-cgroups = false\n",
            "[nvidia-container-runtime.modes.cdi]\n",
            "spec-dirs = [\"/etc/cdi\", \"/var/run/cdi\"]\n",
            "[nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = \"ldconfig\"\n",
            "[nvidia-ctk]\npath = \"nvidia-ctk\"\n",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        let parsed: Table = text.parse().unwrap();
        let (table, report) = translate(Path::new("/d"), &parsed, &Table::new(), 0).unwrap();
        assert_eq!(report.unhonoured().count(), 0, "{report:?}");
        assert!(table.contains_key("runtime"));
    }

    /// NVIDIA's hook's `-config` names NVIDIA's format (the GPU
    /// Operator's toolkit passes one); ours is told apart by its keys.
    #[test]
    fn nvidias_format_is_told_from_ours() {
        assert!(is_nvidias(&default_file()));
        assert!(is_nvidias(
            "[nvidia-container-cli]\nroot = \"/run/nvidia/driver\"\n"
        ));
        assert!(is_nvidias(
            "accept-nvidia-visible-devices-as-volume-mounts = true\n"
        ));
        assert!(!is_nvidias(
            "disable-require = true\n[driver]\nroot = \"/\"\n"
        ));
        assert!(!is_nvidias(""));
        assert!(!is_nvidias("[nvidia-container-cli\n"));
    }

    #[test]
    fn merge_lays_the_upper_table_on_the_lower() {
        let under: Table = "a = 1\n[t]\nx = 1\ny = 2\n".parse().unwrap();
        let over: Table = "[t]\ny = 3\n".parse().unwrap();
        let merged = merge(under, &over);
        let expected: Table = "a = 1\n[t]\nx = 1\ny = 3\n".parse().unwrap();
        assert_eq!(merged, expected);
    }
}

#[cfg(test)]
mod docs {
    /// docs/nvidia-ctk.md's table says what each key does here.
    #[test]
    fn every_key_is_in_the_documented_table() {
        let doc = include_str!("../../docs/nvidia-ctk.md");
        for key in super::all() {
            let leaf = key.name.rsplit('.').next().unwrap_or(key.name);
            assert!(
                doc.contains(&format!("`{}`", key.name)) || doc.contains(&format!("`.{leaf}`")),
                "{} is not in docs/nvidia-ctk.md",
                key.name
            );
        }
    }
}

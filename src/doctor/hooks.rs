//! The wiring that goes through hooks: our configuration, and the hooks.d
//! files Podman and CRI-O read. For each directory they read (Podman's two,
//! and CRI-O's `hooks_dir` from `crio.conf`), our file: whether its binary
//! exists and is executable, its stages, whether its `env` is explicit and
//! whether the config it names parses; and another injector's file
//! (NVIDIA's) that would inject a second time.
//!
//! Files are read under the host root, symlinks resolved inside it; nothing
//! is executed. The hook found here is what the live check runs.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{Check, HostRoot, Layer, Loaded};
use crate::config::{self, Config};
use crate::host::driver::DriverRoot;
use crate::specs::engine_config::hooks_d::{self, HookEntry, HookFile};
use crate::specs::engine_config::Error;

const L: Layer = Layer::Wiring;

/// The stages our hook runs at; it refuses every other.
const OUR_STAGES: &[&str] = &["prestart", "createRuntime"];

/// NVIDIA's hook binaries, by file name.
const NVIDIA_HOOKS: &[&str] = &["nvidia-container-runtime-hook", "nvidia-container-toolkit"];

/// Our hook as a hooks.d file installs it, ready for the live check.
#[derive(Debug, Clone)]
pub(crate) struct InstalledHook {
    /// Where it is installed, for messages: the hooks.d file, or dockerd.
    pub source: String,
    /// The binary, as a path on this machine (under the host root).
    pub path: PathBuf,
    /// Its argv.
    pub args: Vec<String>,
    /// Its environment, if the file sets one.
    pub env: Option<Vec<String>>,
    /// The first stage it runs at.
    pub stage: String,
}

/// What the hooks.d wiring amounts to.
#[derive(Debug, Default)]
pub(crate) struct Wired {
    /// Whether a hooks.d file runs our hook.
    pub ours: bool,
    /// Our hook, when one file runs it correctly.
    pub hook: Option<InstalledHook>,
}

/// Who a hooks.d file's binary belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Ours,
    Nvidia,
    Other,
}

/// Checks the configuration and every hooks.d file engines read.
pub(super) fn check(
    loaded: &Loaded<'_>,
    host: &HostRoot,
    crio_dirs: &[String],
    out: &mut Vec<Check>,
) -> Wired {
    config(loaded, out);
    let root = DriverRoot::new(host.root());
    let dirs = hooks_d::dirs(crio_dirs);
    let files = hooks_d::files(host, &dirs);
    let mut wired = Wired::default();
    let mut nvidia: Vec<PathBuf> = Vec::new();
    let mut ours: Vec<PathBuf> = Vec::new();
    for file in &files {
        let parsed = match HookFile::load(file) {
            Ok(parsed) => parsed,
            Err(e) => {
                let remedy = match e {
                    Error::Read { .. } => "make it readable by root, or remove it",
                    _ => {
                        "fix or remove it: Podman and CRI-O refuse to start containers \
                         while a hooks.d file does not parse"
                    }
                };
                out.push(Check::fail(L, "hooks.d", e.to_string(), remedy));
                continue;
            }
        };
        match owner(&root, &parsed.hook) {
            Owner::Ours => {
                ours.push(file.clone());
                if let Some(hook) = judge_ours(host, &root, file, &parsed, out) {
                    wired.hook.get_or_insert(hook);
                }
            }
            Owner::Nvidia => nvidia.push(file.clone()),
            Owner::Other => {}
        }
    }
    wired.ours = !ours.is_empty();
    others(&ours, &nvidia, out);
    if ours.is_empty() && nvidia.is_empty() {
        let listed: Vec<String> = dirs
            .iter()
            .map(|d| host.path(d).display().to_string())
            .collect();
        out.push(Check::ok(
            L,
            "hooks.d",
            format!(
                "no GPU hook in {}: Podman and CRI-O inject GPUs only through CDI or \
                 runtime mode here",
                listed.join(", ")
            ),
        ));
    }
    wired
}

/// Whether our configuration parses.
fn config(loaded: &Loaded<'_>, out: &mut Vec<Check>) {
    let shown = loaded
        .path
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(config::DEFAULT_PATH));
    match &loaded.error {
        Some(e) => out.push(Check::fail(
            L,
            "config",
            crate::util::error_line::error(&e),
            format!(
                "fix {} (docs/configuration.md): the hook refuses every container until then",
                shown.display()
            ),
        )),
        None if loaded.path.is_none() && !shown.exists() => out.push(Check::ok(
            L,
            "config",
            format!("no {}: the defaults apply", shown.display()),
        )),
        None => out.push(Check::ok(
            L,
            "config",
            format!("{} parses", shown.display()),
        )),
    }
    nvidia_config(&loaded.config.nvidia, out);
}

/// What NVIDIA's config file contributed: the keys that took effect, and a
/// warning for each whose request is not done here.
fn nvidia_config(report: &config::nvidia::Report, out: &mut Vec<Check>) {
    use config::nvidia::Fate;
    let Some(path) = &report.path else { return };
    let named = |want: fn(&Fate) -> bool| -> Vec<&str> {
        report
            .findings
            .iter()
            .filter(|f| want(&f.fate))
            .map(|f| f.key.as_str())
            .collect()
    };
    let applied = named(|f| matches!(f, Fate::Applied { .. }));
    let overridden = named(|f| matches!(f, Fate::Overridden { .. }));
    let no_effect = named(|f| matches!(f, Fate::NoEffect(_)));
    let unknown = named(|f| matches!(f, Fate::Unknown));
    let mut found = format!("{} is read under ours: ", path.display());
    found += &match applied.is_empty() {
        true => "no key of it takes effect".to_string(),
        false => format!("{} take effect", applied.join(", ")),
    };
    for (what, keys) in [
        ("ours sets instead", &overridden),
        (
            "have no effect here (docs/nvidia-ctk.md says why)",
            &no_effect,
        ),
        ("are not NVIDIA's keys", &unknown),
    ] {
        if !keys.is_empty() {
            found += &format!("; {} {what}", keys.join(", "));
        }
    }
    out.push(Check::ok(L, "NVIDIA config", found));
    for finding in report.unhonoured() {
        let Fate::Unhonoured(why) = finding.fate else {
            continue;
        };
        out.push(Check::warn(
            L,
            "NVIDIA config",
            format!(
                "{}: {} = {} is not honoured: {why}",
                path.display(),
                finding.key,
                finding.value
            ),
            format!(
                "remove it from {}, or see docs/nvidia-ctk.md for what does this here",
                path.display()
            ),
        ));
    }
}

/// Whose binary a hook runs: ours if it is this very program or a file named
/// as ours, NVIDIA's by NVIDIA's names, someone else's otherwise.
fn owner(root: &DriverRoot, hook: &HookEntry) -> Owner {
    let named = |path: &Path| {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "oci-nvidia-hook" {
            Some(Owner::Ours)
        } else if NVIDIA_HOOKS.contains(&name) {
            Some(Owner::Nvidia)
        } else {
            None
        }
    };
    if let Ok(resolved) = root.resolve(Path::new(&hook.path)) {
        if is_this_program(&resolved.host) {
            return Owner::Ours;
        }
        if let Some(owner) = named(&resolved.inner) {
            return owner;
        }
    }
    named(Path::new(&hook.path))
        .or_else(|| {
            named(Path::new(
                hook.args.first().map(String::as_str).unwrap_or(""),
            ))
        })
        .unwrap_or(Owner::Other)
}

/// Whether `path` is the very file this process runs.
pub(super) fn is_this_program(path: &Path) -> bool {
    let (Ok(file), Ok(me)) = (std::fs::metadata(path), std::fs::metadata("/proc/self/exe")) else {
        return false;
    };
    file.dev() == me.dev() && file.ino() == me.ino()
}

/// Judges our hooks.d file; returns the hook when the live check can run it.
fn judge_ours(
    host: &HostRoot,
    root: &DriverRoot,
    file: &Path,
    parsed: &HookFile,
    out: &mut Vec<Check>,
) -> Option<InstalledHook> {
    let name = "hooks.d";
    let shown = file.display();
    let binary = match root.resolve(Path::new(&parsed.hook.path)) {
        Ok(resolved) if resolved.metadata.is_file() && resolved.metadata.mode() & 0o111 != 0 => {
            resolved.host
        }
        Ok(resolved) => {
            out.push(Check::fail(
                L,
                name,
                format!(
                    "{shown}: hook.path {} is not an executable file",
                    resolved.host.display()
                ),
                "`make install` (or `chmod 0755` the binary): Podman and CRI-O cannot run it",
            ));
            return None;
        }
        Err(e) => {
            let why = match e {
                crate::host::driver::Error::NotFound { .. } => "does not exist".to_string(),
                other => other.to_string(),
            };
            out.push(Check::fail(
                L,
                name,
                format!("{shown}: hook.path {} {why}", parsed.hook.path),
                format!(
                    "`make install` puts the binary at /usr/local/bin/oci-nvidia-hook; \
                     or set hook.path in {shown} to where it is"
                ),
            ));
            return None;
        }
    };
    let bad: Vec<&str> = parsed
        .stages
        .iter()
        .map(String::as_str)
        .filter(|s| !OUR_STAGES.contains(s))
        .collect();
    if parsed.stages.is_empty() || !bad.is_empty() {
        out.push(Check::fail(
            L,
            name,
            format!(
                "{shown}: stages {:?}: the hook runs only at prestart or createRuntime, \
                 and refuses the others",
                parsed.stages
            ),
            format!("set \"stages\": [\"prestart\"] in {shown}"),
        ));
        return None;
    }
    if let Some(path) = config_arg(&parsed.hook.args) {
        if let Err(e) = Config::load(Some(&host.path(path))) {
            out.push(Check::fail(
                L,
                name,
                format!(
                    "{shown}: the config it names does not load: {}",
                    crate::util::error_line::error(&e)
                ),
                format!("fix {path}, or drop --config from {shown}"),
            ));
            return None;
        }
    }
    let stage = parsed.stages[0].clone();
    match &parsed.hook.env {
        None => out.push(Check::warn(
            L,
            name,
            format!("{shown}: runs oci-nvidia-hook at {stage}, but sets no env"),
            format!(
                "add \"env\": [\"{}\"] to {shown}, as hooks.d/oci-nvidia-hook.json does: a \
                 hook must never inherit an environment it did not choose",
                crate::util::this_program::HOOK_ENV[0]
            ),
        )),
        Some(_) => out.push(Check::ok(
            L,
            name,
            format!("{shown}: runs {} at {stage}, env set", binary.display()),
        )),
    }
    Some(InstalledHook {
        source: file.display().to_string(),
        path: binary,
        args: parsed.hook.args.clone(),
        env: parsed.hook.env.clone(),
        stage,
    })
}

/// The value of `--config` (or `--config=`) in a hook's argv.
fn config_arg(args: &[String]) -> Option<&str> {
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--config" {
            return it.next().map(String::as_str);
        }
        if let Some(value) = arg.strip_prefix("--config=") {
            return Some(value);
        }
    }
    None
}

/// Injectors that would run beside ours, or instead of it.
fn others(ours: &[PathBuf], nvidia: &[PathBuf], out: &mut Vec<Check>) {
    let list = |files: &[PathBuf]| {
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !ours.is_empty() && !nvidia.is_empty() {
        out.push(Check::fail(
            L,
            "second injector",
            format!(
                "NVIDIA's hook ({}) runs beside ours ({}): every GPU container gets the \
                 driver injected twice, and NVIDIA's fails where its NVML does",
                list(nvidia),
                list(ours)
            ),
            format!("remove {}: one injector per host", list(nvidia)),
        ));
    } else if !nvidia.is_empty() {
        out.push(Check::warn(
            L,
            "hooks.d",
            format!(
                "Podman and CRI-O run NVIDIA's hook ({}), not oci-nvidia-hook",
                list(nvidia)
            ),
            "replace it with hooks.d/oci-nvidia-hook.json (docs/hook.md), \
             if this host is to use oci-nvidia-hook",
        ));
    }
    if ours.len() > 1 {
        out.push(Check::warn(
            L,
            "hooks.d",
            format!("{} files run our hook: {}", ours.len(), list(ours)),
            "keep one of them: the hook runs once per file for every container",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NVIDIA's file: one ok line of what took effect, a warning for each
    /// key whose request is not done here, with its remedy.
    #[test]
    fn nvidias_file_is_reported_key_by_key() {
        let config = Config::with_nvidia(
            Path::new("/o.toml"),
            "disable-require = false\n",
            Path::new("/etc/nvidia-container-runtime/config.toml"),
            "disable-require = true\nswarm-resource = \"X\"\n\
             [nvidia-container-cli]\nno-cgroups = true\nldconfig = \"@/sbin/ldconfig\"\n",
        )
        .unwrap();
        let mut out = Vec::new();
        nvidia_config(&config.nvidia, &mut out);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0].status, super::super::Status::Ok);
        assert_eq!(
            out[0].found,
            "/etc/nvidia-container-runtime/config.toml is read under ours: \
             nvidia-container-cli.no-cgroups take effect; disable-require ours sets instead; \
             nvidia-container-cli.ldconfig have no effect here (docs/nvidia-ctk.md says why)"
        );
        assert_eq!(out[1].status, super::super::Status::Warn);
        assert!(
            out[1]
                .found
                .contains("swarm-resource = \"X\" is not honoured"),
            "{:?}",
            out[1]
        );
        // No file, no check.
        let mut out = Vec::new();
        nvidia_config(&Config::default().nvidia, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn finds_the_config_argument_in_either_form() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            config_arg(&args(&[
                "oci-nvidia-hook",
                "--config",
                "/c.toml",
                "prestart"
            ])),
            Some("/c.toml")
        );
        assert_eq!(
            config_arg(&args(&["oci-nvidia-hook", "--config=/d.toml", "prestart"])),
            Some("/d.toml")
        );
        assert_eq!(config_arg(&args(&["oci-nvidia-hook", "prestart"])), None);
    }

    #[test]
    fn a_hook_is_ours_nvidias_or_another_by_what_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let root = DriverRoot::new(dir.path());
        let entry = |path: &str, arg0: &str| HookEntry {
            path: path.into(),
            args: vec![arg0.into()],
            env: None,
        };
        assert_eq!(
            owner(&root, &entry("/usr/local/bin/oci-nvidia-hook", "x")),
            Owner::Ours
        );
        assert_eq!(
            owner(&root, &entry("/usr/bin/nvidia-container-runtime-hook", "x")),
            Owner::Nvidia
        );
        assert_eq!(
            owner(&root, &entry("/opt/hook", "oci-nvidia-hook")),
            Owner::Ours
        );
        assert_eq!(owner(&root, &entry("/opt/other", "other")), Owner::Other);
        // A link under NVIDIA's name to this very program is ours.
        std::fs::create_dir_all(dir.path().join("usr/bin")).unwrap();
        std::os::unix::fs::symlink(
            std::fs::read_link("/proc/self/exe").unwrap(),
            dir.path().join("usr/bin/nvidia-container-runtime-hook"),
        )
        .unwrap();
        // Absolute links are re-rooted: the test binary is not under the root.
        assert_eq!(
            owner(&root, &entry("/usr/bin/nvidia-container-runtime-hook", "x")),
            Owner::Nvidia
        );
    }
}

//! The CDI refresh units (`packaging/systemd/`) and udev rule
//! (`packaging/udev/`): systemd's own analyzer has nothing to report on
//! them, as shipped and as `make install-units` rewrites them; their
//! `ExecStart` is a command line our CLI takes and that writes a spec; and a
//! real systemd runs them as a host would. These machines do not run systemd
//! as pid 1, so that systemd is a user manager started as root in a private
//! mount namespace (with `/run/systemd/system` there, which it checks for):
//! it runs the service when `ldconfig` rewrites the driver's loader cache
//! and when the config changes, and its spec goes when the module unloads
//! (the udev rule's command) or the driver's libraries go. udev itself is not run (its Debian package would upgrade
//! systemd here): the rule is checked against the units it names.
//!
//! Needs `systemd-analyze` and `make`; the manager test also needs root,
//! `/usr/lib/systemd/systemd`, `unshare`, `nsenter` and `ldconfig`. Each
//! check fails loudly when one is missing.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use harness::cli::hook;
use harness::project::{hook_binary, repo};
use harness::runtime::runtimes::find_tool;
use harness::simhost::{require_root, Fixture, SimHost};

/// The service that regenerates the spec.
const SERVICE: &str = "oci-nvidia-hook-cdi.service";
/// The path unit that starts it when the driver's files change.
const PATH_UNIT: &str = "oci-nvidia-hook-cdi.path";
/// The udev rule that starts it when a driver module is loaded.
const UDEV_RULE: &str = "packaging/udev/90-oci-nvidia-hook-cdi.rules";
/// Where the distribution packages put the binary, as the units name it.
const PACKAGED_BINARY: &str = "/usr/bin/oci-nvidia-hook";
/// Where runtimes look for the spec, as `cdi generate` writes it by default.
const DEFAULT_OUTPUT: &str = "/var/run/cdi/nvidia.yaml";
/// The variable of NVIDIA's environment file that names the spec's path.
const OUTPUT_VARIABLE: &str = "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH";
/// The service's step after the spec: the /dev/char links, as nvidia-ctk.
const DEV_CHAR_STEP: &str =
    "@/usr/bin/oci-nvidia-hook nvidia-ctk system create-dev-char-symlinks --dev-char-path /dev/char";
/// What the service's condition and the generator both read first.
const DRIVER_VERSION_FILE: &str = "/proc/driver/nvidia/version";
/// systemd's own system units, which the analyzer resolves dependencies in.
const HOST_UNITS: &str = "/usr/lib/systemd/system";
/// A user manager's binary on Debian.
const SYSTEMD: &str = "/usr/lib/systemd/systemd";

/// A shipped unit file's text.
fn shipped(unit: &str) -> String {
    let path = repo().join("packaging/systemd").join(unit);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The path of `tool` on PATH; panics naming the package when it is missing.
fn require_tool(tool: &str, package: &str) -> PathBuf {
    find_tool(tool).unwrap_or_else(|| {
        panic!("{tool} is missing: this check needs it (Debian package {package})")
    })
}

/// The values of `key` in `[section]` of a unit file, in order.
fn directives(text: &str, section: &str, key: &str) -> Vec<String> {
    let mut current = "";
    let mut found = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        assert!(
            !line.ends_with('\\'),
            "a continued line ({line}): the checks here read one line per directive"
        );
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name;
        } else if let Some((k, v)) = line.split_once('=') {
            if current == section && k.trim() == key {
                found.push(v.trim().to_string());
            }
        }
    }
    found
}

/// The one `ExecStart` of `unit`'s text, split as systemd splits it, each
/// `${NAME}` replaced by the unit's own `Environment=NAME=` value (what it
/// is when no environment file sets it): the line is otherwise held to
/// plain words (no quotes, escapes, other variables or specifiers), so
/// splitting at blanks is what systemd does.
fn exec_start(text: &str) -> Vec<String> {
    let lines = directives(text, "Service", "ExecStart");
    assert_eq!(lines.len(), 1, "one ExecStart: {lines:?}");
    let mut line = lines[0].clone();
    for set in directives(text, "Service", "Environment") {
        let (name, value) = set.split_once('=').expect("Environment=NAME=VALUE");
        line = line.replace(&format!("${{{name}}}"), value);
    }
    let line = &line;
    assert!(
        !line.contains(['"', '\'', '\\', '$', '%', ';'])
            && !line.starts_with(['-', '@', '+', '!', ':']),
        "ExecStart should be plain words, as a shell would not read them differently: {line}"
    );
    line.split_whitespace().map(str::to_string).collect()
}

/// A tree for `systemd-analyze verify --root`: systemd's own units (so that
/// `sysinit.target` and the others our units order against resolve), and
/// this build's binary at `binary` (the analyzer checks that ExecStart is
/// executable). Returns the root.
fn verify_root(dir: &Path, binary: &str) -> PathBuf {
    let root = dir.join("root");
    let units = root.join(HOST_UNITS.trim_start_matches('/'));
    fs::create_dir_all(units.parent().unwrap()).unwrap();
    let cp = Command::new("cp")
        .arg("-a")
        .arg(HOST_UNITS)
        .arg(&units)
        .output()
        .expect("run cp");
    assert!(
        cp.status.success(),
        "cp -a {HOST_UNITS}: {}",
        String::from_utf8_lossy(&cp.stderr)
    );
    let exe = root.join(binary.trim_start_matches('/'));
    fs::create_dir_all(exe.parent().unwrap()).unwrap();
    fs::copy(hook_binary(), &exe).unwrap();
    root
}

/// What `systemd-analyze verify` says of `units` (by name) under `root`;
/// its exit status alone is not enough: it reports an unknown key or an
/// unparsable value and still exits 0.
fn analyze_verify(root: &Path, units: &[&str]) -> String {
    let analyzer = require_tool("systemd-analyze", "systemd");
    let out = Command::new(analyzer)
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .arg("--man=no")
        .args(units)
        .output()
        .expect("run systemd-analyze verify");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        said
    } else {
        format!("exit {}: {said}", out.status)
    }
}

#[test]
fn systemd_analyze_verify_has_nothing_to_report_on_the_shipped_units() {
    let dir = tempfile::tempdir().unwrap();
    let root = verify_root(dir.path(), PACKAGED_BINARY);
    for unit in [SERVICE, PATH_UNIT] {
        fs::write(
            root.join(HOST_UNITS.trim_start_matches('/')).join(unit),
            shipped(unit),
        )
        .unwrap();
    }
    let said = analyze_verify(&root, &[SERVICE, PATH_UNIT]);
    assert!(said.is_empty(), "systemd-analyze verify: {said}");

    // The same check notices a misspelt value, so silence above means something.
    let units = root.join(HOST_UNITS.trim_start_matches('/'));
    let broken = shipped(SERVICE).replace("Type=oneshot", "Type=oneshoot");
    assert_ne!(broken, shipped(SERVICE), "the service sets Type=oneshot");
    fs::write(units.join(SERVICE), broken).unwrap();
    let said = analyze_verify(&root, &[SERVICE]);
    assert!(
        said.contains("oneshoot"),
        "a misspelt Type went unnoticed: {said:?}"
    );
}

#[test]
fn make_install_units_names_the_prefix_binary_and_installs_what_verify_accepts() {
    let make = require_tool("make", "make");
    let dir = tempfile::tempdir().unwrap();
    let destdir = dir.path().join("dest");
    let out = Command::new(make)
        .arg("-C")
        .arg(repo())
        .arg("-s")
        .arg("install-units")
        .arg(format!("DESTDIR={}", destdir.display()))
        .arg("PREFIX=/usr/local")
        .output()
        .expect("run make install-units");
    assert!(
        out.status.success(),
        "make install-units: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let unit_dir = destdir.join("usr/local/lib/systemd/system");
    for unit in [SERVICE, PATH_UNIT] {
        let installed = fs::read_to_string(unit_dir.join(unit))
            .unwrap_or_else(|e| panic!("{unit} not installed: {e}"));
        let expected = shipped(unit).replace(PACKAGED_BINARY, "/usr/local/bin/oci-nvidia-hook");
        assert_eq!(
            installed, expected,
            "{unit}: only the binary path is rewritten"
        );
        let mode = fs::metadata(unit_dir.join(unit))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777;
        assert_eq!(mode, 0o644, "{unit}");
    }
    assert_eq!(
        exec_start(&fs::read_to_string(unit_dir.join(SERVICE)).unwrap())[0],
        "/usr/local/bin/oci-nvidia-hook"
    );
    let rule = destdir.join("usr/local/lib/udev/rules.d/90-oci-nvidia-hook-cdi.rules");
    assert_eq!(
        fs::read_to_string(&rule).unwrap_or_else(|e| panic!("{}: {e}", rule.display())),
        fs::read_to_string(repo().join(UDEV_RULE)).unwrap()
    );

    // systemd finds them where they were installed, with the binary there.
    let root = verify_root(&destdir, "/usr/local/bin/oci-nvidia-hook");
    assert_eq!(root, destdir.join("root"));
    let root_units = root.join("usr/local/lib/systemd/system");
    fs::create_dir_all(&root_units).unwrap();
    for unit in [SERVICE, PATH_UNIT] {
        fs::copy(unit_dir.join(unit), root_units.join(unit)).unwrap();
    }
    let said = analyze_verify(&root, &[SERVICE, PATH_UNIT]);
    assert!(said.is_empty(), "systemd-analyze verify: {said}");
}

/// The udev rule file's rules, each as its keys.
fn udev_rules() -> Vec<Vec<String>> {
    let text = fs::read_to_string(repo().join(UDEV_RULE)).unwrap();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split(", ").map(str::to_string).collect())
        .collect()
}

/// The value of `key` (`KERNEL==`, `RUN+=`: the name and operator) in `rule`.
fn udev_value<'a>(rule: &'a [String], key: &str) -> Option<&'a str> {
    rule.iter()
        .find_map(|k| k.strip_prefix(key))
        .and_then(|v| v.strip_prefix('"'))
        .and_then(|v| v.strip_suffix('"'))
}

/// The command the udev rule runs when a driver module is unloaded.
fn removal_command() -> Vec<String> {
    let rules = udev_rules();
    let rule = rules
        .iter()
        .find(|r| r.iter().any(|k| k == r#"ACTION=="remove""#))
        .expect("a rule for the module's removal");
    udev_value(rule, "RUN+=")
        .expect("the removal rule runs a command")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn the_udev_rule_and_the_units_name_each_other() {
    let service = shipped(SERVICE);
    let path = shipped(PATH_UNIT);
    assert_eq!(directives(&path, "Path", "Unit"), [SERVICE]);
    assert_eq!(directives(&service, "Install", "Also"), [PATH_UNIT]);
    assert_eq!(
        directives(&service, "Unit", "ConditionPathExists"),
        Vec::<String>::new(),
        "no condition on the driver: without one the service removes the stale spec"
    );
    assert!(
        exec_start(&service).contains(&"--remove-without-driver".to_string()),
        "the service removes the spec when the driver is gone"
    );
    // The driver's own tools may be absent: only the generation fails the
    // unit. They would load the module: each runs only while it is loaded.
    let pres = directives(&service, "Service", "ExecStartPre");
    assert!(!pres.is_empty());
    for pre in pres {
        assert!(pre.starts_with('-'), "ExecStartPre without '-': {pre}");
        assert!(
            pre.contains(&format!("test -e {DRIVER_VERSION_FILE} || exit 0;")),
            "ExecStartPre not guarded by the module being loaded: {pre}"
        );
    }

    let rules = udev_rules();
    assert_eq!(
        rules.len(),
        2,
        "a rule for loading, one for unloading: {rules:?}"
    );
    let (added, removed) = (&rules[0], &rules[1]);
    for key in [
        r#"SUBSYSTEM=="module""#.to_string(),
        r#"TAG+="systemd""#.to_string(),
        format!(r#"ENV{{SYSTEMD_WANTS}}+="{SERVICE}""#),
    ] {
        assert!(added.contains(&key), "the rule lacks {key}: {added:?}");
    }
    assert!(removed.contains(&r#"SUBSYSTEM=="module""#.to_string()));
    assert_eq!(
        removal_command(),
        ["/bin/systemctl", "--no-block", "start", SERVICE],
        "the removal starts the service without udev waiting on it"
    );
    assert!(
        Path::new("/bin/systemctl").is_file(),
        "the removal rule's systemctl is not where Debian has it"
    );
    for rule in [added, removed] {
        let mut modules: Vec<&str> = udev_value(rule, "KERNEL==")
            .expect("a KERNEL match")
            .split('|')
            .collect();
        modules.sort_unstable();
        // Module names as /sys/module has them: the driver, and those that
        // bring device nodes of their own.
        assert_eq!(modules, ["nvidia", "nvidia_modeset", "nvidia_uvm"]);
    }
}

/// NVIDIA's environment file, read if it is there, and the one variable
/// of it that means something here, the spec's path, defaulting to where
/// runtimes read it.
#[test]
fn the_service_reads_nvidias_environment_file_for_the_specs_path() {
    let service = shipped(SERVICE);
    assert_eq!(
        directives(&service, "Service", "EnvironmentFile"),
        ["-/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"],
        "NVIDIA's file, a missing one fine ('-')"
    );
    assert_eq!(
        directives(&service, "Service", "Environment"),
        [format!("{OUTPUT_VARIABLE}={DEFAULT_OUTPUT}")]
    );
    let line = &directives(&service, "Service", "ExecStart")[0];
    assert!(
        line.ends_with(&format!("--output ${{{OUTPUT_VARIABLE}}}")),
        "{line}"
    );
}

/// After every refresh the service links the driver's nodes in /dev/char,
/// through the binary's nvidia-ctk front, never failing the refresh.
#[test]
fn the_service_links_the_drivers_nodes_in_dev_char() {
    assert_eq!(
        directives(&shipped(SERVICE), "Service", "ExecStartPost"),
        [format!("-{DEV_CHAR_STEP}")]
    );
}

/// The compat package gives the units NVIDIA's names as links beside them,
/// which systemd takes as aliases without any `systemctl enable`:
/// `systemctl restart nvidia-cdi-refresh` and `systemctl status
/// nvidia-cdi-refresh.path` work once it is installed.
#[test]
fn the_compat_package_links_nvidias_unit_names_to_the_units() {
    assert_eq!(
        nvidia_unit_links(),
        [
            (
                "nvidia-cdi-refresh.service".to_string(),
                SERVICE.to_string()
            ),
            ("nvidia-cdi-refresh.path".to_string(), PATH_UNIT.to_string()),
        ]
    );
}

/// The unit links of `packaging/files`: (NVIDIA's name, our unit), each in
/// the compat package, which conflicts with NVIDIA's toolkit.
fn nvidia_unit_links() -> Vec<(String, String)> {
    let files = fs::read_to_string(repo().join("packaging/files")).unwrap();
    files
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|cols| cols.len() == 6 && cols[3] == "link" && cols[4].starts_with("${unitdir}/"))
        .map(|cols| {
            assert_eq!(cols[0], "oci-nvidia-hook-compat", "{cols:?}");
            (
                cols[4]["${unitdir}/".len()..].to_string(),
                cols[5].to_string(),
            )
        })
        .collect()
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn exec_start_writes_the_spec_runtimes_and_docker_29_ask_for() {
    let sim = SimHost::shared(Fixture::synthetic(8));
    let argv = exec_start(&shipped(SERVICE));
    assert_eq!(argv[0], PACKAGED_BINARY);
    let at = argv
        .iter()
        .position(|a| a == "--output")
        .expect("ExecStart names its output");
    assert_eq!(
        argv[at + 1],
        DEFAULT_OUTPUT,
        "the spec goes where runtimes read it"
    );

    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("nvidia.yaml");
    let mut args = argv[1..].to_vec();
    args[at] = output.display().to_string();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = hook(&sim.config, &args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mode = fs::metadata(&output).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o644);
    let spec: serde_yaml::Value = serde_yaml::from_slice(&fs::read(&output).unwrap()).unwrap();
    assert_eq!(spec["kind"].as_str(), Some("nvidia.com/gpu"));
    let names: Vec<String> = spec["devices"]
        .as_sequence()
        .expect("devices")
        .iter()
        .map(|d| format!("nvidia.com/gpu={}", d["name"].as_str().expect("a name")))
        .collect();
    let listed = sim.stdout(&["cdi", "list"]);
    assert_eq!(names, listed.lines().collect::<Vec<_>>());
    assert_eq!(names.len(), 8 * 2 + 1, "index and UUID per GPU, and all");
    // Docker 29 with CDI on turns `--gpus` into CDI names of kind
    // nvidia.com/gpu (moby PR 50228): `all` into `=all`, each
    // `device=ID` into `=ID`, an index or a `GPU-<uuid>`. The spec names
    // exactly those, made from the host's GPUs as NVML numbers them.
    let mut asked: Vec<String> = vec!["nvidia.com/gpu=all".into()];
    for gpu in &sim.facts.gpus {
        asked.push(format!("nvidia.com/gpu={}", gpu.index));
        asked.push(format!("nvidia.com/gpu={}", gpu.uuid));
    }
    let mut have = names.clone();
    asked.sort();
    have.sort();
    assert_eq!(have, asked, "the names Docker 29's --gpus asks for");
    // The spec's hook is the binary the unit ran (the packaged one, on a host).
    let hook_path = spec["containerEdits"]["hooks"][0]["path"]
        .as_str()
        .expect("a hook");
    assert_eq!(
        fs::canonicalize(hook_path).unwrap(),
        fs::canonicalize(hook_binary()).unwrap()
    );
}

/// A systemd user manager of root's, in a private mount namespace where
/// `/run/systemd/system` exists (systemd refuses to start a user instance
/// without it) and `/proc/driver` is an empty tmpfs: a host whose driver is
/// not loaded. Stopped on drop.
struct UserManager {
    child: Child,
    runtime: PathBuf,
    log: PathBuf,
    made_run_systemd: bool,
}

impl UserManager {
    /// Starts one whose units come from `config/systemd/user` under `dir`,
    /// with `etc` laid over `/etc` in its namespace (the default config
    /// file the binary's nvidia-ctk front reads).
    fn start(dir: &Path, etc: &Path) -> UserManager {
        for tool in ["unshare", "nsenter", "mount"] {
            require_tool(tool, "util-linux / mount");
        }
        assert!(
            Path::new(SYSTEMD).is_file(),
            "{SYSTEMD} is missing (Debian package systemd)"
        );
        assert!(
            Path::new("/proc/driver").is_dir(),
            "no /proc/driver on this kernel to stand a driver's files in"
        );
        let made_run_systemd = !Path::new("/run/systemd").exists();
        if made_run_systemd {
            fs::create_dir("/run/systemd").expect("create /run/systemd to mount over");
        }
        let runtime = dir.join("runtime");
        fs::create_dir_all(&runtime).unwrap();
        fs::set_permissions(&runtime, fs::Permissions::from_mode(0o700)).unwrap();
        let log = dir.join("manager.log");
        let log_file = fs::File::create(&log).unwrap();
        let etc_work = dir.join("etc-work");
        fs::create_dir_all(&etc_work).unwrap();
        let script = format!(
            "mount -t tmpfs tmpfs /run/systemd && mkdir /run/systemd/system && \
             mount -t tmpfs tmpfs /proc/driver && \
             mount -t overlay onh-etc -o lowerdir=/etc,upperdir={},workdir={} /etc && \
             exec {SYSTEMD} --user --log-target=console",
            etc.display(),
            etc_work.display()
        );
        let child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("HOME", dir)
            .env("XDG_RUNTIME_DIR", &runtime)
            .env("XDG_CONFIG_HOME", dir.join("config"))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("start systemd --user");
        let manager = UserManager {
            child,
            runtime,
            log,
            made_run_systemd,
        };
        let ready = manager.wait_for(Duration::from_secs(20), || {
            manager
                .systemctl(&["show", "-p", "Version"])
                .status
                .success()
        });
        assert!(
            ready,
            "systemd --user did not answer: {}",
            manager.log_text()
        );
        manager
    }

    /// Runs `command` in the manager's mount namespace.
    fn in_namespace(&self, command: &[&str]) -> Output {
        Command::new("nsenter")
            .args(["-t", &self.child.id().to_string(), "-m", "--"])
            .args(command)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("XDG_RUNTIME_DIR", &self.runtime)
            .output()
            .expect("run nsenter")
    }

    /// `systemctl --user ARGS` against this manager.
    fn systemctl(&self, args: &[&str]) -> Output {
        let mut command = vec!["systemctl", "--user"];
        command.extend_from_slice(args);
        self.in_namespace(&command)
    }

    /// A unit's properties, `Name=value` lines, for messages and checks.
    fn show(&self, unit: &str) -> String {
        let out = self.systemctl(&[
            "show",
            "-p",
            "ActiveState,Result,ConditionResult,ExecMainStatus",
            unit,
        ]);
        assert!(out.status.success(), "systemctl show {unit}: {out:?}");
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        lines.sort();
        lines.join(" ")
    }

    /// Polls `done` every 50 ms until it holds or `limit` passes.
    fn wait_for(&self, limit: Duration, mut done: impl FnMut() -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if done() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        done()
    }

    /// The manager's own log, for messages.
    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for UserManager {
    fn drop(&mut self) {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        let pid = Pid::from_raw(self.child.id() as i32);
        let _ = kill(pid, Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if self.made_run_systemd {
            let _ = fs::remove_dir("/run/systemd");
        }
    }
}

/// A directory under /run (the service's sandbox leaves /run writable, as
/// for /var/run/cdi), removed on drop.
struct RunDir(PathBuf);

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `text` with `from` replaced by `to`, which must occur exactly once: a
/// change to the shipped unit fails here rather than testing something else.
fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "{from:?} once in:\n{text}");
    text.replace(from, to)
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn systemd_runs_the_service_on_ldconfig_and_it_removes_the_spec_when_the_driver_goes() {
    require_root();
    let ldconfig = require_tool("ldconfig", "libc-bin");
    // Everything the service reads sits under /run: its PrivateTmp= would
    // hide a fixture or a binary under /tmp, where a checkout may be.
    let out_dir = RunDir(PathBuf::from(format!(
        "/run/oci-nvidia-hook-test-units-{}",
        std::process::id()
    )));
    fs::create_dir_all(&out_dir.0).unwrap();
    let sim = SimHost::fresh_at(&out_dir.0.join("host"), Fixture::synthetic(8));
    let binary = out_dir.0.join("oci-nvidia-hook");
    fs::copy(hook_binary(), &binary).unwrap();
    let dir = tempfile::tempdir_in(&out_dir.0).unwrap();
    let output = out_dir.0.join("nvidia.yaml");
    let service_log = out_dir.0.join("service.log");

    // The shipped units, pointed at the simulated host and this build: the
    // binary, its config and output, and the watched cache and config.
    let cache = sim.path("driver/etc/ld.so.cache");
    let units = dir.path().join("config/systemd/user");
    fs::create_dir_all(units.join(format!("{SERVICE}.d"))).unwrap();
    let service = replace_once(
        &shipped(SERVICE),
        &format!("{PACKAGED_BINARY} cdi generate"),
        &format!(
            "{} --config {} cdi generate",
            binary.display(),
            sim.config.display()
        ),
    );
    // NVIDIA's environment file names the output; the unit's own default
    // is moved too, so that a file not read shows and writes nothing of
    // the host's.
    let env_file = out_dir.0.join("nvidia-cdi-refresh.env");
    fs::write(
        &env_file,
        format!(
            "# as NVIDIA's says\n{OUTPUT_VARIABLE}={}\n",
            output.display()
        ),
    )
    .unwrap();
    let unread = out_dir.0.join("default.yaml");
    let service = replace_once(
        &service,
        &format!("Environment={OUTPUT_VARIABLE}={DEFAULT_OUTPUT}"),
        &format!("Environment={OUTPUT_VARIABLE}={}", unread.display()),
    );
    let service = replace_once(
        &service,
        "EnvironmentFile=-/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env",
        &format!("EnvironmentFile=-{}", env_file.display()),
    );
    // The /dev/char links go to a directory of the test's.
    let char_dir = out_dir.0.join("char");
    let service = replace_once(
        &service,
        DEV_CHAR_STEP,
        &DEV_CHAR_STEP
            .replace(PACKAGED_BINARY, &binary.display().to_string())
            .replace("/dev/char", &char_dir.display().to_string()),
    );
    for line in service.lines().filter(|l| !l.starts_with('#')) {
        assert!(
            !line.contains("/dev/char") && !line.contains(DEFAULT_OUTPUT),
            "the test's unit would write the host's files: {line}"
        );
    }
    fs::write(units.join(SERVICE), service).unwrap();
    // The nvidia-ctk front reads the default config file: the simulated
    // host's, in the manager's /etc.
    let etc = dir.path().join("etc-upper");
    fs::create_dir_all(etc.join("oci-nvidia-hook")).unwrap();
    fs::copy(&sim.config, etc.join("oci-nvidia-hook/config.toml")).unwrap();
    // The manager has no journal: keep what the service prints.
    fs::write(
        units.join(format!("{SERVICE}.d/log.conf")),
        format!(
            "[Service]\nStandardOutput=append:{0}\nStandardError=append:{0}\n",
            service_log.display()
        ),
    )
    .unwrap();
    let path = replace_once(
        &shipped(PATH_UNIT),
        "PathChanged=/etc/ld.so.cache\n",
        &format!("PathChanged={}\n", cache.display()),
    );
    let path = replace_once(
        &path,
        "PathChanged=/etc/oci-nvidia-hook/config.toml\n",
        &format!("PathChanged={}\n", sim.config.display()),
    );
    fs::write(units.join(PATH_UNIT), path).unwrap();

    let manager = UserManager::start(dir.path(), &etc);
    let why = |m: &UserManager| {
        format!(
            "{SERVICE}: {}\n{}\nservice log: {}\nmanager log: {}",
            m.show(SERVICE),
            String::from_utf8_lossy(&m.systemctl(&["status", "--no-pager", SERVICE]).stdout),
            fs::read_to_string(&service_log).unwrap_or_default(),
            m.log_text()
        )
    };

    let succeeded = "ActiveState=inactive ConditionResult=yes ExecMainStatus=0 Result=success";
    // Runs the service to its end, as `command` (a systemctl line, which
    // may not wait for it) starts it, until `output` exists or not as `spec`.
    let run_service = |command: &[&str], spec: bool| {
        let start = manager.in_namespace(command);
        assert!(start.status.success(), "{command:?}: {start:?}");
        let done = manager.wait_for(Duration::from_secs(20), || {
            output.exists() == spec && manager.show(SERVICE).starts_with("ActiveState=inactive")
        });
        assert!(done, "{}", why(&manager));
        assert_eq!(manager.show(SERVICE), succeeded, "{}", why(&manager));
    };
    // The driver's module loaded or not: its version file, where the
    // generator reads it (the simulated host's procfs) and where the
    // service's ExecStartPre looks (the namespace's /proc/driver).
    let version = sim.path("proc/driver/nvidia/version");
    let unloaded = dir.path().join("version");
    let module = |loaded: bool| {
        let (from, to, script) = if loaded {
            (
                &unloaded,
                &version,
                "mkdir /proc/driver/nvidia && cp \"$0\" /proc/driver/nvidia/version",
            )
        } else {
            (&version, &unloaded, "rm -r /proc/driver/nvidia")
        };
        fs::rename(from, to).unwrap();
        let changed = manager.in_namespace(&["sh", "-c", script, &to.display().to_string()]);
        assert!(
            changed.status.success(),
            "module loaded {loaded}: {changed:?}"
        );
    };

    // ldconfig rewrites the driver's cache, as a package's installation or
    // removal ends.
    let rewrite_cache = || {
        let rewrite = Command::new(&ldconfig)
            .arg("-X")
            .arg("-r")
            .arg(sim.path("driver"))
            .args(["-c", "new", "-C", "/etc/ld.so.cache"])
            .output()
            .expect("run ldconfig");
        assert!(rewrite.status.success(), "ldconfig -r: {rewrite:?}");
    };

    // The watch is armed (it keeps the service loaded between runs) and
    // fires on nothing yet.
    let start = manager.systemctl(&["start", PATH_UNIT]);
    assert!(start.status.success(), "start {PATH_UNIT}: {start:?}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(!output.exists(), "{PATH_UNIT} fired on being started");

    // No driver: it runs, succeeds, and writes nothing, no link either.
    fs::rename(&version, &unloaded).unwrap();
    run_service(&["systemctl", "--user", "start", SERVICE], false);
    assert!(!char_dir.exists(), "/dev/char links without a driver");
    fs::rename(&unloaded, &version).unwrap();
    let load = manager.in_namespace(&[
        "sh",
        "-c",
        "mkdir /proc/driver/nvidia && cp \"$0\" /proc/driver/nvidia/version",
        &version.display().to_string(),
    ]);
    assert!(
        load.status.success(),
        "stand the driver's version file in: {load:?}"
    );

    // ldconfig rewrites the driver's cache, as a package upgrade ends.
    rewrite_cache();
    let written = manager.wait_for(Duration::from_secs(20), || output.exists());
    assert!(written, "no spec after ldconfig: {}", why(&manager));
    let done = manager.wait_for(Duration::from_secs(10), || {
        manager.show(SERVICE).starts_with("ActiveState=inactive")
    });
    assert!(done, "{}", why(&manager));
    assert_eq!(manager.show(SERVICE), succeeded, "{}", why(&manager));
    let spec: serde_yaml::Value = serde_yaml::from_slice(&fs::read(&output).unwrap()).unwrap();
    let devices = spec["devices"].as_sequence().expect("devices").len();
    assert_eq!(devices, 8 * 2 + 1, "{}", why(&manager));
    assert!(
        !unread.exists(),
        "the environment file's path was not taken"
    );
    // The driver's nodes got their /dev/char links.
    let dev = Path::new(&sim.facts.dev_root).join("dev");
    let mut links = vec![("195:255".to_string(), dev.join("nvidiactl"))];
    for gpu in &sim.facts.gpus {
        links.push((
            format!("195:{}", gpu.minor),
            dev.join(format!("nvidia{}", gpu.minor)),
        ));
    }
    for (name, node) in links {
        // Relative where the links sit beside the nodes' directory, as here.
        assert_eq!(
            fs::canonicalize(char_dir.join(&name)).ok(),
            Some(node),
            "/dev/char/{name}: {}",
            why(&manager)
        );
    }

    // The config changes: a new spec replaces the old one.
    let before = fs::metadata(&output).unwrap().ino();
    let mut config = fs::read_to_string(&sim.config).unwrap();
    config.push_str("\n[log]\nlevel = \"info\"\n");
    fs::write(&sim.config, config).unwrap();
    let replaced = manager.wait_for(Duration::from_secs(20), || {
        fs::metadata(&output).is_ok_and(|m| m.ino() != before)
    });
    assert!(
        replaced,
        "no new spec after the config changed: {}",
        why(&manager)
    );
    let settled = manager.wait_for(Duration::from_secs(10), || {
        manager.show(SERVICE).starts_with("ActiveState=inactive")
    });
    assert!(settled, "{}", why(&manager));

    // The module unloads: its procfs goes, and udev runs the removal rule's
    // command (here against this user manager). The spec goes with it.
    module(false);
    let removal = removal_command();
    let mut command: Vec<&str> = vec![removal[0].as_str(), "--user"];
    command.extend(removal[1..].iter().map(String::as_str));
    run_service(&command, false);

    // The compat package is installed: NVIDIA's names, as links beside the
    // units, answer for them once its postinst's daemon-reload ran (no
    // enable needed).
    for (alias, unit) in nvidia_unit_links() {
        std::os::unix::fs::symlink(&unit, units.join(&alias)).unwrap();
    }
    let reload = manager.systemctl(&["daemon-reload"]);
    assert!(reload.status.success(), "daemon-reload: {reload:?}");
    for (alias, unit) in nvidia_unit_links() {
        let id = manager.systemctl(&["show", "-p", "Id", &alias]);
        assert_eq!(
            String::from_utf8_lossy(&id.stdout).trim(),
            format!("Id={unit}"),
            "{alias}: {id:?}"
        );
    }
    let status = manager.systemctl(&["status", "--no-pager", "nvidia-cdi-refresh.path"]);
    assert!(
        status.status.success(),
        "status nvidia-cdi-refresh.path: {status:?}"
    );

    // It loads again (udev's SYSTEMD_WANTS starts the service), and NVIDIA's
    // name restarts it: a spec again.
    module(true);
    run_service(
        &["systemctl", "--user", "restart", "nvidia-cdi-refresh"],
        true,
    );

    // The driver's packages are removed, the module still loaded: its
    // libraries go and ldconfig runs last. The path unit fires, the spec goes.
    for library in sim
        .facts
        .libraries
        .values()
        .chain(sim.facts.libraries32.values())
    {
        let _ = fs::remove_file(library);
    }
    rewrite_cache();
    let removed = manager.wait_for(Duration::from_secs(20), || !output.exists());
    assert!(
        removed,
        "a stale spec after the libraries went: {}",
        why(&manager)
    );
    let settled = manager.wait_for(Duration::from_secs(10), || {
        manager.show(SERVICE).starts_with("ActiveState=inactive")
    });
    assert!(settled, "{}", why(&manager));
    assert_eq!(manager.show(SERVICE), succeeded, "{}", why(&manager));
}

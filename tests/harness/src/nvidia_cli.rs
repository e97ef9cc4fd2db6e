//! Running the binary under test as `nvidia-container-cli`: through a link
//! of that name (the name picks NVIDIA's command line), with a test config
//! at the default path. NVIDIA's CLI has no option naming a config file, so
//! the config is put at `/etc/oci-nvidia-hook/config.toml` by an overlay on
//! `/etc` in a private mount namespace: the host's `/etc` never changes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use super::project::hook_binary;

/// The name that selects NVIDIA's CLI's command line.
pub const NAME: &str = "nvidia-container-cli";

/// `nvidia-container-cli`, a link to the binary under test, in a directory
/// of this test binary's own.
pub fn cli_link() -> PathBuf {
    static MADE: OnceLock<PathBuf> = OnceLock::new();
    MADE.get_or_init(|| {
        let exe = std::env::current_exe().expect("test binary path");
        let stem = exe.file_stem().expect("test binary name").to_owned();
        let dir = crate::project::target_tmpdir()
            .join("nvidia-cli-link")
            .join(stem);
        std::fs::create_dir_all(&dir).expect("create the link's directory");
        let link = dir.join(NAME);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(hook_binary(), &link).expect("link nvidia-container-cli");
        link
    })
    .clone()
}

/// A layer for `/etc` holding `config` as `oci-nvidia-hook/config.toml`,
/// beside `config` (`<config>.etc/`), made afresh. Tests sharing a host
/// run the CLI side by side, so the copy is put in place by a rename: a
/// run never reads a half-written config.
pub fn etc_layer(config: &Path) -> PathBuf {
    let layer = config.with_extension("etc");
    let dir = layer.join("oci-nvidia-hook");
    std::fs::create_dir_all(&dir).expect("create the /etc layer");
    let text = std::fs::read(config).expect("read the config for the /etc layer");
    let target = dir.join("config.toml");
    if std::fs::read(&target).ok().as_deref() != Some(&text[..]) {
        static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let temp = dir.join(format!(".config.toml.{}.{n}", std::process::id()));
        std::fs::write(&temp, &text).expect("write the config into the /etc layer");
        std::fs::rename(&temp, &target).expect("put the config in the /etc layer");
    }
    layer
}

/// The shell that lays `$0` over `/etc` and then runs its arguments.
const OVER_ETC: &str = "mount -t overlay overlay -o \"lowerdir=$0:/etc\" /etc && exec \"$@\"";

/// `argv` run in a private mount namespace where `layer` lies over `/etc`
/// (see [`etc_layer`]); nothing is quoted into the shell's script.
pub fn over_etc(layer: &Path, argv: &[String]) -> Vec<String> {
    let mut full: Vec<String> = [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        OVER_ETC,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    full.push(layer.to_str().expect("UTF-8 layer path").to_string());
    full.extend(argv.iter().cloned());
    full
}

/// Runs `nvidia-container-cli ARGS` with `config` at the default path and
/// a bare environment, as a runtime may run a hook.
pub fn nvidia_cli(config: &Path, args: &[&str]) -> Output {
    let mut argv = vec![cli_link().to_str().expect("UTF-8 link path").to_string()];
    argv.extend(args.iter().map(|a| a.to_string()));
    let argv = over_etc(&etc_layer(config), &argv);
    Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .expect("run unshare")
}

/// Runs it expecting success; returns stdout.
pub fn nvidia_cli_stdout(config: &Path, args: &[&str]) -> String {
    let out = nvidia_cli(config, args);
    assert!(
        out.status.success(),
        "{NAME} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

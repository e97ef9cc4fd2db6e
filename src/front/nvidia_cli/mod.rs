//! `nvidia-container-cli`: NVIDIA's C CLI's command line, read into our
//! operations.
//!
//! containerd's `ctr run --gpus` and NVIDIA's own hook in legacy mode run
//! `nvidia-container-cli … configure … --pid=PID ROOTFS` as a prestart
//! hook; LXC's mount hook, enroot's and Apptainer's `--nvccli` run
//! `configure` without `--pid` from inside the container's namespaces
//! (docs/hpc.md); people and Incus run `info` and `list`. The request comes from the
//! command line alone, never from the environment or the container's
//! `process.env`; the configuration is our default config file (NVIDIA's
//! CLI has no option naming one), with `--root` as its driver root and
//! `--debug=FILE` as a debug log. Options that change nothing here (no
//! kernel module is loaded, `ldconfig` never runs) are accepted and logged.

pub mod args;
mod getopt;
mod options;

pub use args::{parse, Invocation, Parsed, NAME};
pub use getopt::Problem as OptionProblem;

use crate::app::{self, Note, Operation, Overrides};
use crate::config::{CompatMode, LogLevel};

/// The operation `invocation` asks for, and what its options change in
/// the configuration: `--root` the driver root, `--debug=FILE` the log
/// (at debug level), `configure --cuda-compat-mode` the CUDA compat mode.
pub fn operation(invocation: Invocation) -> app::Invocation {
    let globals = &invocation.globals;
    let mut overrides = Overrides {
        driver_root: globals.root.clone(),
        notes: ignored(globals),
        ..Overrides::default()
    };
    if let Some(file) = &globals.debug {
        overrides.log_level = Some(LogLevel::Debug);
        // Every line goes to stderr anyway (NVIDIA's hook passes
        // `--debug=/dev/stderr` when run with -debug).
        if !STDERR.iter().any(|s| file.as_os_str() == *s) {
            overrides.log_file = Some(file.clone());
        }
    }
    let operation = match invocation.command {
        args::Command::Info { csv } => Operation::NvidiaCliInfo { csv },
        args::Command::List(list) => Operation::NvidiaCliList(list),
        args::Command::Configure(configure) => {
            overrides.cuda_compat = configure.cuda_compat.map(|mode| match mode {
                app::nvidia_cli::CudaCompat::Ldconfig | app::nvidia_cli::CudaCompat::Mount => {
                    CompatMode::Ldconfig
                }
                app::nvidia_cli::CudaCompat::Disabled => CompatMode::Disabled,
            });
            Operation::NvidiaCliConfigure(configure)
        }
    };
    app::Invocation::Run(operation, overrides)
}

/// Names of stderr a `--debug` may give.
const STDERR: [&str; 3] = ["/dev/stderr", "/dev/fd/2", "/proc/self/fd/2"];

/// What `--version` prints: NVIDIA's first two fields, so that scripts
/// reading them find a version, then what answers.
pub fn version_text() -> String {
    let version = crate::util::this_program::VERSION;
    format!(
        "cli-version: {version}\nlib-version: {version}\nbuild platform: {}\n\
         implementation: oci-nvidia-hook {version}\n",
        std::env::consts::ARCH
    )
}

/// The global options that change nothing here, as lines to log.
fn ignored(globals: &args::Globals) -> Vec<Note> {
    let mut notes = Vec::new();
    if globals.load_kmods {
        notes.push(Note::debug(format!(
            "{NAME}: --load-kmods ignored: kernel modules are never loaded"
        )));
    }
    if let Some(user) = &globals.user {
        notes.push(Note::debug(format!(
            "{NAME}: --user{}: no privileges are dropped (no driver code runs here); \
             a user namespace is read from the process itself, as the hook reads a container's",
            user.as_deref().map(|u| format!("={u}")).unwrap_or_default()
        )));
    }
    if globals.no_pivot {
        notes.push(Note::debug(format!(
            "{NAME}: --no-pivot ignored: nothing pivots"
        )));
    }
    if globals.no_create_imex_channels {
        notes.push(Note::debug(format!(
            "{NAME}: --no-create-imex-channels ignored: no host IMEX channel node is ever created"
        )));
    }
    if let Some(ldcache) = &globals.ldcache {
        let level = if ldcache.as_os_str() == "/etc/ld.so.cache" {
            log::Level::Debug
        } else {
            log::Level::Warn
        };
        notes.push(Note {
            level,
            text: format!(
                "{NAME}: --ldcache={} ignored: the driver root's /etc/ld.so.cache is read",
                ldcache.display()
            ),
        });
    }
    notes
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::config::Config;

    fn configured(args: &[&str]) -> Config {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let Ok(Parsed::Run(invocation)) = parse(&args) else {
            panic!("{args:?} does not parse");
        };
        let app::Invocation::Run(_, overrides) = operation(*invocation) else {
            panic!("{args:?} runs nothing");
        };
        overrides.apply(Config::default())
    }

    #[test]
    fn root_and_debug_options_replace_the_driver_root_and_the_log() {
        let config = configured(&[
            "--root=/run/nvidia/driver",
            "--debug=/var/log/nvc.log",
            "info",
        ]);
        assert_eq!(config.driver.root, Path::new("/run/nvidia/driver"));
        // Device nodes and procfs are not the driver root's.
        assert_eq!(config.driver.dev_root, Config::default().driver.dev_root);
        assert_eq!(config.log.level, LogLevel::Debug);
        assert_eq!(config.log.file, PathBuf::from("/var/log/nvc.log"));
        assert_eq!(configured(&["info"]), Config::default());
    }

    #[test]
    fn debug_to_stderr_raises_the_level_and_opens_no_file() {
        let config = configured(&["--debug=/dev/stderr", "info"]);
        assert_eq!(config.log.level, LogLevel::Debug);
        assert_eq!(config.log.file(), None);
    }

    #[test]
    fn cuda_compat_mode_sets_the_compat_mode_and_mount_is_ldconfig() {
        let run = |mode: &str| {
            configured(&[
                "configure",
                &format!("--cuda-compat-mode={mode}"),
                "--pid=1",
                "/r",
            ])
            .cuda_compat
            .mode
        };
        assert_eq!(run("disabled"), CompatMode::Disabled);
        assert_eq!(run("ldconfig"), CompatMode::Ldconfig);
        assert_eq!(run("mount"), CompatMode::Ldconfig);
    }
}

//! `nvidia-cdi-hook`: the command line of the hooks that CDI specs written
//! by NVIDIA's tools call, read into [`Operation::NvidiaHook`].

use clap::Parser;

use super::common::{log_level, VERSION};
use super::hooks::{self, HookCommand};
use crate::app::{Invocation, Operation, Overrides};

/// The name NVIDIA's hook is called by.
pub const NAME: &str = crate::util::this_program::CDI_HOOK_NAME;

/// What `--help` says of the whole command.
const LONG_ABOUT: &str = "NVIDIA's nvidia-cdi-hook, answered by oci-nvidia-hook: the OCI hooks \
that CDI specs made by NVIDIA's tools run at createContainer. Each reads the OCI state on stdin \
and edits the container's root only through paths resolved inside it; nothing of the image is \
executed, and update-ldcache writes the loader cache itself, never running ldconfig.";

/// nvidia-cdi-hook: the hooks of NVIDIA's CDI specs, answered by oci-nvidia-hook.
#[derive(Debug, PartialEq, Eq, Parser)]
#[command(name = NAME, version = VERSION, about, long_about = LONG_ABOUT)]
pub struct CdiHook {
    /// Log at debug level.
    #[arg(long, short = 'd', global = true)]
    pub debug: bool,
    /// Log errors only.
    #[arg(long, global = true)]
    pub quiet: bool,
    /// The hook to run.
    #[command(subcommand)]
    pub command: HookCommand,
}

/// Parses `args` (`argv[0]` first); clap prints its errors and exits. The
/// hook runs with the default config file (for the log and the driver's
/// procfs), `--debug`/`--quiet` setting its level; a runtime waits for it,
/// so it runs under the config's deadline like every hook.
pub fn parse(args: &[std::ffi::OsString]) -> Invocation {
    let words = args.get(1..).unwrap_or_default();
    if let Some(skipped) = hooks::before_parsing(words) {
        return skipped;
    }
    let hook = match CdiHook::try_parse_from(args) {
        Ok(hook) => hook,
        Err(error) => return hooks::unparsed(error, hooks::named(words)),
    };
    Invocation::Run(
        Operation::NvidiaHook {
            entry: NAME,
            hook: hook.command.hook(),
        },
        Overrides {
            log_level: log_level(hook.debug, hook.quiet),
            ..Overrides::default()
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::nvidia_hooks::HookEdits;

    #[test]
    fn nvidias_command_lines_parse() {
        let hook = CdiHook::try_parse_from([
            "nvidia-cdi-hook",
            "update-ldcache",
            "--ldconfig-path",
            "/sbin/ldconfig",
            "--folder",
            "/usr/lib/x86_64-linux-gnu",
            "--folder",
            "/usr/lib64",
        ])
        .unwrap();
        let HookCommand::UpdateLdcache(crate::front::hooks::Folders { folders, .. }) = hook.command
        else {
            panic!("{hook:?}");
        };
        assert_eq!(folders.len(), 2);
        for args in [
            &["nvidia-cdi-hook", "create-symlinks", "--link", "a::/b"][..],
            &[
                "nvidia-cdi-hook",
                "chmod",
                "--mode",
                "755",
                "--path",
                "/dev/dri",
            ],
            &[
                "nvidia-cdi-hook",
                "enable-cuda-compat",
                "--host-driver-version",
                "535.1",
            ],
            &["nvidia-cdi-hook", "disable-device-node-modification"],
            &["nvidia-cdi-hook", "update-application-profile"],
            &[
                "nvidia-cdi-hook",
                "-d",
                "create-soname-symlinks",
                "--folder",
                "/x",
            ],
        ] {
            CdiHook::try_parse_from(args).unwrap();
        }
        assert!(CdiHook::try_parse_from(["nvidia-cdi-hook", "apply-cuda-memory-limits"]).is_err());
    }

    #[test]
    fn the_hook_runs_under_its_own_name_at_the_level_asked() {
        let args: Vec<std::ffi::OsString> = ["nvidia-cdi-hook", "-d", "chmod", "--mode", "755"]
            .iter()
            .map(Into::into)
            .collect();
        let Invocation::Run(Operation::NvidiaHook { entry, hook }, overrides) = parse(&args) else {
            panic!("not a hook");
        };
        assert_eq!(entry, "nvidia-cdi-hook");
        assert_eq!(hook.state, None);
        assert_eq!(
            hook.kind,
            HookEdits::Chmod {
                mode: "755".into(),
                paths: vec![]
            }
        );
        assert_eq!(overrides.log_level, Some(crate::config::LogLevel::Debug));
    }

    fn invocation(argv: &[&str]) -> Invocation {
        let args: Vec<std::ffi::OsString> = std::iter::once("nvidia-cdi-hook")
            .chain(argv.iter().copied())
            .map(Into::into)
            .collect();
        parse(&args)
    }

    /// What NVIDIA v1.20.0's `nvidia-cdi-hook` did with each command line,
    /// run from ../shared/anchor on a simulated host on 2026-12-06: no hook
    /// and an unknown hook warn and exit 0 ("No CDI hook specified",
    /// "Unsupported CDI hook: NAME"); `noop` does nothing. A flag a known
    /// hook lacks fails there (exit 1); here it warns and skips the hook.
    #[test]
    fn no_hook_or_an_unknown_one_is_a_warning_and_success() {
        let warn = |text: &str| Invocation::Warn(text.to_string());
        for (argv, want) in [
            (&[][..], warn("No CDI hook specified")),
            (&["-d"], warn("No CDI hook specified")),
            (&["bogus-hook"], warn("Unsupported CDI hook: bogus-hook")),
            (
                &["bogus-hook", "--x", "1"],
                warn("Unsupported CDI hook: bogus-hook"),
            ),
            (&["-d", "bogus"], warn("Unsupported CDI hook: bogus")),
            (
                &["apply-cuda-memory-limits"],
                warn("Unsupported CDI hook: apply-cuda-memory-limits"),
            ),
            (&["noop"], Invocation::Nothing),
            (
                &["create-symlinks", "--bogus"],
                warn("Unsupported flag --bogus for CDI hook create-symlinks: the hook is skipped"),
            ),
            (
                &["update-ldcache", "--folder", "/x", "--bogus"],
                warn("Unsupported flag --bogus for CDI hook update-ldcache: the hook is skipped"),
            ),
        ] {
            assert_eq!(invocation(argv), want, "{argv:?}");
        }
    }

    /// 1.19's and 1.20's `enable-cuda-compat` forms all parse: without
    /// a version (a host whose version was unknown), and Jetson's.
    #[test]
    fn every_enable_cuda_compat_form_parses() {
        for (argv, driver, cuda, root) in [
            (&["enable-cuda-compat"][..], None, None, None),
            (
                &["enable-cuda-compat", "--host-driver-version=570.1"],
                Some("570.1"),
                None,
                None,
            ),
            (
                &[
                    "enable-cuda-compat",
                    "--host-cuda-version=12.6",
                    "--cuda-compat-container-root=/usr/local/cuda-12.8/compat_orin",
                ],
                None,
                Some("12.6"),
                Some("/usr/local/cuda-12.8/compat_orin"),
            ),
        ] {
            let Invocation::Run(Operation::NvidiaHook { hook, .. }, _) = invocation(argv) else {
                panic!("{argv:?} runs no hook");
            };
            assert_eq!(
                hook.kind,
                HookEdits::EnableCudaCompat {
                    host_driver_version: driver.map(str::to_string),
                    host_cuda_version: cuda.map(str::to_string),
                    container_root: root.map(std::path::PathBuf::from),
                },
                "{argv:?}"
            );
        }
    }
}

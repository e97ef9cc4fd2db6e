//! `nvidia-cdi-hook`: the command line of the hooks that CDI specs written
//! by NVIDIA's tools call, read into [`Operation::NvidiaHook`].

use clap::Parser;

use super::common::{log_level, VERSION};
use super::hooks::HookCommand;
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
    let hook = CdiHook::parse_from(args);
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
}

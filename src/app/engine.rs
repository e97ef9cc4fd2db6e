//! `nvidia-ctk runtime configure`: NVIDIA's flags, their defaults and
//! checks, mapped onto [`crate::specs::engine_config`].

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{Error, Result};
use crate::specs::engine_config::{self, containerd, crio, docker, hooks_d, Output, Runtime};
use crate::util::this_program::RUNTIME_NAME;

/// The engines `--runtime` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// dockerd's daemon.json.
    Docker,
    /// containerd's config.toml and its drop-in.
    Containerd,
    /// CRI-O's drop-in, or its hooks.d file.
    Crio,
}

impl Engine {
    /// Every engine, by its `--runtime` name.
    pub const ALL: [(&'static str, Engine); 3] = [
        ("docker", Engine::Docker),
        ("containerd", Engine::Containerd),
        ("crio", Engine::Crio),
    ];

    /// Its `--runtime` name.
    pub fn name(self) -> &'static str {
        Engine::ALL
            .iter()
            .find(|(_, engine)| *engine == self)
            .map_or("", |(name, _)| name)
    }

    /// The engine `name` names.
    pub fn named(name: &str) -> Option<Engine> {
        Engine::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, engine)| *engine)
    }
}

/// What `runtime configure` was asked, NVIDIA's defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Configure {
    /// Print the file that would be written instead of writing anything.
    pub dry_run: bool,
    /// The engine to configure.
    pub runtime: Engine,
    /// The engine's config file; `None` for its default.
    pub config: Option<PathBuf>,
    /// The drop-in to write instead of changing the main config; "" for none.
    pub drop_in_config: Option<String>,
    /// The engine's executable, for reading its config through it (`command`).
    pub executable_path: Option<String>,
    /// `config-file`, or `oci-hook` for a hooks.d file.
    pub config_mode: Option<String>,
    /// Where the engine's current config comes from.
    pub config_source: String,
    /// The hooks.d file `oci-hook` mode writes; `None` for stdout.
    pub oci_hook_path: Option<PathBuf>,
    /// The engine's name for the runtime.
    pub nvidia_runtime_name: String,
    /// The runtime program; `None` for the default.
    pub nvidia_runtime_path: Option<String>,
    /// The prestart hook the hooks.d file runs.
    pub nvidia_runtime_hook_path: PathBuf,
    /// Make the runtime the engine's default.
    pub nvidia_set_as_default: bool,
    /// Turn on the engine's own CDI support.
    pub cdi_enabled: bool,
}

/// Runs `runtime configure`: writes the engine's files (or prints the
/// first to `out` with `--dry-run`).
pub fn configure(args: &Configure, out: &mut impl Write) -> Result<()> {
    let engine = args.runtime;
    let from_command = match (args.config_source.as_str(), engine) {
        ("file", _) => false,
        ("command", Engine::Containerd) => true,
        ("command", Engine::Docker) => {
            log::warn!("--config-source=command is not supported for docker: using file");
            false
        }
        ("command", Engine::Crio) => {
            return Err(Error::Usage(format!(
                "--config-source=command is supported for containerd only: CRI-O's config is \
                 read from its file ({})",
                main_config(args).display()
            )))
        }
        (other, _) => {
            return Err(Error::Usage(format!(
                "unrecognized --config-source {other:?}: one of command, file"
            )))
        }
    };
    if let Some(path) = args.executable_path.as_ref().filter(|_| !from_command) {
        log::warn!("--executable-path={path} ignored: the config is read from its file");
    }
    match args.config_mode.as_deref() {
        Some("oci-hook" | "hook") => return oci_hook(args, out),
        None | Some("" | "config-file" | "config") => {}
        Some(other) => {
            log::warn!(
                "ignoring unsupported config mode for {}: {other:?}",
                engine.name()
            )
        }
    }
    let path = runtime_path(args)?;
    let enable_cdi = args.cdi_enabled && engine != Engine::Crio;
    if args.cdi_enabled && !enable_cdi {
        log::warn!("ignoring --cdi.enabled for crio: CRI-O enables CDI by itself");
    }
    let runtime = Runtime {
        name: &args.nvidia_runtime_name,
        path: &path,
        set_as_default: args.nvidia_set_as_default,
        enable_cdi,
    };
    let config = main_config(args);
    let drop_in = drop_in(args)?;
    let text = engine_config::read(&config)?;
    let text = text.as_deref();
    let outputs = match engine {
        Engine::Docker => vec![Output {
            text: docker::add_runtime(&config, text, &runtime)?,
            path: config.clone(),
        }],
        Engine::Containerd => {
            let dump = match from_command {
                true => Some(containerd::dump(args.executable_path.as_deref(), &config)?),
                false => None,
            };
            containerd::add_runtime(&config, text, dump.as_ref(), drop_in.as_deref(), &runtime)?
        }
        Engine::Crio => vec![crio::add_runtime(
            &config,
            text,
            drop_in.as_deref(),
            &runtime,
        )?],
    };
    engine_config::write(&outputs, args.dry_run, out)?;
    if !args.dry_run {
        log::info!(
            "It is recommended that {} daemon be restarted.",
            engine.name()
        );
    }
    Ok(())
}

/// The engine's main config file.
fn main_config(args: &Configure) -> PathBuf {
    args.config.clone().unwrap_or_else(|| {
        PathBuf::from(match args.runtime {
            Engine::Docker => docker::DEFAULT_CONFIG,
            Engine::Containerd => containerd::DEFAULT_CONFIG,
            Engine::Crio => crio::DEFAULT_CONFIG,
        })
    })
}

/// The drop-in to write, if any: NVIDIA's default per engine, none for an
/// empty `--drop-in-config`; Docker has none, and a given one must be absolute.
fn drop_in(args: &Configure) -> Result<Option<PathBuf>> {
    let given = match (&args.drop_in_config, args.runtime) {
        (None, Engine::Docker) => return Ok(None),
        (None, Engine::Containerd) => return Ok(Some(containerd::DEFAULT_DROP_IN.into())),
        (None, Engine::Crio) => return Ok(Some(crio::DEFAULT_DROP_IN.into())),
        (Some(given), _) if given.is_empty() => return Ok(None),
        (Some(given), engine) => {
            if engine == Engine::Docker {
                return Err(Error::Usage(
                    "runtime docker does not support drop-in configs".into(),
                ));
            }
            PathBuf::from(given)
        }
    };
    if !given.is_absolute() {
        return Err(Error::Usage(format!(
            "the drop-in-config path {:?} is not an absolute path",
            given.display().to_string()
        )));
    }
    Ok(Some(given))
}

/// The runtime program the engine is told to run. Docker looks a bare
/// name up on its PATH; containerd and CRI-O need an absolute path, which
/// by default is our `nvidia-container-runtime` link beside this binary
/// (`make install`'s /usr/local/bin), or /usr/bin's (the packages').
fn runtime_path(args: &Configure) -> Result<String> {
    let given = args.nvidia_runtime_path.as_deref();
    if args.runtime == Engine::Docker {
        return Ok(given.unwrap_or(RUNTIME_NAME).to_string());
    }
    let path = match given {
        Some(path) if path != RUNTIME_NAME => path.to_string(),
        _ => installed_runtime(),
    };
    if !Path::new(&path).is_absolute() {
        return Err(Error::Usage(format!(
            "the NVIDIA runtime path {path:?} is not an absolute path"
        )));
    }
    Ok(path)
}

/// Our runtime link beside this binary when there is one, else /usr/bin's.
fn installed_runtime() -> String {
    crate::util::this_program::path()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join(RUNTIME_NAME)))
        .filter(|link| link.exists())
        .and_then(|link| link.to_str().map(str::to_string))
        .unwrap_or_else(|| format!("/usr/bin/{RUNTIME_NAME}"))
}

/// `--config-mode=oci-hook`: the hooks.d file, to `--oci-hook-path` or `out`.
fn oci_hook(args: &Configure, out: &mut impl Write) -> Result<()> {
    log::warn!(
        "the {:?} config-mode is deprecated",
        args.config_mode.as_deref().unwrap_or_default()
    );
    let hook = &args.nvidia_runtime_hook_path;
    if !hook.is_absolute() {
        return Err(Error::Usage(format!(
            "the NVIDIA runtime hook path {:?} is not an absolute path",
            hook.display().to_string()
        )));
    }
    let text = hooks_d::oci_hook(hook)?;
    match &args.oci_hook_path {
        None => {
            out.write_all(text.as_bytes())?;
            out.flush()?;
            Ok(())
        }
        Some(path) => Ok(engine_config::write(
            &[Output {
                path: path.clone(),
                text,
            }],
            args.dry_run,
            out,
        )?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::{Invocation, Operation};

    fn parsed(args: &[&str]) -> Configure {
        let argv = ["nvidia-ctk", "runtime", "configure"].iter().chain(args);
        match crate::front::ctk::try_parse(argv).unwrap() {
            Invocation::Run(Operation::EngineConfigure(c), _) => c,
            other => panic!("parsed as {other:?}"),
        }
    }

    fn run(args: &[&str]) -> Result<String> {
        let mut out = Vec::new();
        configure(&parsed(args), &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn nvidias_flag_spellings_are_accepted() {
        let c = parsed(&[
            "--runtime=containerd",
            "--set-as-default",
            "--enable-cdi",
            "--runtime-path=/x",
        ]);
        assert!(c.nvidia_set_as_default && c.cdi_enabled);
        assert_eq!(c.nvidia_runtime_path.as_deref(), Some("/x"));
        let c = parsed(&[
            "--nvidia-set-as-default=false",
            "--cdi.enabled=true",
            "--dry-run",
        ]);
        assert!(!c.nvidia_set_as_default && c.cdi_enabled && c.dry_run);
        assert_eq!(c.runtime, Engine::Docker);
    }

    #[test]
    fn docker_writes_the_runtime_into_daemon_json() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("daemon.json");
        std::fs::write(&config, "{\"log-driver\": \"json-file\"}\n").unwrap();
        let c = config.to_str().unwrap();
        let printed = run(&["--runtime=docker", &format!("--config={c}"), "--dry-run"]).unwrap();
        assert!(
            printed.contains("\"nvidia-container-runtime\""),
            "{printed}"
        );
        assert_eq!(
            std::fs::read_to_string(&config).unwrap(),
            "{\"log-driver\": \"json-file\"}\n"
        );
        run(&[
            "--runtime=docker",
            &format!("--config={c}"),
            "--set-as-default",
            "--cdi.enabled",
        ])
        .unwrap();
        let written: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
        assert_eq!(
            written,
            serde_json::json!({
                "log-driver": "json-file",
                "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
                "default-runtime": "nvidia",
                "features": {"cdi": true},
            })
        );
    }

    #[test]
    fn containerd_writes_the_drop_in_then_the_import() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        let drop_in = dir.path().join("conf.d/99-nvidia.toml");
        std::fs::write(&config, "version = 2\n").unwrap();
        run(&[
            "--runtime=containerd",
            &format!("--config={}", config.display()),
            &format!("--drop-in-config={}", drop_in.display()),
            "--nvidia-runtime-path=/opt/bin/nvidia-container-runtime",
        ])
        .unwrap();
        let main = std::fs::read_to_string(&config).unwrap();
        assert_eq!(
            main,
            format!(
                "version = 2\nimports = [\"{}/conf.d/*.toml\"]\n",
                dir.path().display()
            )
        );
        let nvidia: toml::Table =
            toml::from_str(&std::fs::read_to_string(&drop_in).unwrap()).unwrap();
        assert_eq!(
            nvidia["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"]
                ["options"]["BinaryName"]
                .as_str(),
            Some("/opt/bin/nvidia-container-runtime")
        );
    }

    #[test]
    fn a_broken_file_is_left_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        std::fs::write(&config, "version = 2\n[plugins\n").unwrap();
        let err = run(&[
            "--runtime=containerd",
            &format!("--config={}", config.display()),
            &format!("--drop-in-config={}/d/99.toml", dir.path().display()),
        ])
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("{}:2: ", config.display())),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(&config).unwrap(),
            "version = 2\n[plugins\n"
        );
        assert!(!dir.path().join("d").exists());
    }

    #[test]
    fn nvidias_refusals_are_kept() {
        for (args, message) in [
            (
                &["--runtime=docker", "--drop-in-config=/x"][..],
                "runtime docker does not support drop-in configs",
            ),
            (
                &["--runtime=crio", "--drop-in-config=rel.conf"][..],
                "the drop-in-config path \"rel.conf\" is not an absolute path",
            ),
            (
                &["--runtime=containerd", "--nvidia-runtime-path=bin/x"][..],
                "the NVIDIA runtime path \"bin/x\" is not an absolute path",
            ),
            (
                &["--config-mode=oci-hook", "--nvidia-runtime-hook-path=hook"][..],
                "the NVIDIA runtime hook path \"hook\" is not an absolute path",
            ),
        ] {
            assert_eq!(run(args).unwrap_err().to_string(), message, "{args:?}");
        }
    }

    #[test]
    fn the_oci_hook_mode_prints_the_hooks_d_file() {
        let printed = run(&["--runtime=crio", "--config-mode=oci-hook"]).unwrap();
        let hook: serde_json::Value = serde_json::from_str(&printed).unwrap();
        assert_eq!(
            hook["hook"]["path"],
            "/usr/bin/nvidia-container-runtime-hook"
        );
        assert_eq!(hook["stages"], serde_json::json!(["prestart"]));
    }

    #[test]
    fn config_source_command_copies_from_containerds_dump() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let program = dir.path().join("containerd");
        std::fs::write(
            &program,
            "#!/bin/sh\n[ \"$1 $3 $4\" = '--config config dump' ] || exit 1\n\
             printf '%s\\n' 'version = 3' \
             \"[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\" \
             \"runtime_type = 'io.containerd.runc.v2'\" \
             \"[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\" \
             'SystemdCgroup = true'\n",
        )
        .unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let config = dir.path().join("config.toml");
        let drop_in = dir.path().join("conf.d/99-nvidia.toml");
        run(&[
            "--runtime=containerd",
            &format!("--config={}", config.display()),
            &format!("--drop-in-config={}", drop_in.display()),
            "--config-source=command",
            &format!("--executable-path={}", program.display()),
            "--nvidia-runtime-path=/opt/bin/nvidia-container-runtime",
        ])
        .unwrap();
        let nvidia: toml::Table =
            toml::from_str(&std::fs::read_to_string(&drop_in).unwrap()).unwrap();
        assert_eq!(nvidia["version"].as_integer(), Some(3));
        let ours =
            &nvidia["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["nvidia"];
        assert_eq!(ours["options"]["SystemdCgroup"].as_bool(), Some(true));
        assert_eq!(ours["runtime_type"].as_str(), Some("io.containerd.runc.v2"));
        assert_eq!(
            std::fs::read_to_string(&config).unwrap(),
            format!(
                "version = 3\nimports = [\"{}/conf.d/*.toml\"]\n",
                dir.path().display()
            )
        );
        let err = run(&["--runtime=crio", "--config-source=command"]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("--config-source=command is supported for containerd only"),
            "{err}"
        );
    }
}

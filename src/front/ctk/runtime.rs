//! `nvidia-ctk runtime configure`'s flags: NVIDIA's names and defaults,
//! read into [`Configure`].

use std::path::PathBuf;

use clap::builder::{BoolishValueParser, PossibleValuesParser, TypedValueParser};

use crate::app::engine::{Configure, Engine};
use crate::specs::engine_config::hooks_d;

/// `--runtime`'s values, the engines by name.
fn engine_name() -> impl TypedValueParser<Value = Engine> {
    PossibleValuesParser::new(Engine::ALL.map(|(name, _)| name))
        .map(|name| Engine::named(&name).unwrap_or(Engine::Docker))
}

/// `runtime configure`'s flags, NVIDIA's names and defaults.
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct ConfigureArgs {
    /// Print the file that would be written instead of writing anything.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = BoolishValueParser::new(), value_name = "BOOL")]
    pub dry_run: bool,
    /// The engine to configure: docker, containerd or crio.
    #[arg(long, default_value = "docker", value_parser = engine_name())]
    pub runtime: Engine,
    /// The engine's config file [default: /etc/docker/daemon.json,
    /// /etc/containerd/config.toml, /etc/crio/crio.conf].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The NVIDIA file to write instead of changing the main config; "" for
    /// none [default: /etc/containerd/conf.d/99-nvidia.toml,
    /// /etc/crio/crio.conf.d/99-nvidia.conf; none for Docker].
    #[arg(long, value_name = "FILE")]
    pub drop_in_config: Option<String>,
    /// The engine's executable that --config-source=command runs [default:
    /// containerd, from the system directories].
    #[arg(long, value_name = "PATH")]
    pub executable_path: Option<String>,
    /// config-file (the default), or oci-hook to write a hooks.d file instead.
    #[arg(long, value_name = "MODE")]
    pub config_mode: Option<String>,
    /// Where the engine's current config comes from: file, or command
    /// (containerd's `config dump`).
    #[arg(long, default_value = "file", value_name = "SOURCE")]
    pub config_source: String,
    /// The hooks.d file --config-mode=oci-hook writes [default: stdout].
    #[arg(long, value_name = "FILE")]
    pub oci_hook_path: Option<PathBuf>,
    /// The engine's name for the runtime.
    #[arg(long, default_value = "nvidia", value_name = "NAME")]
    pub nvidia_runtime_name: String,
    /// The runtime program [default: nvidia-container-runtime for Docker,
    /// found on its PATH; beside this binary (or /usr/bin) for the others].
    #[arg(long, alias = "runtime-path", value_name = "PATH")]
    pub nvidia_runtime_path: Option<String>,
    /// The prestart hook the hooks.d file runs.
    #[arg(long, default_value = hooks_d::DEFAULT_HOOK_PATH, value_name = "PATH")]
    pub nvidia_runtime_hook_path: PathBuf,
    /// Make the runtime the engine's default.
    #[arg(long, alias = "set-as-default", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false",
          value_parser = BoolishValueParser::new(), value_name = "BOOL")]
    pub nvidia_set_as_default: bool,
    /// Turn on the engine's own CDI support (Docker's features.cdi, containerd's enable_cdi).
    #[arg(long = "cdi.enabled", aliases = ["cdi.enable", "enable-cdi"], num_args = 0..=1,
          require_equals = true, default_missing_value = "true", default_value = "false",
          value_parser = BoolishValueParser::new(), value_name = "BOOL")]
    pub cdi_enabled: bool,
}

impl From<ConfigureArgs> for Configure {
    fn from(args: ConfigureArgs) -> Self {
        Configure {
            dry_run: args.dry_run,
            runtime: args.runtime,
            config: args.config,
            drop_in_config: args.drop_in_config,
            executable_path: args.executable_path,
            config_mode: args.config_mode,
            config_source: args.config_source,
            oci_hook_path: args.oci_hook_path,
            nvidia_runtime_name: args.nvidia_runtime_name,
            nvidia_runtime_path: args.nvidia_runtime_path,
            nvidia_runtime_hook_path: args.nvidia_runtime_hook_path,
            nvidia_set_as_default: args.nvidia_set_as_default,
            cdi_enabled: args.cdi_enabled,
        }
    }
}

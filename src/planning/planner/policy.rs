//! The request policy: what a request source asks, as the configuration
//! lets it stand. Which list a container's devices come from (device
//! mounts or its variable, an unprivileged container's variable accepted
//! or not), MIG management for privileged containers only, capabilities
//! the host does not offer dropped, `disable-require`. Only the planner
//! reads these settings (`tests/architecture.rs`).

use super::{Effective, Error, Result, Source};
use crate::config::Config;
use crate::planning::bundle::Container;
use crate::planning::plan::{NodeMode, Plan};
use crate::planning::planner::Asked;
use crate::planning::request::{self, Capabilities, DeviceSelection, ImexChannels, Request};
use crate::planning::require::Requirements;

/// The systemd scope to tell about `plan`'s cgroup rules: the container's,
/// when it runs under the systemd cgroup driver, the hook grants its
/// device cgroup, and `systemd-device-allow` is on (a setting of how a
/// grant is recorded, not of what a request gets: doctor reads it too).
pub(super) fn systemd_scope(config: &Config, source: Source<'_>, plan: &Plan) -> Option<String> {
    let container = match source {
        Source::Container(container) | Source::Runtime { container, .. } => Some(container),
        Source::Argv { container, .. } => container,
        Source::Flags { .. } | Source::Granted(_) | Source::Edits(_) => None,
    }?;
    let wanted = config.systemd_device_allow && !plan.cgroup_rules.is_empty();
    container.systemd_scope.clone().filter(|_| wanted)
}

/// The request `source` makes, as `config`'s policy lets it stand. Pure,
/// and first: a container that asks for nothing costs no discovery.
pub(super) fn effective(config: &Config, source: Source<'_>) -> Result<Effective> {
    match source {
        Source::Flags {
            devices,
            capabilities,
            env,
        } => {
            // The flags read as the variables do, so `list` shows what a
            // container with the same values would get.
            let request = match DeviceSelection::parse(Some(devices))? {
                DeviceSelection::Void => Request::void(),
                devices => {
                    let mut request = Request::new(
                        devices,
                        restrict(
                            Capabilities::from_variable(Some(capabilities), false)?,
                            config,
                        ),
                    );
                    request.imex = ImexChannels::from_env(env)?;
                    request.gated = request::gated_from_env(env);
                    request.all_csv_files = request::asks_all_csv_files(env);
                    request
                }
            };
            Ok(Effective {
                request,
                requirements: Requirements::default(),
                node_mode: NodeMode::Mknod,
            })
        }
        Source::Container(container) | Source::Runtime { container, .. } => {
            container_request(config, container)
        }
        // Planned by what the hook names ([`super::hook_edits`]), never a request.
        Source::Edits(_) => Ok(Effective::void(NodeMode::Mknod)),
        Source::Argv { asked, container } => argv_request(config, asked, container),
        // The GPUs are those whose nodes the runtime created, known once
        // the host is inventoried (see [`plan`]).
        Source::Granted(granted) => Ok(Effective {
            request: Request::new(
                DeviceSelection::None,
                restrict(
                    Capabilities::from_variable(Some(&granted.made.capabilities), false)?,
                    config,
                ),
            ),
            requirements: Requirements::default(),
            node_mode: NodeMode::Mknod,
        }),
    }
}

/// A command line's request. The caller chose the devices, capabilities
/// and requirements; policy still applies: the capabilities the host does
/// not offer are dropped, `disable-require` skips the rules, a container's
/// user namespace decides how nodes reach it, and MIG management goes to
/// privileged containers only, as NVIDIA's hook grants it (its CLI trusts
/// whoever runs it; a container without a readable bundle counts as
/// unprivileged).
fn argv_request(
    config: &Config,
    asked: &Asked,
    container: Option<&Container>,
) -> Result<Effective> {
    let node_mode = if container.is_some_and(|c| c.user_namespace) {
        NodeMode::Bind
    } else {
        NodeMode::Mknod
    };
    let capabilities = restrict(asked.capabilities.iter().copied().collect(), config);
    let mut request = Request::new(DeviceSelection::from_cli(&asked.devices)?, capabilities);
    request.mig_config = request::mig_from_cli("--mig-config", &asked.mig_config)?;
    request.mig_monitor = request::mig_from_cli("--mig-monitor", &asked.mig_monitor)?;
    request.imex = ImexChannels::parse("--imex-channel", &asked.imex_channels.join(","))?;
    if let Some(container) = container {
        refuse_mig_unless_privileged(&request, container, ["--mig-config", "--mig-monitor"])?;
    }
    let requirements = if config.disable_require {
        Requirements::default()
    } else {
        Requirements::from_rules(&asked.requirements)?
    };
    Ok(Effective {
        request,
        requirements,
        node_mode,
    })
}

/// A container's request, in NVIDIA's order: first whether it asks for
/// GPUs at all (device mounts win over the variable when accepted, and an
/// unprivileged container's variable is ignored when the config says so);
/// only then, for a GPU container, the MIG capabilities (privileged only),
/// the capabilities (those the host does not offer dropped) and the
/// requirements. A container that asks for no GPU is left alone whatever
/// its other variables say, as NVIDIA's hook returns before reading them
/// (CC:180-184).
fn container_request(config: &Config, container: &Container) -> Result<Effective> {
    let node_mode = if container.user_namespace {
        NodeMode::Bind
    } else {
        NodeMode::Mknod
    };
    let devices = container_devices(config, container)?;
    if devices == DeviceSelection::Void {
        return Ok(Effective::void(node_mode));
    }
    let mut request = Request::for_devices(&container.env, devices)?;
    refuse_mig_unless_privileged(
        &request,
        container,
        ["NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES"],
    )?;
    request.capabilities = restrict(request.capabilities, config);
    request.imex = container_imex(config, container)?;
    // The image's ENV can enable the gated classes too: under the strict
    // policy an unprivileged container gets only what each row allows.
    if !config.accept_env_when_unprivileged && !container.privileged {
        let (kept, dropped) = request.gated.split_strict();
        if dropped.any() {
            log::info!(
                "ignoring {} of an unprivileged container (accept-env-when-unprivileged = false)",
                dropped.variables()
            );
        }
        request.gated = kept;
    }
    let requirements = if config.disable_require {
        Requirements::default()
    } else {
        Requirements::from_env(&container.env)?
    };
    Ok(Effective {
        request,
        requirements,
        node_mode,
    })
}

/// Refuses MIG management and monitoring to an unprivileged container,
/// naming what asked for it (`names`: for configuration, then monitoring).
/// CC:186-200 refuses any MIG value in an unprivileged container; we refuse
/// only the ones that would do something.
fn refuse_mig_unless_privileged(
    request: &Request,
    container: &Container,
    [config, monitor]: [&'static str; 2],
) -> Result<()> {
    for (wanted, what) in [(request.mig_config, config), (request.mig_monitor, monitor)] {
        if wanted && !container.privileged {
            return Err(Error::Unprivileged { what });
        }
    }
    Ok(())
}

/// Where a container's device list comes from, as NVIDIA's hook decides
/// where to look (IMG:258-292): accepted device mounts win and the variable
/// is not read; an unprivileged container's variable counts only when the
/// config accepts it. The hook and the runtime wrapper's CDI mode both read
/// the list from here.
pub(super) enum Listed<'a> {
    /// The device plugin's volume mounts, each a device's name.
    Mounts(&'a [String]),
    /// `NVIDIA_VISIBLE_DEVICES`, unset (`None`) or as given.
    Variable(Option<&'a str>),
    /// Nothing: the variable of an unprivileged container, not accepted.
    Ignored,
}

/// The variable a container's devices are named in.
pub(super) const VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";

/// Where `container`'s device list comes from under `config`'s policy.
pub(super) fn listed<'a>(config: &Config, container: &'a Container) -> Listed<'a> {
    if config.accept_volume_mounts && !container.device_mounts.is_empty() {
        return Listed::Mounts(&container.device_mounts);
    }
    if !config.accept_env_when_unprivileged && !container.privileged {
        if Request::env_asks_for_devices(&container.env) {
            log::info!(
                "ignoring NVIDIA_VISIBLE_DEVICES of an unprivileged container (accept-env-when-unprivileged = false)"
            );
        }
        return Listed::Ignored;
    }
    Listed::Variable(request::env_var(&container.env, VISIBLE_DEVICES))
}

/// The devices a container asks for, read from where policy says ([`listed`]).
fn container_devices(config: &Config, container: &Container) -> Result<DeviceSelection> {
    Ok(match listed(config, container) {
        Listed::Mounts(mounts) => DeviceSelection::from_mounts(mounts)?,
        Listed::Ignored => DeviceSelection::Void,
        Listed::Variable(_) => Request::devices_from_env(&container.env)?,
    })
}

/// The IMEX channels a GPU container asks for, as NVIDIA's toolkit
/// decides where to look (`ImexChannelRequests`): accepted channel mounts
/// win; the variable counts for a privileged container, or for any when
/// the config accepts an unprivileged container's variables.
fn container_imex(config: &Config, container: &Container) -> Result<ImexChannels> {
    if config.ignore_imex_channel_requests {
        if request::env_var(&container.env, "NVIDIA_IMEX_CHANNELS").is_some()
            || !container.imex_mounts.is_empty()
        {
            log::info!("ignoring the container's IMEX channel requests (ignore-imex-channel-requests = true)");
        }
        return Ok(ImexChannels::None);
    }
    if config.accept_volume_mounts && !container.imex_mounts.is_empty() {
        return Ok(ImexChannels::from_mounts(&container.imex_mounts)?);
    }
    if !config.accept_env_when_unprivileged && !container.privileged {
        if request::env_var(&container.env, "NVIDIA_IMEX_CHANNELS").is_some() {
            log::info!(
                "ignoring NVIDIA_IMEX_CHANNELS of an unprivileged container (accept-env-when-unprivileged = false)"
            );
        }
        return Ok(ImexChannels::None);
    }
    Ok(ImexChannels::from_env(&container.env)?)
}

/// `capabilities` less those the host does not offer, which are logged.
fn restrict(capabilities: Capabilities, config: &Config) -> Capabilities {
    let (kept, dropped) = capabilities.restrict(config.supported());
    if !dropped.is_empty() {
        let names: Vec<&str> = dropped.iter().map(|c| c.name()).collect();
        log::warn!(
            "capabilities not offered on this host (supported-capabilities): {}",
            names.join(",")
        );
    }
    kept
}

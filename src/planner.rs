//! The one planner: from the configuration, a request source and the host
//! inventory to the effective request and the [`Plan`].
//!
//! Every consumer makes one call: [`plan`] for one container (the hooks,
//! the runtime wrapper, `list`, NVIDIA's CLI), [`plan_each_device`]
//! for a CDI spec, [`inventory`] for the commands that show the host, and
//! [`examine`] for `doctor`, which shows the host and plans a container on
//! it. The steps (the effective request, discovery, the image, the plan,
//! the requirement checks, what the caller leaves to others) are ordered
//! here and nowhere else, so a host and a request are shown the same way
//! everywhere: policy (device mounts against the variable, unprivileged
//! containers, supported capabilities, MIG privilege), discovery's scope (NVML only where `/proc` cannot answer),
//! the image's layout and compat libraries, and the requirement checks all
//! live here, not on a consumer's side. It never touches a container.

use std::path::Path;

use thiserror::Error;

use crate::bundle::{Container, GrantedNode};
pub use crate::callback::SpecMade;
use crate::config::Config;
use crate::driver::{self, CudaVersion, Inventory, NodeRole};
use crate::image::{self, Image, ImageLayout};
use crate::nvml;
use crate::plan::{self, NodeMode, Plan, SelectedDevice};
use crate::request::{
    self, Capabilities, Capability, DeviceId, DeviceSelection, ImexChannels, Request,
};
use crate::require::{self, DeviceFacts, Facts, Requirements};

/// Why a request cannot be planned on this host.
#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    Request(#[from] request::Error),
    #[error("{what}=all is refused: only privileged containers (CAP_SYS_ADMIN in the bounding set) may manage or monitor MIG")]
    Unprivileged { what: &'static str },
    #[error(transparent)]
    Require(#[from] require::Error),
    #[error(transparent)]
    Driver(#[from] driver::Error),
    #[error(transparent)]
    Image(#[from] image::Error),
    #[error(transparent)]
    Plan(#[from] plan::Error),
    #[error("the CDI spec was generated for driver {made_for}, but the host runs driver {running}: generate it again (oci-nvidia-hook cdi generate)")]
    StaleSpec { made_for: String, running: String },
    #[error("the CDI spec was generated for MIG layout {made_for}, but the host's MIG layout is now {host}: its MIG devices name instances that changed; generate it again (oci-nvidia-hook cdi generate, or systemctl start oci-nvidia-hook-cdi.service)")]
    StaleMigLayout { made_for: String, host: String },
    #[error("driver {version} shows no GPU in /proc/driver/nvidia/gpus: a CDI spec needs at least one device")]
    NoGpu { version: String },
    #[error(transparent)]
    UserNamespace(Box<dyn std::error::Error + Send + Sync>),
}

/// Result of planning.
pub type Result<T> = std::result::Result<T, Error>;

/// Where a request comes from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// A container, as its bundle describes it: its environment and device
    /// mounts ask, its privilege and user namespace decide what it may get.
    Container(&'a Container),
    /// A command's flags (`list`): the host's operator asks directly, so
    /// there is no environment to distrust and no privilege to check.
    Flags {
        /// Devices, as `NVIDIA_VISIBLE_DEVICES` takes them.
        devices: &'a str,
        /// Capabilities, as `NVIDIA_DRIVER_CAPABILITIES` takes them.
        capabilities: &'a str,
        /// The devices beyond the GPU, as a container's variables ask for
        /// them (`NVIDIA_IMEX_CHANNELS=…`, `NVIDIA_GDS=enabled`, …).
        env: &'a [String],
    },
    /// NVIDIA's CLI command line: what it asks, and the container it asks
    /// for (`configure`), whose bundle says whether it is privileged and in
    /// a user namespace; `None` for `list`, where the host's operator asks.
    Argv {
        /// The request.
        asked: &'a Asked,
        /// The container, as far as its bundle is known.
        container: Option<&'a Container>,
    },
    /// What a runtime granted a container from a spec we generated: the
    /// `cdi-hook` plans from this, never from the environment.
    Granted(Granted<'a>),
}

/// A request as NVIDIA's CLI command line makes it (`nvidia-container-cli
/// configure`, `list`): each field the values of its options, as given.
/// The caller (containerd, NVIDIA's own hook, an operator) has decided
/// what the container gets, so no environment is read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Asked {
    /// `--device` values, read as NVIDIA's CLI reads them; none selects no GPU.
    pub devices: Vec<String>,
    /// The capability flags given (`--compute`, `--utility`…); none gives no library.
    pub capabilities: Vec<Capability>,
    /// `--require` rules, each an `NVIDIA_REQUIRE_*` value.
    pub requirements: Vec<String>,
    /// `--mig-config` values.
    pub mig_config: Vec<String>,
    /// `--mig-monitor` values.
    pub mig_monitor: Vec<String>,
    /// `--imex-channel` values.
    pub imex_channels: Vec<String>,
}

/// Where the image the plan places files for is described.
#[derive(Debug, Clone, Copy)]
pub enum ImageSource<'a> {
    /// A rootfs to inspect (layout, CUDA compat libraries), resolved inside it.
    Rootfs(&'a Path),
    /// Only a layout, as `list` plans for.
    Layout(ImageLayout),
}

/// The request as policy lets it stand, and the requirements it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    /// What the container gets asked for, after policy.
    pub request: Request,
    /// The `NVIDIA_REQUIRE_*` rules to check; none when disabled.
    pub requirements: Requirements,
    /// How its device nodes reach it.
    pub node_mode: NodeMode,
}

impl Effective {
    /// Whether the request asks for nothing: not a GPU container.
    pub fn is_void(&self) -> bool {
        self.request.devices == DeviceSelection::Void
    }

    /// Whether NVML must be asked before planning: MIG devices named in a
    /// list are known only to it. `arch` and `brand` requirements ask it
    /// later, and only when evaluation reaches such a term (see [`plan`]).
    pub fn needs_nvml(&self) -> bool {
        self.request.needs_nvml()
    }

    /// The capabilities discovery looks for: what the container asked for,
    /// plus what checking its requirements may need whatever it asked for
    /// (NVML is a utility library, the driver's `libcuda` a compute one).
    pub fn discovery_scope(&self) -> Capabilities {
        let needs = self.requirements.needs();
        let mut scope = self.request.capabilities.clone();
        if self.needs_nvml() || needs.arch || needs.brand {
            scope = scope.with(Capability::Utility);
        }
        if needs.cuda {
            scope = scope.with(Capability::Compute);
        }
        scope
    }
}

/// What planning gives: the effective request, the host it was planned on, and the plan.
#[derive(Debug)]
pub struct Planned {
    /// The request as policy let it stand.
    pub effective: Effective,
    /// The host inventory it was planned on, scoped to the request (or
    /// to [`examine`]'s scope); `None` for a void request.
    pub inventory: Option<Inventory>,
    /// What the container receives.
    pub plan: Plan,
    /// The library layout the plan's container paths follow.
    pub layout: ImageLayout,
}

/// The request `source` makes, as `config`'s policy lets it stand. Pure,
/// and first: a container that asks for nothing costs no discovery.
fn effective(config: &Config, source: Source<'_>) -> Result<Effective> {
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
                    request
                }
            };
            Ok(Effective {
                request,
                requirements: Requirements::default(),
                node_mode: NodeMode::Mknod,
            })
        }
        Source::Container(container) => container_request(config, container),
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
        return Ok(Effective {
            request: Request::void(),
            requirements: Requirements::default(),
            node_mode,
        });
    }
    let mut request = Request::for_devices(&container.env, devices)?;
    refuse_mig_unless_privileged(
        &request,
        container,
        ["NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES"],
    )?;
    request.capabilities = restrict(request.capabilities, config);
    request.imex = container_imex(config, container)?;
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

/// The devices a container asks for, as NVIDIA's hook decides where to
/// look (IMG:258-292): accepted device mounts win and the variable is not
/// read; an unprivileged container's variable counts only when the config
/// accepts it.
fn container_devices(config: &Config, container: &Container) -> Result<DeviceSelection> {
    if config.accept_volume_mounts && !container.device_mounts.is_empty() {
        return Ok(DeviceSelection::from_mounts(&container.device_mounts)?);
    }
    if !config.accept_env_when_unprivileged && !container.privileged {
        if Request::env_asks_for_devices(&container.env) {
            log::info!(
                "ignoring NVIDIA_VISIBLE_DEVICES of an unprivileged container (accept-env-when-unprivileged = false)"
            );
        }
        return Ok(DeviceSelection::Void);
    }
    Ok(Request::devices_from_env(&container.env)?)
}

/// The IMEX channels a GPU container asks for, as NVIDIA's toolkit
/// decides where to look (`ImexChannelRequests`): accepted channel mounts
/// win; the variable counts for a privileged container, or for any when
/// the config accepts an unprivileged container's variables.
fn container_imex(config: &Config, container: &Container) -> Result<ImexChannels> {
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

/// How the host's driver root is inventoried.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Discovery {
    /// Walked whole, every time: the commands an operator runs to look at
    /// the host log all they find.
    #[default]
    Walk,
    /// From a valid snapshot when there is one (see `driver::snapshot`):
    /// the hooks, which run on every container start.
    Snapshot,
}

/// What the caller leaves to someone else: a runtime that creates the
/// nodes or grants the cgroup itself (NVIDIA's CLI `--no-devbind`,
/// `--no-cgroups`), or a CDI spec whose edits the runtime applied. The
/// plan then holds none of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeftToOthers {
    /// The device nodes in the container's `/dev`.
    pub nodes: bool,
    /// The device cgroup rules.
    pub cgroup_rules: bool,
    /// The bind mounts.
    pub mounts: bool,
}

impl LeftToOthers {
    /// Nothing: the caller applies the whole plan.
    pub const NOTHING: LeftToOthers = LeftToOthers {
        nodes: false,
        cgroup_rules: false,
        mounts: false,
    };

    /// What a runtime applies from a spec we generated: the nodes, their
    /// cgroup rules and the mounts.
    pub const SPEC_EDITS: LeftToOthers = LeftToOthers {
        nodes: true,
        cgroup_rules: true,
        mounts: true,
    };

    /// `plan` without what others own.
    fn take_from(self, plan: &mut Plan) {
        if self.nodes {
            plan.devices.clear();
        }
        if self.cgroup_rules {
            plan.cgroup_rules.clear();
        }
        if self.mounts {
            plan.mounts.clear();
        }
    }
}

/// An error of the caller's, for the planner to pass on.
pub type CallerError = Box<dyn std::error::Error + Send + Sync>;

/// The container's user namespace, as far as the caller knows it.
pub enum UserNamespace<'a> {
    /// As the request source says: its bundle's `user` namespace; none for flags.
    Declared,
    /// Asked once the request is known to ask for a GPU (a container that
    /// asks for none costs no look): whether its process is in a user
    /// namespace, which its bundle may not say (rootless Podman's
    /// `config.json` has none).
    Detect(&'a mut dyn FnMut() -> std::result::Result<bool, CallerError>),
}

impl std::fmt::Debug for UserNamespace<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            UserNamespace::Declared => "Declared",
            UserNamespace::Detect(_) => "Detect",
        })
    }
}

/// Everything a consumer knows, for [`plan`].
#[derive(Debug)]
pub struct Inputs<'a> {
    /// Where the request comes from.
    pub source: Source<'a>,
    /// The image the plan places files for.
    pub image: ImageSource<'a>,
    /// The container's user namespace.
    pub user_namespace: UserNamespace<'a>,
    /// What the caller leaves to a runtime or a spec.
    pub left: LeftToOthers,
    /// How the driver root is inventoried.
    pub discovery: Discovery,
}

impl<'a> Inputs<'a> {
    /// `source` for `image`, its user namespace as declared, the whole plan
    /// the caller's, the host walked whole: what the commands that show a
    /// plan ask.
    pub fn new(source: Source<'a>, image: ImageSource<'a>) -> Inputs<'a> {
        Inputs {
            source,
            image,
            user_namespace: UserNamespace::Declared,
            left: LeftToOthers::NOTHING,
            discovery: Discovery::Walk,
        }
    }
}

/// The one planner call for a container: the effective request; for one
/// that asks for a GPU, its user namespace, discovery, the image, the plan
/// and its requirement checks; and the plan less what the caller leaves to
/// others. A void request stops after the first step, with an empty plan.
pub fn plan(config: &Config, inputs: Inputs<'_>) -> Result<Planned> {
    plan_on(config, inputs, None)
}

/// [`plan`]'s steps, on the inventory `taken` when the caller's one
/// planner call took it already ([`examine`]), else discovered for the
/// request.
fn plan_on(config: &Config, inputs: Inputs<'_>, taken: Option<&Inventory>) -> Result<Planned> {
    let Inputs {
        source,
        image,
        user_namespace,
        left,
        discovery,
    } = inputs;
    let mut effective = effective(config, source)?;
    if effective.is_void() {
        return Ok(Planned {
            plan: Plan {
                node_mode: effective.node_mode,
                ..Plan::default()
            },
            effective,
            inventory: None,
            layout: ImageLayout::default(),
        });
    }
    if let UserNamespace::Detect(detect) = user_namespace {
        // Its /dev cannot hold usable device nodes: the host's are bound.
        if detect().map_err(Error::UserNamespace)? {
            effective.node_mode = NodeMode::Bind;
        }
    }
    let inventory = match taken {
        Some(taken) => {
            let mut inventory = taken.clone();
            if effective.needs_nvml() {
                inventory.nvml()?;
            }
            inventory
        }
        None => discover(config, &effective, discovery)?,
    };
    if let Source::Granted(granted) = source {
        // A spec made for another driver names files that changed.
        if inventory.driver_version != granted.made.driver_version {
            return Err(Error::StaleSpec {
                made_for: granted.made.driver_version.clone(),
                running: inventory.driver_version,
            });
        }
        // A MIG device's nodes in it are those of the instance it had then.
        if let Some(made_for) = &granted.made.mig_layout {
            let host = driver::mig_layout(&inventory.mig_instances);
            if *made_for != host {
                return Err(Error::StaleMigLayout {
                    made_for: made_for.clone(),
                    host,
                });
            }
        }
        effective.request.devices = granted_devices(&inventory, granted.nodes);
    }
    planned(config, effective, inventory, image, left)
}

/// Inventories the host for `effective`: only the files its capabilities
/// need, and NVML only when the request needs it.
fn discover(config: &Config, effective: &Effective, discovery: Discovery) -> Result<Inventory> {
    let scope = effective.discovery_scope();
    let mut inventory = match discovery {
        Discovery::Walk => Inventory::discover(&config.driver, &scope)?,
        Discovery::Snapshot => {
            let (inventory, unstored) = Inventory::discover_with_snapshot(&config.driver, &scope)?;
            // For the next container start.
            if let Some(snapshot) = unstored {
                snapshot.store();
            }
            inventory
        }
    };
    if effective.needs_nvml() {
        inventory.nvml()?;
    }
    Ok(inventory)
}

/// The host inventory for `scope`, as the commands that show the host
/// (`info`, `doctor`, `cdi validate`) look at it: walked whole.
pub fn inventory(config: &Config, scope: &Capabilities) -> Result<Inventory> {
    Ok(Inventory::discover(&config.driver, scope)?)
}

/// What `doctor` looks at: the host, and a container planned on it.
#[derive(Debug)]
pub struct Examined {
    /// The host inventory for the scope asked for, walked whole.
    pub inventory: Inventory,
    /// The container's plan (or why the hook would refuse it), made on
    /// that inventory as the hook would make it; `None` when none was asked.
    pub container: Option<Result<Planned>>,
}

/// The one planner call for `doctor`: the host inventoried for `scope`, as
/// [`inventory`] does, and, when `container` is given, its request planned
/// on that inventory as [`plan`] plans it (NVML asked on a copy, so the
/// host's inventory stays as discovery left it). Fails when discovery does.
pub fn examine(
    config: &Config,
    scope: &Capabilities,
    container: Option<Inputs<'_>>,
) -> Result<Examined> {
    let inventory = inventory(config, scope)?;
    let container = container.map(|inputs| plan_on(config, inputs, Some(&inventory)));
    Ok(Examined {
        inventory,
        container,
    })
}

/// Examines the image the plan is for.
fn image(config: &Config, inventory: &Inventory, source: ImageSource<'_>) -> Result<Image> {
    Ok(match source {
        ImageSource::Rootfs(rootfs) => {
            Image::inspect(rootfs, &inventory.driver_version, config.cuda_compat.mode)?
        }
        ImageSource::Layout(layout) => layout.into(),
    })
}

/// Plans `effective` on the inventoried host for `image`, then checks its
/// requirements on every GPU the plan selected, before anything changes.
///
/// NVML is asked only when evaluation reaches an `arch` or `brand` term
/// whose answer decides: a CUDA image's rule such as `cuda>=12.2
/// brand=tesla,driver>=470,…` holds on its first alternative on any
/// recent driver, and NVML's start (a fork, `nvmlInit`, up to seconds
/// without persistence mode) is spared.
fn build(effective: &Effective, inventory: &mut Inventory, image: &Image) -> Result<Plan> {
    let plan = Plan::build(inventory, &effective.request, image, effective.node_mode)?;
    let requirements = &effective.requirements;
    if requirements.is_empty() {
        return Ok(plan);
    }
    let cuda = if requirements.needs().cuda {
        Some(inventory.cuda_version()?)
    } else {
        None
    };
    check_requirements(requirements, inventory, &plan, image, cuda)?;
    Ok(plan)
}

/// The image examined and the plan made on `inventory`, all of it kept
/// but what the caller leaves to others.
fn planned(
    config: &Config,
    effective: Effective,
    mut inventory: Inventory,
    image: ImageSource<'_>,
    left: LeftToOthers,
) -> Result<Planned> {
    let image = self::image(config, &inventory, image)?;
    let mut plan = build(&effective, &mut inventory, &image)?;
    left.take_from(&mut plan);
    Ok(Planned {
        effective,
        inventory: Some(inventory),
        plan,
        layout: image.layout,
    })
}

/// What a runtime granted a container from a spec we generated (CDI, or
/// the runtime wrapper's `config.json`), and how that spec was made: the
/// hook that finishes the job plans from this, never from the environment.
#[derive(Debug, Clone, Copy)]
pub struct Granted<'a> {
    /// The character devices the runtime creates (`linux.devices`).
    pub nodes: &'a [GrantedNode],
    /// How the spec was made, as its hook's arguments record it.
    pub made: &'a SpecMade,
}

impl Planned {
    /// How a spec of this plan's edits is made: its driver, capabilities
    /// and layout; `None` for a void request, which makes no spec.
    pub fn spec_made(&self) -> Option<SpecMade> {
        Some(SpecMade {
            driver_version: self.inventory.as_ref()?.driver_version.clone(),
            capabilities: self.effective.request.capabilities.to_string(),
            layout: self.layout,
            mig_layout: Some(driver::mig_layout(&self.inventory.as_ref()?.mig_instances)),
        })
    }
}

/// A CDI spec's plans: each device's, on one inventory.
#[derive(Debug)]
pub struct EachDevice {
    /// The host inventory, NVML's MIG devices in it where there are any.
    pub inventory: Inventory,
    /// The plan for no device: what every device shares.
    pub common: Plan,
    /// Each GPU's plan, then each MIG device's.
    pub devices: Vec<DevicePlan>,
    /// The plan for `all`.
    pub all: Plan,
}

/// One device's plan, and its two names.
#[derive(Debug)]
pub struct DevicePlan {
    /// `0`, or `0:1` for a MIG device.
    pub index: String,
    /// `GPU-…` or `MIG-…`.
    pub uuid: String,
    /// What a container given it alone receives.
    pub plan: Plan,
}

/// The one planner call for a CDI spec: the host inventoried once, for
/// `capabilities` (as `NVIDIA_DRIVER_CAPABILITIES` takes them); NVML asked
/// when the host has MIG devices, which only it names; then each device
/// planned alone for an image of `layout`, as a container given it would
/// be. Refuses a host without GPUs.
pub fn plan_each_device(
    config: &Config,
    capabilities: &str,
    layout: ImageLayout,
) -> Result<EachDevice> {
    let flags = |devices: &str| -> Result<Effective> {
        effective(
            config,
            Source::Flags {
                devices,
                capabilities,
                env: &[],
            },
        )
    };
    let none = flags("none")?;
    let mut inventory = discover(config, &none, Discovery::Walk)?;
    // A WSL2 host shows no GPU but through /dev/dxg: its spec's one device is `all`.
    if inventory.gpus.is_empty() && inventory.wsl.is_none() {
        return Err(Error::NoGpu {
            version: inventory.driver_version,
        });
    }
    if !inventory.mig_instances.is_empty() {
        inventory.nvml()?;
    }
    let image = image(config, &inventory, ImageSource::Layout(layout))?;
    let common = build(&none, &mut inventory, &image)?;
    let gpus = inventory
        .gpus
        .iter()
        .map(|g| (g.index.to_string(), g.uuid.clone()));
    let migs = inventory
        .mig
        .iter()
        .flatten()
        .map(|m| (format!("{}:{}", m.parent, m.index), m.uuid.clone()));
    let names: Vec<(String, String)> = gpus.chain(migs).collect();
    let mut devices = Vec::new();
    for (index, uuid) in names {
        let effective = flags(&index)?;
        let plan = build(&effective, &mut inventory, &image)?;
        devices.push(DevicePlan { index, uuid, plan });
    }
    let all = build(&flags("all")?, &mut inventory, &image)?;
    Ok(EachDevice {
        inventory,
        common,
        devices,
        all,
    })
}

/// The devices whose nodes are among `nodes`: a GPU by its `nvidiaN`
/// node, a MIG device by its two `nvidia-capN` nodes beside its GPU's,
/// named in the older form that procfs resolves without NVML.
fn granted_devices(inventory: &Inventory, nodes: &[GrantedNode]) -> DeviceSelection {
    let has = |role: NodeRole, minor: u32| {
        inventory
            .nodes
            .iter()
            .filter(|n| n.role == role && n.minor == minor)
            .any(|n| {
                nodes.contains(&GrantedNode {
                    major: n.major,
                    minor,
                })
            })
    };
    if inventory.wsl.is_some() {
        // /dev/dxg serves every GPU: granted, it is `all`.
        return if inventory
            .nodes
            .iter()
            .any(|n| n.role == NodeRole::Dxg && has(n.role, n.minor))
        {
            DeviceSelection::All
        } else {
            DeviceSelection::None
        };
    }
    let mut ids = Vec::new();
    for gpu in inventory
        .gpus
        .iter()
        .filter(|g| has(NodeRole::Gpu, g.minor))
    {
        ids.push(DeviceId::Index(gpu.index));
        for gi in inventory
            .mig_instances
            .iter()
            .filter(|i| i.parent == gpu.index)
        {
            if !has(NodeRole::Capability, gi.access.minor) {
                continue;
            }
            for ci in gi
                .compute
                .iter()
                .filter(|c| has(NodeRole::Capability, c.access.minor))
            {
                ids.push(DeviceId::Mig(format!(
                    "MIG-{}/{}/{}",
                    gpu.uuid, gi.id, ci.id
                )));
            }
        }
    }
    if ids.is_empty() {
        DeviceSelection::None
    } else {
        DeviceSelection::List(ids)
    }
}

/// Checks `requirements` on every GPU `plan` selected (a MIG device's
/// parent), once each: a refusal here replaces "CUDA driver version is
/// insufficient" at run time. A GPU's `arch` and `brand` are NVML's
/// answers, asked of the inventory only when a rule's answer hangs on them.
fn check_requirements(
    requirements: &Requirements,
    inventory: &mut Inventory,
    plan: &Plan,
    image: &Image,
    cuda: Option<CudaVersion>,
) -> Result<()> {
    let mut facts = Facts {
        driver: inventory.driver_version.clone(),
        cuda,
        compat_cuda: image.compat.as_ref().map(|c| c.cuda),
        device: None,
    };
    let mut checked: Vec<u32> = Vec::new();
    for device in &plan.selected {
        if checked.contains(&device.gpu) {
            continue;
        }
        checked.push(device.gpu);
        facts.device = Some(device_facts(inventory.nvml.as_ref(), device));
        requirements.check_learning(&mut facts, &mut |facts| {
            if inventory.nvml.is_some() {
                return Ok(false);
            }
            let report = inventory.nvml()?;
            facts.device = Some(device_facts(Some(report), device));
            Ok::<bool, Error>(true)
        })?;
    }
    if checked.is_empty() {
        requirements.check(&facts)?;
    }
    Ok(())
}

/// What the `arch` and `brand` terms are checked against for `device`:
/// NVML's answers when it was asked, unknown before.
fn device_facts(nvml: Option<&nvml::Report>, device: &SelectedDevice) -> DeviceFacts {
    let nvml = nvml.and_then(|r| r.gpu(&device.uuid));
    DeviceFacts {
        name: format!("GPU {} ({})", device.gpu, device.uuid),
        arch: nvml.and_then(|g| g.compute_capability.version()),
        brand: nvml.map(|g| g.brand.clone()),
    }
}

#[cfg(test)]
mod tests;

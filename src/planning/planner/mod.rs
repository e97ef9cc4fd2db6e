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

mod access;
mod granted;
mod hook_edits;
mod left;
mod policy;
mod requirements;
mod runtime_cdi;

use std::path::Path;

use thiserror::Error;

use crate::config::{Config, RuntimeMode};
use crate::host::driver::{self, Inventory};
use crate::planning::bundle::{Container, GrantedNode};
use crate::planning::image::{self, Image, ImageLayout};
use crate::planning::plan::{self, NodeMode, Plan};
use crate::planning::request::{self, Capabilities, Capability, DeviceSelection, Request};
use crate::planning::require::{self, Requirements};
pub use crate::specs::cdi_hook_args::SpecMade;
use access::open_group_only_nodes;
use granted::granted_devices;
use policy::effective;
use requirements::build;

pub use hook_edits::COMPAT_CONF;
pub use left::LeftToOthers;

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
    UserNamespace(#[from] crate::planning::userns::Error),
    #[error("invalid --link {0:?}: expected TARGET::LINK")]
    HookLink(String),
    #[error("invalid --mode {0:?}: expected octal permission bits, at most 7777")]
    HookMode(String),
    #[error(transparent)]
    Container(#[from] Box<crate::apply::inject::Error>),
    #[error(
        "CDI device {item:?} in NVIDIA_VISIBLE_DEVICES: kind {kind} is not one the image's environment may name \
         ([runtime.cdi] env-kinds: {allowed}); an annotation or the orchestrator's CDI request may"
    )]
    CdiKindFromEnv {
        /// The item as given.
        item: String,
        /// Its kind.
        kind: String,
        /// The kinds allowed, comma-joined.
        allowed: String,
    },
    #[error("bad CDI device {item:?} in {from}: {reason}")]
    CdiName {
        /// The item as given.
        item: String,
        /// Where it was: the variable, a mount or an annotation, by name.
        from: String,
        /// Why it names no CDI device.
        reason: String,
    },
}

impl From<crate::apply::inject::Error> for Error {
    fn from(e: crate::apply::inject::Error) -> Self {
        Error::Container(Box::new(e))
    }
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
    /// A container the runtime wrapper reads: in CDI mode (as the config's
    /// runtime mode says) the CDI devices it names, else as
    /// [`Source::Container`].
    Runtime {
        /// The container, as its bundle describes it.
        container: &'a Container,
        /// Its whole `config.json`, for its annotations; `None` when it
        /// holds none under the configured prefixes.
        spec: Option<&'a serde_json::Value>,
    },
    /// A hook of NVIDIA's CDI specs: its edits, planned from the host's
    /// driver procfs or from the container's root ([`ImageSource::Rootfs`],
    /// seen from inside its mount namespace).
    Edits(&'a crate::planning::request::hook_edits::HookEdits),
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
    /// The answer for a source that asks for no GPU, its nodes (had it
    /// asked) reaching it as `node_mode` says.
    fn void(node_mode: NodeMode) -> Effective {
        Effective {
            request: Request::void(),
            requirements: Requirements::default(),
            node_mode,
        }
    }

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
    /// The container's user namespace, where its process was looked at
    /// ([`UserNamespace::Process`]) and has one.
    pub user_namespace: Option<crate::planning::userns::UserNamespace>,
    /// The CDI devices a container the runtime wrapper reads in CDI mode
    /// names ([`Source::Runtime`]); its plan is then empty.
    pub cdi_devices: Option<Vec<crate::planning::request::cdi_name::Qualified>>,
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

/// The container's user namespace, as far as the caller knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserNamespace {
    /// As the request source says: its bundle's `user` namespace; none for flags.
    Declared,
    /// The container's process, by pid, looked at once the request asks for
    /// a GPU: its bundle may not say (rootless Podman's has none).
    Process(u32),
    /// This process's own (`nvidia-container-cli configure` without `--pid`).
    OwnProcess,
}

/// The procfs a container's process is looked at in: always the real one
/// (the config's `proc-root` only relocates the driver's files).
const PROC: &str = "/proc";

/// Everything a consumer knows, for [`plan`].
#[derive(Debug)]
pub struct Inputs<'a> {
    /// Where the request comes from.
    pub source: Source<'a>,
    /// The image the plan places files for.
    pub image: ImageSource<'a>,
    /// The container's user namespace.
    pub user_namespace: UserNamespace,
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
    // A spec hook's edits are planned from what it names, no request.
    if let Source::Edits(kind) = source {
        let rootfs = match image {
            ImageSource::Rootfs(rootfs) => Some(rootfs),
            ImageSource::Layout(_) => None,
        };
        let mut planned = Planned::void(Effective::void(NodeMode::Mknod));
        planned.plan = hook_edits::plan(config, kind, rootfs)?;
        return Ok(planned);
    }
    // The runtime wrapper's CDI mode answers with names, not a plan.
    if let Source::Runtime { container, spec } = source {
        if let Some(names) = runtime_cdi::requested(config, container, spec)? {
            let mut planned = Planned::void(Effective::void(NodeMode::Mknod));
            planned.cdi_devices = Some(names);
            return Ok(planned);
        }
    }
    let mut effective = effective(config, source)?;
    if effective.is_void() {
        return Ok(Planned::void(effective));
    }
    let user_namespace = match user_namespace {
        UserNamespace::Process(pid) => crate::planning::userns::detect(Path::new(PROC), pid)?,
        UserNamespace::OwnProcess => crate::planning::userns::detect_own(Path::new(PROC))?,
        UserNamespace::Declared => None,
    };
    // Its /dev cannot hold usable device nodes: the host's are bound.
    if user_namespace.is_some() {
        effective.node_mode = NodeMode::Bind;
    }
    // Rootless, the hook has no device cgroup to write, and the runtime
    // made none for the container; the config may leave it to the runtime.
    let left = LeftToOthers {
        cgroup_rules: left.cgroup_rules
            || user_namespace.as_ref().is_some_and(|ns| ns.rootless)
            || !config.grant_device_cgroup,
        ..left
    };
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
    let mut planned = planned(config, effective, inventory, image, left)?;
    planned.user_namespace = user_namespace;
    planned.plan.systemd_scope = policy::systemd_scope(config, source, &planned.plan);
    Ok(planned)
}

/// Inventories the host for `effective`: only the files its capabilities
/// need, and NVML only when the request needs it.
fn discover(config: &Config, effective: &Effective, discovery: Discovery) -> Result<Inventory> {
    let scope = effective.discovery_scope();
    // NVIDIA's `csv` mode reads the host as a CSV (Jetson) host, whatever
    // it looks like; a Jetson image may ask for every CSV file.
    let csv_mode = config.runtime.mode == RuntimeMode::Csv && !config.driver.csv.force;
    let all_csv = effective.request.all_csv_files && !config.driver.csv.all;
    let widened;
    let driver = if csv_mode || all_csv {
        widened = crate::config::DriverConfig {
            csv: crate::config::CsvSelection {
                force: config.driver.csv.force || csv_mode,
                all: config.driver.csv.all || all_csv,
                ..config.driver.csv.clone()
            },
            ..config.driver.clone()
        };
        &widened
    } else {
        &config.driver
    };
    let mut inventory = match discovery {
        Discovery::Walk => Inventory::discover(driver, &scope)?,
        Discovery::Snapshot => {
            let (inventory, unstored) = Inventory::discover_with_snapshot(driver, &scope)?;
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
    let mut plan = build_for(config, &effective, &mut inventory, &image)?;
    left.take_from(&mut plan);
    Ok(Planned {
        effective,
        inventory: Some(inventory),
        plan,
        layout: image.layout,
        user_namespace: None,
        cdi_devices: None,
    })
}

/// [`build`]'s plan, its group-only nodes opened to the container's users
/// ([`open_group_only_nodes`]).
fn build_for(
    config: &Config,
    effective: &Effective,
    inventory: &mut Inventory,
    image: &Image,
) -> Result<Plan> {
    let mut plan = build(effective, inventory, image)?;
    open_group_only_nodes(config, &mut plan);
    Ok(plan)
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
    /// The answer for a container that asks for no GPU: an empty plan.
    fn void(effective: Effective) -> Planned {
        Planned {
            plan: Plan {
                node_mode: effective.node_mode,
                ..Plan::default()
            },
            effective,
            inventory: None,
            layout: ImageLayout::default(),
            user_namespace: None,
            cdi_devices: None,
        }
    }

    /// How a spec of this plan's edits is made: its driver, capabilities
    /// and layout; `None` for a void request, which makes no spec.
    pub fn spec_made(&self) -> Option<SpecMade> {
        Some(SpecMade {
            driver_version: self.inventory.as_ref()?.driver_version.clone(),
            capabilities: self.effective.request.capabilities.to_string(),
            layout: self.layout,
            mig_layout: Some(driver::mig_layout(&self.inventory.as_ref()?.mig_instances)),
            // A CSV host's (its base files, or all that the image asked
            // for): the hook reads it so too.
            roots: crate::specs::cdi_hook_args::Roots {
                csv: self
                    .inventory
                    .as_ref()?
                    .csv
                    .as_ref()
                    .map(|_| crate::config::CsvSelection {
                        all: self.effective.request.all_csv_files,
                        ..Default::default()
                    }),
                ..Default::default()
            },
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

/// Which devices a CDI spec plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecScope {
    /// Each GPU and MIG device alone, and `all`.
    EachDevice,
    /// `all` only, with the MIG configuration and monitoring capabilities:
    /// NVIDIA's management spec, for the GPU Operator's own pods, which
    /// manage the GPUs (MIG layouts included) rather than compute on them.
    /// No device is planned alone, so NVML is never asked.
    Management,
}

/// The one planner call for a CDI spec: the host inventoried once, for
/// `capabilities` (as `NVIDIA_DRIVER_CAPABILITIES` takes them); NVML asked
/// when the host has MIG devices, which only it names; then each device
/// planned alone for an image of `layout`, as a container given it would
/// be (for [`SpecScope::EachDevice`]). Refuses a host without GPUs.
pub fn plan_each_device(
    config: &Config,
    capabilities: &str,
    layout: ImageLayout,
    scope: SpecScope,
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
    // A WSL2 host shows no GPU but through /dev/dxg: its spec's one device
    // is `all`; a CSV host's one GPU is `0`, its nodes listed.
    if inventory.gpus.is_empty() && inventory.wsl.is_none() && inventory.csv.is_none() {
        return Err(Error::NoGpu {
            version: inventory.driver_version,
        });
    }
    let image = image(config, &inventory, ImageSource::Layout(layout))?;
    let common = build_for(config, &none, &mut inventory, &image)?;
    let mut all = flags("all")?;
    if scope == SpecScope::Management {
        // The host's operator asks, for pods that manage the GPUs.
        all.request.mig_config = true;
        all.request.mig_monitor = true;
        let all = build_for(config, &all, &mut inventory, &image)?;
        return Ok(EachDevice {
            inventory,
            common,
            devices: Vec::new(),
            all,
        });
    }
    if !inventory.mig_instances.is_empty() {
        inventory.nvml()?;
    }
    let gpus = inventory
        .gpus
        .iter()
        .map(|g| (g.index.to_string(), g.uuid.clone()));
    let migs = inventory
        .mig
        .iter()
        .flatten()
        .map(|m| (format!("{}:{}", m.parent, m.index), m.uuid.clone()));
    // A CSV host's integrated GPU: `0`, of no UUID (NVIDIA's `csv` mode names it so).
    let integrated = inventory
        .csv
        .is_some()
        .then(|| ("0".to_string(), String::new()));
    let names: Vec<(String, String)> = gpus.chain(migs).chain(integrated).collect();
    let mut devices = Vec::new();
    for (index, uuid) in names {
        let effective = flags(&index)?;
        let plan = build_for(config, &effective, &mut inventory, &image)?;
        devices.push(DevicePlan { index, uuid, plan });
    }
    let all = build_for(config, &all, &mut inventory, &image)?;
    Ok(EachDevice {
        inventory,
        common,
        devices,
        all,
    })
}

#[cfg(test)]
mod tests;

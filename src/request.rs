//! What a container asks for: which GPUs, and which driver capabilities.
//!
//! This module parses the request grammar only (`NVIDIA_VISIBLE_DEVICES`,
//! `NVIDIA_DRIVER_CAPABILITIES` and the matching `list` flags). It knows
//! nothing about the host: matching devices against the inventory is the
//! plan's job.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use thiserror::Error;

/// Longest request value we accept; anything longer is refused, not parsed.
const MAX_VALUE_LEN: usize = 4096;

/// Why a request value was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum Error {
    #[error("unknown driver capability {value:?}; known: {known}", known = Capability::known_list())]
    UnknownCapability { value: String },
    #[error("malformed device list {value:?}: {reason}")]
    MalformedDevices { value: String, reason: &'static str },
    #[error("{name}={value:?} is not supported; the only value is \"all\"")]
    MigCapability { name: &'static str, value: String },
    #[error("{what} is {len} bytes long; at most {MAX_VALUE_LEN} are accepted")]
    TooLong { what: &'static str, len: usize },
}

/// Result of parsing a request.
pub type Result<T> = std::result::Result<T, Error>;

/// A driver capability, the unit `NVIDIA_DRIVER_CAPABILITIES` selects files by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Capability {
    /// CUDA and OpenCL.
    Compute,
    /// NVML and `nvidia-smi`.
    Utility,
    /// Video encode and decode.
    Video,
    /// OpenGL, EGL and Vulkan.
    Graphics,
    /// X11 display; brings graphics.
    Display,
    /// NVIDIA NGX (DLSS).
    Ngx,
    /// The 32-bit libraries of the other selected capabilities.
    Compat32,
}

impl Capability {
    /// Every capability, in the order `info` lists them.
    pub const ALL: [Capability; 7] = [
        Capability::Utility,
        Capability::Compute,
        Capability::Video,
        Capability::Graphics,
        Capability::Display,
        Capability::Ngx,
        Capability::Compat32,
    ];

    /// The name used in `NVIDIA_DRIVER_CAPABILITIES`.
    pub fn name(self) -> &'static str {
        match self {
            Capability::Compute => "compute",
            Capability::Utility => "utility",
            Capability::Video => "video",
            Capability::Graphics => "graphics",
            Capability::Display => "display",
            Capability::Ngx => "ngx",
            Capability::Compat32 => "compat32",
        }
    }

    fn known_list() -> String {
        let mut names: Vec<&str> = Capability::ALL.iter().map(|c| c.name()).collect();
        names.push("all");
        names.join(", ")
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Capability {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Capability::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| Error::UnknownCapability {
                value: s.to_string(),
            })
    }
}

/// A set of capabilities with their implications applied: `video` brings
/// `compute`, and `display` brings `graphics`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Capabilities(BTreeSet<Capability>);

impl Capabilities {
    /// NVIDIA's default when the variable is unset: `utility,compute`.
    pub fn default_set() -> Self {
        Capabilities::from_iter([Capability::Utility, Capability::Compute])
    }

    /// Every capability, as `all` selects.
    pub fn all() -> Self {
        Capabilities::from_iter(Capability::ALL)
    }

    /// Parses a comma list such as `compute,utility` or `all`; blanks around items are tolerated.
    pub fn parse(value: &str) -> Result<Self> {
        check_len("capability list", value)?;
        let mut set = BTreeSet::new();
        for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if item == "all" {
                return Ok(Capabilities::all());
            }
            set.insert(item.parse()?);
        }
        Ok(Capabilities::from_iter(set))
    }

    /// Whether `capability` is selected, directly or by implication.
    pub fn contains(&self, capability: Capability) -> bool {
        self.0.contains(&capability)
    }

    /// The selected capabilities in `Capability` order.
    pub fn iter(&self) -> impl Iterator<Item = Capability> + '_ {
        self.0.iter().copied()
    }

    /// These plus `capability` (and what it implies).
    pub fn with(&self, capability: Capability) -> Capabilities {
        self.iter().chain([capability]).collect()
    }

    /// Splits these into the ones `supported` offers and the ones it does not.
    pub fn restrict(&self, supported: &Capabilities) -> (Capabilities, Vec<Capability>) {
        let (kept, dropped): (Vec<Capability>, Vec<Capability>) =
            self.iter().partition(|c| supported.contains(*c));
        // No implication may bring back what the host does not offer.
        let kept = Capabilities(kept.into_iter().collect());
        (kept, dropped)
    }
}

impl FromIterator<Capability> for Capabilities {
    fn from_iter<I: IntoIterator<Item = Capability>>(iter: I) -> Self {
        let mut set: BTreeSet<Capability> = iter.into_iter().collect();
        if set.contains(&Capability::Video) {
            set.insert(Capability::Compute);
        }
        if set.contains(&Capability::Display) {
            set.insert(Capability::Graphics);
        }
        Capabilities(set)
    }
}

impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(Capability::name).collect();
        f.write_str(&names.join(","))
    }
}

/// One item of a device list, before it is matched against the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "by", content = "value")]
pub enum DeviceId {
    /// A GPU index in PCI bus order, as NVML counts.
    Index(u32),
    /// A full GPU UUID, `GPU-…`.
    Uuid(String),
    /// A PCI bus id, full (`0000:3b:00.0`) or short (`3b:00.0`), normalised to the full form.
    Bus(String),
    /// A MIG device by UUID: `MIG-<uuid>`, or the older `MIG-GPU-<uuid>/<gi>/<ci>`.
    Mig(String),
    /// A MIG device by position: `<gpu index>:<mig index>`.
    MigIndex {
        /// The parent GPU's index.
        gpu: u32,
        /// The MIG device's index on that GPU, in NVML order.
        mig: u32,
    },
}

impl DeviceId {
    /// Whether this names a MIG device, which only NVML can resolve.
    pub fn is_mig(&self) -> bool {
        matches!(self, DeviceId::Mig(_) | DeviceId::MigIndex { .. })
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceId::Index(i) => write!(f, "{i}"),
            DeviceId::Uuid(u) | DeviceId::Bus(u) | DeviceId::Mig(u) => f.write_str(u),
            DeviceId::MigIndex { gpu, mig } => write!(f, "{gpu}:{mig}"),
        }
    }
}

/// Which GPUs a container asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "devices")]
pub enum DeviceSelection {
    /// Not a GPU container: unset, empty or `void`. Nothing is injected.
    Void,
    /// `none`: the driver's files and control nodes, but no GPU.
    None,
    /// `all`: every GPU.
    All,
    /// The listed GPUs, duplicates removed, in the order given.
    List(Vec<DeviceId>),
}

impl DeviceSelection {
    /// Parses `NVIDIA_VISIBLE_DEVICES`; `None` stands for an unset variable.
    pub fn parse(value: Option<&str>) -> Result<Self> {
        let Some(value) = value else {
            return Ok(DeviceSelection::Void);
        };
        check_len("device list", value)?;
        match value.trim() {
            "" | "void" => return Ok(DeviceSelection::Void),
            "none" => return Ok(DeviceSelection::None),
            "all" => return Ok(DeviceSelection::All),
            _ => {}
        }
        let mut ids: Vec<DeviceId> = Vec::new();
        for item in value.split(',').map(str::trim) {
            if item.is_empty() {
                return Err(malformed(value, "empty item"));
            }
            let id = parse_device_id(item).ok_or_else(|| {
                malformed(
                    value,
                    "items must be GPU indices, GPU-<uuid>, PCI bus ids, MIG-<uuid> or <gpu>:<mig>, or the whole value all, none or void",
                )
            })?;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        Ok(DeviceSelection::List(ids))
    }
}

fn malformed(value: &str, reason: &'static str) -> Error {
    Error::MalformedDevices {
        value: value.to_string(),
        reason,
    }
}

fn check_len(what: &'static str, value: &str) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::TooLong {
            what,
            len: value.len(),
        });
    }
    Ok(())
}

fn is_decimal(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `s` is a UUID body, `8-4-4-4-12` hex digits.
fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                b == b'-'
            } else {
                b.is_ascii_hexdigit()
            }
        })
}

fn parse_device_id(item: &str) -> Option<DeviceId> {
    if is_decimal(item) {
        return item.parse().ok().map(DeviceId::Index);
    }
    if let Some((gpu, mig)) = item
        .split_once(':')
        .filter(|(g, m)| is_decimal(g) && is_decimal(m))
    {
        return Some(DeviceId::MigIndex {
            gpu: gpu.parse().ok()?,
            mig: mig.parse().ok()?,
        });
    }
    if let Some(hex) = item.strip_prefix("GPU-") {
        return is_uuid(hex).then(|| DeviceId::Uuid(format!("GPU-{}", hex.to_ascii_lowercase())));
    }
    if let Some(rest) = item.strip_prefix("MIG-") {
        if is_uuid(rest) {
            return Some(DeviceId::Mig(format!("MIG-{}", rest.to_ascii_lowercase())));
        }
        // The pre-R470 form names the parent GPU and the instance ids.
        let (gpu, ids) = rest.strip_prefix("GPU-")?.split_once('/')?;
        let (gi, ci) = ids.split_once('/')?;
        return (is_uuid(gpu) && is_decimal(gi) && is_decimal(ci))
            .then(|| DeviceId::Mig(format!("MIG-GPU-{}/{gi}/{ci}", gpu.to_ascii_lowercase())));
    }
    parse_bus_id(item).map(DeviceId::Bus)
}

/// Normalises a PCI bus id to `dddd:bb:dd.f` in lower case, or `None` if it is not one.
pub fn parse_bus_id(item: &str) -> Option<String> {
    let (rest, function) = item.rsplit_once('.')?;
    let mut parts: Vec<&str> = rest.split(':').collect();
    if parts.len() == 2 {
        parts.insert(0, "0000");
    }
    let [domain, bus, device] = parts.as_slice() else {
        return None;
    };
    let hex = |s: &str, max: usize| {
        !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_hexdigit())
    };
    if !(hex(domain, 8) && hex(bus, 2) && hex(device, 2) && hex(function, 1)) {
        return None;
    }
    let domain = u32::from_str_radix(domain, 16).ok()?;
    let bus = u8::from_str_radix(bus, 16).ok()?;
    let device = u8::from_str_radix(device, 16).ok()?;
    let function = u8::from_str_radix(function, 16).ok()?;
    Some(format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}"))
}

/// A whole request: which GPUs, which capabilities.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Request {
    /// The GPUs asked for.
    pub devices: DeviceSelection,
    /// The driver capabilities asked for, implications applied.
    pub capabilities: Capabilities,
    /// `NVIDIA_MIG_CONFIG_DEVICES=all`: the MIG configuration capability (privileged only).
    pub mig_config: bool,
    /// `NVIDIA_MIG_MONITOR_DEVICES=all`: the MIG monitoring capability (privileged only).
    pub mig_monitor: bool,
}

impl Request {
    /// A request for `devices` with `capabilities` and no MIG capabilities, as `list` makes.
    pub fn new(devices: DeviceSelection, capabilities: Capabilities) -> Request {
        Request {
            devices,
            capabilities,
            mig_config: false,
            mig_monitor: false,
        }
    }

    /// Whether NVML must be asked: MIG devices are known only to it.
    pub fn needs_nvml(&self) -> bool {
        matches!(&self.devices, DeviceSelection::List(ids) if ids.iter().any(DeviceId::is_mig))
    }
}

/// Parses `NVIDIA_MIG_CONFIG_DEVICES`/`NVIDIA_MIG_MONITOR_DEVICES`: only `all` is meaningful.
fn mig_capability(env: &[String], name: &'static str) -> Result<bool> {
    match env_var(env, name).map(str::trim) {
        None | Some("") => Ok(false),
        Some("all") => Ok(true),
        Some(other) => Err(Error::MigCapability {
            name,
            value: other.to_string(),
        }),
    }
}

/// The value of `name` in a container's `process.env` (`KEY=VALUE` strings); the last one wins.
pub fn env_var<'a>(env: &'a [String], name: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find_map(|entry| entry.strip_prefix(name)?.strip_prefix('='))
}

impl Request {
    /// The request a container makes through its environment, as NVIDIA's
    /// hook reads it. A legacy CUDA image (`CUDA_VERSION` set, no
    /// `NVIDIA_REQUIRE_CUDA`) gets every GPU when `NVIDIA_VISIBLE_DEVICES` is
    /// unset, and every capability when `NVIDIA_DRIVER_CAPABILITIES` is unset.
    pub fn from_env(env: &[String]) -> Result<Request> {
        // As NVIDIA: an empty variable counts as unset here.
        let set = |name| env_var(env, name).is_some_and(|v| !v.is_empty());
        let legacy = set("CUDA_VERSION") && !set("NVIDIA_REQUIRE_CUDA");
        let devices = match env_var(env, "NVIDIA_VISIBLE_DEVICES") {
            None if legacy => DeviceSelection::All,
            value => DeviceSelection::parse(value)?,
        };
        let capabilities = match env_var(env, "NVIDIA_DRIVER_CAPABILITIES") {
            None if legacy => Capabilities::all(),
            None => Capabilities::default_set(),
            Some(value) if value.trim().is_empty() => Capabilities::default_set(),
            Some(value) => Capabilities::parse(value)?,
        };
        Ok(Request {
            devices,
            capabilities,
            mig_config: mig_capability(env, "NVIDIA_MIG_CONFIG_DEVICES")?,
            mig_monitor: mig_capability(env, "NVIDIA_MIG_MONITOR_DEVICES")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_apply_implications() {
        let caps = Capabilities::parse("video,display").unwrap();
        let names: Vec<_> = caps.iter().collect();
        assert_eq!(
            names,
            [
                Capability::Compute,
                Capability::Video,
                Capability::Graphics,
                Capability::Display
            ]
        );
    }

    #[test]
    fn all_selects_every_capability() {
        assert_eq!(
            Capabilities::parse("compute, all").unwrap(),
            Capabilities::all()
        );
        assert!(Capabilities::all().contains(Capability::Compat32));
    }

    #[test]
    fn restricts_to_supported_capabilities() {
        let supported = Capabilities::parse("utility,compute").unwrap();
        let (kept, dropped) = Capabilities::parse("utility,video,graphics")
            .unwrap()
            .restrict(&supported);
        assert_eq!(kept.to_string(), "compute,utility");
        assert_eq!(dropped, [Capability::Video, Capability::Graphics]);
        assert_eq!(
            Capabilities::parse("compute")
                .unwrap()
                .with(Capability::Utility),
            Capabilities::default_set()
        );
    }

    #[test]
    fn default_is_utility_and_compute() {
        assert_eq!(Capabilities::default_set().to_string(), "compute,utility");
    }

    #[test]
    fn unknown_capability_lists_known_ones() {
        let err = Capabilities::parse("compute,cuda").unwrap_err();
        assert_eq!(
            err,
            Error::UnknownCapability {
                value: "cuda".into()
            }
        );
        let text = err.to_string();
        assert!(
            text.contains("compute, utility") || text.contains("utility, compute"),
            "{text}"
        );
        assert!(text.contains("all"), "{text}");
    }

    #[test]
    fn device_keywords() {
        assert_eq!(DeviceSelection::parse(None).unwrap(), DeviceSelection::Void);
        assert_eq!(
            DeviceSelection::parse(Some("")).unwrap(),
            DeviceSelection::Void
        );
        assert_eq!(
            DeviceSelection::parse(Some("void")).unwrap(),
            DeviceSelection::Void
        );
        assert_eq!(
            DeviceSelection::parse(Some("none")).unwrap(),
            DeviceSelection::None
        );
        assert_eq!(
            DeviceSelection::parse(Some(" all ")).unwrap(),
            DeviceSelection::All
        );
    }

    #[test]
    fn device_list_dedupes_and_normalises() {
        let sel = DeviceSelection::parse(Some(
            "1, 0,1,GPU-ABCDEF01-2345-6789-abcd-ef0123456789,3b:00.0,0000:3B:00.0",
        ))
        .unwrap();
        assert_eq!(
            sel,
            DeviceSelection::List(vec![
                DeviceId::Index(1),
                DeviceId::Index(0),
                DeviceId::Uuid("GPU-abcdef01-2345-6789-abcd-ef0123456789".into()),
                DeviceId::Bus("0000:3b:00.0".into()),
            ])
        );
    }

    #[test]
    fn mig_devices_by_uuid_and_position() {
        let sel = DeviceSelection::parse(Some(
            "MIG-AB5E4C9D-1234-5678-9ABC-DEF012345678, 0:1,MIG-GPU-abcdef01-2345-6789-abcd-ef0123456789/1/0, 0:1",
        ))
        .unwrap();
        assert_eq!(
            sel,
            DeviceSelection::List(vec![
                DeviceId::Mig("MIG-ab5e4c9d-1234-5678-9abc-def012345678".into()),
                DeviceId::MigIndex { gpu: 0, mig: 1 },
                DeviceId::Mig("MIG-GPU-abcdef01-2345-6789-abcd-ef0123456789/1/0".into()),
            ])
        );
        assert!(DeviceId::MigIndex { gpu: 0, mig: 1 }.is_mig());
        assert!(!DeviceId::Index(0).is_mig());
        assert_eq!(DeviceId::MigIndex { gpu: 2, mig: 3 }.to_string(), "2:3");
    }

    #[test]
    fn junk_device_lists_are_refused() {
        for junk in [
            "0,,1",
            "gpu0",
            "GPU-123",
            "-1",
            "99999999999999999999",
            "3b:00",
            "all,0",
            "0;1",
            "MIG-123",
            "MIG-GPU-abc/1/0",
            "0:",
            ":1",
            "0:1:2",
            "MIG-GPU-abcdef01-2345-6789-abcd-ef0123456789/1",
        ] {
            assert!(
                matches!(
                    DeviceSelection::parse(Some(junk)),
                    Err(Error::MalformedDevices { .. })
                ),
                "{junk}"
            );
        }
    }

    #[test]
    fn huge_values_are_refused() {
        let huge = "0,".repeat(10_000);
        assert!(matches!(
            DeviceSelection::parse(Some(&huge)),
            Err(Error::TooLong { .. })
        ));
        assert!(matches!(
            Capabilities::parse(&huge),
            Err(Error::TooLong { .. })
        ));
    }

    fn env(vars: &[&str]) -> Vec<String> {
        vars.iter().map(|v| v.to_string()).collect()
    }

    #[test]
    fn request_from_env_defaults() {
        let req = Request::from_env(&env(&["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0,1"])).unwrap();
        assert_eq!(
            req.devices,
            DeviceSelection::List(vec![DeviceId::Index(0), DeviceId::Index(1)])
        );
        assert_eq!(req.capabilities, Capabilities::default_set());
        let req = Request::from_env(&env(&[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_DRIVER_CAPABILITIES=",
        ]))
        .unwrap();
        assert_eq!(req.capabilities, Capabilities::default_set());
    }

    #[test]
    fn request_from_env_unset_or_void_is_not_a_gpu_container() {
        assert_eq!(
            Request::from_env(&env(&["PATH=/bin"])).unwrap().devices,
            DeviceSelection::Void
        );
        let req = Request::from_env(&env(&["NVIDIA_VISIBLE_DEVICES=void"])).unwrap();
        assert_eq!(req.devices, DeviceSelection::Void);
    }

    #[test]
    fn last_assignment_wins_and_prefixes_do_not_match() {
        let e = env(&[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_VISIBLE_DEVICES_X=1",
            "NVIDIA_VISIBLE_DEVICES=2",
        ]);
        assert_eq!(env_var(&e, "NVIDIA_VISIBLE_DEVICES"), Some("2"));
        assert_eq!(env_var(&e, "NVIDIA_VISIBLE"), None);
    }

    #[test]
    fn legacy_cuda_image_gets_all_gpus_and_capabilities() {
        let req = Request::from_env(&env(&["CUDA_VERSION=11.8.0"])).unwrap();
        assert_eq!(req.devices, DeviceSelection::All);
        assert_eq!(req.capabilities, Capabilities::all());
        // An empty requirement is no requirement, as NVIDIA reads it.
        let req =
            Request::from_env(&env(&["CUDA_VERSION=11.8.0", "NVIDIA_REQUIRE_CUDA="])).unwrap();
        assert_eq!(req.devices, DeviceSelection::All);
        assert_eq!(
            Request::from_env(&env(&["CUDA_VERSION="])).unwrap().devices,
            DeviceSelection::Void
        );
        // Not legacy once it states its requirement.
        let req = Request::from_env(&env(&[
            "CUDA_VERSION=12.2.0",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.2",
        ]))
        .unwrap();
        assert_eq!(req.devices, DeviceSelection::Void);
        // Explicit variables still win.
        let req = Request::from_env(&env(&[
            "CUDA_VERSION=11.8.0",
            "NVIDIA_VISIBLE_DEVICES=none",
            "NVIDIA_DRIVER_CAPABILITIES=utility",
        ]))
        .unwrap();
        assert_eq!(req.devices, DeviceSelection::None);
        assert_eq!(req.capabilities.to_string(), "utility");
    }

    #[test]
    fn bad_env_values_are_refused() {
        assert!(Request::from_env(&env(&[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=compute,bogus"
        ]))
        .is_err());
        assert!(Request::from_env(&env(&["NVIDIA_VISIBLE_DEVICES=0,,x"])).is_err());
    }

    #[test]
    fn bus_ids_normalise() {
        assert_eq!(parse_bus_id("3B:00.0").as_deref(), Some("0000:3b:00.0"));
        assert_eq!(
            parse_bus_id("00000001:3b:1f.7").as_deref(),
            Some("0001:3b:1f.7")
        );
        assert_eq!(parse_bus_id("0000:3b:00"), None);
        assert_eq!(parse_bus_id("0000:3bb:00.0"), None);
    }
}

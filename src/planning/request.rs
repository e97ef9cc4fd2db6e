//! What a container asks for: which GPUs, which driver capabilities, and
//! the MIG management capabilities.
//!
//! This module parses the request grammar only (`NVIDIA_VISIBLE_DEVICES`,
//! `NVIDIA_DRIVER_CAPABILITIES`, `NVIDIA_MIG_{CONFIG,MONITOR}_DEVICES` and
//! the matching `list` flags), as NVIDIA's hook and CLI read it; the
//! citations in comments name NVIDIA's source (keys as in
//! docs/differences-from-nvidia.md). It knows nothing about the host: matching
//! devices against the inventory is the plan's job, and policy (privilege,
//! volume mounts, supported capabilities) is the planner's.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub mod cdi_name;
mod devices;
mod extras;
pub mod hook_edits;

pub use devices::{parse_bus_id, DeviceId, DeviceSelection, CDI_KIND, IMEX_KIND, JIT_KIND};
pub use extras::{gated_from_env, Gated, ImexChannels, MAX_IMEX_CHANNEL};

/// Longest request value we accept; anything longer is refused, not parsed.
const MAX_VALUE_LEN: usize = 4096;

/// Why a request value was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum Error {
    #[error("unknown driver capability {value:?}; known: {known}", known = Capability::known_list())]
    UnknownCapability { value: String },
    #[error("malformed device list {value:?}: {item:?} is {reason}")]
    MalformedDevices {
        value: String,
        item: String,
        reason: &'static str,
    },
    #[error("{name}={value:?} is not supported; the only value is \"all\"")]
    MigCapability { name: &'static str, value: String },
    #[error("malformed IMEX channel list {what}={value:?}: {item:?} is not a channel number (0 to {MAX_IMEX_CHANNEL}) or all")]
    MalformedImexChannels {
        what: &'static str,
        value: String,
        item: String,
    },
    #[error("{what} is {len} bytes long; at most {MAX_VALUE_LEN} are accepted")]
    TooLong { what: &'static str, len: usize },
}

/// Result of parsing a request.
pub type Result<T> = std::result::Result<T, Error>;

/// A driver capability, the unit `NVIDIA_DRIVER_CAPABILITIES` selects files by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// What is selected, implications applied: `video` brings `compute`'s
    /// libraries and devices, `display` brings `graphics`.
    set: BTreeSet<Capability>,
    /// What was named (or `all`), before implications: NVIDIA's `video`
    /// brings compute's libraries but not its programs (OPT:88-89), so the
    /// programs follow the names.
    named: BTreeSet<Capability>,
}

impl Serialize for Capabilities {
    /// The selected set, as a list of names.
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.set.serialize(s)
    }
}

impl Capabilities {
    /// NVIDIA's default when the variable is unset: `utility,compute`.
    pub fn default_set() -> Self {
        Capabilities::from_iter([Capability::Utility, Capability::Compute])
    }

    /// Every capability, as `all` selects.
    pub fn all() -> Self {
        Capabilities::from_iter(Capability::ALL)
    }

    /// No capability at all, as a blank `NVIDIA_DRIVER_CAPABILITIES` asks.
    pub fn empty() -> Self {
        Capabilities {
            set: BTreeSet::new(),
            named: BTreeSet::new(),
        }
    }

    /// Parses a comma list such as `compute,utility` or `all`, as NVIDIA
    /// does: items trimmed, empty ones dropped (CAPS:51-63), an `all`
    /// anywhere selects everything whatever the other items say (CAPS:109-111,
    /// CC:169); names are case-sensitive, and an unknown one is refused.
    pub fn parse(value: &str) -> Result<Self> {
        check_len("capability list", value)?;
        let items: Vec<&str> = value
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if items.contains(&"all") {
            return Ok(Capabilities::all());
        }
        items.into_iter().map(Capability::from_str).collect()
    }

    /// `NVIDIA_DRIVER_CAPABILITIES` as NVIDIA's hook reads it (CC:151-175):
    /// unset gives every capability to a legacy CUDA image and the default to
    /// any other; empty gives the default; a value that holds only blanks and
    /// commas gives no capability at all (the container keeps its device
    /// nodes but gets no library); anything else is parsed.
    pub fn from_variable(value: Option<&str>, legacy: bool) -> Result<Self> {
        match value {
            None if legacy => Ok(Capabilities::all()),
            None | Some("") => Ok(Capabilities::default_set()),
            Some(value) => Capabilities::parse(value),
        }
    }

    /// Whether `capability` is selected, directly or by implication.
    pub fn contains(&self, capability: Capability) -> bool {
        self.set.contains(&capability)
    }

    /// Whether `capability` was named itself (or by `all`), not only implied:
    /// a capability's programs come only then.
    pub fn named(&self, capability: Capability) -> bool {
        self.named.contains(&capability)
    }

    /// The selected capabilities in `Capability` order.
    pub fn iter(&self) -> impl Iterator<Item = Capability> + '_ {
        self.set.iter().copied()
    }

    /// These plus `capability` (and what it implies).
    pub fn with(&self, capability: Capability) -> Capabilities {
        let mut with: Capabilities = self.named.iter().copied().chain([capability]).collect();
        with.set.extend(self.set.iter().copied());
        with
    }

    /// Splits these into the ones `supported` offers and the ones it does not.
    pub fn restrict(&self, supported: &Capabilities) -> (Capabilities, Vec<Capability>) {
        let (kept, dropped): (Vec<Capability>, Vec<Capability>) =
            self.iter().partition(|c| supported.contains(*c));
        // No implication may bring back what the host does not offer.
        let kept = Capabilities {
            set: kept.into_iter().collect(),
            named: self
                .named
                .iter()
                .copied()
                .filter(|c| supported.contains(*c))
                .collect(),
        };
        (kept, dropped)
    }
}

impl FromIterator<Capability> for Capabilities {
    fn from_iter<I: IntoIterator<Item = Capability>>(iter: I) -> Self {
        let named: BTreeSet<Capability> = iter.into_iter().collect();
        let mut set = named.clone();
        if set.contains(&Capability::Video) {
            set.insert(Capability::Compute);
        }
        if set.contains(&Capability::Display) {
            set.insert(Capability::Graphics);
        }
        Capabilities { set, named }
    }
}

impl fmt::Display for Capabilities {
    /// The names, which bring back what they imply when parsed again (so a
    /// parsed list reads as itself: `display` does not come back as a named
    /// `graphics`), and any selected capability no name implies (one a
    /// [`Capabilities::restrict`] kept after dropping what implied it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let implied: Capabilities = self.named.iter().copied().collect();
        let names: Vec<&str> = self
            .iter()
            .filter(|c| self.named.contains(c) || !implied.contains(*c))
            .map(Capability::name)
            .collect();
        f.write_str(&names.join(","))
    }
}

/// Refuses a value too long to be a request, before it is parsed.
fn check_len(what: &'static str, value: &str) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::TooLong {
            what,
            len: value.len(),
        });
    }
    Ok(())
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
    /// The IMEX channels asked for (policy decides which source counts).
    pub imex: ImexChannels,
    /// The feature-gated devices enabled.
    pub gated: Gated,
    /// `NVIDIA_REQUIRE_JETPACK=csv-mounts=all`: on a CSV (Jetson) host,
    /// every CSV file of the directory, not only the base files.
    pub all_csv_files: bool,
}

impl Request {
    /// A request for `devices` with `capabilities` and no MIG capabilities, as `list` makes.
    pub fn new(devices: DeviceSelection, capabilities: Capabilities) -> Request {
        Request {
            devices,
            capabilities,
            mig_config: false,
            mig_monitor: false,
            imex: ImexChannels::None,
            gated: Gated::default(),
            all_csv_files: false,
        }
    }

    /// The request of a container that is not a GPU container: nothing.
    pub fn void() -> Request {
        Request::new(DeviceSelection::Void, Capabilities::empty())
    }

    /// Whether NVML must be asked: MIG devices by UUID or index are known only to it.
    pub fn needs_nvml(&self) -> bool {
        matches!(&self.devices, DeviceSelection::List(ids) if ids.iter().any(DeviceId::needs_nvml))
    }
}

/// Parses `NVIDIA_MIG_CONFIG_DEVICES`/`NVIDIA_MIG_MONITOR_DEVICES` as
/// NVIDIA's CLI does (COM:333-441): comma items, empty ones skipped; the
/// first item decides, and only `all`, in any case, is accepted (COM:349-353,
/// 376). Unlike the CLI we trim blanks around items, which only accepts more.
fn mig_capability(env: &[String], name: &'static str) -> Result<bool> {
    match env_var(env, name) {
        Some(value) => mig_value(name, value),
        None => Ok(false),
    }
}

/// NVIDIA's CLI `--mig-config`/`--mig-monitor` options (named `name`),
/// repeated ones joined with commas as its CLI joins them, read as the
/// variables are: whether MIG management is asked for.
pub fn mig_from_cli(name: &'static str, values: &[String]) -> Result<bool> {
    if values.is_empty() {
        return Ok(false);
    }
    mig_value(name, &values.join(","))
}

/// One MIG management value: the first non-empty item decides, and only
/// `all` (any case) is accepted.
fn mig_value(name: &'static str, value: &str) -> Result<bool> {
    match value
        .split(',')
        .map(str::trim)
        .find(|item| !item.is_empty())
    {
        None => Ok(false),
        Some(item) if item.eq_ignore_ascii_case("all") => Ok(true),
        Some(_) => Err(Error::MigCapability {
            name,
            value: value.to_string(),
        }),
    }
}

/// The value of `name` in a container's `process.env` (`KEY=VALUE` strings); the last one wins.
pub fn env_var<'a>(env: &'a [String], name: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find_map(|entry| entry.strip_prefix(name)?.strip_prefix('='))
}

/// Whether `env` is a legacy CUDA image's: `CUDA_VERSION` set and
/// `NVIDIA_REQUIRE_CUDA` unset, an empty value counting as unset (IMG:101-105).
fn is_legacy(env: &[String]) -> bool {
    let set = |name| env_var(env, name).is_some_and(|v| !v.is_empty());
    set("CUDA_VERSION") && !set("NVIDIA_REQUIRE_CUDA")
}

/// Whether `env` holds `NVIDIA_REQUIRE_JETPACK=csv-mounts=all`, with which
/// a Jetson image asks for every CSV file (`list --jetpack` too).
pub fn asks_all_csv_files(env: &[String]) -> bool {
    env_var(env, JETPACK).is_some_and(|v| v == JETPACK_ALL)
}

/// The variable with which a Jetson image asks for every CSV file.
const JETPACK: &str = "NVIDIA_REQUIRE_JETPACK";
/// Its value that asks for them (NVIDIA's `internal/modifier/csv.go`).
const JETPACK_ALL: &str = "csv-mounts=all";

impl Request {
    /// The devices a container's environment asks for: `NVIDIA_VISIBLE_DEVICES`,
    /// or every GPU for a legacy CUDA image that leaves it unset (IMG:168-171).
    pub fn devices_from_env(env: &[String]) -> Result<DeviceSelection> {
        match env_var(env, "NVIDIA_VISIBLE_DEVICES") {
            None if is_legacy(env) => Ok(DeviceSelection::All),
            value => DeviceSelection::parse(value),
        }
    }

    /// Whether a container's environment asks for any device, without
    /// judging the items: what is known of a request that policy ignores.
    pub fn env_asks_for_devices(env: &[String]) -> bool {
        match env_var(env, "NVIDIA_VISIBLE_DEVICES") {
            None => is_legacy(env),
            value => DeviceSelection::is_requested(value),
        }
    }

    /// The rest of a GPU container's request, once `devices` are known not
    /// to be void: capabilities and MIG capabilities. NVIDIA's hook reads
    /// none of them for any other container (CC:180-184), so neither may we.
    pub fn for_devices(env: &[String], devices: DeviceSelection) -> Result<Request> {
        let capabilities = Capabilities::from_variable(
            env_var(env, "NVIDIA_DRIVER_CAPABILITIES"),
            is_legacy(env),
        )?;
        Ok(Request {
            devices,
            capabilities,
            mig_config: mig_capability(env, "NVIDIA_MIG_CONFIG_DEVICES")?,
            mig_monitor: mig_capability(env, "NVIDIA_MIG_MONITOR_DEVICES")?,
            // Which source of channels counts is policy: the planner's.
            imex: ImexChannels::None,
            gated: gated_from_env(env),
            all_csv_files: asks_all_csv_files(env),
        })
    }

    /// The request a container makes through its environment alone, as
    /// NVIDIA's hook reads it: its devices, then, only for a GPU container,
    /// the rest. A legacy CUDA image (`CUDA_VERSION` set, no
    /// `NVIDIA_REQUIRE_CUDA`) gets every GPU when `NVIDIA_VISIBLE_DEVICES` is
    /// unset, and every capability when `NVIDIA_DRIVER_CAPABILITIES` is unset.
    pub fn from_env(env: &[String]) -> Result<Request> {
        match Request::devices_from_env(env)? {
            DeviceSelection::Void => Ok(Request::void()),
            devices => Request::for_devices(env, devices),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[&str]) -> Vec<String> {
        vars.iter().map(|v| v.to_string()).collect()
    }

    fn caps(value: &str) -> String {
        Capabilities::parse(value).unwrap().to_string()
    }

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

    /// What a list prints reads back as the same capabilities, names and
    /// implications alike: the CDI hook and the runtime wrapper's hook get
    /// capabilities as text (the fuzz target `config` found `display`
    /// coming back as a named `graphics`).
    #[test]
    fn a_list_written_back_reads_as_itself() {
        for value in [
            "compat32,compute,display,",
            "video",
            "video,compute",
            "display,graphics",
            "utility,compute",
            "all",
            "",
        ] {
            let parsed = Capabilities::parse(value).unwrap();
            let text = parsed.to_string();
            assert_eq!(
                Capabilities::parse(&text).unwrap(),
                parsed,
                "{value:?} -> {text:?}"
            );
        }
        assert_eq!(caps("video,display"), "video,display");
        // A restricted set keeps what its dropped names implied, in words.
        let (kept, dropped) = Capabilities::parse("video,utility")
            .unwrap()
            .restrict(&Capabilities::parse("compute,utility").unwrap());
        assert_eq!(dropped, [Capability::Video]);
        assert_eq!(kept.to_string(), "compute,utility");
    }

    #[test]
    fn all_anywhere_in_the_list_selects_every_capability() {
        // CAPS:109-111 and CC:169: an exact `all` makes the set "all"
        // whatever else it holds, so the other items are never judged.
        for value in [
            "all",
            "compute, all",
            "all,compute",
            "foo,all",
            "all,foo",
            " all ,",
        ] {
            assert_eq!(
                Capabilities::parse(value).unwrap(),
                Capabilities::all(),
                "{value}"
            );
        }
        assert!(Capabilities::all().contains(Capability::Compat32));
    }

    #[test]
    fn capability_lists_drop_blanks_and_empty_items() {
        // CAPT:102-126 (NewDriverCapabilities' table): trimmed, empties dropped.
        assert_eq!(caps(",compute"), "compute");
        assert_eq!(caps("compute,"), "compute");
        assert_eq!(caps("utility,,compute"), "compute,utility");
        assert_eq!(caps(" compute , utility "), "compute,utility");
        assert_eq!(caps(" , "), "");
    }

    #[test]
    fn capability_names_are_case_sensitive() {
        // CAPS:109-111 compares with "all" exactly; CC:169-170 refuses
        // what the supported set does not hold, and it holds lower case only.
        for value in ["ALL", "Compute", "none", "compute,COMPUTE"] {
            assert!(
                matches!(
                    Capabilities::parse(value),
                    Err(Error::UnknownCapability { .. })
                ),
                "{value}"
            );
        }
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
    fn capability_variable_unset_empty_or_blank_as_nvidia() {
        // CCT:547-596 (TestGetDriverCapabilities, id 34194439301): unset is
        // every capability for a legacy image and the default otherwise;
        // empty is the default for both. CC:165-172 and MAIN:138-141: a
        // blank but non-empty value parses to nothing and passes no flag.
        let from = |value, legacy| {
            Capabilities::from_variable(value, legacy)
                .unwrap()
                .to_string()
        };
        assert_eq!(
            from(None, true),
            "compute,utility,video,graphics,display,ngx,compat32"
        );
        assert_eq!(from(None, false), "compute,utility");
        assert_eq!(from(Some(""), true), "compute,utility");
        assert_eq!(from(Some(""), false), "compute,utility");
        assert_eq!(from(Some(" "), false), "");
        assert_eq!(from(Some(","), true), "");
        // Written as named; the implied ones are selected all the same.
        assert_eq!(from(Some("display,video"), true), "video,display");
        let implied = Capabilities::from_variable(Some("display,video"), true).unwrap();
        assert_eq!(
            implied.iter().collect::<Vec<_>>(),
            [
                Capability::Compute,
                Capability::Video,
                Capability::Graphics,
                Capability::Display
            ]
        );
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
            Request::from_env(&env(&["PATH=/bin"])).unwrap(),
            Request::void()
        );
        let req = Request::from_env(&env(&["NVIDIA_VISIBLE_DEVICES=void"])).unwrap();
        assert_eq!(req.devices, DeviceSelection::Void);
    }

    #[test]
    fn a_container_asking_for_no_gpu_has_its_other_variables_ignored() {
        // CC:180-184: NVIDIA's hook returns before it reads capabilities or
        // the MIG variables, so no value of theirs can refuse the container.
        for junk in [
            "NVIDIA_DRIVER_CAPABILITIES=bogus",
            "NVIDIA_DRIVER_CAPABILITIES=ALL",
            "NVIDIA_MIG_CONFIG_DEVICES=all",
            "NVIDIA_MIG_CONFIG_DEVICES=0",
            "NVIDIA_MIG_MONITOR_DEVICES=junk",
        ] {
            for devices in [None, Some(""), Some("void"), Some(" , "), Some("0,void")] {
                let mut vars = vec![junk.to_string()];
                if let Some(d) = devices {
                    vars.push(format!("NVIDIA_VISIBLE_DEVICES={d}"));
                }
                assert_eq!(Request::from_env(&vars), Ok(Request::void()), "{vars:?}");
            }
        }
        // In a GPU container they are read, and refused.
        let vars = env(&[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=bogus",
        ]);
        assert!(Request::from_env(&vars).is_err());
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
        // IMGT2:267-273, CCT:33-44: a legacy image (IMG:101-105) that leaves
        // both variables unset gets all devices (IMG:168-171) and every
        // capability (CC:160-163).
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
        // CCT:175-190: not legacy once it states its requirement.
        let req = Request::from_env(&env(&[
            "CUDA_VERSION=12.2.0",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.2",
        ]))
        .unwrap();
        assert_eq!(req.devices, DeviceSelection::Void);
        // Explicit variables still win; a set but empty device variable is
        // void, not the legacy default (IMG:168-176).
        let req = Request::from_env(&env(&[
            "CUDA_VERSION=11.8.0",
            "NVIDIA_VISIBLE_DEVICES=none",
            "NVIDIA_DRIVER_CAPABILITIES=utility",
        ]))
        .unwrap();
        assert_eq!(req.devices, DeviceSelection::None);
        assert_eq!(req.capabilities.to_string(), "utility");
        let req =
            Request::from_env(&env(&["CUDA_VERSION=11.8.0", "NVIDIA_VISIBLE_DEVICES="])).unwrap();
        assert_eq!(req, Request::void());
        // CCT:547-555: an empty capability variable is the default, not all.
        let req = Request::from_env(&env(&[
            "CUDA_VERSION=11.8.0",
            "NVIDIA_DRIVER_CAPABILITIES=",
        ]))
        .unwrap();
        assert_eq!(req.capabilities, Capabilities::default_set());
    }

    #[test]
    fn legacy_image_asks_for_devices_even_when_policy_will_ignore_it() {
        assert!(Request::env_asks_for_devices(&env(&[
            "CUDA_VERSION=12.2.0"
        ])));
        assert!(Request::env_asks_for_devices(&env(&[
            "NVIDIA_VISIBLE_DEVICES=junk!"
        ])));
        assert!(Request::env_asks_for_devices(&env(&[
            "NVIDIA_VISIBLE_DEVICES=none"
        ])));
        assert!(!Request::env_asks_for_devices(&env(&[
            "CUDA_VERSION=12.2.0",
            "NVIDIA_VISIBLE_DEVICES=,"
        ])));
        assert!(!Request::env_asks_for_devices(&env(&["PATH=/bin"])));
    }

    #[test]
    fn mig_variables_accept_all_in_any_case_with_empty_items() {
        // COM:333-386 (select_mig_config_devices; 388-441 for monitor):
        // empty items skipped, `all` compared case-insensitively and the
        // walk ended there (COM:349-353); nothing but separators selects
        // nothing.
        let mig = |value: &str| {
            let vars = env(&[
                "NVIDIA_VISIBLE_DEVICES=all",
                &format!("NVIDIA_MIG_CONFIG_DEVICES={value}"),
                &format!("NVIDIA_MIG_MONITOR_DEVICES={value}"),
            ]);
            Request::from_env(&vars).map(|r| (r.mig_config, r.mig_monitor))
        };
        for value in ["all", "ALL", "All", "all,", ",all", " all ", "all,0"] {
            assert_eq!(mig(value), Ok((true, true)), "{value}");
        }
        for value in ["", ",", " , "] {
            assert_eq!(mig(value), Ok((false, false)), "{value:?}");
        }
    }

    #[test]
    fn mig_variables_refuse_anything_but_all() {
        // COM:376: `<item>: only 'all' devices are currently supported`,
        // including `all` after another item.
        for value in ["0", "mig0,mig1", "GPU-0", "0,all", "none"] {
            let vars = env(&[
                "NVIDIA_VISIBLE_DEVICES=0",
                &format!("NVIDIA_MIG_CONFIG_DEVICES={value}"),
            ]);
            let err = Request::from_env(&vars).unwrap_err();
            assert_eq!(
                err,
                Error::MigCapability {
                    name: "NVIDIA_MIG_CONFIG_DEVICES",
                    value: value.into()
                }
            );
            assert!(!err.to_string().contains('\n'));
        }
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
    fn cli_mig_options_take_all_only_as_the_variables_do() {
        let values = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(mig_from_cli("--mig-config", &[]), Ok(false));
        assert_eq!(mig_from_cli("--mig-config", &values(&[""])), Ok(false));
        assert_eq!(mig_from_cli("--mig-config", &values(&["ALL"])), Ok(true));
        assert_eq!(
            mig_from_cli("--mig-monitor", &values(&["", "all"])),
            Ok(true)
        );
        assert_eq!(
            mig_from_cli("--mig-config", &values(&["0"])),
            Err(Error::MigCapability {
                name: "--mig-config",
                value: "0".into()
            })
        );
    }
}

//! The device-list grammar: `NVIDIA_VISIBLE_DEVICES`, the `list --device`
//! flag and the names of volume-mount requests, read as NVIDIA reads them.
//!
//! NVIDIA reads a list in two steps, and so does this module. Its hook
//! splits the variable on commas, trims and drops empty items, and lets the
//! exact keywords `void`, `none` and `all` win over everything else
//! ([`HookList`]). Its CLI then walks the items in order: `all` in any case
//! selects everything, and each other item is a GPU UUID, a PCI bus id, an
//! index, a MIG UUID or `<gpu>:<mig>` ([`DeviceId`]). Only the syntax is
//! checked here; whether a device exists is the plan's question, and this
//! module never looks at the host.

use serde::Serialize;

use super::{check_len, Error, Result};

/// The CDI kind of the devices our specs (and NVIDIA's) name: a device list
/// may give `nvidia.com/gpu=1` where it gives `1`.
pub const CDI_KIND: &str = "nvidia.com/gpu";

/// The kind of IMEX channel devices, as NVIDIA's: `nvidia.com/imex-channel=0`.
pub const IMEX_KIND: &str = "nvidia.com/imex-channel";

/// The kind NVIDIA's runtime gives the devices of its in-memory specs in
/// `jit-cdi` mode (1.18+): `runtime.nvidia.com/gpu=0` is GPU 0 of this host.
pub const JIT_KIND: &str = "runtime.nvidia.com/gpu";

/// An item without our CDI kind's `nvidia.com/gpu=` (or NVIDIA's `jit-cdi`
/// kind's `runtime.nvidia.com/gpu=`), which names the same device as the
/// item after it: our spec's device names are the list's own (`0`, `all`,
/// `GPU-…`, `0:1`, `MIG-…`).
fn without_kind(item: &str) -> &str {
    [CDI_KIND, JIT_KIND]
        .iter()
        .find_map(|kind| item.strip_prefix(kind)?.strip_prefix('='))
        .map_or(item, str::trim)
}

/// One item of a device list, before it is matched against the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "by", content = "value")]
pub enum DeviceId {
    /// A GPU index in PCI bus order, as NVML counts.
    Index(u32),
    /// A full GPU UUID, `GPU-…`, in lower case.
    Uuid(String),
    /// A PCI bus id, normalised to `dddd:bb:dd.0`: NVIDIA ignores the function.
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

    /// Whether only NVML can resolve this: a MIG device by UUID or index.
    /// The older `MIG-GPU-<uuid>/<gi>/<ci>` names its GPU and instance ids,
    /// which the kernel module's capability files list on their own.
    pub fn needs_nvml(&self) -> bool {
        match self {
            DeviceId::Mig(_) => self.instance().is_none(),
            DeviceId::MigIndex { .. } => true,
            _ => false,
        }
    }

    /// The parent GPU's UUID and the GPU and compute instance ids of an
    /// older-form MIG name, `MIG-GPU-<uuid>/<gi>/<ci>`.
    pub fn instance(&self) -> Option<(String, u32, u32)> {
        let DeviceId::Mig(name) = self else {
            return None;
        };
        let rest = name.strip_prefix("MIG-GPU-")?;
        let mut parts = rest.split('/');
        let uuid = format!("GPU-{}", parts.next()?);
        let gi = parts.next()?.parse().ok()?;
        let ci = parts.next()?.parse().ok()?;
        parts.next().is_none().then_some((uuid, gi, ci))
    }
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
    /// The listed GPUs, duplicates removed, in the order given; never empty.
    List(Vec<DeviceId>),
}

/// A device variable as NVIDIA's hook leaves it for its CLI.
#[derive(Debug, PartialEq, Eq)]
enum HookList<'a> {
    Void,
    None,
    All,
    /// The trimmed, non-empty items, for the CLI to read; never empty.
    Items(Vec<&'a str>),
}

/// NVIDIA's hook: split on commas, trim, drop empty items (IMG:149-179);
/// an exact `void`, else `none`, else `all` anywhere wins (DEV:35-63); no
/// item at all is no request (IMG:174-176).
fn hook_list(value: &str) -> HookList<'_> {
    let items: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .map(without_kind)
        .filter(|item| !item.is_empty())
        .collect();
    let has = |keyword: &str| items.contains(&keyword);
    if items.is_empty() || has("void") {
        HookList::Void
    } else if has("none") {
        HookList::None
    } else if has("all") {
        HookList::All
    } else {
        HookList::Items(items)
    }
}

impl DeviceSelection {
    /// Parses `NVIDIA_VISIBLE_DEVICES` (or `list --device`) as NVIDIA's hook
    /// and CLI read it together; `None` stands for an unset variable.
    pub fn parse(value: Option<&str>) -> Result<Self> {
        let Some(value) = value else {
            return Ok(DeviceSelection::Void);
        };
        match hook_list(value) {
            HookList::Void => Ok(DeviceSelection::Void),
            HookList::None => Ok(DeviceSelection::None),
            HookList::All => Ok(DeviceSelection::All),
            HookList::Items(items) => {
                check_len("device list", value)?;
                cli_select(
                    value,
                    items,
                    "not a device: the keywords none and void are lower case",
                )
            }
        }
    }

    /// Whether `value` asks for anything at all (it is not void), without
    /// judging its items: what NVIDIA's hook knows when it ignores an
    /// unprivileged container's request.
    pub fn is_requested(value: Option<&str>) -> bool {
        value.is_some_and(|v| hook_list(v) != HookList::Void)
    }

    /// Parses the device names of volume-mount requests. NVIDIA's hook hands
    /// them to its CLI as they are (IMG:265-271), so no keyword but `all`
    /// means anything: `none` and `void` are refused as the CLI refuses them.
    pub fn from_mounts(names: &[String]) -> Result<Self> {
        DeviceSelection::from_cli(names)
    }

    /// Parses the values of NVIDIA's CLI `--device` options, joined with
    /// commas as its CLI joins repeated ones (CLI `configure`, `list`): the
    /// items as its CLI reads them, `all` the only keyword, and no item at
    /// all (no `--device`) selecting no GPU, as `none` does.
    pub fn from_cli(values: &[String]) -> Result<Self> {
        let value = values.join(",");
        check_len("device list", &value)?;
        let items = value
            .split(',')
            .map(str::trim)
            .map(without_kind)
            .filter(|item| !item.is_empty());
        cli_select(
            &value,
            items,
            "not a device: none and void are keywords of NVIDIA_VISIBLE_DEVICES, not of a \
             device list NVIDIA's CLI takes (no device at all selects no GPU)",
        )
    }
}

/// NVIDIA's CLI: the items in order (COM:290-323). `all` in any case selects
/// everything and ends the walk, so later items are never read (COM:296-301).
/// No item selects nothing, as `none` does. `keywords` says why `none` or
/// `void` (in any case) names no device in this list.
fn cli_select<'a>(
    value: &str,
    items: impl IntoIterator<Item = &'a str>,
    keywords: &'static str,
) -> Result<DeviceSelection> {
    let mut ids: Vec<DeviceId> = Vec::new();
    for item in items {
        if item.eq_ignore_ascii_case("all") {
            return Ok(DeviceSelection::All);
        }
        let id = parse_device_id(item).ok_or_else(|| Error::MalformedDevices {
            value: value.to_string(),
            item: item.to_string(),
            reason: if item.eq_ignore_ascii_case("none") || item.eq_ignore_ascii_case("void") {
                keywords
            } else {
                "not a GPU index, GPU-<uuid>, PCI bus id, MIG-<uuid>, <gpu>:<mig> or all"
            },
        })?;
        // COM:59, 77: a device named twice is selected once.
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(if ids.is_empty() {
        DeviceSelection::None
    } else {
        DeviceSelection::List(ids)
    })
}

/// One item, tried as NVIDIA's CLI tries it: GPU UUID, PCI bus id, index,
/// MIG UUID, `<gpu>:<mig>` (COM:157-272). `None` when it can name no device.
fn parse_device_id(item: &str) -> Option<DeviceId> {
    // COM:173-182: the prefix and the UUID compare case-insensitively, and
    // only a whole UUID can equal a GPU's.
    if let Some(uuid) = strip_prefix_ignore_case(item, "GPU-") {
        return is_uuid(uuid).then(|| DeviceId::Uuid(format!("GPU-{}", uuid.to_ascii_lowercase())));
    }
    if let Some(bus) = pci_bus_id(item) {
        return Some(DeviceId::Bus(bus));
    }
    // COM:196-200: strtoumax over the whole item. A number that cannot be an
    // index (negative, or past u32) names no GPU, as NVIDIA finds at run time.
    if let Some((index, "")) = scan_unsigned(item) {
        return index.map(DeviceId::Index);
    }
    // COM:231-243.
    if let Some(rest) = strip_prefix_ignore_case(item, "MIG-") {
        if is_uuid(rest) {
            return Some(DeviceId::Mig(format!("MIG-{}", rest.to_ascii_lowercase())));
        }
        // The pre-R470 form names the parent GPU and the instance ids.
        let (gpu, ids) = strip_prefix_ignore_case(rest, "GPU-")?.split_once('/')?;
        let (gi, ci) = ids.split_once('/')?;
        return (is_uuid(gpu) && is_decimal(gi) && is_decimal(ci))
            .then(|| DeviceId::Mig(format!("MIG-GPU-{}/{gi}/{ci}", gpu.to_ascii_lowercase())));
    }
    // COM:247-255: sscanf("%lu:%lu") ignores whatever follows the second
    // number, but `bb:dd.f` is our short PCI form first.
    let mig = scan_unsigned(item).and_then(|(gpu, rest)| {
        let (mig, rest) = scan_unsigned(rest.strip_prefix(':')?)?;
        Some((gpu, mig, rest))
    });
    if let Some((gpu, mig, "")) = mig {
        return Some(DeviceId::MigIndex {
            gpu: gpu?,
            mig: mig?,
        });
    }
    if let Some(bus) = short_pci_bus_id(item) {
        return Some(DeviceId::Bus(bus));
    }
    let (gpu, mig, _) = mig?;
    Some(DeviceId::MigIndex {
        gpu: gpu?,
        mig: mig?,
    })
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
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

/// What C's `isspace` skips before a number in `strtoul` and `scanf`.
fn skip_c_space(s: &str) -> &str {
    s.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r'])
}

/// A decimal number as `strtoul` reads it: blanks, a sign, digits. The value
/// is `None` when no index can be it: a negative number other than zero
/// (strtoul wraps it past any index) or one past `u32`. `None` overall when
/// there are no digits.
fn scan_unsigned(s: &str) -> Option<(Option<u32>, &str)> {
    let s = skip_c_space(s);
    let (negative, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let end = s
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(s.len());
    if end == 0 {
        return None;
    }
    let digits = s[..end].trim_start_matches('0');
    let value = if digits.is_empty() {
        Some(0)
    } else if negative {
        None
    } else {
        digits.parse::<u32>().ok()
    };
    Some((value, &s[end..]))
}

/// At most `max` hex digits after blanks, as scanf's `%x` with that width.
fn scan_hex(s: &str, max: usize) -> Option<(u32, &str)> {
    let s = skip_c_space(s);
    let end = s
        .bytes()
        .take(max)
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(s.len().min(max));
    if end == 0 {
        return None;
    }
    let digits = s[..end].trim_start_matches('0');
    let value = if digits.is_empty() {
        0
    } else if digits.len() > 8 {
        return None;
    } else {
        u32::from_str_radix(digits, 16).ok()?
    };
    Some((value, &s[end..]))
}

/// NVIDIA's PCI form, `sscanf("%x:%02x:%02x.0") == 3` (COM:12-24): domain,
/// bus and device are read and the rest, function included, is ignored.
fn pci_bus_id(item: &str) -> Option<String> {
    let (domain, rest) = scan_hex(item, usize::MAX)?;
    let (bus, rest) = scan_hex(rest.strip_prefix(':')?, 2)?;
    let (device, _) = scan_hex(rest.strip_prefix(':')?, 2)?;
    Some(format!("{domain:04x}:{bus:02x}:{device:02x}.0"))
}

/// Our short PCI form `bb:dd.f`, as `lspci` prints it; NVIDIA refuses it.
fn short_pci_bus_id(item: &str) -> Option<String> {
    let (rest, function) = item.rsplit_once('.')?;
    let (bus, device) = rest.split_once(':')?;
    let hex = |s: &str, max: usize| {
        !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_hexdigit())
    };
    if !(hex(bus, 2) && hex(device, 2) && hex(function, 1)) {
        return None;
    }
    let bus = u8::from_str_radix(bus, 16).ok()?;
    let device = u8::from_str_radix(device, 16).ok()?;
    Some(format!("0000:{bus:02x}:{device:02x}.0"))
}

/// Normalises a PCI bus id to `dddd:bb:dd.f` in lower case, or `None` if it
/// is not one. For the host's own ids, where the function is kept.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(value: &str) -> Result<DeviceSelection> {
        DeviceSelection::parse(Some(value))
    }

    fn list(value: &str) -> Vec<DeviceId> {
        match parse(value) {
            Ok(DeviceSelection::List(ids)) => ids,
            other => panic!("{value:?}: {other:?}"),
        }
    }

    const UUID: &str = "abcdef01-2345-6789-abcd-ef0123456789";

    #[test]
    fn device_keywords() {
        // IMGT2:230-251: unset, empty and void are no request; none is one.
        assert_eq!(DeviceSelection::parse(None), Ok(DeviceSelection::Void));
        assert_eq!(parse(""), Ok(DeviceSelection::Void));
        assert_eq!(parse("void"), Ok(DeviceSelection::Void));
        assert_eq!(parse("none"), Ok(DeviceSelection::None));
        assert_eq!(parse(" all "), Ok(DeviceSelection::All));
    }

    #[test]
    fn our_cdi_kinds_names_are_the_devices_they_name() {
        assert_eq!(parse("nvidia.com/gpu=all"), Ok(DeviceSelection::All));
        assert_eq!(
            list("nvidia.com/gpu=1, 0"),
            [DeviceId::Index(1), DeviceId::Index(0)]
        );
        assert_eq!(
            list(&format!("nvidia.com/gpu=GPU-{UUID},nvidia.com/gpu=0:1")),
            [
                DeviceId::Uuid(format!("GPU-{UUID}")),
                DeviceId::MigIndex { gpu: 0, mig: 1 }
            ]
        );
        assert_eq!(
            DeviceSelection::from_cli(&["nvidia.com/gpu=1".into(), "nvidia.com/gpu=ALL".into()]),
            Ok(DeviceSelection::All)
        );
        // NVIDIA's jit-cdi kind (1.18+) names this host's devices too.
        assert_eq!(
            parse("runtime.nvidia.com/gpu=all"),
            Ok(DeviceSelection::All)
        );
        assert_eq!(
            list(&format!(
                "runtime.nvidia.com/gpu=1,runtime.nvidia.com/gpu=GPU-{UUID}"
            )),
            [DeviceId::Index(1), DeviceId::Uuid(format!("GPU-{UUID}"))]
        );
        // Another kind names no device of ours.
        assert!(matches!(
            parse("example.com/gpu=1"),
            Err(Error::MalformedDevices { .. })
        ));
    }

    #[test]
    fn empty_items_are_dropped_and_no_item_is_no_request() {
        // IMG:157-161 drops empty items; IMG:174-176 makes an itemless list void.
        assert_eq!(list("0,,1"), [DeviceId::Index(0), DeviceId::Index(1)]);
        assert_eq!(list("0,"), [DeviceId::Index(0)]);
        assert_eq!(list(",0"), [DeviceId::Index(0)]);
        assert_eq!(list(" 0 , 1 "), [DeviceId::Index(0), DeviceId::Index(1)]);
        for value in [",", " , ", " ", ",,", "\t"] {
            assert_eq!(parse(value), Ok(DeviceSelection::Void), "{value:?}");
        }
    }

    #[test]
    fn keywords_mixed_with_items_collapse_void_over_none_over_all() {
        // DEV:35-63: an exact keyword anywhere wins, void > none > all, and
        // the other items are never judged.
        for (value, want) in [
            ("all,0", DeviceSelection::All),
            ("0,all", DeviceSelection::All),
            ("foo,all", DeviceSelection::All),
            ("0,none", DeviceSelection::None),
            ("none,GPU-x", DeviceSelection::None),
            ("all,none", DeviceSelection::None),
            ("0,void", DeviceSelection::Void),
            ("void,all", DeviceSelection::Void),
            ("junk!,none,void", DeviceSelection::Void),
        ] {
            assert_eq!(parse(value), Ok(want), "{value}");
        }
    }

    #[test]
    fn all_in_any_case_selects_everything_from_where_it_stands() {
        // The hook's keywords are case-sensitive (DEV:44-49), but the CLI
        // takes `all` in any case and stops reading there (COM:296-301): an
        // item before it must be valid, one after it is never read.
        for value in ["ALL", "All", "aLL", "0,ALL", "ALL,foo", "1,All,junk!"] {
            assert_eq!(parse(value), Ok(DeviceSelection::All), "{value}");
        }
        let err = parse("foo,ALL").unwrap_err();
        assert!(
            matches!(&err, Error::MalformedDevices { item, .. } if item == "foo"),
            "{err}"
        );
    }

    #[test]
    fn none_and_void_in_upper_case_are_refused_with_a_hint() {
        // DEV:44-49 passes them to the CLI, which refuses them (COM:321).
        for value in ["NONE", "Void", "0,VOID"] {
            let err = parse(value).unwrap_err().to_string();
            assert!(err.contains("lower case"), "{value}: {err}");
        }
    }

    #[test]
    fn gpu_and_mig_uuid_prefixes_in_any_case() {
        // COM:173-182 and COM:231-243 compare prefix and UUID case-insensitively.
        let upper = UUID.to_ascii_uppercase();
        for item in [
            format!("GPU-{UUID}"),
            format!("gpu-{UUID}"),
            format!("Gpu-{upper}"),
        ] {
            assert_eq!(
                list(&item),
                [DeviceId::Uuid(format!("GPU-{UUID}"))],
                "{item}"
            );
        }
        for item in [format!("MIG-{UUID}"), format!("mig-{upper}")] {
            assert_eq!(
                list(&item),
                [DeviceId::Mig(format!("MIG-{UUID}"))],
                "{item}"
            );
        }
        assert_eq!(
            list(&format!("mig-gpu-{upper}/1/0")),
            [DeviceId::Mig(format!("MIG-GPU-{UUID}/1/0"))]
        );
    }

    #[test]
    fn pci_bus_ids_as_nvidia_scans_them() {
        // COM:12-24: sscanf("%x:%02x:%02x.0") must fill three fields; the
        // domain may be short, and whatever follows the device (the function
        // included) is ignored.
        for item in [
            "0000:3b:00.0",
            "0:3b:00.0",
            "00000000:3B:00.0",
            "0000:3b:0.0",
            "0000:3b:00.1",
            "0000:3b:00",
            "0000:3b:00.0junk",
            "0: 3b: 00",
        ] {
            assert_eq!(list(item), [DeviceId::Bus("0000:3b:00.0".into())], "{item}");
        }
        // Three numbers are a PCI id before they are a MIG position.
        assert_eq!(list("0:1:2"), [DeviceId::Bus("0000:01:02.0".into())]);
        assert_eq!(list("1:0:0"), [DeviceId::Bus("0001:00:00.0".into())]);
    }

    #[test]
    fn short_pci_bus_ids_are_ours_alone() {
        // NVIDIA refuses `3b:00.0` (two sscanf fields, COM:16-19); we take
        // lspci's form, which wins over a MIG position followed by `.f`.
        assert_eq!(list("3b:00.0"), [DeviceId::Bus("0000:3b:00.0".into())]);
        assert_eq!(list("3B:1f.7"), [DeviceId::Bus("0000:3b:1f.0".into())]);
        assert_eq!(list("10:00.0"), [DeviceId::Bus("0000:10:00.0".into())]);
    }

    #[test]
    fn indices_as_strtoumax_reads_them() {
        // COM:196-200: strtoumax over the whole item, so a sign is taken.
        assert_eq!(list("1"), [DeviceId::Index(1)]);
        assert_eq!(list("01"), [DeviceId::Index(1)]);
        assert_eq!(list("+1"), [DeviceId::Index(1)]);
        assert_eq!(list("-0"), [DeviceId::Index(0)]);
        assert_eq!(list("4294967295"), [DeviceId::Index(u32::MAX)]);
    }

    #[test]
    fn mig_positions_as_sscanf_reads_them() {
        // COM:247-255: sscanf("%lu:%lu") == 2, anything after ignored.
        let pos = |gpu, mig| DeviceId::MigIndex { gpu, mig };
        assert_eq!(list("0:1"), [pos(0, 1)]);
        assert_eq!(list("0:1junk"), [pos(0, 1)]);
        assert_eq!(list("+2: 3"), [pos(2, 3)]);
        assert_eq!(list("0000:3bb:00.0"), [pos(0, 3)]);
    }

    #[test]
    fn device_list_dedupes_and_normalises() {
        let ids = list(&format!(
            "1, 0,1,GPU-{},3b:00.0,0000:3B:00.0,+1",
            UUID.to_ascii_uppercase()
        ));
        assert_eq!(
            ids,
            [
                DeviceId::Index(1),
                DeviceId::Index(0),
                DeviceId::Uuid(format!("GPU-{UUID}")),
                DeviceId::Bus("0000:3b:00.0".into()),
            ]
        );
    }

    #[test]
    fn mig_devices_by_uuid_and_position() {
        let ids = list(
            "MIG-AB5E4C9D-1234-5678-9ABC-DEF012345678, 0:1,MIG-GPU-abcdef01-2345-6789-abcd-ef0123456789/1/0, 0:1",
        );
        assert_eq!(
            ids,
            [
                DeviceId::Mig("MIG-ab5e4c9d-1234-5678-9abc-def012345678".into()),
                DeviceId::MigIndex { gpu: 0, mig: 1 },
                DeviceId::Mig("MIG-GPU-abcdef01-2345-6789-abcd-ef0123456789/1/0".into()),
            ]
        );
        assert!(DeviceId::MigIndex { gpu: 0, mig: 1 }.is_mig());
        assert!(!DeviceId::Index(0).is_mig());
    }

    #[test]
    fn older_mig_names_need_no_nvml() {
        let old = DeviceId::Mig("MIG-GPU-b1028956-cfa2-0990-bf4a-5da9abb51763/3/0".into());
        assert!(old.is_mig());
        assert!(!old.needs_nvml());
        assert_eq!(
            old.instance(),
            Some(("GPU-b1028956-cfa2-0990-bf4a-5da9abb51763".into(), 3, 0))
        );
        assert!(DeviceId::Mig("MIG-b1028956-cfa2-0990-bf4a-5da9abb51763".into()).needs_nvml());
        assert!(DeviceId::MigIndex { gpu: 0, mig: 1 }.needs_nvml());
        assert!(!DeviceId::Index(0).needs_nvml());
        assert_eq!(DeviceId::MigIndex { gpu: 2, mig: 3 }.to_string(), "2:3");
    }

    #[test]
    fn items_that_can_name_no_device_are_refused() {
        // What NVIDIA's CLI answers with `<item>: unknown device` whatever
        // the host holds (COM:321): no form matches, a partial UUID can
        // equal no real one (COM:175-176), a negative or huge number wraps
        // or saturates past any index (COM:196-197).
        for junk in [
            "gpu0",
            "GPU-123",
            &format!("GPU-{UUID}0"),
            "-1",
            "99999999999999999999",
            "3b:00",
            "0;1",
            "MIG-123",
            "MIG-GPU-abc/1/0",
            "0:",
            ":1",
            "-1:0",
            "MIG-GPU-abcdef01-2345-6789-abcd-ef0123456789/1",
            "example.com/gpu=0",
            "junk!",
        ] {
            let err = parse(junk).unwrap_err();
            assert!(
                matches!(&err, Error::MalformedDevices { item, .. } if item == junk),
                "{junk}: {err}"
            );
            assert!(!err.to_string().contains('\n'));
        }
    }

    #[test]
    fn written_ids_parse_back_to_themselves() {
        for value in [
            "0:1:2",
            "0000:3b:00.7",
            "-0",
            "mig-gpu-ABCDEF01-2345-6789-abcd-ef0123456789/2/1",
        ] {
            let ids = list(value);
            let written: Vec<String> = ids.iter().map(ToString::to_string).collect();
            assert_eq!(list(&written.join(",")), ids, "{value}");
        }
    }

    #[test]
    fn mount_names_reach_the_cli_without_the_hooks_keywords() {
        // IMG:265-271: mount names skip NewVisibleDevices, so only the CLI's
        // `all` (any case, COM:296-301) is a keyword; none and void are
        // unknown devices (COM:321).
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            DeviceSelection::from_mounts(&names(&["1", "0,0"])),
            Ok(DeviceSelection::List(vec![
                DeviceId::Index(1),
                DeviceId::Index(0)
            ]))
        );
        // A name of separators alone selects nothing, as the CLI given `--device=,`.
        assert_eq!(
            DeviceSelection::from_mounts(&names(&[","])),
            Ok(DeviceSelection::None)
        );
        assert_eq!(
            DeviceSelection::from_mounts(&names(&["ALL", "junk!"])),
            Ok(DeviceSelection::All)
        );
        assert_eq!(
            DeviceSelection::from_mounts(&names(&["0", "all"])),
            Ok(DeviceSelection::All)
        );
        for bad in [&["none"][..], &["void"], &["junk!", "all"], &["GPU0"]] {
            assert!(
                matches!(
                    DeviceSelection::from_mounts(&names(bad)),
                    Err(Error::MalformedDevices { .. })
                ),
                "{bad:?}"
            );
        }
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

    #[test]
    fn cli_device_options_are_joined_and_read_as_nvidias_cli_reads_them() {
        let values = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            DeviceSelection::from_cli(&values(&[])),
            Ok(DeviceSelection::None)
        );
        assert_eq!(
            DeviceSelection::from_cli(&values(&["1,3"])),
            Ok(DeviceSelection::List(vec![
                DeviceId::Index(1),
                DeviceId::Index(3)
            ]))
        );
        assert_eq!(
            DeviceSelection::from_cli(&values(&["0", "all", "junk!"])),
            Ok(DeviceSelection::All)
        );
        assert!(DeviceSelection::from_cli(&values(&["none"])).is_err());
    }
}

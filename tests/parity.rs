//! Parity with NVIDIA's toolkit: a container that starts under NVIDIA's
//! hook with some GPUs and capabilities starts here with the same ones, and
//! one NVIDIA refuses is refused here. Each row is a container's request
//! (environment, device mounts, privilege, host config) and NVIDIA's outcome,
//! with the NVIDIA source it comes from (`docs/differences-from-nvidia.md` has
//! the keys: IMG is `internal/config/image/cuda_image.go`, COM libnvidia-
//! container's `src/cli/common.c`, DSL its `dsl.c`, and so on). Rows where we
//! deliberately differ carry our outcome and the reason; the "Differences
//! on purpose" table of docs/differences-from-nvidia.md lists them, and none
//! refuses an image that NVIDIA starts.
//!
//! Every row runs through the one planner (`planner::plan`) against a
//! simulated host's real files: no runtime. `tests/parity_runtime.rs` runs a
//! sample of them through runc.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use harness::simhost::{Fixture, SimHost};
use oci_nvidia_hook::config::Config;
use oci_nvidia_hook::planning::bundle::Container;
use oci_nvidia_hook::planning::image::ImageLayout;
use oci_nvidia_hook::planning::planner::{self, ImageSource, Inputs, Source};
use oci_nvidia_hook::planning::request::Capabilities;

/// The simulated host a row runs on.
#[derive(Debug, Clone, Copy)]
enum Host {
    /// Four whole GPUs, driver 535 (CUDA 12.2).
    Plain,
    /// Four GPUs, 0 and 1 in MIG mode with two MIG devices each, and a mock NVML.
    Mig,
}

/// The host config's policy keys a row sets.
#[derive(Debug, Clone, Copy)]
enum Policy {
    /// The defaults: env accepted from unprivileged containers, no volume mounts.
    Default,
    /// `accept-volume-mounts = true`.
    VolumeMounts,
    /// `accept-env-when-unprivileged = false`.
    NoUnprivilegedEnv,
    /// Both volume mounts off and unprivileged env off.
    VolumeMountsNoUnprivilegedEnv,
    /// `supported-capabilities = "…"`.
    Supported(&'static str),
}

/// What a container gets: NVIDIA's outcome, or ours where we differ.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// Not a GPU container: started untouched.
    NotGpu,
    /// Refused; our one-line message contains this.
    Refused(&'static str),
    /// Started with these GPUs (indices, `all`, or empty), these MIG devices
    /// (`<gpu>:<mig>` of the simulated host, `all`, or empty), and these
    /// capabilities (as NVIDIA's flags; compared with our implications applied).
    Gets {
        gpus: &'static str,
        migs: &'static str,
        caps: &'static str,
    },
}

/// One row.
#[derive(Debug, Clone, Copy)]
struct Case {
    name: &'static str,
    env: &'static [&'static str],
    privileged: bool,
    mounts: &'static [&'static str],
    policy: Policy,
    host: Host,
    nvidia: Outcome,
    /// Where we deliberately differ: our outcome, and why.
    ours: Option<(Outcome, &'static str)>,
    source: &'static str,
}

const BASE: Case = Case {
    name: "",
    env: &[],
    privileged: false,
    mounts: &[],
    policy: Policy::Default,
    host: Host::Plain,
    nvidia: Outcome::NotGpu,
    ours: None,
    source: "",
};

const DEFAULT_CAPS: &str = "compute,utility";
const ALL_CAPS: &str = "compat32,compute,display,graphics,ngx,utility,video";

const fn gets(gpus: &'static str, caps: &'static str) -> Outcome {
    Outcome::Gets {
        gpus,
        migs: "",
        caps,
    }
}

/// Device lists: `NVIDIA_VISIBLE_DEVICES` and legacy images.
#[rustfmt::skip]
const DEVICES: &[Case] = &[
    Case { name: "unset", nvidia: Outcome::NotGpu, source: "IMGT2:230-232; CCT:21-32", ..BASE },
    Case { name: "empty", env: &["NVIDIA_VISIBLE_DEVICES="], nvidia: Outcome::NotGpu, source: "IMGT2:233-238; CCT:58-65", ..BASE },
    Case { name: "void", env: &["NVIDIA_VISIBLE_DEVICES=void"], nvidia: Outcome::NotGpu, source: "IMGT2:239-244; CCT:66-73", ..BASE },
    Case { name: "none", env: &["NVIDIA_VISIBLE_DEVICES=none"], nvidia: gets("", DEFAULT_CAPS), source: "IMGT2:245-251; CCT:74-86; MAIN:125-127", ..BASE },
    Case { name: "all", env: &["NVIDIA_VISIBLE_DEVICES=all"], nvidia: gets("all", DEFAULT_CAPS), source: "CCT:321-333; COM:296-301", ..BASE },
    Case { name: "empty items dropped", env: &["NVIDIA_VISIBLE_DEVICES=0,,1"], nvidia: gets("0,1", DEFAULT_CAPS), source: "IMG:157-161; COM:292-293", ..BASE },
    Case { name: "trailing comma", env: &["NVIDIA_VISIBLE_DEVICES=0,"], nvidia: gets("0", DEFAULT_CAPS), source: "IMG:157-161", ..BASE },
    Case { name: "separators only", env: &["NVIDIA_VISIBLE_DEVICES= , "], nvidia: Outcome::NotGpu, source: "IMG:157-161, 174-176", ..BASE },
    Case { name: "items trimmed", env: &["NVIDIA_VISIBLE_DEVICES= 0 , 1 "], nvidia: gets("0,1", DEFAULT_CAPS), source: "IMG:158", ..BASE },
    Case { name: "ALL in capitals", env: &["NVIDIA_VISIBLE_DEVICES=ALL"], nvidia: gets("all", DEFAULT_CAPS), source: "DEV:44-49; COM:296-301", ..BASE },
    Case { name: "NONE in capitals", env: &["NVIDIA_VISIBLE_DEVICES=NONE"], nvidia: Outcome::Refused("NONE"), source: "DEV:44-49; COM:321, 328", ..BASE },
    Case { name: "all mixed in", env: &["NVIDIA_VISIBLE_DEVICES=all,0"], nvidia: gets("all", DEFAULT_CAPS), source: "DEV:48-49, 58-59", ..BASE },
    Case { name: "all after an unknown item", env: &["NVIDIA_VISIBLE_DEVICES=foo,all"], nvidia: gets("all", DEFAULT_CAPS), source: "DEV:48-49, 58-59", ..BASE },
    Case { name: "none mixed in", env: &["NVIDIA_VISIBLE_DEVICES=0,none"], nvidia: gets("", DEFAULT_CAPS), source: "DEV:46-47, 56-57", ..BASE },
    Case { name: "void mixed in", env: &["NVIDIA_VISIBLE_DEVICES=0,void"], nvidia: Outcome::NotGpu, source: "IMG:174-176; DEV:44-45, 54-55", ..BASE },
    Case { name: "none beats all", env: &["NVIDIA_VISIBLE_DEVICES=all,none"], nvidia: gets("", DEFAULT_CAPS), source: "DEV:39, 53-60", ..BASE },
    Case { name: "ALL first stops the walk", env: &["NVIDIA_VISIBLE_DEVICES=ALL,foo"], nvidia: gets("all", DEFAULT_CAPS), source: "COM:290-301", ..BASE },
    Case { name: "an unknown item before ALL", env: &["NVIDIA_VISIBLE_DEVICES=foo,ALL"], nvidia: Outcome::Refused("foo"), source: "COM:290-301, 321", ..BASE },
    Case { name: "lower-case gpu- prefix", env: &["NVIDIA_VISIBLE_DEVICES={uuid1-lower}"], nvidia: gets("1", DEFAULT_CAPS), source: "COM:173-177", ..BASE },
    Case { name: "UUID", env: &["NVIDIA_VISIBLE_DEVICES={uuid2}"], nvidia: gets("2", DEFAULT_CAPS), source: "COM:173-182", ..BASE },
    Case { name: "partial UUID", env: &["NVIDIA_VISIBLE_DEVICES=GPU-1234"], nvidia: Outcome::Refused("GPU-1234"), source: "COM:175-176, 321", ..BASE },
    Case { name: "PCI bus id", env: &["NVIDIA_VISIBLE_DEVICES={bus3}"], nvidia: gets("3", DEFAULT_CAPS), source: "COM:16-23, 186-191", ..BASE },
    Case { name: "PCI function ignored", env: &["NVIDIA_VISIBLE_DEVICES={bus3-fn1}"], nvidia: gets("3", DEFAULT_CAPS), source: "COM:16-22", ..BASE },
    Case { name: "short PCI bus id", env: &["NVIDIA_VISIBLE_DEVICES={bus3-short}"], nvidia: Outcome::Refused("unknown device"), ours: Some((gets("3", DEFAULT_CAPS), "accepted as lspci prints it: more than NVIDIA, never less")), source: "COM:16-19", ..BASE },
    Case { name: "signed index", env: &["NVIDIA_VISIBLE_DEVICES=+1"], nvidia: gets("1", DEFAULT_CAPS), source: "COM:196-197", ..BASE },
    Case { name: "negative index", env: &["NVIDIA_VISIBLE_DEVICES=-1"], nvidia: Outcome::Refused("-1"), source: "COM:196-197, 321", ..BASE },
    Case { name: "index past the last GPU", env: &["NVIDIA_VISIBLE_DEVICES=4"], nvidia: Outcome::Refused("4"), source: "COM:196-199, 321", ..BASE },
    Case { name: "duplicates once", env: &["NVIDIA_VISIBLE_DEVICES=0,{uuid0}"], nvidia: gets("0", DEFAULT_CAPS), source: "COM:59, 77", ..BASE },
    Case { name: "unknown item", env: &["NVIDIA_VISIBLE_DEVICES=foo"], nvidia: Outcome::Refused("foo"), source: "COM:321, 328", ..BASE },
    Case { name: "legacy image gets every GPU and capability", env: &["CUDA_VERSION=11.0.3"], nvidia: gets("all", ALL_CAPS), source: "IMGT2:267-273; CCT:33-44", ..BASE },
    Case { name: "modern image without the variable", env: &["CUDA_VERSION=12.2.0", "NVIDIA_REQUIRE_CUDA=cuda>=12.2"], nvidia: Outcome::NotGpu, source: "CCT:175-190", ..BASE },
    Case { name: "legacy image with an empty NVIDIA_REQUIRE_CUDA", env: &["CUDA_VERSION=11.0.3", "NVIDIA_REQUIRE_CUDA="], nvidia: gets("all", ALL_CAPS), source: "IMG:101-105", ..BASE },
];

/// Privilege, unprivileged requests and the device plugin's volume mounts.
#[rustfmt::skip]
const PRIVILEGE: &[Case] = &[
    Case { name: "mounts win over the variable", env: &["NVIDIA_VISIBLE_DEVICES=2,3"], mounts: &["0", "1"], policy: Policy::VolumeMounts, nvidia: gets("0,1", DEFAULT_CAPS), source: "IMGT2:519-536", ..BASE },
    Case { name: "unprivileged variable ignored", env: &["NVIDIA_VISIBLE_DEVICES=0,1"], policy: Policy::NoUnprivilegedEnv, nvidia: Outcome::NotGpu, source: "IMGT2:537-545; IMG:285-291", ..BASE },
    Case { name: "privileged variable honoured", env: &["NVIDIA_VISIBLE_DEVICES=0,1"], privileged: true, policy: Policy::NoUnprivilegedEnv, nvidia: gets("0,1", DEFAULT_CAPS), source: "IMGT2:546-554", ..BASE },
    Case { name: "mounts ignored unless accepted", env: &["NVIDIA_VISIBLE_DEVICES=2,3"], mounts: &["0", "1"], nvidia: gets("2,3", DEFAULT_CAPS), source: "IMGT2:564-581", ..BASE },
    Case { name: "both off, unprivileged", env: &["NVIDIA_VISIBLE_DEVICES=2,3"], mounts: &["0", "1"], policy: Policy::VolumeMountsNoUnprivilegedEnv, nvidia: Outcome::NotGpu, source: "IMGT2:582-599", ..BASE },
    Case { name: "a mount named all", mounts: &["all"], policy: Policy::VolumeMounts, nvidia: gets("all", DEFAULT_CAPS), source: "IMG:266-271; COM:296", ..BASE },
];

/// `NVIDIA_DRIVER_CAPABILITIES`.
#[rustfmt::skip]
const CAPABILITIES: &[Case] = &[
    Case { name: "legacy, set", env: &["CUDA_VERSION=11.0.3", "NVIDIA_DRIVER_CAPABILITIES=display,video"], nvidia: gets("all", "display,video"), source: "CCT:529-537", ..BASE },
    Case { name: "legacy, all", env: &["CUDA_VERSION=11.0.3", "NVIDIA_DRIVER_CAPABILITIES=all"], nvidia: gets("all", ALL_CAPS), source: "CCT:538-546", ..BASE },
    Case { name: "legacy, empty", env: &["CUDA_VERSION=11.0.3", "NVIDIA_DRIVER_CAPABILITIES="], nvidia: gets("all", DEFAULT_CAPS), source: "CCT:547-555", ..BASE },
    Case { name: "set", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=display,video"], nvidia: gets("0", "display,video"), source: "CCT:563-571", ..BASE },
    Case { name: "unset", env: &["NVIDIA_VISIBLE_DEVICES=0"], nvidia: gets("0", DEFAULT_CAPS), source: "CCT:572-578", ..BASE },
    Case { name: "all", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"], nvidia: gets("0", ALL_CAPS), source: "CCT:579-587", ..BASE },
    Case { name: "empty", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES="], nvidia: gets("0", DEFAULT_CAPS), source: "CCT:588-596", ..BASE },
    Case { name: "unknown name", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,foo"], nvidia: Outcome::Refused("foo"), source: "CC:167-171", ..BASE },
    Case { name: "ALL in capitals", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=ALL"], nvidia: Outcome::Refused("ALL"), source: "CAPS:109-111; CC:169-170", ..BASE },
    Case { name: "all after an unknown name", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=foo,all"], nvidia: gets("0", ALL_CAPS), source: "CAPS:115-121; CC:169", ..BASE },
    Case { name: "none is no capability name", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=none"], nvidia: Outcome::Refused("none"), source: "CAPS:47; CC:169-170", ..BASE },
    Case { name: "separators only", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=,"], nvidia: gets("0", ""), source: "CC:165-172; MAIN:138-141", ..BASE },
    Case { name: "items trimmed", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES= compute , utility "], nvidia: gets("0", DEFAULT_CAPS), source: "CAPS:54-59", ..BASE },
    Case { name: "a capability the host does not offer", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"], policy: Policy::Supported("compute"), nvidia: Outcome::Refused("unsupported capabilities"), ours: Some((gets("0", "compute"), "dropped with a warning: the container starts with what the host offers")), source: "CCT:597-604; CC:169-171", ..BASE },
    Case { name: "default narrowed by the host", env: &["NVIDIA_VISIBLE_DEVICES=0"], policy: Policy::Supported("compute"), nvidia: gets("0", "compute"), source: "CCT:605-610", ..BASE },
    Case { name: "no GPU asked: capabilities never read", env: &["NVIDIA_DRIVER_CAPABILITIES=bogus"], nvidia: Outcome::NotGpu, source: "CC:180-184, 202", ..BASE },
];

/// `NVIDIA_REQUIRE_*`, legacy `CUDA_VERSION` and `NVIDIA_DISABLE_REQUIRE`, on a 535 host (CUDA 12.2).
#[rustfmt::skip]
const REQUIREMENTS: &[Case] = &[
    Case { name: "holds", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=11.6"], nvidia: gets("0", DEFAULT_CAPS), source: "IMGT1:89-93", ..BASE },
    Case { name: "unsatisfied", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"], nvidia: Outcome::Refused("cuda>=12.4"), source: "DSL:159-167; CFG:335-336", ..BASE },
    Case { name: "a later OR group is never read", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=11.6 foo=bar"], nvidia: gets("0", DEFAULT_CAPS), source: "DSL:156-157", ..BASE },
    Case { name: "a false AND term ends its group", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=99,foo=bar"], nvidia: Outcome::Refused("cuda>=99"), source: "DSL:153-154, 159-167", ..BASE },
    Case { name: "== is no operator", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda==12.2"], nvidia: Outcome::Refused("cuda==12.2"), source: "DSL:103-114", ..BASE },
    Case { name: "a lone ! reads as !=", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda!11.0"], nvidia: gets("0", DEFAULT_CAPS), source: "DSL:103-110", ..BASE },
    Case { name: "key in capitals", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=CUDA>=12.2"], nvidia: gets("0", DEFAULT_CAPS), source: "DSL:118", ..BASE },
    Case { name: "driver version", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_DRIVER=driver>=535"], nvidia: gets("0", DEFAULT_CAPS), source: "DSL:35-79", ..BASE },
    Case { name: "driver version unsatisfied", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_DRIVER=driver>=550"], nvidia: Outcome::Refused("driver>=550"), source: "DSL:35-79, 159-167", ..BASE },
    Case { name: "Jetpack rules ignored", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_JETPACK=csv-mounts=all"], nvidia: gets("0", DEFAULT_CAPS), source: "IMGT1:79-83", ..BASE },
    Case { name: "legacy implies cuda>=major.minor", env: &["CUDA_VERSION=12.4.1"], nvidia: Outcome::Refused("cuda>=12.4"), source: "IMGT1:99-103; IMG:101-105", ..BASE },
    Case { name: "legacy v prefix", env: &["CUDA_VERSION=v11.6"], nvidia: gets("all", ALL_CAPS), source: "IMGT1:30-35", ..BASE },
    Case { name: "legacy four components", env: &["CUDA_VERSION=9.0.116.50"], nvidia: Outcome::Refused("9.0.116.50"), source: "IMGT1:49-63; IMG:193-201", ..BASE },
    Case { name: "legacy non-numeric patch", env: &["CUDA_VERSION=9.0.bar"], nvidia: Outcome::Refused("9.0.bar"), source: "IMGT1:49-63; IMG:193-201", ..BASE },
    Case { name: "bad legacy version in a non-GPU container", env: &["CUDA_VERSION=9.0.bar", "NVIDIA_VISIBLE_DEVICES=void"], nvidia: Outcome::NotGpu, source: "CC:180-184; IMG:114-116", ..BASE },
    Case { name: "disabled by true", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=99", "NVIDIA_DISABLE_REQUIRE=true"], nvidia: gets("0", DEFAULT_CAPS), source: "IMGT1:109-113; IMG:141", ..BASE },
    Case { name: "disabled by True", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=99", "NVIDIA_DISABLE_REQUIRE=True"], nvidia: gets("0", DEFAULT_CAPS), source: "IMG:141; PB", ..BASE },
    Case { name: "yes does not disable", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=99", "NVIDIA_DISABLE_REQUIRE=yes"], nvidia: Outcome::Refused("cuda>=99"), source: "IMG:141-142; PB", ..BASE },
    Case { name: "disabled legacy adds no rule", env: &["CUDA_VERSION=12.4.1", "NVIDIA_DISABLE_REQUIRE=true"], nvidia: gets("all", ALL_CAPS), source: "IMGT1:114-118", ..BASE },
    Case { name: "a cuda rule in a utility container", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=utility", "NVIDIA_REQUIRE_CUDA=cuda>=11.0"], nvidia: gets("0", "utility"), source: "CFG:181-212 (the CUDA version comes from the driver, whatever the capabilities)", ..BASE },
    Case { name: "brand holds without a GPU", env: &["NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_REQUIRE_BRAND=brand=tesla"], nvidia: gets("", DEFAULT_CAPS), source: "CFG:203-223, 352-360", ..BASE },
];

/// MIG devices and the MIG management variables, on the MIG host.
#[rustfmt::skip]
const MIG: &[Case] = &[
    Case { name: "MIG config without a device request", env: &["NVIDIA_MIG_CONFIG_DEVICES=all"], host: Host::Mig, nvidia: Outcome::NotGpu, source: "CC:180-184", ..BASE },
    Case { name: "MIG config, unprivileged", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"], host: Host::Mig, nvidia: Outcome::Refused("NVIDIA_MIG_CONFIG_DEVICES"), source: "CCT:349-358; CC:190-192", ..BASE },
    Case { name: "MIG monitor, unprivileged", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_MONITOR_DEVICES=all"], host: Host::Mig, nvidia: Outcome::Refused("NVIDIA_MIG_MONITOR_DEVICES"), source: "CCT:374-383; CC:198-200", ..BASE },
    Case { name: "MIG config of a whole GPU, ALL: every instance of it", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=ALL"], privileged: true, host: Host::Mig, nvidia: Outcome::Gets { gpus: "0", migs: "0:0,0:1", caps: DEFAULT_CAPS }, source: "COM:349-363; MNT:680-709, 1059-1081", ..BASE },
    Case { name: "MIG config with a specific value", env: &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=0"], privileged: true, host: Host::Mig, nvidia: Outcome::Refused("NVIDIA_MIG_CONFIG_DEVICES"), source: "COM:376, 383", ..BASE },
    Case { name: "MIG config with a MIG device selected", env: &["NVIDIA_VISIBLE_DEVICES={mig0}", "NVIDIA_MIG_CONFIG_DEVICES=all"], privileged: true, host: Host::Mig, nvidia: Outcome::Refused("MIG"), source: "COM:354-357", ..BASE },
    Case { name: "a MIG device by lower-case UUID", env: &["NVIDIA_VISIBLE_DEVICES={mig1-lower}"], host: Host::Mig, nvidia: Outcome::Gets { gpus: "0", migs: "0:1", caps: DEFAULT_CAPS }, source: "COM:231-239, 266", ..BASE },
    Case { name: "a MIG device by position", env: &["NVIDIA_VISIBLE_DEVICES=1:0"], host: Host::Mig, nvidia: Outcome::Gets { gpus: "1", migs: "1:0", caps: DEFAULT_CAPS }, source: "COM:247-255", ..BASE },
    Case { name: "all on a MIG host brings every MIG device", env: &["NVIDIA_VISIBLE_DEVICES=all"], host: Host::Mig, nvidia: Outcome::Gets { gpus: "all", migs: "all", caps: DEFAULT_CAPS }, source: "COM:126-133, 296-300; CFG:371-384; MNT:864-933", ..BASE },
];

/// The simulated hosts, built once.
struct Hosts {
    plain: SimHost,
    mig: SimHost,
}

impl Hosts {
    fn get(&self, host: Host) -> &SimHost {
        match host {
            Host::Plain => &self.plain,
            Host::Mig => &self.mig,
        }
    }
}

/// A row's text with the host's names put in: `{uuidN}`, `{uuidN-lower}`
/// (the whole UUID, prefix included, in lower case), `{busN}`,
/// `{busN-fn1}`, `{busN-short}`, `{migN}`, `{migN-lower}`.
fn expand(text: &str, sim: &SimHost) -> String {
    let mut out = text.to_string();
    for (n, gpu) in sim.facts.gpus.iter().enumerate() {
        let uuid = gpu.uuid.as_str();
        let bus = gpu.bus.as_str();
        out = out
            .replace(&format!("{{uuid{n}-lower}}"), &uuid.to_lowercase())
            .replace(&format!("{{uuid{n}}}"), uuid)
            .replace(
                &format!("{{bus{n}-fn1}}"),
                &format!("{}1", &bus[..bus.len() - 1]),
            )
            .replace(&format!("{{bus{n}-short}}"), &bus[5..])
            .replace(&format!("{{bus{n}}}"), bus);
    }
    for (n, mig) in sim.facts.mig.iter().enumerate() {
        let uuid = mig.uuid.as_str();
        out = out
            .replace(&format!("{{mig{n}-lower}}"), &uuid.to_lowercase())
            .replace(&format!("{{mig{n}}}"), uuid);
    }
    out
}

/// What the planner gives a row's container, in the table's terms.
fn outcome_of(case: &Case, hosts: &Hosts) -> String {
    let sim = hosts.get(case.host);
    let mut config = Config::load(Some(&sim.config)).expect("the simulated host's config");
    match case.policy {
        Policy::Default => {}
        Policy::VolumeMounts => config.accept_volume_mounts = true,
        Policy::NoUnprivilegedEnv => config.accept_env_when_unprivileged = false,
        Policy::VolumeMountsNoUnprivilegedEnv => {
            config.accept_volume_mounts = false;
            config.accept_env_when_unprivileged = false;
        }
        Policy::Supported(caps) => {
            config.supported_capabilities = Capabilities::parse(caps).expect("supported caps")
        }
    }
    let container = Container {
        rootfs: "/nonexistent".into(),
        env: case.env.iter().map(|e| expand(e, sim)).collect(),
        user_namespace: false,
        privileged: case.privileged,
        device_mounts: case.mounts.iter().map(|m| expand(m, sim)).collect(),
        imex_mounts: Vec::new(),
        devices: Vec::new(),
        systemd_scope: None,
    };
    let planned = match planner::plan(
        &config,
        Inputs::new(
            Source::Container(&container),
            ImageSource::Layout(ImageLayout::Debian),
        ),
    ) {
        Ok(planned) => planned,
        Err(e) => return format!("refused: {e}"),
    };
    if planned.effective.is_void() {
        return "not a GPU container".into();
    }
    let index_of_minor = |minor: &str| {
        sim.facts
            .gpus
            .iter()
            .find(|g| g.minor.to_string() == minor)
            .map(|g| g.index.to_string())
    };
    let nodes: BTreeSet<String> = planned
        .plan
        .devices
        .iter()
        .map(|d| d.path.display().to_string())
        .collect();
    let gpus: BTreeSet<String> = nodes
        .iter()
        .filter_map(|p| p.strip_prefix("/dev/nvidia"))
        .filter(|rest| rest.bytes().all(|b| b.is_ascii_digit()))
        .filter_map(index_of_minor)
        .collect();
    let migs: BTreeSet<String> = sim
        .facts
        .mig
        .iter()
        .filter(|m| {
            [m.gi_access_minor, m.ci_access_minor]
                .iter()
                .all(|minor| nodes.contains(&format!("/dev/nvidia-caps/nvidia-cap{minor}")))
        })
        .map(|m| format!("{}:{}", m.gpu, m.mig_index))
        .collect();
    format!(
        "gpus [{}] migs [{}] caps [{}]",
        gpus.into_iter().collect::<Vec<_>>().join(","),
        migs.into_iter().collect::<Vec<_>>().join(","),
        planned.effective.request.capabilities
    )
}

/// A row's expected outcome, in the same terms as [`outcome_of`].
fn expected(outcome: Outcome, sim: &SimHost) -> String {
    match outcome {
        Outcome::NotGpu => "not a GPU container".into(),
        Outcome::Refused(text) => format!("refused: …{text}…"),
        Outcome::Gets { gpus, migs, caps } => {
            let all_gpus: Vec<String> =
                sim.facts.gpus.iter().map(|g| g.index.to_string()).collect();
            let all_migs: Vec<String> = sim
                .facts
                .mig
                .iter()
                .map(|m| format!("{}:{}", m.gpu, m.mig_index))
                .collect();
            let gpus = if gpus == "all" {
                all_gpus.join(",")
            } else {
                gpus.to_string()
            };
            let mut migs: Vec<String> = if migs == "all" {
                all_migs
            } else {
                migs.split(',')
                    .filter(|m| !m.is_empty())
                    .map(str::to_string)
                    .collect()
            };
            migs.sort();
            let caps = if caps.is_empty() {
                String::new()
            } else {
                Capabilities::parse(caps)
                    .expect("expected caps")
                    .to_string()
            };
            format!("gpus [{gpus}] migs [{}] caps [{caps}]", migs.join(","))
        }
    }
}

fn matches(seen: &str, want: &str) -> bool {
    match want
        .strip_prefix("refused: …")
        .and_then(|w| w.strip_suffix('…'))
    {
        Some(text) => seen.starts_with("refused: ") && seen.contains(text),
        None => seen == want,
    }
}

/// Runs every row of `table`; reports all mismatches at once.
fn check(table: &[Case]) {
    harness::simhost::require_root();
    let hosts = Hosts {
        plain: SimHost::shared(Fixture::synthetic(4)),
        mig: SimHost::shared(Fixture::synthetic(4).mig()),
    };
    let mut wrong = Vec::new();
    for case in table {
        let sim = hosts.get(case.host);
        let (want, why) = match case.ours {
            Some((ours, why)) => {
                // A difference may accept more than NVIDIA, never refuse what it starts.
                assert!(
                    matches!(ours, Outcome::Refused(_))
                        <= matches!(case.nvidia, Outcome::Refused(_)),
                    "{}: a deliberate difference must not refuse what NVIDIA starts",
                    case.name
                );
                (ours, Some(why))
            }
            None => (case.nvidia, None),
        };
        let want = expected(want, sim);
        let seen = outcome_of(case, &hosts);
        if !matches(&seen, &want) {
            wrong.push(format!(
                "{} ({}){}:\n    want {want}\n    got  {seen}",
                case.name,
                case.source,
                why.map(|w| format!(" [we differ: {w}]"))
                    .unwrap_or_default()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} rows differ:\n{}",
        wrong.len(),
        table.len(),
        wrong.join("\n")
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn device_lists_select_what_nvidia_selects() {
    check(DEVICES);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn privilege_and_volume_mounts_decide_as_nvidia_does() {
    check(PRIVILEGE);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn capabilities_are_read_as_nvidia_reads_them() {
    check(CAPABILITIES);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn requirements_hold_and_fail_as_nvidia_judges_them() {
    check(REQUIREMENTS);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn mig_requests_get_what_nvidia_gives() {
    check(MIG);
}

/// An image rootfs shipping `compat/libcuda.so.<version>` (a real ELF
/// shared object: the host's libc, which the hook judges by its header only).
fn compat_image(version: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let compat = dir.path().join("usr/local/cuda/compat");
    fs::create_dir_all(&compat).expect("compat dir");
    fs::create_dir_all(dir.path().join("etc")).expect("etc");
    fs::write(dir.path().join("etc/debian_version"), "12\n").expect("debian_version");
    let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
        .expect("the host's libc.so.6");
    fs::copy(libc, compat.join(format!("libcuda.so.{version}"))).expect("copy libc");
    dir
}

/// Whether the plan puts the image's compat directory first for the loader.
fn compat_used(sim: &SimHost, image: &Path) -> bool {
    let config = Config::load(Some(&sim.config)).expect("config");
    let container = Container {
        rootfs: image.to_path_buf(),
        env: vec!["NVIDIA_VISIBLE_DEVICES=0".into()],
        user_namespace: false,
        privileged: false,
        device_mounts: Vec::new(),
        imex_mounts: Vec::new(),
        devices: Vec::new(),
        systemd_scope: None,
    };
    let planned = planner::plan(
        &config,
        Inputs::new(Source::Container(&container), ImageSource::Rootfs(image)),
    )
    .expect("plan");
    planned.plan.loader_dirs.first().map(|d| d.as_path())
        == Some(Path::new("/usr/local/cuda/compat"))
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn compat_libraries_are_used_only_from_a_newer_branch() {
    harness::simhost::require_root();
    let sim = SimHost::shared(Fixture::synthetic(4));
    // Host 535.261.03. NVIDIA keeps a compat library only when its major is
    // greater than the host's (CM:78-83): the host's own branch is ignored
    // even when newer (CM:79-82), an older one too (CM:75-83).
    for (version, used) in [
        ("550.54.15", true),
        ("535.300.01", false),
        ("525.85.12", false),
    ] {
        let image = compat_image(version);
        assert_eq!(
            compat_used(&sim, image.path()),
            used,
            "compat libcuda.so.{version} on 535"
        );
    }
}

/// Which device names the device plugin's `/dev/null` mounts give, read
/// from a bundle's `config.json` as the hook reads it, against NVIDIA's
/// mount-parsing table. `(mounts as (source, destination), NVIDIA's names,
/// ours where we differ and why, source)`.
#[allow(clippy::type_complexity)]
#[rustfmt::skip]
const DEVICE_MOUNTS: &[(&[(&str, &str)], &[&str], Option<(&[&str], &str)>, &str)] = &[
    (&[], &[], None, "IMGT2:444-448"),
    (&[("/dev/zero", "/var/run/nvidia-container-devices/GPU0")], &[], None, "IMGT2:449-458; IMG:363-367"),
    (&[("/dev/null", "/var/run/other/GPU0")], &[], None, "IMGT2:459-468; IMG:375-378"),
    (&[("/dev/null", "/var/run/nvidia-container-devices")], &[], None, "IMGT2:469-478; IMG:381-384"),
    (&[("/dev/null", "/var/run/nvidia-container-devices/GPU0"), ("/dev/null", "/var/run/nvidia-container-devices/GPU1")], &["GPU0", "GPU1"], None, "IMGT2:479-483"),
    (&[("/dev/null", "/var/run/nvidia-container-devices/GPU0-MIG0/0/1")], &["GPU0-MIG0/0/1"],
     Some((&[], "a name with `/` names no device either way: NVIDIA's CLI then refuses it as unknown, we ignore the mount")), "IMGT2:484-488; IMG:381"),
    (&[("/dev/null", "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu=all")], &[], None, "IMGT2:489-493"),
    (&[("/dev/null", "/var/run/nvidia-container-devices/imex/0")], &[], None, "IMGT2:494-498; IMG:340-341"),
];

#[test]
fn device_mounts_name_the_devices_nvidia_reads_from_them() {
    let mut wrong = Vec::new();
    for (mounts, nvidia, ours, source) in DEVICE_MOUNTS {
        let dir = tempfile::tempdir().expect("temp dir");
        let mounts: Vec<serde_json::Value> = mounts
            .iter()
            .map(|(source, destination)| {
                serde_json::json!({"source": source, "destination": destination, "type": "bind"})
            })
            .collect();
        let config = serde_json::json!({
            "ociVersion": "1.0.2",
            "root": {"path": "rootfs"},
            "process": {"cwd": "/", "args": ["sh"], "user": {"uid": 0, "gid": 0}},
            "mounts": mounts,
        });
        fs::write(dir.path().join("config.json"), config.to_string()).expect("config.json");
        let container = oci_nvidia_hook::planning::bundle::load(dir.path()).expect("bundle");
        let want: &[&str] = ours.map_or(*nvidia, |(ours, _)| ours);
        if container.device_mounts != want {
            wrong.push(format!(
                "{source}: want {want:?}, got {:?}",
                container.device_mounts
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

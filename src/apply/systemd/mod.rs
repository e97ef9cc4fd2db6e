//! Tells systemd about the device nodes the hook granted a container that
//! runs under the systemd cgroup driver, so that they survive `systemctl
//! daemon-reload`.
//!
//! Under that driver the container's cgroup is a transient scope unit of
//! systemd's, and systemd owns its device rules: a `daemon-reload`
//! regenerates them from the unit's `DeviceAllow` list and replaces the
//! scope's device program, dropping what the hook granted there (NVIDIA's
//! "Failed to initialize NVML: Unknown Error"). So the hook also adds the
//! nodes to the scope's `DeviceAllow`, at runtime (`SetUnitProperties`,
//! `runtime = true`), over D-Bus: systemd's private socket where it can
//! (root's, peer-to-peer), else the system bus. Nodes are named
//! `/dev/char/MAJOR:MINOR`, which systemd parses without looking the path
//! up (the node need not exist in the host's `/dev`).
//!
//! Only a scope whose name the container's cgroup path ends with is told:
//! its unit is the container's own, not a name `config.json` made up. A
//! scope lives as long as the container's processes, so what is added
//! goes with it, also when a later step of the hook fails and the runtime
//! removes the container.

#![forbid(unsafe_code)]

mod bus;
mod wire;

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bus::Bus;
pub use bus::Endpoint;
use wire::{Call, Value};

use crate::planning::plan::CgroupRule;
use crate::util::{bounded_read, deadline};

/// Why systemd was not told; every variant names what it acted on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The socket could not be connected to.
    #[error("cannot connect to {}: {source}", .socket.display())]
    Connect { socket: PathBuf, source: io::Error },
    /// The peer refused this process's credentials.
    #[error("{} refused authentication: {answer:?}", .socket.display())]
    Refused { socket: PathBuf, answer: String },
    /// Reading or writing the socket failed.
    #[error("{}: {source}", .socket.display())]
    Io { socket: PathBuf, source: io::Error },
    /// The peer hung up before it answered.
    #[error("{} closed the connection before answering", .socket.display())]
    Closed { socket: PathBuf },
    /// The peer did not answer within the bound.
    #[error("no answer on {} in time", .socket.display())]
    Timeout { socket: PathBuf },
    /// The peer sent something that is not D-Bus as we speak it.
    #[error("malformed D-Bus message: {0}")]
    Malformed(String),
    /// systemd answered the call with an error.
    #[error("systemd refused {method}: {name}: {message}")]
    Failed {
        method: String,
        name: String,
        message: String,
    },
    /// The container's cgroup file could not be read.
    #[error("cannot read {}: {source}", .path.display())]
    Read { path: PathBuf, source: io::Error },
    /// The container's process is in no cgroup named after the unit.
    #[error("process {pid} is not in {unit} (its cgroups: {cgroups:?}): not told")]
    NotInUnit {
        pid: u32,
        unit: String,
        cgroups: Vec<String>,
    },
    /// Neither socket answered.
    #[error("systemd's manager cannot be reached: {private}; {bus}")]
    Unreachable {
        private: Box<Error>,
        bus: Box<Error>,
    },
}

/// Result of telling systemd.
pub type Result<T> = std::result::Result<T, Error>;

/// How long systemd gets to answer (cut to what the hook's deadline leaves):
/// it answers at once, unless it is busy reloading itself.
const BOUND: Duration = Duration::from_secs(5);

/// What telling systemd did, for the log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Told {
    /// The scope.
    pub unit: String,
    /// How it was reached.
    pub endpoint: Endpoint,
    /// The `DeviceAllow` entries added.
    pub entries: Vec<(String, String)>,
}

/// Adds `rules` to the `DeviceAllow` of `unit`, the scope process `pid` runs
/// in (checked in `<proc>/<pid>/cgroup`), reaching systemd below `run`
/// (the host's `/run`).
pub fn allow(proc: &Path, run: &Path, pid: u32, unit: &str, rules: &[CgroupRule]) -> Result<Told> {
    in_unit(proc, pid, unit)?;
    let entries = device_allow(rules);
    let endpoint = call(
        run,
        &Call {
            destination: Some(MANAGER),
            path: MANAGER_PATH,
            interface: "org.freedesktop.systemd1.Manager",
            member: "SetUnitProperties",
            args: &[
                Value::Str(unit),
                Value::Bool(true),
                Value::PairLists(&[("DeviceAllow", entries.clone())]),
            ],
        },
    )?;
    Ok(Told {
        unit: unit.to_string(),
        endpoint,
        entries,
    })
}

/// Whether systemd's manager answers below `run`, and where: what doctor
/// asks before saying containers are protected.
pub fn reach(run: &Path) -> Result<Endpoint> {
    call(run, &PING)
}

/// A call systemd's manager answers and that changes nothing.
const PING: Call<'static> = Call {
    destination: Some(MANAGER),
    path: MANAGER_PATH,
    interface: "org.freedesktop.DBus.Peer",
    member: "Ping",
    args: &[],
};

/// systemd's bus name and manager object.
const MANAGER: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";

/// Makes `call` on the private socket, else on the system bus; where it went.
fn call(run: &Path, call: &Call<'_>) -> Result<Endpoint> {
    call_within(run, call, deadline::clip(BOUND))
}

/// [`call`], each socket given `bound` to answer.
fn call_within(run: &Path, call: &Call<'_>, bound: Duration) -> Result<Endpoint> {
    let mut tried = Vec::new();
    for endpoint in [Endpoint::Private, Endpoint::SystemBus] {
        let _waiting = deadline::waiting_on("systemd's answer on", &endpoint.socket(run));
        let result = Bus::connect(endpoint, run, bound).and_then(|mut bus| {
            bus.call(call)?;
            log::debug!("{}: {} answered", bus.socket().display(), call.member);
            Ok(())
        });
        match result {
            Ok(()) => return Ok(endpoint),
            // systemd itself refused: the other socket reaches the same systemd.
            Err(e @ Error::Failed { .. }) => return Err(e),
            Err(e) => tried.push(e),
        }
    }
    let bus = tried.pop().map(Box::new);
    let private = tried.pop().map(Box::new);
    match (private, bus) {
        (Some(private), Some(bus)) => Err(Error::Unreachable { private, bus }),
        _ => Err(Error::Malformed("no socket tried".into())),
    }
}

/// The `DeviceAllow` entries for `rules`: `/dev/char/MAJOR:MINOR` (or
/// `/dev/block/…`) and the access, each once.
fn device_allow(rules: &[CgroupRule]) -> Vec<(String, String)> {
    let mut entries: Vec<(String, String)> = Vec::new();
    for rule in rules {
        let class = if rule.kind == 'b' { "block" } else { "char" };
        let entry = (
            format!("/dev/{class}/{}:{}", rule.major, rule.minor),
            rule.access.to_string(),
        );
        if !entries.contains(&entry) {
            entries.push(entry);
        }
    }
    entries
}

/// Fails unless a cgroup of process `pid` is named `unit`: the last part
/// of its path in a line of `<proc>/<pid>/cgroup`.
fn in_unit(proc: &Path, pid: u32, unit: &str) -> Result<()> {
    let path = proc.join(pid.to_string()).join("cgroup");
    let text = bounded_read::read_text(&path).map_err(|source| Error::Read { path, source })?;
    let cgroups: Vec<String> = text
        .lines()
        .filter_map(|line| line.splitn(3, ':').nth(2))
        .map(str::to_string)
        .collect();
    if cgroups
        .iter()
        .any(|cgroup| cgroup.rsplit('/').next() == Some(unit))
    {
        return Ok(());
    }
    Err(Error::NotInUnit {
        pid,
        unit: unit.to_string(),
        cgroups,
    })
}

#[cfg(test)]
#[path = "systemd_tests.rs"]
mod tests;

//! Reads the OCI state a runtime passes a hook on stdin: bounded in size and
//! in time, so a broken or hostile runtime cannot make the hook hang or
//! exhaust memory.

use std::io::Read;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::Duration;

use super::{Error, Result};
use crate::util::bounded_read;
use crate::util::error_line::escape_controls;

/// Most bytes of state accepted; real states are a few hundred bytes.
pub const MAX_STATE: usize = 1024 * 1024;
/// Longest we wait for the runtime to finish writing the state.
pub const STATE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the hook needs from the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerState {
    /// The container id, for log lines.
    pub id: String,
    /// The container's init process, whose namespaces and cgroup we use.
    pub pid: u32,
    /// The bundle directory holding `config.json`.
    pub bundle: PathBuf,
}

/// Reads the state from `input`, within [`MAX_STATE`] bytes and [`STATE_TIMEOUT`].
pub fn read(input: impl Read + AsFd) -> Result<Vec<u8>> {
    // One policy with the entry point's deadline: this bound runs out first.
    let timeout = crate::util::deadline::clip(STATE_TIMEOUT);
    let _waiting = crate::util::deadline::waiting_for(|| "the OCI state on stdin".into());
    bounded_read::read_to_end(input, MAX_STATE, timeout).map_err(|e| match e {
        bounded_read::Error::Io(e) => Error::Stdin(e),
        bounded_read::Error::TooLarge { limit } => Error::StdinTooLarge { limit },
        bounded_read::Error::Timeout { timeout } => Error::StdinTimeout {
            millis: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        },
    })
}

/// Parses the state JSON; `pid` and `bundle` must be present.
pub fn parse(data: &[u8]) -> Result<ContainerState> {
    parse_pid(data, false)
}

/// [`parse`] for a hook run inside the container (`createContainer`),
/// where crun's state says pid 0 (none) in the container's pid namespace or
/// without one: 0 then stands for no pid.
pub fn parse_inside(data: &[u8]) -> Result<ContainerState> {
    parse_pid(data, true)
}

fn parse_pid(data: &[u8], any_pid: bool) -> Result<ContainerState> {
    if data.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::State(
            "stdin is empty: expected the OCI state JSON".into(),
        ));
    }
    let state: oci_spec::runtime::State = serde_json::from_slice(data).map_err(|e| {
        Error::State(format!(
            "not valid OCI state JSON: {}",
            escape_controls(&e.to_string())
        ))
    })?;
    let pid = match state.pid() {
        Some(pid) if *pid > 0 => *pid as u32,
        Some(0) | None if any_pid => 0,
        Some(pid) => return Err(Error::State(format!("invalid pid {pid}"))),
        None => {
            return Err(Error::State(
                "no pid in the state: is this hook run at prestart or createRuntime?".into(),
            ))
        }
    };
    if state.bundle().as_os_str().is_empty() {
        return Err(Error::State("no bundle in the state".into()));
    }
    Ok(ContainerState {
        id: state.id().clone(),
        pid,
        bundle: state.bundle().clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_runc_and_crun_states() {
        let runc = br#"{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":4242,"bundle":"/b","annotations":{"a":"b"}}"#;
        assert_eq!(
            parse(runc).unwrap(),
            ContainerState {
                id: "c1".into(),
                pid: 4242,
                bundle: "/b".into()
            }
        );
        // crun adds a non-standard root field.
        let crun = br#"{"ociVersion":"1.0.0","id":"c2","status":"created","pid":7,"bundle":"/b2","root":"/b2/rootfs"}"#;
        assert_eq!(parse(crun).unwrap().pid, 7);
    }

    #[test]
    fn refuses_bad_states_with_a_reason() {
        for (input, needle) in [
            (&b""[..], "empty"),
            (b"  \n", "empty"),
            (b"not json", "not valid"),
            (br#"{"id":"x","bundle":"/b""#, "not valid"),
            (br#"{"id":"x","bundle":"/b"}"#, "no pid"),
            (br#"{"id":"x","pid":0,"bundle":"/b"}"#, "invalid pid"),
            (br#"{"id":"x","pid":-3,"bundle":"/b"}"#, "invalid pid"),
            (br#"{"id":"x","pid":5}"#, "no bundle"),
            (br#"{"id":"x","pid":"5","bundle":"/b"}"#, "not valid"),
            // Found by fuzzing: serde echoes the bad value, control characters and all.
            (br#"{"status":"\n"}"#, "unknown variant `\\n`"),
            (br#"{"status":"\r"}"#, "unknown variant `\\r`"),
        ] {
            let err = parse(input).unwrap_err().to_string();
            assert!(err.contains(needle), "{input:?}: {err}");
        }
    }
}

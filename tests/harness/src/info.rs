//! `info --json`, typed as the suites read it: the inventory the binary
//! under test found on a simulated host, to compare with the host's
//! [`HostFacts`](crate::simhost::HostFacts). Only the fields a suite reads;
//! what it prints beside them is left unread.

use serde::Deserialize;

use crate::simhost::SimHost;

/// What `info --json` printed: the fields the suites compare, and the
/// whole text, for checks that a path appears nowhere in it.
#[derive(Debug, Clone, Deserialize)]
pub struct Info {
    /// The running driver's version.
    pub driver_version: String,
    /// libcuda's `cuDriverGetVersion` (12020), when it answered.
    pub cuda_driver_version: Option<u32>,
    /// The same as `major.minor` ("12.2").
    pub cuda_version: Option<String>,
    /// The GPUs, in index order.
    pub gpus: Vec<InfoGpu>,
    /// The device nodes, each with the state found.
    pub nodes: Vec<InfoNode>,
    /// The driver's libraries found.
    pub libraries: Vec<InfoLibrary>,
    /// The driver's binaries found.
    pub binaries: Vec<InfoFile>,
    /// The GSP firmware files found.
    pub firmware: Vec<InfoFile>,
    /// The JSON as printed.
    #[serde(skip)]
    pub text: String,
}

/// A GPU of the inventory.
#[derive(Debug, Clone, Deserialize)]
pub struct InfoGpu {
    /// NVML's index.
    pub index: u32,
    /// Its `/dev/nvidiaN` minor.
    pub minor: u32,
    /// Its PCI bus id.
    pub bus: String,
    /// `GPU-<uuid>`.
    pub uuid: String,
    /// Its product name.
    pub model: String,
}

/// A device node of the inventory.
#[derive(Debug, Clone, Deserialize)]
pub struct InfoNode {
    /// Its path in a container (`/dev/nvidia-uvm`).
    pub path: String,
    /// Its character major.
    pub major: u32,
    /// What checking it on the host found.
    pub state: InfoNodeState,
}

/// What checking a node found.
#[derive(Debug, Clone, Deserialize)]
pub struct InfoNodeState {
    /// `ok`, or what is wrong.
    pub state: String,
}

/// A library of the inventory.
#[derive(Debug, Clone, Deserialize)]
pub struct InfoLibrary {
    /// Its SONAME.
    pub soname: String,
    /// `x86_64` or `i386`.
    pub arch: String,
    /// The real file on the host.
    pub path: String,
}

/// A binary or firmware file of the inventory.
#[derive(Debug, Clone, Deserialize)]
pub struct InfoFile {
    /// The real file on the host.
    pub path: String,
}

impl SimHost {
    /// Runs `info --json` on this host, expecting success.
    pub fn info(&self) -> Info {
        let text = self.stdout(&["info", "--json"]);
        let mut info: Info = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("info --json is not the inventory: {e}\n{text}"));
        info.text = text;
        info
    }
}

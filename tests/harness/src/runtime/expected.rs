//! What a GPU container must get on a simulated host, from the host's own
//! description (`host.json`): its GPUs, the device nodes a request brings,
//! the versions libcuda must answer with, and where the template image
//! takes the libraries. Reads `host.json` only; judges nothing.

use crate::json::s;
use crate::simhost::SimHost;

use super::oci_config::NVIDIA_MAJOR;

/// The image's library directory: the template has /etc/debian_version.
pub const LIB_DIR: &str = "/usr/lib/x86_64-linux-gnu";

/// A GPU as `host.json` describes it.
#[derive(Debug, Clone)]
pub struct Gpu {
    /// Its index: PCI bus order, as NVML counts.
    pub index: u32,
    /// Its device minor: `/dev/nvidia<minor>`.
    pub minor: u32,
    /// `GPU-<uuid>`.
    pub uuid: String,
    /// Its PCI bus id.
    pub bus: String,
}

/// The host's GPUs, in index order.
pub fn gpus(host: &SimHost) -> Vec<Gpu> {
    host.host["gpus"]
        .as_array()
        .expect("host.json gpus")
        .iter()
        .map(|g| Gpu {
            index: g["index"].as_u64().unwrap() as u32,
            minor: g["minor"].as_u64().unwrap() as u32,
            uuid: g["uuid"].as_str().unwrap().to_string(),
            bus: g["bus"].as_str().unwrap().to_string(),
        })
        .collect()
}

/// The character major of `nvidia-uvm` on this host.
pub fn uvm_major(host: &SimHost) -> u32 {
    host.host["uvm_major"]
        .as_u64()
        .expect("host.json uvm_major") as u32
}

/// What the driver's libcuda answers to `cuDriverGetVersion` (12020).
pub fn cuda_version(host: &SimHost) -> i64 {
    host.host["cuda_version"]
        .as_i64()
        .expect("host.json cuda_version")
}

/// The driver's version, as in its libraries' file names.
pub fn driver_version(host: &SimHost) -> String {
    s(&host.host, "/driver_version").to_string()
}

/// A device node a container must get: its path and (major, minor).
pub type NodeSpec = (String, (u32, u32));

/// The nodes a request for the GPUs of `minors` brings: nvidiactl, the UVM
/// nodes (compute) and each GPU's `/dev/nvidia<minor>`.
pub fn node_specs(host: &SimHost, minors: &[u32]) -> Vec<NodeSpec> {
    let uvm = uvm_major(host);
    let mut nodes = vec![
        ("/dev/nvidiactl".to_string(), (NVIDIA_MAJOR, 255)),
        ("/dev/nvidia-uvm".to_string(), (uvm, 0)),
        ("/dev/nvidia-uvm-tools".to_string(), (uvm, 1)),
    ];
    for minor in minors {
        nodes.push((format!("/dev/nvidia{minor}"), (NVIDIA_MAJOR, *minor)));
    }
    nodes
}

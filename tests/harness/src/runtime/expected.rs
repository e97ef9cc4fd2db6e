//! What a GPU container must get on a simulated host, from the host's own
//! description (its [`HostFacts`](crate::simhost::HostFacts)): the device
//! nodes a request brings, and where the template image takes the
//! libraries. Reads the facts only; judges nothing.

use crate::simhost::SimHost;

use super::oci_config::NVIDIA_MAJOR;

/// The image's library directory: the template has /etc/debian_version.
pub const LIB_DIR: &str = "/usr/lib/x86_64-linux-gnu";

/// A device node a container must get: its path and (major, minor).
pub type NodeSpec = (String, (u32, u32));

/// The nodes a request for the GPUs of `minors` brings: nvidiactl, the UVM
/// nodes (compute) and each GPU's `/dev/nvidia<minor>`.
pub fn node_specs(host: &SimHost, minors: &[u32]) -> Vec<NodeSpec> {
    let uvm = host.facts.uvm_major;
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

//! The MIG-flavoured simulated host (`integration/simhost --mig`: GPUs 0
//! and 1 in MIG mode, answered by a mock NVML), for the suites that request
//! MIG devices. Builds fixtures only; the mock is never the product.

use super::simhost::SimHost;

impl SimHost {
    /// A MIG-flavoured synthetic host with `gpus` GPUs, shared by this binary's tests.
    pub fn shared_mig(gpus: u32) -> SimHost {
        SimHost::shared_named(&format!("shared-mig-{gpus}"), |name| {
            SimHost::fresh_with(name, "synthetic", gpus, "new", &["--mig"])
        })
    }
}

//! The MIG-flavoured simulated host (`integration/simhost --mig`: GPUs 0
//! and 1 in MIG mode, answered by a mock NVML), for the suites that request
//! MIG devices. Builds fixtures only; the mock is never the product.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use super::simhost::SimHost;

impl SimHost {
    /// A MIG-flavoured synthetic host with `gpus` GPUs, shared by this binary's tests.
    pub fn shared_mig(gpus: u32) -> SimHost {
        static BUILT: OnceLock<Mutex<HashMap<u32, SimHost>>> = OnceLock::new();
        let mut built = BUILT
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        built
            .entry(gpus)
            .or_insert_with(|| {
                SimHost::fresh_with(
                    &format!("shared-mig-{gpus}"),
                    "synthetic",
                    gpus,
                    "new",
                    &["--mig"],
                )
            })
            .clone()
    }
}

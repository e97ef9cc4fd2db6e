//! Simulated hosts whose running driver is a chosen branch
//! (`integration/simhost --driver 535|470`), for the suites that compare a
//! container's outcome across branches. Builds fixtures only.

use super::simhost::SimHost;

impl SimHost {
    /// A host of `flavour` with `gpus` GPUs whose running driver is branch
    /// `driver` (`"535"`, the default branch, or `"470"`: synthetic only),
    /// shared by this binary's tests.
    pub fn shared_driver(flavour: &str, gpus: u32, driver: &str) -> SimHost {
        let name = format!("shared-{flavour}-{gpus}-driver{driver}");
        SimHost::shared_named(&name, |name| {
            SimHost::fresh_with(name, flavour, gpus, "new", &["--driver", driver])
        })
    }
}

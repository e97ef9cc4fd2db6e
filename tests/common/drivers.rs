//! Simulated hosts whose running driver is a chosen branch
//! (`integration/simhost --driver 535|470`), for the suites that compare a
//! container's outcome across branches. Builds fixtures only.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use super::simhost::SimHost;

impl SimHost {
    /// A host of `flavour` with `gpus` GPUs whose running driver is branch
    /// `driver` (`"535"`, the default branch, or `"470"`: synthetic only),
    /// shared by this binary's tests.
    pub fn shared_driver(flavour: &str, gpus: u32, driver: &str) -> SimHost {
        static BUILT: OnceLock<Mutex<HashMap<String, SimHost>>> = OnceLock::new();
        let name = format!("shared-{flavour}-{gpus}-driver{driver}");
        let mut built = BUILT
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        built
            .entry(name.clone())
            .or_insert_with(|| {
                SimHost::fresh_with(&name, flavour, gpus, "new", &["--driver", driver])
            })
            .clone()
    }
}

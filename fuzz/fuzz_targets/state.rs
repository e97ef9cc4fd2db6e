//! Feeds arbitrary bytes to the OCI state parser, as a runtime (or whatever
//! holds the hook's stdin) could write them. Nothing may panic; every refusal
//! is one line; an accepted state has a positive pid and a bundle, and the
//! same fields written back as a minimal state parse to the same result.

#![no_main]

mod common;

use common::assert_one_line;
use libfuzzer_sys::fuzz_target;
use oci_nvidia_hook::apply::hook::parse_state;

fuzz_target!(|data: &[u8]| {
    let state = match parse_state(data) {
        Ok(state) => state,
        Err(e) => {
            assert_one_line(&e.to_string());
            return;
        }
    };
    assert!(state.pid > 0 && state.pid <= i32::MAX as u32, "{state:?}");
    assert!(!state.bundle.as_os_str().is_empty(), "{state:?}");
    let bundle = state.bundle.to_str().expect("a bundle from JSON is UTF-8");
    let again = serde_json::json!({
        "ociVersion": "1.0.2",
        "id": state.id,
        "status": "creating",
        "pid": state.pid,
        "bundle": bundle,
    });
    let again = parse_state(again.to_string().as_bytes())
        .unwrap_or_else(|e| panic!("{state:?} written back does not parse: {e}"));
    assert_eq!(again, state);
});

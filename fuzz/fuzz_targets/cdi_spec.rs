//! Feeds arbitrary text to `cdi validate`'s checks (YAML or JSON, ours or
//! another vendor's spec: the file is not ours to trust). Nothing may panic;
//! every problem is one line; a spec the checks accept is one our own
//! types read, and writes back as YAML and JSON that pass the same checks.

#![no_main]

mod common;

use common::assert_one_line;
use libfuzzer_sys::fuzz_target;
use oci_nvidia_hook::specs::cdi::validate;
use oci_nvidia_hook::specs::cdi::{Format, Spec};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let report = validate::check(&text);
    for problem in &report.problems {
        assert_one_line(&problem.to_string());
    }
    if !report.problems.is_empty() {
        return;
    }
    let spec: Spec = serde_yaml::from_str(&text).expect("an accepted spec reads as our type");
    for format in [Format::Yaml, Format::Json] {
        let encoded = format.encode(&spec).expect("an accepted spec encodes");
        let again = validate::check(&String::from_utf8_lossy(&encoded));
        assert!(again.problems.is_empty(), "{format}: {:?}", again.problems);
    }
});

//! Feeds arbitrary text to the configuration parser. Nothing may panic; every
//! refusal is one line naming the file, with a line and column inside the
//! text; an accepted file holds only absolute paths and a capability list
//! that parses.

#![no_main]

mod common;

use std::path::Path;

use common::assert_one_line;
use libfuzzer_sys::fuzz_target;
use oci_nvidia_hook::config::{Config, Error};
use oci_nvidia_hook::planning::request::Capabilities;

const PATH: &str = "/etc/oci-nvidia-hook/config.toml";

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let config = match Config::parse(Path::new(PATH), &text) {
        Ok(config) => config,
        Err(e) => {
            let message = e.to_string();
            assert_one_line(&message);
            assert!(message.contains(PATH), "{message}");
            if let Error::Parse { line, column, .. } = e {
                let lines = text.split('\n').count();
                assert!(line >= 1 && line <= lines, "line {line} of {lines}: {message}");
                let longest = text.split('\n').map(str::len).max().unwrap_or(0);
                assert!(column >= 1 && column <= longest + 1, "column {column}: {message}");
            }
            return;
        }
    };
    for root in [
        &config.driver.root,
        &config.driver.dev_root,
        &config.driver.proc_root,
    ] {
        assert!(root.is_absolute(), "{config:?}");
    }
    if let Some(file) = config.log.file() {
        assert!(file.is_absolute(), "{config:?}");
    }
    // The supported set, written back, reads as itself.
    assert_eq!(
        Capabilities::parse(&config.supported_capabilities.to_string()).as_ref(),
        Ok(&config.supported_capabilities),
        "{config:?}"
    );
    let _ = config.supported();
});

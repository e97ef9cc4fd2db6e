//! Feeds arbitrary bytes to the request grammar: as one
//! `NVIDIA_VISIBLE_DEVICES` value, as one `NVIDIA_DRIVER_CAPABILITIES` value,
//! as a container's environment (lossy UTF-8, one `KEY=VALUE` entry per NUL
//! byte) and as the names of volume-mount requests (one per NUL byte).
//! Nothing may panic; every refusal is one line. What parses is normalised:
//! a device list or capability set written back parses to itself, a list
//! holds no duplicates, and the implications (video brings compute, display
//! brings graphics) hold. A request that asks for no GPU is nothing at all,
//! whatever its other variables say.

#![no_main]

mod common;

use common::assert_one_line;
use libfuzzer_sys::fuzz_target;
use oci_nvidia_hook::planning::request::{env_var, Capabilities, Capability, DeviceSelection, Request};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    devices(&text);
    capabilities(&text);
    let env: Vec<String> = text.split('\0').map(str::to_owned).collect();
    request(&env);
    mounts(&env);
});

fn devices(value: &str) {
    let selection = match DeviceSelection::parse(Some(value)) {
        Ok(selection) => selection,
        Err(e) => {
            assert_one_line(&e.to_string());
            return;
        }
    };
    let DeviceSelection::List(ids) = selection else {
        return;
    };
    assert!(!ids.is_empty(), "{value:?}: an empty list");
    for (i, id) in ids.iter().enumerate() {
        assert!(!ids[..i].contains(id), "{value:?}: {id} twice");
        let written = id.to_string();
        assert_eq!(
            DeviceSelection::parse(Some(&written)),
            Ok(DeviceSelection::List(vec![id.clone()])),
            "{value:?}: {id:?} written as {written:?}"
        );
    }
    let written: Vec<String> = ids.iter().map(ToString::to_string).collect();
    let written = written.join(",");
    assert_eq!(
        DeviceSelection::parse(Some(&written)),
        Ok(DeviceSelection::List(ids.clone())),
        "{value:?} written as {written:?}"
    );
}

fn capabilities(value: &str) {
    let caps = match Capabilities::parse(value) {
        Ok(caps) => caps,
        Err(e) => {
            assert_one_line(&e.to_string());
            return;
        }
    };
    implications_hold(&caps);
    // The written form is the selected set, implications applied: it
    // selects the same, though it names what the original only implied.
    let written = caps.to_string();
    let reread = Capabilities::parse(&written).map(|c| c.iter().collect::<Vec<_>>());
    assert_eq!(
        reread,
        Ok(caps.iter().collect::<Vec<_>>()),
        "{value:?} written as {written:?}"
    );
    for capability in Capability::ALL {
        assert!(
            !caps.named(capability) || caps.contains(capability),
            "{value:?}: {capability} named but not selected"
        );
    }
}

fn request(env: &[String]) {
    let request = match Request::from_env(env) {
        Ok(request) => request,
        Err(e) => {
            assert_one_line(&e.to_string());
            return;
        }
    };
    implications_hold(&request.capabilities);
    if request.devices == DeviceSelection::Void {
        assert_eq!(request, Request::void(), "{env:?}");
        return;
    }
    if let Some(value) = env_var(env, "NVIDIA_VISIBLE_DEVICES") {
        assert_eq!(
            DeviceSelection::parse(Some(value)).as_ref(),
            Ok(&request.devices),
            "{env:?}"
        );
    }
    if let Some(value) = env_var(env, "NVIDIA_DRIVER_CAPABILITIES") {
        if !value.is_empty() {
            assert_eq!(
                Capabilities::parse(value).as_ref(),
                Ok(&request.capabilities),
                "{env:?}"
            );
        }
    }
}

fn mounts(names: &[String]) {
    match DeviceSelection::from_mounts(names) {
        Ok(DeviceSelection::Void) => panic!("{names:?}: mounts are a request"),
        Ok(DeviceSelection::List(ids)) => assert!(!ids.is_empty(), "{names:?}"),
        Ok(_) => {}
        Err(e) => assert_one_line(&e.to_string()),
    }
}

fn implications_hold(caps: &Capabilities) {
    if caps.contains(Capability::Video) {
        assert!(caps.contains(Capability::Compute), "{caps}");
    }
    if caps.contains(Capability::Display) {
        assert!(caps.contains(Capability::Graphics), "{caps}");
    }
}

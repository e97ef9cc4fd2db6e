//! Feeds arbitrary bytes to the `NVIDIA_REQUIRE_*` parser and checker, as a
//! container's environment: lossy UTF-8, one `KEY=VALUE` entry per NUL byte,
//! so values may hold newlines. Nothing may panic, and every message must
//! stay on one line whatever the image wrote.

#![no_main]

use libfuzzer_sys::fuzz_target;
use oci_nvidia_hook::host::driver::CudaVersion;
use oci_nvidia_hook::planning::require::{DeviceFacts, Facts, Requirements};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let env: Vec<String> = text.split('\0').map(str::to_owned).collect();
    let requirements = match Requirements::from_env(&env) {
        Ok(requirements) => requirements,
        Err(e) => {
            assert_one_line(&e.to_string());
            return;
        }
    };
    let _ = requirements.needs();
    for facts in hosts() {
        if let Err(e) = requirements.check(&facts) {
            assert_one_line(&e.to_string());
        }
    }
});

fn assert_one_line(message: &str) {
    assert!(
        !message.contains('\n') && !message.contains('\r'),
        "message spans lines: {message:?}"
    );
}

/// A typical host, a host that could determine nothing, and one at the extremes.
fn hosts() -> [Facts; 3] {
    [
        Facts {
            driver: "535.261.03".into(),
            cuda: Some(CudaVersion(12020)),
            compat_cuda: None,
            device: Some(DeviceFacts {
                name: "GPU 0 (GPU-8a3c)".into(),
                arch: Some((8, 0)),
                brand: Some("Tesla".into()),
            }),
        },
        Facts {
            device: Some(DeviceFacts::default()),
            ..Facts::default()
        },
        Facts {
            driver: "18446744073709551615.0".into(),
            cuda: Some(CudaVersion(i32::MIN)),
            compat_cuda: Some(CudaVersion(i32::MAX)),
            device: Some(DeviceFacts {
                name: "MIG 1:0".into(),
                arch: Some((u32::MAX, u32::MAX)),
                brand: Some("GeForce".into()),
            }),
        },
    ]
}

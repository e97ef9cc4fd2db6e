//! Tests of the requirement rules, one file per concern; the fixtures here
//! are a driver 535 host (CUDA 12.2) with one Tesla GPU of compute capability 8.0.
//!
//! NVIDIA sources cited: `libnvidia-container` `src/cli/dsl.c` @5823754b
//! (dsl.c), `src/cli/configure.c` @e27a4a75 (configure.c), `src/cli/cli.h`
//! @2e347c19 (cli.h); `nvidia-container-toolkit`
//! `internal/config/image/cuda_image.go` as vendored in
//! k8s-device-plugin @36c7562d (cuda_image.go) and its test
//! `cuda_image_test.go` @1081cece (cuda_image_test.go),
//! `cmd/nvidia-container-runtime-hook/main.go` @09b56d08 (main.go). See
//! docs/differences-from-nvidia.md, section 4 of "What NVIDIA's toolkit does".

mod environment;
mod evaluation;
mod garbage;
mod grammar;
mod messages;
mod options;

use super::*;

const GPU: &str = "GPU 0 (GPU-8a3c)";

fn env(entries: &[&str]) -> Vec<String> {
    entries.iter().map(|e| e.to_string()).collect()
}

/// Driver 535 (CUDA 12.2) with one A100-class Tesla GPU.
fn host_535() -> Facts {
    Facts {
        driver: "535.261.03".into(),
        cuda: Some(CudaVersion(12020)),
        compat_cuda: None,
        device: Some(DeviceFacts {
            name: GPU.into(),
            arch: Some((8, 0)),
            brand: Some("Tesla".into()),
        }),
    }
}

fn with_brand(brand: &str) -> Facts {
    let mut facts = host_535();
    if let Some(device) = &mut facts.device {
        device.brand = Some(brand.into());
    }
    facts
}

fn with_cuda(cuda: i32) -> Facts {
    Facts {
        cuda: Some(CudaVersion(cuda)),
        ..host_535()
    }
}

fn parse(rule: &str) -> Requirements {
    let env = env(&[&format!("NVIDIA_REQUIRE_TEST={rule}")]);
    Requirements::from_env(&env).unwrap_or_else(|e| panic!("{rule:?} does not parse: {e}"))
}

/// Whether a rule holds; panics when the answer is neither yes nor no.
fn holds(rule: &str, facts: &Facts) -> bool {
    match parse(rule).check(facts) {
        Ok(()) => true,
        Err(Error::Unsatisfied(_)) => false,
        Err(e) => panic!("{rule:?}: {e}"),
    }
}

fn refusal(env_entries: &[&str], facts: &Facts) -> String {
    let requirements = Requirements::from_env(&env(env_entries)).unwrap();
    match requirements.check(facts) {
        Err(e @ Error::Unsatisfied(_)) => e.to_string(),
        other => panic!("{env_entries:?}: expected a refusal, got {other:?}"),
    }
}

fn parse_error(rule: &str) -> Error {
    let env = env(&[&format!("NVIDIA_REQUIRE_TEST={rule}")]);
    match Requirements::from_env(&env) {
        Err(e) => e,
        Ok(r) => panic!("{rule:?} parsed as {r:?}"),
    }
}

/// The invalid-expression error a rule gives on `facts`, whether found up
/// front (its first term) or when evaluation reaches the term.
fn bad_term(rule: &str, facts: &Facts) -> Error {
    let env = env(&[&format!("NVIDIA_REQUIRE_TEST={rule}")]);
    let err = match Requirements::from_env(&env) {
        Err(e) => e,
        Ok(r) => match r.check(facts) {
            Err(e) => e,
            Ok(()) => panic!("{rule:?} holds"),
        },
    };
    assert!(matches!(err, Error::BadTerm { .. }), "{rule:?}: {err:?}");
    err
}

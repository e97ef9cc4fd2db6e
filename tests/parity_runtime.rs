//! Parity with NVIDIA's toolkit through a real runtime: a sample of the cases
//! of docs/differences-from-nvidia.md, each row citing the NVIDIA source that
//! decides its outcome (keys and line numbers as in its "Sources
//! read" table), run through runc on cgroup v1 with the hook as its
//! prestart hook, on simulated hosts: the default 535 host, one running the
//! 470 branch (`integration/simhost --driver 470`), a MIG host answered by
//! the mock NVML, and the 535 host running an image that ships CUDA
//! forward-compatibility libraries. Each row checks what the container itself sees: whether it
//! started or was refused (and the refusal's facts), exactly which
//! `/dev/nvidia*` nodes it has and that each opens with ENXIO (the device
//! cgroup allows it), what `cuDriverGetVersion` answers through the
//! injected libcuda, and whether the graphics capability's files came.
//!
//! Run as root: `make test`, or
//! `cargo test --features _test_as_root --test parity_runtime`.

use harness::compat::add_compat_libcuda;
use std::collections::BTreeSet;
use std::path::Path;

use harness::runtime::bundle::{Hook, Scenario};
use harness::runtime::container::run;
use harness::runtime::oci_config::NVIDIA_MAJOR;
use harness::runtime::run::{serial, Run};
use harness::runtime::runtimes::Runtime;
use harness::simhost::{Driver, Fixture, GpuFacts, SimHost};

/// Which GPUs a started container must have, by NVML index.
#[derive(Debug, Clone, Copy)]
enum Gpus {
    /// No `/dev/nvidiaN` at all (`none`: the driver's files only).
    Zero,
    /// Exactly these.
    Indices(&'static [u32]),
    /// Every GPU of the host.
    All,
}

/// Which capabilities a started container must have.
#[derive(Debug, Clone, Copy)]
enum Caps {
    /// NVIDIA's default, `utility,compute`: no graphics, no display.
    Default,
    /// Every capability: graphics libraries and `/dev/nvidia-modeset` too.
    All,
}

/// Which libcuda the container's loader must find.
#[derive(Debug, Clone, Copy)]
enum Cuda {
    /// The running driver's, answering the host's CUDA version.
    Driver,
    /// The image's forward-compatibility libcuda in `/usr/local/cuda/compat`,
    /// answering this version; that directory first in our ld.so.conf.d entry.
    Compat(i64),
}

/// What NVIDIA's toolkit does with a case, so what the container must see.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Not a GPU container: it starts, and the hook leaves it untouched.
    Untouched,
    /// A GPU container that starts with these devices and capabilities.
    Started {
        gpus: Gpus,
        caps: Caps,
        /// A MIG device (its place in host.json's `mig`): its parent GPU
        /// must be in `gpus`; its two nvidia-caps nodes come too.
        mig: Option<usize>,
        cuda: Cuda,
    },
    /// Refused before the container starts; the refusal names each of these.
    Refused(&'static [&'static str]),
}

/// One parity case.
struct Case {
    /// Names the bundle and the container; unique in this binary.
    name: &'static str,
    /// NVIDIA's source for the outcome, as docs/differences-from-nvidia.md cites it.
    source: &'static str,
    /// The container's environment.
    env: Vec<(&'static str, String)>,
    /// Changes the image before the run.
    prepare: Option<fn(&Path)>,
    /// NVIDIA's outcome.
    expect: Expect,
}

impl Case {
    fn new(name: &'static str, source: &'static str, env: &[(&'static str, &str)]) -> Case {
        Case {
            name,
            source,
            env: env.iter().map(|(k, v)| (*k, v.to_string())).collect(),
            prepare: None,
            expect: Expect::Untouched,
        }
    }

    fn expect(mut self, expect: Expect) -> Case {
        self.expect = expect;
        self
    }

    fn started(self, gpus: Gpus, caps: Caps) -> Case {
        self.expect(Expect::Started {
            gpus,
            caps,
            mig: None,
            cuda: Cuda::Driver,
        })
    }
}

/// A device node as the container saw it: path, numbers, what opening it gave.
type NodeFact = (String, Option<(u32, u32)>, String);

/// The `/dev/nvidia*` device nodes the container has.
fn seen_nodes(run: &Run) -> BTreeSet<NodeFact> {
    run.report
        .nodes
        .iter()
        .filter(|(_, n)| n.kind == 'c')
        .map(|(path, n)| (path.clone(), n.numbers, n.open.clone().unwrap_or_default()))
        .collect()
}

/// The nodes a started container must have, each allowed by the cgroup.
fn expected_nodes(
    host: &SimHost,
    gpus: Gpus,
    caps: Caps,
    mig: Option<usize>,
) -> BTreeSet<NodeFact> {
    let uvm = host.facts.uvm_major;
    let mut nodes = vec![
        ("/dev/nvidiactl".to_string(), (NVIDIA_MAJOR, 255)),
        ("/dev/nvidia-uvm".to_string(), (uvm, 0)),
        ("/dev/nvidia-uvm-tools".to_string(), (uvm, 1)),
    ];
    if let Caps::All = caps {
        nodes.push(("/dev/nvidia-modeset".to_string(), (NVIDIA_MAJOR, 254)));
    }
    let all = &host.facts.gpus;
    let chosen: Vec<&GpuFacts> = match gpus {
        Gpus::Zero => Vec::new(),
        Gpus::All => all.iter().collect(),
        Gpus::Indices(indices) => indices
            .iter()
            .map(|i| {
                all.iter()
                    .find(|g| g.index == *i)
                    .unwrap_or_else(|| panic!("the host has no GPU {i}"))
            })
            .collect(),
    };
    for gpu in chosen {
        let minor = gpu.minor;
        nodes.push((format!("/dev/nvidia{minor}"), (NVIDIA_MAJOR, minor)));
    }
    if let Some(i) = mig {
        let caps_major = host.facts.caps_major;
        let mig = &host.facts.mig[i];
        for minor in [mig.gi_access_minor, mig.ci_access_minor] {
            nodes.push((
                format!("/dev/nvidia-caps/nvidia-cap{minor}"),
                (caps_major, minor),
            ));
        }
    }
    nodes
        .into_iter()
        .map(|(path, numbers)| (path, Some(numbers), "ENXIO".to_string()))
        .collect()
}

/// Whether the container has the running driver's graphics core library.
fn has_graphics(run: &Run, version: &str) -> bool {
    let name = format!("/libnvidia-glcore.so.{version}");
    run.report.files.keys().any(|f| f.ends_with(&name))
}

/// Runs `case` on `host` and says how the container's outcome differs
/// from NVIDIA's, if it does.
fn check(host: &SimHost, case: &Case) -> Result<(), String> {
    let serial = serial();
    let env: Vec<(&str, &str)> = case.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let prepare = case.prepare.as_ref().map(|f| f as &dyn Fn(&Path));
    let run = run(
        &serial,
        &Scenario {
            name: case.name,
            runtime: Runtime::RuncV1,
            host,
            env: &env,
            hook: Hook::Prestart,
            decoy_minors: &[],
            decoys: &[],
            reuse_rootfs: false,
            prepare,
        },
    );
    let fail = |what: String| {
        Err(format!(
            "{} ({}): {what}{}",
            case.name,
            case.source,
            run.describe()
        ))
    };
    let version = host.facts.driver_version.as_str();
    match case.expect {
        Expect::Refused(needles) => {
            if run.succeeded() || run.report.complete {
                return fail("NVIDIA refuses it; the container started".into());
            }
            let text = run.failure_text();
            let missing: Vec<&&str> = needles.iter().filter(|n| !text.contains(**n)).collect();
            if !missing.is_empty() {
                return fail(format!("the refusal does not name {missing:?}"));
            }
        }
        Expect::Untouched => {
            if !run.succeeded() || !run.report.complete {
                return fail("NVIDIA starts it untouched; it did not run to the end".into());
            }
            let nodes = seen_nodes(&run);
            if !nodes.is_empty() || !run.report.files.is_empty() {
                return fail(format!("the hook touched it: nodes {nodes:?}"));
            }
            if run.report.cuda.as_ref().is_some_and(|c| c.loaded) {
                return fail("libcuda loads in a container that asked for no GPU".into());
            }
        }
        Expect::Started {
            gpus,
            caps,
            mig,
            cuda,
        } => {
            if !run.succeeded() || !run.report.complete {
                return fail("NVIDIA starts it; it did not run to the end".into());
            }
            let want = expected_nodes(host, gpus, caps, mig);
            let seen = seen_nodes(&run);
            if seen != want {
                return fail(format!("nodes differ: want {want:?}\n  seen {seen:?}"));
            }
            let graphics = matches!(caps, Caps::All);
            if has_graphics(&run, version) != graphics {
                return fail(format!("graphics libraries: want {graphics}"));
            }
            let Some(lib) = run.report.cuda.as_ref().filter(|c| c.loaded) else {
                return fail("libcuda.so.1 does not load".into());
            };
            let (answer, from) = match cuda {
                Cuda::Driver => (
                    i64::from(host.facts.cuda_version),
                    format!("the running driver's libcuda.so.{version}"),
                ),
                Cuda::Compat(v) => (v, "/usr/local/cuda/compat/".to_string()),
            };
            // dlopen names the SONAME link it opened; the file is its target.
            let file = run
                .report
                .links
                .get(&lib.path)
                .map_or(lib.path.as_str(), String::as_str);
            let right_file = match cuda {
                Cuda::Driver => file == format!("libcuda.so.{version}"),
                Cuda::Compat(_) => lib.path.starts_with(&from),
            };
            if !right_file || lib.field("version") != Some(answer.to_string().as_str()) {
                return fail(format!(
                    "libcuda: want {from} answering {answer}, got {} ({file}) answering {:?}",
                    lib.path,
                    lib.field("version")
                ));
            }
            if let Cuda::Compat(_) = cuda {
                let dirs: Vec<&String> = run
                    .report
                    .ldconf
                    .get("/etc/ld.so.conf.d/000-oci-nvidia-hook.conf")
                    .into_iter()
                    .flatten()
                    .filter(|l| !l.starts_with('#'))
                    .collect();
                if dirs.first().map(|d| d.as_str()) != Some("/usr/local/cuda/compat") {
                    return fail(format!(
                        "ld.so.conf.d entry does not list the compat dir first: {dirs:?}"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Runs every case on `host`, then fails listing each that differs.
fn check_all(host: &SimHost, cases: &[Case]) {
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| check(host, case).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from NVIDIA:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn device_lists_and_capabilities_on_a_535_host_as_nvidia() {
    let host = SimHost::shared(Fixture::synthetic(4));
    let gpu2 = host.facts.gpus[2].uuid.as_str();
    let lower = gpu2.to_ascii_lowercase();
    assert!(lower.starts_with("gpu-"), "{gpu2}");
    let cases = [
        Case::new(
            "535-empty-items",
            "IMG:157-161; COM:292-293",
            &[("NVIDIA_VISIBLE_DEVICES", "0,,1")],
        )
        .started(Gpus::Indices(&[0, 1]), Caps::Default),
        Case::new(
            "535-all-mixed-in",
            "DEV:48-49, 58-59",
            &[("NVIDIA_VISIBLE_DEVICES", "all,0")],
        )
        .started(Gpus::All, Caps::Default),
        Case::new(
            "535-none-mixed-in",
            "DEV:46-47, 56-57; MAIN:125-127",
            &[("NVIDIA_VISIBLE_DEVICES", "0,none")],
        )
        .started(Gpus::Zero, Caps::Default),
        Case::new(
            "535-all-upper-case",
            "DEV:44-49; COM:296-301",
            &[("NVIDIA_VISIBLE_DEVICES", "ALL")],
        )
        .started(Gpus::All, Caps::Default),
        Case::new(
            "535-gpu-uuid-lower-case",
            "COM:173-177",
            &[("NVIDIA_VISIBLE_DEVICES", &lower)],
        )
        .started(Gpus::Indices(&[2]), Caps::Default),
        Case::new(
            "535-caps-all-mixed-in",
            "CAPS:115-121; CC:169",
            &[
                ("NVIDIA_VISIBLE_DEVICES", "0"),
                ("NVIDIA_DRIVER_CAPABILITIES", "foo,all"),
            ],
        )
        .started(Gpus::Indices(&[0]), Caps::All),
        Case::new(
            "535-legacy-image",
            "IMGT2:267-273; CCT:33-44, 556-562; IMGT1:99-103",
            &[("CUDA_VERSION", "11.0.3")],
        )
        .started(Gpus::All, Caps::All),
    ];
    check_all(&host, &cases);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn cuda_requirements_on_a_470_host_as_nvidia() {
    let host = SimHost::shared(Fixture::synthetic(4).driver(Driver::R470));
    assert_eq!(host.facts.driver_version, "470.256.02");
    assert_eq!(host.facts.cuda_version, 11040);
    let cases = [
        Case::new(
            "470-legacy-too-new",
            "IMG:101-105; IMGT1:99-103; DSL:159-167; CFG:181-212",
            &[("CUDA_VERSION", "12.2.0")],
        )
        .expect(Expect::Refused(&["cuda>=12.2", "470.256.02", "CUDA 11.4"])),
        Case::new(
            "470-legacy-same",
            "IMG:101-105; IMGT2:267-273; CCT:33-44, 556-562",
            &[("CUDA_VERSION", "11.4.0")],
        )
        .started(Gpus::All, Caps::All),
        Case::new(
            "470-require-cuda",
            "IMGT1:89-93; DSL:35-79; CFG:181-212",
            &[
                ("NVIDIA_VISIBLE_DEVICES", "0"),
                ("NVIDIA_REQUIRE_CUDA", "cuda>=11.0"),
            ],
        )
        .started(Gpus::Indices(&[0]), Caps::Default),
        Case::new(
            "470-modern-image-no-devices",
            "CCT:175-190",
            &[
                ("NVIDIA_REQUIRE_CUDA", "cuda>=11.0"),
                ("CUDA_VERSION", "11.0.3"),
            ],
        ),
    ];
    check_all(&host, &cases);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn mig_device_by_lower_case_uuid_as_nvidia() {
    let host = SimHost::shared(Fixture::synthetic(4).mig());
    let mig = &host.facts.mig[0];
    let uuid = mig.uuid.as_str().to_ascii_lowercase();
    assert!(uuid.starts_with("mig-"), "{uuid}");
    let parent: &'static [u32] = match mig.gpu {
        0 => &[0],
        1 => &[1],
        other => panic!("MIG devices sit on GPUs 0 and 1, not {other}"),
    };
    let cases = [Case::new(
        "mig-uuid-lower-case",
        "COM:231-239, 266; CFG:371-384; MNT:864-933",
        &[("NVIDIA_VISIBLE_DEVICES", &uuid)],
    )
    .expect(Expect::Started {
        gpus: Gpus::Indices(parent),
        caps: Caps::Default,
        mig: Some(0),
        cuda: Cuda::Driver,
    })];
    check_all(&host, &cases);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn newer_branch_compat_libraries_come_first_as_nvidia() {
    let host = SimHost::shared(Fixture::synthetic(4));
    let mut case = Case::new(
        "535-compat-550",
        "CNT:60-97; CM:28-59, 78-83",
        &[("NVIDIA_VISIBLE_DEVICES", "0")],
    )
    .expect(Expect::Started {
        gpus: Gpus::Indices(&[0]),
        caps: Caps::Default,
        mig: None,
        cuda: Cuda::Compat(12040),
    });
    case.prepare = Some(add_compat_libcuda);
    check_all(&host, &[case]);
}

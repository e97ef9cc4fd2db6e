//! The arm64 binary (`make build-aarch64`: static, cross-built, its helper
//! for glibc 2.17; docs/install.md) on a simulated arm64 (Grace) host made from Debian's
//! arm64 packages of the 535 driver (`integration/simhost --arch arm64`),
//! run under qemu-user: `qemu-aarch64-static -L` the host's driver root,
//! which holds arm64 glibc as a real host's root does. There:
//!
//! - `--version`, `info`, `list`, `cdi generate` and `doctor` run and name
//!   the driver's libraries in `/usr/lib/aarch64-linux-gnu`, never an
//!   x86-64 path;
//! - the binary's embedded helper (probe/, the one part that loads
//!   driver code) gets the arm64 libcuda to answer. The binary itself
//!   cannot execute it under qemu-user, which implements no `execveat`
//!   for the memfd it runs from: there the CUDA version is missing, with
//!   that reason, and the helper is run by qemu directly;
//! - this host's own x86-64 binary takes none of the arm64 libraries;
//! - on a simulated arm64 Jetson (`harness::jetson::jetson_arm64`: L4T's
//!   CSV files, AArch64 libraries with their SONAMEs built by
//!   binutils-aarch64-linux-gnu, nodes made with mknod), `info`, `list`,
//!   `cdi generate --mode csv` and `nvidia-ctk cdi generate --mode=csv`
//!   know the host as tests/jetson.rs's x86-64 one does, and an x86-64
//!   library its CSV files list is skipped by its ELF machine;
//! - `packaging/build` makes arm64/aarch64 packages of the binary that
//!   depend on glibc 2.17 at most.
//!
//! Not run here: anything that enters namespaces or mounts (a prestart
//! hook, the runtime wrapper). qemu-user translates one process's system
//! calls; a hook run under it would act on this machine's own namespaces
//! with an emulated binary, which tests nothing arm64 has of its own
//! (docs/development.md). Needs root, qemu-user-static and
//! binutils-aarch64-linux-gnu (integration/install-deps) and the binary
//! (`make build-aarch64`; `make test` builds it first):
//! `cargo test --features _test_as_root --test arm64`.

#[path = "../packaging/docs.rs"]
mod docs;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use harness::glibc::{self, FLOOR};
use harness::jetson::{
    assert_csv_spec, assert_ctk_reads_the_csv_files_named, assert_lists_the_jetson, jetson_arm64,
    CSV_DIR, RELEASE,
};
use harness::project::{repo, target_tmpdir};
use harness::runtime::oci_config::path_str;
use harness::runtime::process::{run_bounded, Finished};
use harness::runtime::runtimes::find_tool;
use harness::simhost::{require_root, Fixture, SimHost};

/// The arm64 host every test reads.
const HOST: Fixture = Fixture::real(4).arm64();

/// The binary `make build-aarch64` ships, checked to be AArch64 and static
/// (its embedded helper needing no newer glibc than the floor).
fn aarch64_binary() -> PathBuf {
    let bin = glibc::shipped_binary("aarch64-unknown-linux-musl", "build-aarch64");
    assert_elf_machine_is_aarch64(&bin);
    bin
}

/// The helper the arm64 binary embeds (probe/), which loads libcuda
/// and NVML for it: AArch64, linked for glibc 2.17 at most.
fn aarch64_probe() -> PathBuf {
    let probe = glibc::shipped_probe("aarch64", "build-aarch64");
    assert_elf_machine_is_aarch64(&probe);
    probe
}

fn assert_elf_machine_is_aarch64(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    let header = goblin::elf::Elf::parse_header(&bytes).expect("an ELF header");
    assert_eq!(
        header.e_machine,
        goblin::elf::header::EM_AARCH64,
        "{} is not an AArch64 program",
        path.display()
    );
}

/// The arm64 binary's command on `host` under qemu-user, bounded in time.
fn under_qemu(host: &SimHost, args: &[&str]) -> Finished {
    qemu(
        host,
        &aarch64_binary(),
        &["--config", path_str(&host.config).as_str()],
        args,
    )
}

/// `program` (an AArch64 one) with `args` after `fixed` on `host` under
/// qemu-user, bounded in time.
fn qemu(host: &SimHost, program: &Path, fixed: &[&str], args: &[&str]) -> Finished {
    qemu_as(host, None, program, fixed, args)
}

/// [`qemu`], the program's `argv[0]` being `arg0` when given (the
/// binary's NVIDIA names).
fn qemu_as(
    host: &SimHost,
    arg0: Option<&str>,
    program: &Path,
    fixed: &[&str],
    args: &[&str],
) -> Finished {
    let qemu = find_tool("qemu-aarch64-static").expect(
        "qemu-aarch64-static is not on PATH: install qemu-user-static (integration/install-deps)",
    );
    let mut cmd = Command::new(qemu);
    if let Some(arg0) = arg0 {
        cmd.arg("-0").arg(arg0);
    }
    cmd.arg("-L")
        .arg(&host.facts.driver_root)
        .arg(program)
        .args(fixed)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    let finished = run_bounded(cmd, Duration::from_secs(120));
    assert!(!finished.timed_out, "{args:?} under qemu was killed");
    finished
}

/// The libraries `info --json` found (host path, capability), each checked to be one
/// of the host's arm64 libraries in the aarch64 multiarch directory, with
/// libcuda and libnvidia-ml among them.
fn arm64_libraries(host: &SimHost, info: &serde_json::Value) -> Vec<(String, String)> {
    assert!(
        host.facts.libraries32.is_empty(),
        "an arm64 host has no compat32"
    );
    let dir = format!("{}/usr/lib/aarch64-linux-gnu/", host.facts.driver_root);
    let libs = info["libraries"].as_array().expect("info's libraries");
    let mut paths = Vec::new();
    for lib in libs {
        let path = lib["path"].as_str().expect("a library path").to_string();
        assert_eq!(lib["arch"], "aarch64", "{lib}");
        assert!(path.starts_with(&dir), "{path}");
        assert!(
            host.facts.libraries.values().any(|real| *real == path),
            "{path} is none of the host's arm64 libraries"
        );
        let capability = lib["capability"].as_str().expect("a capability");
        paths.push((path, capability.to_string()));
    }
    for prefix in [
        "libcuda.so",
        "libnvidia-ml.so",
        "libnvidia-ptxjitcompiler.so",
    ] {
        assert!(
            libs.iter().any(|l| l["prefix"] == prefix),
            "info found no {prefix}: {info:#}"
        );
    }
    paths
}

/// `--version`, `info`, `list`, `cdi generate` and `doctor` of the arm64
/// binary on the arm64 host: every library it names is the host's arm64
/// one, none is x86-64's; its embedded helper, which qemu-user cannot
/// execute from a memfd, gets the host's libcuda to answer when qemu runs it.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn commands_run_on_an_arm64_host() {
    require_root();
    let host = SimHost::shared(HOST);

    let version = under_qemu(&host, &["--version"]).succeeded("--version under qemu");
    assert!(version.starts_with("oci-nvidia-hook "), "{version}");

    // The binary asks libcuda through its embedded helper, executed from a
    // memfd: qemu-user cannot execute that (it implements no execveat), so
    // under qemu the CUDA version is missing with that reason, and the
    // helper itself is run under qemu below, against the same libcuda.
    let text = under_qemu(&host, &["info", "--json"]).succeeded("info under qemu");
    let info: serde_json::Value = serde_json::from_str(&text).expect("info --json");
    assert_eq!(info["driver_version"], host.facts.driver_version.as_str());
    assert_eq!(info["cuda_driver_version"], serde_json::Value::Null);
    let not_run = "cannot run the query program embedded in this binary";
    assert!(
        info["cuda_error"]
            .as_str()
            .is_some_and(|e| e.contains(not_run)),
        "{info:#}"
    );
    let libcuda = host
        .facts
        .libraries
        .get("libcuda.so.1")
        .expect("the host's libcuda.so.1");
    let answer = qemu(&host, &aarch64_probe(), &["cuda"], &[libcuda.as_str()])
        .succeeded("the helper under qemu");
    assert_eq!(
        answer.trim(),
        format!("{{\"Ok\":{}}}", host.facts.cuda_version),
        "the helper's answer for {libcuda}"
    );
    assert_eq!(
        info["gpus"].as_array().map(Vec::len),
        Some(host.facts.gpus.len())
    );
    let libs = arm64_libraries(&host, &info);
    assert!(!text.contains("x86_64"), "{info:#}");

    let list = under_qemu(&host, &["list"]).succeeded("list under qemu");
    // list's default scope is NVIDIA's: utility and compute.
    for (path, _) in libs
        .iter()
        .filter(|(_, c)| c == "utility" || c == "compute")
    {
        assert!(list.contains(path.as_str()), "list lacks {path}:\n{list}");
    }
    for gpu in &host.facts.gpus {
        let node = format!("/dev/nvidia{}\n", gpu.minor);
        assert!(list.contains(&node), "list lacks {node}:\n{list}");
    }
    assert!(!list.contains("x86_64"), "{list}");

    let args = ["cdi", "generate", "--output", "-"];
    let cdi = under_qemu(&host, &args).succeeded("cdi generate under qemu");
    assert!(cdi.contains("nvidia.com/gpu"), "{cdi}");
    for (path, _) in &libs {
        let name = Path::new(path).file_name().unwrap().to_string_lossy();
        let inside = format!("containerPath: /usr/lib/aarch64-linux-gnu/{name}\n");
        assert!(
            cdi.contains(&format!("hostPath: {path}\n")),
            "{path}:\n{cdi}"
        );
        assert!(cdi.contains(&inside), "the CDI spec lacks {inside}:\n{cdi}");
    }
    assert!(!cdi.contains("x86_64"), "{cdi}");

    // doctor on a host with no kernel module behind the nodes: it reports
    // (0 healthy, 1 problems found), with the arm64 libraries and libcuda
    // healthy.
    let doctor = under_qemu(&host, &["doctor"]);
    let code = doctor.status.and_then(|s| s.code());
    assert!(
        matches!(code, Some(0 | 1)) && !doctor.stdout.is_empty(),
        "doctor under qemu: {code:?}\n{}\n{}",
        doctor.stdout,
        doctor.stderr
    );
    let flat = doctor
        .stdout
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for want in [
        format!("ok libraries: {} libraries of driver", libs.len()),
        format!("fail CUDA version: libcuda: {not_run}"),
    ] {
        assert!(
            flat.contains(&want),
            "doctor lacks '{want}':\n{}",
            doctor.stdout
        );
    }
}

/// The arm64 binary on a simulated arm64 Jetson, under qemu-user: what
/// tests/jetson.rs asserts of `info`, `list`, `cdi generate --mode csv`
/// and `nvidia-ctk cdi generate --mode=csv` on the x86-64 one, every
/// library named being the AArch64 one in `/usr/lib/aarch64-linux-gnu`;
/// the x86-64 library `drivers.csv` lists is skipped, naming its ELF
/// machine, and never mounted. The CUDA version needs the embedded helper,
/// which qemu-user cannot execute from a memfd (above): `info` says
/// unknown, and the helper run by qemu gets the Jetson's AArch64 libcuda
/// to answer (with the Grace host's arm64 glibc, which the Jetson's root lacks).
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn an_arm64_jetson_is_known_to_the_arm64_binary() {
    require_root();
    let (host, facts) = jetson_arm64();
    let foreign = facts
        .foreign_library
        .clone()
        .expect("the arm64 Jetson lists an x86-64 library");
    let info = under_qemu(&host, &["info"]).succeeded("info under qemu");
    for want in [
        format!("Driver version: {RELEASE}"),
        "Host:           Jetson/Tegra".to_string(),
        "CUDA version:   unknown".to_string(),
        format!("{CSV_DIR}/drivers.csv"),
        format!("SKIPPED dev    {}", facts.missing_node),
        format!("SKIPPED lib    {foreign}"),
        "is for ELF machine 62, expected 183 (aarch64)".to_string(),
    ] {
        assert!(info.contains(&want), "info lacks {want:?}:\n{info}");
    }
    assert!(!info.contains("cuda.csv"), "only the base files: {info}");
    assert!(!info.contains("x86_64"), "{info}");
    for lib in host.facts.libraries.values() {
        assert!(lib.contains("/usr/lib/aarch64-linux-gnu/nvidia/"), "{lib}");
        assert_elf_machine_is_aarch64(Path::new(lib));
        assert!(info.contains(lib.as_str()), "info lacks {lib}:\n{info}");
    }
    // The helper gets the Jetson's libcuda to answer.
    let grace = SimHost::shared(HOST);
    let libcuda = &host.facts.libraries["libcuda.so.1"];
    let answer = qemu(&grace, &aarch64_probe(), &["cuda"], &[libcuda.as_str()])
        .succeeded("the helper under qemu");
    assert_eq!(
        answer.trim(),
        format!("{{\"Ok\":{}}}", host.facts.cuda_version),
        "the helper's answer for {libcuda}"
    );

    let list = under_qemu(&host, &["list", "--device", "all"]).succeeded("list under qemu");
    assert_lists_the_jetson(&list, &host, &facts);
    let none = under_qemu(&host, &["list", "--device", "none"]).succeeded("list none");
    assert!(!none.contains("/dev/nvmap"), "none gets no nodes:\n{none}");

    let dir = target_tmpdir().join("arm64-jetson-cdi");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = path_str(&dir.join("nvidia.json"));
    let args = [
        "cdi",
        "generate",
        "--mode",
        "csv",
        "--output",
        file.as_str(),
    ];
    under_qemu(&host, &args).succeeded("cdi generate --mode csv under qemu");
    let spec: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_csv_spec(&spec, &facts);
    let hook = spec["containerEdits"]["hooks"][0]["args"].to_string();
    assert!(
        hook.contains("--csv-host"),
        "the hook reads a CSV host: {hook}"
    );
    under_qemu(&host, &["cdi", "validate", file.as_str()]).succeeded("cdi validate under qemu");
    std::fs::remove_dir_all(&dir).unwrap();

    // NVIDIA's name and flags: the roots named, no config.
    let root = host.facts.driver_root.clone();
    let ctk = |args: &[&str]| -> serde_json::Value {
        let fixed = [
            "cdi",
            "generate",
            "--format",
            "json",
            "--driver-root",
            root.as_str(),
            "--dev-root",
            host.facts.dev_root.as_str(),
        ];
        let out = qemu_as(&host, Some("nvidia-ctk"), &aarch64_binary(), &fixed, args)
            .succeeded("nvidia-ctk cdi generate under qemu");
        serde_json::from_str(&out).expect("a JSON spec")
    };
    assert_ctk_reads_the_csv_files_named(&ctk, &root, &facts);
}

/// This machine's x86-64 binary on the arm64 host takes none of its
/// libraries (the loader cache's entries are AArch64's) and refuses its
/// binaries by their ELF machine, so `list` fails naming the missing NVML.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn an_x86_64_binary_takes_no_arm64_library() {
    require_root();
    let host = SimHost::shared(HOST);
    let out = host.run(&["list"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "list took the arm64 host:\n{stdout}");
    for path in host.facts.libraries.values() {
        assert!(!stdout.contains(path.as_str()), "listed {path}:\n{stdout}");
    }
    let smi = &host.facts.binaries["nvidia-smi"];
    assert!(
        stderr.contains(&format!(
            "{smi} is for ELF machine 183, expected 62 (x86_64)"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("needs libnvidia-ml.so"), "{stderr}");
}

/// `packaging/build` on the arm64 binary (what `make deb rpm` runs for
/// it): an arm64 .deb and an aarch64 .rpm, depending on glibc 2.17 at
/// most, which packaging/check-glibc passes.
#[test]
#[cfg_attr(
    not(feature = "_test_as_root"),
    ignore = "needs the packaging tools: run `make test`"
)]
fn arm64_packages_depend_on_the_glibc_floor() {
    for (tool, package) in [
        ("rpmbuild", "rpm"),
        ("aarch64-linux-gnu-strip", "binutils-aarch64-linux-gnu"),
    ] {
        assert!(
            find_tool(tool).is_some(),
            "`{tool}` is not on PATH: install {package} (integration/install-deps)"
        );
    }
    let bin = aarch64_binary();
    let work = target_tmpdir().join("arm64-packages");
    let _ = std::fs::remove_dir_all(&work);
    docs::write_all(&work.join("docs")).expect("write the manual pages and completions");
    let out = Command::new(repo().join("packaging/build"))
        .arg("--binary")
        .arg(&bin)
        .arg("--probe")
        .arg(aarch64_probe())
        .args(["--glibc-floor", FLOOR, "--docs"])
        .arg(work.join("docs"))
        .arg("--out")
        .arg(work.join("out"))
        .args(["deb", "rpm"])
        .output()
        .expect("run packaging/build");
    assert!(
        out.status.success(),
        "packaging/build failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let version = env!("CARGO_PKG_VERSION");
    let deb = work.join(format!("out/oci-nvidia-hook_{version}_arm64.deb"));
    let rpm = work.join(format!("out/oci-nvidia-hook-{version}-1.aarch64.rpm"));
    let field = |name: &str| query("dpkg-deb", &["-f", path_str(&deb).as_str(), name]);
    assert_eq!(field("Architecture"), "arm64");
    assert_eq!(field("Depends"), format!("libc6 (>= {FLOOR})"));
    let arch = query("rpm", &["-qp", "--qf", "%{ARCH}", path_str(&rpm).as_str()]);
    assert_eq!(arch, "aarch64");
    let requires = query("rpm", &["-qp", "--requires", path_str(&rpm).as_str()]);
    assert!(
        requires.contains(&format!("libc.so.6(GLIBC_{FLOOR})(64bit)")),
        "{requires}"
    );
    // The packaged binary is the stripped arm64 one.
    let unpacked = work.join("unpacked");
    query(
        "dpkg-deb",
        &["-x", path_str(&deb).as_str(), path_str(&unpacked).as_str()],
    );
    assert_elf_machine(&unpacked.join("usr/bin/oci-nvidia-hook"));
    let check = Command::new(repo().join("packaging/check-glibc"))
        .arg(FLOOR)
        .arg(&deb)
        .arg(&rpm)
        .output()
        .expect("run packaging/check-glibc");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    std::fs::remove_dir_all(&work).unwrap();
}

/// `program args`' stdout, trimmed, the command having succeeded.
fn query(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Panics unless `path` is a stripped AArch64 ELF file.
fn assert_elf_machine(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let elf = goblin::elf::Elf::parse(&bytes).expect("an ELF file");
    assert_eq!(elf.header.e_machine, goblin::elf::header::EM_AARCH64);
    assert!(elf.syms.is_empty(), "{} is not stripped", path.display());
}

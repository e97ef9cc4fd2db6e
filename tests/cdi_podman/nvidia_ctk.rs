//! Specs made by `nvidia-ctk cdi generate` (the compat name of our binary,
//! NVIDIA's flags) taken by Podman: named by UUID, made on a driver root
//! the config does not name (as the GPU Operator passes
//! `--driver-root=/run/nvidia/driver`), and the management spec the GPU
//! Operator's own pods take (`management.nvidia.com/gpu=all`).

use super::*;

/// Writes `spec` with `nvidia-ctk cdi generate --output SPEC ARGS`, run as
/// the link `nvidia-ctk` in `dir`, in a private mount namespace whose /etc
/// overlay (`etc`, as the run's) holds the run's config as the default.
pub(super) fn generate(dir: &Path, etc: &Path, spec: &Path, args: &[&str]) {
    let link = dir.join("nvidia-ctk");
    std::os::unix::fs::symlink(hook_binary(), &link).unwrap();
    let mut cmd = Command::new("unshare");
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(
            "mount -t overlay onh-etc -o \"lowerdir=/etc,upperdir=$1/upper,workdir=$1/work\" /etc \
             && shift && exec \"$@\"",
        )
        .arg("sh")
        .arg(etc)
        .arg(&link)
        .args(["cdi", "generate", "--output"])
        .arg(spec)
        .args(args);
    let out = run_bounded(cmd, RUN_LIMIT);
    assert!(
        out.status.is_some_and(|s| s.success()),
        "nvidia-ctk cdi generate {args:?}: {}{}",
        out.stdout,
        out.stderr
    );
}

/// Points `config`'s driver root and dev root at `empty`, a directory
/// made empty: no driver is found through the config.
pub(super) fn roots_elsewhere(config: &Path, empty: &Path) {
    std::fs::create_dir_all(empty).unwrap();
    let text = std::fs::read_to_string(config).unwrap();
    let mut replaced = 0;
    let text: Vec<String> = text
        .lines()
        .map(|line| {
            if line.starts_with("root = ") || line.starts_with("dev-root = ") {
                replaced += 1;
                let key = line.split(" = ").next().unwrap_or_default();
                format!("{key} = {:?}", path_str(empty))
            } else {
                line.to_string()
            }
        })
        .collect();
    assert_eq!(replaced, 2, "the config names both roots: {text:?}");
    std::fs::write(config, text.join("\n") + "\n").unwrap();
}

/// NVIDIA's default names (index and UUID): a GPU taken by its UUID.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn podman_takes_a_gpu_by_uuid_from_nvidia_ctks_spec() {
    let host = host();
    let gpu = host.facts.gpus.iter().find(|g| g.index == 1).unwrap();
    let run = run_cdi(&CdiRun {
        name: "ctk-uuid",
        host: &host,
        devices: &[&gpu.uuid],
        env: &[],
        hooks: HooksDir::Empty,
        imex: &[],
        wrapper: false,
        reshape: None,
        ctk: Some(CtkGenerate {
            args: &[],
            roots_elsewhere: false,
        }),
    });
    assert_cdi_gpus(&run, &host, &[gpu.minor], &[]);
}

/// `--driver-root` and `--dev-root` elsewhere than the config's (which
/// names an empty directory here): the spec's nodes and mounts come from
/// the named roots, and its hook, which records them, finds the driver
/// there at container start.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn podman_takes_a_gpu_from_a_spec_made_on_another_driver_root() {
    let host = host();
    let driver_root = format!("--driver-root={}", path_str(&host.path("driver")));
    let dev_root = format!("--dev-root={}", path_str(&host.path("devroot")));
    let run = run_cdi(&CdiRun {
        name: "ctk-driver-root",
        host: &host,
        devices: &["gpu0"],
        env: &[],
        hooks: HooksDir::Empty,
        imex: &[],
        wrapper: false,
        reshape: None,
        ctk: Some(CtkGenerate {
            args: &[&driver_root, &dev_root, "--device-name-strategy=type-index"],
            roots_elsewhere: true,
        }),
    });
    assert_cdi_gpus(&run, &host, &[minor_of_index(&host, 0)], &[]);
    let spec = std::fs::read_to_string(work_root().join("bundles/cdi-ctk-driver-root/nvidia.yaml"))
        .unwrap();
    assert!(
        spec.contains(&format!(
            "--driver-root\n    - {}",
            path_str(&host.path("driver"))
        )),
        "the hook records the driver root:\n{spec}"
    );
}

/// `--mode=management`: one device, `management.nvidia.com/gpu=all`, with
/// every GPU and the MIG configuration and monitoring capabilities' nodes.
#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn podman_takes_the_management_spec() {
    let host = host();
    let caps: Vec<NodeSpec> = [1, 2]
        .into_iter()
        .map(|minor| {
            (
                format!("/dev/nvidia-caps/nvidia-cap{minor}"),
                (host.facts.caps_major, minor),
            )
        })
        .collect();
    let run = run_cdi(&CdiRun {
        name: "ctk-management",
        host: &host,
        devices: &["management.nvidia.com/gpu=all"],
        env: &[],
        hooks: HooksDir::Empty,
        imex: &[],
        wrapper: false,
        reshape: None,
        ctk: Some(CtkGenerate {
            args: &["--mode=management"],
            roots_elsewhere: false,
        }),
    });
    let minors: Vec<u32> = host.facts.gpus.iter().map(|g| g.minor).collect();
    assert_cdi_gpus(&run, &host, &minors, &caps);
}

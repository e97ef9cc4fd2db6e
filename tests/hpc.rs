//! HPC and system containers (docs/hpc.md): the container managers that
//! call `nvidia-container-cli configure` themselves, from their own hooks,
//! inside the container's namespaces and without `--pid`, on the simulated
//! 4-GPU host with NVIDIA's real 535 libraries.
//!
//! - **LXC**, for real: Debian 12's `lxc-execute` starts an unprivileged
//!   container whose `lxc.hook.mount` is the packaged
//!   `/usr/share/lxc/hooks/nvidia`, unmodified; the hook finds our binary as
//!   `nvidia-container-cli` on its PATH.
//! - **enroot** (in no Debian release): its `98-nvidia.sh` call, argv for
//!   argv, in the namespaces `enroot start` sets up for an unprivileged user
//!   (a user namespace mapping the user to itself with its capabilities
//!   kept, a private mount namespace, the rootfs bound `nosuid,nodev` on
//!   itself, `ENROOT_RESTRICT_DEV`'s tmpfs `/dev`).
//! - **Apptainer** 1.4.5, for real: Debian sid's packaged `apptainer exec
//!   --nvccli --contain` of a sandbox directory, from a cached sid root
//!   (harness::debroot `sid_hpc`, entered with `pivot_root`), as root (the
//!   nodes made with mknod) and as `nobody` (Apptainer's own user
//!   namespace: it passes `--user`, the nodes are bound).
//! - **Incus** 7.0.2, for real: sid's `incus-base` under systemd 262
//!   booted as pid 1 of the sid-hpc root (harness::booted, `nested`), an
//!   unprivileged container with `nvidia.runtime=true`: LXC 7's packaged
//!   `hooks/nvidia` calls us. Its `gpu` device looks the card up in
//!   `/sys/bus/pci`, where no simulated GPU is: that refusal is asserted,
//!   and the card's node is given as the `unix-char` device the `gpu`
//!   device would make.
//! - **Singularity**'s legacy `--nv` and Incus's resources read `list
//!   --binaries --libraries` and `info --csv`: both parsed as they parse
//!   them.
//!
//! Each container must see its GPUs' nodes (ENXIO on open: allowed, no
//! driver), no other GPU's, and load libcuda through its own loader cache.
//!
//! Run as root: `make test`, or
//! `cargo test --features _test_as_root --test hpc -- --nocapture`. Needs
//! lxc (`lxc-execute`), unshare, setpriv, chroot and debootstrap (the first
//! run makes the sid-hpc root); a missing one fails the test, naming it.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use harness::booted::{BootSetup, Booted};
use harness::debroot::{sid_hpc, Cgroups, Entry};
use harness::mounts::host_mounts;
use harness::nvidia_cli::{cli_link, etc_layer, nvidia_cli_stdout, over_etc};
use harness::project::{hook_binary, repo, target_tmpdir};
use harness::runtime::bundle::{copy_template, template_rootfs, write_hook_config};
use harness::runtime::cleanup::assert_left_as_found;
use harness::runtime::expected::node_specs;
use harness::runtime::host_state::tree_listing;
use harness::runtime::injected::gpu;
use harness::runtime::oci_config::CONTAINER_SCRIPT;
use harness::runtime::report::CheckerReport;
use harness::runtime::runtimes::require_tool;
use harness::simhost::{require_root, Fixture, SimHost};

fn real_host() -> SimHost {
    SimHost::shared(Fixture::real(4))
}

/// A fresh directory of this suite's, under the target directory.
fn scratch(name: &str) -> PathBuf {
    let dir = target_tmpdir().join("hpc").join(name);
    let _ = Command::new("rm").arg("-rf").arg(&dir).status();
    fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

/// A copy of the template rootfs at `dir/rootfs`, and `dir/out` for the
/// checker's copy of the loader cache, both owned by `owner` (uid = gid).
fn rootfs_owned_by(host: &SimHost, dir: &Path, owner: u32) -> (PathBuf, PathBuf) {
    let rootfs = dir.join("rootfs");
    copy_template(host, &rootfs);
    let out = dir.join("out");
    fs::create_dir_all(&out).expect("create out/");
    for path in [&rootfs, &out] {
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{owner}:{owner}"))
            .arg(path)
            .status()
            .expect("run chown");
        assert!(status.success(), "chown {} failed", path.display());
    }
    (rootfs, out)
}

/// `dir/config.toml`, the host's config logging at debug to `dir/cli.log`,
/// which is made beforehand writable by anyone: the CLI runs as a
/// container's root, which may be no host user. Both paths.
fn logging_config(host: &SimHost, dir: &Path) -> (PathBuf, PathBuf) {
    let (config, log) = (dir.join("config.toml"), dir.join("cli.log"));
    write_hook_config(host, &config, &log, "debug");
    fs::write(&log, "").unwrap();
    fs::set_permissions(&log, fs::Permissions::from_mode(0o666)).unwrap();
    (config, log)
}

/// `cp -a FROM/. TO`.
fn copy_dir(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(to)
        .status()
        .expect("run cp");
    assert!(status.success(), "cp -a {} failed", from.display());
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The container saw exactly the GPUs of `indices` (with nvidiactl and the
/// UVM nodes), each opening with ENXIO, no other GPU's node, `/dev/null`,
/// libcuda answering through its own loader cache, and nvidia-smi
/// reaching its "no driver" failure.
fn assert_sees_only(out: &Output, host: &SimHost, indices: &[u32]) {
    let (stdout, stderr) = text(out);
    let ctx = format!("\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(out.status.success(), "the container failed:{ctx}");
    let report = CheckerReport::parse(&stdout, &stderr);
    assert!(report.complete, "the checker did not finish:{ctx}");
    let minors: Vec<u32> = indices.iter().map(|i| gpu(host, *i).minor).collect();
    for (path, numbers) in node_specs(host, &minors) {
        let node = report
            .nodes
            .get(&path)
            .unwrap_or_else(|| panic!("{path} is missing in the container:{ctx}"));
        assert_eq!(node.kind, 'c', "{path}:{ctx}");
        assert_eq!(node.numbers, Some(numbers), "{path}:{ctx}");
        assert_eq!(node.open.as_deref(), Some("ENXIO"), "{path}:{ctx}");
    }
    for other in host
        .facts
        .gpus
        .iter()
        .filter(|g| !minors.contains(&g.minor))
    {
        let path = format!("/dev/nvidia{}", other.minor);
        assert!(
            !report.nodes.contains_key(&path),
            "{path}, another GPU's, is in the container:{ctx}"
        );
    }
    assert_eq!(report.devnull.as_deref(), Some("ok"), "/dev/null:{ctx}");
    assert_eq!(
        report.ldcache.get("libcuda.so.1").map(String::as_str),
        Some("yes"),
        "the container's loader cache lacks libcuda.so.1:{ctx}"
    );
    let cuda = report.cuda.as_ref().expect("a cuda line");
    assert!(cuda.loaded, "dlopen(libcuda.so.1) failed: {cuda:?}{ctx}");
    assert_eq!(
        cuda.field("version"),
        Some(host.facts.cuda_version.to_string().as_str()),
        "cuDriverGetVersion:{ctx}"
    );
    assert_eq!(report.smi_exit, Some(9), "nvidia-smi's exit:{ctx}");
}

// ------------------------------------------------------------------ LXC

/// LXC's lock files and `lxc.pivot` cgroups, which it leaves behind.
fn remove_lxc_leftovers() {
    for controller in fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        let _ = fs::remove_dir(controller.path().join("lxc.pivot"));
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn lxcs_packaged_nvidia_hook_gives_an_unprivileged_container_its_gpu() {
    require_tool("lxc-execute");
    let hook = Path::new("/usr/share/lxc/hooks/nvidia");
    assert!(
        hook.is_file(),
        "{} is missing: install lxc (integration/install-deps)",
        hook.display()
    );
    let host = real_host();
    let dir = scratch("lxc");
    let name = "hpc-lxc";
    let container = dir.join(name);
    fs::create_dir_all(&container).unwrap();
    // Container root is host uid 100000, as root's subordinate ids say.
    let (rootfs, _) = rootfs_owned_by(&host, &container, 100000);
    let uvm = host.facts.uvm_major;
    fs::write(
        container.join("config"),
        format!(
            "lxc.uts.name = {name}\n\
             lxc.rootfs.path = dir:{rootfs}\n\
             lxc.idmap = u 0 100000 65536\n\
             lxc.idmap = g 0 100000 65536\n\
             lxc.mount.auto = proc:mixed sys:ro\n\
             lxc.autodev = 1\n\
             lxc.net.0.type = empty\n\
             lxc.apparmor.profile = unconfined\n\
             lxc.cgroup.devices.deny = a\n\
             lxc.cgroup.devices.allow = c 1:3 rwm\n\
             lxc.cgroup.devices.allow = c 1:5 rwm\n\
             lxc.cgroup.devices.allow = c 1:9 rwm\n\
             lxc.cgroup.devices.allow = c 195:* rwm\n\
             lxc.cgroup.devices.allow = c {uvm}:* rwm\n\
             lxc.hook.mount = {hook}\n\
             lxc.environment = NVIDIA_VISIBLE_DEVICES=1,3\n\
             lxc.environment = NVIDIA_DRIVER_CAPABILITIES=compute,utility\n",
            rootfs = rootfs.display(),
            hook = hook.display(),
        ),
    )
    .unwrap();
    // A private /etc layer: our config (logging to a file: LXC does not
    // always keep a hook's stderr), and root's subordinate ids for LXC's
    // newuidmap; a private /run/lxc for its lock files.
    let (config, cli_log) = logging_config(&host, &dir);
    let etc = dir.join("etc");
    copy_dir(&etc_layer(&config), &etc);
    fs::write(etc.join("subuid"), "root:100000:65536\n").unwrap();
    fs::write(etc.join("subgid"), "root:100000:65536\n").unwrap();
    let link_dir = cli_link().parent().unwrap().to_path_buf();
    let log = dir.join("lxc.log");
    let script = "mkdir -p /run/lxc && mount -t tmpfs tmpfs /run/lxc && \
                  exec lxc-execute -n \"$1\" -P \"$2\" -l DEBUG -o \"$3\" -- /bin/sh -c \"$4\"";
    let argv: Vec<String> = [
        "sh",
        "-c",
        script,
        "lxc",
        name,
        dir.to_str().unwrap(),
        log.to_str().unwrap(),
        CONTAINER_SCRIPT,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let argv = over_etc(&etc, &argv);
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .env(
            "PATH",
            format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", link_dir.display()),
        )
        .output()
        .expect("run lxc-execute");
    remove_lxc_leftovers();
    let lxc_log = fs::read_to_string(&log).unwrap_or_default();
    // The packaged hook called us as an unprivileged caller, without --pid.
    assert!(
        lxc_log.contains("exec nvidia-container-cli --user configure --no-cgroups --ldconfig=@")
            && lxc_log
                .contains("--device=1,3 --compute --utility /usr/lib/x86_64-linux-gnu/lxc/rootfs"),
        "the hook's call is not LXC's:\n{lxc_log}"
    );
    let cli_log = fs::read_to_string(&cli_log).unwrap_or_default();
    assert!(
        cli_log.contains("user namespace: skipping the device cgroup, bind-mounting device nodes"),
        "{cli_log}"
    );
    assert_sees_only(&out, &host, &[1, 3]);
    // Files the hook made in the rootfs are the container root's.
    let cache = fs::metadata(rootfs.join("etc/ld.so.cache")).unwrap();
    assert_eq!((cache.uid(), cache.gid()), (100000, 100000));
}

// ------------------------------------------------------------------ enroot

/// What `enroot start` does before its hooks run, then the hook's call
/// (`$3...`), then what it does after them, reduced to what the checker
/// needs: /proc bound, the rootfs entered (enroot-switchroot pivots; a
/// chroot of the same namespaces shows the same files).
const ENROOT_LIKE: &str = r#"set -e
R=$0; OUT=$1; CLI=$2; shift 3
mount --bind "$R" "$R"
mount -o remount,bind,nosuid,nodev "$R"
mount -t tmpfs -o nosuid,noexec,mode=755 tmpfs "$R/dev"
for n in null zero full random urandom; do
  touch "$R/dev/$n"; mount --bind "/dev/$n" "$R/dev/$n"
done
"$CLI" "$@"
mount --rbind /proc "$R/proc"
mkdir -p "$R/out"; mount --bind "$OUT" "$R/out"
exec chroot "$R" /bin/sh -c "$CONTAINER_SCRIPT"
"#;

/// Runs `argv` (the CLI's arguments) as `enroot start` runs its hooks for
/// an unprivileged user: as `nobody`, in a user namespace mapping it to
/// itself with its capabilities kept, and a private mount namespace.
fn run_like_enroot(host: &SimHost, name: &str, argv: &[&str]) -> Output {
    for tool in ["unshare", "setpriv", "chroot"] {
        require_tool(tool);
    }
    let dir = scratch(name);
    let (rootfs, out) = rootfs_owned_by(host, &dir, 65534);
    let mut full: Vec<String> = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "unshare",
        "--user",
        "--map-current-user",
        "--keep-caps",
    ]
    .map(String::from)
    .to_vec();
    full.extend(
        [
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            ENROOT_LIKE,
        ]
        .map(String::from),
    );
    full.push(rootfs.to_str().unwrap().into());
    full.push(out.to_str().unwrap().into());
    full.push(cli_link().to_str().unwrap().into());
    full.push("nvidia-container-cli".into());
    full.extend(
        argv.iter()
            .map(|a| a.replace("ROOTFS", rootfs.to_str().unwrap())),
    );
    let full = over_etc(&etc_layer(&host.config), &full);
    Command::new(&full[0])
        .args(&full[1..])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CONTAINER_SCRIPT", CONTAINER_SCRIPT)
        .output()
        .expect("run unshare")
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn enroots_hook_call_in_its_user_namespace_gives_the_container_its_gpus() {
    let host = real_host();
    // 98-nvidia.sh for NVIDIA_VISIBLE_DEVICES=1,3,
    // NVIDIA_DRIVER_CAPABILITIES=compute,utility, NVIDIA_REQUIRE_CUDA=cuda>=12.0.
    let out = run_like_enroot(
        &host,
        "enroot",
        &[
            "--user",
            "configure",
            "--no-cgroups",
            "--ldconfig=@/sbin/ldconfig",
            "--device=1,3",
            "--compute",
            "--utility",
            "--require=cuda>=12.0",
            "ROOTFS",
        ],
    );
    assert_sees_only(&out, &host, &[1, 3]);
    let (_, stderr) = text(&out);
    assert!(
        stderr.contains("user namespace: skipping the device cgroup, bind-mounting device nodes"),
        "{stderr}"
    );
}

// ------------------------------------------------------------------ Apptainer

/// `apptainer exec --nvccli --contain` of a sandbox image (a directory: a
/// copy of the template rootfs) by Debian sid's packaged Apptainer, in the
/// sid-hpc root, with `NVIDIA_VISIBLE_DEVICES=visible`: as root, or as
/// `nobody`, when Apptainer (not setuid in Debian) makes a user namespace
/// of its own and passes `--user`. Our binary is its
/// `nvidia-container-cli`, a root-owned link found on Apptainer's default
/// binary path (`/usr/local/bin`). Its `--debug` log is on stderr.
fn apptainer_exec(host: &SimHost, name: &str, unprivileged: bool, visible: &str) -> Output {
    let root = sid_hpc();
    let dir = scratch(name);
    let owner = if unprivileged { 65534 } else { 0 };
    // An unprivileged user's sandbox is its own (Apptainer refuses an image
    // whose /usr/bin the user cannot write: nvidia-container-cli adds to it).
    let (image, _) = rootfs_owned_by(host, &dir, owner);
    // Its HOME and /tmp: scratch, so the cached root is never written.
    let (home, tmp, bin) = (dir.join("home"), dir.join("tmp"), dir.join("bin"));
    for path in [&home, &tmp, &bin] {
        fs::create_dir_all(path).unwrap();
    }
    std::os::unix::fs::chown(&home, Some(owner), Some(owner)).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777)).unwrap();
    std::os::unix::fs::symlink(hook_binary(), bin.join("nvidia-container-cli")).unwrap();
    let mut argv: Vec<String> = Vec::new();
    if unprivileged {
        argv.extend(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ]
            .map(String::from),
        );
    }
    argv.extend(["apptainer", "--debug", "exec", "--nvccli", "--contain"].map(String::from));
    if !unprivileged {
        // As root it asks for every capability; these machines lack this one.
        argv.extend(["--drop-caps", "CAP_SYS_RESOURCE"].map(String::from));
    }
    argv.push(image.to_str().unwrap().into());
    argv.extend(["/bin/sh", "-c", CONTAINER_SCRIPT].map(String::from));
    // Our config, and the /etc/hosts Apptainer binds (debootstrap's
    // minbase has none), over the root's /etc.
    let etc = dir.join("etc");
    copy_dir(&etc_layer(&host.config), &etc);
    fs::write(etc.join("hosts"), "127.0.0.1 localhost\n").unwrap();
    let argv = over_etc(&etc, &argv);
    let entry = Entry {
        binds: vec![repo().to_path_buf()],
        file_binds: vec![(bin, "/usr/local/bin".into()), (tmp, "/tmp".into())],
        cgroups: Cgroups::Host,
    };
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    // The cached root's places Apptainer could write: never written.
    let kept = ["etc", "root", "var/lib/apptainer", "usr/local"];
    let listing = || kept.map(|p| tree_listing(&root.dir.join(p)));
    let before = (listing(), host_mounts(), tree_listing(&host.dir));
    let out = root
        .command(&entry, &argv)
        .env("HOME", &home)
        .env("NVIDIA_VISIBLE_DEVICES", visible)
        .output()
        .expect("run apptainer in the sid-hpc root");
    assert!(
        before.0 == listing(),
        "Apptainer changed the sid-hpc root's {kept:?}"
    );
    assert_left_as_found(
        "apptainer",
        &before.1,
        &host.dir,
        &before.2,
        "after apptainer",
    );
    out
}

/// Apptainer's log of its call: `nvidia-container-cli binary: "…" args: […]`.
fn apptainer_call(out: &Output) -> String {
    let (_, stderr) = text(out);
    stderr
        .lines()
        .find_map(|l| {
            l.split_once("nvidia-container-cli binary: ")
                .map(|(_, c)| c.to_string())
        })
        .unwrap_or_else(|| panic!("Apptainer did not call nvidia-container-cli:\n{stderr}"))
}

/// Runs Apptainer for the GPUs `indices` and checks what it did: its call,
/// argv for argv (`--user` first in its own user namespace), the
/// container's GPUs, and how each GPU's node came: made with mknod as
/// root, bound in a user namespace.
fn check_apptainer(name: &str, unprivileged: bool, indices: &[u32]) {
    require_root();
    let host = real_host();
    let visible: Vec<String> = indices.iter().map(u32::to_string).collect();
    let visible = visible.join(",");
    let out = apptainer_exec(&host, name, unprivileged, &visible);
    assert_sees_only(&out, &host, indices);
    let user = if unprivileged { "\"--user\" " } else { "" };
    assert_eq!(
        apptainer_call(&out),
        format!(
            "\"/usr/local/bin/nvidia-container-cli\" args: [{user}\"configure\" \
             \"--no-cgroups\" \"--device={visible}\" \"--compute\" \"--utility\" \
             \"--ldconfig=@/usr/sbin/ldconfig\" \"/var/lib/apptainer/mnt/session/final\"]"
        )
    );
    let (stdout, _) = text(&out);
    for minor in indices.iter().map(|i| gpu(&host, *i).minor) {
        let bound = stdout.contains(&format!("mount /dev/nvidia{minor} "));
        assert_eq!(bound, unprivileged, "/dev/nvidia{minor} bound:\n{stdout}");
    }
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn apptainers_nvccli_as_root_gives_the_container_its_gpu() {
    check_apptainer("apptainer-root", false, &[2]);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn apptainers_nvccli_unprivileged_passes_user_and_binds_the_nodes() {
    check_apptainer("apptainer-user", true, &[1, 3]);
}

// ------------------------------------------------------------------ Incus

/// Incus's storage, and an image of the template rootfs (`$1`) whose init
/// only waits: `incus admin init` without a network (none is reachable).
const INCUS_SETUP: &str = r#"set -e
incus admin init --preseed <<EOF
storage_pools:
- name: default
  driver: dir
profiles:
- name: default
  devices:
    root: {path: /, pool: default, type: disk}
EOF
mkdir -p /tmp/image
cp -a "$1" /tmp/image/rootfs
rm -f /tmp/image/rootfs/sbin/init
printf '#!/bin/sh\nexec sleep 100000\n' >/tmp/image/rootfs/sbin/init
chmod 755 /tmp/image/rootfs/sbin/init
printf 'architecture: x86_64\ncreation_date: 1700000000\n' >/tmp/image/metadata.yaml
tar -C /tmp/image -czf /tmp/image.tar.gz metadata.yaml rootfs
incus image import /tmp/image.tar.gz --alias onh
"#;

/// `incus config device add c1 NAME TYPE OPTIONS…` (`kind_and_options`).
fn add_device(booted: &Booted, name: &str, kind_and_options: &[&str]) {
    let mut argv = vec!["incus", "config", "device", "add", "c1", name];
    argv.extend_from_slice(kind_and_options);
    booted.ok(&argv);
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn incus_nvidia_runtime_gives_an_unprivileged_container_its_gpu() {
    require_root();
    let host = real_host();
    let dir = scratch("incus");
    let template = template_rootfs(&host);
    let (mounts, driver) = (host_mounts(), tree_listing(&host.dir));
    let (config, log) = logging_config(&host, &dir);
    // Incus 7 (sid's incus-base) under systemd 262, booted as pid 1 of
    // the sid-hpc root; our binary is /usr/bin/nvidia-container-cli, as
    // the compat package installs it (incusd looks on its own PATH).
    let booted = Booted::boot(
        &sid_hpc(),
        &dir.join("booted"),
        &BootSetup {
            binds: &[repo()],
            etc_files: &[
                (
                    "oci-nvidia-hook/config.toml",
                    fs::read_to_string(&config).unwrap(),
                ),
                ("subuid", "root:1000000:1000000000\n".into()),
                ("subgid", "root:1000000:1000000000\n".into()),
            ],
            links: &[("/usr/bin/nvidia-container-cli", hook_binary())],
            nested: true,
        },
    );
    booted.ok(&["systemctl", "start", "incus.service"]);
    booted.ok(&["sh", "-c", INCUS_SETUP, "sh", template.to_str().unwrap()]);
    booted.ok(&["incus", "init", "onh", "c1", "-c", "nvidia.runtime=true"]);
    // Incus's `gpu` device looks its GPU up in /sys/bus/pci (and its
    // nodes in /dev): a simulated GPU is in neither, so it is refused.
    let g = gpu(&host, 2);
    add_device(&booted, "gpu0", &["gpu", &format!("pci={}", g.bus)]);
    let refused = booted.run(&["incus", "start", "c1"]);
    assert!(
        refused.stderr.contains(&format!(
            "Failed to start device \"gpu0\": Invalid PCI address (no device found): {}",
            g.bus
        )),
        "{}{}",
        refused.stdout,
        refused.stderr
    );
    booted.ok(&["incus", "config", "device", "remove", "c1", "gpu0"]);
    // What that device makes for an NVIDIA card with nvidia.runtime on: its
    // node alone, a unix-char device (the control and UVM nodes, libraries
    // and binaries are the hook's).
    let node = format!("/dev/nvidia{}", g.minor);
    booted.ok(&[
        "mknod",
        "-m",
        "666",
        &node,
        "c",
        "195",
        &g.minor.to_string(),
    ]);
    let (source, path) = (format!("source={node}"), format!("path={node}"));
    add_device(&booted, "gpu2", &["unix-char", &source, &path]);
    let started = booted.run(&["incus", "start", "c1"]);
    let lxc_log = booted.run(&["cat", "/var/log/incus/c1/lxc.log"]);
    let lxc_log = format!("{}{}", lxc_log.stdout, lxc_log.stderr);
    assert!(
        started.status.is_some_and(|s| s.success()),
        "incus start: {}{}\n{lxc_log}",
        started.stdout,
        started.stderr
    );
    let out = booted
        .command(&[
            "incus",
            "exec",
            "c1",
            "--",
            "/bin/sh",
            "-c",
            CONTAINER_SCRIPT,
        ])
        .output()
        .expect("run incus exec");
    assert_sees_only(&out, &host, &[2]);
    // The packaged hook (LXC 7's) called us in the container's user
    // namespace with Incus's NVIDIA_VISIBLE_DEVICES=none: no --device, so
    // only the control and UVM nodes are ours, the GPU's is Incus's.
    let cli_log = fs::read_to_string(&log).unwrap_or_default();
    for line in [
        "container rootfs /usr/lib/x86_64-linux-gnu/lxc/rootfs: user namespace: \
         skipping the device cgroup, bind-mounting device nodes",
        "container rootfs /usr/lib/x86_64-linux-gnu/lxc/rootfs: injected 3 device nodes",
    ] {
        assert!(cli_log.contains(line), "{line}\nnot in:\n{cli_log}");
    }
    drop(booted);
    assert_left_as_found("onh-booted-", &mounts, &host.dir, &driver, "after incus");
}

// ------------------------------------------------------------------ info, list

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn info_csv_and_list_read_as_incus_and_singularity_read_them() {
    let host = real_host();
    // Incus (and LXD) read `info --csv` with Go's encoding/csv, blank lines
    // skipped: record 2 is NVRM and CUDA versions, records from 4 on are
    // GPUs keyed by their Bus Location (field 5), minor in field 1.
    let csv = nvidia_cli_stdout(&host.config, &["info", "--csv"]);
    let records: Vec<Vec<&str>> = csv
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(records[0], ["NVRM version", "CUDA version"], "{csv}");
    assert_eq!(records[1][0], host.facts.driver_version, "{csv}");
    assert_eq!(records.len(), 3 + host.facts.gpus.len(), "{csv}");
    for record in &records[3..] {
        assert_eq!(record.len(), 7, "{csv}");
        let g = host
            .facts
            .gpus
            .iter()
            .find(|g| record[5].ends_with(g.bus.trim_start_matches("0000")))
            .unwrap_or_else(|| panic!("no GPU at {}:\n{csv}", record[5]));
        assert_eq!(record[1], g.minor.to_string(), "{csv}");
        assert_eq!(record[4], g.uuid, "{csv}");
    }
    // Singularity's legacy --nv runs `list --binaries --libraries` and
    // takes each line holding ".so" as a library, the others as binaries.
    let list = nvidia_cli_stdout(&host.config, &["list", "--binaries", "--libraries"]);
    let (libraries, binaries): (Vec<&str>, Vec<&str>) =
        list.lines().partition(|l| l.contains(".so"));
    assert!(
        binaries.iter().any(|b| b.ends_with("/nvidia-smi")),
        "{list}"
    );
    assert!(
        libraries
            .iter()
            .any(|l| l.ends_with(&format!("/libcuda.so.{}", host.facts.driver_version))),
        "{list}"
    );
    assert!(
        list.lines()
            .all(|l| l.starts_with('/') && Path::new(l).exists()),
        "{list}"
    );
}

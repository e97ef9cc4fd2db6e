//! The command lines NVIDIA's CLI is called with, and its refusals.

use super::*;

fn parse_args(args: &[&str]) -> Result<Parsed, Error> {
    let args: Vec<String> = args.iter().map(|a| (*a).to_string()).collect();
    parse(&args)
}

fn invocation(args: &[&str]) -> Invocation {
    match parse_args(args) {
        Ok(Parsed::Run(invocation)) => *invocation,
        other => panic!("{args:?}: {other:?}"),
    }
}

fn configure(args: &[&str]) -> Configure {
    match invocation(args).command {
        Command::Configure(configure) => configure,
        other => panic!("{args:?}: {other:?}"),
    }
}

fn list(args: &[&str]) -> List {
    match invocation(args).command {
        Command::List(list) => list,
        other => panic!("{args:?}: {other:?}"),
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

use Capability::*;

#[test]
fn containerds_call_is_every_capability_for_its_devices_with_kmods_ignored() {
    // containerd 1.6 `ctr run --gpus 1 --gpus 3` (pkg/cri … nvidia.go).
    let parsed = invocation(&[
        "--load-kmods",
        "configure",
        "--device=1,3",
        "--compute",
        "--compat32",
        "--graphics",
        "--utility",
        "--video",
        "--display",
        "--pid=4242",
        "/run/containerd/io.containerd.runtime.v2.task/ns/id/rootfs",
    ]);
    assert!(parsed.globals.load_kmods);
    assert_eq!(
        parsed.command,
        Command::Configure(Configure {
            pid: Some(4242),
            rootfs: PathBuf::from("/run/containerd/io.containerd.runtime.v2.task/ns/id/rootfs"),
            asked: Asked {
                devices: strings(&["1,3"]),
                capabilities: vec![Compute, Compat32, Graphics, Utility, Video, Display],
                ..Asked::default()
            },
            ldconfig: None,
            no_cgroups: false,
            no_devbind: false,
            cuda_compat: None,
        })
    );
}

#[test]
fn nvidias_current_hook_passes_every_option_it_may_and_each_is_taken() {
    // nvidia-container-runtime-hook (legacy mode) with every config key set.
    let parsed = invocation(&[
        "--root=/",
        "--load-kmods",
        "--no-create-imex-channels",
        "--no-pivot",
        "--debug=/dev/stderr",
        "--ldcache=/etc/ld.so.cache",
        "--user=root:video",
        "configure",
        "--cuda-compat-mode=ldconfig",
        "--ldconfig=@/sbin/ldconfig.real",
        "--no-cgroups",
        "--device=GPU-6d48d5d1-733b-20cf-6426-f7541bcf8ff9",
        "--mig-config=all",
        "--mig-monitor=all",
        "--compute",
        "--utility",
        "--ngx",
        "--require=cuda>=12.4 brand=tesla,driver>=470,driver<471",
        "--pid=81328",
        "/var/lib/docker/overlay2/3e11/merged",
    ]);
    assert_eq!(parsed.globals.root, Some(PathBuf::from("/")));
    assert_eq!(parsed.globals.user, Some(Some("root:video".into())));
    let Command::Configure(c) = parsed.command else {
        panic!("not configure");
    };
    assert_eq!(c.cuda_compat, Some(CudaCompat::Ldconfig));
    assert!(c.no_cgroups && !c.no_devbind);
    assert_eq!(c.asked.capabilities, vec![Compute, Utility, Ngx]);
    assert_eq!(c.asked.mig_config, strings(&["all"]));
    assert_eq!(c.pid, Some(81328));
}

#[test]
fn imex_channels_are_kept_and_unknown_compat_modes_refused() {
    let Command::Configure(c) = invocation(&[
        "configure",
        "--imex-channel=0",
        "--imex-channel",
        "3",
        "--pid=1",
        "/r",
    ])
    .command
    else {
        panic!("not configure");
    };
    assert_eq!(c.asked.imex_channels, strings(&["0", "3"]));
    assert_eq!(
        parse_args(&["configure", "--cuda-compat-mode=hook", "--pid=1", "/r"]),
        Err(Error::BadCudaCompatMode {
            value: "hook".into()
        })
    );
}

#[test]
fn nvidias_legacy_hook_call_keeps_its_requirement_and_ignores_ldconfig() {
    let c = configure(&[
        "--load-kmods",
        "configure",
        "--ldconfig=@/sbin/ldconfig.real",
        "--device=all",
        "--compute",
        "--utility",
        "--require=cuda>=12.0",
        "--pid=77",
        "/var/lib/b/rootfs",
    ]);
    assert_eq!(c.pid, Some(77));
    assert_eq!(c.rootfs, PathBuf::from("/var/lib/b/rootfs"));
    assert_eq!(c.ldconfig.as_deref(), Some("@/sbin/ldconfig.real"));
    assert_eq!(c.asked.devices, strings(&["all"]));
    assert_eq!(c.asked.capabilities, vec![Compute, Utility]);
    assert_eq!(c.asked.requirements, strings(&["cuda>=12.0"]));
}

#[test]
fn configure_takes_short_options_separate_values_and_options_after_rootfs() {
    let c = configure(&[
        "configure",
        "-p",
        "9",
        "-d",
        "0",
        "-d1",
        "-cuvgDn",
        "-r",
        "cuda>=11.0 brand=tesla",
        "-r",
        "driver>=450",
        "-l",
        "/sbin/ldconfig",
        "/rootfs",
        "--mig-config",
        "all",
        "--mig-monitor=all",
        "--no-cgroups",
        "--no-devbind",
    ]);
    assert_eq!(c.pid, Some(9));
    assert_eq!(c.rootfs, PathBuf::from("/rootfs"));
    assert_eq!(c.asked.devices, strings(&["0", "1"]));
    assert_eq!(
        c.asked.capabilities,
        vec![Compute, Utility, Video, Graphics, Display, Ngx]
    );
    assert_eq!(
        c.asked.requirements,
        strings(&["cuda>=11.0 brand=tesla", "driver>=450"])
    );
    assert_eq!(c.asked.mig_config, strings(&["all"]));
    assert_eq!(c.asked.mig_monitor, strings(&["all"]));
    assert!(c.no_cgroups && c.no_devbind);
    assert_eq!(c.ldconfig.as_deref(), Some("/sbin/ldconfig"));
}

#[test]
fn configure_without_device_or_capability_asks_for_the_driver_alone() {
    let c = configure(&["configure", "--pid=5", "/r"]);
    assert_eq!(c.asked, Asked::default());
    assert!(!c.no_cgroups && !c.no_devbind);
}

#[test]
fn the_last_pid_wins_and_long_options_take_unique_prefixes() {
    let c = configure(&[
        "configure",
        "--pid=5",
        "--pi",
        "6",
        "--dev=2",
        "--compu",
        "/r",
    ]);
    assert_eq!(c.pid, Some(6));
    assert_eq!(c.asked.devices, strings(&["2"]));
    assert_eq!(c.asked.capabilities, vec![Compute]);
}

#[test]
fn global_options_take_their_long_and_short_forms() {
    let globals = invocation(&[
        "-k",
        "--debug=/var/log/nvc.log",
        "--ldcache",
        "/etc/ld.so.cache",
        "-r",
        "/run/nvidia/driver",
        "--user=1000:1000",
        "--no-pivot",
        "--no-create-imex-channels",
        "info",
    ])
    .globals;
    assert_eq!(
        globals,
        Globals {
            load_kmods: true,
            debug: Some(PathBuf::from("/var/log/nvc.log")),
            ldcache: Some(PathBuf::from("/etc/ld.so.cache")),
            root: Some(PathBuf::from("/run/nvidia/driver")),
            user: Some(Some("1000:1000".into())),
            no_pivot: true,
            no_create_imex_channels: true,
        }
    );
    let globals = invocation(&["-kn", "-d", "/f", "-u", "-l/c", "--root", "/d", "info"]).globals;
    assert!(globals.load_kmods && globals.no_pivot);
    assert_eq!(globals.debug, Some(PathBuf::from("/f")));
    assert_eq!(globals.user, Some(None));
    assert_eq!(globals.ldcache, Some(PathBuf::from("/c")));
    assert_eq!(globals.root, Some(PathBuf::from("/d")));
    // `-u` takes its value attached only, as getopt takes an optional one.
    assert_eq!(
        invocation(&["-u1000", "info"]).globals.user,
        Some(Some("1000".into()))
    );
    assert_eq!(invocation(&["--user", "info"]).globals.user, Some(None));
}

#[test]
fn info_takes_csv() {
    assert_eq!(invocation(&["info"]).command, Command::Info { csv: false });
    assert_eq!(
        invocation(&["info", "--csv"]).command,
        Command::Info { csv: true }
    );
}

#[test]
fn list_without_options_lists_everything_for_every_gpu() {
    let l = list(&["list"]);
    assert_eq!(l.asked.devices, strings(&["all"]));
    assert_eq!(l.asked.capabilities, Capability::ALL.to_vec());
    assert!(l.asked.mig_config.is_empty() && l.asked.mig_monitor.is_empty());
    assert_eq!(
        l.sections,
        Sections {
            devices: true,
            binaries: true,
            libraries: true,
            ipcs: true,
            firmwares: true
        }
    );
}

#[test]
fn list_with_options_lists_only_what_they_name() {
    let l = list(&["list", "--libraries"]);
    assert!(l.asked.devices.is_empty());
    assert_eq!(
        l.sections,
        Sections {
            libraries: true,
            ..Sections::default()
        }
    );
    // Every capability's libraries, the 32-bit ones only with --compat32.
    assert!(!l.asked.capabilities.contains(&Compat32));
    assert_eq!(l.asked.capabilities.len(), 6);
    let l = list(&["list", "-l", "--compat32"]);
    assert_eq!(l.asked.capabilities.len(), 7);

    let l = list(&[
        "list",
        "-d",
        "0",
        "--device=GPU-x",
        "-bif",
        "--mig-config=all",
    ]);
    assert_eq!(l.asked.devices, strings(&["0", "GPU-x"]));
    assert_eq!(l.asked.mig_config, strings(&["all"]));
    assert_eq!(
        l.sections,
        Sections {
            devices: true,
            binaries: true,
            ipcs: true,
            firmwares: true,
            libraries: false,
        }
    );
    // Capability flags, ours, narrow what is listed.
    let l = list(&["list", "--libraries", "--utility"]);
    assert_eq!(l.asked.capabilities, vec![Utility]);
}

#[test]
fn list_with_filters_only_lists_what_they_select() {
    let every = Sections {
        devices: true,
        binaries: true,
        libraries: true,
        ipcs: true,
        firmwares: true,
    };
    let l = list(&["list", "--compute"]);
    assert_eq!(l.sections, every);
    assert!(l.asked.devices.is_empty());
    let l = list(&["list", "--device=1", "--utility"]);
    assert_eq!(l.sections, every);
    assert_eq!(l.asked.capabilities, vec![Utility]);
    let l = list(&["list", "--device=1"]);
    assert_eq!(
        l.sections,
        Sections {
            devices: true,
            ..Sections::default()
        }
    );
    let l = list(&["list", "--mig-config=0"]);
    assert!(l.sections.devices && !l.sections.libraries);
}

#[test]
fn version_and_help_are_answered_at_either_level() {
    assert_eq!(parse_args(&["--version"]), Ok(Parsed::Version));
    assert_eq!(parse_args(&["-V"]), Ok(Parsed::Version));
    assert_eq!(parse_args(&["configure", "-V"]), Ok(Parsed::Version));
    let Ok(Parsed::Help(text)) = parse_args(&["--help"]) else {
        panic!("no help");
    };
    assert!(
        text.contains("--load-kmods") && text.contains("configure"),
        "{text}"
    );
    let Ok(Parsed::Help(text)) = parse_args(&["configure", "--help"]) else {
        panic!("no help");
    };
    assert!(
        text.contains("--pid=PID") && text.contains("--no-devbind"),
        "{text}"
    );
    assert!(matches!(parse_args(&["list", "-?"]), Ok(Parsed::Help(_))));
}

#[test]
fn an_unknown_option_is_named_with_what_nvidias_cli_takes() {
    let err = parse_args(&["configure", "--gpus=all", "--pid=1", "/r"]).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("nvidia-container-cli configure: unknown option --gpus; NVIDIA's CLI takes --pid=PID (-p), --device=ID (-d)"),
        "{text}"
    );
    assert!(
        text.contains("--no-devbind") && !text.contains('\n'),
        "{text}"
    );
    let text = parse_args(&["--config=/x", "info"])
        .unwrap_err()
        .to_string();
    assert!(
        text.starts_with(
            "nvidia-container-cli: unknown option --config; NVIDIA's CLI takes --debug=FILE (-d)"
        ),
        "{text}"
    );
    // A global option after the command is the command's to refuse.
    let text = parse_args(&["info", "--load-kmods"])
        .unwrap_err()
        .to_string();
    assert!(text.contains("info: unknown option --load-kmods"), "{text}");
    // NVIDIA's `list` takes no -c.
    assert!(parse_args(&["list", "-c"]).is_err());
}

#[test]
fn malformed_command_lines_are_refused_naming_the_fault() {
    assert_eq!(parse_args(&[]), Err(Error::CliNoCommand));
    assert_eq!(parse_args(&["-k"]), Err(Error::CliNoCommand));
    assert_eq!(
        parse_args(&["setup"]),
        Err(Error::CliUnknownCommand {
            command: "setup".into()
        })
    );
    assert_eq!(parse_args(&["configure", "--pid=1"]), Err(Error::NoRootfs));
    assert_eq!(parse_args(&["configure"]), Err(Error::NoRootfs));
    for rootfs in ["rootfs", "/", "//", ""] {
        assert_eq!(
            parse_args(&["configure", "--pid=1", rootfs]),
            Err(Error::BadRootfs {
                rootfs: rootfs.into()
            }),
            "{rootfs:?}"
        );
    }
    for pid in ["0", "-1", "x", "", "+3", "4294967295"] {
        assert_eq!(
            parse_args(&["configure", &format!("--pid={pid}"), "/r"]),
            Err(Error::BadPid { value: pid.into() }),
            "{pid:?}"
        );
    }
    assert_eq!(
        parse_args(&["configure", "--pid=1", "/r", "/s"]),
        Err(Error::CliExtra {
            command: "configure",
            argument: "/s".into()
        })
    );
    assert_eq!(
        parse_args(&["info", "extra"]),
        Err(Error::CliExtra {
            command: "info",
            argument: "extra".into()
        })
    );
    assert_eq!(
        parse_args(&["--root=relative", "info"]),
        Err(Error::NotAbsolute {
            option: "--root",
            value: "relative".into()
        })
    );
    assert_eq!(
        parse_args(&["configure", "--pid=1", "/r\u{FFFD}"]),
        Err(Error::NotUtf8 { option: "ROOTFS" })
    );
    assert!(matches!(
        parse_args(&["configure", "--pid"]),
        Err(Error::CliOption {
            problem: getopt::Problem::MissingValue { .. },
            ..
        })
    ));
    assert!(matches!(
        parse_args(&["info", "--csv=yes"]),
        Err(Error::CliOption {
            problem: getopt::Problem::UnexpectedValue { .. },
            ..
        })
    ));
}

#[test]
fn options_before_the_command_never_reach_it_and_double_dash_ends_them() {
    let parsed = invocation(&["-k", "--", "info"]);
    assert!(parsed.globals.load_kmods);
    assert_eq!(parsed.command, Command::Info { csv: false });
    // After `--`, a dash-led ROOTFS is an operand (and refused as relative).
    assert_eq!(
        parse_args(&["configure", "--pid=1", "--", "-r"]),
        Err(Error::BadRootfs {
            rootfs: "-r".into()
        })
    );
}

/// The argv LXC's `hooks/nvidia` (Debian 12's `liblxc-common`) builds for
/// an unprivileged container: `--user` among the global options, no `--pid`.
#[test]
fn lxcs_mount_hook_call_configures_its_own_namespaces() {
    let parsed = invocation(&[
        "--debug=/var/lib/lxc/c1/hook/nvidia.log",
        "--user",
        "configure",
        "--no-cgroups",
        "--ldconfig=@/sbin/ldconfig",
        "--device=0",
        "--compute",
        "--utility",
        "--require=cuda>=12.0",
        "/usr/lib/x86_64-linux-gnu/lxc/rootfs",
    ]);
    assert_eq!(parsed.globals.user, Some(None));
    let Command::Configure(c) = parsed.command else {
        panic!("{:?}", parsed.command)
    };
    assert_eq!(c.pid, None);
    assert!(c.no_cgroups && !c.no_devbind);
    assert_eq!(c.ldconfig.as_deref(), Some("@/sbin/ldconfig"));
    assert_eq!(c.asked.devices, strings(&["0"]));
    assert_eq!(c.asked.capabilities, vec![Compute, Utility]);
    assert_eq!(c.asked.requirements, strings(&["cuda>=12.0"]));
    assert_eq!(
        c.rootfs,
        PathBuf::from("/usr/lib/x86_64-linux-gnu/lxc/rootfs")
    );
}

/// enroot's `98-nvidia.sh` (`--user`, `--debug=/dev/stderr` when
/// `NVIDIA_DEBUG_LOG` is set) and Apptainer's `--nvccli` (`--user` only in
/// a user namespace, `--ldconfig` last but one): no `--pid` either.
#[test]
fn enroot_and_apptainer_calls_parse_without_a_pid() {
    let enroot = configure(&[
        "--user",
        "--debug=/dev/stderr",
        "configure",
        "--no-cgroups",
        "--ldconfig=@/usr/sbin/ldconfig",
        "--device=1,2",
        "--utility",
        "--compute",
        "/run/enroot/pyxis_1.0",
    ]);
    assert_eq!((enroot.pid, enroot.no_cgroups), (None, true));
    assert_eq!(enroot.asked.devices, strings(&["1,2"]));
    let apptainer = configure(&[
        "configure",
        "--no-cgroups",
        "--device=all",
        "--compute",
        "--utility",
        "--ldconfig=@/sbin/ldconfig",
        "/var/lib/apptainer/mnt/session/final",
    ]);
    assert_eq!(apptainer.pid, None);
    assert_eq!(
        apptainer.rootfs,
        PathBuf::from("/var/lib/apptainer/mnt/session/final")
    );
}

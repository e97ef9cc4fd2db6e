use super::policy::effective;
use super::*;
use crate::host::driver::{CapFile, MigDevice};
use crate::planning::device_class::Class;
use crate::planning::plan::tests::inventory;
use crate::planning::plan::MountKind;
use crate::planning::request::{DeviceId, ImexChannels};

fn container(env: &[&str], privileged: bool, device_mounts: &[&str]) -> Container {
    Container {
        rootfs: "/r".into(),
        env: env.iter().map(|e| e.to_string()).collect(),
        user_namespace: false,
        privileged,
        device_mounts: device_mounts
            .iter()
            .filter(|d| !d.starts_with("imex/"))
            .map(|d| d.to_string())
            .collect(),
        imex_mounts: device_mounts
            .iter()
            .filter_map(|d| d.strip_prefix("imex/"))
            .map(|d| d.to_string())
            .collect(),
        devices: Vec::new(),
        systemd_scope: None,
    }
}

fn of_container(config: &Config, c: &Container) -> Result<Effective> {
    effective(config, Source::Container(c))
}

fn effective_of(config: &Config, source: Source<'_>) -> Effective {
    effective(config, source).unwrap()
}

fn flags<'a>(devices: &'a str, capabilities: &'a str) -> Source<'a> {
    Source::Flags {
        devices,
        capabilities,
        env: &[],
    }
}

fn config_supporting(caps: &str) -> Config {
    Config {
        supported_capabilities: Capabilities::parse(caps).unwrap(),
        ..Config::default()
    }
}

/// The plan for `source` on the synthetic three-GPU host, for a Debian image.
fn plan_on(inventory: &Inventory, config: &Config, source: Source<'_>) -> Result<Plan> {
    let effective = effective(config, source)?;
    build(
        &effective,
        &mut inventory.clone(),
        &ImageLayout::Debian.into(),
    )
}

#[test]
fn volume_mounts_win_over_the_variable_only_when_accepted() {
    let c = container(
        &["NVIDIA_VISIBLE_DEVICES=all"],
        false,
        &["1", "GPU-abcdef01-2345-6789-abcd-ef0123456789"],
    );
    let req = of_container(&Config::default(), &c).unwrap().request;
    assert_eq!(req.devices, DeviceSelection::All);
    let config = Config {
        accept_volume_mounts: true,
        ..Config::default()
    };
    let req = of_container(&config, &c).unwrap().request;
    assert_eq!(
        req.devices,
        DeviceSelection::parse(Some("1,GPU-abcdef01-2345-6789-abcd-ef0123456789")).unwrap()
    );
}

#[test]
fn unprivileged_env_is_ignored_when_configured() {
    let config = Config {
        accept_env_when_unprivileged: false,
        ..Config::default()
    };
    let c = container(&["NVIDIA_VISIBLE_DEVICES=all"], false, &[]);
    assert!(of_container(&config, &c).unwrap().is_void());
    let c = container(&["NVIDIA_VISIBLE_DEVICES=all"], true, &[]);
    assert_eq!(
        of_container(&config, &c).unwrap().request.devices,
        DeviceSelection::All
    );
}

/// cuda_image_test.go TestImexChannelRequests (and the hook's
/// getImexChannels): accepted mounts win, the variable counts for a
/// privileged container or when unprivileged variables are accepted.
#[test]
fn imex_channels_follow_nvidias_sources_and_privilege() {
    let strict = Config {
        accept_env_when_unprivileged: false,
        accept_volume_mounts: true,
        ..Config::default()
    };
    let loose = Config {
        accept_volume_mounts: true,
        ..Config::default()
    };
    let env = ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_IMEX_CHANNELS=1,2"];
    let table: &[(&Config, bool, &[&str], ImexChannels)] = &[
        (&strict, true, &[], ImexChannels::List(vec![1, 2])),
        (&loose, false, &[], ImexChannels::List(vec![1, 2])),
        (&strict, true, &["imex/3"], ImexChannels::List(vec![3])),
        (
            &Config::default(),
            true,
            &["imex/3"],
            ImexChannels::List(vec![1, 2]),
        ),
        (
            &loose,
            false,
            &["0", "imex/4", "imex/3"],
            ImexChannels::List(vec![3, 4]),
        ),
    ];
    for (config, privileged, mounts, want) in table {
        let c = container(&env, *privileged, mounts);
        let got = of_container(config, &c).unwrap().request.imex;
        assert_eq!(&got, want, "privileged {privileged}, mounts {mounts:?}");
    }
    // Device mounts, unprivileged, variables not accepted: the GPUs come,
    // the variable's channels do not.
    let c = container(&env, false, &["0"]);
    let effective = of_container(&strict, &c).unwrap();
    assert!(!effective.is_void());
    assert_eq!(effective.request.imex, ImexChannels::None);
    // A bad channel is refused, naming it.
    let c = container(
        &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=x"],
        true,
        &[],
    );
    let err = of_container(&Config::default(), &c).unwrap_err();
    assert!(err.to_string().contains("\"x\""), "{err}");
    // NVIDIA's CLI: `--imex-channel`, joined.
    let mut a = asked(&["0"], &[Capability::Utility], &[]);
    a.imex_channels = vec!["2".into(), "0".into()];
    let req = effective_of(&Config::default(), argv(&a, None)).request;
    assert_eq!(req.imex, ImexChannels::List(vec![0, 2]));
}

/// gated.go: read from the environment of any container that asks for a
/// device, whatever its privilege; never for one that asks for none.
#[test]
fn gated_devices_come_with_any_device_request() {
    let env = [
        "NVIDIA_VISIBLE_DEVICES=none",
        "NVIDIA_GDS=enabled",
        "NVIDIA_MOFED=enabled",
    ];
    let req = of_container(&Config::default(), &container(&env, false, &[]))
        .unwrap()
        .request;
    let on = |name| {
        req.gated
            .contains(Class::named(name).expect("a device class"))
    };
    assert!(on("gds") && on("mofed") && !on("nvswitch") && !on("gdrcopy"));
    let void = ["NVIDIA_GDS=enabled"];
    let effective = of_container(&Config::default(), &container(&void, true, &[])).unwrap();
    assert!(effective.is_void());
    assert!(!effective.request.gated.any());
}

/// Under the strict policy (`accept-env-when-unprivileged = false`) an
/// unprivileged container's gated variables enable nothing, whatever its
/// device mounts gave it; a privileged one's, and an administrator's
/// `--enable`, still do.
#[test]
fn gated_devices_follow_the_strict_policy() {
    let strict = Config {
        accept_env_when_unprivileged: false,
        accept_volume_mounts: true,
        ..Config::default()
    };
    let env = [
        "NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices",
        "NVIDIA_GDS=enabled",
        "NVIDIA_MOFED=enabled",
        "NVIDIA_NVSWITCH=enabled",
        "NVIDIA_GDRCOPY=enabled",
    ];
    let unprivileged = of_container(&strict, &container(&env, false, &["0"])).unwrap();
    assert!(!unprivileged.is_void());
    assert!(!unprivileged.request.gated.any());
    let privileged = of_container(&strict, &container(&env, true, &["0"])).unwrap();
    assert!(Class::all().all(|c| privileged.request.gated.contains(c)));
    // The default policy reads every container's, as NVIDIA's does.
    let loose = Config {
        accept_volume_mounts: true,
        ..Config::default()
    };
    let default = of_container(&loose, &container(&env, false, &["0"])).unwrap();
    assert!(Class::all().all(|c| default.request.gated.contains(c)));
}

#[test]
fn unsupported_capabilities_are_dropped_for_containers_and_flags_alike() {
    let config = config_supporting("utility,compute");
    let c = container(
        &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"],
        false,
        &[],
    );
    assert_eq!(
        of_container(&config, &c)
            .unwrap()
            .request
            .capabilities
            .to_string(),
        "compute,utility"
    );
    let listed = effective(&config, flags("0", "all")).unwrap();
    assert_eq!(listed.request.capabilities.to_string(), "compute,utility");
}

#[test]
fn list_drops_what_the_host_does_not_offer_as_the_hook_does() {
    // supported-capabilities = "utility": a compute request gets no nvidia-uvm, through either source.
    let config = config_supporting("utility");
    let inventory = inventory();
    let listed = plan_on(&inventory, &config, flags("0", "compute")).unwrap();
    let c = container(
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=compute",
        ],
        false,
        &[],
    );
    let hooked = plan_on(&inventory, &config, Source::Container(&c)).unwrap();
    assert_eq!(listed, hooked);
    assert!(
        !listed
            .devices
            .iter()
            .any(|d| d.path.to_string_lossy().contains("uvm")),
        "{listed:#?}"
    );
}

#[test]
fn flags_and_environment_plan_the_same_for_the_same_request() {
    let inventory = inventory();
    let config = Config::default();
    for (devices, caps) in [
        ("all", "utility,compute"),
        ("0,2", "compute,utility,graphics,compat32"),
        ("none", "utility"),
        ("GPU-00000001-0000-0000-0000-000000000000", "compute"),
        ("0000:db:00.0", "video"),
    ] {
        let env = [
            format!("NVIDIA_VISIBLE_DEVICES={devices}"),
            format!("NVIDIA_DRIVER_CAPABILITIES={caps}"),
        ];
        let env: Vec<&str> = env.iter().map(String::as_str).collect();
        let c = container(&env, false, &[]);
        assert_eq!(
            plan_on(&inventory, &config, flags(devices, caps)).unwrap(),
            plan_on(&inventory, &config, Source::Container(&c)).unwrap(),
            "{devices} {caps}"
        );
    }
}

/// `list --jetpack csv-mounts=all` asks for every CSV file as the image's
/// variable does; `none` asks too (the files without the nodes).
#[test]
fn flags_ask_for_every_csv_file_as_the_jetpack_variable_does() {
    let config = Config::default();
    let env = ["NVIDIA_REQUIRE_JETPACK=csv-mounts=all".to_string()];
    for devices in ["all", "0", "none"] {
        let source = Source::Flags {
            devices,
            capabilities: "utility,compute",
            env: &env,
        };
        assert!(
            effective_of(&config, source).request.all_csv_files,
            "{devices}"
        );
        assert!(
            !effective_of(&config, flags(devices, "utility"))
                .request
                .all_csv_files
        );
    }
    let c = container(
        &[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_JETPACK=csv-mounts=all",
        ],
        false,
        &[],
    );
    assert!(of_container(&config, &c).unwrap().request.all_csv_files);
}

#[test]
fn mig_management_needs_a_privileged_container() {
    let env = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"];
    let err = of_container(&Config::default(), &container(&env, false, &[])).unwrap_err();
    assert!(
        err.to_string().contains("NVIDIA_MIG_CONFIG_DEVICES")
            && err.to_string().contains("CAP_SYS_ADMIN"),
        "{err}"
    );
    assert!(
        of_container(&Config::default(), &container(&env, true, &[]))
            .unwrap()
            .request
            .mig_config
    );
    let env = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_MONITOR_DEVICES=all"];
    assert!(of_container(&Config::default(), &container(&env, false, &[])).is_err());
}

#[test]
fn a_container_asking_for_no_gpu_is_never_checked() {
    // A malformed requirement in a non-GPU image must not stop it.
    let c = container(&["NVIDIA_REQUIRE_CUDA=cuda>>=12"], false, &[]);
    let effective = of_container(&Config::default(), &c).unwrap();
    assert!(effective.is_void());
    assert!(effective.requirements.is_empty());
    let c = container(
        &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>>=12"],
        false,
        &[],
    );
    assert!(of_container(&Config::default(), &c).is_err());
}

#[test]
fn user_namespace_binds_device_nodes() {
    let mut c = container(&["NVIDIA_VISIBLE_DEVICES=0"], false, &[]);
    assert_eq!(
        of_container(&Config::default(), &c).unwrap().node_mode,
        NodeMode::Mknod
    );
    c.user_namespace = true;
    let effective = of_container(&Config::default(), &c).unwrap();
    assert_eq!(effective.node_mode, NodeMode::Bind);
    let plan = build(&effective, &mut inventory(), &ImageLayout::Debian.into()).unwrap();
    assert_eq!(plan.node_mode, NodeMode::Bind);
}

#[test]
fn plan_records_the_selected_devices_once_each_in_the_order_asked() {
    let plan = plan_on(&inventory(), &Config::default(), flags("2,0,2", "utility")).unwrap();
    let selected: Vec<(u32, &str)> = plan
        .selected
        .iter()
        .map(|d| (d.gpu, d.bus.as_str()))
        .collect();
    assert_eq!(selected, [(2, "0000:db:00.0"), (0, "0000:1b:00.0")]);
}

/// The synthetic host with NVML's answer: GPU 1 split into one MIG device.
fn mig_inventory() -> Inventory {
    let mut inventory = inventory();
    let cap = |minor: u32| CapFile {
        rel: format!("capabilities/gpu1/mig/gi1/access{minor}").into(),
        path: format!("/sim/proc/driver/nvidia/capabilities/gpu1/mig/gi1/access{minor}").into(),
        minor,
    };
    for minor in [12, 13] {
        inventory.nodes.push(crate::host::driver::Node {
            role: crate::host::driver::NodeRole::Capability,
            path: format!("/dev/nvidia-caps/nvidia-cap{minor}").into(),
            host_path: format!("/sim/dev/nvidia-caps/nvidia-cap{minor}").into(),
            major: 508,
            minor,
            state: crate::host::driver::NodeState::Ok {
                mode: 0o444,
                gid: 0,
            },
        });
    }
    inventory.mig = Some(vec![MigDevice {
        parent: 1,
        index: 0,
        uuid: "MIG-11111111-2222-3333-4444-555555555555".into(),
        gpu_instance: 1,
        compute_instance: 0,
        gi_access: cap(12),
        ci_access: cap(13),
    }]);
    inventory
}

#[test]
fn a_mig_device_plans_the_same_through_flags_and_environment() {
    let inventory = mig_inventory();
    let config = Config::default();
    let listed = plan_on(&inventory, &config, flags("1:0", "compute")).unwrap();
    let c = container(
        &[
            "NVIDIA_VISIBLE_DEVICES=MIG-11111111-2222-3333-4444-555555555555",
            "NVIDIA_DRIVER_CAPABILITIES=compute",
        ],
        false,
        &[],
    );
    assert_eq!(
        listed,
        plan_on(&inventory, &config, Source::Container(&c)).unwrap()
    );
    let caps: Vec<u32> = listed
        .devices
        .iter()
        .filter(|d| d.major == 508)
        .map(|d| d.minor)
        .collect();
    assert_eq!(caps, [12, 13]);
    assert_eq!(
        listed.selected[0].mig.as_deref(),
        Some("MIG-11111111-2222-3333-4444-555555555555")
    );
}

#[test]
fn a_mig_request_looks_for_nvml_whatever_capabilities_it_asks() {
    // NVML is a utility library: a compute-only MIG request must still find it.
    let effective = effective(&Config::default(), flags("0:0", "compute")).unwrap();
    assert!(effective.needs_nvml());
    assert!(effective.discovery_scope().contains(Capability::Utility));
    assert!(!effective.request.capabilities.contains(Capability::Utility));
    let whole = effective_for_gpu();
    assert!(!whole.needs_nvml());
    assert!(!whole.discovery_scope().contains(Capability::Utility));
}

fn effective_for_gpu() -> Effective {
    effective(&Config::default(), flags("0", "compute")).unwrap()
}

#[test]
fn requirements_are_checked_on_the_planned_gpus() {
    let inventory = inventory();
    let c = container(
        &[
            "NVIDIA_VISIBLE_DEVICES=1",
            "NVIDIA_REQUIRE_DRIVER=driver>=550",
        ],
        false,
        &[],
    );
    let err = plan_on(&inventory, &Config::default(), Source::Container(&c)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("GPU 1") && text.contains("535.261.03"),
        "{text}"
    );
    let config = Config {
        disable_require: true,
        ..Config::default()
    };
    plan_on(&inventory, &config, Source::Container(&c)).unwrap();
}

#[test]
fn a_container_asking_for_no_gpu_starts_whatever_its_other_variables_say() {
    // CC:180-184: NVIDIA's hook returns before it reads capabilities, the
    // MIG variables (even unprivileged) or requirements.
    for other in [
        "NVIDIA_DRIVER_CAPABILITIES=bogus",
        "NVIDIA_MIG_CONFIG_DEVICES=all",
        "NVIDIA_MIG_MONITOR_DEVICES=ALL",
        "NVIDIA_MIG_CONFIG_DEVICES=0",
        "NVIDIA_REQUIRE_CUDA=cuda>>=12",
    ] {
        for devices in [None, Some("void"), Some(","), Some("0,void")] {
            let mut env = vec![other.to_string()];
            env.extend(devices.map(|d| format!("NVIDIA_VISIBLE_DEVICES={d}")));
            let env: Vec<&str> = env.iter().map(String::as_str).collect();
            let effective = of_container(&Config::default(), &container(&env, false, &[]))
                .unwrap_or_else(|e| panic!("{env:?}: {e}"));
            assert!(effective.is_void(), "{env:?}");
            assert_eq!(effective.request, Request::void(), "{env:?}");
        }
    }
}

#[test]
fn an_ignored_unprivileged_request_is_never_parsed() {
    // IMG:281-291: with env-when-unprivileged off, NVIDIA drops the
    // variable of an unprivileged container before its CLI could judge it.
    let config = Config {
        accept_env_when_unprivileged: false,
        ..Config::default()
    };
    let c = container(
        &[
            "NVIDIA_VISIBLE_DEVICES=junk!",
            "NVIDIA_DRIVER_CAPABILITIES=bogus",
            "NVIDIA_MIG_CONFIG_DEVICES=all",
        ],
        false,
        &[],
    );
    assert!(of_container(&config, &c).unwrap().is_void());
    // A legacy image's implied `all` is ignored the same way.
    let c = container(&["CUDA_VERSION=12.2.0"], false, &[]);
    assert!(of_container(&config, &c).unwrap().is_void());
}

#[test]
fn accepted_device_mounts_leave_the_variable_unread() {
    // IMG:265-271: the mounts decide; NVIDIA_VISIBLE_DEVICES is not looked at.
    let config = Config {
        accept_volume_mounts: true,
        ..Config::default()
    };
    let c = container(&["NVIDIA_VISIBLE_DEVICES=junk!"], false, &["0"]);
    assert_eq!(
        of_container(&config, &c).unwrap().request.devices,
        DeviceSelection::parse(Some("0")).unwrap()
    );
    // A mount named none is no keyword: NVIDIA's CLI refuses it (COM:321).
    let c = container(&["NVIDIA_VISIBLE_DEVICES=0"], false, &["none"]);
    assert!(of_container(&config, &c).is_err());
}

#[test]
fn blank_capabilities_give_device_nodes_and_no_driver_files() {
    // CC:165-172 and MAIN:138-141: a blank but non-empty value passes no
    // capability flag, so the CLI mounts no library or binary; the GPU node
    // and the control node still come.
    let inventory = inventory();
    let c = container(
        &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES= , "],
        false,
        &[],
    );
    let effective = of_container(&Config::default(), &c).unwrap();
    assert_eq!(effective.request.capabilities.to_string(), "");
    let plan = build(
        &effective,
        &mut inventory.clone(),
        &ImageLayout::Debian.into(),
    )
    .unwrap();
    let nodes: Vec<String> = plan
        .devices
        .iter()
        .map(|d| d.path.display().to_string())
        .collect();
    assert_eq!(plan.selected.len(), 1);
    assert!(
        nodes.len() == 2 && nodes.contains(&"/dev/nvidiactl".to_string()),
        "{nodes:?}"
    );
    assert!(plan.loader_entries.is_empty(), "{plan:#?}");
    let has_libraries = |plan: &Plan| plan.mounts.iter().any(|m| format!("{m:?}").contains(".so"));
    assert!(!has_libraries(&plan), "{plan:#?}");
    assert!(has_libraries(
        &plan_on(&inventory, &Config::default(), flags("0", "utility")).unwrap()
    ));
    // The flags read the same way.
    assert_eq!(
        plan_on(&inventory, &Config::default(), flags("0", " , ")).unwrap(),
        plan
    );
}

#[test]
fn device_lists_plan_as_nvidia_selects() {
    // The grammar's parity cases, planned on the synthetic host: empty items
    // dropped (IMG:157-161), keywords collapsed (DEV:35-63), `ALL` in any
    // case (COM:296-301), a function digit ignored (COM:12-24), a sign on an
    // index (COM:196-200).
    let inventory = inventory();
    let config = Config::default();
    for (nvidia, same_as) in [
        ("0,,2", "0,2"),
        ("2,", "2"),
        ("all,0", "all"),
        ("ALL", "all"),
        ("0,none", "none"),
        ("+2", "2"),
        ("0000:db:00.1", "2"),
        ("00000000:DB:00", "2"),
    ] {
        assert_eq!(
            plan_on(&inventory, &config, flags(nvidia, "utility")).unwrap(),
            plan_on(&inventory, &config, flags(same_as, "utility")).unwrap(),
            "{nvidia}"
        );
    }
}

#[test]
fn capabilities_with_all_anywhere_plan_as_all() {
    // CAPS:109-111, CC:169: `all` wins whatever else the list names.
    let inventory = inventory();
    let config = config_supporting("utility,compute,video");
    assert_eq!(
        plan_on(&inventory, &config, flags("0", "foo,all")).unwrap(),
        plan_on(&inventory, &config, flags("0", "all")).unwrap()
    );
}

#[test]
fn requirements_widen_discovery_to_what_checking_them_needs() {
    // A utility container with a cuda rule needs the driver's libcuda for
    // the CUDA version; a brand rule may need NVML, a utility library.
    let c = container(
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=video",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.0 brand=tesla",
        ],
        false,
        &[],
    );
    let effective = of_container(&Config::default(), &c).unwrap();
    let scope = effective.discovery_scope();
    assert!(scope.contains(Capability::Compute) && scope.contains(Capability::Utility));
    assert!(!effective.request.capabilities.contains(Capability::Utility));
    // NVML is not asked up front: only when evaluation reaches brand.
    assert!(!effective.needs_nvml());
}

fn asked(devices: &[&str], capabilities: &[Capability], requirements: &[&str]) -> Asked {
    let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
    Asked {
        devices: strings(devices),
        capabilities: capabilities.to_vec(),
        requirements: strings(requirements),
        ..Asked::default()
    }
}

fn argv<'a>(asked: &'a Asked, container: Option<&'a Container>) -> Source<'a> {
    Source::Argv { asked, container }
}

#[test]
fn a_command_line_plans_as_the_same_request_from_the_environment() {
    let inventory = inventory();
    let config = Config::default();
    use Capability::*;
    for (devices, flags, variable) in [
        (&["all"][..], &[Compute, Utility][..], "compute,utility"),
        (
            &["0", "2"],
            &[Compute, Compat32, Graphics, Utility, Video],
            "compute,compat32,graphics,utility,video",
        ),
        (
            &["GPU-00000001-0000-0000-0000-000000000000"],
            &[Compute],
            "compute",
        ),
        (&["0000:db:00.0"], &[Video], "video"),
    ] {
        let env = [
            format!("NVIDIA_VISIBLE_DEVICES={}", devices.join(",")),
            format!("NVIDIA_DRIVER_CAPABILITIES={variable}"),
        ];
        let env: Vec<&str> = env.iter().map(String::as_str).collect();
        let c = container(&env, false, &[]);
        let asked = asked(devices, flags, &[]);
        assert_eq!(
            plan_on(&inventory, &config, argv(&asked, Some(&c))).unwrap(),
            plan_on(&inventory, &config, Source::Container(&c)).unwrap(),
            "{devices:?} {flags:?}"
        );
    }
}

#[test]
fn a_command_line_request_ignores_the_containers_environment() {
    // containerd's bundle holds no NVIDIA variable; NVIDIA's hook may leave
    // ones that say something else. The command line decides.
    let c = container(
        &[
            "NVIDIA_VISIBLE_DEVICES=void",
            "NVIDIA_DRIVER_CAPABILITIES=graphics",
            "NVIDIA_REQUIRE_CUDA=cuda>=99.0",
        ],
        false,
        &["2"],
    );
    let config = Config {
        accept_volume_mounts: true,
        ..Config::default()
    };
    let asked = asked(&["1"], &[Capability::Utility], &[]);
    let effective = effective(&config, argv(&asked, Some(&c))).unwrap();
    assert_eq!(
        effective.request.devices,
        DeviceSelection::List(vec![DeviceId::Index(1)])
    );
    assert_eq!(effective.request.capabilities.to_string(), "utility");
    assert!(effective.requirements.is_empty());
}

#[test]
fn a_command_line_without_devices_or_capabilities_gets_the_driver_alone() {
    // NVIDIA's CLI without --device selects no GPU, and without a
    // capability flag mounts no library (configure.c, options.h).
    let asked = Asked::default();
    let effective = effective(&Config::default(), argv(&asked, None)).unwrap();
    assert_eq!(effective.request.devices, DeviceSelection::None);
    assert_eq!(effective.request.capabilities.to_string(), "");
    let plan = build(&effective, &mut inventory(), &ImageLayout::Debian.into()).unwrap();
    assert!(plan.selected.is_empty(), "{plan:#?}");
    assert!(plan.loader_entries.is_empty(), "{plan:#?}");
    assert!(
        !plan
            .mounts
            .iter()
            .any(|m| matches!(m.kind, MountKind::Library | MountKind::Binary)),
        "{plan:#?}"
    );
}

#[test]
fn a_command_line_device_list_is_read_as_nvidias_cli_reads_it() {
    // `none` and `void` are keywords of the hook's variable, not of the
    // CLI's --device, which takes `all` only.
    for bad in ["none", "void", "7x"] {
        let asked = asked(&[bad], &[], &[]);
        assert!(
            effective(&Config::default(), argv(&asked, None)).is_err(),
            "{bad}"
        );
    }
    let asked = asked(&["0", "ALL"], &[], &[]);
    assert_eq!(
        effective(&Config::default(), argv(&asked, None))
            .unwrap()
            .request
            .devices,
        DeviceSelection::All
    );
}

#[test]
fn command_line_requirements_are_checked_unless_the_config_disables_them() {
    let inventory = inventory();
    let asked = asked(
        &["1"],
        &[Capability::Compute],
        &["driver>=500", "driver>=550"],
    );
    let err = plan_on(&inventory, &Config::default(), argv(&asked, None)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("--require \"driver>=550\": GPU 1")
            && text.contains("unsatisfied condition"),
        "{text}"
    );
    let config = Config {
        disable_require: true,
        ..Config::default()
    };
    plan_on(&inventory, &config, argv(&asked, None)).unwrap();
}

#[test]
fn command_line_mig_management_needs_a_privileged_container() {
    let mut asked = asked(&["0"], &[], &[]);
    asked.mig_config = vec!["all".into()];
    let unprivileged = container(&[], false, &[]);
    let err = effective(&Config::default(), argv(&asked, Some(&unprivileged))).unwrap_err();
    assert!(
        err.to_string().starts_with("--mig-config=all is refused"),
        "{err}"
    );
    let privileged = container(&[], true, &[]);
    assert!(
        effective(&Config::default(), argv(&asked, Some(&privileged)))
            .unwrap()
            .request
            .mig_config
    );
    // The host's operator listing what it would take.
    assert!(
        effective(&Config::default(), argv(&asked, None))
            .unwrap()
            .request
            .mig_config
    );
    asked.mig_config = vec!["0".into()];
    assert!(effective(&Config::default(), argv(&asked, Some(&privileged))).is_err());
}

#[test]
fn a_command_line_request_for_a_user_namespace_binds_nodes() {
    let mut c = container(&[], false, &[]);
    c.user_namespace = true;
    let asked = asked(&["0"], &[], &[]);
    assert_eq!(
        effective(&Config::default(), argv(&asked, Some(&c)))
            .unwrap()
            .node_mode,
        NodeMode::Bind
    );
}

#[test]
fn what_the_caller_leaves_to_others_is_not_in_the_plan() {
    let whole = plan_on(&inventory(), &Config::default(), flags("0", "utility")).unwrap();
    assert!(
        !whole.devices.is_empty() && !whole.mounts.is_empty() && !whole.cgroup_rules.is_empty()
    );
    let mut plan = whole.clone();
    LeftToOthers {
        nodes: true,
        ..LeftToOthers::NOTHING
    }
    .take_from(&mut plan);
    assert!(plan.devices.is_empty());
    assert_eq!(plan.cgroup_rules, whole.cgroup_rules, "still granted");
    assert_eq!(plan.mounts, whole.mounts);
    let mut plan = whole.clone();
    LeftToOthers::SPEC_EDITS.take_from(&mut plan);
    assert!(plan.devices.is_empty() && plan.mounts.is_empty() && plan.cgroup_rules.is_empty());
    // What a runtime cannot do stays.
    assert_eq!(plan.symlinks, whole.symlinks);
    assert_eq!(plan.loader_entries, whole.loader_entries);
    assert_eq!(plan.proc_mask, whole.proc_mask);
}

#[test]
fn a_spec_made_on_another_mig_layout_is_refused_naming_both_and_the_command() {
    let config = Config::default();
    let inventory = inventory();
    let gi = |id: u32, cis: &[u32]| crate::host::driver::GpuInstance {
        parent: 1,
        id,
        access: CapFile {
            rel: format!("capabilities/gpu1/mig/gi{id}/access").into(),
            path: format!("/sim/gi{id}").into(),
            minor: 10 + id,
        },
        compute: cis
            .iter()
            .map(|&ci| crate::host::driver::ComputeInstance {
                id: ci,
                access: CapFile {
                    rel: format!("capabilities/gpu1/mig/gi{id}/ci{ci}/access").into(),
                    path: format!("/sim/gi{id}ci{ci}").into(),
                    minor: 20 + ci,
                },
            })
            .collect(),
    };
    let mut migged = inventory.clone();
    migged.mig_instances = vec![gi(1, &[0]), gi(2, &[0, 1])];
    assert_eq!(
        driver::mig_layout(&migged.mig_instances),
        "1:1:0,1:2:0,1:2:1"
    );
    assert_eq!(driver::mig_layout(&[gi(3, &[])]), "1:3");
    assert_eq!(driver::mig_layout(&inventory.mig_instances), "none");

    let run = |host: &Inventory, mig_layout: Option<&str>| {
        let made = SpecMade {
            driver_version: host.driver_version.clone(),
            capabilities: "utility".into(),
            layout: ImageLayout::Debian,
            mig_layout: mig_layout.map(str::to_string),
            roots: Default::default(),
        };
        let nodes = [GrantedNode {
            major: 195,
            minor: 0,
        }];
        let inputs = Inputs::new(
            Source::Granted(Granted {
                nodes: &nodes,
                made: &made,
            }),
            ImageSource::Layout(ImageLayout::Debian),
        );
        super::plan_on(&config, inputs, Some(host)).map(|_| ())
    };
    // Made on this layout, or before layouts were recorded: planned.
    run(&migged, Some("1:1:0,1:2:0,1:2:1")).unwrap();
    run(&inventory, Some("none")).unwrap();
    run(&migged, None).unwrap();
    // Made before MIG was set up, or before an instance went.
    for (made, host) in [("none", &migged), ("1:1:0,1:2:0,1:2:1,1:3:0", &migged)] {
        let err = run(host, Some(made)).unwrap_err().to_string();
        assert!(
            err.contains(&format!("generated for MIG layout {made}"))
                && err.contains("MIG layout is now 1:1:0,1:2:0,1:2:1")
                && err.contains("oci-nvidia-hook cdi generate"),
            "{err}"
        );
    }
    let err = run(&inventory, Some("1:1:0")).unwrap_err().to_string();
    assert!(err.contains("MIG layout is now none"), "{err}");
}

/// NVIDIA's `no-cgroups = true` (`grant-device-cgroup = false`): the plan
/// leaves the device cgroup to the runtime, and keeps the rest.
#[test]
fn a_config_that_leaves_the_cgroup_to_the_runtime_plans_no_rules() {
    let inputs = |source| Inputs::new(source, ImageSource::Layout(ImageLayout::Debian));
    let whole = super::plan_on(
        &Config::default(),
        inputs(flags("0", "utility")),
        Some(&inventory()),
    )
    .unwrap()
    .plan;
    assert!(!whole.cgroup_rules.is_empty());
    let config = Config {
        grant_device_cgroup: false,
        ..Config::default()
    };
    let plan = super::plan_on(&config, inputs(flags("0", "utility")), Some(&inventory()))
        .unwrap()
        .plan;
    assert!(plan.cgroup_rules.is_empty());
    assert_eq!(plan.devices, whole.devices);
    assert_eq!(plan.mounts, whole.mounts);
}

/// A container under the systemd cgroup driver: its scope is told about
/// the rules, unless `systemd-device-allow` is off, the cgroup is left to
/// the runtime, or there are no rules.
#[test]
fn the_systemd_scope_is_planned_beside_the_cgroup_rules() {
    let mut under_systemd = container(&["NVIDIA_VISIBLE_DEVICES=0"], false, &[]);
    under_systemd.systemd_scope = Some("docker-abc.scope".into());
    let plan_with = |config: &Config, container: &Container| {
        super::plan_on(
            config,
            Inputs::new(
                Source::Container(container),
                ImageSource::Layout(ImageLayout::Debian),
            ),
            Some(&inventory()),
        )
        .unwrap()
        .plan
    };
    let plan = plan_with(&Config::default(), &under_systemd);
    assert!(!plan.cgroup_rules.is_empty());
    assert_eq!(plan.systemd_scope.as_deref(), Some("docker-abc.scope"));
    let cgroupfs = container(&["NVIDIA_VISIBLE_DEVICES=0"], false, &[]);
    assert_eq!(plan_with(&Config::default(), &cgroupfs).systemd_scope, None);
    for config in [
        Config {
            systemd_device_allow: false,
            ..Config::default()
        },
        Config {
            grant_device_cgroup: false,
            ..Config::default()
        },
    ] {
        assert_eq!(plan_with(&config, &under_systemd).systemd_scope, None);
    }
    let mut void = under_systemd.clone();
    void.env = vec!["NVIDIA_VISIBLE_DEVICES=void".into()];
    assert_eq!(plan_with(&Config::default(), &void).systemd_scope, None);
}

/// NVIDIA's `features.ignore-imex-channel-requests`: neither the variable
/// nor mounts of any container count; the administrator's flags still do.
#[test]
fn ignored_imex_requests_come_from_no_container() {
    let config = Config {
        ignore_imex_channel_requests: true,
        accept_volume_mounts: true,
        ..Config::default()
    };
    let env = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=1"];
    for (privileged, mounts) in [(true, &[][..]), (false, &["0", "imex/3"][..])] {
        let c = container(&env, privileged, mounts);
        let effective = of_container(&config, &c).unwrap();
        assert!(!effective.is_void());
        assert_eq!(effective.request.imex, ImexChannels::None);
    }
    let mut a = asked(&["0"], &[Capability::Utility], &[]);
    a.imex_channels = vec!["2".into()];
    let req = effective_of(&config, argv(&a, None)).request;
    assert_eq!(req.imex, ImexChannels::List(vec![2]));
}

/// NVIDIA 1.19's additional GIDs: a `0660` node of a group (a render
/// node's) is opened to the container's users and its group joined; a
/// `0666` one, root's group and `no-additional-gids` change nothing.
#[test]
fn group_only_nodes_are_opened_and_their_group_joined() {
    let node = |mode: u32, gid: u32| plan::DeviceNode {
        host_path: "/dev/dri/renderD128".into(),
        path: "/dev/dri/renderD128".into(),
        major: 226,
        minor: 128,
        mode,
        gid,
    };
    let mut plan = Plan {
        devices: vec![
            node(0o660, 105),
            node(0o666, 44),
            node(0o660, 0),
            node(0o600, 7),
            node(0o660, 105),
        ],
        ..Plan::default()
    };
    let kept = plan.clone();
    super::access::open_group_only_nodes(
        &Config {
            no_additional_gids: true,
            ..Config::default()
        },
        &mut plan,
    );
    assert_eq!(plan, kept);
    super::access::open_group_only_nodes(&Config::default(), &mut plan);
    let modes: Vec<u32> = plan.devices.iter().map(|d| d.mode).collect();
    assert_eq!(modes, [0o666, 0o666, 0o666, 0o600, 0o666]);
    assert_eq!(plan.additional_gids, [105]);
}

//! `nvidia-ctk cdi generate`'s flags, as NVIDIA v1.20.0 declares and
//! checks them: `cmd/nvidia-ctk/cdi/generate/generate.go` (`build`'s flag
//! list with each flag's `Sources`, and `validateFlags`), run side by side
//! from ../shared/anchor on a simulated host for the answers quoted.

use clap::{CommandFactory, Parser};

use super::*;

#[derive(Parser)]
struct T {
    #[command(flatten)]
    g: GenerateArgs,
}

/// `args` read by clap alone (no environment variable of ours is set in
/// the tests' process).
fn parse(args: &[&str]) -> GenerateArgs {
    T::try_parse_from(std::iter::once("t").chain(args.iter().copied()))
        .unwrap()
        .g
}

/// What `args` asks of our `cdi generate`, and the notes.
fn asked(args: &[&str]) -> (Generate, Vec<Note>) {
    match generate(&parse(args)).unwrap() {
        (Operation::CdiGenerate(asked), notes) => (asked, notes),
        (other, _) => panic!("not cdi generate: {other:?}"),
    }
}

/// Whether a note at `level` says `text`.
fn noted(notes: &[Note], level: log::Level, text: &str) -> bool {
    notes
        .iter()
        .any(|n| n.level == level && n.text.contains(text))
}

#[test]
fn every_flag_reads_nvidias_environment_variable() {
    // generate.go `build`: each flag's `Sources: cli.EnvVars(…)`, as
    // `nvidia-ctk cdi generate --help` of v1.20.0 lists them.
    let expected = [
        ("output", "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH"),
        ("format", "NVIDIA_CTK_CDI_GENERATE_OUTPUT_FORMAT"),
        ("mode", "NVIDIA_CTK_CDI_GENERATE_MODE"),
        ("dev-root", "NVIDIA_CTK_DEV_ROOT"),
        (
            "device-name-strategy",
            "NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES",
        ),
        ("driver-root", "NVIDIA_CTK_DRIVER_ROOT"),
        (
            "library-search-path",
            "NVIDIA_CTK_CDI_GENERATE_LIBRARY_SEARCH_PATHS",
        ),
        ("nvidia-cdi-hook-path", "NVIDIA_CTK_CDI_HOOK_PATH"),
        ("ldconfig-path", "NVIDIA_CTK_CDI_GENERATE_LDCONFIG_PATH"),
        ("vendor", "NVIDIA_CTK_CDI_GENERATE_VENDOR"),
        ("class", "NVIDIA_CTK_CDI_GENERATE_CLASS"),
        ("csv.file", "NVIDIA_CTK_CDI_GENERATE_CSV_FILES"),
        (
            "csv.ignore-pattern",
            "NVIDIA_CTK_CDI_GENERATE_CSV_IGNORE_PATTERNS",
        ),
        (
            "csv.compat-container-root",
            "NVIDIA_CTK_CDI_GENERATE_CSV_CONTAINER_COMPAT_ROOT",
        ),
        ("disable-hook", "NVIDIA_CTK_CDI_GENERATE_DISABLED_HOOKS"),
        ("enable-hook", "NVIDIA_CTK_CDI_GENERATE_ENABLED_HOOKS"),
        ("feature-flag", "NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS"),
        ("no-all-device", "NVIDIA_CTK_CDI_GENERATE_NO_ALL_DEVICE"),
        ("device-id", "NVIDIA_CTK_CDI_GENERATE_DEVICE_IDS"),
        (
            "config-search-path",
            "NVIDIA_CTK_CDI_GENERATE_CONFIG_SEARCH_PATHS",
        ),
    ];
    let command = T::command();
    for (flag, variable) in expected {
        let arg = command
            .get_arguments()
            .find(|a| a.get_long() == Some(flag))
            .unwrap_or_else(|| panic!("no --{flag}"));
        assert_eq!(
            arg.get_env().and_then(|e| e.to_str()),
            Some(variable),
            "--{flag}"
        );
    }
    assert_eq!(
        command
            .get_arguments()
            .filter(|a| a.get_long().is_some())
            .count(),
        expected.len(),
        "a flag without its variable"
    );
}

#[test]
fn nvidias_aliases_and_comma_lists_are_read() {
    // generate.go `build`: Aliases; urfave/cli v3 splits slice flags at commas.
    for (args, devices) in [
        (&["--device-id=0,GPU-1"][..], &["0", "GPU-1"][..]),
        (&["--device-ids=0", "--device=1"], &["0", "1"]),
        (&["--devices=none"], &["none"]),
        (&[], &["all"]),
    ] {
        assert_eq!(parse(args).device_id, devices, "{args:?}");
    }
    let aliased = parse(&[
        "--nvidia-ctk-path=/usr/bin/nvidia-ctk",
        "--cdi-vendor=example.com",
        "--cdi-class=x",
        "--discovery-mode=nvml",
        "--disable-hooks=chmod",
        "--enable-hooks=update-ldcache",
        "--feature-flags=a,b",
    ]);
    assert_eq!(
        aliased.nvidia_cdi_hook_path.as_deref(),
        Some(std::path::Path::new("/usr/bin/nvidia-ctk"))
    );
    assert_eq!(
        (aliased.vendor.as_deref(), aliased.class.as_deref()),
        (Some("example.com"), Some("x"))
    );
    assert_eq!(aliased.mode, "nvml");
    assert_eq!(aliased.disable_hook, ["chmod"]);
    assert_eq!(aliased.enable_hook, ["update-ldcache"]);
    assert_eq!(aliased.feature_flag, ["a", "b"]);
    // validateFlags lowercases --format.
    assert_eq!(parse(&["--format=JSON"]).format, Some(SpecFormat::Json));
}

#[test]
fn the_defaults_are_nvidias() {
    // `--help` of v1.20.0: `(default: "index", "uuid")`, mode auto,
    // device-id all, stdout.
    let (ask, notes) = asked(&[]);
    assert_eq!(ask.strategies, "index,uuid");
    assert_eq!(ask.mode, Mode::Auto);
    assert_eq!(ask.device_ids, ["all"]);
    assert_eq!(ask.output, std::path::Path::new("-"));
    assert!(ask.all_device && ask.hook);
    assert_eq!(ask.kind, None);
    assert_eq!(ask.roots, Roots::default());
    assert!(notes.is_empty(), "{notes:?}");
}

#[test]
fn modes_served_are_read_and_the_others_refused_by_name() {
    // `nvcdi.AllModes` of v1.20.0, as `--help` lists them; validateFlags
    // lowercases the mode.
    for (given, mode) in [
        ("auto", Mode::Auto),
        ("NVML", Mode::Nvml),
        ("wsl", Mode::Wsl),
        ("CSV", Mode::Csv),
        ("management", Mode::Management),
    ] {
        assert_eq!(asked(&[&format!("--mode={given}")]).0.mode, mode);
    }
    for unserved in UNSERVED_MODES {
        let err = generate(&parse(&[&format!("--mode={unserved}")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "--mode={unserved} is not supported: auto, nvml (a native driver), wsl \
                 (a WSL2 host), csv (a Jetson/Tegra host) and management are"
            )
        );
    }
    // NVIDIA: `invalid discovery mode: bogus`.
    let err = generate(&parse(&["--mode=bogus"])).unwrap_err();
    assert!(err
        .to_string()
        .starts_with("--mode=bogus is not a mode: auto"));
}

#[test]
fn a_management_spec_is_of_the_management_kind_unless_named() {
    // The GPU Operator's toolkit writes it as management.nvidia.com/gpu;
    // `--vendor`/`--class` as NVIDIA's name any valid kind.
    assert_eq!(asked(&["--mode=management"]).0.kind, None);
    assert_eq!(
        asked(&["--mode=management", "--class=x"]).0.kind.as_deref(),
        Some("management.nvidia.com/x")
    );
    assert_eq!(
        asked(&["--vendor=nvidia.com", "--mode=management"])
            .0
            .kind
            .as_deref(),
        Some("nvidia.com/gpu")
    );
    assert_eq!(
        asked(&["--vendor=k8s.device-plugin.nvidia.com"])
            .0
            .kind
            .as_deref(),
        Some("k8s.device-plugin.nvidia.com/gpu")
    );
    // validateFlags: `invalid CDI vendor name`.
    let err = generate(&parse(&["--vendor=-bad"])).unwrap_err();
    assert!(err.to_string().starts_with("--vendor/--class: "), "{err}");
}

#[test]
fn a_named_driver_root_is_the_dev_root_too_unless_that_is_named() {
    // `--dev-root`'s usage: "If this is not specified, the driver-root is assumed."
    let both = Some(std::path::PathBuf::from("/run/nvidia/driver"));
    assert_eq!(
        asked(&["--driver-root=/run/nvidia/driver"]).0.roots,
        Roots {
            driver: both.clone(),
            dev: both.clone(),
            csv: None,
        }
    );
    assert_eq!(
        asked(&["--driver-root=/run/nvidia/driver", "--dev-root=/"])
            .0
            .roots,
        Roots {
            driver: both,
            dev: Some("/".into()),
            csv: None,
        }
    );
    assert_eq!(
        asked(&["--dev-root=/sim"]).0.roots,
        Roots {
            driver: None,
            dev: Some("/sim".into()),
            csv: None,
        }
    );
}

#[test]
fn device_ids_narrow_the_spec_and_none_drops_the_all_device() {
    // validateFlags: `--device-id=none` without `--no-all-device` warns
    // "Disabling generation of 'all' device" and leaves it out.
    let (ask, notes) = asked(&["--device-id=none"]);
    assert_eq!(ask.device_ids, ["none"]);
    assert!(!ask.all_device);
    assert!(
        noted(&notes, log::Level::Warn, "no all device"),
        "{notes:?}"
    );
    let (ask, _) = asked(&["--device-id=1,GPU-8d382ef4-cd32-cf43-2756-ec33f19ccb97"]);
    assert_eq!(
        ask.device_ids,
        ["1", "GPU-8d382ef4-cd32-cf43-2756-ec33f19ccb97"]
    );
    assert!(ask.all_device);
    assert!(!asked(&["--no-all-device"]).0.all_device);
}

#[test]
fn type_index_names_are_asked_for_as_given() {
    // `--help`: "One of [index | uuid | type-index]", repeatable.
    let (ask, _) = asked(&[
        "--device-name-strategy=type-index",
        "--device-name-strategy=uuid",
    ]);
    assert_eq!(ask.strategies, "type-index,uuid");
}

#[test]
fn hooks_are_read_by_nvidias_names() {
    // validateFlags: "enabling all hooks is not supported".
    let err = generate(&parse(&["--enable-hook=all"])).unwrap_err();
    assert_eq!(err.to_string(), "enabling all hooks is not supported");
    // `--disable-hook`'s usage: "the special hook name 'all' can be used
    // ensure that the generated CDI specification does not include any hooks".
    let (ask, notes) = asked(&["--disable-hook=all"]);
    assert!(!ask.hook);
    assert!(noted(&notes, log::Level::Warn, "the spec has no hook"));
    // An enabled hook overrides the disabled ones: the hook stays.
    let (ask, _) = asked(&["--disable-hook=all", "--enable-hook=update-ldcache"]);
    assert!(ask.hook);
    for (args, level, text) in [
        (
            &["--disable-hook=update-ldcache"][..],
            log::Level::Warn,
            "--disable-hook=update-ldcache ignored: the spec's one hook writes",
        ),
        (
            &["--enable-hook=update-application-profile"],
            log::Level::Info,
            "the spec's hook writes the application profile",
        ),
        (
            &["--enable-hook=enable-cuda-compat"],
            log::Level::Warn,
            "--enable-hook=enable-cuda-compat ignored",
        ),
        (
            &["--disable-hook=bogus"],
            log::Level::Warn,
            "no hook of NVIDIA's has that name",
        ),
    ] {
        let (ask, notes) = asked(args);
        assert!(ask.hook, "{args:?}");
        assert!(noted(&notes, level, text), "{args:?}: {notes:?}");
    }
}

#[test]
fn feature_flags_are_each_noted_with_their_meaning_here() {
    // pkg/nvcdi/options.go's FeatureFlag names; an unknown one NVIDIA
    // ignores (run side by side: exit 0, the same spec).
    for (flag, level, text) in [
        (
            "disable-nvsandboxutils",
            log::Level::Info,
            "already so here",
        ),
        (
            "disable-nvsandbox-utils",
            log::Level::Info,
            "already so here",
        ),
        (
            "no-additional-gids-for-device-nodes",
            log::Level::Info,
            "no additionalGids",
        ),
        (
            "enable-explicit-driver-libraries",
            log::Level::Info,
            "by name",
        ),
        ("disable-multiple-csv-devices", log::Level::Info, "csv mode"),
        ("enable-coherent-annotations", log::Level::Warn, "ignored"),
        ("disable-ipc-discoverer", log::Level::Warn, "ignored"),
        ("bogus", log::Level::Warn, "no such flag"),
    ] {
        let (_, notes) = asked(&[&format!("--feature-flag={flag}")]);
        assert!(noted(&notes, level, text), "{flag}: {notes:?}");
    }
}

#[test]
fn csv_files_and_ignore_patterns_are_taken_for_a_csv_host() {
    let (ask, notes) = asked(&[
        "--mode=csv",
        "--csv.file=/etc/a.csv",
        "--csv.file=/etc/b.csv,/etc/c.csv",
        "--csv.ignore-pattern=**/*.so",
    ]);
    assert_eq!(ask.mode, Mode::Csv);
    assert_eq!(
        ask.csv.files,
        Some(vec![
            "/etc/a.csv".into(),
            "/etc/b.csv".into(),
            "/etc/c.csv".into()
        ])
    );
    assert_eq!(ask.csv.ignore_patterns, ["**/*.so"]);
    assert!(notes.is_empty(), "{notes:?}");
    // Without --csv.file, NVIDIA's base files.
    assert_eq!(asked(&["--mode=csv"]).0.csv.files, None);
}

#[test]
fn flags_without_a_meaning_here_are_noted_never_silent() {
    for (flag, text) in [
        (
            "--nvidia-cdi-hook-path=/usr/bin/nvidia-cdi-hook",
            "the spec's hook is this binary",
        ),
        ("--ldconfig-path=/sbin/ldconfig", "never runs ldconfig"),
        (
            "--library-search-path=/usr/lib/aarch64-linux-gnu/tegra",
            "driver.library-search-paths",
        ),
        (
            "--csv.compat-container-root=/usr/local/cuda/compat",
            "only where NVML",
        ),
        ("--config-search-path=/usr/share", "loader cache"),
    ] {
        let (_, notes) = asked(&[flag]);
        assert!(noted(&notes, log::Level::Info, text), "{flag}: {notes:?}");
    }
}

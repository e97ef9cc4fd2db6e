//! Which variables make rules: the prefix, JETPACK, repeats, the legacy rule, the off switch.

use super::*;

#[test]
fn all_rules_must_hold() {
    let two = |cuda: &str, arch: &str| {
        env(&[
            "PATH=/usr/bin",
            &format!("NVIDIA_REQUIRE_CUDA={cuda}"),
            &format!("NVIDIA_REQUIRE_ARCH={arch}"),
        ])
    };
    let check = |env: Vec<String>| Requirements::from_env(&env).unwrap().check(&host_535());
    assert!(check(two("cuda>=12.0", "arch>=8.0")).is_ok());
    let err = check(two("cuda>=12.0", "arch>=9.0")).unwrap_err();
    assert!(err.to_string().starts_with("NVIDIA_REQUIRE_ARCH "), "{err}");
    let err = check(two("cuda>=12.4", "arch>=9.0")).unwrap_err();
    assert!(err.to_string().starts_with("NVIDIA_REQUIRE_CUDA "), "{err}");
}

#[test]
fn the_last_value_of_a_repeated_variable_wins() {
    let entries = env(&[
        "NVIDIA_REQUIRE_CUDA=cuda>=13.0",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
    ]);
    let requirements = Requirements::from_env(&entries).unwrap();
    assert!(requirements.check(&host_535()).is_ok());
    assert_eq!(requirements.rules.len(), 1);
}

#[test]
fn only_nvidia_require_variables_are_rules() {
    let entries = env(&[
        "NVIDIA_REQUIRE_JETPACK=csv-mounts=all",
        "NVIDIA_REQUIRE_JETPACK_HOST_MOUNTS=/usr/lib/aarch64-linux-gnu/tegra garbage",
        "NVIDIA_REQUIREMENT=cuda>=99",
        "nvidia_require_cuda=cuda>=99",
        "XNVIDIA_REQUIRE_CUDA=cuda>=99",
        "NVIDIA_REQUIRE_NO_EQUALS_SIGN",
        "NVIDIA_VISIBLE_DEVICES=all",
    ]);
    let requirements = Requirements::from_env(&entries).unwrap();
    assert!(requirements.is_empty(), "{requirements:?}");
}

#[test]
fn any_nvidia_require_suffix_is_a_rule() {
    for name in [
        "NVIDIA_REQUIRE_CUDA",
        "NVIDIA_REQUIRE_DRIVER",
        "NVIDIA_REQUIRE_X",
        "NVIDIA_REQUIRE_",
    ] {
        let entries = env(&[&format!("{name}=cuda>=13")]);
        let err = Requirements::from_env(&entries)
            .unwrap()
            .check(&host_535())
            .unwrap_err();
        match err {
            Error::Unsatisfied(u) => assert_eq!(u.variable(), name),
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn empty_rules_always_hold() {
    // No alternative, or a first one of commas only, holds without a term
    // being read (dsl.c:136, 143-157).
    for value in ["", " ", ",", " , ,, ", ", cuda>=99", ",, foo=bar"] {
        let entries = env(&[&format!("NVIDIA_REQUIRE_CUDA={value}")]);
        let requirements = Requirements::from_env(&entries).unwrap();
        assert!(requirements.is_empty(), "{value:?}");
        assert!(requirements.check(&host_535()).is_ok());
    }
    assert!(Requirements::from_env(&[]).unwrap().is_empty());
    // Only a space separates: a tab is a term, and no valid one (dsl.c:143).
    assert!(matches!(parse_error("\t"), Error::BadTerm { .. }));
}

#[test]
fn legacy_image_requires_its_cuda_major_minor() {
    let cases = [
        ("CUDA_VERSION=12.6.1", "cuda>=12.6"),
        ("CUDA_VERSION=12.6", "cuda>=12.6"),
        ("CUDA_VERSION=12", "cuda>=12.0"),
        ("CUDA_VERSION=v11.8.0", "cuda>=11.8"),
        ("CUDA_VERSION=12.6.1-rc1", "cuda>=12.6"),
        ("CUDA_VERSION=12.10.0", "cuda>=12.10"),
        // NVIDIA's own valid table (cuda_image_test.go:30-35).
        ("CUDA_VERSION=0", "cuda>=0.0"),
        ("CUDA_VERSION=8", "cuda>=8.0"),
        ("CUDA_VERSION=7.5", "cuda>=7.5"),
        ("CUDA_VERSION=9.0.116", "cuda>=9.0"),
        (
            "CUDA_VERSION=4294967295.4294967295.4294967295",
            "cuda>=4294967295.4294967295",
        ),
        ("CUDA_VERSION=v11.6", "cuda>=11.6"),
        // Go semver: a prerelease and a build after a full MAJOR.MINOR.PATCH.
        ("CUDA_VERSION=9.0.0-rc.1+b.2", "cuda>=9.0"),
        ("CUDA_VERSION=9.0.0+001", "cuda>=9.0"),
        ("CUDA_VERSION=9.0.0-0a", "cuda>=9.0"),
        ("CUDA_VERSION=9.0.99999999999999999999", "cuda>=9.0"),
    ];
    for (entry, rule) in cases {
        let requirements = Requirements::from_env(&env(&[entry])).unwrap();
        let expected = Rule::legacy(entry.trim_start_matches("CUDA_VERSION="))
            .unwrap()
            .unwrap();
        assert_eq!(requirements.rules, vec![expected.clone()], "{entry}");
        assert_eq!(expected.groups, parse(rule).rules[0].groups, "{entry}");
        assert_eq!(
            requirements.needs(),
            Needs {
                cuda: true,
                ..Needs::default()
            }
        );
    }
    let legacy = Requirements::from_env(&env(&["CUDA_VERSION=12.6.1"])).unwrap();
    assert!(legacy.check(&with_cuda(12020)).is_err());
    assert!(legacy.check(&with_cuda(12060)).is_ok());
    assert!(legacy.check(&with_cuda(12080)).is_ok());
}

#[test]
fn nvidia_require_cuda_replaces_the_legacy_rule_unless_empty() {
    let own = env(&["CUDA_VERSION=12.6.1", "NVIDIA_REQUIRE_CUDA=cuda>=11.0"]);
    assert!(Requirements::from_env(&own)
        .unwrap()
        .check(&host_535())
        .is_ok());
    // NVIDIA's hook counts an empty NVIDIA_REQUIRE_CUDA as unset.
    let empty = env(&["CUDA_VERSION=12.6.1", "NVIDIA_REQUIRE_CUDA="]);
    assert!(Requirements::from_env(&empty)
        .unwrap()
        .check(&host_535())
        .is_err());
    // ...and an empty CUDA_VERSION too.
    let no_version = env(&["CUDA_VERSION="]);
    assert!(Requirements::from_env(&no_version).unwrap().is_empty());
}

#[test]
fn malformed_legacy_cuda_version_is_an_error_naming_it() {
    // NVIDIA's hook fails the container on any CUDA_VERSION that is not a
    // Go semver after one optional `v` (cuda_image.go parseMajorMinorVersion,
    // 203-223; GetRequirements, 125-129), where we used to read `9.0.bar`
    // as cuda>=9.0.
    for value in [
        // NVIDIA's own invalid table (cuda_image_test.go:49-63).
        "foo",
        "foo.5.10",
        "9.0.116.50",
        "9.0.116foo",
        "7.foo",
        "9.0.bar",
        "9.4294967296",
        "9.0.116.",
        "9..0",
        "9.",
        ".5.10",
        "-9",
        "+9",
        "-9.1.116",
        "-9.-1.-116",
        // Semver: leading zeros, a prerelease without a patch, empty or
        // malformed identifiers, one `v` only.
        "09.1",
        "11.08",
        "9.0.01",
        "9.0-rc1",
        "9-rc1",
        "9.0.0-",
        "9.0.0-01",
        "9.0.0-a..b",
        "9.0.0+",
        "9.0.0+b+c",
        "9.0.0-rc_1",
        "vv9.0",
        "V9.0",
        " 9.0",
        "9.0 ",
        // And ours from before.
        "abc",
        "12.x",
        ".6",
        "12..6",
        "-1",
        "v",
        "99999999999.0",
        "１２.0",
    ] {
        let err = Requirements::from_env(&env(&[&format!("CUDA_VERSION={value}")])).unwrap_err();
        assert_eq!(
            err,
            Error::BadLegacyCudaVersion {
                value: value.into()
            }
        );
        let message = err.to_string();
        assert!(
            message.starts_with(&format!("CUDA_VERSION {value:?} ")),
            "{message}"
        );
        assert!(!message.contains('\n'), "{message}");
    }
    // Never looked at when the checks are off (cuda_image.go:138-146).
    let off = env(&["CUDA_VERSION=9.0.bar", "NVIDIA_DISABLE_REQUIRE=true"]);
    assert!(Requirements::from_env(&off).unwrap().is_empty());
    // Nor when NVIDIA_REQUIRE_CUDA makes the image not legacy.
    let modern = env(&["CUDA_VERSION=9.0.bar", "NVIDIA_REQUIRE_CUDA=cuda>=9.0"]);
    assert!(Requirements::from_env(&modern).is_ok());
}

#[test]
fn disable_require_takes_exactly_go_parsebool_true_values() {
    // cuda_image.go:138-146 HasDisableRequire: strconv.ParseBool, an error
    // counting as false; ParseBool's true values are exactly these
    // (go.dev/src/strconv/atob.go:10-18), untrimmed.
    for value in ["1", "t", "T", "true", "TRUE", "True"] {
        let entries = env(&[
            &format!("NVIDIA_DISABLE_REQUIRE={value}"),
            "NVIDIA_REQUIRE_CUDA=cuda>=99",
            "NVIDIA_REQUIRE_BAD=not a rule",
            "CUDA_VERSION=garbage",
        ]);
        let requirements = Requirements::from_env(&entries).unwrap();
        assert!(requirements.is_empty(), "{value:?}");
    }
}

#[test]
fn other_disable_require_values_keep_the_checks() {
    // We used to take `yes`, `y`, `on`, any case and padding as true;
    // NVIDIA runs the checks for all of these (cuda_image.go:141-142).
    for value in [
        "0", "f", "F", "false", "FALSE", "False", "no", "off", "", "maybe", "2", "truee", "yes",
        "YES", "y", "on", "On", "tRuE", " true", "true ", " true ", "\ttrue", "1 ",
    ] {
        let entries = env(&[
            &format!("NVIDIA_DISABLE_REQUIRE={value}"),
            "NVIDIA_REQUIRE_CUDA=cuda>=99",
        ]);
        let requirements = Requirements::from_env(&entries).unwrap();
        assert!(requirements.check(&host_535()).is_err(), "{value:?}");
    }
}

#[test]
fn huge_values_are_refused_before_parsing() {
    let rule = format!("NVIDIA_REQUIRE_CUDA={}", "cuda>=1 ".repeat(600));
    let err = Requirements::from_env(&env(&[&rule])).unwrap_err();
    assert_eq!(
        err,
        Error::TooLong {
            var: "NVIDIA_REQUIRE_CUDA".into(),
            len: 4800
        }
    );
    assert_eq!(
        err.to_string(),
        "NVIDIA_REQUIRE_CUDA is 4800 bytes long; at most 4096 are accepted"
    );
    let at_limit = format!("NVIDIA_REQUIRE_CUDA={}", "cuda>=1 ".repeat(512));
    assert!(Requirements::from_env(&env(&[&at_limit])).is_ok());
    let long_version = format!("CUDA_VERSION=12.{}", "0".repeat(5000));
    assert!(matches!(
        Requirements::from_env(&env(&[&long_version])),
        Err(Error::TooLong { .. })
    ));
}

#[test]
fn more_than_32_rules_are_refused_as_nvidia_does() {
    // cli.h `reqs[32]`, configure.c "too many requirements": one rule per
    // variable, empty ones included (main.go passes each as --require), and
    // the legacy rule counts.
    let rules = |n: usize| -> Vec<String> {
        (0..n)
            .map(|i| format!("NVIDIA_REQUIRE_R{i}=cuda>=1"))
            .collect()
    };
    assert_eq!(Requirements::from_env(&rules(32)).unwrap().rules.len(), 32);
    assert_eq!(
        Requirements::from_env(&rules(33)).unwrap_err(),
        Error::TooMany { count: 33 }
    );
    let mut with_legacy = rules(32);
    with_legacy.push("CUDA_VERSION=12.0".into());
    assert_eq!(
        Requirements::from_env(&with_legacy).unwrap_err(),
        Error::TooMany { count: 33 }
    );
    let mut with_empty = rules(32);
    with_empty.push("NVIDIA_REQUIRE_EMPTY=".into());
    let err = Requirements::from_env(&with_empty).unwrap_err();
    assert!(
        err.to_string().contains("more than 32") && !err.to_string().contains('\n'),
        "{err}"
    );
    // A repeated name is one rule; JETPACK variables are none.
    let mut repeated = rules(32);
    repeated.push("NVIDIA_REQUIRE_R0=cuda>=2".into());
    repeated.push("NVIDIA_REQUIRE_JETPACK=csv-mounts=all".into());
    assert!(Requirements::from_env(&repeated).is_ok());
    // Off means none are counted.
    let mut off = rules(40);
    off.push("NVIDIA_DISABLE_REQUIRE=1".into());
    assert!(Requirements::from_env(&off).unwrap().is_empty());
}

#[test]
fn a_nul_byte_in_a_rule_is_refused_as_nvidia_fails_to_exec() {
    // main.go passes each rule as a --require argument to syscall.Exec,
    // which fails with EINVAL on a NUL byte: the container does not start.
    for rule in ["cuda>=1\0", "\0", "cuda>=1 \0foo"] {
        let entries = env(&[&format!("NVIDIA_REQUIRE_CUDA={rule}")]);
        let err = Requirements::from_env(&entries).unwrap_err();
        assert_eq!(
            err,
            Error::NulByte {
                var: "NVIDIA_REQUIRE_CUDA".into()
            }
        );
        assert!(err
            .to_string()
            .starts_with("NVIDIA_REQUIRE_CUDA holds a NUL"));
    }
}

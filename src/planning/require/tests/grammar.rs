//! The grammar and its evaluation: keys, operators, alternatives, versions, facts.

use std::cmp::Ordering;

use super::super::term::{compare_versions, Op};
use super::*;

#[test]
fn every_operator_compares_each_version_key() {
    let cases = [
        // cuda: the host supports 12.2.
        ("cuda=12.2", true),
        ("cuda=12.2.0", true),
        ("cuda=12", false),
        ("cuda!=12.2", false),
        ("cuda!=12.3", true),
        ("cuda<12.3", true),
        ("cuda<12.2", false),
        ("cuda<=12.2", true),
        ("cuda<=12.1", false),
        ("cuda>12.1", true),
        ("cuda>12.2", false),
        ("cuda>=12.2", true),
        ("cuda>=12.3", false),
        ("cuda>=12", true),
        ("cuda>=11.8", true),
        ("cuda>=12.10", false),
        ("cuda>=13", false),
        // driver: 535.261.03.
        ("driver>=535", true),
        ("driver<536", true),
        ("driver=535.261.03", true),
        ("driver=535.261.3", true),
        ("driver=535.261", false),
        ("driver!=535.261.03", false),
        ("driver>535.261", true),
        ("driver>535.261.03", false),
        ("driver<=535.261.03", true),
        ("driver>=535.262", false),
        ("driver<535.261.04", true),
        // arch: compute capability 8.0.
        ("arch=8.0", true),
        ("arch=8", true),
        ("arch!=8.0", false),
        ("arch!=8.6", true),
        ("arch>=9.0", false),
        ("arch>7.5", true),
        ("arch<9", true),
        ("arch<=8.0", true),
        ("arch<8.0", false),
        ("arch>8", false),
    ];
    for (rule, expected) in cases {
        assert_eq!(holds(rule, &host_535()), expected, "{rule}");
    }
}

#[test]
fn brand_compares_case_insensitively_with_equality_only() {
    let cases = [
        ("brand=tesla", true),
        ("brand=Tesla", true),
        ("brand=TESLA", true),
        ("brand!=tesla", false),
        ("brand=geforce", false),
        ("brand!=geforce", true),
    ];
    for (rule, expected) in cases {
        assert_eq!(holds(rule, &host_535()), expected, "{rule}");
    }
    assert!(holds("brand=geforce", &with_brand("GeForce")));
}

#[test]
fn keys_are_case_insensitive() {
    for rule in ["CUDA>=12.0", "Driver>=535", "ARCH=8.0", "Brand=tesla"] {
        assert!(holds(rule, &host_535()), "{rule}");
    }
}

#[test]
fn a_space_separates_alternatives_and_comma_joins_terms() {
    let cases = [
        ("cuda>=11.0,driver>=500", true),
        ("cuda>=11.0,driver>=600", false),
        ("cuda>=12.4 brand=tesla,driver>=535,driver<536", true),
        ("cuda>=12.4 brand=geforce,driver>=535,driver<536", false),
        ("cuda>=12.4 brand=tesla,driver>=470,driver<471", false),
        ("cuda>=12.4 cuda>=12.3 cuda>=12.2", true),
        ("brand=geforce cuda>=12.0,arch>=8.0", true),
        // Several spaces, at both ends: empty pieces are skipped (dsl.c:143-145).
        ("  cuda>=12.4   brand=tesla  ", true),
        // Stray commas are skipped (dsl.c:146-148).
        ("cuda>=12.0,", true),
        (",cuda>=12.0", true),
        ("cuda>=12.0,,driver>=1", true),
        // ...but an alternative of commas only ends evaluation with the
        // previous alternative's answer (dsl.c:156-157): see evaluation.rs.
        ("cuda>=12.4 , brand=tesla", false),
    ];
    for (rule, expected) in cases {
        assert_eq!(holds(rule, &host_535()), expected, "{rule:?}");
    }
}

#[test]
fn real_cuda_image_rule_holds_through_its_driver_branch_alternatives() {
    // NVIDIA_REQUIRE_CUDA of nvidia/cuda:12.4.1-base-ubuntu22.04, shortened.
    let rule =
        "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 \
                brand=geforce,driver>=470,driver<471 brand=tesla,driver>=535,driver<536 \
                brand=geforce,driver>=535,driver<536 brand=quadro,driver>=535,driver<536";
    assert!(holds(rule, &host_535()));
    assert!(holds(rule, &with_brand("geforce")));
    assert!(!holds(rule, &with_brand("titan")));
    let driver_550 = Facts {
        driver: "550.54.15".into(),
        cuda: Some(CudaVersion(12040)),
        ..with_brand("titan")
    };
    assert!(holds(rule, &driver_550));
}

#[test]
fn malformed_terms_are_invalid_expressions_naming_variable_and_text() {
    // Each is NVIDIA's `invalid expression` once evaluation reaches it
    // (dsl.c:100-127 reading, 41-50 version values, 84-88 brand operators).
    let cases = [
        ("foo>=1", "foo>=1", "unknown key"),
        ("cuda>=13 gpu=1", "gpu=1", "unknown key"),
        (">=12", ">=12", "no key"),
        ("cuda", "cuda", "no operator"),
        ("cuda12.0", "cuda12.0", "no operator"),
        ("cuda=>12", "cuda=>12", "\"=>\" is not an operator"),
        ("cuda<>12", "cuda<>12", "not an operator"),
        ("cuda==12", "cuda==12", "\"==\" is not an operator"),
        ("cuda===12", "cuda===12", "not an operator"),
        ("cuda!==12", "cuda!==12", "not an operator"),
        ("cuda>=", "cuda>=", "no value"),
        ("cuda>=12,driver<", "driver<", "no value"),
        ("cuda>=12.x", "cuda>=12.x", "not a version"),
        ("cuda>=.12", "cuda>=.12", "start with a digit"),
        ("cuda>=-1", "cuda>=-1", "not a version"),
        ("cuda>=+1", "cuda>=+1", "not a version"),
        ("cuda>=１２", "cuda>=１２", "not a version"),
        ("cuda>=12=1", "cuda>=12=1", "not a version"),
        (
            "driver>=99999999999999999999999",
            "driver>=99999999999999999999999",
            "or more",
        ),
        ("arch>=sm_80", "arch>=sm_80", "not a version"),
        ("brand>=tesla", "brand>=tesla", "only = and !="),
        ("brand<tesla", "brand<tesla", "only = and !="),
        ("brand=", "brand=", "no value"),
    ];
    for (rule, term, reason) in cases {
        let err = bad_term(rule, &host_535());
        let Error::BadTerm {
            var,
            value,
            term: bad,
            reason: why,
            ..
        } = &err
        else {
            panic!("{rule:?}: {err:?}");
        };
        assert_eq!(var, "NVIDIA_REQUIRE_TEST", "{rule:?}");
        assert_eq!(value, rule);
        assert_eq!(bad, term, "{rule:?}");
        assert!(why.contains(reason), "{rule:?}: {why}");
        let message = err.to_string();
        assert!(message.starts_with("NVIDIA_REQUIRE_TEST "), "{message}");
        assert!(
            message.contains(&format!("invalid expression {term:?}")),
            "{message}"
        );
    }
}

#[test]
fn versions_compare_numerically_per_component() {
    // dsl.c:35-79: numbers pairwise, runs of dots skipped, a leftover side
    // counting only if it holds a digit other than 0.
    let ordering = |a: &str, b: &str| {
        let is = |op| compare_versions(a, op, b).unwrap_or_else(|e| panic!("{a} vs {b}: {e}"));
        let ordering = match (is(Op::Lt), is(Op::Eq), is(Op::Gt)) {
            (true, false, false) => Ordering::Less,
            (false, true, false) => Ordering::Equal,
            (false, false, true) => Ordering::Greater,
            other => panic!("{a} vs {b}: {other:?}"),
        };
        assert_eq!(is(Op::Le), ordering.is_le(), "{a} <= {b}");
        assert_eq!(is(Op::Ge), ordering.is_ge(), "{a} >= {b}");
        assert_eq!(is(Op::Ne), ordering.is_ne(), "{a} != {b}");
        ordering
    };
    let cases = [
        ("12.10", "12.9", Ordering::Greater),
        ("12.9", "12.10", Ordering::Less),
        ("12", "12.0.0", Ordering::Equal),
        ("12.0.0", "12", Ordering::Equal),
        ("1.0.1", "1", Ordering::Greater),
        ("1", "1.0.1", Ordering::Less),
        ("0", "0.0", Ordering::Equal),
        ("535.261.03", "535.261.3", Ordering::Equal),
        ("535.261.03", "535.54.15", Ordering::Greater),
        ("007", "7", Ordering::Equal),
        ("12.2", "12..2", Ordering::Equal),
        ("12", "12.", Ordering::Equal),
        ("12.2", "12.2...", Ordering::Equal),
        ("12.2", "12.20", Ordering::Less),
        ("12.2", "12.02", Ordering::Equal),
        (
            "18446744073709551614",
            "18446744073709551613",
            Ordering::Greater,
        ),
        ("2", "10", Ordering::Less),
    ];
    for (a, b, expected) in cases {
        assert_eq!(ordering(a, b), expected, "{a} vs {b}");
    }
    // strtoumax's overflow value, UINTMAX_MAX, is refused even when exact.
    assert!(compare_versions("1", Op::Ge, "18446744073709551615").is_err());
    assert!(compare_versions("1", Op::Ge, "18446744073709551616").is_err());
    assert!(compare_versions("18446744073709551615", Op::Ge, "1").is_err());
    // The CUDA version is compared as MAJOR.MINOR of cuDriverGetVersion.
    assert!(holds("cuda=12.10", &with_cuda(12100)));
    assert!(holds("cuda=0.0", &with_cuda(-5)));
}

#[test]
fn needs_names_only_the_facts_the_rules_use() {
    let cases = [
        (
            "cuda>=12.0",
            Needs {
                cuda: true,
                ..Needs::default()
            },
        ),
        (
            "driver>=535",
            Needs {
                driver: true,
                ..Needs::default()
            },
        ),
        (
            "arch>=8.0 brand=tesla",
            Needs {
                arch: true,
                brand: true,
                ..Needs::default()
            },
        ),
        (
            "cuda>=12.4 brand=tesla,driver>=470",
            Needs {
                cuda: true,
                driver: true,
                brand: true,
                arch: false,
            },
        ),
    ];
    for (rule, expected) in cases {
        assert_eq!(parse(rule).needs(), expected, "{rule}");
    }
    assert_eq!(Requirements::default().needs(), Needs::default());
}

#[test]
fn device_terms_hold_when_the_container_gets_no_gpu() {
    let no_gpu = Facts {
        device: None,
        ..host_535()
    };
    assert!(holds("arch>=99", &no_gpu));
    assert!(holds("brand=quadro", &no_gpu));
    assert!(!holds("cuda>=99,arch>=1", &no_gpu));
    // Their values are not even looked at (configure.c check_device_arch
    // and check_device_brand return true before comparing).
    assert!(holds("arch>=sm_80", &no_gpu));
    assert!(holds("brand<tesla", &no_gpu));
}

#[test]
fn forward_compatibility_libraries_raise_the_cuda_version() {
    let compat = |compat: i32| Facts {
        compat_cuda: Some(CudaVersion(compat)),
        ..host_535()
    };
    assert!(holds("cuda>=12.4", &compat(12080)));
    assert!(!holds("cuda>=12.9", &compat(12080)));
    // Older compat libraries are not used: the driver's own version counts.
    assert!(holds("cuda>=12.2", &compat(12000)));
    let only_compat = Facts {
        cuda: None,
        ..compat(12080)
    };
    assert!(holds("cuda>=12.8", &only_compat));
}

#[test]
fn unknown_fact_is_an_error_naming_it() {
    let no_arch = Facts {
        device: Some(DeviceFacts {
            name: GPU.into(),
            arch: None,
            brand: None,
        }),
        ..host_535()
    };
    let no_cuda = Facts {
        cuda: None,
        ..host_535()
    };
    let bad_driver = Facts {
        driver: "N/A".into(),
        ..host_535()
    };
    let cases = [
        (
            "arch>=9.0",
            &no_arch,
            "compute capability could not be determined",
        ),
        ("brand=tesla", &no_arch, "brand could not be determined"),
        (
            "cuda>=12.0",
            &no_cuda,
            "CUDA version could not be determined",
        ),
        (
            "driver>=535",
            &bad_driver,
            "driver version could not be determined (\"N/A\"",
        ),
    ];
    for (rule, facts, missing) in cases {
        let err = parse(rule).check(facts).unwrap_err();
        assert!(matches!(err, Error::UnknownFact { .. }), "{rule}: {err:?}");
        let message = err.to_string();
        assert!(message.contains(missing), "{message}");
        assert!(
            message.contains(&format!("cannot check {rule} on {GPU}")),
            "{message}"
        );
    }
    assert_eq!(
        parse("arch>=9.0").check(&no_arch).unwrap_err().to_string(),
        "NVIDIA_REQUIRE_TEST \"arch>=9.0\": cannot check arch>=9.0 on GPU 0 (GPU-8a3c): \
         the GPU's compute capability could not be determined"
    );
}

#[test]
fn unknown_facts_matter_only_when_the_answer_depends_on_them() {
    let no_arch = Facts {
        device: Some(DeviceFacts {
            name: GPU.into(),
            arch: None,
            brand: Some("tesla".into()),
        }),
        ..host_535()
    };
    // Another alternative holds.
    assert!(parse("arch>=9.0 cuda>=12.0").check(&no_arch).is_ok());
    // A false term in the same alternative decides it.
    assert!(matches!(
        parse("cuda>=13,arch>=9.0").check(&no_arch),
        Err(Error::Unsatisfied(_))
    ));
    // No alternative holds, and one hangs on the unknown fact.
    assert!(matches!(
        parse("cuda>=13 arch>=9.0").check(&no_arch),
        Err(Error::UnknownFact { .. })
    ));
}

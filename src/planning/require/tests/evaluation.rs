//! NVIDIA's evaluation order: left to right, stopping when the answer is
//! known, each term read only when reached; what decides, and what refuses.

use super::*;

/// Driver 470 (CUDA 11.4) with the same GPU.
fn host_470() -> Facts {
    Facts {
        driver: "470.256.02".into(),
        ..with_cuda(11040)
    }
}

#[test]
fn first_alternative_that_holds_ends_evaluation_unread_rest_included() {
    // dsl.c:156-157: the first alternative whose terms all hold ends the
    // loop, so what follows is never read. We used to refuse every rule
    // with a bad term anywhere.
    let rule = "cuda>=11.6 foo=bar";
    assert!(holds(rule, &host_535()));
    // Where the first alternative fails, evaluation reaches `foo=bar`,
    // which NVIDIA calls an invalid expression (dsl.c:149-151).
    let err = bad_term(rule, &host_470());
    assert!(
        err.to_string().contains("invalid expression \"foo=bar\""),
        "{err}"
    );
    // Same for any later alternative and any malformation.
    assert!(holds(
        "cuda>=12.0 cuda>>=1 brand<x driver>=foo",
        &host_535()
    ));
    assert!(holds("driver>=535 cuda=>12", &host_535()));
}

#[test]
fn first_false_term_ends_its_alternative_unread_rest_included() {
    // dsl.c:153-154: a false term breaks out of its alternative, so the
    // terms after it are not read: the rule is unsatisfied, not invalid.
    assert!(!holds("cuda>=99,foo=bar", &host_535()));
    assert!(!holds("cuda>=99,foo=bar driver>=999,cuda==1", &host_535()));
    assert!(holds("cuda>=99,foo=bar driver>=535", &host_535()));
    // A bad term after true ones is reached, and refused.
    let err = bad_term("cuda>=12,driver>=535,foo=bar", &host_535());
    assert!(
        err.to_string().contains("\"foo=bar\" (reached on "),
        "{err}"
    );
    let err = bad_term("cuda>=99 cuda>=12,cuda==12", &host_535());
    assert!(err.to_string().contains("\"cuda==12\""), "{err}");
}

#[test]
fn first_term_is_always_read_so_its_malformation_is_refused_up_front() {
    // Whatever the host, evaluation starts with the first term of the
    // first alternative (dsl.c:143-149), so the refusal needs no facts.
    for rule in [
        "foo=bar cuda>=1",
        "cuda==12.2",
        "cuda>=12.x,cuda>=1",
        "driver>=.5",
        "cuda>=99999999999999999999.0",
    ] {
        assert!(matches!(parse_error(rule), Error::BadTerm { .. }), "{rule}");
    }
    // A device term's value is not looked at without a GPU, and a number
    // past the first is only read if the comparison gets there: those wait
    // for the facts.
    for rule in ["arch>=sm_80", "brand<x", "cuda>=11.99999999999999999999"] {
        let env = env(&[&format!("NVIDIA_REQUIRE_TEST={rule}")]);
        assert!(Requirements::from_env(&env).is_ok(), "{rule}");
    }
}

#[test]
fn alternative_of_commas_only_ends_evaluation_with_the_previous_answer() {
    // dsl.c:146-157: an alternative whose pieces are all empty completes
    // its loop without a term, which ends evaluation with `ret` unchanged:
    // true when first, false after a failed alternative.
    assert!(holds(", cuda>=99", &host_535()));
    assert!(!holds("cuda>=99 , cuda>=1", &host_535()));
    assert!(!holds("cuda>=99 ,, foo=bar", &host_535()));
    assert!(holds("cuda>=99 cuda>=1 ,", &host_535()));
}

#[test]
fn only_a_space_separates_alternatives() {
    // dsl.c:143 `strsep(&ptr, " ")`: a tab or a newline is part of a
    // term, so the value around it is no version. We used to split on any
    // whitespace.
    for rule in [
        "cuda>=12.0\tdriver>=1",
        "cuda>=12.0\n",
        "cuda>=99 driver>=1\t",
    ] {
        let err = bad_term(rule, &host_535());
        assert!(err.to_string().contains("not a version"), "{rule:?}: {err}");
    }
    // A brand's value is any text, so there it is just another value.
    assert!(!holds("brand=tesla\tbrand=geforce", &host_535()));
    assert!(holds("brand=tesla\tx", &with_brand("TESLA\tX")));
}

#[test]
fn double_equals_is_invalid_and_a_lone_bang_means_not_equal() {
    // dsl.c:103-114: the run of operator characters must be a prefix of
    // one of `= != < <= > >=`, first match in that order. `==` is none (we
    // used to take it as `=`); `!` is a prefix of `!=` (we used to refuse it).
    assert!(holds("cuda!12.3", &host_535()));
    assert!(!holds("cuda!12.2", &host_535()));
    assert!(holds("brand!geforce", &host_535()));
    assert!(holds("driver!535.261.04,arch!9.0", &host_535()));
    for rule in [
        "cuda==12.2",
        "cuda=>12",
        "cuda=<12",
        "cuda<>12",
        "cuda!==12",
        "cuda!!12",
    ] {
        let err = bad_term(rule, &host_535());
        assert!(
            err.to_string().contains("is not an operator"),
            "{rule}: {err}"
        );
    }
}

#[test]
fn brand_value_is_any_text_and_an_order_operator_fails_only_with_a_gpu() {
    // dsl.c:81-89 compares any text case-insensitively and refuses < <= >
    // >=; configure.c check_device_brand returns true before that when no
    // GPU is visible. We used to refuse unusual brand text and `brand<x`
    // up front.
    assert!(!holds("brand=te$la", &host_535()));
    assert!(holds("brand=te$la", &with_brand("TE$LA")));
    assert!(!holds("brand=tesla=x", &host_535()));
    assert!(holds("brand!=tesla=x", &host_535()));
    assert!(holds("brand=nvidiartx", &with_brand("NvidiaRTX")));
    let no_gpu = Facts {
        device: None,
        ..host_535()
    };
    for rule in ["brand<x", "brand>=tesla"] {
        assert!(holds(rule, &no_gpu), "{rule}");
        let err = bad_term(rule, &host_535());
        assert!(err.to_string().contains("only = and !="), "{err}");
    }
    // Not even an unknown brand spares it: NVIDIA would know the brand.
    let no_brand = Facts {
        device: Some(DeviceFacts {
            name: GPU.into(),
            arch: Some((8, 0)),
            brand: None,
        }),
        ..host_535()
    };
    bad_term("brand<x", &no_brand);
}

#[test]
fn version_numbers_are_read_only_as_far_as_the_comparison_goes() {
    // dsl.c:46-63: strtoumax reads a number pairwise with the host's, and
    // the first difference decides; so a number too large to read is an
    // error only when reached.
    let big = "99999999999999999999";
    assert!(holds(&format!("cuda>=11.{big}"), &host_535()));
    assert!(!holds(&format!("cuda<11.{big}"), &host_535()));
    assert!(holds(&format!("cuda<12.2.{big}"), &host_535()));
    let err = bad_term(&format!("cuda>=12.{big}"), &host_535());
    assert!(err.to_string().contains("or more"), "{err}");
    // Runs of dots and a trailing dot are skipped; a leading one is not.
    assert!(holds("cuda>=12..2,cuda<=12.2.", &host_535()));
    assert!(holds("arch=8..0.", &host_535()));
    bad_term("arch>=.8", &host_535());
}

#[test]
fn long_false_term_is_invalid_as_nvidia_cannot_format_it() {
    // dsl.c:15, 119-122: a false term is formatted as "KEY OP VALUE" into
    // 128 bytes; at 128 or more NVIDIA returns invalid expression, even
    // when a later alternative would hold.
    let value = |n: usize| "x".repeat(n);
    // "brand = " is 8 bytes with the value's.
    let just_fits = format!("brand={} cuda>=12", value(119));
    assert!(holds(&just_fits, &host_535()));
    let too_long = format!("brand={} cuda>=12", value(120));
    let err = bad_term(&too_long, &host_535());
    assert!(err.to_string().contains("128 bytes"), "{err}");
    // The operator counts as NVIDIA spells it: a lone `!` is `!=`.
    let fits = format!("brand!{} cuda>=12", value(118));
    assert!(holds(&fits, &with_brand(&value(118))));
    let too_long = format!("brand!{} cuda>=12", value(119));
    let err = bad_term(&too_long, &with_brand(&value(119)));
    assert!(err.to_string().contains("128 bytes"), "{err}");
    // A long true term is fine.
    let long_true = format!("driver>={}535", "0".repeat(150));
    assert!(holds(&long_true, &host_535()));
}

#[test]
fn unknown_fact_is_tried_both_ways_in_nvidias_order() {
    // NVIDIA always has the facts; when we lack one, the answer stands
    // only if it is the same whichever way the term would have gone.
    let no_arch = Facts {
        device: Some(DeviceFacts {
            name: GPU.into(),
            arch: None,
            brand: Some("tesla".into()),
        }),
        ..host_535()
    };
    // Holds either way: true ends the rule; false goes on to cuda>=12.
    assert!(holds("arch>=9.0 cuda>=12.0", &no_arch));
    // Fails either way.
    assert!(!holds("arch>=9.0,cuda>=13 driver>=999", &no_arch));
    // Invalid either way: the later term is reached both ways.
    assert!(matches!(
        parse("arch>=9.0,foo=1 foo=2").check(&no_arch),
        Err(Error::BadTerm { .. })
    ));
    // True would reach an invalid term, false would hold: unknown.
    let err = parse("arch>=9.0,foo=1 cuda>=12")
        .check(&no_arch)
        .unwrap_err();
    assert!(matches!(err, Error::UnknownFact { .. }), "{err:?}");
    // A false long term would be invalid, a true one holds: unknown.
    let long = format!("arch>=9.0{}", "0".repeat(130));
    let err = parse(&format!("{long} cuda>=12"))
        .check(&no_arch)
        .unwrap_err();
    assert!(matches!(err, Error::UnknownFact { .. }), "{err:?}");
    // Many unknown terms stay cheap: both ways meet again at the next
    // alternative, and each alternative is evaluated once per start.
    let many = vec!["arch>=9,arch>=8,arch>=7"; 150].join(" ") + " cuda>=12";
    assert!(holds(&many, &no_arch));
}

#[test]
fn largest_rules_with_unknown_facts_evaluate_in_a_small_stack() {
    // Trying unknown facts both ways must not recurse per term or per
    // alternative, nor drop a long list recursively: a 4 KiB rule holds
    // some 600 terms.
    let run = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let unknown = Facts {
                device: Some(DeviceFacts::default()),
                ..Facts::default()
            };
            let no_arch = Facts {
                device: Some(DeviceFacts {
                    arch: None,
                    ..DeviceFacts::default()
                }),
                ..host_535()
            };
            for (rule, facts) in [
                (vec!["arch=1"; 585].join(" "), &unknown),
                (vec!["arch=1"; 585].join(","), &unknown),
                (vec!["arch=1,arch=2"; 292].join(" "), &unknown),
                (vec!["brand=x"; 512].join(" "), &unknown),
                // 584 false terms behind an unknown one.
                (
                    format!("arch=1 {}", vec!["cuda=1"; 584].join(" ")),
                    &no_arch,
                ),
            ] {
                assert!(rule.len() <= MAX_VALUE_LEN);
                let err = parse(&rule).check(facts).unwrap_err();
                assert!(matches!(err, Error::UnknownFact { .. }), "{err:?}");
            }
        })
        .unwrap()
        .join();
    assert!(run.is_ok());
}

#[test]
fn facts_are_learned_only_when_a_rule_cannot_be_decided_without_them() {
    let unknown = || {
        let mut facts = host_535();
        if let Some(device) = &mut facts.device {
            device.arch = None;
            device.brand = None;
        }
        facts
    };
    let check = |rule: &str, learned: Option<(u32, u32)>| {
        let mut asked = 0;
        let mut facts = unknown();
        let result = parse(rule).check_learning(&mut facts, &mut |facts: &mut Facts| {
            asked += 1;
            let Some(arch) = learned else {
                return Ok::<bool, Error>(false);
            };
            if let Some(device) = &mut facts.device {
                device.arch = Some(arch);
                device.brand = Some("Tesla".into());
            }
            Ok(true)
        });
        (result, asked)
    };
    // The CUDA term decides whatever the architecture: nothing is asked.
    assert!(matches!(check("cuda>=12.0 arch>=9.0", None), (Ok(()), 0)));
    assert!(matches!(
        check("cuda>=99.0,arch>=9.0", None),
        (Err(Error::Unsatisfied(_)), 0)
    ));
    // The architecture decides: it is asked for once, and decides.
    assert!(matches!(check("arch>=8.0", Some((8, 0))), (Ok(()), 1)));
    assert!(matches!(
        check("arch>=9.0", Some((8, 0))),
        (Err(Error::Unsatisfied(_)), 1)
    ));
    // Nothing more to learn: the rule stays undecided.
    assert!(matches!(
        check("arch>=8.0", None),
        (Err(Error::UnknownFact { .. }), 1)
    ));
}

//! What users read: refusals and errors, always one line.

use super::*;

#[test]
fn refusal_names_rule_device_host_and_remedies() {
    assert_eq!(
        refusal(&["NVIDIA_REQUIRE_CUDA=cuda>=12.4"], &host_535()),
        "NVIDIA_REQUIRE_CUDA \"cuda>=12.4\": GPU 0 (GPU-8a3c): unsatisfied condition: cuda>=12.4 is false: \
         driver 535.261.03 supports CUDA 12.2; use a host driver that supports CUDA 12.4 or \
         newer, or an image built for CUDA 12.2 or older (or one that ships CUDA \
         forward-compatibility libraries in /usr/local/cuda/compat, which datacenter GPUs \
         can use)"
    );
}

#[test]
fn refusal_of_an_or_rule_lists_each_alternatives_failing_term() {
    assert_eq!(
        refusal(
            &["NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=geforce"],
            &host_535()
        ),
        "NVIDIA_REQUIRE_CUDA \"cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=geforce\": \
         GPU 0 (GPU-8a3c): unsatisfied condition: no alternative holds (cuda>=12.4 is false; driver<471 is false; \
         brand=geforce is false): driver 535.261.03 supports CUDA 12.2, the GPU's brand is \
         tesla; use a host driver that supports CUDA 12.4 or newer, or an image built for \
         CUDA 12.2 or older (or one that ships CUDA forward-compatibility libraries in \
         /usr/local/cuda/compat, which datacenter GPUs can use)"
    );
    // Repeated failing terms are listed once.
    let message = refusal(
        &["NVIDIA_REQUIRE_CUDA=cuda>=13 brand=x,driver>=1 brand=x,driver>=2"],
        &host_535(),
    );
    assert!(
        message.contains("(cuda>=13 is false; brand=x is false)"),
        "{message}"
    );
}

#[test]
fn refusal_of_a_device_term_names_the_gpu_fact() {
    assert_eq!(
        refusal(&["NVIDIA_REQUIRE_ARCH=arch>=9.0"], &host_535()),
        "NVIDIA_REQUIRE_ARCH \"arch>=9.0\": GPU 0 (GPU-8a3c): unsatisfied condition: arch>=9.0 is false: \
         driver 535.261.03 supports CUDA 12.2, the GPU has compute capability 8.0; \
         use a GPU that satisfies arch>=9.0, or an image built for compute capability 8.0"
    );
    assert_eq!(
        refusal(&["NVIDIA_REQUIRE_BRAND=brand=quadro"], &host_535()),
        "NVIDIA_REQUIRE_BRAND \"brand=quadro\": GPU 0 (GPU-8a3c): unsatisfied condition: brand=quadro is false: \
         driver 535.261.03 supports CUDA 12.2, the GPU's brand is tesla; \
         use a GPU that satisfies brand=quadro, or an image that accepts brand tesla"
    );
    assert_eq!(
        refusal(&["NVIDIA_REQUIRE_DRIVER=driver>=550"], &host_535()),
        "NVIDIA_REQUIRE_DRIVER \"driver>=550\": GPU 0 (GPU-8a3c): unsatisfied condition: driver>=550 is false: \
         driver 535.261.03 supports CUDA 12.2; \
         use a host driver that satisfies driver>=550, or an image that accepts driver 535.261.03"
    );
}

#[test]
fn refusal_of_a_legacy_image_names_cuda_version_and_compat_libraries() {
    let facts = Facts {
        compat_cuda: Some(CudaVersion(12080)),
        ..host_535()
    };
    assert_eq!(
        refusal(&["CUDA_VERSION=12.9.0"], &facts),
        "CUDA_VERSION \"12.9.0\" implies \"cuda>=12.9\" (no NVIDIA_REQUIRE_CUDA): \
         GPU 0 (GPU-8a3c): unsatisfied condition: cuda>=12.9 is false: driver 535.261.03 supports CUDA 12.2 \
         (CUDA 12.8 with the image's forward-compatibility libraries); use a host driver that \
         supports CUDA 12.9 or newer, or an image built for CUDA 12.8 or older"
    );
}

#[test]
fn refusal_of_an_upper_cuda_bound_suggests_an_older_driver() {
    let message = refusal(&["NVIDIA_REQUIRE_CUDA=cuda<12.0"], &host_535());
    assert!(
        message.ends_with(
            "use a host driver whose CUDA version satisfies cuda<12.0, \
             or an image that accepts CUDA 12.2"
        ),
        "{message}"
    );
    let message = refusal(&["NVIDIA_REQUIRE_CUDA=cuda=12.4"], &host_535());
    assert!(message.contains("supports exactly CUDA 12.4"), "{message}");
    let message = refusal(&["NVIDIA_REQUIRE_CUDA=cuda>12.4"], &host_535());
    assert!(
        message.contains("supports a CUDA newer than 12.4"),
        "{message}"
    );
}

#[test]
fn refusal_without_a_gpu_leaves_the_device_out() {
    let no_gpu = Facts {
        device: None,
        ..host_535()
    };
    let message = refusal(&["NVIDIA_REQUIRE_CUDA=cuda>=12.4"], &no_gpu);
    assert!(
        message.starts_with("NVIDIA_REQUIRE_CUDA \"cuda>=12.4\": unsatisfied condition: cuda>=12.4 is false: driver"),
        "{message}"
    );
}

#[test]
fn messages_stay_on_one_line_whatever_the_rule_holds() {
    // NVIDIA reads a brand value as any text (dsl.c:81-89), newlines
    // included; a term that is not plain text is shown quoted.
    let message = refusal(
        &["NVIDIA_REQUIRE_CUDA=cuda>=13 brand=x\nbrand=y\r\n"],
        &host_535(),
    );
    assert!(
        !message.contains('\n') && !message.contains('\r'),
        "{message}"
    );
    assert!(
        message.contains("(cuda>=13 is false; \"brand=x\\nbrand=y\\r\\n\" is false)"),
        "{message}"
    );
    let err = bad_term("cuda>=13 brand=tesla,\u{1b}[31m=1", &host_535());
    assert!(!err.to_string().contains('\u{1b}'), "{err}");
    let err = Requirements::from_env(&env(&["NVIDIA_REQUIRE_CUDA=cuda>=13 brand=x\ny"]))
        .unwrap()
        .check(&Facts {
            device: Some(DeviceFacts {
                name: GPU.into(),
                ..DeviceFacts::default()
            }),
            ..host_535()
        })
        .unwrap_err();
    assert!(matches!(err, Error::UnknownFact { .. }), "{err:?}");
    assert!(!err.to_string().contains('\n'), "{err}");
    assert!(
        err.to_string().contains("cannot check \"brand=x\\ny\""),
        "{err}"
    );
    let err = parse_error("cuda>=13\n\u{1b}[31mfoo");
    assert!(!err.to_string().contains('\n'), "{err}");
    assert!(!err.to_string().contains('\u{1b}'), "{err}");
}

#[test]
fn invalid_expression_names_the_term_where_it_was_reached_and_the_remedy() {
    // A first term is always read (dsl.c:143-149): the message needs no host.
    assert_eq!(
        parse_error("cuda==12.2").to_string(),
        "NVIDIA_REQUIRE_TEST \"cuda==12.2\": invalid expression \"cuda==12.2\": \"==\" is \
         not an operator; operators are = != < <= > >=; NVIDIA's CLI refuses it too: fix \
         the rule, or set NVIDIA_DISABLE_REQUIRE=true"
    );
    // A later one is read only on hosts where no alternative before it
    // holds (dsl.c:153-157), so the message says where it was reached.
    assert_eq!(
        bad_term("cuda>=12.4 foo=bar", &host_535()).to_string(),
        "NVIDIA_REQUIRE_TEST \"cuda>=12.4 foo=bar\": invalid expression \"foo=bar\" (reached \
         on GPU 0 (GPU-8a3c) with driver 535.261.03, CUDA 12.2): unknown key \"foo\"; keys are \
         cuda, driver, arch and brand; NVIDIA's CLI refuses it too: fix the rule, or set \
         NVIDIA_DISABLE_REQUIRE=true"
    );
}

#[test]
fn refusal_keeps_nvidias_key_phrase_unsatisfied_condition() {
    // NVIDIA's text is `unsatisfied condition: <first alternative>`
    // (dsl.c:159-167); ours names the false term and more, but keeps the
    // phrase users search logs for.
    for (rule, facts) in [
        ("NVIDIA_REQUIRE_CUDA=cuda>=12.4", host_535()),
        ("NVIDIA_REQUIRE_X=brand=geforce arch>=9.0", host_535()),
        ("CUDA_VERSION=12.6", host_535()),
    ] {
        let message = refusal(&[rule], &facts);
        assert!(message.contains(": unsatisfied condition: "), "{message}");
    }
}

#[test]
fn odd_variable_names_are_quoted_and_cut_short() {
    let message = parse_error_named("NVIDIA_REQUIRE_\nX", "bogus").to_string();
    assert!(
        message.starts_with("\"NVIDIA_REQUIRE_\\nX\" \"bogus\""),
        "{message}"
    );
    let long = format!("NVIDIA_REQUIRE_{}", "A".repeat(1000));
    let message = parse_error_named(&long, "bogus").to_string();
    assert!(message.len() < 400, "{message}");
    assert!(message.contains("AAA\"... \"bogus\""), "{message}");
}

fn parse_error_named(name: &str, rule: &str) -> Error {
    Requirements::from_env(&env(&[&format!("{name}={rule}")])).unwrap_err()
}

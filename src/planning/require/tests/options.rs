//! Rules given as NVIDIA's CLI `--require` options: read and checked as
//! the variables are, named as options in what users read.

use super::*;

fn rules(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| v.to_string()).collect()
}

#[test]
fn option_rules_are_checked_in_order_as_variables_are() {
    let requirements =
        Requirements::from_rules(&rules(&["cuda>=12.0", "driver>=470 brand=geforce"])).unwrap();
    requirements.check(&host_535()).unwrap();
    let requirements = Requirements::from_rules(&rules(&["cuda>=12.0", "cuda>=13.0"])).unwrap();
    assert_eq!(
        requirements.check(&host_535()).unwrap_err().to_string(),
        "--require \"cuda>=13.0\": GPU 0 (GPU-8a3c): unsatisfied condition: cuda>=13.0 is false: \
         driver 535.261.03 supports CUDA 12.2; use a host driver that supports CUDA 13.0 or \
         newer, or an image built for CUDA 12.2 or older (or one that ships CUDA \
         forward-compatibility libraries in /usr/local/cuda/compat, which datacenter GPUs \
         can use)"
    );
}

#[test]
fn no_option_and_empty_options_require_nothing() {
    assert!(Requirements::from_rules(&[]).unwrap().is_empty());
    assert!(Requirements::from_rules(&rules(&["", " ", ","]))
        .unwrap()
        .is_empty());
}

#[test]
fn a_malformed_first_term_is_refused_naming_the_option() {
    let err = Requirements::from_rules(&rules(&["cuda>>=12"])).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("--require \"cuda>>=12\": invalid expression"),
        "{err}"
    );
}

#[test]
fn more_rules_than_nvidias_cli_takes_are_refused() {
    let many = vec!["driver>=1".to_string(); MAX_RULES + 1];
    assert_eq!(
        Requirements::from_rules(&many),
        Err(Error::TooManyOptions {
            count: MAX_RULES + 1
        })
    );
    assert!(Requirements::from_rules(&many[..MAX_RULES]).is_ok());
}

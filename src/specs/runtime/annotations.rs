//! The wrapper's CDI mode: whether a container's `config.json` may carry
//! an annotation that names CDI devices, which decides whether the whole
//! spec is decoded for the planner ([`crate::planning::planner`] decides the names).

/// Whether `data` (a `config.json`) may carry an annotation under one of
/// `prefixes`: the whole spec is decoded only then.
pub fn may_annotate(data: &[u8], prefixes: &[String]) -> bool {
    prefixes.iter().any(|p| {
        let p = p.as_bytes();
        !p.is_empty() && data.windows(p.len()).any(|w| w == p)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_spec_holding_a_prefix_is_decoded() {
        assert!(may_annotate(
            br#"{"annotations":{"cdi.k8s.io/x":"a"}}"#,
            &["cdi.k8s.io/".into()]
        ));
        assert!(!may_annotate(
            br#"{"annotations":{}}"#,
            &["cdi.k8s.io/".into()]
        ));
    }
}

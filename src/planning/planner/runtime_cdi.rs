//! The runtime wrapper's CDI mode (NVIDIA's `mode = "cdi"`): which CDI
//! devices a container names, and whether it is read in CDI mode at all.
//! Names come from the device list policy picks ([`listed`]: the device
//! plugin's volume mounts where accepted, else `NVIDIA_VISIBLE_DEVICES`
//! where accepted), a bare name being one of `default-kind`, and from
//! annotations under the configured prefixes (Kubernetes'
//! `cdi.k8s.io/<key>`), each a comma list of qualified names. `auto` takes
//! CDI for a container whose list names CDI devices only (not NVIDIA's
//! `jit-cdi` names of this host's devices) or that carries such an
//! annotation; `legacy` and `jit-cdi` never do. Resolving the names is the
//! registry's work.

use serde_json::Value;

use super::policy::{listed, Listed, VISIBLE_DEVICES};
use super::{Error, Result};
use crate::config::{Config, RuntimeMode};
use crate::planning::bundle::Container;
use crate::planning::request::cdi_name::Qualified;
use crate::planning::request::JIT_KIND;

/// The CDI devices `container` names, in the order given, when it is read
/// in CDI mode; `None` when it is read as legacy. `spec` is the whole
/// `config.json`, for its annotations; `None` when it holds none of ours.
pub(super) fn requested(
    config: &Config,
    container: &Container,
    spec: Option<&Value>,
) -> Result<Option<Vec<Qualified>>> {
    let cdi = &config.runtime.cdi;
    if matches!(
        config.runtime.mode,
        RuntimeMode::Legacy | RuntimeMode::JitCdi | RuntimeMode::Csv
    ) {
        return Ok(None);
    }
    let mut names = Vec::new();
    for (key, value) in annotations(spec) {
        if !cdi.annotation_prefixes.iter().any(|p| key.starts_with(p)) {
            continue;
        }
        for item in items(value) {
            let name = Qualified::parse(item).map_err(|reason| Error::CdiName {
                item: item.into(),
                from: format!("annotation {key}"),
                reason,
            })?;
            names.push(name);
        }
    }
    let (from, listed): (&str, Vec<&str>) = match listed(config, container) {
        Listed::Mounts(mounts) => (
            "a device mount",
            mounts.iter().map(String::as_str).collect(),
        ),
        Listed::Variable(value) => (VISIBLE_DEVICES, value.map(items).unwrap_or_default()),
        Listed::Ignored => (VISIBLE_DEVICES, Vec::new()),
    };
    // The hook's keywords: void (or nothing) and none ask for no GPU.
    let listed = if listed.iter().any(|i| matches!(*i, "void" | "none")) {
        Vec::new()
    } else {
        listed
    };
    // NVIDIA's jit-cdi names (`runtime.nvidia.com/gpu=0`) are this host's
    // devices, planned as a bare list is: not CDI names to look up.
    let jit = |item: &str| item.starts_with(JIT_KIND) && item[JIT_KIND.len()..].starts_with('=');
    let cdi_only = !listed.is_empty()
        && listed
            .iter()
            .all(|i| Qualified::looks_qualified(i) && !jit(i));
    if config.runtime.mode == RuntimeMode::Auto && names.is_empty() && !cdi_only {
        return Ok(None);
    }
    for item in listed {
        let name = if Qualified::looks_qualified(item) {
            Qualified::parse(item)
        } else {
            // The configured kind is checked here, with the name made of it.
            Qualified::parse(&format!("{}={item}", cdi.default_kind))
        }
        .map_err(|reason| Error::CdiName {
            item: item.into(),
            from: from.into(),
            reason,
        })?;
        // The variable is the image's to set: only the allowed kinds.
        let allowed = name.kind == cdi.default_kind || cdi.env_kinds.contains(&name.kind);
        if from == VISIBLE_DEVICES && !allowed {
            return Err(Error::CdiKindFromEnv {
                item: item.into(),
                kind: name.kind,
                allowed: cdi.env_kinds.join(", "),
            });
        }
        names.push(name);
    }
    Ok(Some(names))
}

/// The spec's string annotations.
fn annotations(spec: Option<&Value>) -> impl Iterator<Item = (&String, &str)> {
    spec.and_then(|s| s.get("annotations"))
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k, v.as_str()?)))
}

/// A comma list's trimmed, non-empty items.
fn items(value: &str) -> Vec<&str> {
    value
        .split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::PathBuf;

    fn container(env: &[&str]) -> Container {
        Container {
            rootfs: PathBuf::from("/r"),
            env: env.iter().map(|e| (*e).to_string()).collect(),
            user_namespace: false,
            privileged: false,
            device_mounts: Vec::new(),
            imex_mounts: Vec::new(),
            devices: Vec::new(),
            systemd_scope: None,
        }
    }

    fn config(mode: RuntimeMode) -> Config {
        let mut config = Config::default();
        config.runtime.mode = mode;
        config
    }

    fn names(found: Option<Vec<Qualified>>) -> Option<Vec<String>> {
        found.map(|n| n.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn auto_takes_cdi_only_for_qualified_names_or_an_annotation() {
        let auto = config(RuntimeMode::Auto);
        for (env, want) in [
            (
                "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all",
                Some(vec!["nvidia.com/gpu=all"]),
            ),
            (
                "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0, nvidia.com/imex-channel=1",
                Some(vec!["nvidia.com/gpu=0", "nvidia.com/imex-channel=1"]),
            ),
            ("NVIDIA_VISIBLE_DEVICES=0,nvidia.com/gpu=1", None),
            ("NVIDIA_VISIBLE_DEVICES=all", None),
            ("NVIDIA_VISIBLE_DEVICES=void", None),
            ("OTHER=1", None),
        ] {
            let got = requested(&auto, &container(&[env]), None).unwrap();
            let want = want.map(|w| w.iter().map(|s| s.to_string()).collect());
            assert_eq!(names(got), want, "{env}");
        }
        let spec = json!({"annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=0", "other": "x"}});
        let got = requested(
            &auto,
            &container(&["NVIDIA_VISIBLE_DEVICES=1"]),
            Some(&spec),
        )
        .unwrap();
        assert_eq!(
            names(got),
            Some(vec![
                "nvidia.com/gpu=0".to_string(),
                "nvidia.com/gpu=1".to_string()
            ])
        );
    }

    /// The image's ENV may set NVIDIA_VISIBLE_DEVICES: it reaches only the
    /// kinds `env-kinds` allows (ours by default), where an annotation, the
    /// orchestrator's, may name any vendor's device.
    #[test]
    fn the_variable_names_only_the_kinds_allowed() {
        let mut cdi = config(RuntimeMode::Cdi);
        let env =
            "NVIDIA_VISIBLE_DEVICES=k8s.device-plugin.nvidia.com/gpu=GPU-1, example.com/dev=x";
        let err = requested(&cdi, &container(&[env]), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "CDI device \"k8s.device-plugin.nvidia.com/gpu=GPU-1\" in NVIDIA_VISIBLE_DEVICES: \
             kind k8s.device-plugin.nvidia.com/gpu is not one the image's environment may name \
             ([runtime.cdi] env-kinds: nvidia.com/gpu, nvidia.com/imex-channel); \
             an annotation or the orchestrator's CDI request may"
        );
        let spec = json!({"annotations": {"cdi.k8s.io/x": "example.com/dev=x"}});
        let got = requested(&cdi, &container(&[]), Some(&spec)).unwrap();
        assert_eq!(names(got), Some(vec!["example.com/dev=x".to_string()]));
        cdi.runtime.cdi.env_kinds.push("example.com/dev".into());
        cdi.runtime
            .cdi
            .env_kinds
            .push("k8s.device-plugin.nvidia.com/gpu".into());
        let got = requested(&cdi, &container(&[env]), None).unwrap();
        assert_eq!(
            names(got),
            Some(vec![
                "k8s.device-plugin.nvidia.com/gpu=GPU-1".to_string(),
                "example.com/dev=x".to_string()
            ])
        );
    }

    #[test]
    fn cdi_mode_qualifies_bare_names_and_legacy_reads_none() {
        let cdi = config(RuntimeMode::Cdi);
        let got = requested(&cdi, &container(&["NVIDIA_VISIBLE_DEVICES=0, all"]), None).unwrap();
        assert_eq!(
            names(got),
            Some(vec![
                "nvidia.com/gpu=0".to_string(),
                "nvidia.com/gpu=all".to_string()
            ])
        );
        assert_eq!(
            requested(&cdi, &container(&[]), None).unwrap(),
            Some(vec![])
        );
        assert_eq!(
            requested(&cdi, &container(&["NVIDIA_VISIBLE_DEVICES=none"]), None).unwrap(),
            Some(vec![])
        );
        let legacy = config(RuntimeMode::Legacy);
        let spec = json!({"annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=0"}});
        assert_eq!(
            requested(
                &legacy,
                &container(&["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"]),
                Some(&spec)
            )
            .unwrap(),
            None
        );
    }

    #[test]
    fn an_unprivileged_containers_variable_is_ignored_when_the_config_says_so() {
        let mut cdi = config(RuntimeMode::Cdi);
        cdi.accept_env_when_unprivileged = false;
        let env = ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all"];
        assert_eq!(
            requested(&cdi, &container(&env), None).unwrap(),
            Some(vec![])
        );
        let mut privileged = container(&env);
        privileged.privileged = true;
        assert_eq!(
            names(requested(&cdi, &privileged, None).unwrap()),
            Some(vec!["nvidia.com/gpu=all".to_string()])
        );
    }

    #[test]
    fn a_bad_name_is_refused_naming_where_it_was() {
        let cdi = config(RuntimeMode::Cdi);
        let err = requested(
            &cdi,
            &container(&["NVIDIA_VISIBLE_DEVICES=nvidia.com/=0"]),
            None,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("bad CDI device \"nvidia.com/=0\" in NVIDIA_VISIBLE_DEVICES: "),
            "{err}"
        );
        let spec = json!({"annotations": {"cdi.k8s.io/x": "gpu0"}});
        let err = requested(&cdi, &container(&[]), Some(&spec)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bad CDI device \"gpu0\" in annotation cdi.k8s.io/x: \"gpu0\" is not vendor/class=name"
        );
    }

    /// NVIDIA's jit-cdi names are this host's devices: `auto` and `jit-cdi`
    /// plan them as a bare list (the legacy path), never look them up.
    #[test]
    fn jit_cdi_names_are_planned_as_this_hosts_devices() {
        let env = ["NVIDIA_VISIBLE_DEVICES=runtime.nvidia.com/gpu=0,runtime.nvidia.com/gpu=1"];
        for mode in [RuntimeMode::Auto, RuntimeMode::JitCdi] {
            assert_eq!(
                requested(&config(mode), &container(&env), None).unwrap(),
                None,
                "{mode:?}"
            );
        }
        // jit-cdi reads no annotation either: the list is the request.
        let spec = json!({"annotations": {"cdi.k8s.io/x": "nvidia.com/gpu=0"}});
        assert_eq!(
            requested(&config(RuntimeMode::JitCdi), &container(&[]), Some(&spec)).unwrap(),
            None
        );
    }
}

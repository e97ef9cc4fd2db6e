//! containerd's wiring: its CRI plugin's `enable_cdi` and the runtime
//! handlers meant for GPUs, judged on containerd's configuration as
//! containerd loads it (`engine_config::containerd::Config`, imports
//! merged).

use std::path::Path;

use super::programs::runtime_handler;
use super::{Check, HostRoot, Layer};
use crate::specs::engine_config::containerd::{Config, Handler};

const L: Layer = Layer::Wiring;

/// What the containerd checks found.
#[derive(Debug, Default)]
pub(super) struct Containerd {
    /// A config exists and parses.
    pub configured: bool,
    /// CDI is on.
    pub cdi: bool,
    /// The names of the runtime handlers that run our wrapper.
    pub ours: Vec<String>,
}

/// Whether a handler is meant for GPUs: named so, or running a wrapper.
fn gpu_handler(handler: &Handler) -> bool {
    handler.name.contains("nvidia")
        || handler.binary.as_deref().is_some_and(|b| {
            Path::new(b)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().contains("nvidia"))
        })
}

/// containerd's CDI setting and its GPU runtime handlers.
pub(super) fn check(host: &HostRoot, cdi_specs: bool, out: &mut Vec<Check>) -> Containerd {
    let mut result = Containerd::default();
    let config = match Config::load(host) {
        None => return result,
        Some(Err(e)) => {
            out.push(Check::engine_file(
                L,
                "containerd",
                &e,
                "fix it: containerd does not start with it",
            ));
            return result;
        }
        Some(Ok(config)) => config,
    };
    result.configured = true;
    result.cdi = config.cdi;
    let shown = config
        .files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(" + ");
    if config.cdi {
        out.push(Check::ok(
            L,
            "containerd",
            format!("{shown} (version {}): CDI enabled", config.version),
        ));
    } else if cdi_specs {
        out.push(Check::warn(
            L,
            "containerd",
            format!(
                "{shown} (version {}): enable_cdi is off, so containerd's CRI ignores the \
                 CDI specs here",
                config.version
            ),
            "`nvidia-ctk runtime configure --runtime=containerd \
             --cdi.enabled` (or set enable_cdi = true under [plugins.\"io.containerd.grpc.v1.cri\"]; \
             2.x enables it by default) and restart containerd",
        ));
    } else {
        out.push(Check::ok(
            L,
            "containerd",
            format!(
                "{shown} (version {}): CDI off, and no CDI spec to read",
                config.version
            ),
        ));
    }
    for handler in config.handlers.iter().filter(|h| gpu_handler(h)) {
        let name = handler.name.as_str();
        let default = config.default.as_deref() == Some(name);
        if handler.runtime_type.is_none() {
            // containerd 2.x fails every pod of such a handler ("container.Runtime.Name
            // must be set"; NVIDIA's issue 1956); 1.x runs it as runc v2.
            let found = format!("runtime handler {name:?} has no runtime_type");
            let remedy = "`nvidia-ctk runtime configure --runtime=containerd` (which fills it) \
                          or add runtime_type = \"io.containerd.runc.v2\", and restart containerd";
            out.push(match config.version >= 3 {
                true => Check::fail(
                    L,
                    "containerd runtime",
                    format!("{found}: containerd 2.x refuses its pods"),
                    remedy,
                ),
                false => Check::warn(
                    L,
                    "containerd runtime",
                    format!("{found}: containerd 2.x would refuse its pods"),
                    remedy,
                ),
            });
        }
        let Some(binary) = &handler.binary else {
            out.push(Check::warn(
                L,
                "containerd runtime",
                format!("runtime handler {name:?} names no options.BinaryName: it runs plain runc"),
                "`nvidia-ctk runtime configure --runtime=containerd` and \
                 restart containerd",
            ));
            continue;
        };
        let fix = "fix its options.BinaryName";
        if runtime_handler(
            host,
            "containerd runtime",
            (name, default),
            binary,
            fix,
            out,
        ) {
            result.ours.push(name.to_string());
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::specs::engine_config::tests::{host_with, CONTAINERD_V2 as V2};

    #[test]
    fn says_which_handler_runs_our_wrapper() {
        let (dir, host) =
            host_with(&[(crate::specs::engine_config::containerd::DEFAULT_CONFIG, V2)]);
        let bin = dir.path().join("usr/local/bin");
        fs::create_dir_all(&bin).unwrap();
        fs::write(bin.join("oci-nvidia-hook"), b"#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink("oci-nvidia-hook", bin.join("nvidia-container-runtime"))
            .unwrap();
        let mut out = Vec::new();
        let found = check(&host, true, &mut out);
        assert!(found.cdi);
        assert_eq!(found.ours, ["nvidia"]);
        let handler = out.iter().find(|c| c.name == "containerd runtime").unwrap();
        assert!(
            handler.found.contains("(oci-nvidia-hook)"),
            "{}",
            handler.found
        );
        // A version 3 handler without runtime_type fails: containerd 2.x refuses it.
        let v3 = "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia.options]\n\
                  BinaryName = \"/usr/local/bin/nvidia-container-runtime\"\n";
        fs::write(
            host.path(crate::specs::engine_config::containerd::DEFAULT_CONFIG),
            v3,
        )
        .unwrap();
        let mut out = Vec::new();
        check(&host, true, &mut out);
        let typeless = out
            .iter()
            .find(|c| c.found.contains("has no runtime_type"))
            .unwrap_or_else(|| panic!("{out:?}"));
        assert_eq!(typeless.status, super::super::Status::Fail);
        fs::write(
            host.path(crate::specs::engine_config::containerd::DEFAULT_CONFIG),
            V2,
        )
        .unwrap();
        // The wrapper gone: the handler fails.
        fs::remove_file(bin.join("nvidia-container-runtime")).unwrap();
        let mut out = Vec::new();
        check(&host, true, &mut out);
        assert!(
            out.iter().any(|c| c.status == super::super::Status::Fail),
            "{out:?}"
        );
    }
}

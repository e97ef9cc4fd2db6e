//! Group-only device nodes (a render node's `0660 root:render`, as
//! Ubuntu's udev makes them) and a container's non-root user: through the
//! prestart hook under runc, the user opens the render node it was given
//! (ENXIO: allowed by the device cgroup, no driver behind the simulated
//! node), as with NVIDIA's toolkit since 1.19; with `no-additional-gids`
//! (NVIDIA's `features.no-additional-gids-for-device-nodes`) it may not
//! (EACCES), which is the host's mode, as before.
//!
//! Run as root: `make test`, or
//! `cargo test --features _test_as_root --test group_nodes`.

use std::os::unix::fs::PermissionsExt;

use harness::runtime::bundle::{hook_args, Bundle, BundleExtras, Hook, Scenario};
use harness::runtime::oci_config::path_str;
use harness::runtime::run::serial;
use harness::runtime::runtimes::Runtime;
use harness::simhost::{Fixture, SimHost};

/// The render node's group on the simulated host (Debian's `render`).
const RENDER_GID: u32 = 105;

/// A private host whose first GPU's render node only its group may use.
fn host() -> SimHost {
    let host = SimHost::fresh("group-nodes", Fixture::real(2).extras());
    let render = host.path(&format!("devroot{}", render_node(&host)));
    std::os::unix::fs::chown(&render, Some(0), Some(RENDER_GID)).unwrap();
    std::fs::set_permissions(&render, std::fs::Permissions::from_mode(0o660)).unwrap();
    host
}

/// GPU 0's render node, as the container sees it.
fn render_node(host: &SimHost) -> String {
    let extras = host.facts.extras.as_ref().expect("an extras host");
    extras.drm_of(&host.facts.gpus[0].bus).render.clone()
}

/// Runs a runc container as uid/gid 1000 asking for GPU 0's graphics
/// files, the hook's config starting with `head`; its stderr, where the
/// container's shell says what opening the render node gave.
fn open_as_user(host: &SimHost, name: &str, head: &str) -> String {
    let env = [
        ("NVIDIA_VISIBLE_DEVICES", "0"),
        ("NVIDIA_DRIVER_CAPABILITIES", "graphics"),
    ];
    let scenario = Scenario {
        name,
        runtime: Runtime::RuncV2,
        host,
        env: &env,
        hook: Hook::Prestart,
        decoy_minors: &[],
        decoys: &[],
        reuse_rootfs: false,
        prepare: None,
    };
    let render = render_node(host);
    let script = format!("id >&2; ls -ln {render} >&2; exec 3<>{render} && echo OPENED >&2");
    let bundle = Bundle::create(
        &scenario,
        &BundleExtras {
            args: Some(vec!["/bin/sh".into(), "-c".into(), script]),
            config_head: Some(head.to_string()),
            ..BundleExtras::default()
        },
    );
    let hook = serde_json::json!({
        "prestart": [{
            "path": path_str(harness::project::hook_binary()),
            "args": hook_args(&bundle.dir.join("hook-config.toml")),
        }]
    });
    let id = format!("onh-{name}-{}", std::process::id());
    let (_, stderr) = bundle.run_with_hooks(&scenario, &id, hook, |config| {
        config["process"]["user"] = serde_json::json!({"uid": 1000, "gid": 1000});
    });
    stderr
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn a_non_root_user_opens_a_group_only_render_node() {
    let _serial = serial();
    Runtime::RuncV2.require_tools();
    let host = host();
    let opened = open_as_user(&host, "group-node-open", "");
    assert!(
        opened.contains("No such device or address") && !opened.contains("Permission denied"),
        "the non-root user could not open the render node (ENXIO expected):\n{opened}"
    );
    // NVIDIA's opt-out keeps the host's 0660: the user is refused.
    let refused = open_as_user(&host, "group-node-kept", "no-additional-gids = true\n");
    assert!(
        refused.contains("Permission denied"),
        "with no-additional-gids the node kept its group-only mode:\n{refused}"
    );
}

//! `nvidia-ctk system create-dev-char-symlinks`: the `/dev/char/MAJOR:MINOR`
//! links of the NVIDIA driver's device nodes. udev makes such a link for
//! every node it creates; the NVIDIA driver makes its nodes itself
//! (`nvidia-modprobe`), so theirs are missing, and systemd, which resolves
//! a container unit's `DeviceAllow=` entries through `/dev/char`, drops the
//! GPUs of containers running under the systemd cgroup driver on its next
//! `daemon-reload` ("Failed to initialize NVML: Unknown Error"). This is
//! NVIDIA's documented remedy, made from the same inventory as everything
//! else: no module is loaded, no node is made, and without a loaded driver
//! there is nothing to link.

use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{open, readlinkat, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::symlinkat;

use super::{Error, Result};
use crate::config::Config;
use crate::host::driver::{self, Node, NodeRole, NodeState};
use crate::planning::planner;
use crate::planning::request::Capabilities;

/// What `create-dev-char-symlinks` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevCharLinks {
    /// Where the links go: `/dev/char` unless told.
    pub dev_char_path: PathBuf,
    /// Links for every node the driver would have, not only those it has made.
    pub create_all: bool,
    /// Print the links instead of making them.
    pub dry_run: bool,
}

/// One link: its name in the directory, and what it points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// `MAJOR:MINOR`.
    pub name: String,
    /// The node, relative to the link's directory where both share `/dev`.
    pub target: PathBuf,
}

/// Whether udev leaves a node of `role` without its `/dev/char` link: the
/// nodes the NVIDIA driver makes itself.
fn driver_made(role: NodeRole) -> bool {
    match role {
        NodeRole::Control
        | NodeRole::Modeset
        | NodeRole::Uvm
        | NodeRole::UvmTools
        | NodeRole::Gpu
        | NodeRole::Capability
        | NodeRole::ImexChannel => true,
        // udev's own (DRM), Windows' (dxg), or other drivers' nodes.
        NodeRole::DrmCard
        | NodeRole::DrmRender
        | NodeRole::Dxg
        | NodeRole::Listed
        | NodeRole::Gated(_) => false,
    }
}

/// The links `nodes` need in `dev_char_path`: those of the nodes there
/// (every node the driver would have with `create_all`), in their order.
pub fn links(nodes: &[Node], dev_char_path: &Path, create_all: bool) -> Vec<Link> {
    let dev = dev_char_path.parent();
    nodes
        .iter()
        .filter(|node| driver_made(node.role))
        .filter(|node| create_all || matches!(node.state, NodeState::Ok { .. }))
        .map(|node| Link {
            name: format!("{}:{}", node.major, node.minor),
            target: dev
                .and_then(|dev| node.host_path.strip_prefix(dev).ok())
                .map_or_else(|| node.host_path.clone(), |rel| Path::new("..").join(rel)),
        })
        .collect()
}

/// Makes the links `asked` names for this host's driver, printing each.
pub fn create_dev_char_symlinks(
    config: &Config,
    asked: &DevCharLinks,
    out: &mut impl Write,
) -> Result<()> {
    let inventory = match planner::inventory(config, &Capabilities::empty()) {
        Ok(inventory) => inventory,
        // As NVIDIA's: no driver, no nodes of it, nothing to link. The
        // refresh service runs this after every start, with or without one.
        Err(planner::Error::Driver(driver::Error::NotLoaded { path })) => {
            log::info!(
                "no NVIDIA driver is loaded ({} does not exist): no /dev/char link to make",
                path.display()
            );
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let wanted = links(&inventory.nodes, &asked.dev_char_path, asked.create_all);
    let dir_path = &asked.dev_char_path;
    if asked.dry_run {
        for link in &wanted {
            writeln!(
                out,
                "{} -> {}",
                dir_path.join(&link.name).display(),
                link.target.display()
            )?;
        }
        return Ok(());
    }
    let failed = |source: Errno| Error::DevChar {
        path: dir_path.clone(),
        source: source.into(),
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .create(dir_path)
        .map_err(|source| Error::DevChar {
            path: dir_path.clone(),
            source,
        })?;
    let dir = open(
        dir_path.as_path(),
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(failed)?;
    for link in &wanted {
        let path = dir_path.join(&link.name);
        match symlinkat(link.target.as_path(), dir.as_fd(), link.name.as_str()) {
            Ok(()) => log::info!("created {} -> {}", path.display(), link.target.display()),
            Err(Errno::EEXIST) => match readlinkat(dir.as_fd(), link.name.as_str()) {
                Ok(found) if Path::new(&found) == link.target => {
                    log::debug!("{} exists", path.display())
                }
                // Another link or file of that name is the host's: left alone.
                _ => log::warn!(
                    "{} exists and is not a link to {}: left as it is",
                    path.display(),
                    link.target.display()
                ),
            },
            Err(errno) => {
                return Err(Error::DevChar {
                    path,
                    source: errno.into(),
                })
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(role: NodeRole, host_path: &str, major: u32, minor: u32, ok: bool) -> Node {
        Node {
            role,
            path: PathBuf::from(host_path),
            host_path: PathBuf::from(host_path),
            major,
            minor,
            state: if ok {
                NodeState::Ok {
                    mode: 0o666,
                    gid: 0,
                }
            } else {
                NodeState::Missing
            },
        }
    }

    #[test]
    fn without_a_loaded_driver_there_is_nothing_to_link() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::default();
        config.driver.proc_root = dir.path().join("proc");
        let asked = DevCharLinks {
            dev_char_path: dir.path().join("char"),
            create_all: false,
            dry_run: false,
        };
        let mut out = Vec::new();
        create_dev_char_symlinks(&config, &asked, &mut out).unwrap();
        assert!(out.is_empty());
        assert!(!asked.dev_char_path.exists(), "no directory made either");
        // Any other failure of the inventory still fails.
        std::fs::create_dir_all(dir.path().join("proc/driver/nvidia")).unwrap();
        std::fs::write(dir.path().join("proc/driver/nvidia/version"), "garbled").unwrap();
        assert!(create_dev_char_symlinks(&config, &asked, &mut out).is_err());
    }

    #[test]
    fn the_driver_made_nodes_get_relative_links_beside_dev() {
        let nodes = [
            node(NodeRole::Control, "/dev/nvidiactl", 195, 255, true),
            node(NodeRole::Gpu, "/dev/nvidia0", 195, 0, true),
            node(NodeRole::Gpu, "/dev/nvidia1", 195, 1, false),
            node(
                NodeRole::Capability,
                "/dev/nvidia-caps/nvidia-cap1",
                510,
                1,
                true,
            ),
            node(NodeRole::DrmCard, "/dev/dri/card1", 226, 1, true),
        ];
        let names = |links: Vec<Link>| -> Vec<(String, PathBuf)> {
            links.into_iter().map(|l| (l.name, l.target)).collect()
        };
        assert_eq!(
            names(links(&nodes, Path::new("/dev/char"), false)),
            [
                ("195:255".into(), "../nvidiactl".into()),
                ("195:0".into(), "../nvidia0".into()),
                ("510:1".into(), "../nvidia-caps/nvidia-cap1".into()),
            ]
        );
        // --create-all: the node the driver has not made yet too.
        assert_eq!(links(&nodes, Path::new("/dev/char"), true).len(), 4);
        // Elsewhere: the nodes' own paths.
        assert_eq!(
            names(links(&nodes[..1], Path::new("/tmp/char"), false)),
            [("195:255".into(), "/dev/nvidiactl".into())]
        );
    }
}

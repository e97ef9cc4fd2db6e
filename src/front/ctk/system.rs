//! `nvidia-ctk system`'s commands, NVIDIA's flag names and defaults:
//! `create-dev-char-symlinks` read into [`DevCharLinks`] (its flags that
//! would load kernel modules or make device nodes are taken and their part
//! left out, a note says so), `create-device-nodes` into [`DeviceNodes`].

use std::path::{Path, PathBuf};

use clap::builder::BoolishValueParser;
use clap::Subcommand;

use crate::app::device_nodes::{DeviceNodes, NVIDIA_MODPROBE};
use crate::app::system::DevCharLinks;
use crate::app::Note;

/// `nvidia-ctk system`'s commands.
#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum SystemCommand {
    /// Make the /dev/char links of the NVIDIA driver's device nodes, which
    /// systemd needs to keep a container's GPUs across a daemon-reload.
    CreateDevCharSymlinks(DevCharArgs),
    /// Make the NVIDIA driver's control device nodes (nvidiactl,
    /// nvidia-modeset, nvidia-uvm, nvidia-uvm-tools).
    CreateDeviceNodes(DeviceNodesArgs),
}

/// `create-dev-char-symlinks`' flags.
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct DevCharArgs {
    /// Where the links go.
    #[arg(long, default_value = "/dev/char", value_name = "DIR")]
    pub dev_char_path: PathBuf,
    /// The driver root: the config's (driver.root) is read.
    #[arg(long, value_name = "DIR")]
    pub driver_root: Option<PathBuf>,
    /// Links for every node the driver would have, not only those it made.
    #[arg(long)]
    pub create_all: bool,
    /// Accepted: no kernel module is loaded.
    #[arg(long)]
    pub load_kernel_modules: bool,
    /// Accepted: no device node is made (nvidia-modprobe makes them).
    #[arg(long)]
    pub create_device_nodes: bool,
    /// Print the links instead of making them.
    #[arg(long)]
    pub dry_run: bool,
}

impl DevCharArgs {
    /// The operation's request, and a note for each flag left out.
    pub fn read(&self) -> (DevCharLinks, Vec<Note>) {
        let ignored = [
            (self.load_kernel_modules, "--load-kernel-modules ignored: no kernel module is loaded"),
            (
                self.create_device_nodes,
                "--create-device-nodes ignored: no device node is made (nvidia-modprobe makes them)",
            ),
            (
                self.driver_root.is_some(),
                "--driver-root ignored: the config's driver root is read",
            ),
        ];
        let notes = ignored
            .iter()
            .filter(|(given, _)| *given)
            .map(|(_, text)| Note {
                level: log::Level::Warn,
                text: (*text).to_string(),
            })
            .collect();
        (
            DevCharLinks {
                dev_char_path: self.dev_char_path.clone(),
                create_all: self.create_all,
                dry_run: self.dry_run,
            },
            notes,
        )
    }
}

/// `create-device-nodes`' flags. NVIDIA's also come from environment
/// variables (`DRIVER_ROOT`, `DEV_ROOT`, `DRY_RUN`, …); these do not.
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct DeviceNodesArgs {
    /// The driver root: the nodes go in ROOT/dev unless --dev-root is given.
    #[arg(long = "driver-root", visible_alias = "root", value_name = "ROOT")]
    pub driver_root: Option<PathBuf>,
    /// Where dev/ is [default: --driver-root, else the config's driver.dev-root].
    #[arg(long, value_name = "DIR")]
    pub dev_root: Option<PathBuf>,
    /// Make nvidiactl, nvidia-modeset, nvidia-uvm and nvidia-uvm-tools.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = BoolishValueParser::new(), value_name = "BOOL")]
    pub control_devices: bool,
    /// Load the NVIDIA kernel modules first, with the host's /usr/bin/nvidia-modprobe.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = BoolishValueParser::new(), value_name = "BOOL")]
    pub load_kernel_modules: bool,
    /// Print the commands instead of running them.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = BoolishValueParser::new(), value_name = "BOOL")]
    pub dry_run: bool,
}

impl DeviceNodesArgs {
    /// The operation's request, and a note where NVIDIA's would load the
    /// modules from the driver root and this runs the host's loader.
    pub fn read(&self) -> (DeviceNodes, Vec<Note>) {
        let elsewhere = self
            .driver_root
            .as_deref()
            .is_some_and(|root| root != Path::new("/"));
        let notes = if self.load_kernel_modules && elsewhere {
            vec![Note {
                level: log::Level::Warn,
                text: format!(
                    "--load-kernel-modules runs the host's {NVIDIA_MODPROBE}, not a loader under --driver-root"
                ),
            }]
        } else {
            Vec::new()
        };
        (
            DeviceNodes {
                dev_root: self.dev_root.clone().or_else(|| self.driver_root.clone()),
                control: self.control_devices,
                load_modules: self.load_kernel_modules,
                dry_run: self.dry_run,
            },
            notes,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct System {
        #[command(subcommand)]
        command: SystemCommand,
    }

    fn device_nodes(args: &[&str]) -> (DeviceNodes, Vec<Note>) {
        let words = ["system", "create-device-nodes"].iter().chain(args);
        match System::try_parse_from(words).unwrap().command {
            SystemCommand::CreateDeviceNodes(args) => args.read(),
            other => panic!("{other:?}"),
        }
    }

    /// The MIG manager's call, and NVIDIA's spellings of the roots.
    #[test]
    fn create_device_nodes_takes_nvidias_flags() {
        let (asked, notes) = device_nodes(&["--control-devices", "--dev-root=/host"]);
        assert_eq!(
            asked,
            DeviceNodes {
                dev_root: Some("/host".into()),
                control: true,
                load_modules: false,
                dry_run: false,
            }
        );
        assert!(notes.is_empty());
        let (asked, _) = device_nodes(&["--root", "/run/nvidia/driver", "--dry-run"]);
        assert_eq!(asked.dev_root, Some("/run/nvidia/driver".into()));
        assert!(asked.dry_run && !asked.control);
        let (asked, _) = device_nodes(&["--driver-root=/d", "--dev-root=/e"]);
        assert_eq!(asked.dev_root, Some("/e".into()), "--dev-root wins");
        let (asked, _) = device_nodes(&["--control-devices=false"]);
        assert_eq!(asked.dev_root, None, "the config's dev root");
        assert!(!asked.control);
    }

    #[test]
    fn loading_modules_for_another_driver_root_is_noted() {
        let (asked, notes) = device_nodes(&["--load-kernel-modules", "--driver-root=/d"]);
        assert!(asked.load_modules);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].text.contains("/usr/bin/nvidia-modprobe"));
        let (_, notes) = device_nodes(&["--load-kernel-modules", "--root=/"]);
        assert!(notes.is_empty());
    }
}

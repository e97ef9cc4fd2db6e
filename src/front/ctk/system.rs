//! `nvidia-ctk system create-dev-char-symlinks`'s flags, NVIDIA's names and
//! defaults, read into [`DevCharLinks`]. The flags that would load kernel
//! modules or make device nodes are taken and their part left out (a note
//! says so): this binary never does either.

use std::path::PathBuf;

use clap::Subcommand;

use crate::app::system::DevCharLinks;
use crate::app::Note;

/// `nvidia-ctk system`'s commands.
#[derive(Debug, PartialEq, Eq, Subcommand)]
pub enum SystemCommand {
    /// Make the /dev/char links of the NVIDIA driver's device nodes, which
    /// systemd needs to keep a container's GPUs across a daemon-reload.
    CreateDevCharSymlinks(DevCharArgs),
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

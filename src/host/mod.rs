//! The host's driver, inventoried: its files and nodes ([`driver`]), the
//! loader cache and ELF headers they are read through ([`ldcache`],
//! [`elf`]), and the driver code asked in a bounded child ([`child`]:
//! NVML through [`nvml`], libcuda; the static binary's helper in `probe`).

pub mod driver;
pub mod driver_child;
pub mod elf;
pub mod ldcache;
pub mod nvml;
#[cfg(target_env = "musl")]
pub mod probe;

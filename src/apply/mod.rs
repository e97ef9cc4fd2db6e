//! Applying a plan to a container: the hooks and the one apply sequence
//! ([`hook`]), the device cgroup ([`cgroup`]), systemd's record of it for a
//! container under the systemd cgroup driver ([`systemd`]) and the changes
//! made inside the container's mount namespace ([`inject`]).

pub mod cgroup;
pub mod hook;
pub mod inject;
pub mod systemd;

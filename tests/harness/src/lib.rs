//! The integration tests' one harness: every test binary in `tests/*.rs`
//! imports it as `harness`. It builds simulated GPU hosts
//! (`integration/simhost`) and hands out their facts typed; it runs the
//! binary under test as a runtime, a CLI or `doctor` would, and judges a
//! refusal's shape; it drives the real runtimes and daemons
//! ([`runtime`]) and the hook run without one ([`direct`]). It is test code
//! only (a dev-dependency, never published), and it never stands in for
//! the product: every answer it judges comes from the real binary.

pub mod booted;
pub mod cdi_schema;
pub mod cli;
pub mod compat;
pub mod debroot;
pub mod direct;
pub mod glibc;
pub mod host_root;
pub mod info;
pub mod jetson;
pub mod json;
pub mod ldconfig;
pub mod mounts;
pub mod nvidia_cli;
pub mod old_kernel;
pub mod preload;
pub mod project;
pub mod refusal;
pub mod runtime;
pub mod simhost;
pub mod stuck;

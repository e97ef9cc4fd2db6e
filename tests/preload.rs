//! The CVE-2025-23266 class: an image whose `ENV` sets `LD_PRELOAD`,
//! `LD_AUDIT`, `LD_LIBRARY_PATH` and `GCONV_PATH` to a library in the
//! image, the runtime handing that environment (and, at `createContainer`,
//! a working directory in the image) to a hook of ours. The library's
//! constructor appends to a marker file on the host and writes to stderr;
//! it must never run, for any entry point a runtime runs: the prestart
//! hook, our `cdi-hook` at createRuntime, `nvidia-cdi-hook` at
//! createContainer (a hook entry without `env`, as NVIDIA's specs write
//! it), and the runtime wrapper, through runc and crun.
//!
//! The binary under test is the one `make build` ships and `make install`
//! installs: static, 0755, with no loader to read those variables
//! (docs/design.md). Controls show the test can fail: the library loads
//! into a plain dynamically linked program given that environment, and into
//! a dynamically linked build of our binary (the tests' `cargo build`) run
//! by runc at createContainer.
//!
//! Run as root: `make test`, or
//! `cargo test --features _test_as_root --test preload -- --nocapture`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use harness::glibc;
use harness::preload::{Entry, EvilLibrary};
use harness::project::hook_binary;
use harness::runtime::run::serial;
use harness::runtime::runtimes::Runtime;

/// A copy of `binary` under the library's scratch directory, in a
/// directory of its own with the `nvidia-cdi-hook` and
/// `nvidia-container-runtime` links beside it.
fn copy_with_links(evil: &EvilLibrary, binary: &Path, name: &str) -> PathBuf {
    let path = evil.dir.join(name).join("oci-nvidia-hook");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::copy(binary, &path).unwrap();
    for link in ["nvidia-cdi-hook", "nvidia-container-runtime"] {
        std::os::unix::fs::symlink("oci-nvidia-hook", path.with_file_name(link)).unwrap();
    }
    path
}

#[test]
#[cfg_attr(not(feature = "_test_as_root"), ignore = "needs root: run `make test`")]
fn no_image_library_loads_into_any_entry_point() {
    let _serial = serial();
    let evil = EvilLibrary::build("preload");
    evil.assert_control_loads();
    // Installed as `make install` does: the shipped static binary, 0755.
    let shipped = glibc::shipped_binary("x86_64-unknown-linux-musl", "build");
    let installed = copy_with_links(&evil, &shipped, "installed");
    std::fs::set_permissions(&installed, std::fs::Permissions::from_mode(0o755)).unwrap();
    let plain = copy_with_links(&evil, hook_binary(), "plain");

    // Control: runc hands a createContainer hook without `env` the image's
    // environment, and a dynamically linked build of our binary loads it.
    let before = evil.loads();
    let (_, stderr) = evil.run_hooked(
        Runtime::RuncV1,
        Entry::NvidiaCdiHook,
        &plain,
        "control-runc",
    );
    assert!(
        evil.loads() > before,
        "control: runc's createContainer hook did not load the image's library into a \
         plain copy of the binary, so this test could not fail: {stderr}"
    );

    evil.assert_no_entry_point_loads(&installed, &[Runtime::RuncV1, Runtime::CrunV1], "installed");
    evil.remove();
}

//! An image shipping CUDA forward-compatibility libraries, for the suites
//! that check the hook prefers them. Builds fixtures only.

use std::path::Path;
use std::process::Command;

/// Builds, inside an image, a compat `libcuda.so.550.54.15` whose
/// `cuDriverGetVersion` says 12.4, as NVIDIA's compat package would.
pub fn add_compat_libcuda(rootfs: &Path) {
    let dir = rootfs.join("usr/local/cuda/compat");
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("compat.c");
    std::fs::write(
        &source,
        "int cuDriverGetVersion(int *v) { *v = 12040; return 0; }\n",
    )
    .unwrap();
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o"])
        .arg(dir.join("libcuda.so.550.54.15"))
        .arg(&source)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed for the compat libcuda");
    std::fs::remove_file(source).unwrap();
    std::os::unix::fs::symlink("libcuda.so.550.54.15", dir.join("libcuda.so.1")).unwrap();
}

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

/// Gives the compat library `lib` NVIDIA's `.note.cuda.fwd_compatibility`
/// (owner `NVIDIA Corporation`, JSON naming `cuda` and the driver
/// branches `drivers`), added by `objcopy` as a note section; NVIDIA's
/// 1.20 `enable-cuda-compat` reads it (its section alignment being 1, the
/// name and descriptor are unpadded).
pub fn add_fwd_note(lib: &Path, cuda: &str, drivers: &[u32]) {
    let objcopy = crate::runtime::runtimes::find_tool("objcopy")
        .expect("objcopy is not on PATH: install binutils (integration/install-deps)");
    let name = b"NVIDIA Corporation\0";
    let branches: Vec<String> = drivers.iter().map(u32::to_string).collect();
    let desc = format!(
        "{{\"Format\": 1, \"CUDA Version\": \"{cuda}\", \"Driver\": [{}]}}",
        branches.join(", ")
    );
    let mut note = Vec::new();
    for word in [name.len(), desc.len(), 1] {
        note.extend(u32::try_from(word).unwrap().to_le_bytes());
    }
    note.extend(name);
    note.extend(desc.as_bytes());
    let file = lib.with_extension("note");
    std::fs::write(&file, note).unwrap();
    let status = Command::new(objcopy)
        .arg("--add-section")
        .arg(format!(
            ".note.cuda.fwd_compatibility={}",
            file.to_string_lossy()
        ))
        .arg(lib)
        .status()
        .expect("run objcopy");
    assert!(status.success(), "objcopy failed for {}", lib.display());
    std::fs::remove_file(file).unwrap();
}

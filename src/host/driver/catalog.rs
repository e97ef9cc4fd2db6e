//! Which driver files each capability brings, matching NVIDIA's lists so that
//! images built for NVIDIA's hook find the same files here.

use crate::planning::request::Capability;

/// A library the driver may ship, matched by SONAME prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LibrarySpec {
    /// The capability that brings it.
    pub capability: Capability,
    /// SONAME prefix, e.g. `libcuda.so`; it is also the development link's name.
    pub prefix: &'static str,
    /// Whether the capability is useless without it: its absence is an error, not a warning.
    pub core: bool,
    /// Whether its absence is reported: true for libnvidia-container's
    /// lists, false for what newer drivers and other packages add.
    pub expected: bool,
    /// Whether its file carries the driver's version (`libcuda.so.535.261.03`);
    /// one that does not (`libnvidia-egl-gbm.so.1.1.0`) is only taken from
    /// a directory holding the running driver's versioned libraries.
    pub versioned: bool,
}

const fn lib(capability: Capability, prefix: &'static str) -> LibrarySpec {
    LibrarySpec {
        capability,
        prefix,
        core: false,
        expected: true,
        versioned: true,
    }
}

const fn core(capability: Capability, prefix: &'static str) -> LibrarySpec {
    LibrarySpec {
        core: true,
        ..lib(capability, prefix)
    }
}

/// A family newer drivers ship, taken when there, never reported missing.
const fn newer(capability: Capability, prefix: &'static str) -> LibrarySpec {
    LibrarySpec {
        expected: false,
        ..lib(capability, prefix)
    }
}

/// A library versioned on its own (an EGL platform, NVVM 7.0), taken when
/// there beside the running driver's libraries.
const fn unversioned(capability: Capability, prefix: &'static str) -> LibrarySpec {
    LibrarySpec {
        versioned: false,
        ..newer(capability, prefix)
    }
}

use Capability::{Compute, Display, Graphics, Ngx, Utility, Video};

/// Every library family we know, by capability: libnvidia-container's
/// lists first, then what newer drivers ship (NVIDIA's v1.18-1.20 CDI
/// discoverers and the drivers' own file lists). A driver library of no
/// family here goes with every capability ([`library_for`] says `None`).
pub const LIBRARIES: &[LibrarySpec] = &[
    core(Utility, "libnvidia-ml.so"),
    lib(Utility, "libnvidia-cfg.so"),
    lib(Utility, "libnvidia-nscq.so"),
    core(Compute, "libcuda.so"),
    lib(Compute, "libcudadebugger.so"),
    lib(Compute, "libnvidia-opencl.so"),
    lib(Compute, "libnvidia-gpucomp.so"),
    lib(Compute, "libnvidia-ptxjitcompiler.so"),
    lib(Compute, "libnvidia-fatbinaryloader.so"),
    lib(Compute, "libnvidia-allocator.so"),
    lib(Compute, "libnvidia-compiler.so"),
    lib(Compute, "libnvidia-pkcs11.so"),
    lib(Compute, "libnvidia-pkcs11-openssl3.so"),
    lib(Compute, "libnvidia-nvvm.so"),
    lib(Compute, "libnvidia-tileiras.so"),
    lib(Video, "libvdpau_nvidia.so"),
    lib(Video, "libnvidia-encode.so"),
    lib(Video, "libnvidia-opticalflow.so"),
    lib(Video, "libnvcuvid.so"),
    lib(Graphics, "libnvidia-eglcore.so"),
    lib(Graphics, "libnvidia-glcore.so"),
    lib(Graphics, "libnvidia-tls.so"),
    lib(Graphics, "libnvidia-glsi.so"),
    lib(Graphics, "libnvidia-fbc.so"),
    lib(Graphics, "libnvidia-ifr.so"),
    lib(Graphics, "libnvidia-rtcore.so"),
    lib(Graphics, "libnvoptix.so"),
    lib(Graphics, "libGLX_nvidia.so"),
    lib(Graphics, "libEGL_nvidia.so"),
    lib(Graphics, "libGLESv2_nvidia.so"),
    lib(Graphics, "libGLESv1_CM_nvidia.so"),
    lib(Graphics, "libnvidia-glvkspirv.so"),
    lib(Graphics, "libnvidia-cbl.so"),
    lib(Ngx, "libnvidia-ngx.so"),
    // NVVM 7.0, kept beside the newer NVVM for older CUDA (NVIDIA v1.20).
    unversioned(Compute, "libnvidia-nvvm70.so"),
    newer(Utility, "libnvidia-sandboxutils.so"),
    // Vulkan's present layer (nvidia_layers.json, 575+), its producer,
    // Vulkan SC, NVAPI.
    newer(Graphics, "libnvidia-present.so"),
    newer(Graphics, "libnvidia-vulkan-producer.so"),
    newer(Graphics, "libnvidia-vksc-core.so"),
    newer(Graphics, "libnvidia-api.so"),
    // The EGL external platforms the egl_external_platform.d files name.
    unversioned(Graphics, "libnvidia-egl-gbm.so"),
    unversioned(Graphics, "libnvidia-egl-wayland.so"),
    unversioned(Graphics, "libnvidia-egl-wayland2.so"),
    unversioned(Graphics, "libnvidia-egl-xcb.so"),
    unversioned(Graphics, "libnvidia-egl-xlib.so"),
    // nvidia-settings' toolkit plugins: of the desktop, not of a container's work.
    newer(Display, "libnvidia-gtk2.so"),
    newer(Display, "libnvidia-gtk3.so"),
    newer(Display, "libnvidia-wayland-client.so"),
];

/// A cheap first test of a SONAME against [`LIBRARIES`]: every prefix there
/// starts with `libcuda` or contains `nv`. A host's ld.so.cache lists
/// thousands of other libraries, and this rejects almost all of them without
/// comparing each against every prefix.
pub fn may_be_listed(soname: &[u8]) -> bool {
    soname.starts_with(b"libcuda") || soname.windows(2).any(|w| w == b"nv")
}

/// The library spec whose prefix `soname` carries, if any. A prefix matches
/// only whole: `libcuda.so` matches `libcuda.so.1`, not `libcudadebugger.so.1`.
pub fn library_for(soname: &str) -> Option<&'static LibrarySpec> {
    if !may_be_listed(soname.as_bytes()) {
        return None;
    }
    LIBRARIES.iter().find(|spec| {
        soname
            .strip_prefix(spec.prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    })
}

/// The development link name of a library of no known family: its SONAME
/// up to `.so` (`libnvidia-foo.so.1` gives `libnvidia-foo.so`); `None` for a
/// name that is not `lib<name>.so[.<suffix>]`.
pub fn dev_name(soname: &str) -> Option<&str> {
    let at = soname.find(".so")?;
    let rest = &soname[at + 3..];
    let name = &soname[..at + 3];
    (name.len() > 6 && name.starts_with("lib") && (rest.is_empty() || rest.starts_with('.')))
        .then_some(name)
}

/// Directories of the driver root searched for the driver's libraries when
/// its loader cache lists none of them (Talos, NixOS-style hosts): NVIDIA's
/// library search paths (internal/lookup/library.go) for `arch`.
pub fn search_dirs(arch: &str) -> [String; 6] {
    [
        "/usr/lib64".to_string(),
        format!("/usr/lib/{arch}-linux-gnu"),
        format!("/usr/lib/{arch}-linux-gnu/nvidia/current"),
        "/lib64".to_string(),
        format!("/lib/{arch}-linux-gnu"),
        format!("/lib/{arch}-linux-gnu/nvidia/current"),
    ]
}

/// The subdirectory of a driver library directory that holds the VDPAU
/// driver (`vdpau/libvdpau_nvidia.so.<version>`), scanned with it.
pub const VDPAU_DIR: &str = "vdpau";

/// A program we inject, by capability (NVIDIA's lists).
pub const BINARIES: &[(Capability, &str)] = &[
    (Utility, "nvidia-smi"),
    (Utility, "nvidia-debugdump"),
    (Utility, "nvidia-persistenced"),
    (Utility, "nv-fabricmanager"),
    (Compute, "nvidia-cuda-mps-control"),
    (Compute, "nvidia-cuda-mps-server"),
];

/// Directories of the driver root searched for binaries, in order.
pub const BINARY_DIRS: &[&str] = &["usr/bin", "usr/sbin", "bin", "sbin"];

/// The driver's version in a [`CONFIGS`] place, for files named after it.
pub const VERSION: &str = "{version}";

/// The host architecture's name (`x86_64`, `aarch64`) in a [`CONFIGS`] place.
pub const ARCH: &str = "{arch}";

/// Files beside the libraries that a capability needs: the loader
/// configuration of graphics (the Vulkan and EGL ICDs, the EGL external
/// platforms), display's X server driver and GLX module, compute's OpenCL
/// ICD. Each comes with the places a distribution may keep it, in order of
/// preference; [`VERSION`] stands for the driver's version, [`ARCH`] for
/// the host architecture's.
pub const CONFIGS: &[(Capability, &[&str])] = &[
    (
        Graphics,
        &[
            "etc/vulkan/icd.d/nvidia_icd.json",
            "usr/share/vulkan/icd.d/nvidia_icd.json",
        ],
    ),
    // The architecture's own ICD file, beside the plain one (NVIDIA v1.18).
    (
        Graphics,
        &[
            "etc/vulkan/icd.d/nvidia_icd.{arch}.json",
            "usr/share/vulkan/icd.d/nvidia_icd.{arch}.json",
        ],
    ),
    (
        Graphics,
        &[
            "etc/vulkan/implicit_layer.d/nvidia_layers.json",
            "usr/share/vulkan/implicit_layer.d/nvidia_layers.json",
        ],
    ),
    (
        Graphics,
        &[
            "etc/glvnd/egl_vendor.d/10_nvidia.json",
            "usr/share/glvnd/egl_vendor.d/10_nvidia.json",
        ],
    ),
    // The EGL external platforms (Wayland, GBM, X11), as NVIDIA's graphics
    // discoverer mounts them (internal/discover/graphics.go).
    (
        Graphics,
        &[
            "etc/egl/egl_external_platform.d/09_nvidia_wayland2.json",
            "usr/share/egl/egl_external_platform.d/09_nvidia_wayland2.json",
        ],
    ),
    (
        Graphics,
        &[
            "etc/egl/egl_external_platform.d/10_nvidia_wayland.json",
            "usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
        ],
    ),
    (
        Graphics,
        &[
            "etc/egl/egl_external_platform.d/15_nvidia_gbm.json",
            "usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
        ],
    ),
    (
        Graphics,
        &[
            "etc/egl/egl_external_platform.d/20_nvidia_xcb.json",
            "usr/share/egl/egl_external_platform.d/20_nvidia_xcb.json",
        ],
    ),
    (
        Graphics,
        &[
            "etc/egl/egl_external_platform.d/20_nvidia_xlib.json",
            "usr/share/egl/egl_external_platform.d/20_nvidia_xlib.json",
        ],
    ),
    // The X server's driver and GLX module, as NVIDIA's Xorg discoverer
    // finds them (`nvidia/xorg/` beside the libraries), and where the
    // runfile, RHEL and Debian's alternatives put them (xorg/modules).
    (
        Display,
        &[
            "usr/lib/x86_64-linux-gnu/nvidia/xorg/nvidia_drv.so",
            "usr/lib/aarch64-linux-gnu/nvidia/xorg/nvidia_drv.so",
            "usr/lib64/xorg/modules/drivers/nvidia_drv.so",
            "usr/lib/xorg/modules/drivers/nvidia_drv.so",
        ],
    ),
    (
        Display,
        &[
            "usr/lib/x86_64-linux-gnu/nvidia/xorg/libglxserver_nvidia.so.{version}",
            "usr/lib/aarch64-linux-gnu/nvidia/xorg/libglxserver_nvidia.so.{version}",
            "usr/lib64/xorg/modules/extensions/libglxserver_nvidia.so.{version}",
            "usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.{version}",
            "usr/lib/xorg/modules/extensions/libglxserver_nvidia.so",
        ],
    ),
    (Display, &["usr/share/X11/xorg.conf.d/10-nvidia.conf"]),
    // OpenCL's loader finds the driver through this file.
    (Compute, &["etc/OpenCL/vendors/nvidia.icd"]),
];

/// The X server's GLX module, linked by its unversioned name as NVIDIA's
/// Xorg hook does.
pub const GLX_SERVER: &str = "libglxserver_nvidia.so";

/// The GBM backend link, in a `gbm` directory beside the libraries; it
/// points to [`ALLOCATOR`]'s SONAME, as NVIDIA's graphics libraries hook
/// links it (`../libnvidia-allocator.so.1`).
pub const GBM_BACKEND: &str = "gbm/nvidia-drm_gbm.so";

/// The library that is NVIDIA's GBM backend.
pub const ALLOCATOR: &str = "libnvidia-allocator.so";

/// What kind of IPC endpoint a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IpcKind {
    /// A unix socket a daemon listens on.
    Socket,
    /// A directory of named pipes (MPS).
    Directory,
}

/// IPC endpoints of the driver's daemons, relative to the driver root.
pub const IPCS: &[(Capability, &str, IpcKind)] = &[
    (Utility, "run/nvidia-persistenced/socket", IpcKind::Socket),
    (Utility, "run/nvidia-fabricmanager/socket", IpcKind::Socket),
    (Compute, "tmp/nvidia-mps", IpcKind::Directory),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_test_passes_every_listed_prefix() {
        for spec in LIBRARIES {
            assert!(may_be_listed(spec.prefix.as_bytes()), "{}", spec.prefix);
        }
        assert!(!may_be_listed(b"libc.so.6"));
        assert!(!may_be_listed(b"libGL.so.1"));
    }

    #[test]
    fn prefixes_match_whole_names_only() {
        assert_eq!(
            library_for("libcuda.so.1").map(|s| s.prefix),
            Some("libcuda.so")
        );
        assert_eq!(
            library_for("libcuda.so").map(|s| s.prefix),
            Some("libcuda.so")
        );
        assert_eq!(
            library_for("libcudadebugger.so.1").map(|s| s.prefix),
            Some("libcudadebugger.so")
        );
        assert_eq!(
            library_for("libnvidia-pkcs11-openssl3.so.535.261.03").map(|s| s.prefix),
            Some("libnvidia-pkcs11-openssl3.so")
        );
        assert_eq!(library_for("libcudart.so.12"), None);
        assert_eq!(library_for("libc.so.6"), None);
    }

    /// NVIDIA's `compute_libs` (libnvidia-container src/nvc_info.c:81-95 at
    /// 00b4b47e): the newest driver's Tile IR JIT library is among them.
    #[test]
    fn compute_libraries_are_nvidias_list() {
        let compute: Vec<&str> = LIBRARIES
            .iter()
            .filter(|s| s.capability == Compute && s.expected)
            .map(|s| s.prefix)
            .collect();
        assert_eq!(
            compute,
            [
                "libcuda.so",
                "libcudadebugger.so",
                "libnvidia-opencl.so",
                "libnvidia-gpucomp.so",
                "libnvidia-ptxjitcompiler.so",
                "libnvidia-fatbinaryloader.so",
                "libnvidia-allocator.so",
                "libnvidia-compiler.so",
                "libnvidia-pkcs11.so",
                "libnvidia-pkcs11-openssl3.so",
                "libnvidia-nvvm.so",
                "libnvidia-tileiras.so",
            ]
        );
    }

    #[test]
    fn newer_families_are_placed_by_their_use() {
        let family = |soname: &str| library_for(soname).map(|s| (s.capability, s.versioned));
        assert_eq!(
            family("libnvidia-nvvm70.so.4"),
            Some((Compute, false)),
            "not taken for libnvidia-nvvm"
        );
        assert_eq!(
            library_for("libnvidia-nvvm.so.4").map(|s| s.prefix),
            Some("libnvidia-nvvm.so")
        );
        assert_eq!(
            family("libnvidia-present.so.575.57.08"),
            Some((Graphics, true))
        );
        for egl in ["gbm", "wayland", "wayland2", "xcb", "xlib"] {
            let soname = format!("libnvidia-egl-{egl}.so.1");
            assert_eq!(family(&soname), Some((Graphics, false)), "{egl}");
        }
        assert_eq!(library_for("libnvidia-foo.so.535.261.03"), None);
        assert!(LIBRARIES.iter().filter(|s| !s.expected).all(|s| !s.core));
    }

    #[test]
    fn unknown_libraries_are_linked_by_their_name_up_to_so() {
        assert_eq!(dev_name("libnvidia-foo.so.1"), Some("libnvidia-foo.so"));
        assert_eq!(dev_name("libnvidia-foo.so"), Some("libnvidia-foo.so"));
        assert_eq!(dev_name("libnvidia-foo.sox.1"), None);
        assert_eq!(dev_name("nvidia.so.1"), None);
        assert_eq!(dev_name("lib.so.1"), None);
    }

    #[test]
    fn search_dirs_are_the_architectures_own() {
        let dirs = search_dirs("aarch64");
        assert!(dirs.contains(&"/usr/lib/aarch64-linux-gnu/nvidia/current".to_string()));
        assert!(dirs.iter().all(|d| !d.contains("x86_64")));
    }

    #[test]
    fn core_libraries_are_cuda_and_nvml() {
        let core: Vec<_> = LIBRARIES
            .iter()
            .filter(|s| s.core)
            .map(|s| (s.capability, s.prefix))
            .collect();
        assert_eq!(
            core,
            [(Utility, "libnvidia-ml.so"), (Compute, "libcuda.so")]
        );
    }
}

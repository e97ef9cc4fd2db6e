//! In-process benchmarks of the parts every hook run pays for: parsing and
//! writing the loader cache (5,000 entries, a busy host's), checking ELF
//! headers, parsing the request, and building the plan for 1, 8 and 16 GPUs.
//! `make bench-inprocess` runs them; integration/bench-* time whole processes.
//! Also the cgroup v2 device program's allow block for those plans.

use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{criterion_group, criterion_main, Criterion};
use goblin::elf::header::{ELFCLASS64, EM_X86_64, ET_DYN};
use oci_nvidia_hook::apply::cgroup::program;
use oci_nvidia_hook::host::driver::{Gpu, Inventory, Library, Node, NodeRole, NodeState};
use oci_nvidia_hook::host::elf::{self, X86_64};
use oci_nvidia_hook::host::ldcache::{
    Format, LdCache, LdCacheEntry, FLAG_ELF_LIBC6, FLAG_X8664_LIB64,
};
use oci_nvidia_hook::planning::image::ImageLayout;
use oci_nvidia_hook::planning::plan::{NodeMode, Plan};
use oci_nvidia_hook::planning::request::{Capabilities, Capability, DeviceSelection, Request};

/// A cache the size of a busy host's: 5,000 entries.
fn big_cache() -> LdCache {
    let entries = (0..5000)
        .map(|i| LdCacheEntry {
            flags: FLAG_ELF_LIBC6 | FLAG_X8664_LIB64,
            soname: format!("libbench{i}.so.{}", i % 7),
            path: format!("/usr/lib/x86_64-linux-gnu/libbench{i}.so.{}", i % 7),
            hwcap: 0,
        })
        .collect();
    let mut cache = LdCache {
        format: Format::New,
        entries,
    };
    cache.sort_for_lookup();
    cache
}

fn elf_header() -> Vec<u8> {
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = ELFCLASS64;
    h[5] = 1;
    h[6] = 1;
    h[16..18].copy_from_slice(&ET_DYN.to_le_bytes());
    h[18..20].copy_from_slice(&EM_X86_64.to_le_bytes());
    h[20..24].copy_from_slice(&1u32.to_le_bytes());
    h
}

/// A host's inventory with `gpus` GPUs and utility and compute libraries.
fn inventory(gpus: u32) -> Inventory {
    let node = |role, path: String, major, minor| Node {
        role,
        host_path: PathBuf::from(format!("/sim{path}")),
        path: PathBuf::from(path),
        major,
        minor,
        state: NodeState::Ok {
            mode: 0o666,
            gid: 0,
        },
    };
    let mut nodes = vec![
        node(NodeRole::Control, "/dev/nvidiactl".into(), 195, 255),
        node(NodeRole::Uvm, "/dev/nvidia-uvm".into(), 511, 0),
        node(NodeRole::UvmTools, "/dev/nvidia-uvm-tools".into(), 511, 1),
    ];
    let gpus: Vec<Gpu> = (0..gpus)
        .map(|i| Gpu {
            index: i,
            minor: (i + 3) % gpus,
            model: "NVIDIA H100 80GB HBM3".into(),
            uuid: format!("GPU-{i:08x}-0000-0000-0000-000000000000"),
            bus: format!("0000:{:02x}:00.0", 0x18 + i),
        })
        .collect();
    for g in &gpus {
        nodes.push(node(
            NodeRole::Gpu,
            format!("/dev/nvidia{}", g.minor),
            195,
            g.minor,
        ));
    }
    let libraries = [
        (Capability::Utility, "libnvidia-ml.so"),
        (Capability::Utility, "libnvidia-cfg.so"),
        (Capability::Compute, "libcuda.so"),
        (Capability::Compute, "libcudadebugger.so"),
        (Capability::Compute, "libnvidia-ptxjitcompiler.so"),
        (Capability::Compute, "libnvidia-nvvm.so"),
        (Capability::Compute, "libnvidia-opencl.so"),
        (Capability::Compute, "libnvidia-allocator.so"),
    ]
    .into_iter()
    .map(|(capability, prefix)| Library {
        capability: Some(capability),
        prefix: prefix.to_string(),
        soname: format!("{prefix}.1"),
        arch: "x86_64",
        path: PathBuf::from(format!("/sim/usr/lib/x86_64-linux-gnu/{prefix}.535.261.03")),
    })
    .collect();
    Inventory {
        driver_version: "535.261.03".into(),
        gpus,
        nodes,
        libraries,
        missing_libraries: Vec::new(),
        binaries: Vec::new(),
        missing_binaries: Vec::new(),
        firmware: Vec::new(),
        ipcs: Vec::new(),
        configs: Vec::new(),
        scope: Capabilities::default_set(),
        proc_dir: PathBuf::from("/sim/proc/driver/nvidia"),
        mig: None,
        mig_instances: Vec::new(),
        nvml: None,
        mig_config: None,
        mig_monitor: None,
        imex_major: None,
        drm: Vec::new(),
        gated_files: Vec::new(),
        wsl: None,
        csv: None,
    }
}

fn benches(c: &mut Criterion) {
    let cache = big_cache();
    let bytes = cache.to_bytes();
    c.bench_function("ldcache_parse_5000_entries", |b| {
        b.iter(|| LdCache::parse(black_box(&bytes)).unwrap())
    });
    c.bench_function("ldcache_sort_and_write_5000_entries", |b| {
        b.iter(|| {
            let mut c = cache.clone();
            c.sort_for_lookup();
            c.to_bytes()
        })
    });
    c.bench_function("ldcache_write_5000_entries", |b| {
        b.iter(|| black_box(&cache).to_bytes())
    });
    let header = elf_header();
    c.bench_function("elf_check_header", |b| {
        b.iter(|| {
            elf::check_header(
                Path::new("/x.so"),
                black_box(&header),
                X86_64,
                elf::Kind::SharedObject,
            )
            .unwrap()
        })
    });
    // The same check on a real file: open, read 64 bytes, check. This
    // benchmark's own executable is a position-independent ELF program.
    let exe = std::env::current_exe().expect("path of the benchmark executable");
    c.bench_function("elf_check_file", |b| {
        b.iter(|| elf::check_file(black_box(&exe), X86_64, elf::Kind::Executable).unwrap())
    });
    c.bench_function("request_parse", |b| {
        b.iter(|| {
            (
                DeviceSelection::parse(Some(black_box(
                    "0,1,GPU-00000002-0000-0000-0000-000000000000,0000:1b:00.0",
                )))
                .unwrap(),
                Capabilities::parse(black_box("utility,compute")).unwrap(),
            )
        })
    });
    for gpus in [1, 8, 16] {
        let inventory = inventory(gpus);
        let request = Request::new(DeviceSelection::All, Capabilities::default_set());
        c.bench_function(&format!("plan_build_{gpus}_gpus"), |b| {
            b.iter(|| {
                Plan::build(
                    black_box(&inventory),
                    black_box(&request),
                    &ImageLayout::Debian.into(),
                    NodeMode::Mknod,
                )
                .unwrap()
            })
        });
        let plan = Plan::build(
            &inventory,
            &request,
            &ImageLayout::Debian.into(),
            NodeMode::Mknod,
        )
        .unwrap();
        c.bench_function(&format!("bpf_allow_block_{gpus}_gpus"), |b| {
            b.iter(|| {
                program::encode(&program::allow_block(black_box(&plan.cgroup_rules)).unwrap())
            })
        });
    }
}

criterion_group!(inprocess, benches);
criterion_main!(inprocess);

#!/usr/bin/env python3
"""Two builds' driver helpers side by side (docs/benchmarks/2026-12-06-rust-probe.md):
the shipped binary of each running its embedded helper (`list` of a MIG
device: NVML; `info`: cuDriverGetVersion), and each helper run directly,
interleaved, fork to exit, with an empty environment. Checks first that
both builds give the same answers (as parsed JSON). Standard library only.

usage: bench_probe.py RUNS A_DIR B_DIR SIMHOST_DIR
  each DIR holds a `make build` binary (oci-nvidia-hook) and the helper it
  embeds (oci-nvidia-hook-probe); SIMHOST_DIR is an
  `integration/simhost --flavour synthetic --mig` host. Prints one Markdown
  row a case: runs, A's and B's median, mean and standard deviation (ms),
  and B's median over A's."""
import json, os, statistics, subprocess, sys, time

runs, old, new, sim = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
host = json.load(open(os.path.join(sim, "host.json")))
cfg = os.path.join(sim, "config.toml")
nvml = host["libraries"]["libnvidia-ml.so.1"]
cuda = host["libraries"]["libcuda.so.1"]
mig = host["mig"][0]
pos = f"{mig['gpu']}:{mig['mig_index']}"
cases = {
    "list --device MIG (NVML report)": lambda d: [f"{d}/oci-nvidia-hook", "--config", cfg, "list", "--device", pos, "--json"],
    "info --json (cuDriverGetVersion)": lambda d: [f"{d}/oci-nvidia-hook", "--config", cfg, "info", "--json"],
    "helper nvml (run directly)": lambda d: [f"{d}/oci-nvidia-hook-probe", "nvml", nvml],
    "helper cuda (run directly)": lambda d: [f"{d}/oci-nvidia-hook-probe", "cuda", cuda],
}

def once(argv):
    t = time.perf_counter()
    p = subprocess.run(argv, env={}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"{argv} failed: {p.stderr.decode()}")
    return dt, p.stdout

for name, argv in cases.items():
    # The answers must agree (as parsed JSON) before timing.
    a, b = once(argv(old))[1], once(argv(new))[1]
    if json.loads(a) != json.loads(b):
        sys.exit(f"{name}: answers differ:\nold {a!r}\nnew {b!r}")
    for _ in range(5):
        once(argv(old)); once(argv(new))
    times = {"A": [], "B": []}
    for i in range(runs):
        order = [("A", old), ("B", new)] if i % 2 == 0 else [("B", new), ("A", old)]
        for label, d in order:
            times[label].append(once(argv(d))[0] * 1000)
    c, r = times["A"], times["B"]
    mc, mr = statistics.median(c), statistics.median(r)
    print(f"| {name} | {runs} | {mc:.2f} | {mr:.2f} | {statistics.mean(c):.2f} ± {statistics.stdev(c):.2f} | {statistics.mean(r):.2f} ± {statistics.stdev(r):.2f} | {mr / mc:.2f} |")

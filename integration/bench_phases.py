#!/usr/bin/env python3
"""Statistics for integration/bench-phases (standard library only).

  bench_phases.py DIR HOOK NOOP RUNS "GPU COUNTS" "CGROUPS"
      Reads DIR/trace-<gpus>-<cgroup>.txt (perf script of sched_process_exec
      and sched_process_exit) and prints the table of each row, and with 1
      and 16 GPUs the cost of each GPU beyond the first.

The hook's share of a start runs from its exec to runc's exit: it leaves
out deferred teardown work that lands in the next start (see bench-phases).
A runc start runs from runc's exec to the last exit of a "runc" thread; its
hook's exec is the first exec of HOOK (oci-nvidia-hook) or NOOP (the no-op
hook) after it. The first two starts of a trace are the warm-ups. Intervals
and verdicts are bench_stats.py's: bootstrap 95% percentile intervals of
medians (2,000 resamples, fixed seed), "met" only when the whole interval is
within the target.
"""
import random
import re
import statistics as st
import sys

from bench_stats import TARGET_ADDED_MS, TARGET_PER_GPU_MS, boot_median, q, verdict

LINE = re.compile(r"\s*(\S.*?)\s+(\d+)\s+([\d.]+):\s+sched:(\w+):\s+(.*)")


def starts_of(trace, hook, noop):
    """Per runc start: its exec, its hook's exec and kind, runc's last exit (ms)."""
    starts = []
    for raw in open(trace):
        m = LINE.match(raw)
        if not m:
            continue
        comm, _pid, t, event, rest = m.groups()
        t = float(t) * 1000
        if event == "sched_process_exec":
            name = rest.split("filename=", 1)[1].split(" pid=", 1)[0]
            if name.rsplit("/", 1)[-1] == "runc":
                starts.append({"start": t})
            elif starts and name in (hook, noop) and "hook" not in starts[-1]:
                starts[-1]["hook"] = t
                starts[-1]["kind"] = "hook" if name == hook else "noop"
        elif event == "sched_process_exit" and starts and comm == "runc":
            starts[-1]["end"] = t
    return [s for s in starts if {"hook", "end"} <= s.keys()][2:]


def main():
    d, hook, noop, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    gpu_counts, cgroups = sys.argv[5].split(), sys.argv[6].split()
    rng = random.Random(1)
    rows, added_boot = [], {}
    for n in gpu_counts:
        for cg in cgroups:
            trace = f"{d}/trace-{n}-{cg}.txt"
            whole = starts_of(trace, hook, noop)
            after = {k: [s["end"] - s["hook"] for s in whole if s["kind"] == k] for k in ("noop", "hook")}
            before = {k: [s["hook"] - s["start"] for s in whole if s["kind"] == k] for k in ("noop", "hook")}
            if min(len(v) for v in after.values()) < runs:
                sys.exit(f"bench_phases.py: fewer than {runs} starts of each found in {trace}")
            b = [h - o for h, o in zip(boot_median(rng, after["hook"]), boot_median(rng, after["noop"]))]
            added_boot[(n, cg)] = b
            lo, hi = q(b, .025), q(b, .975)
            added = st.median(after["hook"]) - st.median(after["noop"])
            target = f"share ≤ 3 ms: {verdict(lo, hi, TARGET_ADDED_MS)}" if n == "8" else ""
            rows.append(
                f"| {n} | {cg} | {st.median(after['noop']):.2f} | {st.median(after['hook']):.2f} "
                f"| {added:.2f} | {lo:.2f} .. {hi:.2f} | {target} | {st.median(before['noop']):.2f} "
                f"| {st.median(before['hook']):.2f} | {len(after['hook'])} |"
            )
    print("| GPUs | cgroup | no-op: hook exec to runc exit, median ms | hook: hook exec to runc exit, median ms "
          "| added from the hook's exec ms | its 95% CI ms | verdict | no-op: runc exec to hook exec, median ms "
          "| hook: runc exec to hook exec, median ms | runs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if "1" in gpu_counts and "16" in gpu_counts:
        print("\n| cgroup | added from the hook's exec, per extra GPU ms | 95% CI | share ≤ 0.1 ms |\n|---|---|---|---|")
        for cg in cgroups:
            slope = [(b16 - b1) / 15 for b16, b1 in zip(added_boot[("16", cg)], added_boot[("1", cg)])]
            lo, hi = q(slope, .025), q(slope, .975)
            print(f"| {cg} | {st.median(slope):.3f} | {lo:.3f} .. {hi:.3f} | {verdict(lo, hi, TARGET_PER_GPU_MS)} |")


if __name__ == "__main__":
    main()

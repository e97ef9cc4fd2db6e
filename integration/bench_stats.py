#!/usr/bin/env python3
"""Statistics for integration/bench-runc and bench-cdi (standard library only).

  bench_stats.py cell RESULTS KEY NOOP_ID SELF_TIMES GPUS CAPS CGROUP VARIANT
      One table row from hyperfine's JSON files RESULTS/KEY.*.json (no-op
      and hook containers, told apart by NOOP_ID at the end of the command)
      and SELF_TIMES (integration/maxrss.c lines: the hook process alone).
      Also appends the row's medians and bootstrap samples to RESULTS/cells.json.
  bench_stats.py slopes RESULTS
      The cost of each GPU beyond the first, (t(16) - t(1)) / 15, for every
      capabilities/cgroup pair measured with 1 and 16 GPUs.
  bench_stats.py process NAME JSON TARGET_MS
      One row for a whole process timed by hyperfine (bench-cdi's `cdi
      generate`): median, its 95% interval, IQR, min, max, runs, and the
      verdict against TARGET_MS ("-" for none).
  bench_stats.py starts RESULTS KEY BASE_LABEL BASE_NEEDLE LABEL[=TARGET_MS] NEEDLE...
      Interleaved container starts (bench-cdi's Podman rows, bench-docker's)
      from hyperfine's JSON files RESULTS/KEY.*.json, told apart by a NEEDLE
      in each command (or its --command-name): each variant's median and IQR,
      then what each adds to the BASE variant and, for the last two, what the
      last adds to the one before, with 95% intervals; a variant given a
      TARGET_MS is judged against it for what it adds to BASE.

Intervals are bootstrap 95% percentile intervals of medians (2,000 resamples,
fixed seed: the same data give the same table). A target is "met" when the
whole interval is within it, "not met" when the whole interval is beyond it,
and "unclear" otherwise: then more runs, or a quieter machine, are needed.
"""
import glob
import json
import random
import statistics as st
import sys

BOOT = 2000
TARGET_ADDED_MS = 3.0      # 8 GPUs, utility,compute
TARGET_PER_GPU_MS = 0.1


def q(xs, p):
    """Percentile p of xs, linear between order statistics."""
    xs = sorted(xs)
    i = (len(xs) - 1) * p
    lo = int(i)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (i - lo)


def boot_median(rng, xs):
    return [st.median(rng.choices(xs, k=len(xs))) for _ in range(BOOT)]


def verdict(lo, hi, limit):
    if hi <= limit:
        return "met"
    if lo > limit:
        return "**not met**"
    return "unclear"


def cell(results, key, noop_id, self_times, gpus, caps, cg, variant):
    noop, hook = [], []
    for path in sorted(glob.glob(f"{results}/{key}.*.json")):
        for r in json.load(open(path))["results"]:
            (noop if r["command"].endswith(" " + noop_id) else hook).extend(
                t * 1000 for t in r["times"])
    alone = [int(line.split()[1]) / 1000 for line in open(self_times)]  # wall µs -> ms
    if not noop or not hook or not alone:
        sys.exit(f"bench_stats: no measurements for {key}")
    rng = random.Random(1)
    added = st.median(hook) - st.median(noop)
    added_boot = [h - n for h, n in zip(boot_median(rng, hook), boot_median(rng, noop))]
    alone_boot = boot_median(rng, alone)
    lo, hi = q(added_boot, .025), q(added_boot, .975)
    target = ""
    if gpus == "8" and caps == "utility,compute" and not variant:
        target = f"≤ {TARGET_ADDED_MS:g} ms: {verdict(lo, hi, TARGET_ADDED_MS)}"
    sd = st.stdev(hook) if len(hook) > 1 else 0.0
    print(f"| {gpus} | {caps} | {cg} | {variant or '-'} | {st.median(noop):.2f} "
          f"| {st.median(hook):.2f} | {added:.2f} | {lo:.2f} .. {hi:.2f} "
          f"| {q(hook, .75) - q(hook, .25):.2f} | {sd:.2f} | {len(hook)} "
          f"| {st.median(alone):.2f} | {q(alone, .75) - q(alone, .25):.2f} | {target} |",
          flush=True)
    with open(f"{results}/cells.json", "a") as f:
        json.dump(dict(gpus=int(gpus), caps=caps, cg=cg, variant=variant, added=added,
                       added_boot=added_boot, alone=st.median(alone), alone_boot=alone_boot), f)
        f.write("\n")


def slopes(results):
    cells = {}
    for line in open(f"{results}/cells.json"):
        c = json.loads(line)
        if not c["variant"]:
            cells[(c["caps"], c["cg"], c["gpus"])] = c
    pairs = sorted({(c, g) for c, g, _ in cells}, key=lambda k: (k[0] != "utility,compute", k))
    pairs = [(c, g) for c, g in pairs if (c, g, 1) in cells and (c, g, 16) in cells]
    if not pairs:
        print("(cost per GPU: needs 1 and 16 in BENCH_GPUS)")
        return
    print("| capabilities | cgroup | added per extra GPU ms | 95% CI | target ≤ 0.1 ms "
          "| hook alone per extra GPU ms | 95% CI | target ≤ 0.1 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for c, g in pairs:
        one, sixteen = cells[(c, g, 1)], cells[(c, g, 16)]
        row = f"| {c} | {g} "
        for what in ("added", "alone"):
            slope = (sixteen[what] - one[what]) / 15
            boot = [(b16 - b1) / 15 for b16, b1 in zip(sixteen[what + "_boot"], one[what + "_boot"])]
            lo, hi = q(boot, .025), q(boot, .975)
            row += f"| {slope:.3f} | {lo:.3f} .. {hi:.3f} | {verdict(lo, hi, TARGET_PER_GPU_MS)} "
        print(row + "|")


def process(name, path, target):
    times = [t * 1000 for t in json.load(open(path))["results"][0]["times"]]
    rng = random.Random(1)
    boot = boot_median(rng, times)
    lo, hi = q(boot, .025), q(boot, .975)
    verdict_text = ""
    if target != "-":
        verdict_text = f"≤ {float(target):g} ms: {verdict(lo, hi, float(target))}"
    print(f"| {name} | {st.median(times):.3f} | {lo:.3f} .. {hi:.3f} "
          f"| {q(times, .75) - q(times, .25):.3f} | {min(times):.3f} | {max(times):.3f} "
          f"| {len(times)} | {verdict_text} |", flush=True)


def starts(results, key, pairs):
    labels, needles = pairs[0::2], pairs[1::2]
    targets = {}
    for i, spec in enumerate(labels):
        label, _, limit = spec.rpartition("=")
        try:  # a label may hold "=" itself: only a number after the last is a target
            targets[label] = float(limit)
            labels[i] = label
        except ValueError:
            pass
    times = {label: [] for label in labels}
    for path in sorted(glob.glob(f"{results}/{key}.*.json")):
        for r in json.load(open(path))["results"]:
            owners = [l for l, n in zip(labels, needles) if n in r["command"]]
            if len(owners) != 1:
                sys.exit(f"bench_stats: {r['command']!r} matches {owners}, not one variant")
            times[owners[0]].extend(t * 1000 for t in r["times"])
    if any(not t for t in times.values()):
        sys.exit(f"bench_stats: no measurements for {key}: {[l for l, t in times.items() if not t]}")
    rng = random.Random(1)
    boots = {label: boot_median(rng, t) for label, t in times.items()}
    print("| variant | median ms | IQR ms | runs |")
    print("|---|---|---|---|")
    for label, t in times.items():
        print(f"| {label} | {st.median(t):.1f} | {q(t, .75) - q(t, .25):.1f} | {len(t)} |")
    print()
    print("| difference | added ms (of the medians) | 95% CI ms | target |")
    print("|---|---|---|---|")
    base = labels[0]
    compared = [(label, base) for label in labels[1:]]
    if len(labels) > 2:
        compared.append((labels[-1], labels[-2]))
    for label, other in compared:
        added = st.median(times[label]) - st.median(times[other])
        boot = [a - b for a, b in zip(boots[label], boots[other])]
        lo, hi = q(boot, .025), q(boot, .975)
        target = ""
        if other == base and label in targets:
            target = f"≤ {targets[label]:g} ms: {verdict(lo, hi, targets[label])}"
        print(f"| {label} − {other} | {added:+.1f} | {lo:+.1f} .. {hi:+.1f} | {target} |")


if __name__ == "__main__":
    if len(sys.argv) == 10 and sys.argv[1] == "cell":
        cell(*sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "slopes":
        slopes(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "process":
        process(*sys.argv[2:])
    elif len(sys.argv) >= 8 and len(sys.argv) % 2 == 0 and sys.argv[1] == "starts":
        starts(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        sys.exit(__doc__)

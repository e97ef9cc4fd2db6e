#!/usr/bin/env python3
"""Statistics for integration/bench-runc and bench-cdi (standard library only).

  bench_stats.py cell RESULTS KEY NOOP_ID SELF_TIMES GPUS CAPS CGROUP VARIANT
      One table row from hyperfine's JSON files RESULTS/KEY.*.json (no-op
      and hook containers, told apart by NOOP_ID at the end of the command)
      and SELF_TIMES (integration/maxrss.c lines: the hook process alone).
      Also appends the row's medians and bootstrap samples to RESULTS/cells.json.
  bench_stats.py abcell RESULTS KEY NOOP_ID BASE_ID SELF_TIMES BASE_SELF_TIMES GPUS CAPS CGROUP VARIANT
      The same row for two builds (bench-runc with BENCH_AB): the containers
      are told apart by the id ending their command (NOOP_ID, BASE_ID, else
      the build measured), and the row shows what each build adds, B's
      median less A's (the base's) with a bootstrap interval, for whole
      starts and for the hook alone. Appends B's cell to RESULTS/cells.json.
  bench_stats.py slopes RESULTS
      The cost of each GPU beyond the first, (t(16) - t(1)) / 15, for every
      capabilities/cgroup/variant measured with 1 and 16 GPUs.
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
# Issue 17's: a fresh overlay rootfs per start, and the hook process alone.
TARGET_FRESH_ADDED_MS = 2.0
TARGET_ALONE_MS = 1.5
TARGET_ALONE_PER_GPU_MS = 0.05
FRESH = "fresh overlay rootfs"


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


def times_by_id(results, key, ids):
    """Start times (ms) in RESULTS/KEY.*.json, by the container id that
    ends each command; a command ending in none of ids goes under None."""
    out = {i: [] for i in list(ids) + [None]}
    for path in sorted(glob.glob(f"{results}/{key}.*.json")):
        for r in json.load(open(path))["results"]:
            who = next((i for i in ids if r["command"].endswith(" " + i)), None)
            out[who].extend(t * 1000 for t in r["times"])
    return out


def alone_times(path):
    return [int(line.split()[1]) / 1000 for line in open(path)]  # wall µs -> ms


def targets(gpus, caps, variant, added_lo_hi, alone_lo_hi):
    """The verdicts that apply to a row: 8 GPUs, utility,compute only."""
    if gpus != "8" or caps != "utility,compute" or "cache" in variant:
        return ""
    if FRESH in variant:
        return f"added ≤ {TARGET_FRESH_ADDED_MS:g} ms: {verdict(*added_lo_hi, TARGET_FRESH_ADDED_MS)}"
    return (f"added ≤ {TARGET_ADDED_MS:g} ms: {verdict(*added_lo_hi, TARGET_ADDED_MS)}; "
            f"alone ≤ {TARGET_ALONE_MS:g} ms: {verdict(*alone_lo_hi, TARGET_ALONE_MS)}")


def cell(results, key, noop_id, self_times, gpus, caps, cg, variant):
    by = times_by_id(results, key, [noop_id])
    noop, hook = by[noop_id], by[None]
    alone = alone_times(self_times)
    if not noop or not hook or not alone:
        sys.exit(f"bench_stats: no measurements for {key}")
    rng = random.Random(1)
    added = st.median(hook) - st.median(noop)
    added_boot = [h - n for h, n in zip(boot_median(rng, hook), boot_median(rng, noop))]
    alone_boot = boot_median(rng, alone)
    lo, hi = q(added_boot, .025), q(added_boot, .975)
    target = targets(gpus, caps, variant, (lo, hi), (q(alone_boot, .025), q(alone_boot, .975)))
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


def abcell(results, key, noop_id, base_id, self_times, base_self_times, gpus, caps, cg, variant):
    by = times_by_id(results, key, [noop_id, base_id])
    noop, base, hook = by[noop_id], by[base_id], by[None]
    alone, base_alone = alone_times(self_times), alone_times(base_self_times)
    if not noop or not base or not hook or not alone or not base_alone:
        sys.exit(f"bench_stats: no measurements for {key}")
    rng = random.Random(1)
    noop_b, base_b, hook_b = (boot_median(rng, xs) for xs in (noop, base, hook))
    alone_b, base_alone_b = boot_median(rng, alone), boot_median(rng, base_alone)
    m = st.median
    added, base_added = m(hook) - m(noop), m(base) - m(noop)
    added_boot = [h - n for h, n in zip(hook_b, noop_b)]
    ab = [h - b for h, b in zip(hook_b, base_b)]
    ab_alone = [h - b for h, b in zip(alone_b, base_alone_b)]
    target = targets(gpus, caps, variant, (q(added_boot, .025), q(added_boot, .975)),
                     (q(alone_b, .025), q(alone_b, .975)))
    print(f"| {gpus} | {caps} | {cg} | {variant or '-'} | {m(noop):.2f} | {base_added:.2f} "
          f"| {added:.2f} | {m(hook) - m(base):+.2f} | {q(ab, .025):+.2f} .. {q(ab, .975):+.2f} "
          f"| {len(hook)} | {m(base_alone):.2f} | {m(alone):.2f} | {m(alone) - m(base_alone):+.2f} "
          f"| {q(ab_alone, .025):+.2f} .. {q(ab_alone, .975):+.2f} | B: {target} |", flush=True)
    with open(f"{results}/cells.json", "a") as f:
        json.dump(dict(gpus=int(gpus), caps=caps, cg=cg, variant=variant, added=added,
                       added_boot=added_boot, alone=m(alone), alone_boot=alone_b), f)
        f.write("\n")


def slopes(results):
    cells = {}
    for line in open(f"{results}/cells.json"):
        c = json.loads(line)
        if FRESH not in c["variant"] and "cache" not in c["variant"]:
            cells[(c["caps"], c["cg"], c["variant"], c["gpus"])] = c
    rows = sorted({k[:3] for k in cells}, key=lambda k: (k[2], k[0] != "utility,compute", k))
    rows = [k for k in rows if k + (1,) in cells and k + (16,) in cells]
    if not rows:
        print("(cost per GPU: needs 1 and 16 in BENCH_GPUS)")
        return
    print(f"| capabilities | cgroup | variant | added per extra GPU ms | 95% CI | target ≤ {TARGET_PER_GPU_MS:g} ms "
          f"| hook alone per extra GPU ms | 95% CI | target ≤ {TARGET_ALONE_PER_GPU_MS:g} ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k in rows:
        one, sixteen = cells[k + (1,)], cells[k + (16,)]
        row = f"| {k[0]} | {k[1]} | {k[2] or '-'} "
        for what, limit in (("added", TARGET_PER_GPU_MS), ("alone", TARGET_ALONE_PER_GPU_MS)):
            slope = (sixteen[what] - one[what]) / 15
            boot = [(b16 - b1) / 15 for b16, b1 in zip(sixteen[what + "_boot"], one[what + "_boot"])]
            lo, hi = q(boot, .025), q(boot, .975)
            row += f"| {slope:.3f} | {lo:.3f} .. {hi:.3f} | {verdict(lo, hi, limit)} "
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
    print("| difference | added ms (of the medians) | ratio of the medians | 95% CI ms | target |")
    print("|---|---|---|---|---|")
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
        ratio = st.median(times[label]) / st.median(times[other])
        print(f"| {label} − {other} | {added:+.1f} | {ratio:.3f} | {lo:+.1f} .. {hi:+.1f} | {target} |")


if __name__ == "__main__":
    if len(sys.argv) == 10 and sys.argv[1] == "cell":
        cell(*sys.argv[2:])
    elif len(sys.argv) == 12 and sys.argv[1] == "abcell":
        abcell(*sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "slopes":
        slopes(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "process":
        process(*sys.argv[2:])
    elif len(sys.argv) >= 8 and len(sys.argv) % 2 == 0 and sys.argv[1] == "starts":
        starts(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        sys.exit(__doc__)

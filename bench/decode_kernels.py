#!/usr/bin/env python3
"""decode_kernels.py - sums Nsight Compute's per-kernel durations (a --csv run with
gpu__time_duration.sum, as bench/gpu_decode_profile.sh makes) by kernel name, and
per decode step (a step starts at each launch of the kernel whose name holds
--step-start, default "embed": the token embedding, a step's first kernel)."""
import argparse, collections, csv, re, sys

ap = argparse.ArgumentParser()
ap.add_argument("csv")
ap.add_argument("--step-start", default="embed")
a = ap.parse_args()
rows = []
with open(a.csv, newline="") as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    unit = r.get("Metric Unit", "nsecond")
    v = float(r["Metric Value"].replace(",", ""))
    us = v / 1000 if unit.startswith("n") else v * 1000 if unit.startswith("m") else v
    name = re.sub(r"\([^()]*\)$", "", r["Kernel Name"].strip())
    rows.append((name, us))
if not rows:
    sys.exit("no kernel rows in " + a.csv)
starts = [i for i, (n, _) in enumerate(rows) if a.step_start in n]
if len(starts) >= 2:
    win = rows[starts[0]: starts[-1]]
    steps = len(starts) - 1
else:
    win, steps = rows, 1
by = collections.OrderedDict()
for n, us in win:
    c, t = by.get(n, (0, 0.0))
    by[n] = (c + 1, t + us)
tot = sum(t for _, t in by.values())
print(f"{steps} steps, {len(win) / steps:.0f} kernels a step, kernels' sum {tot / steps:.1f} us a step")
for n, (c, t) in sorted(by.items(), key=lambda x: -x[1][1]):
    print(f"{t / steps:9.1f} us a step  {c / steps:6.1f} launches  {t / c:8.2f} us each  {n}")

#!/usr/bin/env python3
"""workload_summary.py - reduces lazyquery --json outputs of a question stream (one file a
run, named q-POLICY-COLD-GPUBUDGET-HOSTBUDGET.jsonl by bench/gpu_workload.sh) to one row a
run: questions answered and failed, TTFT mean / p50 / p99 (the first question, which loads
the GPU's kernels and the store's pages, reported apart), and the hit rates of the cache
tiers over the stream and the bytes copied into HBM with their device-timed rate (the last
line's cumulative tier counts; the start-up preload's seconds; the GPU tier's without its
lookups of the prompt prefix; the host tier sees only what the GPU tier missed).
Usage: python3 bench/workload_summary.py FILE.jsonl ...   (markdown on standard output)"""
import json
import os
import sys


def pct(xs, q):
    """the q-quantile of sorted xs, nearest rank"""
    if not xs:
        return float("nan")
    k = max(0, min(len(xs) - 1, int(round(q * len(xs) + 0.5)) - 1))
    return xs[k]


def rate(t, prefix_lookups=0):
    """hit rate of a tier's lookups; the GPU tier also looks up the prompt prefix once a
    question (a miss the first time, a hit after): prefix_lookups of them are taken out"""
    h = t.get("hits", 0) - max(prefix_lookups - 1, 0)
    n = t.get("hits", 0) + t.get("misses", 0) - prefix_lookups
    return 100.0 * h / n if n > 0 else float("nan")


def main(paths):
    print("| run | questions | failed | first question TTFT ms | TTFT mean ms | p50 | p99 | GPU tier hit rate | host tier hit rate | into HBM GB | GB/s | preload s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p in paths:
        rows, bad = [], 0
        with open(p) as f:
            for ln in f:
                ln = ln.strip()
                if not ln:
                    continue
                try:
                    j = json.loads(ln)
                except json.JSONDecodeError as e:
                    sys.exit("%s: line %d: not JSON (%s)" % (p, len(rows) + bad + 1, e))
                if "error" in j:
                    bad += 1
                else:
                    rows.append(j)
        if not rows:
            print("| %s | 0 | %d | - | - | - | - | - | - | - | - | - |" % (os.path.basename(p), bad))
            continue
        first = 1e3 * rows[0]["timings"]["ttft_s"]
        t = sorted(1e3 * r["timings"]["ttft_s"] for r in rows[1:]) or [first]
        tiers = rows[-1].get("tiers", {})
        g = "%.1f%%" % rate(tiers["gpu"], len(rows) + bad) if "gpu" in tiers else "-"
        h = "%.1f%%" % rate(tiers["host"]) if "host" in tiers else "-"
        gt = tiers.get("gpu", {})
        moved = "%.2f" % (gt["bytes_in"] / 1e9) if "bytes_in" in gt else "-"
        gbps = "%.1f" % gt["copy_gbps"] if gt.get("copy_gbps") else "-"
        pre = tiers.get("host", {}).get("preload_s")
        pre = "%.1f" % pre if pre else "-"
        print("| %s | %d | %d | %.1f | %.1f | %.1f | %.1f | %s | %s | %s | %s | %s |" % (
            os.path.basename(p)[2:-6], len(rows), bad, first, sum(t) / len(t), pct(t, 0.5), pct(t, 0.99), g, h, moved,
            gbps, pre))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])

#!/bin/sh
# overhead_runs.sh - the lazy overhead's spread between processes: RUNS
# separate bench_kernels processes per shape (shapes interleaved, so drift
# over the call touches each alike), LZ_BENCH_ROUNDS lazy / twin pairs each
# (default 9), then overhead_ci.py per process and pooled.
# Usage (repo root, on the GPU machine): sh bench/kernels/overhead_runs.sh OUTDIR [SHAPE ...]
#   B=DIR (default build/cuda), RUNS (default 12), shapes default p128x4096 p128x1536
set -u
OUT=${1:?OUTDIR}
shift
[ $# -gt 0 ] || set -- p128x4096 p128x1536
B=${B:-build/cuda}
mkdir -p "$OUT"
for s in "$@"; do rm -f "$OUT/$s"-*.json; done # no stale runs in the pool
export LZ_BENCH_ROUNDS=${LZ_BENCH_ROUNDS:-9}
for r in $(seq 1 "${RUNS:-12}"); do
    for s in "$@"; do
        timeout 60 "$B/bench_kernels" "$OUT/$s-$r.json" 0 "$s" > /dev/null 2>&1 || echo "run $r $s failed"
    done
done
for s in "$@"; do
    echo "== $s, each process (lazy / twin pairs: median, 95% CI, range)"
    for r in $(seq 1 "${RUNS:-12}"); do
        python3 bench/kernels/overhead_ci.py "$OUT/$s-$r.json" | tail -n +3
    done
    echo "== $s, pooled"
    python3 bench/kernels/overhead_ci.py "$OUT/$s"-*.json | tail -n +3
done

#!/bin/sh
# run_device.sh - the one command run on the GPU machine for the attention
# kernels: 'kernels_check test' (13 processes in parallel: one per layout x
# head_dim x GQA group, one for the refusals), 'kernels_check perf', the torch
# SDPA peer.
# Usage (repo root, after 'make cuda' here): sh bench/kernels/run_device.sh OUTDIR
# SWEEP=0 leaves out the split-KV and kernel-shape sweeps (a shorter call);
# LZ_BENCH_ROUNDS=R times R lazy / twin pairs per shape (default 3; the table
# then gives the per-pair overhead's median and range; overhead.md its 95%
# confidence interval, from overhead_ci.py).
# Writes OUTDIR/gpu.txt, test.log, ours.json, bench.log, overhead.md, table.md, sdpa.json, ptxas.txt
# (ours.json and sdpa.json are what bench/results.py reads: copy them to bench/results/).
OUT=${1:-${OUT:-/tmp/out}}
B=${B:-build/cuda} # B=DIR runs the binaries of another build
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
# correctness: one process per group of cases, in parallel (the CPU reference is the slow part)
pids="" n=0
for f in prefill/refusal \
    /adjacent/d64/g1/ /adjacent/d64/g4/ /adjacent/d64/g8/ /adjacent/d128/g1/ /adjacent/d128/g4/ /adjacent/d128/g8/ \
    /half/d64/g1/ /half/d64/g4/ /half/d64/g8/ /half/d128/g1/ /half/d128/g4/ /half/d128/g8/; do
    timeout 150 "$B/kernels_check" test --filter "$f" > "$OUT/test_group$n.log" 2>&1 &
    pids="$pids $!" n=$((n + 1))
done
st=0
for p in $pids; do wait $p || st=1; done
cat "$OUT"/test_group*.log > "$OUT/test.log"; rm -f "$OUT"/test_group*.log
grep -h -E "^[0-9]+ passed|FAIL|error" "$OUT/test.log"
echo "tests exit status: $st"
timeout 240 "$B/kernels_check" perf --out "$OUT/ours.json" --sweep "${SWEEP:-1}" 2>&1 | tee "$OUT/bench.log"
python3 bench/kernels/overhead_ci.py "$OUT/ours.json" > "$OUT/overhead.md" 2>&1
PYTHONUNBUFFERED=1 timeout 200 python3 bench/kernels/sdpa_peer.py "$OUT/ours.json" "$OUT/table.md" 2>&1 | tail -n 30
cp "$B/ptxas.txt" "$OUT/ptxas.txt" 2>/dev/null
exit $st

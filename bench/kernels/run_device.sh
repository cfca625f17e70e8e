#!/bin/sh
# run_device.sh - the one command run on the GPU machine: GPU correctness
# tests (12 cases in parallel), the kernel benchmark, the torch SDPA peer.
# Usage (repo root, after 'make cuda' here): sh bench/kernels/run_device.sh OUTDIR
# SWEEP=0 leaves out the split-KV and kernel-shape sweeps (a shorter call);
# LZ_BENCH_ROUNDS=R times R lazy / twin pairs per shape (default 3; the table
# then gives the per-pair overhead's median and range; overhead.md its 95%
# confidence interval, from overhead_ci.py).
OUT=${1:-${OUT:-/tmp/out}}
B=${B:-build/cuda} # B=DIR runs the binaries of another build
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
# correctness: one process per case, in parallel (the CPU reference is the slow part)
pids=""
for c in 0 1 2 3 4 5 6 7 8 9 10 11; do
    timeout 150 "$B/test_kernels" $c > "$OUT/test_case$c.log" 2>&1 &
    pids="$pids $!"
done
st=0
for p in $pids; do wait $p || st=1; done
cat "$OUT"/test_case*.log > "$OUT/test.log"; rm -f "$OUT"/test_case*.log
grep -h -E "passed|FAIL|error" "$OUT/test.log"
echo "tests exit status: $st"
timeout 240 "$B/bench_kernels" "$OUT/ours.json" "${SWEEP:-1}" 2>&1 | tee "$OUT/bench.log"
python3 bench/kernels/overhead_ci.py "$OUT/ours.json" > "$OUT/overhead.md" 2>&1
PYTHONUNBUFFERED=1 timeout 200 python3 bench/kernels/sdpa_peer.py "$OUT/ours.json" "$OUT/table.md" 2>&1 | tail -n 30
cp "$B/ptxas.txt" "$OUT/ptxas.txt" 2>/dev/null
exit $st

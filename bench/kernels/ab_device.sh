#!/bin/sh
# ab_device.sh - A/B of two CUDA builds of the kernels in ONE device call.
# Build B (the candidate) gets the whole run_device.sh (GPU tests, benchmark,
# SDPA peer); then the benchmark of build A (the baseline) and of B again, so
# the comparison is B, A, B on the same warm GPU. Both without the sweeps.
# Usage (repo root, on the GPU machine): sh bench/kernels/ab_device.sh OUTDIR A B
#   with build/kgz/<A|B>-test_kernels.gz, -bench_kernels.gz (gzip of build/cuda/*
#   of each build: the carry is limited to 64 MiB). LZ_BENCH_ROUNDS as in run_device.sh.
set -u
OUT=${1:?OUTDIR} A=${2:?baseline name} B=${3:?candidate name}
for v in "$A" "$B"; do
    mkdir -p "build/cu-$v"
    for b in test_kernels bench_kernels; do
        gunzip -c "build/kgz/$v-$b.gz" > "build/cu-$v/$b" && chmod +x "build/cu-$v/$b"
    done
    cp "build/kgz/$v-ptxas.txt" "build/cu-$v/ptxas.txt" 2>/dev/null
done
mkdir -p "$OUT/$B" "$OUT/$A"
SWEEP=0 B="build/cu-$B" sh bench/kernels/run_device.sh "$OUT/$B"
st=$?
timeout 120 "build/cu-$A/bench_kernels" "$OUT/$A/ours.json" 0 > "$OUT/$A/bench.log" 2>&1
timeout 120 "build/cu-$B/bench_kernels" "$OUT/$B/ours2.json" 0 > "$OUT/$B/bench2.log" 2>&1
for f in "$OUT/$B/bench.log" "$OUT/$A/bench.log" "$OUT/$B/bench2.log"; do
    echo "== $f"; grep -E "^(decode|prefill)" "$f"
done
exit $st

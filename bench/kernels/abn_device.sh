#!/bin/sh
# abn_device.sh - the kernel benchmark of one or more CUDA builds in ONE device
# call, interleaved: 'kernels_check test' of every build but the first (the
# baseline), then ROUNDS rounds of each build's 'kernels_check perf' in turn
# (no sweeps; every round a process of its own), the prefill / decode lines of
# every run grouped by build, and each build's lazy overhead pooled over its
# rounds (overhead_ci.py: median and 95% confidence interval per shape).
# Usage (repo root, on the GPU machine): sh bench/kernels/abn_device.sh OUTDIR BASE [V1 ...]
#   a build NAME is build/kgz/NAME-kernels_check.gz (gzip of build/cuda/kernels_check
#   of each build: the carry is limited to 64 MiB), or a folder holding kernels_check
#   (e.g. build/cuda). ROUNDS (default 2); FILTER=TEXT times only the perf cases whose
#   name contains TEXT (e.g. p128x4096); NOTEST=1 skips the tests; LZ_BENCH_ROUNDS
#   as in run_device.sh. One build, many rounds = the overhead's spread between processes:
#   FILTER=p128x4096 ROUNDS=12 LZ_BENCH_ROUNDS=9 sh bench/kernels/abn_device.sh OUT build/cuda
# abn_summary.py OUTDIR NAME ... reduces the logs to a line a build and shape.
set -u
OUT=${1:?OUTDIR}
shift
[ $# -ge 1 ] || { echo "usage: abn_device.sh OUTDIR BASE [V1 ...]"; exit 2; }
mkdir -p "$OUT"
bin() { # the binary of build $1
    if [ -f "build/kgz/$1-kernels_check.gz" ]; then echo "build/cu-$1/kernels_check"; else echo "$1/kernels_check"; fi
}
dir() { echo "$OUT/$(echo "$1" | tr / _)"; } # the build's output folder
for v in "$@"; do
    mkdir -p "$(dir "$v")"
    if [ -f "build/kgz/$v-kernels_check.gz" ]; then
        mkdir -p "build/cu-$v"
        gunzip -c "build/kgz/$v-kernels_check.gz" > "build/cu-$v/kernels_check" && chmod +x "build/cu-$v/kernels_check"
    fi
    [ -x "$(bin "$v")" ] || { echo "no build $v: neither build/kgz/$v-kernels_check.gz nor $v/kernels_check"; exit 2; }
done
st=0
base=$1
for v in "$@"; do
    [ "$v" = "$base" ] && [ $# -gt 1 ] && continue
    [ "${NOTEST:-0}" = 1 ] && continue
    d=$(dir "$v")
    pids="" n=0
    for f in prefill/refusal \
        /adjacent/d64/g1/ /adjacent/d64/g4/ /adjacent/d64/g8/ /adjacent/d128/g1/ /adjacent/d128/g4/ /adjacent/d128/g8/ \
        /half/d64/g1/ /half/d64/g4/ /half/d64/g8/ /half/d128/g1/ /half/d128/g4/ /half/d128/g8/; do
        timeout 150 "$(bin "$v")" test --filter "$f" > "$d/test_group$n.log" 2>&1 &
        pids="$pids $!" n=$((n + 1))
    done
    for p in $pids; do wait $p || st=1; done
    cat "$d"/test_group*.log > "$d/test.log"; rm -f "$d"/test_group*.log
    echo "$v tests: $(grep -c 'passed, 0 failed' "$d/test.log") of $n groups clean; $(grep -h -E '^[0-9]+ passed' "$d/test.log" | awk '{p+=$1; f+=$3} END {print p " passed, " f " failed"}')"
done
for r in $(seq 1 "${ROUNDS:-2}"); do
    for v in "$@"; do
        d=$(dir "$v")
        timeout 120 "$(bin "$v")" perf --out "$d/ours$r.json" --sweep 0 ${FILTER:+--filter "$FILTER"} > "$d/bench$r.log" 2>&1 || st=1
    done
done
for v in "$@"; do
    d=$(dir "$v")
    for r in $(seq 1 "${ROUNDS:-2}"); do
        echo "== $v round $r"; grep -E "^(decode|prefill)" "$d/bench$r.log" | sed -E 's/ +/ /g'
    done
    echo "== $v, lazy overhead pooled over the rounds"
    python3 bench/kernels/overhead_ci.py "$d"/ours*.json
done
exit $st

#!/bin/sh
# abn_device.sh - the kernel benchmark of several CUDA builds in ONE device
# call, interleaved: GPU tests of every build but the first (the baseline),
# then ROUNDS rounds of each build's benchmark in turn (no sweeps), and the
# prefill / decode lines of every run grouped by build.
# Usage (repo root, on the GPU machine): sh bench/kernels/abn_device.sh OUTDIR BASE V1 [V2 ...]
#   with build/kgz/<name>-test_kernels.gz, -bench_kernels.gz (as ab_device.sh).
#   ROUNDS (default 2); LZ_BENCH_ROUNDS as in run_device.sh; NOTEST=1 skips the
#   GPU tests (diagnostic builds whose results are wrong on purpose).
set -u
OUT=${1:?OUTDIR}
shift
mkdir -p "$OUT"
for v in "$@"; do
    mkdir -p "build/cu-$v" "$OUT/$v"
    for b in test_kernels bench_kernels; do
        gunzip -c "build/kgz/$v-$b.gz" > "build/cu-$v/$b" && chmod +x "build/cu-$v/$b"
    done
done
st=0
base=$1
for v in "$@"; do
    [ "$v" = "$base" ] && continue
    [ "${NOTEST:-0}" = 1 ] && continue
    pids=""
    for c in 0 1 2 3 4 5 6 7 8 9 10 11; do
        timeout 150 "build/cu-$v/test_kernels" $c > "$OUT/$v/test_case$c.log" 2>&1 &
        pids="$pids $!"
    done
    for p in $pids; do wait $p || st=1; done
    cat "$OUT/$v"/test_case*.log > "$OUT/$v/test.log"; rm -f "$OUT/$v"/test_case*.log
    echo "$v tests: $(grep -c 'passed, 0 failed' "$OUT/$v/test.log") of 12 cases clean; $(grep -h -E '^[0-9]+ passed' "$OUT/$v/test.log" | awk '{p+=$1; f+=$3} END {print p " passed, " f " failed"}')"
done
for r in $(seq 1 "${ROUNDS:-2}"); do
    for v in "$@"; do
        timeout 120 "build/cu-$v/bench_kernels" "$OUT/$v/ours$r.json" 0 > "$OUT/$v/bench$r.log" 2>&1 || st=1
    done
done
for v in "$@"; do
    for r in $(seq 1 "${ROUNDS:-2}"); do
        echo "== $v round $r"; grep -E "^(decode|prefill)" "$OUT/$v/bench$r.log" | sed -E 's/ +/ /g'
    done
done
exit $st

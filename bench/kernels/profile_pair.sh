#!/bin/sh
# profile_pair.sh - Nsight Compute of the lazy prefill kernel and its twin on ONE
# shape, side by side: duration, instructions, issue activity, the warp stall
# reasons, and the SASS lines where warps stall most (SourceCounters), so the
# lazy overhead can be traced to instructions. The split kernel only (the
# combine kernel is the same for both). LZ_BENCH_PROFILE=1: every timing of
# bench_kernels is 3 plain calls, lazy first, so launch 1 is lazy, launch 4 the twin.
# Single plain launches: compare the counters (instructions, stall samples), not the
# durations (128 x 1536, eighth session: 25.4 / 21.4 us here, 23.9 / 23.2 us graph-timed).
# Usage (repo root, on the GPU machine): sh bench/kernels/profile_pair.sh OUTDIR [BUILD_DIR] [SHAPE]
#   BUILD_DIR default build/cuda; SHAPE default p128x1536 (bench_kernels' names).
OUT=${1:?OUTDIR} B=${2:-build/cuda} SHAPE=${3:-p128x1536}
mkdir -p "$OUT"
SECT="--section SpeedOfLight --section WarpStateStats --section InstructionStats --section SchedulerStats --section LaunchStats --section Occupancy --section SourceCounters"
NCU="ncu --clock-control none --cache-control none $SECT --kernel-name regex:prefill_kernel --launch-count 1"
export LZ_BENCH_PROFILE=1
for k in lazy twin; do
    skip=1; [ $k = twin ] && skip=4
    timeout 120 $NCU --launch-skip $skip -f -o "/tmp/pp_$k" "$B/bench_kernels" /tmp/pp.json 0 "$SHAPE" > /dev/null 2>&1
    ncu -i "/tmp/pp_$k.ncu-rep" --print-details all > "$OUT/ncu_${SHAPE}_$k.txt" 2>&1
    # per SASS instruction: executed count and stall samples (compare lazy and twin line by line)
    ncu -i "/tmp/pp_$k.ncu-rep" --page source --csv --print-source sass > "$OUT/sass_${SHAPE}_$k.csv" 2>&1
    gzip -f "$OUT/sass_${SHAPE}_$k.csv"
done
for k in lazy twin; do
    echo "== $k"
    grep -E "prefill_kernel|Duration|Executed Instructions |Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Registers Per|Stall|stall" \
        "$OUT/ncu_${SHAPE}_$k.txt" | head -40
done

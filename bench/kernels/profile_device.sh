#!/bin/sh
# profile_device.sh - Nsight Compute on the GPU machine (Firecracker runtime: ncu
# reads the counters; clocks left alone; caches not flushed between kernels, so a
# combine kernel reads its parts from L2 as in a run). LZ_BENCH_PROFILE=1: every
# timing of 'kernels_check perf' is 3 plain calls, lazy first, no warm-up, so each
# launch is at a known place.
# Usage (repo root, build/cuda carried): sh bench/kernels/profile_device.sh OUTDIR [SHAPE]
#   without SHAPE: sections for one prefill and one decode shape, ours (lazy and
#     twin) and torch SDPA's FlashAttention-2 kernels;
#   SHAPE (a perf case, e.g. p128x1536): the lazy prefill split kernel and its twin
#     side by side (the combine kernel is the same for both): duration,
#     instructions, issue activity, warp stall reasons, and per SASS instruction
#     the executed count and stall samples (sass_SHAPE_{lazy,twin}.csv.gz), so the
#     lazy overhead can be traced to instructions. Single plain launches: compare
#     the counters, not the durations.
#   B=DIR another build (default build/cuda).
OUT=${1:-${OUT:-/tmp/out}}
B=${B:-build/cuda}
mkdir -p "$OUT"
export LZ_BENCH_PROFILE=1
if [ -n "${2:-}" ]; then
    SHAPE=$2
    SECT="--section SpeedOfLight --section WarpStateStats --section InstructionStats --section SchedulerStats --section LaunchStats --section Occupancy --section SourceCounters"
    NCU="ncu --clock-control none --cache-control none $SECT --kernel-name regex:prefill_kernel --launch-count 1"
    for k in lazy twin; do
        skip=1; [ $k = twin ] && skip=4 # launches 0-2 lazy, 3-5 twin: the second of each
        timeout 120 $NCU --launch-skip $skip -f -o "/tmp/pp_$k" "$B/kernels_check" perf --out /tmp/pp.json --sweep 0 \
            --filter "$SHAPE" > /dev/null 2>&1
        ncu -i "/tmp/pp_$k.ncu-rep" --print-details all > "$OUT/ncu_${SHAPE}_$k.txt" 2>&1
        ncu -i "/tmp/pp_$k.ncu-rep" --page source --csv --print-source sass > "$OUT/sass_${SHAPE}_$k.csv" 2>&1
        gzip -f "$OUT/sass_${SHAPE}_$k.csv"
    done
    for k in lazy twin; do
        echo "== $k"
        grep -E "prefill_kernel|Duration|Executed Instructions |Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Registers Per|Stall|stall" \
            "$OUT/ncu_${SHAPE}_$k.txt" | head -40
    done
    exit 0
fi
SECT="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis"
NCU="ncu --clock-control none --cache-control none $SECT"
# ours: lazy x3, twin x3, ... (a split prefill call is a split kernel and a combine kernel)
timeout 120 $NCU --kernel-name regex:'prefill_kernel|combine' --launch-skip 2 --launch-count 2 \
    "$B/kernels_check" perf --out /tmp/p.json --sweep 0 --filter p128x4096 > "$OUT/ncu_prefill_lazy.txt" 2>&1
timeout 120 $NCU --kernel-name regex:'prefill_kernel|combine' --launch-skip 6 --launch-count 2 \
    "$B/kernels_check" perf --out /tmp/p.json --sweep 0 --filter p128x4096 > "$OUT/ncu_prefill_twin.txt" 2>&1
timeout 120 $NCU --kernel-name regex:decode_kernel --launch-skip 1 --launch-count 1 \
    "$B/kernels_check" perf --out /tmp/d.json --sweep 0 --filter d16x4096 > "$OUT/ncu_decode_lazy.txt" 2>&1
unset LZ_BENCH_PROFILE
cat > /tmp/sdpa_one.py <<'PY'
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right
H, KV, D = 32, 8, 128
def go(M, N):
    q = torch.randn(1, H, M, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, KV, N + M, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        for _ in range(3):
            F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(M, N + M), enable_gqa=True)
def dec(B, N):
    q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, KV, N, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        for _ in range(3):
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
go(128, 4096)
dec(16, 4096)
torch.cuda.synchronize()
PY
timeout 150 $NCU --kernel-name regex:flash --launch-skip 2 --launch-count 5 \
    python3 /tmp/sdpa_one.py > "$OUT/ncu_sdpa.txt" 2>&1
grep -h -E "^  [a-z_:<>(), 0-9]+\(|Duration|Registers|Grid Size|Block Size|Compute \(SM\) Throughput|DRAM Throughput|Memory Throughput|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Dynamic Shared|Waves Per SM" \
    "$OUT"/ncu_*.txt | head -150

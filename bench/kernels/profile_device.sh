#!/bin/sh
# profile_device.sh - Nsight Compute sections for one prefill and one decode
# shape, ours (lazy and twin) and torch SDPA's FlashAttention-2 kernels, on the
# GPU machine (Firecracker runtime: ncu reads the counters; clocks left alone;
# caches not flushed between kernels, so a combine kernel reads its parts from L2 as in a run).
# Usage (repo root, build/cuda carried): sh bench/kernels/profile_device.sh OUTDIR
OUT=${1:-${OUT:-/tmp/out}}
B=build/cuda
mkdir -p "$OUT"
SECT="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis"
NCU="ncu --clock-control none --cache-control none $SECT"
# ours (LZ_BENCH_PROFILE=1: every timing is 3 plain calls): lazy x3, twin x3, ...
export LZ_BENCH_PROFILE=1
timeout 120 $NCU --kernel-name regex:'prefill_kernel|combine' --launch-skip 2 --launch-count 2 \
    "$B/bench_kernels" /tmp/p.json 0 p128x4096 > "$OUT/ncu_prefill_lazy.txt" 2>&1
timeout 120 $NCU --kernel-name regex:'prefill_kernel|combine' --launch-skip 6 --launch-count 2 \
    "$B/bench_kernels" /tmp/p.json 0 p128x4096 > "$OUT/ncu_prefill_twin.txt" 2>&1
timeout 120 $NCU --kernel-name regex:decode_kernel --launch-skip 1 --launch-count 1 \
    "$B/bench_kernels" /tmp/d.json 0 d16x4096 > "$OUT/ncu_decode_lazy.txt" 2>&1
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

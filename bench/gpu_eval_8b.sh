#!/bin/sh
# gpu_eval_8b.sh - on the GPU machine: lazyeval at Llama-3.1-8B's shape (random weights, bf16:
# speed only, the answers are noise) on the HotpotQA sample, in two reports:
#   OUT/hotpot  each question once over its own passages (distractor setting), lazy, block and
#               full, at the default GPU budget;
#   OUT/zipf    a replay of --requests requests, each --workload-docs passages drawn by
#               Zipf(alpha) popularity over the sample's passages (arriving back to back), lazy
#               and block at GPU budgets of 1G and 4G (the hit-rate plot).
# The GPU machine has no gnuplot: each report folder holds its plots' data and plots.gp, drawn
# afterwards on the development machine (cd OUT/hotpot && gnuplot plots.gp).
# Usage (repo root, GPU machine): sh bench/gpu_eval_8b.sh OUTDIR
#   with ${G:-build/gpuenc}/{lazyeval,lazyingest,lazy-mkmodel}.xz (or .gz) ('make cuda', 'make', xz) and
#   ${W:-build/gpuenc}/hotpotqa_sample100.json (../shared/fixtures/qa's HotpotQA sample).
#   LIMIT (default 100) questions of the first report, N (default 16) answer tokens, REQ
#   (default 300) requests and ALPHA (default 1.0) of the replay, BUDGETS (default 1G,4G), ZMODES
#   (default lazy,block) its modes.
set -u
OUT=${1:?OUTDIR}
T=${TMPDIR:-/tmp}
W=${W:-build/gpuenc}
mkdir -p "$OUT" build/gpu-run
. bench/gpu_common.sh
gpu_unpack lazyeval lazyingest lazy-mkmodel || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f "$T/m8b.gguf" ] || make_8b "$T/m8b.gguf" || exit 1
S="$T/store-eval8b"
rm -rf "$S"
st=0
LZ_BIN=$B "$B/lazyeval" --gpu -q -m "$T/m8b.gguf" --store "$S" -o "$OUT/hotpot" --mode lazy,block,full \
    --limit "${LIMIT:-100}" -n "${N:-16}" --ingest-arg --max-doc-tokens --ingest-arg 4096 \
    "$W/hotpotqa_sample100.json" > "$OUT/hotpot.txt" 2>&1 || st=1
LZ_BIN=$B "$B/lazyeval" --gpu -q -m "$T/m8b.gguf" --store "$S" --no-ingest -o "$OUT/zipf" --mode "${ZMODES:-lazy,block}" \
    --gpu-cache-bytes "${BUDGETS:-1G,4G}" --workload zipf --popularity documents --alpha "${ALPHA:-1.0}" \
    --requests "${REQ:-300}" -n "${N:-16}" "$W/hotpotqa_sample100.json" > "$OUT/zipf.txt" 2>&1 || st=1
rm -rf "$S"
exit $st

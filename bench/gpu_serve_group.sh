#!/bin/sh
# gpu_serve_group.sh - on the GPU machine: decode grouped by document (kernels/lz_decode_group.h)
# against per-row decode in serving, at Llama-3.1-8B's shape (random weights, made by make_8b,
# bench/gpu_common.sh), on the paper's setup (bench_workload --setup a: 100 synthetic documents of
# 2,048 tokens, 5 a request by Zipf(2.1), a 32-token question, 16 output tokens). The corpus is
# ingested once; then bench_serve (in-process, lazyserve's scheduler over the GPU engine's slots)
# runs lazy at saturation (all requests at once) with LAZY_GPU_DECODE_GROUP=0 and auto, alternating,
# ROUNDS times. Its table's "step ms" column is the decode step. Random weights: the answers are
# noise, the timings real. The kernel alone: build/cuda/kernels_check perf --filter decode-group/.
# Usage (repo root, GPU machine): sh bench/gpu_serve_group.sh OUTDIR
#   with build/cuda/{lazy-mkmodel,lazyingest,bench_serve} ('make cuda'), or the same binaries as
#   ${G:-build/gpuenc}/NAME.xz or .gz, and the corpus PAPER_CORPUS (default $W/paper_corpus.jsonl,
#   W default build/gpuenc; made by 'sh bench/synthetic_corpus.sh FILE' on the development machine).
# Knobs: ROUNDS=2 MODES=lazy (e.g. lazy,block) REQUESTS=128 CONC=40 GPU_CACHE=4G HOST_CACHE=32G
#   INGEST_ARGS= (e.g. --kv-dtype fp8). About 40 s for the model, 30 s of ingest, 25 s a run.
set -u
OUT=${1:?OUTDIR}
T=${TMPDIR:-/tmp}
B=${B:-build/cuda}
W=${W:-build/gpuenc}
PAPER_CORPUS=${PAPER_CORPUS:-$W/paper_corpus.jsonl}
ROUNDS=${ROUNDS:-2}
MODES=${MODES:-lazy}
REQUESTS=${REQUESTS:-128}
CONC=${CONC:-40}
GPU_CACHE=${GPU_CACHE:-4G}
HOST_CACHE=${HOST_CACHE:-32G}
INGEST_ARGS=${INGEST_ARGS:-}
mkdir -p "$OUT"
. bench/gpu_common.sh
G=${G:-build/gpuenc}
gpu_unpack_if bench_serve lazy-mkmodel lazyingest || exit 1
[ -s "$PAPER_CORPUS" ] || { echo "no paper corpus at $PAPER_CORPUS (sh bench/synthetic_corpus.sh FILE)"; exit 2; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f "$T/m8b.gguf" ] || make_8b "$T/m8b.gguf" > /dev/null || exit 1
S="$T/store-group"
rm -rf "$S"
# the paper's documents are 2,056 tokens with their header: stored whole
"$B/lazyingest" --gpu --quiet --json --max-doc-tokens 4096 $INGEST_ARGS --model "$T/m8b.gguf" --store "$S" \
    "$PAPER_CORPUS" > "$OUT/ingest.json" || exit 1
st=0
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for grp in 0 auto; do
        name="group-$grp-round$r"
        LAZY_GPU_DECODE_GROUP=$grp "$B/bench_serve" --store "$S" --model "$T/m8b.gguf" --corpus "$PAPER_CORPUS" --gpu \
            --setup a --k 5 --alpha 2.1 --question-tokens 32 --max-tokens 16 --mode "$MODES" --rates inf \
            --concurrency "$CONC" --requests "$REQUESTS" --idle 0 --warmup 16 --gpu-cache-bytes "$GPU_CACHE" \
            --host-cache-bytes "$HOST_CACHE" --preload all --gpu-seq-tokens 2048 --no-serial --label "$name" \
            --json "$OUT/serve.jsonl" > "$OUT/$name.txt" 2> "$OUT/$name.err" || st=1
        echo "== LAZY_GPU_DECODE_GROUP=$grp, round $r"
        grep -E "^(mode|[a-z]+ +rate inf)" "$OUT/$name.txt"
    done
    r=$((r + 1))
done
rm -rf "$S"
exit $st

#!/bin/sh
# gpu_8b.sh - on the GPU machine: the product at a user's model size. A model of
# Llama-3.1-8B's shape with random weights (bf16, dim 4096, 32 layers, 32/8 heads,
# FFN 14336, 128,256-token vocabulary, llama3 rope scaling; 16 GB) is written there
# by lazy-mkmodel, the demo corpus is ingested with --gpu, and the demo's three
# questions are answered twice in one lazyquery --gpu process (top-k 10, 32 tokens;
# the second round finds the documents resident in GPU memory), with cold documents loaded
# from the store or recomputed on the GPU (--cold), and with every question cold (cache
# budgets of one byte). Prints tokens/s,
# first-token latency and decode rate; bench/RESULTS.md ("The product at Llama-3.1-8B's
# shape (GPU)") compares them with the
# bandwidth and GEMM bounds. Random weights: the answers are noise, the timings real.
# Then the peer, bench/hf_peer_8b.py (transformers, the same shape and prompt length).
# Usage (repo root, GPU machine): sh bench/gpu_8b.sh OUTDIR
#   with ${G:-build/gpuenc}/{lazyingest,lazyquery,lazy-mkmodel}.xz (or .gz) built here ('make cuda',
#   'make', xz or gzip). Needs 17 GB of disk under TMPDIR (default /tmp) and ~2 GB for the store.
set -u
OUT=${1:?OUTDIR}
T=${TMPDIR:-/tmp}
mkdir -p "$OUT" build/gpu-run
. bench/gpu_common.sh
gpu_unpack lazyingest lazyquery lazy-mkmodel || exit 1
st=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
t0=$(date +%s.%N)
make_8b "$T/m8b.gguf" || exit 1
t1=$(date +%s.%N)
echo "model: $(du -h "$T/m8b.gguf" | cut -f1) written in $(awk "BEGIN {print $t1 - $t0}") s"
rm -rf "$T/store8b"
/usr/bin/time -v "$B/lazyingest" --gpu --model "$T/m8b.gguf" --store "$T/store8b" datasets/demo/corpus.jsonl \
    > "$OUT/ingest.log" 2> "$OUT/ingest.time" || st=1
cat "$OUT/ingest.log"
grep -E "Elapsed|Maximum resident" "$OUT/ingest.time"
printf '%s\n' "In which industry does Droex Foods operate?" "What is the birthplace of Cima Elosani?" \
    "Which organisation is older, Raio Works or Rairreil Works?" > "$T/q3.txt"
cat "$T/q3.txt" "$T/q3.txt" > "$T/q6.txt"
# cold documents read from the store (--cold load) or recomputed on the GPU (the default), one
# process each: "resident" with the default cache budgets (the first round cold, the second
# resident), "cold" with both budgets at one byte (every question cold; the second round in a
# warm process: the store's pages cached, the GPU's kernels loaded)
for run in load-resident recompute-resident load-cold recompute-cold; do
    cold=${run%-*}; budget=
    [ "${run#*-}" = cold ] && budget="--cache-bytes 1 --gpu-cache-bytes 1"
    echo "== lazyquery --gpu --cold $cold $budget"
    /usr/bin/time -v "$B/lazyquery" --gpu --cold $cold $budget --model "$T/m8b.gguf" --store "$T/store8b" --top-k 10 \
        -n 32 --no-stats --json < "$T/q6.txt" > "$OUT/query-$run.jsonl" 2> "$OUT/query-$run.time" || st=1
    grep -o '"timings":{[^}]*}' "$OUT/query-$run.jsonl"
    grep -o '"cache":{[^}]*}' "$OUT/query-$run.jsonl" | head -6
    grep -E "Elapsed|Maximum resident" "$OUT/query-$run.time"
    grep -o '"answer":"[^"]*"' "$OUT/query-$run.jsonl" > "$OUT/answers-$run.txt"
done
for run in recompute-resident load-cold recompute-cold; do
    cmp -s "$OUT/answers-load-resident.txt" "$OUT/answers-$run.txt" && echo "answers: $run identical to load-resident" ||
        { echo "answers: $run differs from load-resident"; paste -d '|' "$OUT/answers-load-resident.txt" "$OUT/answers-$run.txt"; }
done
rm -rf "$T/store8b" "$T/m8b.gguf"
# the peer, the same shape and prompt length: transformers recomputing the prompt (PEER=0 skips it)
if [ "${PEER:-1}" = 1 ] && python3 -c "import torch, transformers" 2> /dev/null; then
    python3 bench/hf_peer_8b.py 1606 2>&1 | grep -v -i warning | tee "$OUT/peer.txt"
fi
exit $st

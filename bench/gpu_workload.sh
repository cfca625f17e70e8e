#!/bin/sh
# gpu_workload.sh - on the GPU machine: a question stream with Zipf-skewed document
# popularity replayed by one lazyquery --gpu process at Llama-3.1-8B's shape (random
# weights, bf16), under a GPU cache budget, per cache policy and miss path: TTFT mean,
# p50, p99 and the GPU tier's hit rate (bench/workload_summary.py). The corpus and the
# stream are made on the development machine by bench_workload --emit-corpus /
# --emit-questions (the same generator its simulated hit rates and Belady bound use), so
# the measured hit rates can be set against the simulated ones of the same stream.
# Passages are stored whole (--max-doc-tokens 4096), so every id of the stream names one document.
# Usage (repo root, GPU machine): sh bench/gpu_workload.sh OUTDIR
#   with ${G:-build/gpuenc}/{lazyingest,lazyquery,lazy-mkmodel}.gz ('make cuda', 'make',
#   xz or gzip) and ${W:-build/gpuenc}/{corpus.jsonl,questions.jsonl}; RUNS="lfu:recompute:1G ..."
#   (policy:cold:gpu budget[:host budget[:preload[:mode]]]) picks the runs; preload all fills the
#   host tier with the corpus before the stream (lazyquery --preload all), none (the default)
#   leaves it to fill on misses; mode: lazy (default), block, prefix, full. PEER=1: then
#   transformers recomputing a prompt of the stream's mean length (bench/hf_peer_8b.py). Needs 17 GB under TMPDIR.
#   Q=FILE replays another stream over the same corpus (default $W/questions.jsonl); KEEP=1 keeps
#   the store for a later call with the same W (one ingest for several streams). INGEST_ARGS: more
#   lazyingest options (e.g. --kv-dtype fp8).
set -u
OUT=${1:?OUTDIR}
T=${TMPDIR:-/tmp}
W=${W:-build/gpuenc}
Q=${Q:-$W/questions.jsonl}
S="$T/storew.$(echo "$W" | tr -c 'a-zA-Z0-9\n' _)"
RUNS=${RUNS:-lru:recompute:1G:1 lfu:recompute:1G:1 lru:load:1G:32G lfu:load:1G:32G}
mkdir -p "$OUT" build/gpu-run
. bench/gpu_common.sh
gpu_unpack lazyingest lazyquery lazy-mkmodel || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f "$T/m8b.gguf" ] || make_8b "$T/m8b.gguf" || exit 1
if [ ! -f "$S.ingested" ]; then
    rm -rf "$S" "$S.ingested"
    "$B/lazyingest" --gpu --quiet --json --max-doc-tokens 4096 ${INGEST_ARGS:-} --model "$T/m8b.gguf" --store "$S" "$W/corpus.jsonl" > "$OUT/ingest.json" || exit 1
    touch "$S.ingested"
fi
st=0
for run in $RUNS; do
    pol=$(echo "$run" | cut -d: -f1); cold=$(echo "$run" | cut -d: -f2)
    gb=$(echo "$run" | cut -d: -f3); hb=$(echo "$run" | cut -d: -f4); pre=$(echo "$run" | cut -d: -f5)
    mode=$(echo "$run" | cut -d: -f6)
    name="${mode:-lazy}-$pol-$cold-$gb-${hb:-1}${pre:+-$pre}"
    # a clean measurement: no access counts from earlier runs written or read (a preload of all
    # documents takes them in id order)
    "$B/lazyquery" --gpu --mode "${mode:-lazy}" --cache-policy "$pol" --cold "$cold" --gpu-cache-bytes "$gb" --host-cache-bytes "${hb:-1}" \
        --preload "${pre:-none}" --no-stats -n 4 --json --model "$T/m8b.gguf" --store "$S" \
        --questions "$Q" > "$OUT/q-$name.jsonl" 2> "$OUT/q-$name.err" || st=1
done
python3 bench/workload_summary.py "$OUT"/q-*.jsonl | tee "$OUT/summary.md"
if [ "${PEER:-0}" = 1 ] && python3 -c "import torch, transformers" 2> /dev/null; then
    f=$(ls "$OUT"/q-*.jsonl | head -n 1)
    n=$(python3 -c "import json,sys; r=[json.loads(l)['tokens']['prompt'] for l in open(sys.argv[1]) if '\"tokens\"' in l]; print(round(sum(r)/len(r)))" "$f")
    python3 bench/hf_peer_8b.py "$n" 2>&1 | grep -v -i warning | tee "$OUT/peer.txt"
fi
[ "${KEEP:-0}" = 1 ] || rm -rf "$S" "$S.ingested"
exit $st

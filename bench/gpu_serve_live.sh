#!/bin/sh
# gpu_serve_live.sh - on the GPU machine: a live lazyserve --gpu at Llama-3.1-8B's shape
# answering concurrent curl completions, then its /metrics (requests, TTFT, decode steps
# grouped by document). Writes the random-weight 8B model and ingests the demo corpus with
# --gpu (as bench/gpu_8b.sh) unless $TMPDIR already holds them.
# Usage (repo root, GPU machine): G=dir sh bench/gpu_serve_live.sh OUTDIR
#   with $G/{lazyingest,lazyserve,lazy-mkmodel}.xz (or .gz); $G/lib, when present, goes on
#   LD_LIBRARY_PATH (libmicrohttpd and its libraries, for a machine without the package);
#   CLIENTS concurrent requests (default 12) of TOKENS tokens (default 48).
set -u
OUT=${1:?OUTDIR}
T=${TMPDIR:-/tmp}
CLIENTS=${CLIENTS:-12}
TOKENS=${TOKENS:-48}
. bench/gpu_common.sh
gpu_unpack lazyserve lazy-mkmodel lazyingest || exit 1
[ -d "${G:-build/gpuenc}/lib" ] && export LD_LIBRARY_PATH="${G:-build/gpuenc}/lib"
if [ ! -s "$T/m8b.gguf" ]; then make_8b "$T/m8b.gguf" > /dev/null || exit 1; fi
if [ ! -d "$T/store8b" ]; then
    "$B/lazyingest" --gpu --model "$T/m8b.gguf" --store "$T/store8b" datasets/demo/corpus.jsonl > "$OUT/ingest.log" 2>&1 || exit 1
fi
rm -f "$T/port"
"$B/lazyserve" --gpu --model "$T/m8b.gguf" --store "$T/store8b" --port 0 --port-file "$T/port" --no-stats > "$OUT/serve.log" 2>&1 &
SP=$!
for i in $(seq 1 120); do [ -s "$T/port" ] && break; sleep 1; done
[ -s "$T/port" ] || { echo "lazyserve did not start"; tail -5 "$OUT/serve.log"; exit 1; }
P=$(cat "$T/port")
Q="In which industry does Droex Foods operate?"
CP=""
for i in $(seq 1 "$CLIENTS"); do
    curl -s "localhost:$P/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\": \"$Q\", \"max_tokens\": $TOKENS, \"ignore_eos\": true, \"retrieve\": {\"k\": 5}}" > "$T/c$i.json" &
    CP="$CP $!"
done
wait $CP
curl -s "localhost:$P/metrics" > "$OUT/metrics.txt"
grep -E "^lazy_requests_total|^lazy_ttft_seconds_(sum|count)|^lazy_decode_steps|^lazy_decode_grouped" "$OUT/metrics.txt"
kill $SP; wait $SP
head -c 400 "$T/c1.json"; echo

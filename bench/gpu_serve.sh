#!/bin/sh
# gpu_serve.sh - on the GPU machine: serving at Llama-3.1-8B's shape (random weights, bf16, made
# there by lazy-mkmodel; the demo corpus ingested with --gpu). lazyserve's scheduler driven
# in-process (bench_serve --store: the same requests, no HTTP) at fixed concurrencies: first
# serial (the GPU engine holding one sequence, lazyquery --gpu's path: the baseline), then batched
# (the engine's slots: the admitted requests' questions prefilled together, one decode pass over
# every running request). Per level: requests/s, output tokens/s, TTFT and TPOT mean / p50 / p99,
# the mean decode batch, output tokens/s against serial. Then (HTTP=1, the default) lazyserve
# --gpu itself over HTTP, every request at once (bench_serve --port --rates inf), its
# libmicrohttpd from build/cuda/lib. Random weights: the answers are noise, the timings real.
# The paper's setup, lazy against block and full over one stream, Poisson arrivals and the idle
# TTFT: bench/gpu_serve_paper.sh.
# Usage (repo root, GPU machine): sh bench/gpu_serve.sh OUTDIR
#   with build/cuda/{lazy-mkmodel,lazyingest,bench_serve,lazyserve,lib/} ('make cuda'), or the
#   same binaries gzipped as ${G:-build/gpuenc}/NAME.gz (bench/gpu_common.sh; lazyserve and lib/
#   only with HTTP=1, lib/ from LIB, default build/cuda/lib). Knobs:
#   CONC=1,8,32,64 REQUESTS=128 K=5 ALPHA=1.0 MAX_TOKENS=32 CORPUS=datasets/demo/corpus.jsonl
#   SEQ=2048 (own tokens a sequence holds) HTTP=1. Needs 17 GB under TMPDIR (default /tmp).
set -u
OUT=${1:?OUTDIR}
T=${TMPDIR:-/tmp}
B=${B:-build/cuda}
LIB=${LIB:-build/cuda/lib}
CONC=${CONC:-1,8,32,64}
REQUESTS=${REQUESTS:-128}
K=${K:-5}
ALPHA=${ALPHA:-1.0}
MAX_TOKENS=${MAX_TOKENS:-32}
CORPUS=${CORPUS:-datasets/demo/corpus.jsonl}
SEQ=${SEQ:-2048}
HTTP=${HTTP:-1}
mkdir -p "$OUT"
. bench/gpu_common.sh
if [ -f "${G:-build/gpuenc}/bench_serve.xz" ] || [ -f "${G:-build/gpuenc}/bench_serve.gz" ]; then
    gpu_unpack lazy-mkmodel lazyingest bench_serve || exit 1
    [ "$HTTP" = 1 ] && { gpu_unpack lazyserve || exit 1; }
fi
st=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f "$T/m8b.gguf" ] || make_8b "$T/m8b.gguf" || exit 1
rm -rf "$T/storeserve"
"$B/lazyingest" --gpu --quiet --model "$T/m8b.gguf" --store "$T/storeserve" "$CORPUS" > "$OUT/ingest.log" 2>&1 || {
    cat "$OUT/ingest.log"; exit 1; }
: > "$OUT/serve.jsonl"
echo "== in-process: serial, then batched at concurrency $CONC ($REQUESTS requests a level, k $K, $MAX_TOKENS tokens)"
"$B/bench_serve" --store "$T/storeserve" --model "$T/m8b.gguf" --corpus "$CORPUS" --gpu --concurrency "$CONC" \
    --requests "$REQUESTS" --k "$K" --alpha "$ALPHA" --max-tokens "$MAX_TOKENS" --gpu-seq-tokens "$SEQ" \
    --json "$OUT/serve.jsonl" 2> "$OUT/bench.err" | tee "$OUT/inproc.txt" || st=1
grep -v '^$' "$OUT/bench.err" | head -20
if [ "$HTTP" = 1 ]; then
    max=$(echo "$CONC" | tr ',' '\n' | sort -n | tail -n 1)
    echo "== lazyserve --gpu over HTTP: $REQUESTS requests at once, --max-running $max"
    rm -f "$T/serve.port"
    LD_LIBRARY_PATH="$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$B/lazyserve" --gpu --store "$T/storeserve" \
        -m "$T/m8b.gguf" --port 0 --port-file "$T/serve.port" --no-stats --max-queue 100000 --max-running "$max" \
        --mem-budget 1024G --gpu-seq-tokens "$SEQ" 2> "$OUT/lazyserve.log" &
    pid=$!
    i=0
    while [ ! -s "$T/serve.port" ] && [ $i -lt 1200 ] && kill -0 "$pid" 2> /dev/null; do sleep 0.1; i=$((i + 1)); done
    if [ -s "$T/serve.port" ]; then
        "$B/bench_serve" --port "$(cat "$T/serve.port")" --corpus "$CORPUS" --rates inf --requests "$REQUESTS" --k "$K" \
            --alpha "$ALPHA" --max-tokens "$MAX_TOKENS" --label http-batched --json "$OUT/serve.jsonl" | tee "$OUT/http.txt" || st=1
    else
        echo "lazyserve did not start:"; cat "$OUT/lazyserve.log"; st=1
    fi
    kill "$pid" 2> /dev/null
    wait "$pid" 2> /dev/null
    head -5 "$OUT/lazyserve.log"
fi
rm -rf "$T/storeserve"
echo "JSON lines: $OUT/serve.jsonl"
exit $st

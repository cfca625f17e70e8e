#!/bin/sh
# serve_load.sh - lazyserve under load (bench/bench_serve.c): Poisson arrivals at
# swept rates and all at once, documents by Zipf popularity, for each mode in one
# run (lazy, block, full) and for lazy with a batch of one (the serial baseline:
# what one lazyquery process does). Prints one table a configuration and writes
# JSON lines to $OUT (default build/serve_load.jsonl).
#   sh bench/serve_load.sh                     (the demo corpus, the shipped model)
#   RATES=2,8,32,inf REQUESTS=128 K=5 ALPHA=1.1 MAX_TOKENS=32 MODES="lazy block full" \
#   CORPUS=corpus.jsonl MODEL=models/default.gguf sh bench/serve_load.sh
# Needs 'make all bench'. The server binds 127.0.0.1 on a free port; nothing leaves
# this machine.
set -eu
BUILD=${BUILD:-build}
MODEL=${MODEL:-models/default.gguf}
CORPUS=${CORPUS:-datasets/demo/corpus.jsonl}
RATES=${RATES:-4,16,64,inf}
REQUESTS=${REQUESTS:-128}
K=${K:-5}
ALPHA=${ALPHA:-1.0}
MAX_TOKENS=${MAX_TOKENS:-32}
MODES=${MODES:-lazy block full}
SERIAL=${SERIAL:-1}
OUT=${OUT:-$BUILD/serve_load.jsonl}
EXTRA=${EXTRA:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$BUILD/bin/lazyingest" --quiet --model "$MODEL" --store "$tmp/store" "$CORPUS"
: > "$OUT"
run() { # label, lazyserve options
    label=$1; shift
    "$BUILD/bin/lazyserve" -q --store "$tmp/store" -m "$MODEL" --port 0 --port-file "$tmp/port" --no-stats \
        --max-queue 100000 "$@" $EXTRA 2>"$tmp/server.log" &
    pid=$!
    i=0
    while [ ! -s "$tmp/port" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    port=$(cat "$tmp/port")
    echo "== $label ($*): $REQUESTS requests a rate, k $K, Zipf $ALPHA, $MAX_TOKENS output tokens (ignore_eos)"
    "$BUILD/bench/bench_serve" --port "$port" --corpus "$CORPUS" --rates "$RATES" --requests "$REQUESTS" --k "$K" \
        --alpha "$ALPHA" --max-tokens "$MAX_TOKENS" --json "$OUT" --label "$label"
    kill "$pid"
    wait "$pid" || true
    rm -f "$tmp/port"
}
for mode in $MODES; do run "$mode" --mode "$mode"; done
[ "$SERIAL" = 1 ] && run "lazy-serial" --mode lazy --max-running 1
echo "JSON lines: $OUT"

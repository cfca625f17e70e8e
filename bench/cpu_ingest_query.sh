#!/bin/sh
# cpu_ingest_query.sh - CPU figures of bench/RESULTS.md ("Ingest": ingest tokens/s;
# "Query and workloads": start-up preload): the demo corpus
# ingested one document at a time (lazyingest --serial) and one document a
# thread, the same store bytes; then a random 1.5B-parameter model (width 2,048,
# 16 layers, bf16) with 8 demo documents, all 8 asked once (access counts), and
# lazyquery's start-up preload timed as the process wall time with it minus
# without it (best of 3).
# Usage (repo root, after make): sh bench/cpu_ingest_query.sh [OUTDIR]   (THREADS=N to pin)
set -u
OUT=${1:-build/bench-cpu}
B=${BIN:-build/bin}
TH=${THREADS:+--threads $THREADS}
mkdir -p "$OUT"
now() { date +%s.%N; }
for serial in 1 0; do
    rm -rf "$OUT/demo-$serial"
    SER=""; [ "$serial" = 1 ] && SER=--serial
    "$B/lazyingest" $SER --json $TH --model models/default.gguf --store "$OUT/demo-$serial" \
        datasets/demo/corpus.jsonl > "$OUT/demo-$serial.json" || exit 1
    python3 -c "import json; j=json.load(open('$OUT/demo-$serial.json')); print('demo ingest, serial=$serial: %d tok/s, forward %.2f s, packing %.2f s, wall %.2f s, %d encoders, %d stored bytes' % (j['tokens_per_s'], j['forward_s'], j['pack_s'], j['wall_s'], j['encoders'], j['stored_bytes']))"
done
"$B/lazy-mkmodel" -o "$OUT/m1b.gguf" --dim 2048 --layers 16 --heads 32 --kv-heads 8 --head-dim 64 --ffn 8192 \
    --vocab 128256 --llama3-freqs --theta 500000 --type bf16 || exit 1
head -8 datasets/demo/corpus.jsonl > "$OUT/eight.jsonl"
rm -rf "$OUT/s8"
"$B/lazyingest" --quiet $TH --model "$OUT/m1b.gguf" --store "$OUT/s8" "$OUT/eight.jsonl" || exit 1
ids=$(python3 -c "import json; print(','.join(json.loads(l)['id'] for l in open('$OUT/eight.jsonl')))")
"$B/lazyquery" $TH --model "$OUT/m1b.gguf" --store "$OUT/s8" --docs "$ids" -n 1 -q "hello" > /dev/null || exit 1
for p in --no-preload --preload; do
    best=
    for i in 1 2 3; do
        s=$(now)
        "$B/lazyquery" $TH --model "$OUT/m1b.gguf" --store "$OUT/s8" --no-stats -q -n 1 --top-k 1 \
            $( [ "$p" = --no-preload ] && echo --no-preload ) "zzzz" > /dev/null
        t=$(python3 -c "print($(now) - $s)")
        best=$(python3 -c "print(min(float('$t'), float('${best:-1e9}')))")
    done
    echo "lazyquery $p: best of 3 ${best} s"
    [ "$p" = --no-preload ] && base=$best
done
echo "preload: $(python3 -c "print(round(($best - $base) * 1e3))") ms"
rm -f "$OUT/m1b.gguf"

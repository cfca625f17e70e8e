#!/bin/sh
# gpu_serve_paper.sh - on the GPU machine: serving at Llama-3.1-8B's shape (random weights, bf16,
# made there by make_8b, bench/gpu_common.sh) on the paper's setup, lazy against block and full in
# one bench_serve run over one request stream (bench/bench_serve.c, in-process: lazyserve's
# scheduler over the GPU engine's slots, no HTTP). The setup (bench_workload --setup a): 100
# synthetic documents of 2,048 tokens (bench/synthetic_corpus.py), 5 a request drawn by Zipf(2.1)
# (bench_workload's own stream: --stream workload), a 32-token question, 16 output tokens. Per
# mode: a warm-up, the idle TTFT (requests one at a time), Poisson arrivals at each rate of RATES
# (inf: all at once) and a closed loop at CONC (saturation); the first mode also serially first
# (the one-sequence engine of lazyquery --gpu: the baseline of "x serial"). Then (REAL=1) the same
# over real passages (the demo corpus by default; a 2WikiMultihopQA corpus from bench_workload
# --setup b-2wiki --emit-corpus with REAL_CORPUS=FILE). Random weights: the answers are noise, the
# timings real.
# Usage (repo root, GPU machine): sh bench/gpu_serve_paper.sh OUTDIR
#   with build/cuda/{lazy-mkmodel,lazyingest,bench_serve} ('make cuda'), or the same binaries
#   gzipped as ${G:-build/gpuenc}/NAME.gz (bench/gpu_common.sh) or xz-packed as NAME.xz, and the
#   corpus PAPER_CORPUS (default $W/paper_corpus.jsonl, W default build/gpuenc), made on the
#   development machine by 'sh bench/synthetic_corpus.sh build/gpuenc/paper_corpus.jsonl' (about
#   40 s; or the first 100 lines of gpu_ingest_dtype.sh's big.jsonl: the same documents).
# Writes OUTDIR/serve.jsonl (a JSON line a run: label paper or real), OUTDIR/paper.txt and
# OUTDIR/real.txt (the tables), OUTDIR/summary.txt (saturation throughput per mode against lazy,
# p99 TTFT at the highest finite rate over idle, of each variant).
# Knobs (environment): MODES=lazy,block,full RATES=0.5,1,2,4,inf RATE_SECONDS=5 (a finite rate sends
#   at most rate x RATE_SECONDS requests, at least 4) REQUESTS=48 (rate inf and the closed loop)
#   CONC=32 IDLE=8 WARMUP=16 K=5 ALPHA=2.1 QTOK=32 MAX_TOKENS=16 GPU_CACHE=4G (the GPU tier's budget;
#   the paper's budgets: 1G, 4G, 16G) HOST_CACHE=32G PRELOAD=all (the host tier filled with the
#   corpus in lazy and block modes, as bench/RESULTS.md's workload (a)) SEQ=2048 (own tokens of a
#   lazy / block slot; full's are the stream's longest prompt) SERIAL=1 REAL=1 REAL_CORPUS=
#   datasets/demo/corpus.jsonl REAL_RATES=1,4,inf REAL_ALPHA=1.0 INGEST_ARGS= (more lazyingest
#   options, e.g. --kv-dtype fp8). Needs about 36 GB under TMPDIR (default /tmp): the model 15 GB,
#   the paper store about 18 GB.
# Estimated device time with these defaults (from bench/RESULTS.md's 8B figures: ingest about
#   5,800 tokens/s of wall, a resident lazy question 8-13 ms, full's 10,400-token prompt about
#   0.34 s, a decode step 5-15 ms): the model 30-45 s (none when $TMPDIR/m8b.gguf exists),
#   ingest 40 s, the paper's runs about 160 s (lazy 50, block 45, full 70: the Poisson spans are
#   about 23 s a mode, full's 48-request runs about 17 s each), the real passages' about 60 s;
#   about 5 minutes in all (each call of the device tool may take 10).
set -u
OUT=${1:?OUTDIR}
T=${TMPDIR:-/tmp}
B=${B:-build/cuda}
W=${W:-build/gpuenc}
PAPER_CORPUS=${PAPER_CORPUS:-$W/paper_corpus.jsonl}
MODES=${MODES:-lazy,block,full}
RATES=${RATES:-0.5,1,2,4,inf}
RATE_SECONDS=${RATE_SECONDS:-5}
REQUESTS=${REQUESTS:-48}
CONC=${CONC:-32}
IDLE=${IDLE:-8}
WARMUP=${WARMUP:-16}
K=${K:-5}
ALPHA=${ALPHA:-2.1}
QTOK=${QTOK:-32}
MAX_TOKENS=${MAX_TOKENS:-16}
GPU_CACHE=${GPU_CACHE:-4G}
HOST_CACHE=${HOST_CACHE:-32G}
PRELOAD=${PRELOAD:-all}
SEQ=${SEQ:-2048}
SERIAL=${SERIAL:-1}
REAL=${REAL:-1}
REAL_CORPUS=${REAL_CORPUS:-datasets/demo/corpus.jsonl}
REAL_RATES=${REAL_RATES:-1,4,inf}
REAL_ALPHA=${REAL_ALPHA:-1.0}
INGEST_ARGS=${INGEST_ARGS:-}
mkdir -p "$OUT"
. bench/gpu_common.sh
G=${G:-build/gpuenc}
gpu_unpack_if bench_serve lazy-mkmodel lazyingest || exit 1
if [ ! -s "$PAPER_CORPUS" ]; then
    echo "no paper corpus at $PAPER_CORPUS: make it on the development machine with"
    echo "  sh bench/synthetic_corpus.sh $PAPER_CORPUS"
    exit 2
fi
st=0
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f "$T/m8b.gguf" ] || make_8b "$T/m8b.gguf" > /dev/null || exit 1
echo "model ready: $(( $(date +%s) - start )) s"
: > "$OUT/serve.jsonl"
serial=""
[ "$SERIAL" = 1 ] || serial=--no-serial
# variant NAME CORPUS RATES ALPHA INGEST-OPTIONS...: ingest CORPUS with --gpu, then one bench_serve run
variant() {
    name=$1 corpus=$2 rates=$3 alpha=$4
    shift 4
    rm -rf "$T/store-$name"
    t0=$(date +%s)
    "$B/lazyingest" --gpu --quiet --json "$@" $INGEST_ARGS --model "$T/m8b.gguf" --store "$T/store-$name" "$corpus" \
        > "$OUT/ingest-$name.json" 2> "$OUT/ingest-$name.err" || { cat "$OUT/ingest-$name.err"; return 1; }
    echo "== $name: $corpus ingested in $(( $(date +%s) - t0 )) s; modes $MODES, rates $rates, concurrency $CONC"
    { "$B/bench_serve" --store "$T/store-$name" --model "$T/m8b.gguf" --corpus "$corpus" --gpu --setup a \
        --k "$K" --alpha "$alpha" --question-tokens "$QTOK" --max-tokens "$MAX_TOKENS" --mode "$MODES" \
        --rates "$rates" --rate-seconds "$RATE_SECONDS" --concurrency "$CONC" --requests "$REQUESTS" \
        --idle "$IDLE" --warmup "$WARMUP" --gpu-cache-bytes "$GPU_CACHE" --host-cache-bytes "$HOST_CACHE" \
        --preload "$PRELOAD" --gpu-seq-tokens "$SEQ" $serial --label "$name" --json "$OUT/serve.jsonl" \
        2> "$OUT/bench-$name.err"; echo $? > "$OUT/rc-$name"; } | tee "$OUT/$name.txt"
    rc=$(cat "$OUT/rc-$name"); rm -f "$OUT/rc-$name"
    grep -v '^$' "$OUT/bench-$name.err" | head -20
    { echo "== $name"; grep -E '^(saturation|p99 TTFT)' "$OUT/$name.txt"; } >> "$OUT/summary.txt"
    rm -rf "$T/store-$name"
    echo "== $name done: $(( $(date +%s) - t0 )) s"
    return $rc
}
: > "$OUT/summary.txt"
# the paper's documents are 2,056 tokens with their header: stored whole (one id, one document)
variant paper "$PAPER_CORPUS" "$RATES" "$ALPHA" --max-doc-tokens 4096 || st=1
if [ "$REAL" = 1 ]; then
    variant real "$REAL_CORPUS" "$REAL_RATES" "$REAL_ALPHA" || st=1
fi
cat "$OUT/summary.txt"
echo "total $(( $(date +%s) - start )) s; JSON lines: $OUT/serve.jsonl"
exit $st

#!/bin/sh
# gpu_serve_gpus.sh - on the GPU machine: serving on several GPU engines at Llama-3.1-8B's shape
# (random weights, made by make_8b, bench/gpu_common.sh) on the paper's setup (bench_serve
# --setup a over the 100 synthetic documents of 2,048 tokens, as bench/gpu_serve_paper.sh), lazy
# mode, in-process (bench/bench_serve.c --gpus: an engine per listed device behind lazyserve's
# router, serve/router.h; no HTTP). Runs, each over the same request stream and arrival times:
#   one      --gpus 0, GPU_CACHE per engine: the one-GPU baseline (throughput, hit rate)
#   sum-N    --gpus 0, N x GPU_CACHE: one GPU holding the sum of N engines' budgets (the hit-rate
#            reference of N engines)
#   0,0      --gpus 0,0, GPU_CACHE each: two engines on one GPU (the routing and the aggregate hit
#            rate; throughput is not expected to double on one device)
#   all      --gpus all, GPU_CACHE each, when more than one GPU is visible (N of them)
# Each run: a warm-up, Poisson arrivals at RATES and a closed loop at CONC x engines; every row
# also gives each engine's requests and GPU-tier hit rate and the aggregate (bench_serve's
# "per_engine" and "hit_rate"). The summary states the two scale-out figures: the
# saturation throughput of N engines over N x one's (want >= 0.9), and the aggregate GPU hit rate
# of N engines over sum-N's (want >= 0.9), for 0,0 (N = 2, hit rate only) and all.
# Usage (repo root, GPU machine): sh bench/gpu_serve_gpus.sh OUTDIR
#   with build/cuda/{lazy-mkmodel,lazyingest,bench_serve} ('make cuda'), or the same binaries
#   gzipped as ${G:-build/gpuenc}/NAME.gz (bench/gpu_common.sh) or xz-packed as NAME.xz, and the
#   corpus PAPER_CORPUS (default $W/paper_corpus.jsonl, W default build/gpuenc), made on the
#   development machine by 'sh bench/synthetic_corpus.sh build/gpuenc/paper_corpus.jsonl'.
# Writes OUTDIR/serve.jsonl (a JSON line a run, label the run's name), OUTDIR/NAME.txt (the
# tables) and OUTDIR/summary.txt.
# Knobs (environment): RUNS (default "one sum-2 0,0", plus "sum-N all" with N > 1 GPUs visible)
#   RATES=4,inf CONC=32 (a closed loop of CONC clients per engine) REQUESTS=96 WARMUP=16 IDLE=0
#   K=5 ALPHA=2.1 QTOK=32 MAX_TOKENS=16 GPU_CACHE=4G (a tier smaller than the 100 documents' 33 GB
#   at 8B, so that hit rates differ) HOST_CACHE=32G PRELOAD=all SEQ=2048 INGEST_ARGS=.
#   Needs about 36 GB under TMPDIR (default /tmp): the model 15 GB, the store about 18 GB.
# Estimated device time (bench/RESULTS.md's 8B figures): the model 30-45 s, ingest 40 s, each run
#   about 40-60 s (the weights uploaded per engine: about 5 s each, the preload, 96-request runs
#   at 4/s and saturation); 4 runs on one GPU about 4 minutes, 6 with several GPUs about 6.
set -u
OUT=${1:?OUTDIR}
T=${TMPDIR:-/tmp}
B=${B:-build/cuda}
W=${W:-build/gpuenc}
PAPER_CORPUS=${PAPER_CORPUS:-$W/paper_corpus.jsonl}
RATES=${RATES:-4,inf}
CONC=${CONC:-32}
REQUESTS=${REQUESTS:-96}
WARMUP=${WARMUP:-16}
IDLE=${IDLE:-0}
K=${K:-5}
ALPHA=${ALPHA:-2.1}
QTOK=${QTOK:-32}
MAX_TOKENS=${MAX_TOKENS:-16}
GPU_CACHE=${GPU_CACHE:-4G}
HOST_CACHE=${HOST_CACHE:-32G}
PRELOAD=${PRELOAD:-all}
SEQ=${SEQ:-2048}
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
n_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
runs=${RUNS:-"one sum-2 0,0"}
if [ -z "${RUNS:-}" ] && [ "${n_gpus:-0}" -gt 1 ]; then runs="$runs sum-$n_gpus all"; fi
st=0
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
echo "visible GPUs: ${n_gpus:-0}; runs: $runs" | tee "$OUT/summary.txt"
[ -f "$T/m8b.gguf" ] || make_8b "$T/m8b.gguf" > /dev/null || exit 1
echo "model ready: $(( $(date +%s) - start )) s"
rm -rf "$T/store-gpus"
# the paper's documents are 2,056 tokens with their header: stored whole (one id, one document)
"$B/lazyingest" --gpu --quiet --json --max-doc-tokens 4096 $INGEST_ARGS --model "$T/m8b.gguf" \
    --store "$T/store-gpus" "$PAPER_CORPUS" > "$OUT/ingest.json" 2> "$OUT/ingest.err" || { cat "$OUT/ingest.err"; exit 1; }
echo "store ready: $(( $(date +%s) - start )) s"
: > "$OUT/serve.jsonl"
# cache_bytes SIZE N: N x SIZE in bytes (SIZE as bench_serve takes it: 4G, 512M, bytes)
cache_bytes() {
    awk -v s="$1" -v n="$2" 'BEGIN { m = 1; u = toupper(substr(s, length(s)));
        if (u == "K") m = 1024; else if (u == "M") m = 1048576; else if (u == "G") m = 1073741824;
        else if (u == "T") m = 1099511627776; if (m > 1) s = substr(s, 1, length(s) - 1);
        printf "%.0f", s * m * n }'
}
for run in $runs; do
    case $run in
    one) gpus=0; cache=$GPU_CACHE; n=1 ;;
    sum-*) gpus=0; n=${run#sum-}; cache=$(cache_bytes "$GPU_CACHE" "$n"); n=1 ;;
    all) gpus=all; cache=$GPU_CACHE; n=${n_gpus:-1} ;;
    *) gpus=$run; cache=$GPU_CACHE; n=$(echo "$run" | tr ',' '\n' | grep -c .) ;;
    esac
    name=gpus-$(echo "$run" | tr ',' '_')
    t0=$(date +%s)
    echo "== $run: --gpus $gpus, --gpu-cache-bytes $cache per engine, closed loop of $(( CONC * n ))"
    { "$B/bench_serve" --store "$T/store-gpus" --model "$T/m8b.gguf" --corpus "$PAPER_CORPUS" --gpus "$gpus" \
        --setup a --k "$K" --alpha "$ALPHA" --question-tokens "$QTOK" --max-tokens "$MAX_TOKENS" --mode lazy \
        --rates "$RATES" --concurrency "$(( CONC * n ))" --max-running "$CONC" --requests "$REQUESTS" \
        --idle "$IDLE" --warmup "$WARMUP" --gpu-cache-bytes "$cache" --host-cache-bytes "$HOST_CACHE" \
        --preload "$PRELOAD" --gpu-seq-tokens "$SEQ" --label "$run" --json "$OUT/serve.jsonl" \
        2> "$OUT/bench-$name.err"; echo $? > "$OUT/rc-$name"; } | tee "$OUT/$name.txt"
    rc=$(cat "$OUT/rc-$name"); rm -f "$OUT/rc-$name"
    [ "$rc" = 0 ] || st=1
    grep -v '^$' "$OUT/bench-$name.err" | head -20
    echo "== $run done: $(( $(date +%s) - t0 )) s"
done
rm -rf "$T/store-gpus"
# the figures: per label, the best output tokens/s of rate inf and the closed loop, and the
# aggregate GPU hit rate over the saturation rows (lookups summed)
python3 - "$OUT/serve.jsonl" "$n_gpus" >> "$OUT/summary.txt" << 'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
n_gpus = int(sys.argv[2] or 0)
best, hits = {}, {}
for r in rows:
    if r["run"] not in ("rate", "concurrency"):
        continue
    lab = r["label"]
    if r["run"] == "concurrency" or r.get("rate") == "inf":
        best[lab] = max(best.get(lab, 0.0), r["out_tok_s"])
    h, l = hits.get(lab, (0, 0))
    for e in r.get("per_engine", []):
        h += e["gpu_hits"]
        l += e["gpu_hits"] + e["gpu_misses"]
    hits[lab] = (h, l)
rate = lambda lab: hits[lab][0] / hits[lab][1] if lab in hits and hits[lab][1] else float("nan")
for lab in best:
    print("%-8s saturation %8.1f out tok/s  GPU hit rate %5.1f%% (%d lookups)" % (lab, best[lab], 100 * rate(lab),
          hits.get(lab, (0, 0))[1]))
def verdict(name, got, want):
    print("%-44s %6.3f (want >= 0.9: %s)" % (name, got / want if want else float("nan"),
          "yes" if want and got / want >= 0.9 else "NO"))
if "one" in best:
    if "0,0" in best:
        print("0,0: throughput over one GPU's (one device: not expected to double) %.3f" % (best["0,0"] / best["one"]))
    if "all" in best and n_gpus > 1:
        verdict("all: throughput over %d x one GPU's" % n_gpus, best["all"], n_gpus * best["one"])
if "0,0" in hits and "sum-2" in hits:
    verdict("0,0: aggregate hit rate over one GPU of 2 budgets", rate("0,0"), rate("sum-2"))
if "all" in hits and ("sum-%d" % n_gpus) in hits:
    verdict("all: aggregate hit rate over one GPU of %d budgets" % n_gpus, rate("all"), rate("sum-%d" % n_gpus))
EOF
cat "$OUT/summary.txt"
echo "total $(( $(date +%s) - start )) s; JSON lines: $OUT/serve.jsonl"
exit $st

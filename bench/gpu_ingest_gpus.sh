#!/bin/sh
# gpu_ingest_gpus.sh - on the GPU machine: lazyingest --gpus at Llama-3.1-8B's shape (random
# weights, lazy-mkmodel as bench/gpu_8b.sh), one encoder pipeline per listed GPU: --gpus 0 (the
# baseline, one pipeline), --gpus 0,0 (two pipelines sharing GPU 0: what the deal and the one
# writer cost, and what a second engine on one device gains), and --gpus all when more than
# one GPU is visible. Each run: wall seconds and tokens/s of wall, encode tokens/s, load,
# forward, pack and commit seconds, then each pipeline's documents, tokens (share of the run's),
# forward, packing and busy seconds (the JSON summary's pipeline_* arrays): its balance. A batch
# holds N x 8192 tokens with N pipelines (lazyingest's default), so each pipeline gets about a
# one-pipeline batch a commit. Stores are removed after each run.
# Usage (repo root, GPU machine): sh bench/gpu_ingest_gpus.sh OUTDIR
#   with ${G:-build/gpuenc}/{lazyingest,lazy-mkmodel}.xz (or .gz) and ${W:-build/gpuenc}/corpus.jsonl
#   (bench_workload --emit-corpus); RUNS (default "0 0,0", plus "all" with several GPUs) picks
#   the --gpus lists; DTYPE (default bf16) the stored KV dtype.
set -u
OUT=${1:?OUTDIR}
T=${TMPDIR:-/tmp}
W=${W:-build/gpuenc}
mkdir -p "$OUT" build/gpu-run
. bench/gpu_common.sh
gpu_unpack lazyingest lazy-mkmodel || exit 1
[ -f "$T/m8b.gguf" ] || make_8b "$T/m8b.gguf" > /dev/null || exit 1
n_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
runs=${RUNS:-"0 0,0"}
if [ -z "${RUNS:-}" ] && [ "${n_gpus:-0}" -gt 1 ]; then runs="$runs all"; fi
echo "visible GPUs: ${n_gpus:-0}; runs: $runs" | tee "$OUT/summary.txt"
st=0
for list in $runs; do
    name=gpus-$(echo "$list" | tr ',' '_')
    rm -rf "$T/s-gpus"
    "$B/lazyingest" --gpus "$list" --quiet --json --max-doc-tokens 4096 --kv-dtype "${DTYPE:-bf16}" \
        --model "$T/m8b.gguf" --store "$T/s-gpus" "$W/corpus.jsonl" > "$OUT/$name.json" 2> "$OUT/$name.err" || st=1
    python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
t = j['tokens_encoded']
print('--gpus %-8s wall %6.2f s  %7.0f tok/s of wall  encode %7.0f tok/s  load %5.2f  forward %6.2f  pack %6.2f  commit %6.2f  tokens %d' % (
    sys.argv[2], j['wall_s'], t / j['wall_s'], j['tokens_per_s'], j['load_s'], j['forward_s'], j['pack_s'], j['commit_s'], t))
for i in range(j.get('pipelines', 0)):
    tk = j['pipeline_tokens'][i]
    print('    pipeline %d (%s, %d threads): %5d documents  %8d tokens (%5.1f%%)  forward %6.2f s  pack %6.2f s  busy %6.2f s' % (
        i, j['pipeline_devices'][i], j['pipeline_threads'][i], j['pipeline_documents'][i], tk, 100.0 * tk / max(t, 1),
        j['pipeline_forward_s'][i], j['pipeline_pack_s'][i], j['pipeline_busy_s'][i]))" "$OUT/$name.json" "$list" \
        | tee -a "$OUT/summary.txt" || { st=1; tail -n 3 "$OUT/$name.err"; }
    rm -rf "$T/s-gpus"
done
exit $st

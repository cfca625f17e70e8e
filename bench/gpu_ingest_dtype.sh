#!/bin/sh
# gpu_ingest_dtype.sh - on the GPU machine: lazyingest --gpu at Llama-3.1-8B's shape (random
# weights, lazy-mkmodel as bench/gpu_8b.sh) by stored KV dtype, in one run: the real-passage
# corpus in bf16 widened on the host (LAZY_INGEST_PLANES=0: the path before the device's
# planes), bf16 from the device's bf16 planes, and fp8 quantised on the device; then fp8 on a
# corpus of >= 500,000 tokens. Each run: wall, load, forward, pack and commit seconds, encode
# tokens/s, stored bytes a token (the JSON summary of lazyingest --json); and the disk's
# durable write rate (dd, 4 GiB, fdatasync), the bound of the commits. Stores are removed after
# each run (an 8B bf16 store of 1,000 passages is 15 GB).
# Usage (repo root, GPU machine): sh bench/gpu_ingest_dtype.sh OUTDIR
#   with ${G:-build/gpuenc}/{lazyingest,lazy-mkmodel}.xz (or .gz) and ${W:-build/gpuenc}/corpus.jsonl
#   (bench_workload --emit-corpus) and big.jsonl (python3 bench/synthetic_corpus.py VOCAB 250
#   2048 big.jsonl); RUNS (default "bf16-widened bf16 fp8 fp8-big") picks the runs; fp8-pass8k is
#   fp8 in passes of 8,192 tokens (LAZY_INGEST_GPU_PASS; the default is 2,048), fp8-big-pass8k
#   the big corpus so. Each line also gives the passes' driver: seconds
#   waiting for a pass to compute and be read back, and for the pass before to be fetched.
set -u
OUT=${1:?OUTDIR}
T=${TMPDIR:-/tmp}
W=${W:-build/gpuenc}
mkdir -p "$OUT" build/gpu-run
. bench/gpu_common.sh
gpu_unpack lazyingest lazy-mkmodel || exit 1
[ -f "$T/m8b.gguf" ] || make_8b "$T/m8b.gguf" > /dev/null || exit 1
dd if=/dev/zero of="$T/dd.bin" bs=16M count=256 conv=fdatasync 2>&1 | tail -n 1 | tee "$OUT/disk.txt"
rm -f "$T/dd.bin"
st=0
for run in ${RUNS:-bf16-widened bf16 fp8 fp8-big}; do
    corpus=$W/corpus.jsonl planes=1 dtype=bf16 pass=2048
    case $run in
        fp8-pass8k) dtype=fp8 pass=8192 ;;
        bf16-widened) planes=0 ;;
        fp8) dtype=fp8 ;;
        fp8-big) dtype=fp8 corpus=$W/big.jsonl ;;
        fp8-big-pass8k) dtype=fp8 pass=8192 corpus=$W/big.jsonl ;;
    esac
    rm -rf "$T/s-dtype"
    LAZY_INGEST_PLANES=$planes LAZY_INGEST_GPU_PASS=$pass "$B/lazyingest" --gpu --quiet --json --max-doc-tokens 4096 --kv-dtype "$dtype" ${INGEST_ARGS:-} \
        --model "$T/m8b.gguf" --store "$T/s-dtype" "$corpus" > "$OUT/$run.json" 2> "$OUT/$run.err" || st=1
    python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
t = j['tokens_encoded']
print('%-13s wall %6.2f s  load %5.2f  forward %6.2f  pack %6.2f  commit %6.2f  %7.0f tok/s of wall  encode %7.0f tok/s  tokens %d  stored %.0f B a token  from planes %d of %d  passes %d  driver: finish %.2f s, waiting for fetches %.2f s' % (
    sys.argv[2], j['wall_s'], j['load_s'], j['forward_s'], j['pack_s'], j['commit_s'], t / j['wall_s'], j['tokens_per_s'], t,
    j['stored_bytes'] / max(t, 1), j.get('backend_planes', 0), j.get('backend_docs', 0), j.get('passes', 0),
    j.get('device_finish_s', -1), j.get('device_wait_fetch_s', -1)))" "$OUT/$run.json" "$run" \
        | tee -a "$OUT/summary.txt" || { st=1; tail -n 3 "$OUT/$run.err"; }
    rm -rf "$T/s-dtype"
done
exit $st

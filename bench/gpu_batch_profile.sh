#!/bin/sh
# gpu_batch_profile.sh - on the GPU machine: where a batched decode step's time goes at
# Llama-3.1-8B's shape (random weights, bf16, the demo corpus ingested with --gpu). C requests
# at once through lazyserve's scheduler in-process (bench_serve --concurrency C, no serial
# baseline): first plainly (TPOT: the step time), then under Nsight Compute, which times every
# kernel of a window of steps on its own (gpu__time_duration; clocks and caches left alone).
# bench/decode_kernels.py sums the window by kernel and per step (a step starts at the block
# words of lz_op_batch_words, a batched step's first kernel); TPOT minus the kernels' sum is
# what the host and the launches between them cost.
# Usage (repo root, GPU machine): G=dir sh bench/gpu_batch_profile.sh OUTDIR
#   with $G/{lazyingest,bench_serve,lazy-mkmodel}.xz (or .gz). Knobs: CONC=8 (the batch),
#   MAX_TOKENS=48, SKIP=3000 kernels before the window (the prefill's are fewer), COUNT=3000,
#   NCU=0 skips the profile.
set -u
OUT=${1:?OUTDIR}
T=${TMPDIR:-/tmp}
C=${CONC:-8}
M=${MAX_TOKENS:-48}
mkdir -p "$OUT"
. bench/gpu_common.sh
gpu_unpack lazyingest bench_serve lazy-mkmodel || exit 1
[ -f "$T/m8b.gguf" ] || make_8b "$T/m8b.gguf" > /dev/null || exit 1
rm -rf "$T/storebp"
"$B/lazyingest" --gpu --quiet --model "$T/m8b.gguf" --store "$T/storebp" datasets/demo/corpus.jsonl > "$OUT/ingest.log" 2>&1 ||
    { cat "$OUT/ingest.log"; exit 1; }
run() {
    "$B/bench_serve" --store "$T/storebp" --model "$T/m8b.gguf" --gpu --no-serial --concurrency "$C" --requests "$C" \
        --warmup 0 --idle 0 --max-tokens "$M" --max-running "$C" "$@"
}
run --json "$OUT/plain.jsonl" > "$OUT/plain.txt" 2>&1
cat "$OUT/plain.txt"
[ "${NCU:-1}" = 0 ] && exit 0
ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    --launch-skip "${SKIP:-3000}" --launch-count "${COUNT:-3000}" \
    "$B/bench_serve" --store "$T/storebp" --model "$T/m8b.gguf" --gpu --no-serial --concurrency "$C" --requests "$C" \
    --warmup 0 --idle 0 --max-tokens "$M" --max-running "$C" > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
echo "ncu exit $?; $(wc -l < "$OUT/ncu.csv") lines"
python3 bench/decode_kernels.py --step-start batch_words "$OUT/ncu.csv" | tee "$OUT/kernels.txt"

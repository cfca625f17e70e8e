#!/bin/sh
# gpu_decode_profile.sh - on the GPU machine: where a decode step's time goes at
# Llama-3.1-8B's shape. Writes the random-weight 8B model (lazy-mkmodel, as
# bench/gpu_8b.sh), ingests the demo corpus with --gpu, then answers one question
# twice: plainly (decode tokens/s, the step time) and under Nsight Compute, which
# times every kernel of a window of decode steps on its own (gpu__time_duration,
# clocks and caches left alone). bench/decode_kernels.py sums the window by kernel
# and per step; the step time minus the kernels' sum is what the launches between
# them cost.
# Usage (repo root, GPU machine): G=dir sh bench/gpu_decode_profile.sh OUTDIR
#   with $G/{lazyingest,lazyquery,lazy-mkmodel}.xz (or .gz); N tokens (default 64);
#   SKIP kernels before the window (default 6000; the prompt's are fewer), COUNT in it (default 1200);
#   CFGS: settings to compare, environment assignments (see below); NCU=0 skips the profile.
set -u
OUT=${1:?OUTDIR}
T=${TMPDIR:-/tmp}
N=${N:-64}
mkdir -p "$OUT" build/gpu-run
. bench/gpu_common.sh
gpu_unpack lazyingest lazyquery lazy-mkmodel || exit 1
make_8b "$T/m8b.gguf" > /dev/null || exit 1
rm -rf "$T/store8b"
"$B/lazyingest" --gpu --model "$T/m8b.gguf" --store "$T/store8b" datasets/demo/corpus.jsonl > "$OUT/ingest.log" 2>&1 || exit 1
Q="In which industry does Droex Foods operate?"
printf '%s\n%s\n' "$Q" "$Q" > "$T/q2.txt"
# the decode rate under each setting: CFGS entries are environment assignments for lazyquery
# (LAZY_GPU_GEMV=bps,silu_bps: lz_gemv_tune; LAZY_GPU_DECODE=prefill: the decode step's
# attention by lz_prefill_lazy), "default" none
for cfg in ${CFGS:-default}; do
    set --
    [ "$cfg" != default ] && set -- "$cfg"
    for r in 1 2; do
        env "$@" "$B/lazyquery" --gpu --model "$T/m8b.gguf" --store "$T/store8b" --top-k 10 -n "$N" --no-stats --json \
            < "$T/q2.txt" 2> /dev/null | grep -o '"ttft_s":[0-9.e-]*\|"decode_tok_s":[0-9.]*' | paste -d ' ' - - |
            sed "s/^/$cfg /"
    done
done | tee "$OUT/plain.txt"
[ "${NCU:-1}" = 0 ] && { rm -rf "$T/store8b" "$T/m8b.gguf"; exit 0; }
ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    --launch-skip "${SKIP:-6000}" --launch-count "${COUNT:-1200}" \
    "$B/lazyquery" --gpu --model "$T/m8b.gguf" --store "$T/store8b" --top-k 10 -n "$N" --no-stats \
    "$Q" > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
echo "ncu exit $?; $(wc -l < "$OUT/ncu.csv") lines"
python3 bench/decode_kernels.py "$OUT/ncu.csv" | tee "$OUT/kernels.txt"
rm -rf "$T/store8b" "$T/m8b.gguf"

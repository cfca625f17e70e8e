#!/bin/sh
# ingest_gpu.sh - on the GPU machine: the forward pass's small kernels against
# their CPU references (tests/cuda/test_ops.cu), the GPU ingest and query
# passes against the CPU engine (tests/cuda/test_llama_cuda.cu, then its
# --bench), and the demo
# corpus ingested twice with the embedded model, on the CPU and with --gpu,
# each store checked and asked the demo's questions, and the questions
# answered on the GPU (lazyquery --gpu).
# Usage (repo root, GPU machine): sh bench/ingest_gpu.sh OUTDIR
#   with ${G:-build/gpuenc}/{test_ops,test_llama_cuda,lazyingest,lazyquery}.xz (or .gz) built
#   here by 'make cuda' and xz, unpacked by bench/gpu_common.sh (bench/RESULTS.md, "The product
#   at Llama-3.1-8B's shape (GPU)").
set -u
OUT=${1:?OUTDIR}
mkdir -p "$OUT"
. bench/gpu_common.sh
gpu_unpack test_ops test_llama_cuda lazyingest lazyquery || exit 1
st=0
# ask STORE [lazyquery options]: the demo's three questions, one answer a line
ask() {
    store=$1; shift
    for q in "In which industry does Droex Foods operate?" "What is the birthplace of Cima Elosani?" \
             "Which organisation is older, Raio Works or Rairreil Works?"; do
        "$B/lazyquery" --model models/default.gguf --store "$store" --top-k 3 -n 32 --no-stats "$@" "$q" 2>&1
    done
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
"$B/test_ops" > "$OUT/test_ops.log" 2>&1 || st=1
tail -1 "$OUT/test_ops.log"
"$B/test_llama_cuda" --bench > "$OUT/test_llama_cuda.log" 2>&1 || st=1
tail -2 "$OUT/test_llama_cuda.log"
for mode in cpu gpu; do
    flag=; [ "$mode" = gpu ] && flag=--gpu
    rm -rf "$OUT/store-$mode"
    "$B/lazyingest" $flag --model models/default.gguf --store "$OUT/store-$mode" datasets/demo/corpus.jsonl \
        > "$OUT/ingest-$mode.log" 2>&1 || st=1
    echo "== ingest $mode"; grep -E "tokens:|GPU:|store:" "$OUT/ingest-$mode.log"
    "$B/lazyingest" --check --store "$OUT/store-$mode" --model models/default.gguf > "$OUT/check-$mode.log" 2>&1 || st=1
    tail -1 "$OUT/check-$mode.log"
    ask "$OUT/store-$mode" -q > "$OUT/answers-$mode.txt"
    echo "answers ($mode):"; cat "$OUT/answers-$mode.txt"
done
cmp -s "$OUT/answers-cpu.txt" "$OUT/answers-gpu.txt" && echo "answers: identical" || echo "answers: differ"
# Ada-KV at ingest (the default snapkv window, half the keys kept): the window's queries captured on the GPU
for mode in cpu gpu; do
    flag=; [ "$mode" = gpu ] && flag=--gpu
    rm -rf "$OUT/store-ada-$mode"
    "$B/lazyingest" $flag --kv-policy ada-snapkv --kv-budget 0.5 --model models/default.gguf --store "$OUT/store-ada-$mode" \
        datasets/demo/corpus.jsonl > "$OUT/ingest-ada-$mode.log" 2>&1 || st=1
    echo "== ingest ada-snapkv $mode"; grep -E "tokens:|GPU:|kv eviction" "$OUT/ingest-ada-$mode.log"
    "$B/lazyingest" --check --store "$OUT/store-ada-$mode" --model models/default.gguf 2>&1 | tail -1
    ask "$OUT/store-ada-$mode" -q > "$OUT/answers-ada-$mode.txt"
    echo "answers (ada-snapkv, $mode):"; cat "$OUT/answers-ada-$mode.txt"
done
# the questions answered on the GPU (lazyquery --gpu) from the CPU-ingested store, with timings
ask "$OUT/store-cpu" --gpu --json > "$OUT/answers-gpu-query.jsonl" || st=1
echo "answers (lazyquery --gpu, CPU store):"; grep -o '"answer":"[^"]*"' "$OUT/answers-gpu-query.jsonl"
grep -o '"answer":"[^"]*"' "$OUT/answers-gpu-query.jsonl" | sed 's/"answer":"//; s/"$//' > "$OUT/answers-gq.txt"
cmp -s "$OUT/answers-cpu.txt" "$OUT/answers-gq.txt" && echo "GPU query answers: identical to the CPU's" || echo "GPU query answers: differ"
head -c 600 "$OUT/answers-gpu-query.jsonl"; echo
exit $st

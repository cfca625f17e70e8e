#!/bin/sh
# gpu_resident_check.sh - on the GPU machine: lazyquery --gpu with the CPU's
# document cache large (1G) and too small for any document (1 byte), the demo's
# three questions asked twice in one process: the answers must be the same,
# and with the tiny CPU cache the second round must load nothing (the GPU still
# holds the documents: lz_query_backend.resident); once with cold documents loaded
# from the store (--cold load), once recomputed on the GPU (--cold recompute); then
# with both budgets at one byte, every question cold.
# Usage (repo root, GPU machine): sh bench/gpu_resident_check.sh OUTDIR
#   with ${G:-build/gpuenc}/{lazyingest,lazyquery}.xz (or .gz) built here ('make cuda', xz),
#   unpacked by bench/gpu_common.sh.
set -u
OUT=$1
mkdir -p "$OUT"
. bench/gpu_common.sh
gpu_unpack lazyingest lazyquery || exit 1
rm -rf /tmp/sq
$B/lazyingest --gpu --quiet --model models/default.gguf --store /tmp/sq datasets/demo/corpus.jsonl || exit 1
printf '%s\n' "In which industry does Droex Foods operate?" "What is the birthplace of Cima Elosani?" "Which organisation is older, Raio Works or Rairreil Works?" > /tmp/q3.txt
cat /tmp/q3.txt /tmp/q3.txt > /tmp/q6.txt
for cold in load recompute; do
for cb in 1G 1 1g1; do
  budget="--cache-bytes $cb"
  [ $cb = 1g1 ] && budget="--cache-bytes 1 --gpu-cache-bytes 1" # every question cold
  echo "== --cold $cold $budget"
  $B/lazyquery --gpu --cold $cold --model models/default.gguf --store /tmp/sq --top-k 10 -n 16 --no-stats --no-preload --json $budget < /tmp/q6.txt > $OUT/q$cold$cb.jsonl || echo "rc $?"
  grep -o '"answer":"[^"]*"' $OUT/q$cold$cb.jsonl | tr '\n' ' '; echo
  grep -o '"cache":{"hits":[0-9]*,"misses":[0-9]*,"recomputed":[0-9]*,"bytes_loaded":[0-9]*' $OUT/q$cold$cb.jsonl | tr '\n' ' '; echo
  grep -o '"kv_load_s":[0-9.e-]*,"recompute_s":[0-9.e-]*,"ttft_s":[0-9.e-]*' $OUT/q$cold$cb.jsonl | tr '\n' ' '; echo
done
done

#!/bin/sh
# gpu_fp8_resident.sh - on the GPU machine: the question's own cost with an fp8 store against a bf16
# store at Llama-3.1-8B's shape (random weights), every document resident in GPU memory, so that
# no copy or store read is timed: the demo corpus ingested both ways (lazyingest --gpu --kv-dtype
# bf16 / fp8), its 12 questions over their 10 context documents asked 4 times by one lazyquery
# --gpu process a store (--gpu-cache-bytes 16G --preload all -n 16); the first 12 answers (the
# documents' first use) left out: TTFT mean / p50 / min and decode tokens/s of the other 36.
# Usage (repo root, GPU machine): sh bench/gpu_fp8_resident.sh OUTDIR
#   with ${G:-build/gpuenc}/{lazyingest,lazyquery,lazy-mkmodel}.gz (bench/gpu_common.sh). About
#   80 s with the model to write (15 GB under TMPDIR, default /tmp).
set -u
OUT=${1:?OUTDIR}
T=${TMPDIR:-/tmp}
mkdir -p "$OUT"
. bench/gpu_common.sh
gpu_unpack lazyingest lazyquery lazy-mkmodel || exit 1
[ -f "$T/m8b.gguf" ] || make_8b "$T/m8b.gguf" || exit 1
python3 -c "
import json
q = json.load(open('datasets/demo/questions.json'))
with open('$OUT/questions.jsonl', 'w') as f:
    for r in range(4):
        for x in q:
            f.write(json.dumps({'id': x['_id'] + '-' + str(r), 'question': x['question'], 'docs': x['context_ids']}) + '\n')
"
st=0
for dt in bf16 fp8; do
    rm -rf "$T/sres$dt"
    "$B/lazyingest" --gpu --quiet --kv-dtype "$dt" --model "$T/m8b.gguf" --store "$T/sres$dt" datasets/demo/corpus.jsonl \
        > "$OUT/ingest-$dt.log" 2>&1 || { echo "ingest $dt failed"; st=1; continue; }
    "$B/lazyquery" --gpu --json -n 16 --gpu-cache-bytes 16G --preload all --no-stats --model "$T/m8b.gguf" \
        --store "$T/sres$dt" --questions "$OUT/questions.jsonl" > "$OUT/r$dt.jsonl" 2> "$OUT/r$dt.err" || st=1
    python3 -c "
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][12:]
t = sorted(x['timings']['ttft_s'] * 1e3 for x in r)
d = [x['timings']['decode_tok_s'] for x in r]
print('%s: %d resident answers, TTFT mean %.2f p50 %.2f min %.2f ms, decode %.1f tokens/s' %
      (sys.argv[2], len(r), sum(t) / len(t), t[len(t) // 2], t[0], sum(d) / len(d)))
" "$OUT/r$dt.jsonl" "$dt" | tee -a "$OUT/summary.txt"
    rm -rf "$T/sres$dt"
done
exit $st

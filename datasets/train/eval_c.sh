#!/bin/sh
# eval_c.sh - exact match of a QA model measured by OUR C tools (lazyingest +
# lazyquery, CPU) on the held-out test split: gold passages among 9
# distractors, unseen entities, lazy and full modes, EM/F1 per type.
#   sh datasets/train/eval_c.sh MODEL.gguf OUTDIR [PER_TYPE]
# Writes OUTDIR/{store/, pred_lazy.jsonl, pred_full.jsonl, metrics.json, times.txt}.
# The split (build/qa/test-PER_TYPE, seed 3, 40 worlds) is generated when missing.
# MODES="lazy full" by default; THREADS passes --threads to both tools; INGEST_ARGS: more
# lazyingest options (e.g. "--kv-dtype fp8", "--kv-policy ada-snapkv --kv-budget 0.2").
set -eu
MODEL=${1:?usage: eval_c.sh MODEL.gguf OUTDIR [PER_TYPE]}
OUTD=${2:?usage: eval_c.sh MODEL.gguf OUTDIR [PER_TYPE]}
PER_TYPE=${3:-200}
MODES=${MODES:-lazy full}
PY=${PYTHON:-python3}
BIN=${BIN:-build/bin}
SPLIT=build/qa/test-$PER_TYPE
mkdir -p "$OUTD"
if [ ! -f "$SPLIT/lazyquery.jsonl" ]; then
    "$PY" datasets/worldgen.py split --split test --seed 3 --worlds 40 --per-type "$PER_TYPE" --out "$SPLIT"
    "$PY" datasets/train/evaluate.py --questions "$SPLIT/questions.json" --to-lazyquery "$SPLIT/lazyquery.jsonl"
fi
T=${THREADS:+--threads $THREADS}
rm -rf "$OUTD/store"
: > "$OUTD/times.txt"
s=$(date +%s.%N)
"$BIN/lazyingest" --quiet $T ${INGEST_ARGS:-} -m "$MODEL" -s "$OUTD/store" "$SPLIT/corpus.jsonl"
echo "ingest $(awk "BEGIN{print $(date +%s.%N) - $s}") s" >> "$OUTD/times.txt"
PREDS=""
for m in $MODES; do
    s=$(date +%s.%N)
    "$BIN/lazyquery" --store "$OUTD/store" -m "$MODEL" $T --questions "$SPLIT/lazyquery.jsonl" \
        --json --mode "$m" --no-stats > "$OUTD/pred_$m.jsonl"
    echo "$m $(awk "BEGIN{print $(date +%s.%N) - $s}") s" >> "$OUTD/times.txt"
    PREDS="$PREDS --pred $m=$OUTD/pred_$m.jsonl"
done
cat "$OUTD/times.txt"
"$PY" datasets/train/evaluate.py --questions "$SPLIT/questions.json" $PREDS --json "$OUTD/metrics.json"

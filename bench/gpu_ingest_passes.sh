#!/bin/sh
# gpu_ingest_passes.sh - on the GPU machine: lazyingest --gpu with a batch's documents in
# multi-document passes (the default, LAZY_INGEST_GPU_PASS=2048 tokens) against one document
# a pass (LAZY_INGEST_GPU_PASS=0, taking turns on the device), in the same run: the embedded
# default model on the demo corpus, then a model of Llama-3.1-8B's shape (random weights,
# lazy-mkmodel as bench/gpu_8b.sh) on the demo corpus and on an 8x corpus (each document
# eight times, each copy's text made unique, so nothing is deduplicated). Prints the JSON
# summary's timings (wall, load, forward, pack, commit, encode tokens/s) and stored bytes of
# each run, and the demo's questions answered over each setting's 8B store (lazyquery --gpu),
# compared.
# Usage (repo root, GPU machine): G=dir sh bench/gpu_ingest_passes.sh OUTDIR
#   with $G/{lazyingest,lazyquery,lazy-mkmodel}.xz (or .gz) built here ('make cuda', 'make', xz or gzip);
#   CFGS: the settings compared (default "LAZY_INGEST_GPU_PASS=0 default"): environment
#   assignments, or options as --name=value; ROUNDS each (2); OPTS: lazyingest options of
#   every run (KV eviction: OPTS="--kv-policy ada-snapkv --kv-budget 0.5" CFGS="LAZY_INGEST_GPU_PASS=0
#   LAZY_INGEST_GPU_MASS=0 default" compares one document a pass, passes scored on the CPU,
#   and passes with the GPU's attention masses).
set -u
OUT=${1:?OUTDIR}
T=${TMPDIR:-/tmp}
CFGS=${CFGS:-LAZY_INGEST_GPU_PASS=0 default}
mkdir -p "$OUT" build/gpu-run
. bench/gpu_common.sh
gpu_unpack lazyingest lazyquery lazy-mkmodel || exit 1
st=0
# 8 copies of every document: ids and texts made unique
python3 - datasets/demo/corpus.jsonl "$T/corpus8.jsonl" << 'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
with open(sys.argv[2], "w") as f:
    for c in range(8):
        for r in rows:
            r2 = dict(r, id="%s-c%d" % (r["id"], c), text="%s (Copy %d of the record.)" % (r["text"], c))
            f.write(json.dumps(r2) + "\n")
EOF
# run NAME MODEL CORPUS CFG: one ingest into a fresh store $T/s-NAME, its summary line
run() {
    name=$1 model=$2 corpus=$3 cfg=$4
    set --
    opt=
    case $cfg in
        default) ;;
        --*) opt="${cfg%%=*} ${cfg#*=}" ;; # an option: --level=3 runs lazyingest --level 3
        *) set -- "$cfg" ;;
    esac
    rm -rf "$T/s-$name"
    env "$@" "$B/lazyingest" --gpu --json ${OPTS:-} $opt --model "$model" --store "$T/s-$name" "$corpus" > "$T/$name.json" \
        2> "$T/$name.err" || { st=1; tail -3 "$T/$name.err"; }
    python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
print('%-12s %-24s wall %6.2f s  load %5.2f  forward %5.2f  pack %5.2f  commit %5.2f  encode %8.0f tok/s  tokens %d  '
      'stored %d  passes %d (%d documents)  kept %.3f  scoring %.2f s (%d from GPU masses)' % (
    sys.argv[2], sys.argv[3], j['wall_s'], j['load_s'], j['forward_s'], j['pack_s'], j['commit_s'], j['tokens_per_s'],
    j['tokens_encoded'], j['stored_bytes'], j.get('passes', 0), j.get('pass_docs', 0), j.get('kv_kept_fraction', 1),
    j.get('kv_policy_s', 0), j.get('backend_masses', 0)))" "$T/$name.json" "$name" "$cfg" || st=1
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
i=0
for r in $(seq "${ROUNDS:-2}"); do
    for cfg in $CFGS; do
        i=$((i + 1))
        run "small-$i" models/default.gguf datasets/demo/corpus.jsonl "$cfg"
    done
done > "$OUT/small.txt"
cat "$OUT/small.txt"
make_8b "$T/m8b.gguf" > /dev/null || exit 1
printf '%s\n' "In which industry does Droex Foods operate?" "What is the birthplace of Cima Elosani?" \
    "Which organisation is older, Raio Works or Rairreil Works?" > "$T/q3.txt"
i=0
for r in $(seq "${ROUNDS:-2}"); do
    for cfg in $CFGS; do
        i=$((i + 1))
        run "demo8b-$i" "$T/m8b.gguf" datasets/demo/corpus.jsonl "$cfg"
        # the first round's stores answer the questions (then removed: 1.7 GB each)
        if [ "$r" = 1 ]; then
            "$B/lazyquery" --gpu --model "$T/m8b.gguf" --store "$T/s-demo8b-$i" --top-k 10 -n 32 --no-stats --json \
                < "$T/q3.txt" 2> /dev/null | grep -o '"answer":"[^"]*"' > "$T/answers-$cfg.txt"
        fi
        rm -rf "$T/s-demo8b-$i"
    done
done > "$OUT/demo8b.txt"
cat "$OUT/demo8b.txt"
set -- $CFGS
for cfg in "$@"; do
    cmp -s "$T/answers-$1.txt" "$T/answers-$cfg.txt" && echo "answers: $cfg identical to $1" ||
        { echo "answers: $cfg differs from $1"; paste -d '|' "$T/answers-$1.txt" "$T/answers-$cfg.txt"; }
done
i=0
for cfg in $CFGS; do
    i=$((i + 1))
    run "x8-8b-$i" "$T/m8b.gguf" "$T/corpus8.jsonl" "$cfg"
    rm -rf "$T/s-x8-8b-$i"
done > "$OUT/x8.txt"
cat "$OUT/x8.txt"
rm -rf "$T/m8b.gguf" "$T"/s-small-* "$T"/*.json "$T"/*.err "$T"/answers-*.txt
exit $st

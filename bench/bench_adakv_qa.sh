#!/bin/sh
# bench_adakv_qa.sh - KV eviction at ingest, measured on the trained QA model:
# exact match per question type (datasets/ test split, gold passages among
# distractors given by --docs, lazy mode) at budgets 100% (none), 50%, 20%, 10%
# for SnapKV, Ada-SnapKV, PyramidKV and Ada-PyramidKV, with bytes on disk per
# token, the share of keys kept, ingest time and the mean time to first token.
# Prints SKIP (exit 0) when the model is absent (it is trained on a GPU: datasets/README.md).
#
# usage: sh bench/bench_adakv_qa.sh [MODEL]       (default $LAZY_MODEL, else models/default.gguf)
# env:   PER_TYPE=100     questions per type (single, bridge, comparison)
#        WINDOWS="32 8"   observation windows to run (32 is the default; the
#                         test passages are 40-124 tokens, so with w = 32 the
#                         10% and 20% budgets both keep little more than the window);
#                         "probe" runs --kv-probe (the question cue as the window),
#                         "recon" runs --kv-reconstruct (the document re-read as the window),
#                         "self" runs --kv-self (every document token's own query),
#                         "learned" runs --kv-learned $SCORER (a fitted key-importance model;
#                         default models/default.kvlearn, the default model's)
#        POLICIES="snapkv ada-snapkv pyramidkv ada-pyramidkv"  BUDGETS="0.5 0.2 0.1"
#        PROBE_TEXT="Who ...?"  with WINDOWS=probe: --kv-probe-text (that question in the cue)
#        INGEST_ARGS="--kv-kernel 15"  more lazyingest options for every compressed run
#        ADA_ARGS="--kv-scope model"   more lazyingest options for the ada-* policies only
#        NONE=0 leaves out the uncompressed run (when another run already measured it)
#        MAX_NEW=64 (answer tokens; a comparison answered with a reasoning needs ~35)  THREADS=N  OUT=build/bench-adakv-qa  QA=build/qa/test  PYTHON=python3  LZ_BIN=build/bin
# The corpus ingested is the passages the asked questions place (gold and distractors).
# Output: $OUT/summary.md (the table; also printed) and per run ingest/pred/eval files.
set -e
MODEL=${1:-${LAZY_MODEL:-models/default.gguf}}
if [ ! -e "$MODEL" ]; then
    echo "SKIP $MODEL not found (the trained QA model is not there yet; pass its path)"
    exit 0
fi
BIN=${LZ_BIN:-build/bin}
OUT=${OUT:-build/bench-adakv-qa}
QA=${QA:-build/qa/test}
PY=${PYTHON:-python3}
PER_TYPE=${PER_TYPE:-100}
WINDOWS=${WINDOWS:-"32 8"}
POLICIES=${POLICIES:-"snapkv ada-snapkv pyramidkv ada-pyramidkv"}
BUDGETS=${BUDGETS:-"0.5 0.2 0.1"}
THREADS=${THREADS:+--threads $THREADS}
mkdir -p "$OUT"
[ -x "$BIN/lazyingest" ] && [ -x "$BIN/lazyquery" ] || { echo "build first: make"; exit 1; }
if [ ! -f "$QA/questions.json" ]; then
    $PY datasets/worldgen.py split --split test --seed 3 --worlds 40 --per-type 500 --out "$QA"
fi
# lazyquery input: PER_TYPE questions of each type, docs = gold among distractors
$PY - "$QA/questions.json" "$OUT" "$PER_TYPE" <<'EOF'
import json, sys
qs, out, k = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])
seen, asked = {}, []
with open(out + "/questions.jsonl", "w") as f:
    for q in qs:
        t = q.get("type", "?")
        if seen.get(t, 0) >= k:
            continue
        seen[t] = seen.get(t, 0) + 1
        asked.append(q)
        f.write(json.dumps({"id": q["_id"], "question": q["question"], "docs": q["context_ids"]}) + "\n")
json.dump(asked, open(out + "/questions_asked.json", "w"))
# the corpus: only the passages these questions place (no retrieval: --docs)
need = set(i for q in asked for i in q["context_ids"])
with open(sys.argv[1].rsplit("/", 1)[0] + "/corpus.jsonl") as f, open(out + "/corpus.jsonl", "w") as g:
    for ln in f:
        if json.loads(ln)["id"] in need:
            g.write(ln)
EOF

run() { # name ingest-args
    name=$1; shift
    store="$OUT/store-$name"
    rm -rf "$store"
    t0=$(date +%s.%N)
    "$BIN/lazyingest" --json --quiet $THREADS --model "$MODEL" --store "$store" "$@" "$OUT/corpus.jsonl" > "$OUT/ingest-$name.json"
    t1=$(date +%s.%N)
    "$BIN/lazyquery" --model "$MODEL" --store "$store" --mode lazy -n "${MAX_NEW:-64}" $THREADS --questions "$OUT/questions.jsonl" \
        > "$OUT/pred-$name.jsonl" || true
    $PY datasets/train/evaluate.py --questions "$OUT/questions_asked.json" --pred "$name=$OUT/pred-$name.jsonl" \
        --json "$OUT/eval-$name.json" > /dev/null 2>&1 || true
    echo "$name $t0 $t1" >> "$OUT/runs.txt"
    echo "done: $name"
}

: > "$OUT/runs.txt"
[ "${NONE:-1}" = 0 ] || run none
for w in $WINDOWS; do
    for b in $BUDGETS; do
        for p in $POLICIES; do
            extra=${INGEST_ARGS:-}
            case $p in ada-*) extra="$extra ${ADA_ARGS:-}" ;; esac
            if [ "$w" = probe ] && [ -n "${PROBE_TEXT:-}" ]; then
                run "$p-$b-probeq" --kv-policy "$p" --kv-budget "$b" --kv-probe-text "$PROBE_TEXT" $extra
            elif [ "$w" = probe ]; then
                run "$p-$b-probe" --kv-policy "$p" --kv-budget "$b" --kv-probe $extra
            elif [ "$w" = recon ]; then
                run "$p-$b-recon" --kv-policy "$p" --kv-budget "$b" --kv-reconstruct $extra
            elif [ "$w" = learned ]; then
                run "$p-$b-learned" --kv-policy "$p" --kv-budget "$b" --kv-learned "${SCORER:-models/default.kvlearn}" $extra
            elif [ "$w" = self ]; then
                run "$p-$b-self" --kv-policy "$p" --kv-budget "$b" --kv-self $extra
            else
                run "$p-$b-w$w" --kv-policy "$p" --kv-budget "$b" --kv-window "$w" $extra
            fi
        done
    done
done

$PY - "$OUT" <<'EOF' | tee "$OUT/summary.md"
import json, os, sys
out = sys.argv[1]
rows = []
for ln in open(os.path.join(out, "runs.txt")):
    name, t0, t1 = ln.split()
    ing = json.load(open(os.path.join(out, "ingest-%s.json" % name)))
    ev = json.load(open(os.path.join(out, "eval-%s.json" % name)))[name]
    ttft, n = 0.0, 0
    for l in open(os.path.join(out, "pred-%s.jsonl" % name)):
        try:
            t = json.loads(l)["timings"]["ttft_s"]
        except Exception:
            continue
        ttft += t; n += 1
    em = {k: ev[k]["em"] for k in ev}
    rows.append(dict(name=name, bpt=ing["stored_bytes"] / max(1, ing["tokens_encoded"]),
                     kept=ing.get("kv_kept_fraction", 1.0), ingest_s=float(t1) - float(t0),
                     score_s=ing.get("kv_policy_s", 0.0), encode_s=ing.get("encode_s", 0.0),
                     ttft=1e3 * ttft / max(1, n), em=em))
print("| run | bytes/token on disk | kept | ingest s | scoring / encoding | TTFT ms | EM single | EM bridge | EM comparison | EM all |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    e = r["em"]
    sc = 100 * r["score_s"] / max(1e-9, r["encode_s"] - r["score_s"])
    print("| %s | %.0f | %.3f | %.1f | %.2f%% | %.1f | %.1f | %.1f | %.1f | %.1f |" % (
        r["name"], r["bpt"], r["kept"], r["ingest_s"], sc, r["ttft"], e.get("single", 0), e.get("bridge", 0),
        e.get("comparison", 0), e["all"]))
by = {r["name"]: r["em"]["all"] for r in rows}
ok, compared, at20 = True, 0, 0
for a in by:
    if not a.startswith("ada-snapkv-"):
        continue
    n = a[len("ada-"):]
    if n in by:
        compared += 1
        if by[a] < by[n]:
            ok = False
            print("\nAda-SnapKV below SnapKV: %s %.1f < %.1f" % (a, by[a], by[n]))
    if "-0.2-" in a and "none" in by:
        at20 += 1
        if by[a] < by["none"] - 5:
            ok = False
            print("\nAda-SnapKV at 20%% more than 5 points below the uncompressed store: %s %.1f vs %.1f" % (a, by[a], by["none"]))
verdict = "NO" if not ok else "yes" if compared and at20 else "not measured (needs SnapKV and Ada-SnapKV runs, 20% among them)"
print("\nAda-SnapKV >= SnapKV at every budget, and within 5 points of none at 20%%: %s" % verdict)
EOF

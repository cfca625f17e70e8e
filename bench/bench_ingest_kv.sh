#!/bin/sh
# bench_ingest_kv.sh - ingest time with and without KV eviction on one corpus:
# each configuration ingests it into a fresh store, ROUNDS times, alternating,
# and the table gives wall and encoding seconds, the scoring share of encoding,
# tokens per second and bytes on disk per token. Run it on an otherwise idle
# machine (the timings are the point).
#
# usage: sh bench/bench_ingest_kv.sh CORPUS [MODEL]
# env:   ROUNDS=2  OUT=build/bench-ingest-kv  LZ_BIN=build/bin
#        CONFIGS="none learned recon"   (names below; "none" is always the reference)
#        BUDGET=0.2  SCORER=models/default.kvlearn
set -e
CORPUS=${1:?usage: sh bench/bench_ingest_kv.sh CORPUS [MODEL]}
MODEL=${2:-${LAZY_MODEL:-models/default.gguf}}
BIN=${LZ_BIN:-build/bin}
OUT=${OUT:-build/bench-ingest-kv}
ROUNDS=${ROUNDS:-2}
CONFIGS=${CONFIGS:-"none learned recon"}
B=${BUDGET:-0.2}
SCORER=${SCORER:-models/default.kvlearn}
[ -x "$BIN/lazyingest" ] || { echo "build first: make"; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT"
args_of() {
    common="--kv-policy ada-snapkv --kv-budget $B --kv-kernel 1 --kv-value-power 2 --kv-scope model"
    case $1 in
        none) echo "" ;;
        learned) echo "$common --kv-learned $SCORER" ;;
        recon) echo "$common --kv-reconstruct" ;;
        w8) echo "$common --kv-window 8" ;;
        probe) echo "$common --kv-probe" ;;
        *) echo "unknown configuration $1" >&2; exit 1 ;;
    esac
}
for r in $(seq 1 "$ROUNDS"); do
    for c in $CONFIGS; do
        # shellcheck disable=SC2046
        "$BIN/lazyingest" --json --quiet --model "$MODEL" --store "$OUT/$c-$r" $(args_of "$c") "$CORPUS" > "$OUT/$c-$r.json"
        echo "done: $c round $r"
    done
done
{
    echo "| configuration | round | wall s | encode s | scoring s | scoring / encoding | tokens/s | bytes on disk / token | kept |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    for c in $CONFIGS; do
        for r in $(seq 1 "$ROUNDS"); do
            python3 - "$OUT/$c-$r.json" "$c" "$r" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
enc = d["encode_s"]
print("| %s | %s | %.1f | %.1f | %.2f | %.2f%% | %.0f | %.0f | %.3f |" % (
    sys.argv[2], sys.argv[3], d["wall_s"], enc, d["kv_policy_s"], 100 * d["kv_policy_s"] / enc,
    d["corpus_tokens"] / d["wall_s"], d["stored_bytes"] / d["corpus_tokens"], d["kv_kept_fraction"]))
EOF
        done
    done
} > "$OUT/summary.md"
cat "$OUT/summary.md"

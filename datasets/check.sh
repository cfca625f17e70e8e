#!/bin/sh
# check.sh - the CPU checks of datasets/ (not part of `make test`: needs PyTorch).
#   sh datasets/check.sh [BUILD]      (BUILD defaults to build; the C tools are built there)
# 1. bpe_train.py selftest: the Llama-3 regex splitter (regex module vs hand-written) and
#    the encoder on the Llama-3 fixture vectors (when ../shared/fixtures exists);
# 2. tok_compare: the committed tokenizer, Python vs the C engine, on generated text;
# 3. train.py --check-prompt: prompt.py vs model/prompt.c;
# 4. a tiny training run (20 steps), then --check-c: block mask vs standalone encoding,
#    engine (lazy-logits on the HF folder and on lazy-convert's GGUF) vs PyTorch logits.
# 0. (no PyTorch needed) gguf_to_hf.py on models/default.gguf, then lazy-convert back:
#    every tensor byte-identical, every key but general.name equal.
set -eu
B=${1:-build}
PY=${PYTHON:-python3}
if [ -f models/default.gguf ]; then
    make -s BUILD="$B" "$B/bin/lazy-convert"
    rm -rf "$B/qa/check_hf"
    "$PY" datasets/train/gguf_to_hf.py models/default.gguf "$B/qa/check_hf"
    "$B/bin/lazy-convert" "$B/qa/check_hf" "$B/qa/check_hf.gguf" --outtype bf16
    "$PY" - models/default.gguf "$B/qa/check_hf.gguf" <<'EOF2'
import sys
sys.path.insert(0, "datasets/train")
import gguf_to_hf as g
ka, ta = g.read_gguf(sys.argv[1])
kb, tb = g.read_gguf(sys.argv[2])
bad = [n for n in ta if ta[n] != tb.get(n)] + [k for k in ka if k != "general.name" and ka[k] != kb.get(k)]
print("gguf_to_hf round trip: %d tensors, %d keys, %d differ %s" % (len(ta), len(ka), len(bad), bad[:5]))
sys.exit(1 if bad or set(ta) != set(tb) else 0)
EOF2
fi
"$PY" -c 'import torch, numpy' 2>/dev/null || { echo "check.sh: SKIP (no PyTorch/numpy for $PY; set PYTHON)"; exit 0; }
make -s BUILD="$B" "$B/liblazy.a" "$B/bin/lazy-logits" "$B/bin/lazy-convert"
L="$B/liblazy.a -ljansson -lpcre2-8 -lm -fopenmp"
cc -O2 -I. datasets/tools/tok_check.c $L -o "$B/bin/tok_check"
cc -O2 -I. datasets/tools/prompt_check.c $L -o "$B/bin/prompt_check"
mkdir -p "$B/qa"
"$PY" datasets/bpe_train.py selftest
"$PY" datasets/worldgen.py text --seed 99 --worlds 200 --out "$B/qa/check_text.txt"
"$PY" datasets/tools/tok_compare.py --tokenizer datasets/tokenizer/tokenizer.json --check "$B/bin/tok_check" \
    --text "$B/qa/check_text.txt" --n 20000
BPE_NO_REGEX=1 "$PY" datasets/tools/tok_compare.py --tokenizer datasets/tokenizer/tokenizer.json \
    --check "$B/bin/tok_check" --text "$B/qa/check_text.txt" --n 5000
"$PY" datasets/train/train.py --config datasets/train/config_tiny.json --out "$B/qa/check_tiny" --check-prompt "$B/bin"
rm -rf "$B/qa/check_tiny"
"$PY" datasets/train/train.py --config datasets/train/config_tiny.json --out "$B/qa/check_tiny" --minutes 3 --workers 1 >/dev/null
"$PY" datasets/train/train.py --config datasets/train/config_tiny.json --out "$B/qa/check_tiny" --resume --check-c "$B/bin"
"$PY" datasets/train/train.py --config datasets/train/config_tiny.json --out "$B/qa/check_tiny" --resume --check-c "$B/bin" --dtype BF16
echo "check.sh: all datasets checks passed"

#!/bin/sh
# check.sh - the CPU checks of datasets/ (not part of `make test`: needs PyTorch).
#   sh datasets/check.sh [BUILD]      (BUILD defaults to build; the C tools are built there)
# 1. bpe_train.py selftest: the Llama-3 regex splitter (regex module vs hand-written) and
#    the encoder on the Llama-3 fixture vectors (when ../shared/fixtures exists);
# 2. tok_compare: the committed tokenizer, Python vs the C engine, on generated text;
# 3. train.py --check-prompt: prompt.py vs model/prompt.c;
# 4. a tiny training run (20 steps), then --check-c: block mask vs standalone encoding,
#    engine (lazy-logits on the HF folder and on lazy-convert's GGUF) vs PyTorch logits.
set -eu
B=${1:-build}
PY=${PYTHON:-python3}
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

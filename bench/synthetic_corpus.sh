#!/bin/sh
# synthetic_corpus.sh - the paper's synthetic corpus for the 8B-shape benchmarks, on the
# development machine: N documents (ids d00000, d00001, ...) of at most T tokens each under the
# 128,256-token vocabulary of bench/gpu_common.sh's make_8b model, by bench/synthetic_corpus.py
# (lazy-mkmodel's tokenizer depends only on the vocabulary size, so a tiny model of that
# vocabulary stands in for the 15 GB one). The defaults make the paper's setup (a): 100 x 2,048
# tokens, about 40 s. The same seed gives the same documents for any N (N = 250 of
# bench/gpu_ingest_dtype.sh's big.jsonl begins with these 100).
# Usage (repo root, after 'make'): sh bench/synthetic_corpus.sh OUT.jsonl [N] [T] [SEED]
set -eu
OUT=${1:?OUT.jsonl}
N=${2:-100}
TOK=${3:-2048}
SEED=${4:-7}
BIN=${BIN:-build/bin}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$BIN/lazy-mkmodel" -o "$tmp/vocab.gguf" --dim 64 --layers 1 --heads 1 --kv-heads 1 --head-dim 64 --ffn 64 \
    --vocab 128256 --type bf16 > /dev/null
python3 bench/synthetic_corpus.py "$tmp/vocab.gguf" "$N" "$TOK" "$OUT" "$SEED"
echo "$OUT: $(wc -l < "$OUT") documents of at most $TOK tokens"

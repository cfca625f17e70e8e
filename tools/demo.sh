#!/bin/sh
# demo.sh - the README's main job on the embedded default: ingest the demo
# corpus (datasets/demo/corpus.jsonl) into build/demo-store and answer sample
# questions with lazyquery, citing the source passages. Uses models/default.gguf
# (the trained QA model, or $LAZY_MODEL); should it be missing, a random-weight
# model is generated, so the answers are noise but every stage runs for real.
# Run through 'make demo' (which installs dependencies and builds first).
set -eu
BUILD=${BUILD:-build}
MODEL=${LAZY_MODEL:-models/default.gguf}
STORE="$BUILD/demo-store"   # set below, one store per model
if [ ! -f "$MODEL" ]; then
    MODEL="$BUILD/models/random-demo.gguf"
    mkdir -p "$BUILD/models"
    echo "demo: the trained default model (models/default.gguf) is missing; generating a random-weight one at $MODEL"
    "$BUILD/bin/lazy-mkmodel" --dim 128 --layers 4 --heads 8 --kv-heads 2 --head-dim 16 --ffn 344 --vocab 1024 \
        --ctx 8192 -o "$MODEL"
fi
# a store belongs to one model: name it by the model file's content, so a new
# default model (git pull) gets a fresh store instead of a wrong-model refusal
STORE="$BUILD/demo-store-$(basename "$MODEL" .gguf)-$(sha256sum "$MODEL" | cut -c1-12)"
echo "demo: lazyingest --model $MODEL --store $STORE datasets/demo/corpus.jsonl"
"$BUILD/bin/lazyingest" --model "$MODEL" --store "$STORE" datasets/demo/corpus.jsonl
# two single-hop questions and a comparison (answered after a short reasoning)
for q in "In which industry does Droex Foods operate?" "What is the birthplace of Cima Elosani?" \
         "Which organisation is older, Raio Works or Rairreil Works?"; do
    echo
    echo "demo: lazyquery --model $MODEL --store $STORE --top-k 3 \"$q\""
    "$BUILD/bin/lazyquery" --model "$MODEL" --store "$STORE" --top-k 3 -n 32 -- "$q"  # '--': a question is never an option
done

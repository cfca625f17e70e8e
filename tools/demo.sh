#!/bin/sh
# demo.sh - the README's main job on the embedded default: generates a small
# random-weight model when no trained default ships yet, then runs it.
# Run through 'make demo' (which installs dependencies and builds first).
set -eu
BUILD=${BUILD:-build}
MODEL=${LAZY_MODEL:-models/default.gguf}
if [ ! -f "$MODEL" ]; then
    MODEL="$BUILD/models/random-tiny.gguf"
    mkdir -p "$BUILD/models"
    echo "demo: no trained default model in models/ yet; generating a random-weight one at $MODEL"
    "$BUILD/bin/lazy-mkmodel" --dim 128 --layers 4 --heads 8 --kv-heads 2 --head-dim 16 --ffn 344 --vocab 1024 -o "$MODEL"
fi
echo "demo: lazygen -m $MODEL -p 'Once upon a time' -n 32 --timings"
"$BUILD/bin/lazygen" -m "$MODEL" -p "Once upon a time" -n 32 --timings

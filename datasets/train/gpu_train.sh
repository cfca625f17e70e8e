#!/bin/sh
# gpu_train.sh - ONE device-tool call of the training run (see datasets/README.md).
# Resumes from build/qa/run/ckpt.pt when the machine is still warm, else from the
# small checkpoint carried in $CARRY (what the previous call left in $OUT), trains
# for at most $MINUTES of this call, and leaves in $OUT what must come back:
#   not finished: resume_w0.pt resume_w1.pt resume_state.json train_log.txt curve.jsonl
#   finished:     default.gguf.part-00.. (bf16 GGUF, split under 16 MiB; needs
#                 build/bin/lazy-convert) or model.safetensors.part-.. otherwise,
#                 metrics.json check_c.json test_torch.json train_log.txt curve.jsonl
# TEST_PER_TYPE: questions per type of the closing PyTorch test check (default 500).
# Needs: PyTorch (the device image has it), optional static build/bin/{lazy-convert,lazy-logits}.
set -eu
OUTDIR=${OUT:?run through the device tool, which sets OUT}
RUN=${RUN:-build/qa/run}
CARRY=${CARRY:-build/qa/carry}
MINUTES=${MINUTES:-9.2}
CONFIG=${CONFIG:-datasets/train/config.json}
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
mkdir -p "$RUN"
# the static tools may come gzipped (lazy-logits is 26 MB; with a carried checkpoint the carry
# passes the device tool's 64 MiB limit otherwise): unpack them where they lie
for z in "${BIN:-build/bin}"/lazy-*.gz; do
    [ -f "$z" ] && [ ! -f "${z%.gz}" ] && gunzip -c "$z" > "${z%.gz}" && chmod +x "${z%.gz}"
done
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
set +e
# $EXTRA: more train.py options, e.g. EXTRA="--set train.budget_minutes=8" for a one-call run
"$PY" datasets/train/train.py --config "$CONFIG" --out "$RUN" --minutes "$MINUTES" --resume \
    --resume-from "$CARRY" --small-ckpt "$RUN/small" ${EXTRA:-} 2>&1 | tee "$OUTDIR/train_log.txt"
set -e
cp "$RUN/curve.jsonl" "$OUTDIR/" 2>/dev/null || true
if [ ! -f "$RUN/metrics.json" ]; then
    cp "$RUN"/small/resume_w*.pt "$RUN/small/resume_state.json" "$OUTDIR/"
    echo "gpu_train: not finished; carry the files of \$OUT as $CARRY in the next call"
    exit 0
fi
cp "$RUN/metrics.json" "$OUTDIR/"
if "${BIN:-build/bin}/lazy-convert" --help >/dev/null 2>&1; then
    "${BIN:-build/bin}/lazy-convert" "$RUN/hf" "$RUN/default.gguf" --outtype bf16
    ls -l "$RUN/default.gguf"
    sha256sum "$RUN/default.gguf"
    split -b 15M -d "$RUN/default.gguf" "$OUTDIR/default.gguf.part-"
    if "${BIN:-build/bin}/lazy-logits" --help >/dev/null 2>&1; then
        "$PY" datasets/train/train.py --config "$CONFIG" --out "$RUN" --resume --check-c "${BIN:-build/bin}" \
            --dtype BF16 ${EXTRA:-} 2>&1 | tee -a "$OUTDIR/train_log.txt" || true
        cp "$RUN/check_c.json" "$OUTDIR/" 2>/dev/null || true
    fi
else
    echo "gpu_train: no runnable ${BIN:-build/bin}/lazy-convert here; shipping the safetensors instead"
    split -b 15M -d "$RUN/hf/model.safetensors" "$OUTDIR/model.safetensors.part-"
fi
# PyTorch's answers on the test split (unseen entities, gold among 9 distractors), both masks
"$PY" datasets/worldgen.py split --split test --seed 3 --worlds 40 --per-type "${TEST_PER_TYPE:-500}" --out build/qa/test
"$PY" datasets/train/train.py --config "$CONFIG" --out "$RUN" --resume --eval-only build/qa/test/questions.json \
    2>&1 | tee -a "$OUTDIR/train_log.txt" || true
cp "$RUN/eval_torch.json" "$OUTDIR/test_torch.json" 2>/dev/null || true
echo "gpu_train: finished; join the parts with cat"

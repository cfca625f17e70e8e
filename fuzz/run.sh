#!/bin/sh
# run.sh - runs the libFuzzer targets built in DIR (make fuzz / make fuzz-ci),
# JOBS at a time, each for SECONDS from its seeds (DIR/seeds/TARGET) and the
# corpus it grew before (DIR/corpus/TARGET). Prints a line per target
# (executions, seconds, rate, new corpus size, crashes) and appends it to
# DIR/summary.txt; a crash's input is kept in DIR/crashes/TARGET/. Exits 1
# when any target crashed or did not run.
#   sh fuzz/run.sh DIR SECONDS JOBS TARGET...
set -u
dir=$1; secs=$2; jobs=$3; shift 3
mkdir -p "$dir/logs"
# the largest input each target is given (the models and tokenizer.json seeds are the big ones)
max_len() {
    case "$1" in
    model) echo 131072 ;;
    tokenizer_json) echo 65536 ;;
    safetensors|gguf|payload) echo 16384 ;;
    *) echo 4096 ;;
    esac
}
# one target: its log in DIR/logs/TARGET.log, its result line in DIR/logs/TARGET.result
run_one() {
    t=$1
    bin="$dir/fuzz_$t"
    mkdir -p "$dir/corpus/$t" "$dir/crashes/$t"
    if [ ! -x "$bin" ]; then echo "$t: not built" > "$dir/logs/$t.result"; return; fi
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/lzfuzz-$t.XXXXXX")
    start=$(date +%s)
    touch "$dir/logs/$t.start"
    FUZZ_SCRATCH="$scratch" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
    ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1" UBSAN_OPTIONS="print_stacktrace=1" \
        "$bin" -max_total_time="$secs" -max_len="$(max_len "$t")" -timeout=20 -rss_limit_mb=2560 \
        -print_final_stats=1 -artifact_prefix="$dir/crashes/$t/" \
        "$dir/corpus/$t" "$dir/seeds/$t" > "$dir/logs/$t.log" 2>&1
    rc=$?
    end=$(date +%s)
    rm -rf "$scratch"
    execs=$(grep -E '^stat::number_of_executed_units:' "$dir/logs/$t.log" | tail -n 1 | awk '{print $2}')
    crashes=$(find "$dir/crashes/$t" -type f -newer "$dir/logs/$t.start" | grep -cE '/(crash|leak|timeout|oom)-')
    n_corpus=$(ls "$dir/corpus/$t" | wc -l)
    el=$((end - start)); [ "$el" -gt 0 ] || el=1
    printf '%-16s %10s execs %5s s %8s exec/s  corpus %5s  crashes %s  exit %s\n' "$t" "${execs:-?}" "$el" \
        "$(( ${execs:-0} / el ))" "$n_corpus" "$crashes" "$rc" > "$dir/logs/$t.result"
}
running=0; pids=""
for t in "$@"; do
    run_one "$t" &
    pids="$pids $!"
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then wait; running=0; fi
done
wait
fail=0
echo "fuzz: $(date -u +%Y-%m-%dT%H:%M:%SZ), $secs s a target, $jobs at a time" | tee -a "$dir/summary.txt"
for t in "$@"; do
    line=$(cat "$dir/logs/$t.result" 2>/dev/null || echo "$t: no result")
    echo "  $line" | tee -a "$dir/summary.txt"
    case "$line" in *"crashes 0  exit 0") ;; *) fail=1; tail -n 40 "$dir/logs/$t.log" ;; esac
done
if [ "$fail" -ne 0 ]; then echo "fuzz: FAILED (inputs in $dir/crashes/, logs in $dir/logs/)"; exit 1; fi
echo "fuzz: every target ran without a crash"

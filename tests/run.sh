#!/bin/sh
# run.sh - runs every test program in $BUILD/tests and tests/check_layers.sh, sums their
# 'N passed, N failed' lines and prints the total; exits 1 if any failed.
BUILD=${BUILD:-build}
total_p=0; total_f=0; bad=""
export LZ_BIN="$BUILD/bin"
# passive OpenMP waits: spinning threads collapse on shared CI cores (base/runtime.h)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# the test programs, then the tree checks (the layer rules of ARCHITECTURE.md)
for t in "$BUILD"/tests/test_* "check_layers.sh" "check_layers.sh --selftest"; do
    case "$t" in
    check_layers.sh*) name="$t"; out=$(sh tests/$t 2>&1); rc=$? ;;
    *) [ -x "$t" ] || continue
       name=$(basename "$t")
       out=$("$t" 2>&1); rc=$? ;;
    esac
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    p=$(printf '%s' "$line" | sed -E 's/^([0-9]+) passed.*/\1/'); p=${p:-0}
    f=$(printf '%s' "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/'); f=${f:-0}
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    total_p=$((total_p + p)); total_f=$((total_f + f))
    if [ "$f" -ne 0 ]; then
        bad="$bad $name"
        printf '%s\n' "$out" | tail -n 40
        echo "== $name: FAILED (exit $rc)"
    else
        skips=$(printf '%s\n' "$out" | grep -c '^SKIP')
        echo "== $name: $p passed${skips:+, $skips skip lines}"
    fi
done
[ -n "$bad" ] && echo "failed:$bad"
echo "$total_p passed, $total_f failed"
[ "$total_f" -eq 0 ]

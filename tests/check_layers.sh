#!/bin/sh
# check_layers.sh - checks every #include of the tree against the layer rules
# of ARCHITECTURE.md (the block between <!-- layer-rules --> markers): which
# project folders a folder's files may include, and which folders alone may
# include a given system header. Prints each violation with file and line,
# then 'N passed, N failed' (a check per rule line and per file).
#   sh tests/check_layers.sh [ROOT]        (ROOT: the repository, default .)
#   sh tests/check_layers.sh --selftest    (plants violations in a copy; they must be found)
set -u
if [ "${1:-}" = "--selftest" ]; then
    here=$(cd "$(dirname "$0")/.." && pwd)
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/kernels" "$tmp/store" "$tmp/base" "$tmp/model" "$tmp/query" "$tmp/eval" "$tmp/serve"
    cp "$here/ARCHITECTURE.md" "$tmp/"
    printf '#include "base/rope.h"\n' > "$tmp/kernels/ok.cu"
    printf '#include "model/llama.h"\n' > "$tmp/model/ok.c"
    printf '#include <lmdb.h>\n#include "base/error.h"\n' > "$tmp/store/ok.c"
    printf '#include "query/session.h"\n#include "eval/run.h"\n' > "$tmp/eval/ok.c"
    printf '#include <microhttpd.h>\n#include "query/answer_run.h"\n' > "$tmp/serve/ok.c"
    good=$(sh "$0" "$tmp" 2>&1 | tail -n 1)
    printf '#include "store/store.h"\n' > "$tmp/kernels/bad.cu"
    printf '/* a comment */\n#include "query/session.h"\n' > "$tmp/model/bad.c"
    printf '#include <sqlite3.h>\n' > "$tmp/query/bad.c"
    printf '#  include "model/llama.h"\n' > "$tmp/base/bad.h"
    printf '#include "eval/metrics.h"\n' > "$tmp/query/bad_eval.c"
    printf '#include "serve/sched.h"\n#include <microhttpd.h>\n' > "$tmp/query/bad_serve.c"
    out=$(sh "$0" "$tmp" 2>&1)
    p=0; f=0
    check() { if eval "$1"; then p=$((p + 1)); else f=$((f + 1)); echo "FAIL selftest: $2"; fi; }
    check '[ "$good" = "5 passed, 0 failed" ]' "clean tree passes ($good)"
    check 'printf "%s" "$out" | grep -q "kernels/bad.cu:1: includes store/"' "kernels -> store found"
    check 'printf "%s" "$out" | grep -q "model/bad.c:2: includes query/"' "model -> query found, with its line"
    check 'printf "%s" "$out" | grep -q "query/bad.c:1: includes <sqlite3.h>"' "sqlite3.h outside store found"
    check 'printf "%s" "$out" | grep -q "base/bad.h:1: includes model/"' "indented include found"
    check 'printf "%s" "$out" | grep -q "query/bad_eval.c:1: includes eval/"' "query -> eval found (eval is above query)"
    check 'printf "%s" "$out" | grep -q "query/bad_serve.c:1: includes serve/"' "query -> serve found (serve is above query)"
    check 'printf "%s" "$out" | grep -q "query/bad_serve.c:2: includes <microhttpd.h>"' "microhttpd.h outside serve found"
    check 'printf "%s" "$out" | tail -n 1 | grep -q " 6 failed"' "six files fail"
    echo "$p passed, $f failed"
    [ "$f" -eq 0 ]; exit $?
fi
root=${1:-.}
rules=$(sed -n '/<!-- layer-rules -->/,/<!-- \/layer-rules -->/p' "$root/ARCHITECTURE.md" | grep -E '^[a-z].*:')
if [ -z "$rules" ]; then echo "check_layers: no rules block in $root/ARCHITECTURE.md"; echo "0 passed, 1 failed"; exit 1; fi
passed=0; failed=0
# project folders: those that rules name on the left
folders=$(printf '%s\n' "$rules" | grep -v '^only ' | sed 's/:.*//' | tr '\n' ' ')
for folder in $folders; do
    allowed=$(printf '%s\n' "$rules" | grep "^$folder:" | sed 's/^[^:]*: *//')
    [ -d "$root/$folder" ] || continue
    for file in $(find "$root/$folder" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort); do
        rel=${file#"$root"/}
        bad=0
        # project includes: the first path component must be an allowed folder
        for hit in $(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*/' "$file" | \
                     sed -E 's/^([0-9]+):.*"([^"/]+)\/[^"]*".*/\1:\2/'); do
            line=${hit%%:*}; dir=${hit#*:}
            case " $folders " in *" $dir "*) ;; *) continue ;; esac
            case " $allowed " in *" $dir "*) ;; *) echo "$rel:$line: includes $dir/ (allowed: $allowed)"; bad=1 ;; esac
        done
        # system headers reserved to some folders
        printf '%s\n' "$rules" | grep '^only ' | while IFS= read -r r; do
            owners=$(printf '%s' "$r" | sed -E 's/^only ([^:]*):.*/\1/')
            case " $owners " in *" $folder "*) continue ;; esac
            for h in $(printf '%s' "$r" | sed 's/^[^:]*: *//'); do
                grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*<$h>" "$file" | while IFS=: read -r line _; do
                    echo "$rel:$line: includes <$h> (only $owners may)"
                done
            done
        done > /tmp/check_layers.$$
        if [ -s /tmp/check_layers.$$ ]; then cat /tmp/check_layers.$$; bad=1; fi
        rm -f /tmp/check_layers.$$
        if [ $bad -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
    done
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

#!/bin/sh
# deps.sh - installs the Debian packages the build needs with apt-get, only
# those missing; prints nothing when everything is present. Then, best
# effort, those of 'make fuzz' (clang, its libFuzzer and sanitizer runtimes,
# its OpenMP) and of tests/test_slurm.c (munge, slurmctld, slurmd, slurm-client:
# the test starts its own one-node cluster in a temporary folder; Debian's
# packages enable their services, which stay idle without /etc/slurm's
# config): without them those tests print SKIP, nothing fails.
set -e
PKGS="build-essential pkg-config liblmdb-dev libsqlite3-dev libzstd-dev libcsv-dev libjansson-dev libpcre2-dev libopenblas-dev libmicrohttpd-dev gnuplot-nox"
FUZZ_PKGS="clang libclang-rt-14-dev libomp-14-dev"
SLURM_PKGS="munge slurmctld slurmd slurm-client"
missing_of() {
    m=""
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || m="$m $p"
    done
    echo "$m"
}
missing=$(missing_of $PKGS)
fuzz_missing=$(missing_of $FUZZ_PKGS)
slurm_missing=$(missing_of $SLURM_PKGS)
# node and npm run the openai client of tests/test_serve.c (Debian's, unless a node is there)
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
if [ -n "$missing" ] || [ -n "$fuzz_missing" ] || [ -n "$slurm_missing" ]; then
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
if [ -n "$missing" ]; then
    echo "deps: installing$missing"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
if [ -n "$fuzz_missing" ]; then
    echo "deps: installing$fuzz_missing (make fuzz)"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $fuzz_missing >/dev/null ||
        echo "deps: could not install$fuzz_missing: make fuzz will print SKIP"
fi
if [ -n "$slurm_missing" ]; then
    echo "deps: installing$slurm_missing (tests/test_slurm.c)"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $slurm_missing >/dev/null ||
        echo "deps: could not install$slurm_missing: tests/test_slurm.c will print SKIP"
fi
echo "deps: done"
fi
# the openai npm package, pinned by tests/serve_client/package.json, into build/node (ignored),
# best effort: without it tests/test_serve.c skips its node client
root=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -f "$root/build/node/node_modules/openai/package.json" ] && command -v npm >/dev/null 2>&1; then
    mkdir -p "$root/build/node" && cp "$root/tests/serve_client/package.json" "$root/build/node/"
    if npm install --prefix "$root/build/node" --no-audit --no-fund --loglevel=error >/dev/null 2>&1; then
        echo "deps: openai (npm) installed in build/node"
    else
        echo "deps: npm install of openai failed: tests/test_serve.c will skip its node client"
    fi
fi

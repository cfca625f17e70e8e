#!/bin/sh
# deps.sh - installs the Debian packages the build needs with apt-get, only
# those missing; prints nothing when everything is present.
set -e
PKGS="build-essential pkg-config liblmdb-dev libsqlite3-dev libzstd-dev libcsv-dev libjansson-dev libpcre2-dev libopenblas-dev gnuplot-nox"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "deps: done"

#!/bin/sh
# sass_sizes.sh - the machine code of every prefill kernel: the size of its .text section
# in the sm_90a cubin and a hash of its bytes (two builds with the same hashes run the
# same code), the lazy kernels beside their twins: the tile code's copies show here.
# Runs here (needs nvcc, not a GPU).
# Usage (repo root): sh bench/kernels/sass_sizes.sh [EXTRA NVCC FLAGS, e.g. -DMACRO]
#   SRC: another version of the file, e.g. git show 92cbea5:kernels/lz_prefill.cu > /tmp/p.cu; SRC=/tmp/p.cu
# The instructions themselves, where cuobjdump exists (the GPU machine):
#   cuobjdump -sass -fun MANGLED_NAME build/cuda/kernels_check
set -eu
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
T=$(mktemp -d)
"$NVCC" -O3 -std=c++17 -I. -gencode=arch=compute_90a,code=sm_90a "$@" -cubin "${SRC:-kernels/lz_prefill.cu}" -o "$T/p.cubin"
readelf -S -W "$T/p.cubin" 2>/dev/null | python3 -c '
import hashlib, re, sys
data = open(sys.argv[1], "rb").read()
rows = []
for l in sys.stdin:
    m = re.search(r"\s\.text\.\S*prefill_kernelILi(\d+)ELi(\d)ELb(\d)ELi(\d)ELi(\d)ELb(\d)E\S*\s+\S+\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)", l)
    if m:
        d, lay, lazy, mt, w, wg, off, size = m.groups()
        off, size = int(off, 16), int(size, 16)
        rows.append(("prefill_kernel<%s, %s, %s, %s, %s, %s>" % (d, lay, "true" if lazy == "1" else "false", mt, w,
                     "true" if wg == "1" else "false"), size, hashlib.md5(data[off:off + size]).hexdigest()[:12]))
for name, size, h in sorted(rows):
    print("%-46s %7d bytes  md5 %s" % (name, size, h))
' "$T/p.cubin"
rm -rf "$T"

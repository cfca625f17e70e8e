#!/bin/sh
# sass_dump.sh - the machine code (SASS) of the kernels of a CUDA binary whose
# mangled names match a pattern, one file a kernel, numbered in the binary's
# order (OUTDIR/kernelN.sass; the file's first line is the kernel's name).
# Runs on the GPU machine (needs cuobjdump, which this build machine lacks).
# Usage: sh bench/kernels/sass_dump.sh BINARY AWK_REGEX OUTDIR
#   e.g. the d = 128 half-split wgmma prefill kernels, lazy and twin:
#   sh bench/kernels/sass_dump.sh build/cuda/bench_kernels 'prefill_kernelILi128ELi1ELb.ELi1ELi4ELb1E' $OUT
set -eu
mkdir -p "$3"
cuobjdump -sass "$1" | awk -v pat="$2" -v out="$3" '
/Function : / { f = ""; if ($3 ~ pat) { n++; f = out "/kernel" n ".sass" } }
f { print > f }'
ls -la "$3"

# gpu_common.sh - sourced (from the repo root) by the bench scripts that run on the GPU
# machine: the binaries built here unpacked, and the random-weight model of
# Llama-3.1-8B's shape (bf16, 15 GB) written there.

# gpu_unpack NAME...: ${G:-build/gpuenc}/NAME.xz (xz-packed: smaller to carry) or NAME.gz ->
# build/gpu-run/NAME, executable; sets B
gpu_unpack() {
    mkdir -p build/gpu-run
    for b in "$@"; do
        if [ -f "${G:-build/gpuenc}/$b.xz" ]; then
            xz -dc "${G:-build/gpuenc}/$b.xz" > "build/gpu-run/$b" && chmod +x "build/gpu-run/$b" || return 1
        else
            gunzip -c "${G:-build/gpuenc}/$b.gz" > "build/gpu-run/$b" && chmod +x "build/gpu-run/$b" || return 1
        fi
    done
    B=build/gpu-run
}

# gpu_unpack_if NAME...: gpu_unpack when ${G:-build/gpuenc} holds the first NAME packed (.xz or
# .gz); else B stays (the binaries of 'make cuda' in build/cuda)
gpu_unpack_if() {
    if [ -f "${G:-build/gpuenc}/$1.xz" ] || [ -f "${G:-build/gpuenc}/$1.gz" ]; then gpu_unpack "$@"; fi
}

# make_8b PATH: dim 4096, 32 layers, 32/8 heads of 128, FFN 14336, 128,256-token vocabulary,
# llama3 rope scaling, by $B/lazy-mkmodel
make_8b() {
    "$B/lazy-mkmodel" -o "$1" --dim 4096 --layers 32 --heads 32 --kv-heads 8 --head-dim 128 --ffn 14336 \
        --vocab 128256 --ctx 131072 --theta 500000 --llama3-freqs --type bf16
}

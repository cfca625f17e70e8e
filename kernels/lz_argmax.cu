/* lz_argmax.cu - lz_argmax (lz_argmax.h): one block of 1,024 threads a row.
 * Each thread scans the columns t, t + 1024, ... keeping its best value and
 * the first column holding it, for the whole row and for the row with the
 * ban list masked (the list looked up only for a column that would win: a
 * few times a thread); the warps, then the block, keep the larger value and,
 * on a tie, the smaller column, which is the sequential scan's first index.
 * A NaN never wins; one at column 0 is the answer, as in lz_sample_argmax. */
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>

#include "kernels/lz_argmax.h"

namespace {

constexpr int THREADS = 1024;

struct Best {
    float v;
    int i;
};

/* b beats a: larger, or as large and earlier (a NaN never beats) */
__device__ __forceinline__ bool beats(float v, int i, const Best &a) { return v > a.v || (v == a.v && i < a.i); }

__device__ __forceinline__ Best warp_best(Best b)
{
    for (int o = 16; o; o >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, b.v, o);
        const int i = __shfl_xor_sync(0xffffffffu, b.i, o);
        if (beats(v, i, b)) b = Best{v, i};
    }
    return b;
}

/* the block's best of every thread's b (every thread gets it); part: 32 entries of shared memory */
__device__ __forceinline__ Best block_best(Best b, Best *part)
{
    b = warp_best(b);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = b;
    __syncthreads();
    if (threadIdx.x < 32) {
        b = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : Best{-INFINITY, INT_MAX};
        b = warp_best(b);
        if (threadIdx.x == 0) part[0] = b;
    }
    __syncthreads();
    const Best r = part[0];
    __syncthreads(); /* part is reused */
    return r;
}

__global__ void __launch_bounds__(THREADS) argmax_kernel(int *next, const float *logits, int V, size_t ld, const int *ban)
{
    __shared__ int banned[LZ_ARGMAX_MAX_BAN];
    __shared__ int n_ban;
    __shared__ Best part[32];
    if (threadIdx.x == 0) n_ban = ban ? min(max(ban[0], 0), LZ_ARGMAX_MAX_BAN) : 0;
    __syncthreads();
    if ((int)threadIdx.x < n_ban) banned[threadIdx.x] = ban[1 + threadIdx.x];
    __syncthreads();
    const float *row = logits + (size_t)blockIdx.x * ld;
    Best all{-INFINITY, INT_MAX}, kept{-INFINITY, INT_MAX};
#pragma unroll 4
    for (int j = threadIdx.x; j < V; j += THREADS) {
        const float v = row[j];
        if (beats(v, j, all)) all = Best{v, j};
        float m = v;
        if (n_ban && (v != v || beats(v, j, kept))) /* would win (or is NaN): is it banned? */
            for (int b = 0; b < n_ban; b++)
                if (banned[b] == j) m = -INFINITY;
        if (beats(m, j, kept)) kept = Best{m, j};
    }
    all = block_best(all, part);
    kept = block_best(kept, part);
    if (threadIdx.x == 0) {
        bool ban0 = false;
        for (int b = 0; b < n_ban; b++) ban0 |= banned[b] == 0;
        const float v0 = row[0];
        next[2 * blockIdx.x] = v0 != v0 ? 0 : all.i;
        next[2 * blockIdx.x + 1] = v0 != v0 && !ban0 ? 0 : kept.i;
    }
}

} /* namespace */

extern "C" int lz_argmax(int *next, const float *logits, int rows, int V, size_t ld, const int *ban, void *stream)
{
    if (rows < 0 || V < 1 || ld < (size_t)V) return LZ_ARGMAX_EINVAL;
    if (rows == 0) return 0;
    argmax_kernel<<<rows, THREADS, 0, (cudaStream_t)stream>>>(next, logits, V, ld, ban);
    return (int)cudaGetLastError();
}

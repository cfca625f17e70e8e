/* lz_argmax.cu - lz_argmax (lz_argmax.h): one block of 1,024 threads a row,
 * two branch-free passes over it: the largest value M (fmaxf, which passes
 * over NaN), then the first column holding M (a NaN equals nothing), each
 * thread over the columns t, t + 1024, ... (float4s when the rows are 16-byte
 * aligned, four loads in flight), then the block. The masked answer is the
 * same column when that column is not banned and M is above -inf (a banned
 * column only goes down to -inf); else (rare) a third pass finds it the slow
 * way, keeping the best unbanned value and its first column. A NaN at column
 * 0 is the answer, as in lz_sample_argmax. A scan that compared and selected
 * at every value ran at 10 GB/s a block (52 us a row of 128,256 on an H200,
 * bench/kernels/argmax_rows.cu), issue-bound on its branches. */
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

__device__ __forceinline__ float shfl_xor(float v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ int shfl_xor(int v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ Best shfl_xor(Best b, int o) { return Best{shfl_xor(b.v, o), shfl_xor(b.i, o)}; }

/* op over every thread's v in the block (every thread gets it): the warps, then the warp
 * results; none: op's identity; part: 32 entries of shared memory, free again on return */
template <class T, class Op> __device__ __forceinline__ T block_reduce(T v, T none, Op op, T *part)
{
    for (int o = 16; o; o >>= 1) v = op(v, shfl_xor(v, o));
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : none;
        for (int o = 16; o; o >>= 1) v = op(v, shfl_xor(v, o));
        if (threadIdx.x == 0) part[0] = v;
    }
    __syncthreads();
    const T r = part[0];
    __syncthreads(); /* part is reused */
    return r;
}

/* f(v, j) for every column j of row (float4s when aligned, U loads in flight) */
template <class F> __device__ __forceinline__ void each_column(const float *row, int V, size_t ld, F f)
{
    int j0 = 0; /* the columns before j0 were taken as float4s */
    if (ld % 4 == 0 && ((size_t)row & 15) == 0) {
        constexpr int U = 4;
        const float4 *r4 = reinterpret_cast<const float4 *>(row);
        const int V4 = V / 4;
        for (int c0 = threadIdx.x; c0 < V4; c0 += THREADS * U) {
            float4 x[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * THREADS;
                if (c < V4) x[u] = r4[c];
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * THREADS, j = 4 * c;
                if (c < V4) f(x[u].x, j), f(x[u].y, j + 1), f(x[u].z, j + 2), f(x[u].w, j + 3);
            }
        }
        j0 = V4 * 4;
    }
    for (int j = j0 + threadIdx.x; j < V; j += THREADS) f(row[j], j);
}

__global__ void __launch_bounds__(THREADS) argmax_kernel(int *next, const float *logits, int V, size_t ld, const int *ban)
{
    __shared__ int banned[LZ_ARGMAX_MAX_BAN];
    __shared__ int n_ban_s;
    __shared__ float fpart[32];
    __shared__ int ipart[32];
    __shared__ Best part[32];
    if (threadIdx.x == 0) n_ban_s = ban ? min(max(ban[0], 0), LZ_ARGMAX_MAX_BAN) : 0;
    __syncthreads();
    const int n_ban = n_ban_s;
    if ((int)threadIdx.x < n_ban) banned[threadIdx.x] = ban[1 + threadIdx.x];
    const float *row = logits + (size_t)blockIdx.x * ld;
    float m = -INFINITY;
    each_column(row, V, ld, [&](float v, int) { m = fmaxf(m, v); });
    auto larger = [](float x, float y) { return fmaxf(x, y); };
    const float M = block_reduce(m, (float)NAN, larger, fpart); /* NaN only when every value is */
    int first = INT_MAX;
    each_column(row, V, ld, [&](float v, int j) { first = v == M && j < first ? j : first; });
    const int i_all = block_reduce(first, INT_MAX, [](int x, int y) { return min(x, y); }, ipart);
    const bool nan0 = row[0] != row[0];
    bool hit = false, ban0 = false; /* i_all banned; column 0 banned */
    for (int b = 0; b < n_ban; b++) hit |= banned[b] == i_all, ban0 |= banned[b] == 0;
    int kept_i = nan0 && !ban0 ? 0 : i_all;
    if (n_ban && (hit || !(M > -INFINITY))) { /* the slow way: the best unbanned value, its first column */
        Best kept{-INFINITY, INT_MAX};
        each_column(row, V, ld, [&](float v, int j) {
            float mv = v;
            if (v != v || beats(v, j, kept)) /* would win (or is NaN): is it banned? */
                for (int b = 0; b < n_ban; b++)
                    if (banned[b] == j) mv = -INFINITY;
            if (beats(mv, j, kept)) kept = Best{mv, j};
        });
        auto better = [](Best x, Best y) { return beats(y.v, y.i, x) ? y : x; };
        kept = block_reduce(kept, Best{-INFINITY, INT_MAX}, better, part);
        kept_i = nan0 && !ban0 ? 0 : kept.i;
    }
    if (threadIdx.x == 0) {
        next[2 * blockIdx.x] = nan0 ? 0 : i_all;
        next[2 * blockIdx.x + 1] = kept_i;
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

/* lz_ops.cu - the small kernels of the GPU forward pass and their launchers
 * (lz_ops.h); CPU references in lz_ops_ref.c. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "kernels/lz_decode.h"
#include "kernels/lz_ops.cuh"
#include "kernels/lz_ops.h"
#include "base/rope.h"

typedef __nv_bfloat16 bf16;

namespace {

/* x[i, :] = embedding row of ids[i] */
__global__ void embed_kernel(float *x, const bf16 *tok, const int *ids, int D)
{
    const bf16 *row = tok + (size_t)ids[blockIdx.x] * D;
    for (int j = threadIdx.x; j < D; j += blockDim.x) x[(size_t)blockIdx.x * D + j] = __bfloat162float(row[j]);
}

/* out[i, :] = bf16(x[i, :] / sqrt(mean(x^2) + eps) * w), one block a row */
__global__ void rmsnorm_kernel(bf16 *out, const float *x, const float *w, int D, float eps)
{
    __shared__ float part[32];
    const float *xr = x + (size_t)blockIdx.x * D;
    const float r = lz::rms_scale(lz::block_sumsq(xr, D, part), D, eps);
    for (int j = threadIdx.x; j < D; j += blockDim.x) out[(size_t)blockIdx.x * D + j] = __float2bfloat16_rn(xr[j] * r * w[j]);
}

/* rmsnorm_kernel for D <= K x blockDim, bit for bit: thread t holds x[t + k blockDim] (k < K) in
 * registers, its K loads issued at once (rmsnorm_kernel's loop waits on one load after another:
 * about 11 us a call for a few rows of 4,096 on an H200, where the bytes take under 1 us), and
 * sums and scales them in rmsnorm_kernel's order. */
template <int K>
__global__ void rmsnorm_regs_kernel(bf16 *__restrict__ out, const float *__restrict__ x, const float *__restrict__ w,
                                    int D, float eps)
{
    __shared__ float part[32];
    const float *xr = x + (size_t)blockIdx.x * D;
    float v[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int j = threadIdx.x + k * blockDim.x;
        v[k] = j < D ? xr[j] : 0.f;
    }
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < K; k++)
        if (threadIdx.x + k * blockDim.x < D) ss += v[k] * v[k];
    const float r = lz::rms_scale(lz::block_sum(ss, part), D, eps);
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int j = threadIdx.x + k * blockDim.x;
        if (j < D) out[(size_t)blockIdx.x * D + j] = __float2bfloat16_rn(v[k] * r * w[j]);
    }
}

/* Token-major q, k, v (fp32, from the GEMMs) to head-major bf16: q and k
 * rotated at pos0 + i (base/rope.h), v copied. Block (i, head), head < H
 * is q, then KV of k, then KV of v; thread t owns pair t. */
__global__ void heads_kernel(bf16 *qh, bf16 *kh, bf16 *vh, const float *q, const float *k, const float *v, size_t ldq,
                             size_t ldk, int n, int H, int KV, int d, int64_t pos0, const int *count, int layout,
                             const float *inv_freq, float *qcap, int c0, int cw, bf16 *own_k, bf16 *own_v, int N)
{
    lz::pdl_wait(); /* q, k, v: the product before */
    lz::pdl_trigger(); /* a decode step's attention (lz_decode_params.pdl) starts its prefetch meanwhile */
    const int cnt = count ? *count : 0;
    pos0 += cnt; /* query: the tokens so far, kept on the device (a graph replays this) */
    const int i = blockIdx.x, hh = blockIdx.y, t = threadIdx.x;
    const float *src;
    bf16 *dst;
    int rotate = 1;
    if (hh < H) { src = q + i * ldq + (size_t)hh * d; dst = qh + ((size_t)hh * n + i) * d; }
    else if (hh < H + KV) { src = k + i * ldk + (size_t)(hh - H) * d; dst = kh + ((size_t)(hh - H) * n + i) * d; }
    else { src = v + i * ldk + (size_t)(hh - H - KV) * d; dst = vh + ((size_t)(hh - H - KV) * n + i) * d; rotate = 0; }
    int a, b;
    lz_rope_pair(layout, d, t, &a, &b);
    float x0 = src[a], x1 = src[b];
    if (rotate) {
        const float ang = (float)(pos0 + i) * inv_freq[t];
        lz_rope_rotate_pair(&x0, &x1, cosf(ang), sinf(ang));
    }
    dst[a] = __float2bfloat16_rn(x0);
    dst[b] = __float2bfloat16_rn(x1);
    if (own_k && hh >= H) { /* the layer's own rows (KV, N, d), after the tokens so far */
        const int kvh = hh < H + KV ? hh - H : hh - H - KV;
        bf16 *own = (hh < H + KV ? own_k : own_v) + ((size_t)kvh * N + cnt + i) * d;
        own[a] = __float2bfloat16_rn(x0);
        own[b] = __float2bfloat16_rn(x1);
    }
    if (qcap && hh < H && i >= c0 && i < c0 + cw) { /* KV eviction's window: rotated queries, fp32, (cw, H, d) */
        float *row = qcap + ((size_t)(i - c0) * H + hh) * d;
        row[a] = x0;
        row[b] = x1;
    }
}

/* out = bf16(silu(gate) * up) */
__global__ void silu_mul_kernel(bf16 *out, const float *gate, const float *up, size_t count)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < count; e += (size_t)gridDim.x * blockDim.x) {
        out[e] = __float2bfloat16_rn(lz::silu_mul(gate[e], up[e]));
    }
}

/* out (n, F) = bf16(silu(gate) * up) from rows [gate (F) | up (F)] */
__global__ void swiglu_kernel(bf16 *out, const float *gu, int n, int F)
{
    const size_t count = (size_t)n * F;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < count; e += (size_t)gridDim.x * blockDim.x) {
        const size_t i = e / F, j = e % F;
        out[e] = __float2bfloat16_rn(lz::silu_mul(gu[i * 2 * F + j], gu[i * 2 * F + F + j]));
    }
}

/* (H, n, d) -> (n, H * d) */
__global__ void tokens_kernel(bf16 *out, const bf16 *oh, int n, int H, int d)
{
    const int i = blockIdx.x, h = blockIdx.y;
    for (int e = threadIdx.x; e < d; e += blockDim.x) out[((size_t)i * H + h) * d + e] = oh[((size_t)h * n + i) * d + e];
}

/* the own sequence's length in every layer's descriptor: qlen[(l * W + S) * KV + h] = *count */
__global__ void own_len_kernel(int32_t *qlen, int L, int W, int S, int KV, const int *count)
{
    for (int e = threadIdx.x; e < L * KV; e += blockDim.x) qlen[((size_t)(e / KV) * W + S) * KV + e % KV] = *count;
}

/* this step's n keys or values (KV, n, d) appended to a layer's own rows (KV, N, d) after *count */
__global__ void append_kernel(bf16 *own, const bf16 *t, int n, int N, int d, const int *count)
{
    const int h = blockIdx.y, i = blockIdx.x;
    for (int e = threadIdx.x; e < d; e += blockDim.x)
        own[((size_t)h * N + *count + i) * d + e] = t[((size_t)h * n + i) * d + e];
}

__global__ void bump_kernel(int *count, int n) { *count += n; }

/* one (layer, kv head) list a thread: lz_op_own_words */
__global__ void own_words_kernel(uint64_t *words, int32_t *n_blocks, const int32_t *n_fixed, int LKV, int NB,
                                 const int *count, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= LKV) return;
    const int len = *count + n, nob = (len + LZ_DECODE_BLOCK - 1) / LZ_DECODE_BLOCK, last = n_fixed[i] + nob - 1;
    const uint64_t keys = 63ull << 57;
    uint64_t *w = words + (size_t)i * NB;
    n_blocks[i] = last + 1;
    w[last] = (w[last] & ~keys) | ((uint64_t)(len - (nob - 1) * LZ_DECODE_BLOCK - 1) << 57);
    for (int j = n_fixed[i]; j < last; j++) w[j] |= keys; /* full (a step of many rows may pass several) */
}

} /* namespace */

#define LZ_OP_DONE() return (int)cudaGetLastError()

extern "C" int lz_op_embed(float *x, const lz_bf16 *table, const int *ids, int n, int D, void *stream)
{
    if (n <= 0) return 0;
    embed_kernel<<<n, 256, 0, (cudaStream_t)stream>>>(x, (const bf16 *)table, ids, D);
    LZ_OP_DONE();
}

extern "C" int lz_op_rmsnorm(lz_bf16 *out, const float *x, const float *w, int n, int D, float eps, void *stream)
{
    if (n <= 0) return 0;
    cudaStream_t st = (cudaStream_t)stream;
    if (D <= 256 * 16) rmsnorm_regs_kernel<16><<<n, 256, 0, st>>>((bf16 *)out, x, w, D, eps);
    else if (D <= 256 * 32) rmsnorm_regs_kernel<32><<<n, 256, 0, st>>>((bf16 *)out, x, w, D, eps);
    else rmsnorm_kernel<<<n, 256, 0, st>>>((bf16 *)out, x, w, D, eps);
    LZ_OP_DONE();
}

extern "C" int lz_op_heads(lz_bf16 *qh, lz_bf16 *kh, lz_bf16 *vh, const float *q, const float *k, const float *v, int ld,
                           int n, int H, int KV, int d, int64_t pos0, const int *count, int layout, const float *inv_freq,
                           float *qcap, int c0, int cw, void *stream)
{
    if (d <= 0 || d % 2 || d > 512) return LZ_ATTN_EHEADDIM;
    if (n <= 0) return 0;
    const size_t ldq = ld ? (size_t)ld : (size_t)H * d, ldk = ld ? (size_t)ld : (size_t)KV * d;
    heads_kernel<<<dim3(n, H + 2 * KV), d / 2, 0, (cudaStream_t)stream>>>((bf16 *)qh, (bf16 *)kh, (bf16 *)vh, q, k, v, ldq,
                                                                          ldk, n, H, KV, d, pos0, count, layout, inv_freq,
                                                                          qcap, c0, cw, nullptr, nullptr, 0);
    LZ_OP_DONE();
}

extern "C" int lz_op_heads_own(lz_bf16 *qh, lz_bf16 *kh, lz_bf16 *vh, lz_bf16 *own_k, lz_bf16 *own_v, int N,
                               const float *q, const float *k, const float *v, int ld, int n, int H, int KV, int d,
                               int64_t pos0, const int *count, int layout, const float *inv_freq, void *stream)
{
    if (d <= 0 || d % 2 || d > 512) return LZ_ATTN_EHEADDIM;
    if (!own_k || !own_v || !count) return LZ_ATTN_EARG;
    if (n <= 0) return 0;
    const size_t ldq = ld ? (size_t)ld : (size_t)H * d, ldk = ld ? (size_t)ld : (size_t)KV * d;
    return (int)lz::launch_pdl(heads_kernel, dim3(n, H + 2 * KV), dim3(d / 2), 0, (cudaStream_t)stream, true, (bf16 *)qh,
                               (bf16 *)kh, (bf16 *)vh, q, k, v, ldq, ldk, n, H, KV, d, pos0, count, layout, inv_freq,
                               (float *)nullptr, 0, 0, (bf16 *)own_k, (bf16 *)own_v, N);
}

extern "C" int lz_op_swiglu(lz_bf16 *out, const float *gu, int n, int F, void *stream)
{
    if (n <= 0 || F <= 0) return 0;
    swiglu_kernel<<<1024, 256, 0, (cudaStream_t)stream>>>((bf16 *)out, gu, n, F);
    LZ_OP_DONE();
}

extern "C" int lz_op_silu_mul(lz_bf16 *out, const float *gate, const float *up, size_t count, void *stream)
{
    if (!count) return 0;
    silu_mul_kernel<<<1024, 256, 0, (cudaStream_t)stream>>>((bf16 *)out, gate, up, count);
    LZ_OP_DONE();
}

extern "C" int lz_op_tokens(lz_bf16 *out, const lz_bf16 *oh, int n, int H, int d, void *stream)
{
    if (n <= 0) return 0;
    tokens_kernel<<<dim3(n, H), 128, 0, (cudaStream_t)stream>>>((bf16 *)out, (const bf16 *)oh, n, H, d);
    LZ_OP_DONE();
}

extern "C" int lz_op_own_len(int32_t *qlen, int L, int W, int S, int KV, const int *count, void *stream)
{
    own_len_kernel<<<1, 256, 0, (cudaStream_t)stream>>>(qlen, L, W, S, KV, count);
    LZ_OP_DONE();
}

extern "C" int lz_op_append(lz_bf16 *own, const lz_bf16 *t, int n, int KV, int N, int d, const int *count, void *stream)
{
    if (n <= 0) return 0;
    append_kernel<<<dim3(n, KV), 128, 0, (cudaStream_t)stream>>>((bf16 *)own, (const bf16 *)t, n, N, d, count);
    LZ_OP_DONE();
}

extern "C" int lz_op_own_words(uint64_t *words, int32_t *n_blocks, const int32_t *n_fixed, int LKV, int NB,
                               const int *count, int n, void *stream)
{
    if (LKV <= 0) return 0;
    own_words_kernel<<<(LKV + 255) / 256, 256, 0, (cudaStream_t)stream>>>(words, n_blocks, n_fixed, LKV, NB, count, n);
    LZ_OP_DONE();
}

extern "C" int lz_op_count_add(int *count, int n, void *stream)
{
    bump_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(count, n);
    LZ_OP_DONE();
}

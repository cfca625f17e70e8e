/* lz_gemv.cu - decode-step matrix-vector products (lz_gemv.h): x staged in
 * shared memory once per block (as is, or computed there: rmsnorm, silu gate),
 * each warp streams RPW weight rows at a time in 16-byte loads that skip L1 (U
 * loads a row in flight per lane, so a 256-thread block keeps 32 KB of weights
 * in flight), fp32 dot products reduced across the warp. One launch covers
 * every matrix sharing x: their rows are numbered one after another. The grid
 * is persistent (a few blocks a SM, each warp taking row pairs a grid apart),
 * so x is staged, and an rmsnorm's sum of squares or the silu gate computed,
 * once per block rather than once per 16 rows (once per 16 rows, an 8B decode
 * step's rmsnorm-fused products ran 14% over the plain ones' time, Nsight
 * Compute; once per block the step's products take 4.47-4.55 ms instead of
 * 4.60-4.70, test_gemv --bench).
 * SWIGLU (lz_gemv_rmsnorm_swiglu) pairs a gate row with its up row in one
 * warp and writes bf16(silu(gate) * up) from the epilogue, so the down
 * product stages a plain bf16 row (28 KB at FFN 14,336) instead of every block
 * computing the silu gate from 115 KB of fp32 rows before its first weight
 * load: an 8B decode step 4.51-4.52 ms against 4.62-4.64 with lz_gemv_silu
 * (lazyquery --gpu on the H200, the same call).
 * ROPE (lz_gemv_rmsnorm_rope) pairs the two rows of a rotary pair of q, k or
 * v in one warp and writes the heads and the own rows from the epilogue, so a
 * decode layer has no rotary launch: 4.46-4.47 ms a step against 4.49-4.51
 * with lz_op_heads_own after the product (the same call).
 * Neither launching the products as programmatic dependents nor loading each
 * warp's first weights before x is staged made them faster.
 * CPU reference: lz_gemv_ref.c. */
#include <atomic>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/lz_gemv.h"
#include "kernels/lz_ops.cuh"
#include "base/rope.h"

namespace {

constexpr int WARPS = 8, RPW = 2, U = 4; /* warps a block, rows a warp, loads a row in flight */

/* launch tuning (lz_gemv_tune): persistent blocks per SM for plain / rmsnorm
 * inputs and for the silu gate (which stages 2 x in fp32 a block) */
int tune_bps = 4, tune_bps_silu = 2;

struct Mats {
    const uint4 *w[LZ_GEMV_MAX_MATS];
    float *y[LZ_GEMV_MAX_MATS];
    int end[LZ_GEMV_MAX_MATS]; /* rows of matrices 0..m, cumulated */
    int n;
    __nv_bfloat16 *h; /* SWIGLU: the output, bf16(silu(gate row r) * up row r) */
    lz_gemv_rope rope; /* ROPE: the heads' outputs (lz_gemv_rmsnorm_rope) */
};

/* what a warp's rows become: y rows (beta), bf16(silu(gate) up) (SWIGLU), a rotary pair (ROPE) */
enum { EPI_Y, EPI_SWIGLU, EPI_ROPE };

/* 16 bytes of weights, streamed: no L1 allocation (read once) */
__device__ __forceinline__ uint4 ld_stream(const uint4 *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ float dot2(uint32_t w, uint32_t x, float s)
{
    s = fmaf(__uint_as_float(w << 16), __uint_as_float(x << 16), s);
    return fmaf(__uint_as_float(w & 0xffff0000u), __uint_as_float(x & 0xffff0000u), s);
}

__device__ __forceinline__ float dot8(uint4 w, uint4 x, float s)
{
    return dot2(w.w, x.w, dot2(w.z, x.z, dot2(w.y, x.y, dot2(w.x, x.x, s))));
}

/* x's staging: X_BF16 copies x; X_RMSNORM = bf16(rmsnorm(x0) * x1) (x0 fp32,
 * x1 the norm's weights; the block's sum of squares as lz_op_rmsnorm's);
 * X_SILU = bf16(silu(x0) * x1) (gate, up), as lz_op_silu_mul */
enum { X_BF16, X_RMSNORM, X_SILU };

__device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* ROPE's epilogue: pair t (elements a, b) of head hh (q heads, then k, then v) from its two
 * fp32 dots, as heads_kernel (kernels/lz_ops.cu) writes one row: q and k rotated at pos0 +
 * *count, v as is; k and v also at row *count of the head's own rows */
__device__ __forceinline__ void rope_out(const lz_gemv_rope &r, int hh, int t, int ea, int eb, float x0, float x1)
{
    const int cnt = *r.count;
    const int64_t pos = r.pos0 + cnt;
    __nv_bfloat16 *dst, *own = nullptr;
    if (hh < r.H) dst = reinterpret_cast<__nv_bfloat16 *>(r.qh) + (size_t)hh * r.d;
    else if (hh < r.H + r.KV) {
        dst = reinterpret_cast<__nv_bfloat16 *>(r.kh) + (size_t)(hh - r.H) * r.d;
        own = reinterpret_cast<__nv_bfloat16 *>(r.own_k) + ((size_t)(hh - r.H) * r.N + cnt) * r.d;
    } else {
        dst = reinterpret_cast<__nv_bfloat16 *>(r.vh) + (size_t)(hh - r.H - r.KV) * r.d;
        own = reinterpret_cast<__nv_bfloat16 *>(r.own_v) + ((size_t)(hh - r.H - r.KV) * r.N + cnt) * r.d;
    }
    if (hh < r.H + r.KV) {
        const float ang = (float)pos * r.inv_freq[t];
        lz_rope_rotate_pair(&x0, &x1, cosf(ang), sinf(ang));
    }
    const __nv_bfloat16 b0 = __float2bfloat16_rn(x0), b1 = __float2bfloat16_rn(x1);
    dst[ea] = b0, dst[eb] = b1;
    if (own) own[ea] = b0, own[eb] = b1;
}

/* row r of the launch: its matrix and its row there */
__device__ __forceinline__ const uint4 *row_of(const Mats &a, int r, int in8, int *mat, int *row)
{
    const int m = r < a.end[0] ? 0 : (a.n > 1 && r < a.end[1]) ? 1 : 2;
    *mat = m;
    *row = r - (m == 0 ? 0 : m == 1 ? a.end[0] : a.end[1]);
    const uint4 *w = m == 0 ? a.w[0] : m == 1 ? a.w[1] : a.w[2]; /* selects: no indexed copy of the parameters */
    return w + (size_t)*row * in8;
}

/* SWIGLU (two matrices of equal rows, gate and up): a warp's two rows are row pp of each,
 * and its output is a.h[pp] = bf16(silu(gate) * up), as the silu gate's staging rounds it.
 * ROPE (q, k, v): a warp's two rows are rotary pair pp % (d / 2) of head pp / (d / 2), heads
 * numbered q, then k, then v, written rotated (q, k) or as is (v) as heads_kernel writes them. */
template <int XM, int EPI = EPI_Y>
__global__ void __launch_bounds__(WARPS * 32) gemv_kernel(Mats a, const void *__restrict__ x0, const float *__restrict__ x1,
                                                          float eps, int in8, float beta)
{
    constexpr bool SWIGLU = EPI == EPI_SWIGLU, ROPE = EPI == EPI_ROPE;
    static_assert((!SWIGLU && !ROPE) || RPW == 2, "a gate row and its up row, or a rotary pair, a warp");
    extern __shared__ uint4 xs[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int total = a.n == 1 ? a.end[0] : a.n == 2 ? a.end[1] : a.end[2];
    const int half = a.rope.d / 2;
    const int pairs = SWIGLU ? a.end[0] : ROPE ? a.end[2] / 2 : (total + RPW - 1) / RPW, stride = gridDim.x * WARPS,
              pp0 = blockIdx.x * WARPS + warp;
    const uint4 *wr[RPW];
    int mat[RPW], row[RPW];
    uint4 wv[RPW][U];
    auto rows = [&](int pp) { /* a row past the end repeats the last one; not written */
        if constexpr (SWIGLU) {
            wr[0] = a.w[0] + (size_t)pp * in8, wr[1] = a.w[1] + (size_t)pp * in8;
            return;
        }
        if constexpr (ROPE) { /* mat[0]: the head (of H + 2 KV), row[0], row[1]: the pair's elements */
            const int hh = pp / half, m = hh < a.rope.H ? 0 : hh < a.rope.H + a.rope.KV ? 1 : 2;
            const int hm = hh - (m == 0 ? 0 : m == 1 ? a.rope.H : a.rope.H + a.rope.KV);
            lz_rope_pair(a.rope.layout, a.rope.d, pp - hh * half, &row[0], &row[1]);
            mat[0] = hh;
            const uint4 *w = (m == 0 ? a.w[0] : m == 1 ? a.w[1] : a.w[2]) + (size_t)hm * a.rope.d * in8;
            wr[0] = w + (size_t)row[0] * in8, wr[1] = w + (size_t)row[1] * in8;
            return;
        }
#pragma unroll
        for (int j = 0; j < RPW; j++) wr[j] = row_of(a, min(pp * RPW + j, total - 1), in8, &mat[j], &row[j]);
    };
    auto load = [&](int c0) {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int j = 0; j < RPW; j++) {
                const int c = c0 + 32 * u;
                wv[j][u] = c < in8 ? ld_stream(wr[j] + c) : make_uint4(0, 0, 0, 0);
            }
    };
    if constexpr (XM == X_BF16) {
        for (int c = threadIdx.x; c < in8; c += blockDim.x) xs[c] = reinterpret_cast<const uint4 *>(x0)[c];
    } else {
        const float4 *f = reinterpret_cast<const float4 *>(x0), *w = reinterpret_cast<const float4 *>(x1);
        float r = 0.f;
        if constexpr (XM == X_RMSNORM) {
            __shared__ float part[32];
            r = lz::rms_scale(lz::block_sumsq(reinterpret_cast<const float *>(x0), in8 * 8, part), in8 * 8, eps);
        }
        /* SU columns of a thread loaded at once, then staged (one at a time, each staging waited
         * on its loads: the silu gate's 7 rounds a thread at FFN 14,336); 2 for rmsnorm, whose
         * blocks share a SM 4 at a time (60 registers a thread at most), 4 for the silu gate's 2 */
        constexpr int SU = XM == X_SILU ? 4 : 2;
        for (int c0 = threadIdx.x; c0 < in8; c0 += SU * blockDim.x) {
            float4 p[SU][2], q[SU][2];
#pragma unroll
            for (int s = 0; s < SU; s++) {
                const int c = c0 + s * blockDim.x;
                if (c < in8) p[s][0] = f[2 * c], p[s][1] = f[2 * c + 1], q[s][0] = w[2 * c], q[s][1] = w[2 * c + 1];
            }
#pragma unroll
            for (int s = 0; s < SU; s++) {
                const int c = c0 + s * blockDim.x;
                if (c >= in8) continue;
                const float4 p0 = p[s][0], p1 = p[s][1], q0 = q[s][0], q1 = q[s][1];
                const float a8[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
                const float b8[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
                float v[8];
#pragma unroll
                for (int i = 0; i < 8; i++) v[i] = XM == X_RMSNORM ? a8[i] * r * b8[i] : lz::silu_mul(a8[i], b8[i]);
                xs[c] = make_uint4(pack2(v[0], v[1]), pack2(v[2], v[3]), pack2(v[4], v[5]), pack2(v[6], v[7]));
            }
        }
    }
    __syncthreads();
    for (int pp = pp0; pp < pairs; pp += stride) {
        rows(pp);
        float acc[RPW] = {};
        for (int c0 = lane; c0 < in8; c0 += 32 * U) {
            load(c0);
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + 32 * u;
                if (c < in8) {
                    const uint4 xv = xs[c];
#pragma unroll
                    for (int j = 0; j < RPW; j++) acc[j] = dot8(wv[j][u], xv, acc[j]);
                }
            }
        }
        if constexpr (SWIGLU || ROPE) { /* the warp's two rows together */
            float s[RPW];
#pragma unroll
            for (int j = 0; j < RPW; j++) {
                s[j] = acc[j];
#pragma unroll
                for (int o = 16; o; o >>= 1) s[j] += __shfl_xor_sync(0xffffffffu, s[j], o);
            }
            if (lane == 0) {
                if constexpr (SWIGLU) a.h[pp] = __float2bfloat16_rn(lz::silu_mul(s[0], s[1]));
                else rope_out(a.rope, mat[0], pp - mat[0] * half, row[0], row[1], s[0], s[1]);
            }
            continue;
        }
#pragma unroll
        for (int j = 0; j < RPW; j++) {
            float s = acc[j];
#pragma unroll
            for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (lane == 0 && pp * RPW + j < total) {
                float *y = (mat[j] == 0 ? a.y[0] : mat[j] == 1 ? a.y[1] : a.y[2]) + row[j];
                *y = beta != 0.f ? s + beta * *y : s;
            }
        }
    }
}

} /* namespace */

template <int XM, int EPI = EPI_Y>
static int launch(const lz_gemv_mat *mats, int n_mats, const void *x0, const float *x1, float eps, int in, float beta,
                  void *stream, lz_bf16 *h = NULL, const lz_gemv_rope *rope = NULL)
{
    Mats a = {};
    a.h = reinterpret_cast<__nv_bfloat16 *>(h);
    if (rope) a.rope = *rope;
    a.n = n_mats;
    int total = 0;
    for (int m = 0; m < n_mats; m++) {
        a.w[m] = reinterpret_cast<const uint4 *>(mats[m].w);
        a.y[m] = mats[m].y;
        a.end[m] = total += mats[m].rows;
    }
    /* the current device's SMs, asked once a device (a process may drive unlike GPUs) */
    static std::atomic<int> sms[64];
    int dev, n_sm = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return (int)e;
    if (dev >= 0 && dev < 64) n_sm = sms[dev].load(std::memory_order_relaxed);
    if (!n_sm) {
        if ((e = cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return (int)e;
        if (dev >= 0 && dev < 64) sms[dev].store(n_sm, std::memory_order_relaxed);
    }
    const int per = WARPS * RPW, groups = (total + per - 1) / per;
    const int cap = (XM == X_SILU ? tune_bps_silu : tune_bps) * n_sm, blocks = groups < cap ? groups : cap;
    gemv_kernel<XM, EPI><<<blocks, WARPS * 32, (size_t)in * 2, (cudaStream_t)stream>>>(a, x0, x1, eps, in / 8, beta);
    return (int)cudaGetLastError();
}

extern "C" void lz_gemv_tune(int blocks_per_sm, int silu_blocks_per_sm)
{
    tune_bps = blocks_per_sm > 0 ? blocks_per_sm : 4;
    tune_bps_silu = silu_blocks_per_sm > 0 ? silu_blocks_per_sm : 2;
}

extern "C" int lz_gemv(const lz_gemv_mat *mats, int n_mats, const lz_bf16 *x, int in, float beta, void *stream)
{
    int rc = lz_gemv_check(mats, n_mats, x, in);
    return rc ? rc : launch<X_BF16>(mats, n_mats, x, NULL, 0.f, in, beta, stream);
}

extern "C" int lz_gemv_rmsnorm(const lz_gemv_mat *mats, int n_mats, const float *x, const float *norm_w, float eps, int in,
                               float beta, void *stream)
{
    int rc = lz_gemv_check(mats, n_mats, x, in);
    if (!rc && !norm_w) rc = LZ_ATTN_EARG;
    return rc ? rc : launch<X_RMSNORM>(mats, n_mats, x, norm_w, eps, in, beta, stream);
}

extern "C" int lz_gemv_silu(const lz_gemv_mat *mats, int n_mats, const float *gate, const float *up, int in, float beta,
                            void *stream)
{
    int rc = lz_gemv_check(mats, n_mats, gate, in);
    if (!rc && !up) rc = LZ_ATTN_EARG;
    return rc ? rc : launch<X_SILU>(mats, n_mats, gate, up, 0.f, in, beta, stream);
}

extern "C" int lz_gemv_rmsnorm_swiglu(const lz_bf16 *w_gate, const lz_bf16 *w_up, int rows, const float *x,
                                      const float *norm_w, float eps, int in, lz_bf16 *h, void *stream)
{
    int rc = lz_gemv_swiglu_check(w_gate, w_up, rows, x, norm_w, in, h);
    if (rc) return rc;
    /* the rows' y pointers are not written (SWIGLU writes h); any non-NULL pointer passes the count */
    const lz_gemv_mat m[2] = {{w_gate, (float *)h, rows}, {w_up, (float *)h, rows}};
    return launch<X_RMSNORM, EPI_SWIGLU>(m, 2, x, norm_w, eps, in, 0.f, stream, h);
}

extern "C" int lz_gemv_rmsnorm_rope(const lz_gemv_rope *p, const float *x, const float *norm_w, float eps, int in,
                                    void *stream)
{
    int rc = lz_gemv_rope_check(p, x, norm_w, in);
    if (rc) return rc;
    /* the rows' y pointers are not written (ROPE writes the heads) */
    float *unused = reinterpret_cast<float *>(p->qh);
    const lz_gemv_mat m[3] = {{p->wq, unused, p->H * p->d}, {p->wk, unused, p->KV * p->d}, {p->wv, unused, p->KV * p->d}};
    return launch<X_RMSNORM, EPI_ROPE>(m, 3, x, norm_w, eps, in, 0.f, stream, NULL, p);
}

/* lz_kvmass.cu - KV eviction's attention masses on the GPU (lz_kvmass.h):
 * one CTA per (layer, kv group), one warp per head of the group, a lane per
 * window row (32 rows at a time). The warp streams the keys its rows saw
 * through 32-key tiles in shared memory (loaded by the whole warp, row
 * after row, coalesced) twice: the row maxima and sums, then each
 * candidate's probability summed over the warp's rows (a shuffle
 * reduction) and added by lane 0 in key order: deterministic, no atomics.
 * The work is small (an 8B model's 160-token document with a 32-row
 * window: 0.8 GFLOP) next to the forward pass it follows.
 *
 * Legend: as lz_kvmass.h; D = head_dim (64 or 128 here), G <= 8 here.
 */
#include <cuda_bf16.h>
#include <math.h>

#include "kernels/lz_kvmass.h"
#include "kernels/lz_mma.cuh"

namespace {

template <int D>
__device__ __forceinline__ float dot_row(const float2 (&q)[D / 2], const __nv_bfloat162 *k)
{
    float a = 0.f, b = 0.f;
#pragma unroll
    for (int e = 0; e < D / 2; e++) {
        const float2 kf = __bfloat1622float2(k[e]);
        a = fmaf(q[e].x, kf.x, a);
        b = fmaf(q[e].y, kf.y, b);
    }
    return a + b;
}

template <int D>
__global__ void __launch_bounds__(256) kvmass_kernel(const __grid_constant__ lz_kvmass_params p)
{
    extern __shared__ __align__(16) unsigned char smem[];
    const int G = p.H / p.KV, lane = threadIdx.x & 31, hh = threadIdx.x >> 5;
    const int l = blockIdx.x / p.KV, g = blockIdx.x % p.KV;
    const int s = p.n_prefix, n = p.n, w = p.w, m = p.m ? p.m : n - w;
    constexpr int P = D / 2; /* bf16 pairs a key */
    __nv_bfloat162 *kt = reinterpret_cast<__nv_bfloat162 *>(smem) + (size_t)hh * 32 * P;
    const float scale = 1.0f / sqrtf((float)D);
    float *acc = p.mass + (((size_t)l * p.KV + g) * G + hh) * m;
    const uint4 *kd = reinterpret_cast<const uint4 *>(p.k + ((size_t)l * p.KV + g) * p.k_stride * D);
    const uint4 *kp = p.pk ? reinterpret_cast<const uint4 *>(p.pk + ((size_t)l * p.KV + g) * p.pk_stride * D) : nullptr;
    constexpr int U = D / 8; /* uint4 a key */
    /* keys k0 .. k0 + 31 (those below end) into the warp's tile */
    auto load_tile = [&](int k0, int end) {
        __syncwarp();
        for (int idx = lane; idx < 32 * U; idx += 32) {
            const int r = idx / U, c = idx % U, i = k0 + r;
            if (i < end)
                reinterpret_cast<uint4 *>(kt)[idx] = i < s ? kp[(size_t)i * U + c] : kd[(size_t)(i - s) * U + c];
        }
        __syncwarp();
    };
    for (int t0 = 0; t0 < w; t0 += 32) {
        const int t = t0 + lane;
        const bool row = t < w;
        const int vis = row ? s + n - w + t + 1 : 0;                     /* keys this row saw */
        const int end = s + n - w + (w - 1 < t0 + 31 ? w - 1 : t0 + 31) + 1; /* ... the last row of the 32 */
        float2 q[P];
        const float2 *qg = reinterpret_cast<const float2 *>(p.q + (((size_t)l * w + (row ? t : 0)) * p.H + g * G + hh) * D);
#pragma unroll
        for (int e = 0; e < P; e++) q[e] = row ? qg[e] : make_float2(0.f, 0.f);
        float mx = -INFINITY, sum = 0.f;
        for (int k0 = 0; k0 < end; k0 += 32) { /* the row's maximum, then its sum */
            load_tile(k0, end);
            const int nk = end - k0 < 32 ? end - k0 : 32;
            for (int kk = 0; kk < nk; kk++) {
                const float x = dot_row<D>(q, kt + kk * P) * scale;
                if (k0 + kk < vis) mx = fmaxf(mx, x);
            }
        }
        for (int k0 = 0; k0 < end; k0 += 32) {
            load_tile(k0, end);
            const int nk = end - k0 < 32 ? end - k0 : 32;
            for (int kk = 0; kk < nk; kk++) {
                const float x = dot_row<D>(q, kt + kk * P) * scale;
                if (k0 + kk < vis) sum += expf(x - mx);
            }
        }
        const float inv = row ? 1.0f / sum : 0.f;
        for (int k0 = 0; k0 < end; k0 += 32) { /* the candidates' probabilities, summed over the rows */
            load_tile(k0, end);
            const int nk = end - k0 < 32 ? end - k0 : 32;
            for (int kk = 0; kk < nk; kk++) {
                const int i = k0 + kk;
                if (i < s || i - s >= m) continue; /* warp-uniform */
                const float x = dot_row<D>(q, kt + kk * P) * scale;
                float pr = i < vis ? expf(x - mx) * inv : 0.f;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) pr += __shfl_xor_sync(0xffffffffu, pr, o);
                if (lane == 0) acc[i - s] += pr;
            }
        }
    }
}

template <int D> int launch(const lz_kvmass_params *p, cudaStream_t st)
{
    const int G = p->H / p->KV;
    const size_t smem = (size_t)G * 32 * D * 2;
    static std::atomic<unsigned long long> attr{0}; /* 8 warps at d = 128: 64 KB */
    if (int e = lz::max_smem_once(kvmass_kernel<D>, 8 * 32 * D * 2, attr)) return e;
    kvmass_kernel<D><<<p->L * p->KV, G * 32, smem, st>>>(*p);
    return (int)cudaGetLastError();
}

} /* namespace */

extern "C" int lz_kvmass(const lz_kvmass_params *p, void *stream)
{
    int rc = lz_kvmass_check(p);
    if (rc) return rc;
    if (p->d != 64 && p->d != 128) return LZ_ATTN_EHEADDIM;
    const int G = p->H / p->KV, m = p->m ? p->m : p->n - p->w;
    if (G > 8) return LZ_ATTN_EARG; /* a warp a head, the query row in registers: 256 threads at most */
    cudaStream_t st = (cudaStream_t)stream;
    cudaError_t e = cudaMemsetAsync(p->mass, 0, (size_t)p->L * p->KV * G * m * sizeof(float), st);
    if (e != cudaSuccess) return (int)e;
    return p->d == 64 ? launch<64>(p, st) : launch<128>(p, st);
}

/* lz_fp8_quant.cu - fp8 e4m3 quantisation of K/V groups on the GPU
 * (lz_fp8_quant.h): one CTA a group; a pass for the absolute maximum (and
 * any NaN / Inf: bf16 exponent all ones), then a pass converting x * (1 /
 * scale) by the hardware's cvt (nearest even, saturating finite: base/fp8.h's
 * rule). 16-byte loads when the groups allow them. IEEE division and
 * products (no fast math), so the scales and bytes equal the CPU's. */
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <math.h>

#include "kernels/lz_fp8_quant.h"

namespace {

constexpr int THREADS = 256;

__device__ __forceinline__ uint8_t to_e4m3(float v)
{
    return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

__global__ void __launch_bounds__(THREADS) quant_kernel(const __grid_constant__ lz_fp8_quant_params p, int vec)
{
    __shared__ float red[THREADS / 32];
    __shared__ int nonfinite[THREADS / 32];
    const int g = blockIdx.x, t = threadIdx.x;
    const uint16_t *x = reinterpret_cast<const uint16_t *>(p.x) + (size_t)g * p.len;
    uint8_t *y = p.y + (size_t)g * p.len;
    float amax = 0.f;
    int bad = 0;
    if (vec) {
        const uint4 *x4 = reinterpret_cast<const uint4 *>(x);
        for (int64_t i = t; i < p.len / 8; i += THREADS) {
            const uint4 u = x4[i];
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                bad |= (w[j] & 0x7f80u) == 0x7f80u || (w[j] & 0x7f800000u) == 0x7f800000u;
                amax = fmaxf(amax, fmaxf(fabsf(__uint_as_float(w[j] << 16)), fabsf(__uint_as_float(w[j] & 0xffff0000u))));
            }
        }
    } else {
        for (int64_t i = t; i < p.len; i += THREADS) {
            const uint32_t b = x[i];
            bad |= (b & 0x7f80u) == 0x7f80u;
            amax = fmaxf(amax, fabsf(__uint_as_float(b << 16)));
        }
    }
    for (int o = 16; o; o >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        bad |= __shfl_xor_sync(0xffffffffu, bad, o);
    }
    if ((t & 31) == 0) red[t >> 5] = amax, nonfinite[t >> 5] = bad;
    __syncthreads();
    amax = 0.f, bad = 0;
#pragma unroll
    for (int w = 0; w < THREADS / 32; w++) amax = fmaxf(amax, red[w]), bad |= nonfinite[w];
    const float scale = amax > 0.f && isfinite(amax) ? __fdiv_rn(amax, 448.0f) : 1.0f, inv = __frcp_rn(scale);
    if (t == 0) {
        p.scales[g] = scale;
        if (bad) { /* *bad = min over the bad groups of g + 1, where 0 means none yet */
            int seen = *(volatile int *)p.bad;
            while (seen == 0 || g + 1 < seen) {
                const int was = atomicCAS(p.bad, seen, g + 1);
                if (was == seen) break;
                seen = was;
            }
        }
    }
    if (vec) {
        const uint4 *x4 = reinterpret_cast<const uint4 *>(x);
        uint2 *y8 = reinterpret_cast<uint2 *>(y);
        for (int64_t i = t; i < p.len / 8; i += THREADS) {
            const uint4 u = x4[i];
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
            uint32_t o[2] = {0, 0};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint32_t lo = to_e4m3(__fmul_rn(__uint_as_float(w[j] << 16), inv));
                const uint32_t hi = to_e4m3(__fmul_rn(__uint_as_float(w[j] & 0xffff0000u), inv));
                o[j >> 1] |= (lo | hi << 8) << (16 * (j & 1));
            }
            y8[i] = make_uint2(o[0], o[1]);
        }
    } else {
        for (int64_t i = t; i < p.len; i += THREADS) y[i] = to_e4m3(__fmul_rn(__uint_as_float((uint32_t)x[i] << 16), inv));
    }
}

} // namespace

extern "C" int lz_fp8_quant(const lz_fp8_quant_params *p, void *stream)
{
    const int rc = lz_fp8_quant_check(p);
    if (rc) return rc;
    if (!p->n_groups) return LZ_ATTN_OK;
    /* 8 elements a 16-byte load: every group's start aligned when len is a multiple of 8 */
    const int vec = p->len % 8 == 0 && ((uintptr_t)p->x & 15) == 0 && ((uintptr_t)p->y & 7) == 0;
    quant_kernel<<<p->n_groups, THREADS, 0, (cudaStream_t)stream>>>(*p, vec);
    return (int)cudaGetLastError();
}

/* lz_rerotate.cu - the materialising kernel of `block` mode (lz_rerotate.h):
 * dst = R(offset) * src for every row, bf16 in and out, fp32 math through
 * base/rope.h; or e4m3 in and out (p.src8): the rotated values times
 * LZ_REROTATE_FP8_SHRINK rounded back to e4m3 (round to nearest even,
 * saturating), the scales, when given, times LZ_REROTATE_FP8_GROWTH. Each CTA
 * computes the d/2 cos/sin of the offset once into shared memory and rotates
 * 64 rows with one thread per pair.
 *
 * Legend: N = rows, d = head_dim (even, <= 256).
 */
#include "kernels/lz_fp8_tile.cuh"
#include "kernels/lz_mma.cuh"
#include "kernels/lz_rerotate.h"
#include "base/rope.h"

namespace {

constexpr int RR_ROWS = 64;

template <bool FP8>
__global__ void __launch_bounds__(256)
    rerotate_kernel(const __grid_constant__ lz_rerotate_params p)
{
    __shared__ float cs[128], sn[128];
    const int d = p.head_dim, half = d / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float ang = (float)p.offset * p.inv_freq[i];
        cs[i] = cosf(ang);
        sn[i] = sinf(ang);
    }
    if (FP8 && blockIdx.x == 0)
        for (int i = threadIdx.x; i < p.n_scales; i += blockDim.x) p.scale8_out[i] = p.scale8_in[i] * LZ_REROTATE_FP8_GROWTH;
    __syncthreads();
    const __nv_bfloat16 *src = reinterpret_cast<const __nv_bfloat16 *>(p.src);
    __nv_bfloat16 *dst = reinterpret_cast<__nv_bfloat16 *>(p.dst);
    int64_t r0 = (int64_t)blockIdx.x * RR_ROWS;
    for (int e = threadIdx.x; e < RR_ROWS * half; e += blockDim.x) {
        int64_t r = r0 + e / half;
        int i = e % half;
        if (r >= p.n_rows) break;
        int a, b;
        lz_rope_pair(p.rope_layout, d, i, &a, &b);
        if constexpr (FP8) {
            float x0 = lz::e4m3_f32(p.src8[r * d + a]), x1 = lz::e4m3_f32(p.src8[r * d + b]);
            lz_rope_rotate_pair(&x0, &x1, cs[i], sn[i]);
            const uint16_t y = lz::f32x2_e4m3(x0 * LZ_REROTATE_FP8_SHRINK, x1 * LZ_REROTATE_FP8_SHRINK);
            p.dst8[r * d + a] = (uint8_t)(y & 0xff);
            p.dst8[r * d + b] = (uint8_t)(y >> 8);
        } else {
            float x0 = __bfloat162float(src[r * d + a]), x1 = __bfloat162float(src[r * d + b]);
            lz_rope_rotate_pair(&x0, &x1, cs[i], sn[i]);
            dst[r * d + a] = __float2bfloat16_rn(x0);
            dst[r * d + b] = __float2bfloat16_rn(x1);
        }
    }
}

} /* namespace */

extern "C" int lz_rerotate(const lz_rerotate_params *p, void *stream)
{
    int rc = lz_rerotate_check(p);
    if (rc) return rc;
    int64_t blocks = (p->n_rows + RR_ROWS - 1) / RR_ROWS;
    if (blocks > 0x7fffffff) return LZ_ATTN_EARG;
    if (p->src8 && p->n_scales > 0 && blocks == 0) blocks = 1; /* the scales alone */
    if (blocks == 0) return LZ_ATTN_OK;
    if (p->src8) rerotate_kernel<true><<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(*p);
    else rerotate_kernel<false><<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(*p);
    return (int)cudaGetLastError();
}

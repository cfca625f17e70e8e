/* lz_rerotate.cu - the materialising kernel of `block` mode (lz_rerotate.h):
 * dst = R(offset) * src for every row, bf16 in and out, fp32 math through
 * base/rope.h. Each CTA computes the d/2 cos/sin of the offset once into
 * shared memory and rotates 64 rows with one thread per pair.
 *
 * Legend: N = rows, d = head_dim (even, <= 256).
 */
#include "kernels/lz_mma.cuh"
#include "kernels/lz_rerotate.h"
#include "base/rope.h"

namespace {

constexpr int RR_ROWS = 64;

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
        float x0 = __bfloat162float(src[r * d + a]), x1 = __bfloat162float(src[r * d + b]);
        lz_rope_rotate_pair(&x0, &x1, cs[i], sn[i]);
        dst[r * d + a] = __float2bfloat16_rn(x0);
        dst[r * d + b] = __float2bfloat16_rn(x1);
    }
}

} /* namespace */

extern "C" int lz_rerotate(const lz_rerotate_params *p, void *stream)
{
    if (!p || !p->dst || !p->src || !p->inv_freq || p->n_rows < 0) return LZ_ATTN_EARG;
    if (p->head_dim <= 0 || p->head_dim > 256 || p->head_dim % 2) return LZ_ATTN_EHEADDIM;
    if (p->rope_layout != LZ_ROPE_ADJACENT && p->rope_layout != LZ_ROPE_HALF) return LZ_ATTN_ELAYOUT;
    if (p->n_rows == 0) return LZ_ATTN_OK;
    int64_t blocks = (p->n_rows + RR_ROWS - 1) / RR_ROWS;
    if (blocks > 0x7fffffff) return LZ_ATTN_EARG;
    rerotate_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(*p);
    return (int)cudaGetLastError();
}

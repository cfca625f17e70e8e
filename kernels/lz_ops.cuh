/* lz_ops.cuh - device pieces shared by the forward pass's small kernels
 * (lz_ops.cu) and the decode products that fuse them (lz_gemv.cu), so a
 * fused product computes its input bit for bit as the separate kernel did:
 * the block-wide sum of squares of rmsnorm and the silu gate. CUDA C++ only. */
#ifndef LZ_OPS_CUH
#define LZ_OPS_CUH

#include <cuda_bf16.h>

namespace lz {

/* Sum of x[j]^2, j < D, over the whole block (every thread gets it): thread
 * t sums j = t, t + blockDim, ..., then the warps, then the warp sums.
 * part: 32 floats of shared memory. */
__device__ __forceinline__ float block_sumsq(const float *x, int D, float *part)
{
    float ss = 0.f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) ss += x[j] * x[j];
    for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        ss = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.f;
        for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (threadIdx.x == 0) part[0] = ss;
    }
    __syncthreads();
    return part[0];
}

/* rmsnorm's scale of a row of D values whose squares sum to ss */
__device__ __forceinline__ float rms_scale(float ss, int D, float eps) { return 1.0f / sqrtf(ss / (float)D + eps); }

/* silu(g) * u, as the FFN's gate */
__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

} /* namespace lz */
#endif /* LZ_OPS_CUH */

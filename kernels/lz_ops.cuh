/* lz_ops.cuh - device pieces shared by the forward pass's small kernels
 * (lz_ops.cu) and the decode products that fuse them (lz_gemv.cu), so a
 * fused product computes its input bit for bit as the separate kernel did:
 * the block-wide sum of squares of rmsnorm and the silu gate; and the
 * programmatic dependent launch both use. CUDA C++ only. */
#ifndef LZ_OPS_CUH
#define LZ_OPS_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace lz {

/* Programmatic dependent launch (sm_90; no-ops before): a kernel launched
 * with launch_pdl may start while the kernel before it in the stream still
 * runs; it must call pdl_wait() before it reads what that kernel wrote (or
 * writes what it reads). pdl_wait returns once the previous grid has finished
 * and its stores are visible; everything before it may only read memory no
 * kernel of the step writes (weights). pdl_trigger(): this block lets the next
 * dependent grid be scheduled (all blocks triggered or exited). */
__device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

/* kern<<<grid, block, smem, st>>>(args...), as a programmatic dependent of the
 * stream's previous kernel when pdl (captured into CUDA graphs as a
 * programmatic edge). Returns the launch's cudaError_t. */
template <class... K, class... A>
static cudaError_t launch_pdl(void (*kern)(K...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, bool pdl,
                              A... args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kern, ((K)args)...);
}

/* Sum of x[j]^2, j < D, over the whole block (every thread gets it): thread
 * t sums j = t, t + blockDim, ... in that order, then the warps, then the warp sums.
 * part: 32 floats of shared memory. */
__device__ __forceinline__ float block_sum(float ss, float *part);
__device__ __forceinline__ float block_sumsq(const float *x, int D, float *part)
{
    /* 8 loads of a thread issued at once, then summed in order (a plain loop waits on one load
     * after another: its latency, not the bytes, is what the fused products' staging cost) */
    constexpr int K = 8;
    float ss = 0.f;
    for (int j0 = threadIdx.x; j0 < D; j0 += K * blockDim.x) {
        float v[K];
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int j = j0 + k * blockDim.x;
            v[k] = j < D ? x[j] : 0.f;
        }
#pragma unroll
        for (int k = 0; k < K; k++)
            if (j0 + k * blockDim.x < D) ss += v[k] * v[k];
    }
    return block_sum(ss, part);
}

/* The sum of every thread's ss over the block, as block_sumsq adds its threads' sums (every
 * thread gets it): the warps, then the warp sums. part: 32 floats of shared memory. */
__device__ __forceinline__ float block_sum(float ss, float *part)
{
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

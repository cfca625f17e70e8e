/* cta_clock_demo.cu - cta_clock.cuh on a small kernel of three phases (a tile
 * copied into shared memory, a reduction over it, a store), so that the
 * instrumentation can be tried before it goes into a copy of a kernel under
 * study. Standalone (dev/ only; not built by make).
 *   build (repo root): nvcc -O3 -std=c++17 -I. -arch=sm_90a dev/cuda/cta_clock_demo.cu -o build/cta_clock_demo
 *   run (GPU machine): build/cta_clock_demo [CTAs, default 1024]
 */
#include <stdio.h>
#include <stdlib.h>

#include "dev/cuda/cta_clock.cuh"
#include "tests/cuda/cuda_check.h"

__device__ CtaClock g_clk[CTA_CLOCK_CTAS];

__global__ void demo_kernel(const float *x, float *y, int per_cta)
{
    CTA_CLOCK_BEGIN(c);
    extern __shared__ float tile[];
    const float *src = x + (size_t)blockIdx.x * per_cta;
    for (int i = threadIdx.x; i < per_cta; i += blockDim.x) tile[i] = src[i];
    __syncthreads();
    CTA_CLOCK_MARK(c, 1);
    float s = 0.f;
    for (int i = threadIdx.x; i < per_cta; i += blockDim.x) s += tile[i] * tile[(i * 7) % per_cta];
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    CTA_CLOCK_MARK(c, 2);
    if ((threadIdx.x & 31) == 0) atomicAdd(&y[blockIdx.x], s);
    CTA_CLOCK_END(c, g_clk, 4);
}

int main(int argc, char **argv)
{
    const int n_ctas = argc > 1 ? atoi(argv[1]) : 1024, per_cta = 8192;
    float *x, *y;
    CK(cudaMalloc(&x, sizeof(float) * n_ctas * per_cta));
    CK(cudaMalloc(&y, sizeof(float) * n_ctas));
    CK(cudaMemset(x, 0, sizeof(float) * n_ctas * per_cta));
    CK(cudaMemset(y, 0, sizeof(float) * n_ctas));
    CK(cudaFuncSetAttribute(demo_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, per_cta * 4));
    const char *names[] = {"", "tile loaded", "reduced", "stored"};
    for (int run = 0; run < 3; run++) { /* the first launch is cold */
        demo_kernel<<<n_ctas, 256, per_cta * 4>>>(x, y, per_cta);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        printf("launch %d: ", run);
        CK((cudaError_t)cta_clock_report(g_clk, n_ctas, names, 4));
    }
    CK(cudaFree(x));
    CK(cudaFree(y));
    return 0;
}

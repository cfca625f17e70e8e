/* cuda_check.h - CK(call): exit(2) with file, line, call and the CUDA error
 * text when a CUDA runtime call fails; lz_graph_ms, one timed graph replay;
 * lz_copy_tbs, the copy-rate bound.
 * Shared by the GPU tests (tests/cuda/) and the kernel benchmark
 * (bench/kernels/). */
#ifndef LZ_CUDA_CHECK_H
#define LZ_CUDA_CHECK_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                           \
        }                                                                                      \
    } while (0)

/* Milliseconds of one replay of graph ge on stream st, between events a and b. */
static inline float lz_graph_ms(cudaGraphExec_t ge, cudaStream_t st, cudaEvent_t a, cudaEvent_t b)
{
    CK(cudaEventRecord(a, st));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(b, st));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

/* Device-to-device copy rate of 1 GiB in TB/s (bytes read + written): plain
 * stream copies between events (a copy captured in a graph takes the copy
 * engines, slower), median of 20 after 3 warm-ups. The bandwidth bound the
 * kernel benchmarks compare with. */
static inline double lz_copy_tbs(void)
{
    const size_t n = (size_t)1 << 30;
    void *x, *y;
    CK(cudaMalloc(&x, n));
    CK(cudaMalloc(&y, n));
    CK(cudaMemset(x, 1, n));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    float t[20];
    for (int i = 0; i < 23; i++) {
        CK(cudaEventRecord(a));
        CK(cudaMemcpyAsync(y, x, n, cudaMemcpyDeviceToDevice));
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (i >= 3) t[i - 3] = ms;
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    CK(cudaFree(x));
    CK(cudaFree(y));
    for (int i = 0; i < 20; i++) /* sort for the median */
        for (int j = i + 1; j < 20; j++)
            if (t[j] < t[i]) { float s = t[i]; t[i] = t[j]; t[j] = s; }
    return 2.0 * n / (t[10] * 1e-3) / 1e12;
}

#endif /* LZ_CUDA_CHECK_H */

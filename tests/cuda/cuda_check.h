/* cuda_check.h - CK(call): exit(2) with file, line, call and the CUDA error
 * text when a CUDA runtime call fails. Shared by the GPU test
 * (tests/cuda/test_kernels.cu) and the kernel benchmark (bench/kernels/). */
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

#endif /* LZ_CUDA_CHECK_H */

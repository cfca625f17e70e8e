/* cublas_shapes.cu - what the GPU forward pass's cuBLAS products cost
 * (gpu/llama_cuda.cu), two measurements:
 *
 *   cublas_shapes first D O   the host time of cublasGemmEx (bf16 x bf16 ->
 *       fp32, the pass's call) for one weight of O x D at row counts M from 16
 *       to 1,536: the first call of a new shape (cuBLAS picks a kernel; more
 *       when the process has not used that kernel yet), three more calls, and
 *       20 queued calls with and without waiting for the GPU. It showed why the
 *       pass rounds its rows up to a multiple of 64 (gemm_rows).
 *   cublas_shapes products    the GPU time (CUDA events, 20 calls) of an 8B
 *       model's products at 1,152, 1,536 and 1,792 rows, fp32 or bf16 output:
 *       q / o, k / v, q|k|v as one product, gate, gate|up as one, down. It
 *       showed why the pass computes q|k|v and gate|up as one product each.
 *
 * Build: make cuda (build/cuda/cublas_shapes). Inputs are zeros: the tensor
 * cores draw less power on them, so absolute TFLOP/s are upper figures; the
 * comparisons are between shapes of one run.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static cublasStatus_t gemm(cublasHandle_t h, void *y, cudaDataType_t yt, const __nv_bfloat16 *x,
                           const __nv_bfloat16 *w, int M, int K, int N)
{
    const float alpha = 1.f, beta = 0.f;
    return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w, CUDA_R_16BF, K, x, CUDA_R_16BF, K, &beta, y, yt,
                        N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

static int first_use(cublasHandle_t h, cudaStream_t st, int D, int O)
{
    __nv_bfloat16 *x, *w;
    float *y;
    if (cudaMalloc(&x, (size_t)4096 * D * 2) || cudaMalloc(&w, (size_t)O * D * 2) || cudaMalloc(&y, (size_t)4096 * O * 4))
        return 1;
    cudaMemset(x, 0, (size_t)4096 * D * 2);
    cudaMemset(w, 0, (size_t)O * D * 2);
    const int Ms[] = {16, 17, 33, 64, 200, 512, 513, 674, 675, 1024, 1510, 1511, 1536};
    for (int mi = 0; mi < (int)(sizeof Ms / sizeof *Ms); mi++) {
        const int M = Ms[mi];
        double t[4];
        for (int r = 0; r < 4; r++) {
            cudaStreamSynchronize(st);
            const double t0 = now_s();
            if (gemm(h, y, CUDA_R_32F, x, w, M, D, O) != CUBLAS_STATUS_SUCCESS) return 1;
            t[r] = now_s() - t0;
        }
        cudaStreamSynchronize(st);
        const double t0 = now_s();
        for (int r = 0; r < 20; r++) gemm(h, y, CUDA_R_32F, x, w, M, D, O);
        const double queued = (now_s() - t0) / 20;
        cudaStreamSynchronize(st);
        const double done = (now_s() - t0) / 20;
        printf("D %5d O %5d M %5d: host us, first call %.1f, then %.1f %.1f %.1f; 20 queued %.1f us a call on the host, "
               "%.1f with the GPU\n",
               D, O, M, 1e6 * t[0], 1e6 * t[1], 1e6 * t[2], 1e6 * t[3], 1e6 * queued, 1e6 * done);
    }
    cudaFree(x);
    cudaFree(w);
    cudaFree(y);
    return 0;
}

static int products(cublasHandle_t h, cudaStream_t st)
{
    const struct { int K, N; const char *name; } sh[] = {{4096, 4096, "q / o"},      {4096, 1024, "k / v"},
                                                          {4096, 6144, "q|k|v"},     {4096, 14336, "gate"},
                                                          {4096, 28672, "gate|up"},  {14336, 4096, "down"}};
    const int Ms[] = {1152, 1536, 1792};
    __nv_bfloat16 *x, *w;
    void *y;
    if (cudaMalloc(&x, (size_t)4096 * 14336 * 2) || cudaMalloc(&w, (size_t)28672 * 4096 * 2) ||
        cudaMalloc(&y, (size_t)4096 * 28672 * 4))
        return 1;
    cudaMemset(x, 0, (size_t)4096 * 14336 * 2);
    cudaMemset(w, 0, (size_t)28672 * 4096 * 2);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int mi = 0; mi < 3; mi++)
        for (int s = 0; s < (int)(sizeof sh / sizeof *sh); s++)
            for (int bf = 0; bf < 2; bf++) {
                const int M = Ms[mi], K = sh[s].K, N = sh[s].N;
                const cudaDataType_t yt = bf ? CUDA_R_16BF : CUDA_R_32F;
                for (int r = 0; r < 3; r++)
                    if (gemm(h, y, yt, x, w, M, K, N) != CUBLAS_STATUS_SUCCESS) return 1;
                cudaEventRecord(a, st);
                for (int r = 0; r < 20; r++) gemm(h, y, yt, x, w, M, K, N);
                cudaEventRecord(b, st);
                cudaEventSynchronize(b);
                float ms;
                cudaEventElapsedTime(&ms, a, b);
                ms /= 20;
                printf("M %4d %-8s K %5d N %5d out %s: %7.1f us  %5.0f TFLOP/s\n", M, sh[s].name, K, N, bf ? "bf16" : "fp32",
                       1e3 * ms, 2.0 * M * N * K / (ms * 1e-3) / 1e12);
            }
    cudaFree(x);
    cudaFree(w);
    cudaFree(y);
    return 0;
}

int main(int argc, char **argv)
{
    const int first = argc == 4 && !strcmp(argv[1], "first");
    if (!first && !(argc == 2 && !strcmp(argv[1], "products"))) {
        fprintf(stderr, "usage: cublas_shapes first D O | cublas_shapes products\n");
        return 2;
    }
    cublasHandle_t h;
    cudaStream_t st;
    void *ws;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS || cudaStreamCreate(&st) != cudaSuccess ||
        cudaMalloc(&ws, (size_t)32 << 20) != cudaSuccess) {
        fprintf(stderr, "cublas_shapes: no GPU or no cuBLAS\n");
        return 1;
    }
    cublasSetStream(h, st);
    cublasSetWorkspace(h, ws, (size_t)32 << 20); /* as the forward pass: no allocation inside the calls */
    const int rc = first ? first_use(h, st, atoi(argv[2]), atoi(argv[3])) : products(h, st);
    if (rc) fprintf(stderr, "cublas_shapes: a CUDA or cuBLAS call failed\n");
    return rc;
}

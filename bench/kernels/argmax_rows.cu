/* argmax_rows.cu - what the greedy tokens of a decode pass cost (kernels/lz_argmax.h), at Llama
 * 3's vocabulary (128,256) for 1, 8, 32 and 64 rows of fp32 logits, three ways:
 *   device   lz_argmax (with a 3-id ban list), CUDA events over 50 launches, median of 5;
 *   copy     a device-to-device copy of the rows' bytes (the bound: the rows read once);
 *   host     the path it replaced: the rows copied to pinned host memory, then
 *            lz_sample_argmax on one host thread a row (wall time, median of 5).
 * Build: make cuda (build/cuda/argmax_rows). Usage: argmax_rows (on the GPU machine). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/lz_argmax.h"
extern "C" {
#include "model/sampler.h" /* plain C, no guards of its own */
}

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } \
    } while (0)

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int by_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median5(double *v)
{
    qsort(v, 5, sizeof *v, by_double);
    return v[2];
}

int main(void)
{
    const int V = 128256, rows_list[4] = {1, 8, 32, 64}, reps = 50;
    const size_t max = (size_t)64 * V;
    float *h = (float *)malloc(max * sizeof(float)), *d, *d2, *pin;
    unsigned s = 12345;
    for (size_t i = 0; i < max; i++) s = s * 1664525u + 1013904223u, h[i] = (float)(s >> 8) / 16777216.0f * 20.f - 10.f;
    int *next, *ban, hban[4] = {3, 128001, 128008, 128009};
    CK(cudaMalloc((void **)&d, max * sizeof(float)));
    CK(cudaMalloc((void **)&d2, max * sizeof(float)));
    CK(cudaMallocHost((void **)&pin, max * sizeof(float)));
    CK(cudaMalloc((void **)&next, 2 * 64 * sizeof(int)));
    CK(cudaMalloc((void **)&ban, sizeof hban));
    CK(cudaMemcpy(d, h, max * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ban, hban, sizeof hban, cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    printf("| rows | device lz_argmax | GB/s | device-to-device copy of the rows | host: copy + lz_sample_argmax |\n"
           "|---|---|---|---|---|\n");
    for (int k = 0; k < 4; k++) {
        const int R = rows_list[k];
        const size_t bytes = (size_t)R * V * sizeof(float);
        double dev[5], cp[5], host[5];
        for (int t = 0; t < 5; t++) {
            float ms;
            CK(cudaEventRecord(e0));
            for (int r = 0; r < reps; r++)
                if (lz_argmax(next, d, R, V, V, ban, NULL)) { fprintf(stderr, "lz_argmax failed\n"); return 1; }
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms, e0, e1));
            dev[t] = 1e3 * ms / reps;
            CK(cudaEventRecord(e0));
            for (int r = 0; r < reps; r++) CK(cudaMemcpyAsync(d2, d, bytes, cudaMemcpyDeviceToDevice));
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms, e0, e1));
            cp[t] = 1e3 * ms / reps;
            const double t0 = now_s();
            int sink = 0;
            for (int r = 0; r < 5; r++) {
                CK(cudaMemcpy(pin, d, bytes, cudaMemcpyDeviceToHost));
                for (int i = 0; i < R; i++) sink += lz_sample_argmax(pin + (size_t)i * V, V);
            }
            host[t] = 1e6 * (now_s() - t0) / 5 + (sink == -1);
        }
        const double dv = median5(dev);
        printf("| %d | %.1f us | %.0f | %.1f us | %.0f us |\n", R, dv, bytes / dv / 1e3, median5(cp), median5(host));
    }
    return 0;
}

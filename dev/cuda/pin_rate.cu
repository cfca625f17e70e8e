/* pin_rate.cu - how fast host memory can be made pinned (page-locked, DMA-able) for the
 * host tier, and how fast each kind copies to the GPU: cudaHostAlloc of 1 GiB regions
 * one after another; the same from 4 threads at once; mmap + transparent huge pages
 * (madvise) + pages touched on all threads + cudaHostRegister; and mmap + THP +
 * cudaHostRegister alone. GB/s of pinned memory made, then H2D GB/s from it.
 * Build: nvcc -O3 -std=c++17 -Xcompiler -fopenmp -o pin_rate dev/cuda/pin_rate.cu
 * Run:   ./pin_rate [GiB]   (default 8) */
#include <cuda_runtime.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define GIB ((size_t)1 << 30)

static double h2d(void *h, size_t bytes)
{
    void *d;
    if (cudaMalloc(&d, bytes) != cudaSuccess) return 0;
    cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
    double t0 = now();
    for (int i = 0; i < 4; i++) cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, 0);
    cudaDeviceSynchronize();
    double r = 4.0 * bytes / 1e9 / (now() - t0);
    cudaFree(d);
    return r;
}

static void *alloc_thread(void *p)
{
    void **out = (void **)p;
    if (cudaHostAlloc(out, GIB, cudaHostAllocPortable) != cudaSuccess) *out = NULL;
    return NULL;
}

static void *map_region(int touch)
{
    void *p = mmap(NULL, GIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, GIB, MADV_HUGEPAGE);
    if (touch) {
#pragma omp parallel for schedule(static)
        for (long i = 0; i < (long)(GIB >> 21); i++) memset((char *)p + ((size_t)i << 21), 0, (size_t)1 << 21);
    }
    if (cudaHostRegister(p, GIB, cudaHostRegisterPortable) != cudaSuccess) { munmap(p, GIB); return NULL; }
    return p;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 8;
    if (n < 1 || n > 64) n = 8;
    cudaFree(0);
    void **r = (void **)calloc((size_t)n, sizeof *r);
    printf("| way | GiB | seconds | GB/s made pinned | H2D GB/s from it |\n|---|---|---|---|---|\n");
    for (int way = 0; way < 4; way++) {
        double t0 = now();
        if (way == 0) for (int i = 0; i < n; i++) alloc_thread(&r[i]);
        if (way == 1) {
            for (int i = 0; i < n; i += 4) {
                pthread_t th[4];
                int m = n - i < 4 ? n - i : 4;
                for (int j = 0; j < m; j++) pthread_create(&th[j], NULL, alloc_thread, &r[i + j]);
                for (int j = 0; j < m; j++) pthread_join(th[j], NULL);
            }
        }
        if (way >= 2) for (int i = 0; i < n; i++) r[i] = map_region(way == 2);
        double dt = now() - t0;
        int ok = 1;
        for (int i = 0; i < n; i++) ok &= r[i] != NULL;
        const char *name[4] = {"cudaHostAlloc 1 GiB regions", "cudaHostAlloc on 4 threads",
                               "mmap + THP + touched on all threads + cudaHostRegister", "mmap + THP + cudaHostRegister"};
        printf("| %s | %d | %.2f | %.2f | %.1f |\n", name[way], n, dt, ok ? n * GIB / 1e9 / dt : 0.0,
               ok ? h2d(r[0], GIB) : 0.0);
        fflush(stdout);
        for (int i = 0; i < n; i++) {
            if (!r[i]) continue;
            if (way < 2) cudaFreeHost(r[i]);
            else { cudaHostUnregister(r[i]); munmap(r[i], GIB); }
            r[i] = NULL;
        }
    }
    return 0;
}

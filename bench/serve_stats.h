/* serve_stats.h - bench_serve's latency figures in the manner of vLLM's
 * benchmark_serving: the mean, median and 99th percentile of a sample (TTFT,
 * time per output token, inter-token latency), and a growing list of samples
 * (a request's inter-token gaps). Header-only, for bench/bench_serve.c and
 * its in-process driver (bench/serve_inproc.h). What it leaves out: what is
 * measured and when (the callers). */
#ifndef LZ_BENCH_SERVE_STATS_H
#define LZ_BENCH_SERVE_STATS_H

#include <math.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
    double mean, p50, p99; /* seconds; all 0 for an empty sample */
} lz_bs_dist;

static inline double lz_bs_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int lz_bs_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The mean, p50 and p99 of v[0..n) (sorted here): p50 the lower median (the value at
 * floor(0.5 (n - 1))), p99 the value at ceil(0.99 (n - 1)) (the largest for n <= 100). */
static inline lz_bs_dist lz_bs_dist_of(double *v, int n)
{
    lz_bs_dist d = {0, 0, 0};
    if (n <= 0) return d;
    qsort(v, (size_t)n, sizeof *v, lz_bs_cmp_double);
    for (int i = 0; i < n; i++) d.mean += v[i];
    d.mean /= n;
    d.p50 = v[(int)(0.5 * (n - 1))];
    d.p99 = v[(int)ceil(0.99 * (n - 1))];
    return d;
}

/* A growing list of doubles; out of memory: the sample is lost, 0 returned from push. */
typedef struct {
    double *v;
    int n, cap;
} lz_bs_list;

static inline int lz_bs_push(lz_bs_list *l, double x)
{
    if (l->n == l->cap) {
        const int cap = l->cap ? 2 * l->cap : 64;
        double *v = (double *)realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return 0;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 1;
}

static inline void lz_bs_list_free(lz_bs_list *l)
{
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

#endif /* LZ_BENCH_SERVE_STATS_H */

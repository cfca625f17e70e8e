/* bench_sampler.c - the host's greedy choice (model/sampler.c lz_sample_argmax)
 * over rows of Llama 3's 128,256 logits, one thread, against the scan it
 * replaced (comparing with logits[best], a load whose address the step before
 * chose) and against reading the row once (a sum: the memory bound). Random
 * rows, median of 7 runs of 200 rows each.
 * usage: bench_sampler */
#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"
#include "model/sampler.h"

enum { V = 128256, ROWS = 200, RUNS = 7 };

/* the scan lz_sample_argmax was */
static int __attribute__((noinline)) argmax_by_index(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static float __attribute__((noinline)) sum_row(const float *x, int n)
{
    float s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    return s;
}

static int by_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void)
{
    float *x = malloc((size_t)V * sizeof *x);
    if (!x) return 1;
    unsigned s = 1;
    for (int i = 0; i < V; i++) s = s * 1664525u + 1013904223u, x[i] = (float)(s >> 8) / 16777216.0f * 20.f - 10.f;
    const char *name[3] = {"lz_sample_argmax", "the scan by index (before)", "one read of the row (sum)"};
    volatile double sink = 0;
    printf("| way | us a row of %d | ns a value |\n|---|---|---|\n", V);
    for (int w = 0; w < 3; w++) {
        double t[RUNS];
        for (int r = 0; r < RUNS; r++) {
            const double t0 = lz_now_s();
            for (int k = 0; k < ROWS; k++)
                sink += w == 0 ? lz_sample_argmax(x, V) : w == 1 ? argmax_by_index(x, V) : sum_row(x, V);
            t[r] = (lz_now_s() - t0) / ROWS;
        }
        qsort(t, RUNS, sizeof *t, by_double);
        printf("| %s | %.1f | %.2f |\n", name[w], 1e6 * t[RUNS / 2], 1e9 * t[RUNS / 2] / V);
    }
    free(x);
    return sink == -1;
}

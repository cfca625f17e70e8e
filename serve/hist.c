/* hist.c - fixed-bucket latency histograms (hist.h). */
#include "serve/hist.h"

/* 1 ms to 60 s: per-token times on the left, queueing under overload on the right */
const double lz_serve_hist_bounds[LZ_SERVE_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                            0.5,   1.0,    2.5,   5.0,  10.0,  20.0, 30.0, 60.0};

void lz_serve_hist_add(lz_serve_hist *h, double seconds)
{
    int i = 0;
    while (i < LZ_SERVE_HIST_BUCKETS && seconds > lz_serve_hist_bounds[i]) i++;
    h->count[i]++;
    h->n++;
    h->sum += seconds;
}

int64_t lz_serve_hist_le(const lz_serve_hist *h, int i)
{
    int64_t c = 0;
    for (int j = 0; j <= i && j <= LZ_SERVE_HIST_BUCKETS; j++) c += h->count[j];
    return c;
}

/* hist.h - a latency histogram of fixed buckets, as Prometheus keeps them
 * (a count per upper bound, a running sum), for the serving metrics: time to
 * first token, time per output token, time queued. */
#ifndef LZ_SERVE_HIST_H
#define LZ_SERVE_HIST_H

#include <stdint.h>

#define LZ_SERVE_HIST_BUCKETS 16
extern const double lz_serve_hist_bounds[LZ_SERVE_HIST_BUCKETS]; /* seconds, ascending */

typedef struct {
    int64_t count[LZ_SERVE_HIST_BUCKETS + 1]; /* per bucket (not cumulative); the last: above every bound */
    int64_t n;
    double sum;
} lz_serve_hist;

void lz_serve_hist_add(lz_serve_hist *h, double seconds);
/* Cumulative count of observations <= lz_serve_hist_bounds[i] (i == BUCKETS: all). */
int64_t lz_serve_hist_le(const lz_serve_hist *h, int i);

#endif /* LZ_SERVE_HIST_H */

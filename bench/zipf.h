/* zipf.h - the question streams the cache benchmarks replay, now the shared
 * generator of eval/zipf.h (lazyeval's workload mode and the benchmarks draw
 * the same streams): these two names keep bench_cache.c's callers as they
 * were, a uniform draw being a plain function there. */
#ifndef LZ_BENCH_ZIPF_H
#define LZ_BENCH_ZIPF_H

#include "eval/zipf.h"

/* cdf[i] = sum of (j + 1)^-alpha for j <= i; returns the total. */
static inline double lz_zipf_cdf(double *cdf, int n, double alpha) { return lz_eval_zipf_cdf(cdf, n, alpha); }

static inline double lz_zipf_call_u01(void *ctx) { return (*(double (**)(void))ctx)(); }

/* K distinct documents into out: rank r drawn from cdf (total z), the document
 * perm[r] (perm NULL: r itself); a repeat is drawn again (lz_eval_zipf_draw). */
static inline void lz_zipf_question(int *out, int K, const double *cdf, int n, double z, const int *perm,
                                    double (*u01)(void))
{
    lz_eval_zipf_draw(out, K, cdf, n, z, perm, lz_zipf_call_u01, &u01);
}

#endif /* LZ_BENCH_ZIPF_H */

/* zipf.h - the question streams the cache benchmarks replay: K distinct
 * documents a question, each drawn by Zipf(alpha) popularity over n documents
 * (alpha 0: uniform), from the caller's uniform random numbers, so each
 * benchmark keeps its own generator and its streams. */
#ifndef LZ_BENCH_ZIPF_H
#define LZ_BENCH_ZIPF_H

#include <math.h>
#include <stddef.h>

/* cdf[i] = sum of (j + 1)^-alpha for j <= i; returns the total. */
static inline double lz_zipf_cdf(double *cdf, int n, double alpha)
{
    double z = 0;
    for (int i = 0; i < n; i++) { z += pow(i + 1, -alpha); cdf[i] = z; }
    return z;
}

/* K distinct documents into out: rank r drawn from cdf (total z), the document
 * perm[r] (perm NULL: r itself); a repeat is drawn again. */
static inline void lz_zipf_question(int *out, int K, const double *cdf, int n, double z, const int *perm,
                                    double (*u01)(void))
{
    for (int j = 0; j < K; j++) {
        int pick, dup;
        do {
            const double u = u01() * z;
            int lo = 0, hi = n - 1;
            while (lo < hi) { int mid = (lo + hi) / 2; if (cdf[mid] < u) lo = mid + 1; else hi = mid; }
            pick = perm ? perm[lo] : lo;
            dup = 0;
            for (int t = 0; t < j; t++) dup |= out[t] == pick;
        } while (dup);
        out[j] = pick;
    }
}

#endif /* LZ_BENCH_ZIPF_H */

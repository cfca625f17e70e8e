/* zipf.c - Zipf-popular request streams (zipf.h): the cumulative weights,
 * a request's K distinct draws by binary search over them, and the seeded
 * stream (permutation, then draws) shared by the benchmarks and lazyeval. */
#include <math.h>
#include <stdlib.h>

#include "eval/zipf.h"

uint64_t lz_eval_rng_next(lz_eval_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double lz_eval_rng_u01(lz_eval_rng *r) { return (double)(lz_eval_rng_next(r) >> 11) / 9007199254740992.0; }

double lz_eval_zipf_cdf(double *cdf, int n, double alpha)
{
    double z = 0;
    for (int i = 0; i < n; i++) { z += pow(i + 1, -alpha); cdf[i] = z; }
    return z;
}

void lz_eval_zipf_draw(int *out, int K, const double *cdf, int n, double z, const int *perm,
                       double (*u01)(void *ctx), void *ctx)
{
    for (int j = 0; j < K; j++) {
        int pick, dup;
        do {
            const double u = u01(ctx) * z;
            int lo = 0, hi = n - 1;
            while (lo < hi) { int mid = (lo + hi) / 2; if (cdf[mid] < u) lo = mid + 1; else hi = mid; }
            pick = perm ? perm[lo] : lo;
            dup = 0;
            for (int t = 0; t < j; t++) dup |= out[t] == pick;
        } while (dup);
        out[j] = pick;
    }
}

static double rng_u01(void *ctx) { return lz_eval_rng_u01(ctx); }

int *lz_eval_zipf_stream(int n, int Q, int K, double alpha, uint64_t seed, uint64_t draw_seed)
{
    if (n <= 0 || K > n || K < 1 || Q < 0) return NULL;
    int *perm = malloc((size_t)n * sizeof(int));
    double *cdf = malloc((size_t)n * sizeof(double));
    int *s = malloc(((size_t)Q * K + 1) * sizeof(int));
    if (!perm || !cdf || !s) { free(perm); free(cdf); free(s); return NULL; }
    lz_eval_rng r = {seed * 0x2545F4914F6CDD1Dull + 7};
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        const int j = (int)(lz_eval_rng_next(&r) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    const double z = lz_eval_zipf_cdf(cdf, n, alpha);
    r.s = draw_seed * 0x2545F4914F6CDD1Dull + 11;
    for (int q = 0; q < Q; q++) lz_eval_zipf_draw(s + (size_t)q * K, K, cdf, n, z, perm, rng_u01, &r);
    free(perm);
    free(cdf);
    return s;
}

/* zipf.h - the request streams of the cache benchmarks, lazyeval's workload
 * mode and a serving benchmark, from one generator: K distinct items a
 * request (documents, or questions with K = 1), each drawn by Zipf(alpha)
 * popularity over n items (alpha 0: uniform) through a seeded random
 * permutation of them, and the splitmix64 random numbers they use. What it
 * leaves out: arrivals in time (eval/workload.h) and what an item is. */
#ifndef LZ_EVAL_ZIPF_H
#define LZ_EVAL_ZIPF_H

#include <stdint.h>

/* splitmix64: state advanced by the golden gamma, output mixed */
typedef struct { uint64_t s; } lz_eval_rng;
uint64_t lz_eval_rng_next(lz_eval_rng *r);
double lz_eval_rng_u01(lz_eval_rng *r); /* in [0, 1), 53 random bits */

/* cdf[i] = sum of (j + 1)^-alpha for j <= i (n entries); returns the total z. */
double lz_eval_zipf_cdf(double *cdf, int n, double alpha);

/* K distinct items into out[0..K) (K <= n): rank r drawn from cdf (total z)
 * by u01(ctx) * z, the item perm[r] (perm NULL: r itself); a repeat is
 * drawn again. */
void lz_eval_zipf_draw(int *out, int K, const double *cdf, int n, double z, const int *perm,
                       double (*u01)(void *ctx), void *ctx);

/* Q requests of K distinct items out of n (row q at [q * K, q * K + K)), by
 * Zipf(alpha) over a random permutation of the items (the permutation from
 * seed, the draws from draw_seed): the stream bench/bench_workload.c
 * replays, the same for the same arguments. malloc'd; NULL when out of
 * memory or K > n. */
int *lz_eval_zipf_stream(int n, int Q, int K, double alpha, uint64_t seed, uint64_t draw_seed);

#endif /* LZ_EVAL_ZIPF_H */

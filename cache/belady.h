/* belady.h - the offline (clairvoyant) bound on a cache's hit rate over a
 * recorded stream of requests, to judge an online policy (cache/doc_cache.c)
 * against: Belady's MIN, with the request's own keys pinned.
 *
 * A request is a list of distinct keys (a question's documents, or in block
 * mode its (document, offset) pairs), each with a size in bytes. A key is a
 * hit when it is resident at its request's start. While a request runs its
 * keys are pinned: the resident ones stay, and its misses may be admitted
 * only in place of resident keys the request does not use (the rules of
 * lz_doc_cache_begin / get / put). A miss that is not admitted is used once
 * and dropped (bypass), as a rejected put is.
 *
 * LZ_BELADY_NEXT_USE, MIN: once per request, every resident key the request
 * hits stays; the other resident keys and the request's misses compete for
 * the rest of the budget, nearest next use first (a tie, two keys next used
 * by the same request, goes to the one used again sooner after it, and so
 * on), each taken while it still fits (a larger one that does not fit is
 * skipped for smaller ones behind it); a key never used again is never
 * kept. Losers that were resident are evicted, losing misses bypassed. With
 * unit sizes this is optimal (tests/test_cache_policy.c checks it against an
 * exhaustive search). With unequal sizes keeping the most hits is a
 * knapsack-like problem (NP-hard) and every method here is a heuristic, not
 * a proven optimum: a schedule that the clairvoyant cache can follow, so its
 * hits are a lower estimate of the optimum. MIN ignores sizes, and loses to
 * the online frequency policy on some streams of very unequal sizes; so:
 *
 * LZ_BELADY_NEXT_USE_SIZE: the same, ranked by (requests to the next use) x
 *   bytes, the room-time a hit costs (Belady-Size);
 * LZ_BELADY_INTERVALS: every reuse (a key's use to its next use) is an
 *   interval of requests during which the key must stay resident for that
 *   hit; intervals are accepted greedily, smallest bytes x length first,
 *   when the budget holds over all of their requests (a segment tree of the
 *   bytes resident per request). A key resident at a request's end and used
 *   by the next request is a hit there and stays (pinned), so such a
 *   following interval is accepted together with the one before it. This is
 *   the lower bound of Berger et al. (PFOO-L, "Practical Bounds on Optimal
 *   Caching with Variable Object Sizes", SIGMETRICS 2018) for requests of
 *   several keys;
 * LZ_BELADY_STATIC: the best fixed set for the whole stream, greedily by
 *   (uses after the first) per byte: each member is admitted at its first
 *   use and never leaves (what a frequency policy converges to, known in
 *   advance).
 *
 * lz_belady_best runs the four and keeps the most hits: the bound that
 * bench/bench_workload.c reports against. tests/test_cache_policy.c checks
 * that it is never below LFU or LRU on random streams shaped like the
 * workload (sizes over two orders of magnitude, budgets of 2-50% of the
 * keys' bytes); on adversarial sizes (keys of 1-100 units, budgets down to
 * one unit) each heuristic, and their best, can fall below the online
 * frequency policy, by up to ~1% of lookups in that test's streams.
 */
#ifndef LZ_BELADY_H
#define LZ_BELADY_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LZ_BELADY_NEXT_USE = 0,      /* MIN: keep the nearest next use first */
    LZ_BELADY_NEXT_USE_SIZE = 1, /* keep the smallest (distance to next use) x bytes first */
    LZ_BELADY_INTERVALS = 2,     /* reuse intervals packed greedily, smallest bytes x length first */
    LZ_BELADY_STATIC = 3,        /* the best fixed set: most later uses per byte first */
    LZ_BELADY_N_METHODS = 4
} lz_belady_method;

const char *lz_belady_method_name(lz_belady_method m); /* "min", "min-size", "intervals", "static" */

typedef struct {
    int64_t hits, misses;             /* requested keys resident / not resident at their request's start */
    int64_t bytes_hit, bytes_missed;
    int64_t admitted, bypassed, evicted;
    int64_t peak_bytes;               /* the most bytes resident during any request (<= budget) */
} lz_belady_stats;

typedef struct {
    lz_belady_method method;
    /* called for every eviction: key leaves before request req runs (never a key of req) */
    void (*on_evict)(int32_t key, int32_t req, void *ctx);
    /* called for every admission: a miss of request req stays resident after it */
    void (*on_admit)(int32_t key, int32_t req, void *ctx);
    void *ctx;
    uint8_t *hit;                     /* optional: hit[i] = 1 when keys[i] was a hit (off[n_req] entries) */
} lz_belady_opts;

/* Runs the stream: n_req requests, request r's keys are keys[off[r] .. off[r+1]) (distinct ids in
 * [0, n_keys)), key k has size[k] bytes; budget in bytes. opts may be NULL (MIN, no outputs).
 * Callbacks come request by request, in order. Returns 0, or -1 (out of memory, a key out of
 * range, a key twice in one request). */
int lz_belady_run(int32_t n_keys, const uint64_t *size, int32_t n_req, const int64_t *off, const int32_t *keys,
                  uint64_t budget, const lz_belady_opts *opts, lz_belady_stats *out);

/* The most hits of the four methods: out and *method (may be NULL) of the best (the lowest method on
 * a tie). 0 or -1 as lz_belady_run. */
int lz_belady_best(int32_t n_keys, const uint64_t *size, int32_t n_req, const int64_t *off, const int32_t *keys,
                   uint64_t budget, lz_belady_stats *out, lz_belady_method *method);

#ifdef __cplusplus
}
#endif

#endif /* LZ_BELADY_H */

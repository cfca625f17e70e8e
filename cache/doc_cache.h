/* doc_cache.h - the KV cache of documents under a byte budget, with a
 * frequency-aware policy for Zipf-skewed popularity (or LRU, to compare).
 *
 * Entries are immutable blobs (a document's decoded K/V, or in `block` mode a
 * re-rotated copy for one offset) named by a key of up to 80 bytes. Every
 * access bumps the key's frequency (kept also for keys not in the cache, so
 * a document proves its popularity before it displaces others); priors come
 * from the persisted hit counts in SQLite. The policy is size-aware: an
 * entry's value is its frequency per byte (expected hits per byte of budget).
 * Eviction takes the least valuable unpinned, unheld entries first (ties: least
 * recent), as many as a newcomer needs; admission (TinyLFU style): the
 * newcomer enters only if its frequency is at least the sum of those
 * victims' frequencies. Frequencies halve every aging period (8 x 64 Ki
 * accesses unless set) so the cache follows drift. doc_cache.c's header
 * gives the measurements behind the rule (bench/bench_workload.c).
 *
 * LRU (lz_doc_cache_set_policy): every miss is admitted and the least
 * recently used unpinned entries leave, as a plain LRU cache does.
 *
 * The cache owns nothing of the value but the pointer: a free callback
 * releases it on eviction (host memory in query/, device memory in gpu/).
 */
#ifndef LZ_DOC_CACHE_H
#define LZ_DOC_CACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LZ_DOC_CACHE_KEY_MAX 80

/* Admission and eviction: by access frequency (default) or by recency. */
typedef enum { LZ_CACHE_LFU = 0, LZ_CACHE_LRU = 1 } lz_cache_policy;
/* "lfu" / "lru" and back; parse returns -1 for another name. */
const char *lz_cache_policy_name(int policy);
int lz_cache_policy_parse(const char *name);

typedef struct lz_doc_cache lz_doc_cache;

typedef struct {
    int64_t hits, misses;       /* lookups */
    int64_t admitted, rejected; /* misses that entered / did not enter the cache */
    int64_t evicted;
    int64_t bytes_loaded;       /* bytes brought in on misses (admitted or not) */
    int64_t bytes_used, bytes_budget;
    int64_t n_entries;
    int64_t n_held, bytes_held; /* entries (and their bytes) held by running requests (lz_doc_cache_hold) */
} lz_doc_cache_stats;

/* budget in bytes (0: nothing is ever cached); free_value releases evicted
 * values (may be NULL). */
lz_doc_cache *lz_doc_cache_new(size_t budget, void (*free_value)(void *value, void *ctx), void *ctx);
void lz_doc_cache_free(lz_doc_cache *c); /* frees every value; NULL is a no-op */
/* Chooses the policy (before the first access; LFU when never called). */
void lz_doc_cache_set_policy(lz_doc_cache *c, lz_cache_policy policy);
/* Changes the budget. Lowering it evicts nothing by itself: lz_doc_cache_trim
 * does (e.g. after the next request's lookups have pinned what it uses);
 * until then puts that need room evict as usual. */
void lz_doc_cache_set_budget(lz_doc_cache *c, size_t budget);
/* Evicts unpinned entries, in the policy's order (LFU: least frequency per
 * byte; LRU: least recent), until the bytes used fit the budget, or every
 * unpinned entry is gone. Returns how many were evicted. */
int64_t lz_doc_cache_trim(lz_doc_cache *c);
/* Evicts the one least valuable unpinned entry (the first trim would take):
 * 1, or 0 when every entry is pinned (or there is none). For a pool whose
 * free space is fragmented: room for a newcomer without lowering the budget. */
int lz_doc_cache_evict_one(lz_doc_cache *c);
/* Accesses between halvings of every frequency (0: the default, 8 x 64 Ki). */
void lz_doc_cache_set_aging(lz_doc_cache *c, uint64_t period);
/* The frequency estimate of key (the sketch's count-min), without an access. */
double lz_doc_cache_freq(const lz_doc_cache *c, const void *key, size_t key_len);
/* Removes key and frees its value; 1 when it was cached (e.g. its bytes
 * turned out bad), 0 when not. Pinned entries are removed too; a held one
 * (lz_doc_cache_hold) is not: -1, nothing done. */
int lz_doc_cache_remove(lz_doc_cache *c, const void *key, size_t key_len);

/* Starts a request: entries it gets or puts from now on are pinned (never
 * evicted) until the next lz_doc_cache_begin, so a request can use several
 * cached values at once while admitting others. */
void lz_doc_cache_begin(lz_doc_cache *c);

/* Holds key's entry for a request that runs beside others (continuous batching: several
 * requests decode at once, each reading its documents at every step, while a newcomer's
 * puts need room): a held entry is never evicted (by put, trim or evict_one) nor removed
 * until each of its holds is released, whatever lz_doc_cache_begin does later. Holds count:
 * a request that places a document twice holds it twice. 1 held, 0 when key is not cached. */
int lz_doc_cache_hold(lz_doc_cache *c, const void *key, size_t key_len);
/* Releases one hold of key: 1, or 0 when key is not cached or not held. */
int lz_doc_cache_release(lz_doc_cache *c, const void *key, size_t key_len);

/* Adds prior frequency to key (e.g. persisted hit counts) without an access. */
void lz_doc_cache_prior(lz_doc_cache *c, const void *key, size_t key_len, double freq);

/* Looks key up and counts one access. Returns the value or NULL (a miss). */
void *lz_doc_cache_get(lz_doc_cache *c, const void *key, size_t key_len);

/* Whether key is cached, without counting an access (planning loads). */
int lz_doc_cache_contains(const lz_doc_cache *c, const void *key, size_t key_len);

/* Offers a value loaded after a miss. Returns 1 when admitted (the cache now
 * owns value), 0 when rejected (the caller still owns it and frees it after
 * use). A value larger than the budget is always rejected. */
int lz_doc_cache_put(lz_doc_cache *c, const void *key, size_t key_len, void *value, size_t bytes);

/* Inserts without the admission test while there is free room (preloading
 * the hottest documents at start). Returns 1 if inserted. */
int lz_doc_cache_preload(lz_doc_cache *c, const void *key, size_t key_len, void *value, size_t bytes);

void lz_doc_cache_get_stats(const lz_doc_cache *c, lz_doc_cache_stats *st);

#ifdef __cplusplus
}
#endif

#endif /* LZ_DOC_CACHE_H */

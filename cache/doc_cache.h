/* doc_cache.h - the KV cache of documents under a byte budget, with a
 * frequency-aware policy for Zipf-skewed popularity.
 *
 * Entries are immutable blobs (a document's decoded K/V, or in `block` mode a
 * re-rotated copy for one offset) named by a key of up to 80 bytes. Every
 * access bumps the key's frequency (kept also for keys not in the cache, so
 * a document proves its popularity before it displaces others); priors come
 * from the persisted hit counts in SQLite. Admission (TinyLFU style): a new
 * entry enters only if its frequency exceeds that of every entry it would
 * evict; eviction takes the least frequent first (ties: least recent).
 * Frequencies halve every `aging_period` accesses so the cache follows drift.
 *
 * The cache owns nothing of the value but the pointer: a free callback
 * releases it on eviction (host memory today, device memory with CUDA).
 */
#ifndef LZ_DOC_CACHE_H
#define LZ_DOC_CACHE_H

#include <stddef.h>
#include <stdint.h>

#define LZ_DOC_CACHE_KEY_MAX 80

typedef struct lz_doc_cache lz_doc_cache;

typedef struct {
    int64_t hits, misses;       /* lookups */
    int64_t admitted, rejected; /* misses that entered / did not enter the cache */
    int64_t evicted;
    int64_t bytes_loaded;       /* bytes brought in on misses (admitted or not) */
    int64_t bytes_used, bytes_budget;
    int64_t n_entries;
} lz_doc_cache_stats;

/* budget in bytes (0: nothing is ever cached); free_value releases evicted
 * values (may be NULL). */
lz_doc_cache *lz_doc_cache_new(size_t budget, void (*free_value)(void *value, void *ctx), void *ctx);
void lz_doc_cache_free(lz_doc_cache *c); /* frees every value; NULL is a no-op */

/* Starts a request: entries it gets or puts from now on are pinned (never
 * evicted) until the next lz_doc_cache_begin, so a request can use several
 * cached values at once while admitting others. */
void lz_doc_cache_begin(lz_doc_cache *c);

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

#endif /* LZ_DOC_CACHE_H */

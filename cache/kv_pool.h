/* kv_pool.h - an extent allocator for the documents' KV cache: whole-document
 * K/V extents carved out of a pool of device (or pinned host) memory that the
 * caller allocates once, as one or more regions, so that no cudaMalloc /
 * cudaFree (or cudaHostAlloc) runs on a question's path. Pure C, CPU only:
 * addresses are opaque integers (device pointers cast to uintptr_t) and the
 * pool never touches the memory behind them.
 *
 * Policy: best fit over the free extents, kept sorted by address. An
 * allocation takes the smallest free extent that holds it (ties: the lowest
 * address) and is cut from that extent's low end. A release merges the
 * extent with its free neighbours in the same region; extents never merge
 * across regions, even regions that touch (they are separate allocations to
 * the caller). Every extent start and size is a multiple of the pool's
 * alignment (sizes round up to it, 0 bytes takes one unit).
 *
 *   region 0  [live A][ free ][live B][  free  ]   region 1  [   free   ]
 *                       ^ alloc(n) takes the smallest hole >= n, low end
 *
 * Live extents are tracked, so a release that is not exactly a live extent
 * (double release, wrong size, an address inside an extent) is refused.
 * Not thread-safe: one pool per owner thread, or a lock around it.
 */
#ifndef LZ_KV_POOL_H
#define LZ_KV_POOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lz_kv_pool lz_kv_pool;

typedef struct {
    size_t capacity;      /* bytes of every region (after rounding down to align) */
    size_t used;          /* bytes in live extents (after rounding up to align) */
    size_t largest_free;  /* bytes of the largest free extent (0: none) */
    int64_t n_free_extents;
    int64_t n_live;       /* live extents */
    int64_t allocs;       /* lz_kv_pool_alloc calls, failed ones included */
    int64_t releases;     /* lz_kv_pool_release calls that returned 0 */
    int64_t failures;     /* lz_kv_pool_alloc calls that returned -1 */
    int n_regions;
} lz_kv_pool_stats;

/* A pool with no region yet. align: a power of two >= 1 (extents start at,
 * and their sizes round up to, multiples of it; 256 suits the GPU). NULL
 * when align is not a power of two or memory runs out. */
lz_kv_pool *lz_kv_pool_new(size_t align);

/* Frees the pool's bookkeeping; NULL is a no-op. Does not free the regions'
 * memory (lz_kv_pool_region lists it for the caller). */
void lz_kv_pool_free(lz_kv_pool *p);

/* Adds the region [base, base + bytes) as one free extent; bytes round down
 * to align. Returns 0, or -1 (nothing changes) when: base is not a multiple
 * of align, bytes is 0 after rounding, base + bytes wraps the address space,
 * the region overlaps one already added, or memory runs out. */
int lz_kv_pool_add_region(lz_kv_pool *p, uintptr_t base, size_t bytes);

/* An extent of bytes (rounded up to align; 0 bytes takes align) cut from the
 * low end of the smallest free extent that holds it (ties: lowest address).
 * Returns 0 with *at set, or -1 (nothing changes but the counters) when no
 * free extent holds it, bytes overflow when rounded, or memory runs out. */
int lz_kv_pool_alloc(lz_kv_pool *p, size_t bytes, uintptr_t *at);

/* Returns the extent at, with the bytes given to alloc (compared after the
 * same rounding), and merges it with its free neighbours in its region.
 * Returns 0, or -1 (nothing changes) when [at, at + bytes) is not exactly a
 * live extent (never allocated, released already, another size, an address
 * inside an extent) or memory runs out. */
int lz_kv_pool_release(lz_kv_pool *p, uintptr_t at, size_t bytes);

/* The counters and the current layout (largest_free: one pass over the free
 * extents). A NULL pool gives all zeros. */
void lz_kv_pool_get_stats(const lz_kv_pool *p, lz_kv_pool_stats *st);

/* Region i (0 <= i < n_regions, in the order added) as it was added (bytes
 * after rounding), for the caller to free its memory. 0, or -1 for another i. */
int lz_kv_pool_region(const lz_kv_pool *p, int i, uintptr_t *base, size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* LZ_KV_POOL_H */

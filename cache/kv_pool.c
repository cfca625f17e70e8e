/* kv_pool.c - best-fit extent allocator over a pool of regions (see
 * kv_pool.h). Free extents sit in one array sorted by address, each naming
 * its region: alloc scans them all for the best fit (a few hundred at most),
 * release finds its neighbours by binary search and merges only within the
 * region. Live extents sit in an open-addressing hash (linear probing,
 * backward-shift deletion, at most half full) of start -> size and region,
 * which is how release tells a live extent from anything else.
 * Memory is only grown before anything changes, so a -1 leaves the pool as it was. */
#include "cache/kv_pool.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uintptr_t base;
    size_t bytes;
} pool_region;

/* a free or live extent: [start, start + bytes) inside region */
typedef struct {
    uintptr_t start;
    size_t bytes;    /* 0 marks an empty hash slot (no extent is empty) */
    int region;
} pool_extent;

struct lz_kv_pool {
    size_t align;
    pool_region *regions;   /* (n_regions), in the order added */
    int n_regions, cap_regions;
    pool_extent *free_ext;  /* (n_free), sorted by start */
    size_t n_free, cap_free;
    pool_extent *live;      /* (cap_live) hash slots, cap_live a power of two */
    size_t n_live, cap_live;
    size_t capacity, used;
    int64_t allocs, releases, failures;
};

/* ---- sizes and the free array ---- */

/* bytes rounded up to align (0 takes align); -1 when that overflows. */
static int round_up(const lz_kv_pool *p, size_t bytes, size_t *out)
{
    if (bytes == 0) bytes = p->align;
    if (bytes > SIZE_MAX - (p->align - 1)) return -1;
    *out = (bytes + p->align - 1) & ~(p->align - 1);
    return 0;
}

/* The first free extent whose start is >= addr (n_free when none). */
static size_t free_lower_bound(const lz_kv_pool *p, uintptr_t addr)
{
    size_t lo = 0, hi = p->n_free;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (p->free_ext[mid].start < addr) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Room for one more free extent; -1 when memory runs out. */
static int free_reserve_one(lz_kv_pool *p)
{
    if (p->n_free < p->cap_free) return 0;
    const size_t cap = p->cap_free ? 2 * p->cap_free : 16;
    pool_extent *e = realloc(p->free_ext, cap * sizeof *e);
    if (!e) return -1;
    p->free_ext = e;
    p->cap_free = cap;
    return 0;
}

static void free_insert_at(lz_kv_pool *p, size_t i, pool_extent e)
{
    memmove(&p->free_ext[i + 1], &p->free_ext[i], (p->n_free - i) * sizeof e);
    p->free_ext[i] = e;
    p->n_free++;
}

static void free_remove_at(lz_kv_pool *p, size_t i)
{
    memmove(&p->free_ext[i], &p->free_ext[i + 1], (p->n_free - i - 1) * sizeof p->free_ext[0]);
    p->n_free--;
}

/* ---- the live extents' hash ---- */

static size_t live_home(const lz_kv_pool *p, uintptr_t start)
{
    uint64_t x = (uint64_t)start; /* splitmix64's finaliser */
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return (size_t)x & (p->cap_live - 1);
}

/* The slot holding the live extent that starts at start, or -1. */
static long long live_find(const lz_kv_pool *p, uintptr_t start)
{
    if (!p->cap_live) return -1;
    for (size_t i = live_home(p, start);; i = (i + 1) & (p->cap_live - 1)) {
        if (!p->live[i].bytes) return -1;
        if (p->live[i].start == start) return (long long)i;
    }
}

/* Puts e in a table with room (the start is not there yet). */
static void live_put(pool_extent *slots, size_t cap, size_t home, pool_extent e)
{
    size_t i = home;
    while (slots[i].bytes) i = (i + 1) & (cap - 1);
    slots[i] = e;
}

/* Room for one more live extent at most half full; -1 when memory runs out. */
static int live_reserve_one(lz_kv_pool *p)
{
    if (2 * (p->n_live + 1) <= p->cap_live) return 0;
    const size_t cap = p->cap_live ? 2 * p->cap_live : 64;
    pool_extent *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    pool_extent *old = p->live;
    const size_t old_cap = p->cap_live;
    p->live = slots;
    p->cap_live = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].bytes) live_put(slots, cap, live_home(p, old[i].start), old[i]);
    free(old);
    return 0;
}

/* Empties slot i and shifts back the entries of its probe run that would
 * otherwise no longer be found. */
static void live_remove_slot(lz_kv_pool *p, size_t i)
{
    const size_t mask = p->cap_live - 1;
    size_t hole = i;
    for (size_t j = (i + 1) & mask; p->live[j].bytes; j = (j + 1) & mask) {
        const size_t home = live_home(p, p->live[j].start);
        /* j may move to hole when its home is not cyclically in (hole, j] */
        const int stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!stays) {
            p->live[hole] = p->live[j];
            hole = j;
        }
    }
    p->live[hole].bytes = 0;
    p->n_live--;
}

/* ---- the API ---- */

lz_kv_pool *lz_kv_pool_new(size_t align)
{
    if (align == 0 || (align & (align - 1))) return NULL;
    lz_kv_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->align = align;
    return p;
}

void lz_kv_pool_free(lz_kv_pool *p)
{
    if (!p) return;
    free(p->regions);
    free(p->free_ext);
    free(p->live);
    free(p);
}

int lz_kv_pool_add_region(lz_kv_pool *p, uintptr_t base, size_t bytes)
{
    if (!p || (base & (p->align - 1))) return -1;
    bytes &= ~(p->align - 1);
    if (bytes == 0 || bytes > UINTPTR_MAX - base || p->n_regions == INT_MAX) return -1;
    for (int r = 0; r < p->n_regions; r++)
        if (base < p->regions[r].base + p->regions[r].bytes && p->regions[r].base < base + bytes) return -1;
    if (p->n_regions == p->cap_regions) {
        const int cap = p->cap_regions ? (p->cap_regions > INT_MAX / 2 ? INT_MAX : 2 * p->cap_regions) : 4;
        pool_region *rg = realloc(p->regions, (size_t)cap * sizeof *rg);
        if (!rg) return -1;
        p->regions = rg;
        p->cap_regions = cap;
    }
    if (free_reserve_one(p) != 0) return -1;
    const int r = p->n_regions++;
    p->regions[r] = (pool_region){base, bytes};
    /* regions do not overlap and every free extent lies in one, so the
     * region's start sorts it among them */
    free_insert_at(p, free_lower_bound(p, base), (pool_extent){base, bytes, r});
    p->capacity += bytes;
    return 0;
}

int lz_kv_pool_alloc(lz_kv_pool *p, size_t bytes, uintptr_t *at)
{
    if (!p || !at) return -1;
    p->allocs++;
    size_t need;
    if (round_up(p, bytes, &need) != 0 || live_reserve_one(p) != 0) {
        p->failures++;
        return -1;
    }
    size_t best = p->n_free;
    for (size_t i = 0; i < p->n_free; i++) {
        const size_t b = p->free_ext[i].bytes;
        if (b < need || (best < p->n_free && b >= p->free_ext[best].bytes)) continue;
        best = i; /* strictly smaller: ties keep the lower address */
        if (b == need) break;
    }
    if (best == p->n_free) {
        p->failures++;
        return -1;
    }
    pool_extent *f = &p->free_ext[best];
    const pool_extent got = {f->start, need, f->region};
    if (f->bytes == need) {
        free_remove_at(p, best);
    } else {
        f->start += need;
        f->bytes -= need;
    }
    live_put(p->live, p->cap_live, live_home(p, got.start), got);
    p->n_live++;
    p->used += need;
    *at = got.start;
    return 0;
}

int lz_kv_pool_release(lz_kv_pool *p, uintptr_t at, size_t bytes)
{
    size_t need;
    if (!p || round_up(p, bytes, &need) != 0) return -1;
    const long long k = live_find(p, at);
    if (k < 0 || p->live[k].bytes != need) return -1;
    const int region = p->live[k].region;
    const size_t pos = free_lower_bound(p, at);
    pool_extent *left = pos > 0 ? &p->free_ext[pos - 1] : NULL;
    pool_extent *right = pos < p->n_free ? &p->free_ext[pos] : NULL;
    const int join_left = left && left->region == region && left->start + left->bytes == at;
    const int join_right = right && right->region == region && at + need == right->start;
    if (!join_left && !join_right && free_reserve_one(p) != 0) return -1;

    live_remove_slot(p, (size_t)k);
    if (join_left && join_right) {
        left->bytes += need + right->bytes;
        free_remove_at(p, pos);
    } else if (join_left) {
        left->bytes += need;
    } else if (join_right) {
        right->start = at;
        right->bytes += need;
    } else {
        free_insert_at(p, pos, (pool_extent){at, need, region});
    }
    p->used -= need;
    p->releases++;
    return 0;
}

void lz_kv_pool_get_stats(const lz_kv_pool *p, lz_kv_pool_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!p) return;
    st->capacity = p->capacity;
    st->used = p->used;
    for (size_t i = 0; i < p->n_free; i++)
        if (p->free_ext[i].bytes > st->largest_free) st->largest_free = p->free_ext[i].bytes;
    st->n_free_extents = (int64_t)p->n_free;
    st->n_live = (int64_t)p->n_live;
    st->allocs = p->allocs;
    st->releases = p->releases;
    st->failures = p->failures;
    st->n_regions = p->n_regions;
}

int lz_kv_pool_region(const lz_kv_pool *p, int i, uintptr_t *base, size_t *bytes)
{
    if (!p || i < 0 || i >= p->n_regions) return -1;
    if (base) *base = p->regions[i].base;
    if (bytes) *bytes = p->regions[i].bytes;
    return 0;
}

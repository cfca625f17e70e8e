/* test_kv_pool.c - the KV extent allocator (cache/kv_pool.c). Basics with
 * exact addresses: alignment rounding, 0 bytes, exhaustion, best fit over
 * holes (ties: lowest address, across regions too), coalescing, no merge
 * across adjacent regions, refused releases and regions, bad align, huge
 * sizes, every stats field. Then a reference written here (an occupancy
 * bitmap per region, best fit found plainly over its maximal free runs) on
 * many random streams, compared op by op: the same success and address, the
 * same free-extent count, largest free extent and bytes used. Then churn
 * (100,000 ops on a tight pool, then everything released: one free extent per
 * region again), thousands of small live extents (the live table's growth
 * and deletions), and documents sized as Ada-KV keeps them (per-(layer, head)
 * kept rows, each layer padded to its largest head). */
#include "cache/kv_pool.h"
#include "tests/test.h"

/* ---- random numbers ---- */
static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }
static int rint_(int n) { return (int)(rnd() % (uint64_t)n); }

static lz_kv_pool_stats stats_of(const lz_kv_pool *p)
{
    lz_kv_pool_stats st;
    lz_kv_pool_get_stats(p, &st);
    return st;
}

/* Equal layouts and counters (field by field: the struct has padding). */
static int stats_same(lz_kv_pool_stats a, lz_kv_pool_stats b)
{
    return a.capacity == b.capacity && a.used == b.used && a.largest_free == b.largest_free &&
           a.n_free_extents == b.n_free_extents && a.n_live == b.n_live && a.allocs == b.allocs &&
           a.releases == b.releases && a.failures == b.failures && a.n_regions == b.n_regions;
}

/* alloc that must succeed; returns the address (0 after a failed check) */
static uintptr_t must_alloc(lz_kv_pool *p, size_t bytes)
{
    uintptr_t at = 0;
    const int rc = lz_kv_pool_alloc(p, bytes, &at);
    CHECK(rc == 0, "alloc %zu bytes failed", bytes);
    return rc == 0 ? at : 0;
}

/* ---- basics ---- */

static void test_align_and_zero(void)
{
    lz_kv_pool *p = lz_kv_pool_new(64);
    CHECK(p != NULL, "new(64)");
    CHECK(lz_kv_pool_add_region(p, 0x10000, 64 * 10 + 13) == 0, "add region");
    lz_kv_pool_stats st = stats_of(p);
    CHECK(st.capacity == 640, "capacity %zu (rounded down to 640)", st.capacity);
    const uintptr_t a = must_alloc(p, 1), b = must_alloc(p, 0), c = must_alloc(p, 65), d = must_alloc(p, 64);
    CHECK(a == 0x10000 && b == 0x10040 && c == 0x10080 && d == 0x10100,
          "addresses %#lx %#lx %#lx %#lx", (unsigned long)a, (unsigned long)b, (unsigned long)c, (unsigned long)d);
    st = stats_of(p);
    CHECK(st.used == 64 + 64 + 128 + 64, "used %zu", st.used);
    CHECK(st.largest_free == 640 - 320 && st.n_free_extents == 1, "free %zu in %lld", st.largest_free,
          (long long)st.n_free_extents);
    CHECK(lz_kv_pool_release(p, b, 0) == 0, "release of the 0-byte extent with 0");
    CHECK(lz_kv_pool_release(p, c, 100) == 0, "release with other bytes of the same rounding (65 -> 128, 100 -> 128)");
    CHECK(lz_kv_pool_release(p, a, 64) == 0, "release of a 1-byte extent with 64");
    CHECK(lz_kv_pool_release(p, d, 1) == 0, "release d");
    st = stats_of(p);
    CHECK(st.used == 0 && st.n_free_extents == 1 && st.largest_free == 640 && st.n_live == 0, "all free again");
    lz_kv_pool_free(p);

    lz_kv_pool *q = lz_kv_pool_new(1); /* align 1: sizes as given, 0 takes 1 byte */
    CHECK(q && lz_kv_pool_add_region(q, 7, 10) == 0, "align 1, odd base");
    CHECK(must_alloc(q, 3) == 7 && must_alloc(q, 0) == 10 && must_alloc(q, 6) == 11, "align 1 addresses");
    CHECK(stats_of(q).used == 10 && stats_of(q).n_free_extents == 0 && stats_of(q).largest_free == 0, "align 1 full");
    lz_kv_pool_free(q);
}

static void test_bad_arguments(void)
{
    CHECK(lz_kv_pool_new(0) == NULL && lz_kv_pool_new(3) == NULL && lz_kv_pool_new(96) == NULL &&
              lz_kv_pool_new(SIZE_MAX) == NULL,
          "align not a power of two refused");
    lz_kv_pool_free(NULL);
    lz_kv_pool *p = lz_kv_pool_new(64);
    CHECK(lz_kv_pool_add_region(p, 0x1010, 0x1000) == -1, "misaligned base refused");
    CHECK(lz_kv_pool_add_region(p, 0x1000, 63) == -1, "0 bytes after rounding refused");
    CHECK(lz_kv_pool_add_region(p, UINTPTR_MAX & ~(uintptr_t)63, 128) == -1, "region that wraps refused");
    CHECK(lz_kv_pool_add_region(p, 0x1000, 0x1000) == 0, "[0x1000, 0x2000)");
    CHECK(lz_kv_pool_add_region(p, 0x1800, 0x1000) == -1, "overlap at the end refused");
    CHECK(lz_kv_pool_add_region(p, 0x0c00, 0x0800) == -1, "overlap at the start refused");
    CHECK(lz_kv_pool_add_region(p, 0x1100, 0x0100) == -1, "region inside refused");
    CHECK(lz_kv_pool_add_region(p, 0x0000, 0x4000) == -1, "region around refused");
    CHECK(lz_kv_pool_add_region(p, 0x1000, 0x1000) == -1, "the same region again refused");
    CHECK(lz_kv_pool_add_region(p, 0x2000, 0x0400) == 0 && lz_kv_pool_add_region(p, 0x0000, 0x1000) == 0,
          "touching regions on both sides accepted");
    lz_kv_pool_stats st = stats_of(p);
    CHECK(st.n_regions == 3 && st.capacity == 0x2400 && st.n_free_extents == 3 && st.largest_free == 0x1000,
          "3 regions, %zu bytes, %lld free extents", st.capacity, (long long)st.n_free_extents);
    uintptr_t base = 0;
    size_t bytes = 0;
    CHECK(lz_kv_pool_region(p, 1, &base, &bytes) == 0 && base == 0x2000 && bytes == 0x400, "region 1 in adding order");
    CHECK(lz_kv_pool_region(p, 2, &base, &bytes) == 0 && base == 0 && bytes == 0x1000, "region 2");
    CHECK(lz_kv_pool_region(p, -1, &base, &bytes) == -1 && lz_kv_pool_region(p, 3, &base, &bytes) == -1,
          "regions out of range refused");

    /* huge sizes: rounding would overflow, or more than everything */
    st = stats_of(p);
    uintptr_t at = 12345;
    CHECK(lz_kv_pool_alloc(p, SIZE_MAX, &at) == -1 && lz_kv_pool_alloc(p, SIZE_MAX - 62, &at) == -1 &&
              lz_kv_pool_alloc(p, SIZE_MAX - 63, &at) == -1 && lz_kv_pool_alloc(p, 0x1001, &at) == -1,
          "huge sizes refused");
    CHECK(at == 12345, "*at untouched by a failure");
    lz_kv_pool_stats st2 = stats_of(p);
    st.allocs += 4;
    st.failures += 4;
    CHECK(stats_same(st, st2), "failures change only the counters");
    CHECK(lz_kv_pool_release(p, 0x1000, SIZE_MAX) == -1, "release of a huge size refused");
    CHECK(lz_kv_pool_alloc(NULL, 1, &at) == -1 && lz_kv_pool_alloc(p, 1, NULL) == -1, "NULL arguments refused");
    CHECK(lz_kv_pool_release(NULL, 0x1000, 1) == -1 && lz_kv_pool_add_region(NULL, 0, 64) == -1, "NULL pool refused");
    lz_kv_pool_get_stats(NULL, &st);
    CHECK(st.capacity == 0 && st.n_regions == 0 && st.allocs == 0, "stats of NULL are zeros");
    lz_kv_pool_free(p);
}

static void test_exhaustion(void)
{
    lz_kv_pool *p = lz_kv_pool_new(16);
    lz_kv_pool_add_region(p, 0x100, 160);
    uintptr_t at[10];
    for (int i = 0; i < 10; i++) at[i] = must_alloc(p, 16);
    CHECK(at[9] == 0x100 + 9 * 16, "10 extents back to back");
    const lz_kv_pool_stats before = stats_of(p);
    uintptr_t x = 0;
    CHECK(lz_kv_pool_alloc(p, 1, &x) == -1, "a full pool refuses");
    lz_kv_pool_stats after = stats_of(p);
    CHECK(after.failures == before.failures + 1 && after.allocs == before.allocs + 1, "failure counted");
    after.failures--, after.allocs--;
    CHECK(stats_same(before, after), "nothing else changes on failure");
    CHECK(lz_kv_pool_release(p, at[3], 16) == 0 && lz_kv_pool_release(p, at[4], 16) == 0, "release two");
    CHECK(lz_kv_pool_alloc(p, 33, &x) == -1, "33 bytes (48) do not fit the 32-byte hole");
    CHECK(must_alloc(p, 17) == at[3], "32 bytes fit the hole after the release");
    CHECK(lz_kv_pool_alloc(p, 1, &x) == -1, "full again");
    after = stats_of(p);
    CHECK(after.used == 160 && after.n_live == 9 && after.allocs == 14 && after.failures == 3 && after.releases == 2,
          "used %zu live %lld allocs %lld failures %lld releases %lld", after.used, (long long)after.n_live,
          (long long)after.allocs, (long long)after.failures, (long long)after.releases);
    lz_kv_pool_free(p);
}

static void test_best_fit(void)
{
    /* [A 100][B 50][C 100][D 30][E 100][F 70][G 100][ tail 450 ]: B, D, F freed */
    lz_kv_pool *p = lz_kv_pool_new(1);
    lz_kv_pool_add_region(p, 1000, 1000);
    const size_t sz[7] = {100, 50, 100, 30, 100, 70, 100};
    uintptr_t at[7];
    for (int i = 0; i < 7; i++) at[i] = must_alloc(p, sz[i]);
    lz_kv_pool_release(p, at[1], 50);
    lz_kv_pool_release(p, at[3], 30);
    lz_kv_pool_release(p, at[5], 70);
    CHECK(stats_of(p).n_free_extents == 4 && stats_of(p).largest_free == 450, "three holes and the tail");
    CHECK(must_alloc(p, 25) == at[3], "25 takes the 30-byte hole (first fit would take the 50)");
    CHECK(must_alloc(p, 40) == at[1], "40 takes the 50-byte hole");
    CHECK(must_alloc(p, 60) == at[5], "60 takes the 70-byte hole");
    CHECK(must_alloc(p, 71) == 1550, "71 takes the tail");
    CHECK(must_alloc(p, 5) == at[3] + 25, "5 takes the 5 left of the 30-byte hole");
    lz_kv_pool_free(p);

    /* ties inside a region: two 20-byte holes -> the lower one */
    p = lz_kv_pool_new(1);
    lz_kv_pool_add_region(p, 1000, 1000);
    const size_t tz[5] = {10, 20, 10, 20, 10};
    uintptr_t t[5];
    for (int i = 0; i < 5; i++) t[i] = must_alloc(p, tz[i]);
    lz_kv_pool_release(p, t[3], 20);
    lz_kv_pool_release(p, t[1], 20);
    CHECK(must_alloc(p, 15) == t[1], "equal holes: the lower address");
    CHECK(must_alloc(p, 15) == t[3], "then the other");
    lz_kv_pool_free(p);

    /* ties across regions, where the region added later sits lower */
    p = lz_kv_pool_new(8);
    lz_kv_pool_add_region(p, 0x8000, 0x100);
    lz_kv_pool_add_region(p, 0x4000, 0x100);
    CHECK(must_alloc(p, 0x100) == 0x4000, "equal regions: the lower address");
    CHECK(must_alloc(p, 0x40) == 0x8000, "then the other");
    lz_kv_pool_release(p, 0x4000, 0x100);
    lz_kv_pool_release(p, 0x8000, 0x40);
    const uintptr_t u = must_alloc(p, 0x40), v = must_alloc(p, 0x40), w = must_alloc(p, 0xc0);
    CHECK(u == 0x4000 && v == 0x4040 && w == 0x8000,
          "tie: the low region; then its 0xc0 left over beats the 0x100; 0xc0 no longer fits there: %#lx %#lx %#lx",
          (unsigned long)u, (unsigned long)v, (unsigned long)w);
    lz_kv_pool_free(p);
}

static void test_coalescing(void)
{
    lz_kv_pool *p = lz_kv_pool_new(16);
    lz_kv_pool_add_region(p, 0x1000, 48);
    const uintptr_t a = must_alloc(p, 16), b = must_alloc(p, 16), c = must_alloc(p, 16);
    CHECK(stats_of(p).n_free_extents == 0, "region filled exactly");
    lz_kv_pool_release(p, a, 16);
    lz_kv_pool_release(p, c, 16);
    CHECK(stats_of(p).n_free_extents == 2 && stats_of(p).largest_free == 16, "two holes");
    CHECK(lz_kv_pool_release(p, b, 16) == 0, "release the middle");
    CHECK(stats_of(p).n_free_extents == 1 && stats_of(p).largest_free == 48, "one free extent of the whole region");
    lz_kv_pool_free(p);

    /* left-only and right-only merges, with the tail */
    p = lz_kv_pool_new(16);
    lz_kv_pool_add_region(p, 0x1000, 160);
    const uintptr_t x = must_alloc(p, 16), y = must_alloc(p, 16), z = must_alloc(p, 16);
    lz_kv_pool_release(p, z, 16); /* merges right, into the tail */
    CHECK(stats_of(p).n_free_extents == 1 && stats_of(p).largest_free == 128, "merged with the tail");
    lz_kv_pool_release(p, x, 16);
    CHECK(stats_of(p).n_free_extents == 2, "x alone");
    lz_kv_pool_release(p, y, 16); /* both sides */
    CHECK(stats_of(p).n_free_extents == 1 && stats_of(p).largest_free == 160, "all one again");
    const uintptr_t m = must_alloc(p, 16), n = must_alloc(p, 16);
    CHECK(must_alloc(p, 128) == 0x1020, "the rest");
    lz_kv_pool_release(p, m, 16);
    lz_kv_pool_release(p, 0x1020, 128);
    CHECK(stats_of(p).n_free_extents == 2, "two holes around n");
    lz_kv_pool_release(p, n, 16);
    CHECK(stats_of(p).n_free_extents == 1 && stats_of(p).largest_free == 160, "n merges both");
    lz_kv_pool_free(p);
}

static void test_no_merge_across_regions(void)
{
    lz_kv_pool *p = lz_kv_pool_new(256);
    lz_kv_pool_add_region(p, 0x2000, 0x1000); /* [0x2000, 0x3000) */
    lz_kv_pool_add_region(p, 0x1000, 0x1000); /* [0x1000, 0x2000), touching it */
    CHECK(stats_of(p).n_free_extents == 2 && stats_of(p).largest_free == 0x1000, "two free extents");
    uintptr_t x = 0;
    CHECK(lz_kv_pool_alloc(p, 0x1100, &x) == -1, "nothing spans the two regions");
    const uintptr_t a = must_alloc(p, 0x800), b = must_alloc(p, 0x800);
    CHECK(a == 0x1000 && b == 0x1800, "the low region first, filled");
    CHECK(lz_kv_pool_release(p, b, 0x800) == 0, "release the extent ending at the boundary");
    CHECK(stats_of(p).n_free_extents == 2 && stats_of(p).largest_free == 0x1000,
          "not merged with the next region's free start");
    const uintptr_t c = must_alloc(p, 0x1000);
    CHECK(c == 0x2000, "the high region whole");
    lz_kv_pool_release(p, a, 0x800);
    CHECK(stats_of(p).n_free_extents == 1 && stats_of(p).largest_free == 0x1000, "the low region one extent");
    lz_kv_pool_release(p, c, 0x1000);
    CHECK(stats_of(p).n_free_extents == 2 && stats_of(p).largest_free == 0x1000, "still two after everything");
    CHECK(lz_kv_pool_alloc(p, 0x1100, &x) == -1, "and still nothing spans them");
    lz_kv_pool_free(p);
}

static void test_refused_releases(void)
{
    lz_kv_pool *p = lz_kv_pool_new(64);
    lz_kv_pool_add_region(p, 0x10000, 0x1000);
    const uintptr_t a = must_alloc(p, 100), b = must_alloc(p, 256); /* a: 128 bytes, b: 256 */
    const lz_kv_pool_stats st = stats_of(p);
    CHECK(lz_kv_pool_release(p, a, 200) == -1, "wrong size (256 for 128) refused");
    CHECK(lz_kv_pool_release(p, a, 64) == -1, "wrong size (64 for 128) refused");
    CHECK(lz_kv_pool_release(p, a + 64, 64) == -1, "interior address refused");
    CHECK(lz_kv_pool_release(p, b + 64, 192) == -1, "interior address with the extent's end refused");
    CHECK(lz_kv_pool_release(p, b + 512, 64) == -1, "address in a free extent refused");
    CHECK(lz_kv_pool_release(p, 0x400, 64) == -1, "address outside every region refused");
    CHECK(lz_kv_pool_release(p, a + 1, 127) == -1, "misaligned address refused");
    CHECK(lz_kv_pool_release(p, a, 384) == -1, "two extents at once refused");
    CHECK(stats_same(st, stats_of(p)), "refusals change nothing");
    CHECK(lz_kv_pool_release(p, a, 100) == 0, "the right release");
    const lz_kv_pool_stats st2 = stats_of(p);
    CHECK(lz_kv_pool_release(p, a, 100) == -1, "double release refused");
    CHECK(stats_same(st2, stats_of(p)), "a double release changes nothing");
    lz_kv_pool_free(p);
}

static void test_stats_fields(void)
{
    lz_kv_pool *p = lz_kv_pool_new(64);
    lz_kv_pool_add_region(p, 0x10000, 1024 + 40);
    lz_kv_pool_add_region(p, 0x20000, 512);
    uintptr_t x = 0;
    const uintptr_t a = must_alloc(p, 100); /* 128: the 512-byte region is the best fit */
    CHECK(a == 0x20000, "100 bytes go to the 512-byte region");
    const uintptr_t b = must_alloc(p, 0);   /* 64: the 384 left there */
    const uintptr_t c = must_alloc(p, 700); /* 704: only the 1024-byte region holds it */
    lz_kv_pool_alloc(p, 1000, &x);          /* fails: 320 and 320 left */
    lz_kv_pool_release(p, b, 0);
    lz_kv_pool_release(p, b, 0);            /* refused */
    const lz_kv_pool_stats st = stats_of(p);
    CHECK(st.capacity == 1536, "capacity %zu", st.capacity);
    CHECK(st.used == 128 + 704, "used %zu", st.used);
    CHECK(st.largest_free == 384, "largest_free %zu", st.largest_free);
    CHECK(st.n_free_extents == 2, "n_free_extents %lld", (long long)st.n_free_extents);
    CHECK(st.n_live == 2, "n_live %lld", (long long)st.n_live);
    CHECK(st.allocs == 4 && st.failures == 1 && st.releases == 1, "allocs %lld failures %lld releases %lld",
          (long long)st.allocs, (long long)st.failures, (long long)st.releases);
    CHECK(st.n_regions == 2, "n_regions %d", st.n_regions);
    CHECK(c == 0x10000, "700 bytes at region 0's start");
    lz_kv_pool_free(p);
}

/* ---- the reference: an occupancy bitmap per region, in align units ---- */
#define SIM_REGIONS 3
#define SIM_MAX_UNITS 4096
#define SIM_MAX_LIVE (SIM_REGIONS * SIM_MAX_UNITS)

typedef struct {
    size_t align;
    uintptr_t base[SIM_REGIONS]; /* address of the region's unit 0 */
    int units[SIM_REGIONS];
    int by_addr[SIM_REGIONS];    /* regions in address order */
    unsigned char busy[SIM_REGIONS][SIM_MAX_UNITS];
    int n_live;                  /* live extents, as the test allocated them */
    uintptr_t live_at[SIM_MAX_LIVE];
    size_t live_bytes[SIM_MAX_LIVE]; /* as given to alloc */
    int live_units[SIM_MAX_LIVE];
    int used_units;
} sim;
static sim S;

typedef struct {
    int found, region, unit; /* best fit of the last search */
    int runs, largest;       /* free runs (maximal, per region) and the longest, in units */
} sim_scan;

/* One pass over every region's maximal free runs, in address order: the
 * smallest run of at least need units (ties: the first) and the layout. */
static sim_scan sim_search(const sim *s, int need)
{
    sim_scan sc = {0, -1, -1, 0, 0};
    int best = 0;
    for (int k = 0; k < SIM_REGIONS; k++) {
        const int r = s->by_addr[k];
        for (int u = 0; u < s->units[r];) {
            if (s->busy[r][u]) { u++; continue; }
            const int start = u;
            while (u < s->units[r] && !s->busy[r][u]) u++;
            const int len = u - start;
            sc.runs++;
            if (len > sc.largest) sc.largest = len;
            if (len >= need && (!sc.found || len < best)) sc.found = 1, best = len, sc.region = r, sc.unit = start;
        }
    }
    return sc;
}

static int units_of(const sim *s, size_t bytes) { return bytes == 0 ? 1 : (int)((bytes + s->align - 1) / s->align); }

/* region and unit of an address, or -1 when it is in no region or not on a unit */
static int sim_locate(const sim *s, uintptr_t at, int *unit)
{
    for (int r = 0; r < SIM_REGIONS; r++)
        if (at >= s->base[r] && at < s->base[r] + (uintptr_t)s->units[r] * s->align) {
            if ((at - s->base[r]) % s->align) return -1;
            *unit = (int)((at - s->base[r]) / s->align);
            return r;
        }
    return -1;
}

static void sim_mark(sim *s, uintptr_t at, int n, int busy)
{
    int u = 0;
    const int r = sim_locate(s, at, &u);
    memset(&s->busy[r][u], busy, (size_t)n);
    s->used_units += busy ? n : -n;
}

/* The live extent exactly [at, at + units), or -1. */
static int sim_live_index(const sim *s, uintptr_t at, int units)
{
    for (int i = 0; i < s->n_live; i++)
        if (s->live_at[i] == at && s->live_units[i] == units) return i;
    return -1;
}

/* One random stream against the reference; 0, or 1 with what differed first in msg. */
static int run_stream(int trial, int n_ops, char *msg, size_t n_msg)
{
    static const size_t aligns[] = {1, 8, 64, 256, 4096};
    sim *s = &S;
    memset(s, 0, sizeof *s);
    s->align = aligns[rint_(5)];
    for (int r = 0; r < SIM_REGIONS; r++) /* a third small, the rest 64..4096 units */
        s->units[r] = rint_(3) == 0 ? 64 + rint_(200) : 64 + rint_(SIM_MAX_UNITS - 63);
    /* address order: a random permutation, regions touching a third of the time */
    for (int k = 0; k < SIM_REGIONS; k++) s->by_addr[k] = k;
    for (int k = SIM_REGIONS - 1; k > 0; k--) {
        const int j = rint_(k + 1), t = s->by_addr[k];
        s->by_addr[k] = s->by_addr[j], s->by_addr[j] = t;
    }
    uintptr_t next = (uintptr_t)1 << 24;
    for (int k = 0; k < SIM_REGIONS; k++) {
        const int r = s->by_addr[k];
        s->base[r] = next;
        next += ((uintptr_t)s->units[r] + (rint_(3) == 0 ? 0 : 1 + (uintptr_t)rint_(100))) * s->align;
    }
    lz_kv_pool *p = lz_kv_pool_new(s->align);
    int64_t allocs = 0, releases = 0, failures = 0;
    size_t capacity = 0;
    for (int r = 0; r < SIM_REGIONS; r++) {
        const size_t bytes = (size_t)s->units[r] * s->align + (size_t)rint_((int)s->align); /* rounds down */
        if (lz_kv_pool_add_region(p, s->base[r], bytes) != 0) {
            snprintf(msg, n_msg, "trial %d: add region %d failed", trial, r);
            lz_kv_pool_free(p);
            return 1;
        }
        capacity += (size_t)s->units[r] * s->align;
    }
    int bad = 0;
    for (int op = 0; op < n_ops && !bad; op++) {
        const int kind = s->n_live == 0 ? 0 : rint_(100);
        if (kind < 55) { /* alloc 0..300 units' worth of bytes */
            const size_t bytes = (size_t)(rnd() % (300 * s->align + 1));
            const int need = units_of(s, bytes);
            const sim_scan sc = sim_search(s, need);
            uintptr_t at = 0;
            const int rc = lz_kv_pool_alloc(p, bytes, &at);
            allocs++;
            if ((rc == 0) != sc.found) {
                snprintf(msg, n_msg, "trial %d op %d: alloc %zu bytes (%d units) rc %d, reference %s", trial, op, bytes,
                         need, rc, sc.found ? "finds a run" : "finds none");
                bad = 1;
            } else if (rc != 0) {
                failures++;
            } else {
                const uintptr_t want = s->base[sc.region] + (uintptr_t)sc.unit * s->align;
                int u = 0;
                const int r = sim_locate(s, at, &u);
                int overlaps = r < 0 || u + need > s->units[r];
                for (int i = 0; !overlaps && i < need; i++) overlaps = s->busy[r][u + i];
                if (at != want || overlaps) {
                    snprintf(msg, n_msg, "trial %d op %d: alloc %d units at %#lx, reference %#lx%s", trial, op, need,
                             (unsigned long)at, (unsigned long)want, overlaps ? " (overlaps a live extent)" : "");
                    bad = 1;
                } else {
                    sim_mark(s, at, need, 1);
                    s->live_at[s->n_live] = at, s->live_bytes[s->n_live] = bytes, s->live_units[s->n_live] = need;
                    s->n_live++;
                }
            }
        } else if (kind < 93) { /* release a random live extent */
            const int i = rint_(s->n_live);
            const int rc = lz_kv_pool_release(p, s->live_at[i], s->live_bytes[i]);
            if (rc != 0) {
                snprintf(msg, n_msg, "trial %d op %d: release of live %#lx (%zu bytes) refused", trial, op,
                         (unsigned long)s->live_at[i], s->live_bytes[i]);
                bad = 1;
            } else {
                releases++;
                sim_mark(s, s->live_at[i], s->live_units[i], 0);
                s->n_live--;
                s->live_at[i] = s->live_at[s->n_live], s->live_bytes[i] = s->live_bytes[s->n_live];
                s->live_units[i] = s->live_units[s->n_live];
            }
        } else { /* a release that is probably wrong: another size, inside, or anywhere */
            const int i = rint_(s->n_live), how = rint_(3);
            uintptr_t at = s->live_at[i];
            int units = s->live_units[i];
            if (how == 0) units += rint_(2) ? 1 + rint_(3) : -(1 + rint_(units > 1 ? units - 1 : 1));
            if (how == 1) at += s->align * (uintptr_t)(1 + rint_(units)), units = 1 + rint_(4);
            if (how == 2) {
                const int r = rint_(SIM_REGIONS);
                at = s->base[r] + s->align * (uintptr_t)rint_(s->units[r]);
                units = 1 + rint_(300);
            }
            if (units < 1) units = 1;
            const int live = sim_live_index(s, at, units);
            const lz_kv_pool_stats before = stats_of(p);
            const int rc = lz_kv_pool_release(p, at, (size_t)units * s->align);
            if ((rc == 0) != (live >= 0) || (rc != 0 && !stats_same(before, stats_of(p)))) {
                snprintf(msg, n_msg, "trial %d op %d: release %#lx of %d units rc %d, exactly live: %s", trial, op,
                         (unsigned long)at, units, rc, live >= 0 ? "yes" : "no");
                bad = 1;
            } else if (rc == 0) { /* by chance exactly a live extent */
                releases++;
                sim_mark(s, at, units, 0);
                s->n_live--;
                s->live_at[live] = s->live_at[s->n_live], s->live_bytes[live] = s->live_bytes[s->n_live];
                s->live_units[live] = s->live_units[s->n_live];
            }
        }
        if (bad) break;
        const sim_scan sc = sim_search(s, INT32_MAX);
        const lz_kv_pool_stats st = stats_of(p);
        if (st.used != (size_t)s->used_units * s->align || st.largest_free != (size_t)sc.largest * s->align ||
            st.n_free_extents != sc.runs || st.n_live != s->n_live || st.capacity != capacity ||
            st.allocs != allocs || st.failures != failures || st.releases != releases || st.n_regions != SIM_REGIONS) {
            snprintf(msg, n_msg,
                     "trial %d op %d: stats used %zu/%zu largest %zu/%zu free extents %lld/%d live %lld/%d "
                     "allocs %lld/%lld failures %lld/%lld releases %lld/%lld",
                     trial, op, st.used, (size_t)s->used_units * s->align, st.largest_free,
                     (size_t)sc.largest * s->align, (long long)st.n_free_extents, sc.runs, (long long)st.n_live,
                     s->n_live, (long long)st.allocs, (long long)allocs, (long long)st.failures, (long long)failures,
                     (long long)st.releases, (long long)releases);
            bad = 1;
        }
    }
    lz_kv_pool_free(p);
    return bad;
}

static void test_against_reference(void)
{
    char msg[512];
    int n_bad = 0;
    for (int trial = 0; trial < 60; trial++) {
        msg[0] = '\0';
        const int bad = run_stream(trial, 3000, msg, sizeof msg);
        n_bad += bad;
        CHECK(!bad, "%s", msg);
        if (n_bad >= 5) break; /* the first few are enough to read */
    }
}

/* ---- churn on a tight pool ---- */
static void test_churn(void)
{
    enum { MAX_LIVE = 4096 };
    const size_t align = 256, max_bytes = 64 << 10;
    const size_t region_bytes[3] = {96 << 10, 64 << 10, 80 << 10}; /* 240 KiB: 3.75 x the largest size */
    lz_kv_pool *p = lz_kv_pool_new(align);
    for (int r = 0; r < 3; r++) lz_kv_pool_add_region(p, ((uintptr_t)1 << 32) + ((uintptr_t)r << 20), region_bytes[r]);
    static uintptr_t at[MAX_LIVE];
    static size_t bytes[MAX_LIVE];
    int n_live = 0, wrong_used = 0, wrong_release = 0;
    size_t used = 0;
    int64_t ok = 0, failed = 0;
    for (int op = 0; op < 100000; op++) {
        if (n_live == 0 || (n_live < MAX_LIVE && rint_(2))) {
            const size_t b = (size_t)(rnd() % (max_bytes + 1));
            uintptr_t a = 0;
            if (lz_kv_pool_alloc(p, b, &a) == 0) {
                at[n_live] = a, bytes[n_live++] = b;
                used += b == 0 ? align : (b + align - 1) / align * align;
                ok++;
            } else {
                failed++;
            }
        } else {
            const int i = rint_(n_live);
            wrong_release += lz_kv_pool_release(p, at[i], bytes[i]) != 0;
            used -= bytes[i] == 0 ? align : (bytes[i] + align - 1) / align * align;
            n_live--;
            at[i] = at[n_live], bytes[i] = bytes[n_live];
        }
        const lz_kv_pool_stats st = stats_of(p);
        wrong_used += st.used != used || st.n_live != n_live || st.used + st.largest_free > st.capacity;
    }
    CHECK(wrong_used == 0 && wrong_release == 0, "%d ops with wrong stats, %d releases refused", wrong_used,
          wrong_release);
    CHECK(ok > 10000 && failed > 1000, "the pool filled up: %lld allocations, %lld failures", (long long)ok,
          (long long)failed);
    while (n_live > 0) {
        const int i = rint_(n_live);
        wrong_release += lz_kv_pool_release(p, at[i], bytes[i]) != 0;
        n_live--;
        at[i] = at[n_live], bytes[i] = bytes[n_live];
    }
    const lz_kv_pool_stats st = stats_of(p);
    CHECK(wrong_release == 0, "%d final releases refused", wrong_release);
    CHECK(st.used == 0 && st.n_live == 0 && st.n_free_extents == 3 && st.largest_free == (96 << 10),
          "back to one free extent per region: used %zu live %lld free extents %lld largest %zu", st.used,
          (long long)st.n_live, (long long)st.n_free_extents, st.largest_free);
    uintptr_t a = 0, b = 0, c = 0;
    CHECK(lz_kv_pool_alloc(p, 96 << 10, &a) == 0 && lz_kv_pool_alloc(p, 80 << 10, &b) == 0 &&
              lz_kv_pool_alloc(p, 64 << 10, &c) == 0,
          "every region whole again");
    CHECK(a == ((uintptr_t)1 << 32) && b == ((uintptr_t)1 << 32) + (2 << 20) && c == ((uintptr_t)1 << 32) + (1 << 20),
          "at the regions' bases");
    lz_kv_pool_free(p);
}

/* ---- many small live extents: the live table grows, and deletes from the middle of its probe runs ---- */
static void test_many_small(void)
{
    enum { N = 20000 };
    static uintptr_t at[N];
    lz_kv_pool *p = lz_kv_pool_new(8);
    lz_kv_pool_add_region(p, 0x100000, (size_t)N * 8);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += lz_kv_pool_alloc(p, 1 + (size_t)rint_(8), &at[i]) != 0 || at[i] != 0x100000 + 8 * (uintptr_t)i;
    CHECK(bad == 0 && stats_of(p).n_live == N && stats_of(p).n_free_extents == 0, "%d of %d small allocations wrong",
          bad, N);
    for (int i = 0; i < N; i += 2) bad += lz_kv_pool_release(p, at[i], 8) != 0;
    CHECK(bad == 0 && stats_of(p).n_free_extents == N / 2, "every other released: %d refused, %lld free extents", bad,
          (long long)stats_of(p).n_free_extents);
    for (int i = 0; i < N; i += 2) bad += lz_kv_pool_release(p, at[i], 8) != -1;
    for (int i = 1; i < N; i += 2) bad += lz_kv_pool_release(p, at[i], 16) != -1;
    CHECK(bad == 0, "%d double or wrong-size releases accepted", bad);
    for (int i = N - 1; i > 0; i -= 2) bad += lz_kv_pool_release(p, at[i], 1) != 0;
    const lz_kv_pool_stats st = stats_of(p);
    CHECK(bad == 0 && st.n_live == 0 && st.n_free_extents == 1 && st.largest_free == (size_t)N * 8,
          "the rest released: %d refused, %lld free extents", bad, (long long)st.n_free_extents);
    lz_kv_pool_free(p);
}

/* ---- documents sized as Ada-KV keeps them ---- */
#define ADA_LAYERS 32
#define ADA_KV_HEADS 8
#define ADA_HEAD_DIM 128

/* Bytes of a document's K and V (fp16) when every (layer, head) keeps
 * kept[l][h] rows and each layer is padded to its largest head:
 * sum over l of KV * max_h kept[l][h] * d * 2 (K and V) * 2 bytes. */
static size_t adakv_doc_bytes(const int kept[ADA_LAYERS][ADA_KV_HEADS])
{
    size_t bytes = 0;
    for (int l = 0; l < ADA_LAYERS; l++) {
        int most = 0;
        for (int h = 0; h < ADA_KV_HEADS; h++) most = kept[l][h] > most ? kept[l][h] : most;
        bytes += (size_t)ADA_KV_HEADS * (size_t)most * ADA_HEAD_DIM * 2 * 2;
    }
    return bytes;
}

/* Extents sorted by address must not overlap; returns how many pairs do. */
static int count_overlaps(uintptr_t *at, size_t *size, int n)
{
    for (int i = 1; i < n; i++) /* insertion sort by address */
        for (int j = i; j > 0 && at[j - 1] > at[j]; j--) {
            const uintptr_t ta = at[j]; at[j] = at[j - 1]; at[j - 1] = ta;
            const size_t ts = size[j]; size[j] = size[j - 1]; size[j - 1] = ts;
        }
    int bad = 0;
    for (int i = 1; i < n; i++) bad += at[i - 1] + size[i - 1] > at[i];
    return bad;
}

static void test_adakv_documents(void)
{
    enum { MAX_DOCS = 1024 };
    const size_t align = 256;
    const uintptr_t base0 = (uintptr_t)0x7f0000000000ull, base1 = (uintptr_t)0x7f2000000000ull;
    const size_t bytes0 = (size_t)4 << 30, bytes1 = (size_t)3 << 30;
    lz_kv_pool *p = lz_kv_pool_new(align);
    CHECK(lz_kv_pool_add_region(p, base0, bytes0) == 0 && lz_kv_pool_add_region(p, base1, bytes1) == 0,
          "two GPU-sized regions");
    static uintptr_t at[MAX_DOCS], sorted_at[MAX_DOCS];
    static size_t bytes[MAX_DOCS], sorted_size[MAX_DOCS];
    static int kept[ADA_LAYERS][ADA_KV_HEADS];
    int n = 0, misaligned = 0, overlaps = 0, bad_failures = 0, refused = 0, n_fail = 0;
    size_t used = 0;
    for (int round = 0; round < 6; round++) {
        /* allocate until the pool refuses a few documents */
        for (int tries = 0; tries < 400 && n < MAX_DOCS; tries++) {
            const int tokens = 32 + rint_(1024 - 32 + 1);
            for (int l = 0; l < ADA_LAYERS; l++)
                for (int h = 0; h < ADA_KV_HEADS; h++) kept[l][h] = rint_(4) == 0 ? tokens : rint_(tokens + 1);
            const size_t b = adakv_doc_bytes(kept);
            const size_t rounded = b == 0 ? align : (b + align - 1) / align * align;
            const lz_kv_pool_stats before = stats_of(p);
            uintptr_t a = 0;
            if (lz_kv_pool_alloc(p, b, &a) == 0) {
                misaligned += a % align != 0;
                at[n] = a, bytes[n++] = b;
                used += rounded;
            } else {
                bad_failures += before.largest_free >= rounded; /* refused although an extent holds it */
                if (++n_fail >= 3) break;
            }
        }
        for (int i = 0; i < n; i++) sorted_at[i] = at[i], sorted_size[i] = bytes[i];
        overlaps += count_overlaps(sorted_at, sorted_size, n);
        /* release a random half */
        for (int k = n / 2; k > 0; k--) {
            const int i = rint_(n);
            refused += lz_kv_pool_release(p, at[i], bytes[i]) != 0;
            used -= bytes[i] == 0 ? align : (bytes[i] + align - 1) / align * align;
            n--;
            at[i] = at[n], bytes[i] = bytes[n];
        }
        n_fail = 0;
    }
    lz_kv_pool_stats st = stats_of(p);
    CHECK(misaligned == 0 && overlaps == 0, "%d misaligned extents, %d overlapping pairs", misaligned, overlaps);
    CHECK(bad_failures == 0, "%d documents refused while a free extent held them", bad_failures);
    CHECK(st.used == used && st.n_live == n, "used %zu (want %zu), live %lld (want %d)", st.used, used,
          (long long)st.n_live, n);
    CHECK(st.failures > 0 && st.allocs - st.failures > 200, "the pool filled: %lld documents placed, %lld refused",
          (long long)(st.allocs - st.failures), (long long)st.failures);
    while (n > 0) {
        const int i = rint_(n);
        refused += lz_kv_pool_release(p, at[i], bytes[i]) != 0;
        n--;
        at[i] = at[n], bytes[i] = bytes[n];
    }
    st = stats_of(p);
    CHECK(refused == 0, "%d document releases refused", refused);
    CHECK(st.used == 0 && st.n_live == 0 && st.n_free_extents == 2 && st.largest_free == bytes0,
          "the free space came back: used %zu, %lld free extents, largest %zu", st.used, (long long)st.n_free_extents,
          st.largest_free);
    uintptr_t a = 0, b = 0;
    CHECK(lz_kv_pool_alloc(p, bytes0, &a) == 0 && a == base0 && lz_kv_pool_alloc(p, bytes1, &b) == 0 && b == base1,
          "both regions whole again");
    lz_kv_pool_free(p);
}

int main(void)
{
    test_align_and_zero();
    test_bad_arguments();
    test_exhaustion();
    test_best_fit();
    test_coalescing();
    test_no_merge_across_regions();
    test_refused_releases();
    test_stats_fields();
    test_against_reference();
    test_churn();
    test_many_small();
    test_adakv_documents();
    return lz_test_done();
}

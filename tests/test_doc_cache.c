/* test_doc_cache.c - the document cache policy: budget never exceeded,
 * frequency admission (a one-off document does not displace a popular one),
 * eviction of the least frequent, priors, preload, and a Zipf stream where
 * the frequency policy beats LRU-like admission-free caching. */
#include <math.h>

#include "cache/doc_cache.h"
#include "tests/test.h"

static int n_freed;
static void free_value(void *v, void *ctx) { (void)ctx; free(v); n_freed++; }

static void *val(void) { return malloc(1); }

static void test_basic(void)
{
    lz_doc_cache *c = lz_doc_cache_new(100, free_value, NULL);
    lz_doc_cache_stats st;
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_get(c, "a", 1) == NULL, "empty miss");
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_put(c, "a", 1, val(), 60) == 1, "a admitted into free room");
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_get(c, "a", 1) != NULL, "a hit");
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_get(c, "a", 1) != NULL, "a hit 2");
    /* b seen once: cannot displace a (freq 3) */
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_get(c, "b", 1) == NULL, "b miss");
    void *b = val();
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_put(c, "b", 1, b, 60) == 0, "b rejected: less popular than a");
    free(b);
    /* b becomes popular: 4 accesses > a's 3 */
    for (int i = 0; i < 3; i++) { lz_doc_cache_begin(c); lz_doc_cache_get(c, "b", 1); }
    b = val();
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_put(c, "b", 1, b, 60) == 1, "popular b admitted");
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_get(c, "a", 1) == NULL, "a evicted");
    lz_doc_cache_get_stats(c, &st);
    CHECK(st.bytes_used <= st.bytes_budget && st.bytes_used == 60, "budget respected (%lld)", (long long)st.bytes_used);
    CHECK(st.evicted == 1 && n_freed == 1, "one eviction freed");
    void *big = val();
    lz_doc_cache_prior(c, "big", 3, 1000);
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_put(c, "big", 3, big, 101) == 0, "larger than the budget rejected");
    free(big);
    /* prior: a persisted-popular document displaces b */
    lz_doc_cache_prior(c, "p", 1, 50);
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_put(c, "p", 1, val(), 70) == 1, "prior-popular p admitted");
    lz_doc_cache_free(c);
    CHECK(n_freed == 3, "free releases every cached value (%d)", n_freed);
    /* preload fills free room without admission */
    c = lz_doc_cache_new(100, free_value, NULL);
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_preload(c, "x", 1, val(), 50) == 1, "preload");
    void *y = val();
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_preload(c, "y", 1, y, 51) == 0, "preload beyond budget refused");
    free(y);
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_get(c, "x", 1) != NULL, "preloaded hit");
    lz_doc_cache_free(c);
    /* zero budget caches nothing */
    c = lz_doc_cache_new(0, free_value, NULL);
    void *z = val();
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_put(c, "z", 1, z, 1) == 0, "zero budget");
    free(z);
    lz_doc_cache_free(c);
}

/* Zipf(1.1) over 1000 documents of equal size, budget for 50: the hit rate
 * must approach the ideal (mass of the 50 most popular) and stay in budget. */
static void test_pinning(void)
{
    lz_doc_cache *c = lz_doc_cache_new(100, free_value, NULL);
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_put(c, "a", 1, val(), 60) == 1, "a in");
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_get(c, "a", 1) != NULL, "a used by this request");
    for (int i = 0; i < 5; i++) lz_doc_cache_get(c, "b", 1);
    void *b = val();
    CHECK(lz_doc_cache_put(c, "b", 1, b, 60) == 0, "a is pinned by the running request: b not admitted");
    free(b);
    lz_doc_cache_begin(c);
    b = val();
    lz_doc_cache_get(c, "b", 1);
    CHECK(lz_doc_cache_put(c, "b", 1, b, 60) == 1, "next request: a evictable, b admitted");
    lz_doc_cache_free(c);
}

/* Holds (several requests running at once): an entry a running request holds is never
 * evicted by another request's put, trim or evict_one, nor removed, across begins, until its
 * last hold is released; holds count; the stats say what is held. */
static void test_holds(void)
{
    lz_doc_cache *c = lz_doc_cache_new(100, free_value, NULL);
    lz_doc_cache_stats st;
    lz_doc_cache_begin(c); /* request A */
    CHECK(lz_doc_cache_put(c, "a", 1, val(), 60) == 1, "a in");
    CHECK(lz_doc_cache_hold(c, "a", 1) == 1, "A holds a");
    CHECK(lz_doc_cache_hold(c, "zz", 2) == 0, "nothing to hold for a key not cached");
    lz_doc_cache_get_stats(c, &st);
    CHECK(st.n_held == 1 && st.bytes_held == 60, "one entry of 60 bytes held (%lld, %lld)", (long long)st.n_held,
          (long long)st.bytes_held);
    lz_doc_cache_begin(c); /* request B starts while A still decodes */
    for (int i = 0; i < 9; i++) lz_doc_cache_get(c, "b", 1);
    void *b = val();
    CHECK(lz_doc_cache_put(c, "b", 1, b, 60) == 0, "a held by A: popular b not admitted over it");
    free(b);
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_hold(c, "a", 1) == 1, "a second request holds a too");
    lz_doc_cache_set_budget(c, 10);
    CHECK(lz_doc_cache_trim(c) == 0 && lz_doc_cache_evict_one(c) == 0, "trim and evict_one leave a held entry");
    CHECK(lz_doc_cache_remove(c, "a", 1) == -1, "a held entry is not removed");
    CHECK(lz_doc_cache_release(c, "a", 1) == 1, "first release");
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_trim(c) == 0, "still held once: kept");
    lz_doc_cache_get_stats(c, &st);
    CHECK(st.n_held == 1 && st.n_entries == 1, "a still held and cached");
    CHECK(lz_doc_cache_release(c, "a", 1) == 1, "last release");
    CHECK(lz_doc_cache_release(c, "a", 1) == 0, "a release without a hold is refused");
    lz_doc_cache_get_stats(c, &st);
    CHECK(st.n_held == 0 && st.bytes_held == 0, "nothing held");
    const int n0 = n_freed;
    CHECK(lz_doc_cache_trim(c) == 1 && n_freed == n0 + 1, "released: trimmed away and freed");
    lz_doc_cache_set_budget(c, 100);
    CHECK(lz_doc_cache_put(c, "c", 1, val(), 50) == 1 && lz_doc_cache_hold(c, "c", 1), "c in, held");
    lz_doc_cache_begin(c);
    CHECK(lz_doc_cache_put(c, "d", 1, val(), 50) == 1 && lz_doc_cache_hold(c, "d", 1), "d in, held");
    lz_doc_cache_begin(c);
    for (int i = 0; i < 20; i++) lz_doc_cache_get(c, "e", 1);
    void *e = val();
    CHECK(lz_doc_cache_put(c, "e", 1, e, 40) == 0, "full of held entries: e rejected");
    free(e);
    lz_doc_cache_release(c, "c", 1);
    e = val();
    CHECK(lz_doc_cache_put(c, "e", 1, e, 40) == 1 && !lz_doc_cache_contains(c, "c", 1) && lz_doc_cache_contains(c, "d", 1),
          "c released: e takes its room, held d stays");
    lz_doc_cache_free(c); /* a cache freed with holds left frees every value */
}

static void test_zipf(void)
{
    const int N = 1000, K = 50, Q = 100000;
    double *cdf = malloc((size_t)N * sizeof(double)), z = 0;
    for (int i = 0; i < N; i++) { z += 1.0 / pow(i + 1, 1.1); cdf[i] = z; }
    double ideal = 0;
    for (int i = 0; i < K; i++) ideal += 1.0 / pow(i + 1, 1.1) / z;
    lz_doc_cache *c = lz_doc_cache_new((size_t)K * 1000, free_value, NULL);
    uint64_t rng = 12345;
    for (int q = 0; q < Q; q++) {
        double u = lz_test_u01(&rng) * z;
        int lo = 0, hi = N - 1;
        while (lo < hi) { int mid = (lo + hi) / 2; if (cdf[mid] < u) lo = mid + 1; else hi = mid; }
        int key = lo;
        lz_doc_cache_begin(c);
        if (!lz_doc_cache_get(c, &key, sizeof key)) {
            void *v = val();
            if (!lz_doc_cache_put(c, &key, sizeof key, v, 1000)) free(v);
        }
    }
    lz_doc_cache_stats st;
    lz_doc_cache_get_stats(c, &st);
    double rate = (double)st.hits / (double)(st.hits + st.misses);
    CHECK(st.bytes_used <= st.bytes_budget, "budget");
    CHECK(rate > 0.9 * ideal, "Zipf hit rate %.3f vs ideal %.3f", rate, ideal);
    printf("zipf: hit rate %.3f, ideal (top-%d mass) %.3f, evictions %lld\n", rate, K, ideal, (long long)st.evicted);
    lz_doc_cache_free(c);
    free(cdf);
}

int main(void)
{
    test_basic();
    test_pinning();
    test_holds();
    test_zipf();
    return lz_test_done();
}

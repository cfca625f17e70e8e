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
    test_zipf();
    return lz_test_done();
}

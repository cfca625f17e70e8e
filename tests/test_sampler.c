/* test_sampler.c - model/sampler.c: lz_sample_argmax against the plain
 * sequential scan (the first index of the largest value, a NaN never taken
 * except at index 0) on random rows with ties, NaN and -inf; greedy sampling
 * is the argmax; a seeded sampler repeats itself and stays inside the top-p
 * nucleus; bad settings are clamped. */
#include "model/sampler.h"
#include "tests/test.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double u01(void) { return lz_test_u01(&rng); }

/* the definition: best = 0; best = i whenever x[i] > x[best] */
static int scan(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void test_argmax(void)
{
    enum { V = 5000 };
    static float x[V];
    int same = 1;
    for (int r = 0; r < 200; r++) {
        const int n = 1 + (int)(u01() * V);
        for (int i = 0; i < n; i++) {
            x[i] = r % 3 == 0 ? (float)(int)(u01() * 5) : (float)(u01() * 40 - 20); /* every third row: ties */
            if (r % 4 == 1 && u01() < 0.05) x[i] = NAN;
            if (r % 5 == 2 && u01() < 0.2) x[i] = -INFINITY;
        }
        if (r % 7 == 3) x[0] = NAN;                                 /* a NaN first: index 0 */
        if (r % 11 == 5) for (int i = 0; i < n; i++) x[i] = -INFINITY; /* all -inf: index 0 */
        if (r % 13 == 6 && n > 2) x[0] = -INFINITY, x[1] = NAN;      /* then the first finite maximum */
        const int got = lz_sample_argmax(x, n), want = scan(x, n);
        same &= got == want;
        CHECK(got == want, "row %d (n %d): lz_sample_argmax %d, the scan %d", r, n, got, want);
    }
    printf("sampler: lz_sample_argmax = the sequential scan on 200 rows with ties, NaN and -inf: %s\n", same ? "yes" : "NO");
}

static void test_sampling(void)
{
    enum { V = 64 };
    float lg[V];
    for (int i = 0; i < V; i++) lg[i] = (float)(u01() * 6 - 3);
    lg[17] = 9.f;
    lz_sampler g, a, b, p;
    CHECK(lz_sampler_init(&g, V, 0.f, 1.f, 1) == 0 && lz_sampler_init(&a, V, 1.0f, 1.f, 42) == 0 &&
              lz_sampler_init(&b, V, 1.0f, 1.f, 42) == 0 && lz_sampler_init(&p, V, 1.5f, 0.5f, 7) == 0,
          "init");
    CHECK(lz_sample(&g, lg) == 17 && lz_sample(&g, lg) == 17, "greedy is the argmax");
    int repeat = 1, nucleus = 1;
    for (int t = 0; t < 200; t++) {
        repeat &= lz_sample(&a, lg) == lz_sample(&b, lg);
        nucleus &= lz_sample(&p, lg) == 17; /* 17 holds over half the mass at temperature 1.5 */
    }
    CHECK(repeat, "the same seed, the same draws");
    CHECK(nucleus, "top-p 0.5 keeps only the token holding most of the mass");
    lz_sampler c;
    CHECK(lz_sampler_init(&c, V, -1.f, 2.f, 0) == 0 && c.temperature == 0 && c.top_p == 1.0f && c.rng != 0,
          "bad settings clamped (temperature %g, top_p %g)", c.temperature, c.top_p);
    lz_sampler_free(&g), lz_sampler_free(&a), lz_sampler_free(&b), lz_sampler_free(&p), lz_sampler_free(&c);
}

int main(void)
{
    test_argmax();
    test_sampling();
    return lz_test_done();
}

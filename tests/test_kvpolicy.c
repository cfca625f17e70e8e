/* test_kvpolicy.c - KV eviction at ingest (ingest/kvpolicy.h): the Ada
 * allocation equals a brute-force top-B over the concatenated scores of all
 * heads, every head gets its alpha share, totals are exact, the window is
 * kept, GEMM scoring (GQA mean / max) equals a naive loop, pyramid budgets,
 * compaction order, spec round trip; the forward pass's query capture; the
 * encoder compresses a document of a generated model and keeps exact rows;
 * a document fetched from a multi-document backend's pass packs to the
 * same bytes as one encoded on the CPU. */
#include <math.h>
#include <stdint.h>

#include "ingest/encode.h"
#include "ingest/kvpolicy.h"
#include "ingest/pass_ref.h"
#include "model/llama.h"
#include "tests/test.h"
#include "tests/test_model.h"

static uint64_t rng = 88172645463325252ull;
static float frand(void) { return (float)lz_test_u01(&rng); }

typedef struct { float s; int idx; } sv;
static int sv_cmp(const void *a, const void *b)
{
    const sv *x = a, *y = b;
    return x->s > y->s ? -1 : x->s < y->s ? 1 : x->idx - y->idx;
}

/* brute force: top `total` of all KV*m scores; with boost, each head's top
 * r entries are first raised above everything (the safeguard). */
static void brute(unsigned char *keep, const float *sc, int KV, int m, long total, int r)
{
    sv *v = malloc(sizeof *v * (size_t)KV * m);
    for (int i = 0; i < KV * m; i++) v[i] = (sv){sc[i], i};
    if (r > 0)
        for (int h = 0; h < KV; h++) {
            sv *vh = malloc(sizeof *vh * (size_t)m);
            for (int j = 0; j < m; j++) vh[j] = (sv){sc[h * m + j], j};
            qsort(vh, (size_t)m, sizeof *vh, sv_cmp);
            for (int i = 0; i < r; i++) v[h * m + vh[i].idx].s = 1e30f;
            free(vh);
        }
    qsort(v, (size_t)KV * m, sizeof *v, sv_cmp);
    memset(keep, 0, (size_t)KV * m);
    for (long i = 0; i < total; i++) keep[v[i].idx] = 1;
    free(v);
}

static void test_allocation(void)
{
    const int shapes[][3] = {{1, 50, 10}, {4, 100, 20}, {8, 333, 33}, {8, 64, 1}, {2, 40, 40}, {8, 500, 123}};
    int all_eq0 = 1, all_eqa = 1, share = 1, totals = 1, snap_ok = 1;
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        int KV = shapes[t][0], m = shapes[t][1], b = shapes[t][2];
        float *sc = malloc(sizeof(float) * KV * m);
        /* heads differ: some peaked, some diffuse */
        for (int h = 0; h < KV; h++)
            for (int j = 0; j < m; j++) {
                float x = frand();
                sc[h * m + j] = h % 2 ? powf(x, 8.0f) : x * 0.1f;
            }
        unsigned char *keep = malloc((size_t)KV * m), *want = malloc((size_t)KV * m);
        int *hb = malloc(sizeof(int) * KV);
        /* alpha = 0: exactly the joint top-B */
        lz_kvpolicy_select(keep, hb, sc, NULL, KV, m, b, 1, 0.0f);
        brute(want, sc, KV, m, (long)KV * b, 0);
        all_eq0 &= !memcmp(keep, want, (size_t)KV * m);
        /* alpha = 0.2: the safeguard, then the joint top of the rest */
        lz_kvpolicy_select(keep, hb, sc, NULL, KV, m, b, 1, 0.2f);
        int r = (int)floorf(0.2f * b + 1e-6f);
        brute(want, sc, KV, m, (long)KV * b, r);
        all_eqa &= !memcmp(keep, want, (size_t)KV * m);
        long sum = 0, cnt = 0;
        for (int h = 0; h < KV; h++) {
            share &= hb[h] >= r;
            sum += hb[h];
            int c = 0;
            for (int j = 0; j < m; j++) c += keep[h * m + j];
            totals &= c == hb[h];
            cnt += c;
        }
        totals &= sum == (long)KV * b && cnt == sum;
        /* SnapKV: every head exactly its own top b */
        lz_kvpolicy_select(keep, hb, sc, NULL, KV, m, b, 0, 0.2f);
        for (int h = 0; h < KV; h++) {
            brute(want, sc + h * m, 1, m, b, 0);
            snap_ok &= hb[h] == b && !memcmp(keep + h * m, want, (size_t)m);
        }
        free(sc); free(keep); free(want); free(hb);
    }
    CHECK(all_eq0, "Ada (alpha 0) equals the brute-force top-B over all heads");
    CHECK(all_eqa, "Ada (alpha 0.2) equals brute force with each head's top alpha*B reserved");
    CHECK(share, "every head gets at least floor(alpha * B)");
    CHECK(totals, "the total equals the budget exactly");
    CHECK(snap_ok, "SnapKV keeps each head's own top B");

    /* a peaked head wins budget from a flat one */
    float sc[2 * 10];
    for (int j = 0; j < 10; j++) { sc[j] = j < 2 ? 0.45f : 0.0125f; sc[10 + j] = 0.1f - 0.001f * j; }
    unsigned char keep[20];
    int hb[2];
    lz_kvpolicy_select(keep, hb, sc, NULL, 2, 10, 5, 1, 0.2f);
    CHECK(hb[0] == 2 && hb[1] == 8, "peaked head 2, diffuse head 8 (got %d, %d)", hb[0], hb[1]);
}

static void test_layer_budgets(void)
{
    int b_l[32];
    lz_kvpolicy_layer_budgets(b_l, 8, 50, 1000, 0);
    int ok = 1;
    for (int l = 0; l < 8; l++) ok &= b_l[l] == 50;
    CHECK(ok, "uniform layer budgets");
    const int cases[][3] = {{8, 50, 1000}, {5, 17, 300}, {32, 100, 200}, {6, 3, 10}, {12, 90, 100}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int L = cases[c][0], b = cases[c][1], m = cases[c][2];
        lz_kvpolicy_layer_budgets(b_l, L, b, m, 1);
        long sum = 0;
        int mono = 1, capped = 1;
        for (int l = 0; l < L; l++) {
            sum += b_l[l];
            capped &= b_l[l] >= 0 && b_l[l] <= m;
            if (l && b_l[l] > b_l[l - 1] && b_l[l - 1] < m) mono = 0;
        }
        long want = (long)L * b < (long)L * m ? (long)L * b : (long)L * m;
        CHECK(sum == want, "pyramid L=%d b=%d m=%d: total %ld == %ld", L, b, m, sum, want);
        CHECK(capped, "pyramid budgets within [0, m]");
        CHECK(mono, "pyramid budgets do not increase with depth (L=%d b=%d)", L, b);
        if (c == 0) CHECK(b_l[0] > b_l[L - 1] * 5, "pyramid: first layer %d >> last %d", b_l[0], b_l[L - 1]);
    }
}

static void test_plan(void)
{
    const int L = 3, KV = 4, n = 200;
    const int kinds[] = {LZ_KVPOLICY_SNAPKV, LZ_KVPOLICY_ADA_SNAPKV, LZ_KVPOLICY_PYRAMIDKV, LZ_KVPOLICY_ADA_PYRAMIDKV};
    for (int kk = 0; kk < 4; kk++) {
        lz_kvpolicy p;
        lz_kvpolicy_default(&p);
        p.kind = kinds[kk];
        lz_kvpolicy_parse_budget("0.3", &p);
        int B = lz_kvpolicy_budget(&p, n), m = n - p.window;
        CHECK(B == 60, "budget 0.3 of 200 = %d", B);
        float *sc = malloc(sizeof(float) * L * KV * m);
        for (int i = 0; i < L * KV * m; i++) sc[i] = frand();
        int *kept = malloc(sizeof(int) * L * KV), *rows = malloc(sizeof(int) * L * KV * n);
        CHECK(lz_kvpolicy_plan(&p, sc, NULL, L, KV, n, kept, rows) == 0, "plan");
        long sum = 0;
        int window = 1, order = 1;
        for (int lh = 0; lh < L * KV; lh++) {
            sum += kept[lh];
            const int *r = rows + (size_t)lh * n;
            for (int i = 1; i < kept[lh]; i++) order &= r[i] > r[i - 1];
            for (int t = 0; t < p.window; t++) window &= r[kept[lh] - p.window + t] == m + t;
        }
        CHECK(sum == (long)L * KV * B, "%s: kept total %ld == L*KV*B %ld", lz_kvpolicy_name(p.kind), sum,
              (long)L * KV * B);
        CHECK(window, "%s: window tokens kept", lz_kvpolicy_name(p.kind));
        CHECK(order, "%s: kept rows in original order", lz_kvpolicy_name(p.kind));
        free(sc); free(kept); free(rows);
    }
    /* a positive factor per layer (the value weights' layer mean) changes no selection of the
     * layer scope, for any policy */
    for (int kk = 0; kk < 4; kk++) {
        lz_kvpolicy p;
        lz_kvpolicy_default(&p);
        p.kind = kinds[kk];
        lz_kvpolicy_parse_budget("0.3", &p);
        const int m = n - p.window;
        float *sc = malloc(sizeof(float) * L * KV * m), *sc2 = malloc(sizeof(float) * L * KV * m);
        for (int i = 0; i < L * KV * m; i++) sc[i] = frand();
        for (int i = 0; i < L * KV * m; i++) sc2[i] = sc[i] * (0.25f + (float)(i / (KV * m))); /* 0.25, 1.25, 2.25 */
        int *k1 = malloc(sizeof(int) * L * KV), *r1 = malloc(sizeof(int) * L * KV * n);
        int *k2 = malloc(sizeof(int) * L * KV), *r2 = malloc(sizeof(int) * L * KV * n);
        int same = lz_kvpolicy_plan(&p, sc, NULL, L, KV, n, k1, r1) == 0 && lz_kvpolicy_plan(&p, sc2, NULL, L, KV, n, k2, r2) == 0 &&
                   !memcmp(k1, k2, sizeof(int) * L * KV);
        for (int lh = 0; same && lh < L * KV; lh++) same = !memcmp(r1 + (size_t)lh * n, r2 + (size_t)lh * n, sizeof(int) * k1[lh]);
        CHECK(same, "%s: per-layer score factors change no selection", lz_kvpolicy_name(p.kind));
        free(sc); free(sc2); free(k1); free(r1); free(k2); free(r2);
    }
    /* model scope: one joint Ada selection over all L * KV heads. Every head keeps its
     * floor(alpha * b) best, the rest equals a brute-force top over all heads' remaining
     * candidates (distinct random scores: no ties), and the total is exactly L * KV * B */
    {
        lz_kvpolicy p;
        lz_kvpolicy_default(&p);
        p.kind = LZ_KVPOLICY_ADA_SNAPKV;
        p.scope_model = 1;
        lz_kvpolicy_parse_budget("0.3", &p);
        const int B = lz_kvpolicy_budget(&p, n), m = n - p.window, b = B - p.window, NH = L * KV;
        const int res = (int)floorf(p.alpha * (float)b + 1e-6f);
        float *sc = malloc(sizeof(float) * NH * m);
        /* layer l's scores scaled by 1 + l: a joint selection favours the last layer */
        for (int i = 0; i < NH * m; i++) sc[i] = frand() * (float)(1 + i / (KV * m));
        int *kept = malloc(sizeof(int) * NH), *rows = malloc(sizeof(int) * NH * n);
        CHECK(lz_kvpolicy_plan(&p, sc, NULL, L, KV, n, kept, rows) == 0, "model scope: plan");
        unsigned char *sel = calloc((size_t)NH * m, 1), *want = calloc((size_t)NH * m, 1);
        long sum = 0;
        int reserve_ok = 1;
        for (int lh = 0; lh < NH; lh++) {
            sum += kept[lh];
            for (int i = 0; i < kept[lh] - p.window; i++) sel[(size_t)lh * m + rows[(size_t)lh * n + i]] = 1;
            /* brute force: this head's top res by score */
            for (int r = 0; r < res; r++) {
                int best = -1;
                for (int j = 0; j < m; j++)
                    if (!want[(size_t)lh * m + j] && (best < 0 || sc[(size_t)lh * m + j] > sc[(size_t)lh * m + best])) best = j;
                want[(size_t)lh * m + best] = 1;
            }
            reserve_ok &= kept[lh] - p.window >= res;
        }
        for (long r = 0; r < (long)NH * (b - res); r++) { /* then the joint top of the rest */
            long best = -1;
            for (long i = 0; i < (long)NH * m; i++)
                if (!want[i] && (best < 0 || sc[i] > sc[best])) best = i;
            want[best] = 1;
        }
        CHECK(sum == (long)NH * B, "model scope: kept total %ld == L*KV*B %ld", sum, (long)NH * B);
        CHECK(reserve_ok, "model scope: every head keeps at least its alpha share (%d)", res);
        CHECK(!memcmp(sel, want, (size_t)NH * m), "model scope: selection equals the brute-force joint top");
        CHECK(kept[(L - 1) * KV] > kept[0], "model scope: layers get unequal budgets (%d last, %d first)",
              kept[(L - 1) * KV], kept[0]);
        free(sc); free(kept); free(rows); free(sel); free(want);
    }
    /* short documents are stored whole; a budget below the window keeps the window */
    lz_kvpolicy p;
    lz_kvpolicy_default(&p);
    p.kind = LZ_KVPOLICY_ADA_SNAPKV;
    lz_kvpolicy_parse_budget("128t", &p);
    CHECK(lz_kvpolicy_budget(&p, 159) == 0 && lz_kvpolicy_budget(&p, 160) == 128, "128t: whole below w + B = 160");
    lz_kvpolicy_parse_budget("0.1", &p);
    CHECK(lz_kvpolicy_budget(&p, 35) == 0 && lz_kvpolicy_budget(&p, 100) == 32 && lz_kvpolicy_budget(&p, 1000) == 100,
          "0.1: whole below w + B, the window at least, the fraction above");
    p.kind = LZ_KVPOLICY_NONE;
    CHECK(lz_kvpolicy_budget(&p, 1000) == 0, "none stores whole");
}

/* s = p's spec, q = s parsed back, t = q's spec (s and t LZ_KVPOLICY_SPEC_MAX bytes) */
static void spec_round_trip(const lz_kvpolicy *p, char *s, char *t, lz_kvpolicy *q)
{
    lz_kvpolicy_spec(p, s, LZ_KVPOLICY_SPEC_MAX);
    lz_kvpolicy_parse_spec(s, q);
    lz_kvpolicy_spec(q, t, LZ_KVPOLICY_SPEC_MAX);
}

static void test_spec(void)
{
    lz_kvpolicy p, q;
    lz_kvpolicy_default(&p);
    char s[LZ_KVPOLICY_SPEC_MAX], t[LZ_KVPOLICY_SPEC_MAX];
    lz_kvpolicy_spec(&p, s, sizeof s);
    CHECK(s[0] == 0, "none has an empty spec");
    p.kind = LZ_KVPOLICY_ADA_PYRAMIDKV;
    lz_kvpolicy_parse_budget("0.2", &p);
    p.agg = LZ_KVPOLICY_AGG_MAX;
    lz_kvpolicy_spec(&p, s, sizeof s);
    CHECK(!strcmp(s, "ada-pyramidkv b=0.2 w=32 k=7 a=0.2 max"), "spec '%s'", s);
    CHECK(lz_kvpolicy_parse_spec(s, &q) == 0, "spec parses");
    lz_kvpolicy_spec(&q, t, sizeof t);
    CHECK(!strcmp(s, t) && q.kind == p.kind && q.agg == p.agg, "spec round trip '%s'", t);
    p.probe = 1;
    lz_kvpolicy_spec(&p, s, sizeof s);
    CHECK(lz_kvpolicy_parse_spec(s, &q) == 0 && q.probe == 1 && strstr(s, " probe"), "spec with probe '%s'", s);
    CHECK(lz_kvpolicy_budget(&p, 100) == 20 && lz_kvpolicy_budget(&p, 20) == 4, "probe budget: no window floor");
    p.probe = LZ_KVPOLICY_PROBE_RECONSTRUCT;
    lz_kvpolicy_spec(&p, s, sizeof s);
    CHECK(lz_kvpolicy_parse_spec(s, &q) == 0 && q.probe == LZ_KVPOLICY_PROBE_RECONSTRUCT && strstr(s, " recon") &&
              !strstr(s, "probe"),
          "spec with reconstruction '%s'", s);
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean probes", &q) == -1, "unknown probe suffix refused");
    p.probe = LZ_KVPOLICY_PROBE_SELF;
    spec_round_trip(&p, s, t, &q);
    CHECK(!strcmp(s, t) && q.probe == LZ_KVPOLICY_PROBE_SELF && strstr(s, " self") &&
              lz_kvpolicy_budget(&p, 100) == 20 && lz_kvpolicy_budget(&p, 20) == 4,
          "spec with the self window '%s', no window floor", s);
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean self recon", &q) == -1, "two windows refused");
    p.probe = LZ_KVPOLICY_PROBE_RECONSTRUCT;
    /* value-aware scores: a last " vnorm", with or without a probe */
    p.value_norm = 1;
    lz_kvpolicy_spec(&p, s, sizeof s);
    CHECK(lz_kvpolicy_parse_spec(s, &q) == 0 && q.value_norm == 1 && q.probe == LZ_KVPOLICY_PROBE_RECONSTRUCT &&
              strstr(s, " recon vnorm"),
          "spec with reconstruction and value norms '%s'", s);
    p.probe = 0;
    spec_round_trip(&p, s, t, &q);
    CHECK(!strcmp(s, t) && q.value_norm == 1 && q.probe == 0 && strstr(s, "max vnorm"), "value norms round trip '%s'", s);
    p.value_power = 2;
    spec_round_trip(&p, s, t, &q);
    CHECK(!strcmp(s, t) && q.value_norm == 1 && q.value_power == 2.0f && strstr(s, "max vnorm=2"),
          "value power round trip '%s'", s);
    p.value_power = 0.75f;
    spec_round_trip(&p, s, t, &q);
    CHECK(!strcmp(s, t) && q.value_power == 0.75f && strstr(s, " vnorm=0.75"), "value power 0.75 round trip '%s'", s);
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean vnorm=1", &q) == -1, "vnorm=1 refused (spelled vnorm)");
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean vnorm=0", &q) == -1, "vnorm=0 refused");
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean vnorm=17", &q) == -1, "vnorm=17 refused");
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean vnorm=2x", &q) == -1, "vnorm=2x refused");
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean vnorm vnorm=2", &q) == -1, "two value norms refused");
    float pw;
    CHECK(lz_kvpolicy_parse_power("2", &pw) == 0 && pw == 2.0f && lz_kvpolicy_parse_power("", &pw) == -1 &&
              lz_kvpolicy_parse_power("-1", &pw) == -1 && lz_kvpolicy_parse_power("nan", &pw) == -1,
          "value power parsing");
    p.value_power = 1;
    p.value_norm = 0;
    lz_kvpolicy_spec(&p, s, sizeof s);
    CHECK(lz_kvpolicy_parse_spec(s, &q) == 0 && q.value_norm == 0 && !strstr(s, "vnorm"), "no value norms: '%s'", s);
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean vnorm recon", &q) == -1, "vnorm must come last");
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean recon vnorm x", &q) == -1, "trailing token refused");
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean probe junk", &q) == -1, "junk after the probe refused");
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean vnorm vnorm", &q) == -1, "vnorm twice refused");
    /* model scope (Ada-SnapKV only): the last token */
    p.kind = LZ_KVPOLICY_ADA_SNAPKV;
    p.scope_model = 1;
    p.value_norm = 1;
    lz_kvpolicy_spec(&p, s, sizeof s);
    CHECK(strstr(s, " vnorm model") && lz_kvpolicy_parse_spec(s, &q) == 0 && q.scope_model == 1 && q.value_norm == 1,
          "spec with model scope '%s'", s);
    p.value_norm = 0;
    spec_round_trip(&p, s, t, &q);
    CHECK(!strcmp(s, t) && q.scope_model == 1 && q.value_norm == 0, "model scope round trip '%s'", s);
    CHECK(lz_kvpolicy_parse_spec("ada-snapkv b=0.2 w=32 k=7 a=0.2 mean model vnorm", &q) == -1, "model must come last");
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean model", &q) == -1, "model scope only for ada-snapkv");
    CHECK(lz_kvpolicy_parse_spec("ada-snapkv b=0.2 w=32 k=7 a=0.2 mean model model", &q) == -1, "model twice refused");
    p.scope_model = 0;
    p.kind = LZ_KVPOLICY_ADA_PYRAMIDKV;
    p.probe = LZ_KVPOLICY_PROBE_RECONSTRUCT;
    /* a probe question (--kv-probe-text) is recorded by its hash */
    uint32_t h1 = lz_kvpolicy_text_hash("Who founded it?"), h2 = lz_kvpolicy_text_hash("Who founded them?");
    CHECK(lz_kvpolicy_text_hash("") == 0 && lz_kvpolicy_text_hash(NULL) == 0 && h1 && h2 && h1 != h2,
          "text hashes: empty 0, others nonzero and distinct (%08x %08x)", (unsigned)h1, (unsigned)h2);
    p.probe = LZ_KVPOLICY_PROBE_CUE;
    p.probe_text = h1;
    lz_kvpolicy_spec(&p, s, sizeof s);
    char want[24];
    snprintf(want, sizeof want, " probe=%08x", (unsigned)h1);
    CHECK(strstr(s, want) && lz_kvpolicy_parse_spec(s, &q) == 0 && q.probe == LZ_KVPOLICY_PROBE_CUE &&
              q.probe_text == h1,
          "spec with a probe question '%s'", s);
    p.probe_text = 0;
    lz_kvpolicy_spec(&p, s, sizeof s);
    CHECK(lz_kvpolicy_parse_spec(s, &q) == 0 && q.probe_text == 0 && !strstr(s, "probe="), "empty question: ' probe' '%s'", s);
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean probe=xyz", &q) == -1, "bad probe hash refused");
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean probe=0000000a9", &q) == -1, "long probe hash refused");
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean probe=00000000", &q) == -1, "zero probe hash refused");
    p.probe = 0;
    lz_kvpolicy_parse_budget("128t", &p);
    lz_kvpolicy_spec(&p, s, sizeof s);
    CHECK(lz_kvpolicy_parse_spec(s, &q) == 0 && q.budget_tokens == 128, "spec with 128t");
    CHECK(lz_kvpolicy_parse_budget("0", &p) && lz_kvpolicy_parse_budget("1.5", &p) &&
              lz_kvpolicy_parse_budget("0t", &p) && lz_kvpolicy_parse_budget("x", &p),
          "bad budgets refused");
    CHECK(lz_kvpolicy_parse_name("ada-snapkv") == LZ_KVPOLICY_ADA_SNAPKV && lz_kvpolicy_parse_name("x") == -1,
          "names");
    char d1[LZ_KVPOLICY_SPEC_MAX];
    lz_kvpolicy_parse_budget("0.5", &p);
    lz_kvpolicy_doc_spec(&p, 40, d1, sizeof d1);
    CHECK(d1[0] == 0, "a 40-token document is stored whole (effective spec empty)");
    lz_kvpolicy_doc_spec(&p, 400, d1, sizeof d1);
    CHECK(d1[0] != 0, "a 400-token document is compressed");
}

static void test_maxpool(void)
{
    float x[9] = {0, 0, 0, 5, 0, 0, 0, 0, 1}, y[9];
    lz_kvpolicy_maxpool(y, x, 9, 7);
    float want[9] = {5, 5, 5, 5, 5, 5, 5, 1, 1};
    CHECK(!memcmp(y, want, sizeof y), "max-pool kernel 7");
    lz_kvpolicy_maxpool(y, x, 9, 1);
    CHECK(!memcmp(y, x, sizeof y), "kernel 1 is the identity");
}

static void test_scoring(void)
{
    const int L = 2, H = 8, KV = 2, d = 16, n = 90, w = 12, s = 5, T = 100, S = 7;
    float *q = malloc(sizeof(float) * L * w * H * d), *k = malloc(sizeof(float) * L * KV * T * d);
    float *pk = malloc(sizeof(float) * L * KV * S * d);
    for (int i = 0; i < L * w * H * d; i++) q[i] = 2 * frand() - 1;
    for (int i = 0; i < L * KV * T * d; i++) k[i] = 2 * frand() - 1;
    for (int i = 0; i < L * KV * S * d; i++) pk[i] = 3 * frand() - 1; /* a stronger sink */
    int m = n - w;
    float *a = malloc(sizeof(float) * L * KV * m), *b = malloc(sizeof(float) * L * KV * m);
    float *ra = malloc(sizeof(float) * L * KV * m), *rb = malloc(sizeof(float) * L * KV * m);
    for (int agg = 0; agg < 2; agg++) {
        lz_kvscore_params p = {.q = q, .k = k, .k_stride = T, .pk = pk, .pk_stride = S, .n_prefix = s, .n = n, .w = w,
                               .L = L, .H = H, .KV = KV, .d = d, .agg = agg, .kernel = 7};
        CHECK(lz_kvpolicy_score(&p, a, ra) == 0 && lz_kvpolicy_score_naive(&p, b, rb) == 0, "score");
        double md = 0, mr = 0, tot = 0;
        for (int i = 0; i < L * KV * m; i++) {
            md = fmax(md, fabs(a[i] - b[i]));
            mr = fmax(mr, fabs(ra[i] - rb[i]));
            tot += ra[i];
        }
        CHECK(md < 1e-5 && mr < 1e-5, "GQA %s: GEMM scores == naive loop (max diff %.2g / %.2g)",
              agg ? "max" : "mean", md, mr);
        CHECK(tot > 0 && tot < (double)L * KV * w * (agg ? H / KV : 1) + 1e-3, "scores are attention mass");
        /* the two halves (a backend makes the masses, the encoder finishes them) give the same bits */
        float *mass = malloc(sizeof(float) * L * H * m), *fa = malloc(sizeof(float) * L * KV * m),
              *fr = malloc(sizeof(float) * L * KV * m);
        CHECK(lz_kvpolicy_mass(&p, mass) == 0 && lz_kvpolicy_finish(&p, mass, fa, fr) == 0 &&
                  !memcmp(fa, a, sizeof(float) * L * KV * m) && !memcmp(fr, ra, sizeof(float) * L * KV * m),
              "GQA %s: mass then finish == score, bit for bit", agg ? "max" : "mean");
        double per_row = 0; /* every window row's softmax sums to 1 over all keys; the candidates get part */
        for (int i = 0; i < L * H * m; i++) per_row += mass[i];
        CHECK(per_row > 0 && per_row <= (double)L * H * w + 1e-3, "masses are attention mass (%.3f of %d rows)", per_row,
              L * H * w);
        free(mass), free(fa), free(fr);
    }
    /* value-aware: fast == naive, and each raw score is the attention-only raw score times mean |v| */
    float *v = malloc(sizeof(float) * L * KV * T * d), *r0 = malloc(sizeof(float) * L * KV * m);
    for (int i = 0; i < L * KV * T * d; i++) v[i] = 4 * frand() - 2;
    for (int agg = 0; agg < 4; agg++) { /* agg & 1: mean / max; agg & 2: power 2.5 instead of 1 */
        const double pw = agg & 2 ? 2.5 : 1.0;
        lz_kvscore_params p = {.q = q, .k = k, .k_stride = T, .pk = pk, .pk_stride = S, .n_prefix = s, .n = n, .w = w,
                               .L = L, .H = H, .KV = KV, .d = d, .agg = agg & 1, .kernel = 5, .v = v, .v_stride = T,
                               .v_power = (float)pw};
        CHECK(lz_kvpolicy_score(&p, a, ra) == 0 && lz_kvpolicy_score_naive(&p, b, rb) == 0, "value-aware score");
        p.v = NULL;
        CHECK(lz_kvpolicy_score(&p, b, r0) == 0, "attention-only score");
        double md = 0, mw = 0;
        for (int l = 0; l < L; l++) {
            double lm = 0; /* the layer's mean of (mean |v| of a row)^P over its heads and candidate rows */
            for (int g = 0; g < KV; g++)
                for (int j = 0; j < m; j++) {
                    double r = 0;
                    for (int e = 0; e < d; e++) r += fabs(v[(((size_t)l * KV + g) * T + j) * d + e]);
                    lm += pow(r / d, pw);
                }
            lm /= (double)KV * m;
            for (int g = 0; g < KV; g++)
                for (int j = 0; j < m; j++) {
                    size_t o = ((size_t)l * KV + g) * m + j;
                    double vn = 0;
                    for (int e = 0; e < d; e++) vn += fabs(v[(((size_t)l * KV + g) * T + j) * d + e]) / d;
                    mw = fmax(mw, fabs(ra[o] - r0[o] * pow(vn, pw) / lm) / fmax(1.0, fabs(ra[o])));
                    md = fmax(md, fabs(ra[o] - rb[o]));
                }
        }
        CHECK(md < 1e-5 && mw < 1e-5,
              "GQA %s, value-aware, power %g: GEMM == naive (%.2g), raw = attention x mean|v|^P / layer mean (%.2g)",
              agg & 1 ? "max" : "mean", pw, md, mw);
        p.v = v;
        p.v_stride = n - 1;
        CHECK(lz_kvpolicy_score(&p, a, NULL) == -1, "value stride below n refused");
    }
    free(v);
    free(r0);
    /* no prefix */
    lz_kvscore_params p = {.q = q, .k = k, .k_stride = T, .n = n, .w = w, .L = L, .H = H, .KV = KV, .d = d,
                           .kernel = 3};
    CHECK(lz_kvpolicy_score(&p, a, NULL) == 0 && lz_kvpolicy_score_naive(&p, b, NULL) == 0, "score without prefix");
    double md = 0;
    for (int i = 0; i < L * KV * m; i++) md = fmax(md, fabs(a[i] - b[i]));
    CHECK(md < 1e-5, "no prefix: GEMM == naive (%.2g)", md);
    p.w = n;
    CHECK(lz_kvpolicy_score(&p, a, NULL) == -1, "window >= n refused");
    free(q); free(k); free(pk); free(a); free(b); free(ra); free(rb);
}

/* The self window (--kv-self): every document token's own query, w = m = n,
 * causal. GEMM == naive loop; key j gets the mass of rows j .. n-1 only, so
 * the last key's raw score is exactly the last row's softmax weight on it
 * (computed here by hand); the scores sum to each row's document mass. */
static void test_self_scoring(void)
{
    const int L = 2, H = 4, KV = 2, G = H / KV, d = 8, n = 37, s = 3, T = 40;
    float *q = malloc(sizeof(float) * L * n * H * d), *k = malloc(sizeof(float) * L * KV * T * d);
    float *pk = malloc(sizeof(float) * L * KV * s * d), *v = malloc(sizeof(float) * L * KV * T * d);
    float *a = malloc(sizeof(float) * L * KV * n), *b = malloc(sizeof(float) * L * KV * n);
    float *ra = malloc(sizeof(float) * L * KV * n), *rb = malloc(sizeof(float) * L * KV * n);
    for (int i = 0; i < L * n * H * d; i++) q[i] = 2 * frand() - 1;
    for (int i = 0; i < L * KV * T * d; i++) k[i] = 2 * frand() - 1, v[i] = 2 * frand() - 1;
    for (int i = 0; i < L * KV * s * d; i++) pk[i] = 2 * frand() - 1;
    for (int vn = 0; vn < 2; vn++)
        for (int agg = 0; agg < 2; agg++) {
            lz_kvscore_params p = {.q = q, .k = k, .k_stride = T, .pk = pk, .pk_stride = s, .n_prefix = s, .n = n,
                                   .w = n, .m = n, .L = L, .H = H, .KV = KV, .d = d, .agg = agg, .kernel = 3,
                                   .v = vn ? v : NULL, .v_stride = T};
            CHECK(lz_kvpolicy_score(&p, a, ra) == 0 && lz_kvpolicy_score_naive(&p, b, rb) == 0, "self score");
            double md = 0;
            for (int i = 0; i < L * KV * n; i++) md = fmax(md, fabs(a[i] - b[i]) + fabs(ra[i] - rb[i]));
            CHECK(md < 1e-5, "self window, %s%s: GEMM == naive (%.2g)", agg ? "max" : "mean",
                  vn ? ", value-aware" : "", md);
        }
    /* by hand, mean aggregation, no value weights: the last key of (l, g) */
    lz_kvscore_params p = {.q = q, .k = k, .k_stride = T, .pk = pk, .pk_stride = s, .n_prefix = s, .n = n, .w = n,
                           .m = n, .L = L, .H = H, .KV = KV, .d = d, .kernel = 1};
    CHECK(lz_kvpolicy_score(&p, a, ra) == 0, "self score, kernel 1");
    double md = 0, mass = 0, tot = 0;
    for (int l = 0; l < L; l++)
        for (int g = 0; g < KV; g++) {
            double want = 0;
            for (int hh = 0; hh < G; hh++)
                for (int r = 0; r < n; r++) { /* row r's softmax over the prefix and tokens 0..r */
                    const float *qr = q + (((size_t)l * n + r) * H + g * G + hh) * d;
                    double lg[3 + 37], mx = -INFINITY, sum = 0;
                    for (int j = 0; j < s + r + 1; j++) {
                        const float *kj = j < s ? pk + (((size_t)l * KV + g) * s + j) * d
                                                : k + (((size_t)l * KV + g) * T + (j - s)) * d;
                        double x = 0;
                        for (int e = 0; e < d; e++) x += (double)qr[e] * kj[e];
                        lg[j] = x / sqrt((double)d);
                        mx = fmax(mx, lg[j]);
                    }
                    for (int j = 0; j < s + r + 1; j++) sum += exp(lg[j] - mx);
                    for (int j = s; j < s + r + 1; j++) mass += exp(lg[j] - mx) / sum / G;
                    if (r == n - 1) want += exp(lg[s + n - 1] - mx) / sum / G;
                }
            md = fmax(md, fabs(ra[((size_t)l * KV + g) * n + n - 1] - want));
            for (int j = 0; j < n; j++) tot += ra[((size_t)l * KV + g) * n + j];
        }
    CHECK(md < 1e-5, "self window: the last key scores only the last row's weight (%.2g)", md);
    CHECK(fabs(tot - mass) < 1e-3 * mass, "self window: the scores sum to the rows' document mass (%.6g / %.6g)", tot,
          mass);
    p.m = n + 1;
    CHECK(lz_kvpolicy_score(&p, a, NULL) == -1, "more candidates than tokens refused");
    p.m = 0;
    CHECK(lz_kvpolicy_score(&p, a, NULL) == -1, "w = n without candidates given refused");
    free(q); free(k); free(pk); free(v); free(a); free(b); free(ra); free(rb);
}

static void test_compact(void)
{
    const int L = 1, KV = 2, d = 3, T = 8, n = 6;
    float k[L * KV * T * d], v[L * KV * T * d];
    for (int i = 0; i < L * KV * T * d; i++) { k[i] = (float)i; v[i] = (float)(1000 + i); }
    int kept[2] = {3, 6}, rows[2 * 6] = {1, 4, 5, 0, 0, 0, 0, 1, 2, 3, 4, 5};
    lz_kvpolicy_compact(k, v, T, L, KV, d, n, kept, rows);
    int ok = 1;
    for (int i = 0; i < 3; i++)
        for (int e = 0; e < d; e++) ok &= k[i * d + e] == (float)(rows[i] * d + e) && v[i * d + e] == 1000.0f + rows[i] * d + e;
    for (int i = 0; i < 6; i++)
        for (int e = 0; e < d; e++) ok &= k[(T + i) * d + e] == (float)((T + i) * d + e);
    CHECK(ok, "compaction moves kept rows to the front in order, K and V alike");
}

/* The capture hook and the encoder on a generated model. */
static void test_encoder(void)
{
    char dir[256], path[512], err[512];
    lz_llama *m = lz_test_model(3, 8, 2, 16, 64, dir, sizeof dir, path, sizeof path);
    if (!m) return;
    const lz_llama_config *c = &m->cfg;
    const int L = c->n_layers, H = c->n_heads, KV = c->n_kv_heads, d = c->head_dim, n = 150, w = 32;
    int ids[150], prefix[4] = {1, 20, 30, 40};
    for (int i = 0; i < n; i++) ids[i] = 3 + (int)(frand() * (c->vocab - 4));

    /* capture: the same rows whether the forward runs in one chunk or in chunks of 7 */
    size_t qn = (size_t)L * w * H * d;
    float *q1 = malloc(qn * sizeof(float)), *q2 = malloc(qn * sizeof(float)) , *q3 = malloc(qn * sizeof(float));
    for (size_t i = 0; i < qn; i++) q1[i] = q2[i] = q3[i] = -7.0f;
    lz_llama_scratch *s1 = lz_llama_scratch_new(m, 256), *s2 = lz_llama_scratch_new(m, 7);
    lz_kv_cache kc;
    lz_kv_cache_init(&kc, c, n);
    lz_kv_cache_reset(&kc, 10);
    lz_llama_scratch_capture(s1, q1, 10 + n - w, w);
    lz_llama_forward(m, s1, &kc, NULL, 0, ids, n, NULL, LZ_LOGITS_NONE);
    lz_kv_cache_reset(&kc, 10);
    lz_llama_scratch_capture(s2, q2, 10 + n - w, w);
    lz_llama_forward(m, s2, &kc, NULL, 0, ids, n, NULL, LZ_LOGITS_NONE);
    lz_llama_scratch_capture(s2, NULL, 0, 0);
    lz_kv_cache_reset(&kc, 10);
    lz_llama_forward(m, s2, &kc, NULL, 0, ids, n, NULL, LZ_LOGITS_NONE); /* capture off: q3 untouched */
    double md = 0;
    int filled = 1;
    for (size_t i = 0; i < qn; i++) { md = fmax(md, fabs(q1[i] - q2[i])); filled &= q1[i] != -7.0f; }
    CHECK(md < 1e-4 && filled, "captured queries equal across chunkings and fill every row (%.2g)", md);
    /* the captured query of the last row reproduces its own key's rotation: q.k of the same position is finite */
    int untouched = 1;
    for (size_t i = 0; i < qn; i++) untouched &= q3[i] == -7.0f;
    CHECK(untouched, "capture off leaves the buffer alone");
    lz_kv_cache_free(&kc);
    lz_llama_scratch_free(s1);
    lz_llama_scratch_free(s2);

    /* encoder: plain, then ada-snapkv 0.5; kept rows equal the plain rows they came from */
    lz_encoder *e;
    if (lz_encoder_new(m, prefix, 4, &e, err, sizeof err)) { CHECK(0, "encoder: %s", err); return; }
    lz_encoder_run(e, ids, n, err, sizeof err);
    CHECK(lz_encoder_kept(e) == NULL, "no policy: stored whole");
    const lz_kv_cache *dc = lz_encoder_doc_cache(e);
    size_t cn = (size_t)L * KV * dc->cap * d;
    float *k0 = malloc(cn * sizeof(float)), *v0 = malloc(cn * sizeof(float));
    memcpy(k0, dc->k, cn * sizeof(float));
    memcpy(v0, dc->v, cn * sizeof(float));
    int T0 = dc->cap;
    lz_kvpolicy p;
    lz_kvpolicy_default(&p);
    p.kind = LZ_KVPOLICY_ADA_SNAPKV;
    lz_kvpolicy_parse_budget("0.5", &p);
    lz_encoder_set_kvpolicy(e, &p);
    CHECK(lz_encoder_run(e, ids, n, err, sizeof err) == 0, "encode with ada-snapkv: %s", err);
    const int *kept = lz_encoder_kept(e);
    CHECK(kept != NULL, "compressed");
    dc = lz_encoder_doc_cache(e);
    if (kept && dc->cap == T0) {
        long sum = 0;
        int exact = 1, differ = 0;
        for (int lh = 0; lh < L * KV; lh++) {
            sum += kept[lh];
            differ |= kept[lh] != kept[0];
            /* the window rows are the last w kept rows and equal the plain ones */
            for (int t = 0; t < w; t++)
                for (int x = 0; x < d; x++) {
                    size_t a = ((size_t)lh * T0 + kept[lh] - w + t) * d + x, b = ((size_t)lh * T0 + n - w + t) * d + x;
                    exact &= dc->k[a] == k0[b] && dc->v[a] == v0[b];
                }
        }
        CHECK(sum == (long)L * KV * 75, "kept total %ld == L*KV*0.5n", sum);
        CHECK(exact, "window rows kept exactly, K and V");
        CHECK(differ, "Ada gives heads different budgets");
        /* every kept row is one of the plain rows (same order): find each in k0 */
        int found = 1;
        for (int lh = 0; lh < L * KV && found; lh++) {
            int j = 0;
            for (int i = 0; i < kept[lh]; i++) {
                const float *r = dc->k + ((size_t)lh * T0 + i) * d;
                while (j < n && memcmp(r, k0 + ((size_t)lh * T0 + j) * d, (size_t)d * sizeof(float))) j++;
                found &= j < n;
                j++;
            }
        }
        CHECK(found, "kept rows are original rows, in order");
    }
    void *blob;
    size_t len0, len1;
    lz_payload_codec *codec = lz_payload_codec_new();
    CHECK(lz_encoder_pack(e, 1, codec, LZ_PAYLOAD_CODEC_RAW, 1, &blob, &len1, err, sizeof err) == 0, "pack");
    lz_payload_info info;
    CHECK(lz_payload_parse(blob, len1, 1, &info, err, sizeof err) == 0 && info.n_tokens == n &&
              info.n_kept_sum == (uint64_t)L * KV * 75,
          "payload: n_tokens %d, kept sum %llu", info.n_tokens, (unsigned long long)info.n_kept_sum);
    free(blob);
    /* probe window: scored by tokens run after the document, every token a candidate */
    p.probe = 1;
    lz_encoder_set_kvpolicy(e, &p);
    CHECK(lz_encoder_run(e, ids, n, err, sizeof err) == -1, "probe policy without probe tokens refused");
    int probe[5] = {7, 8, 9, 10, 11};
    lz_encoder_set_probe(e, probe, 5);
    CHECK(lz_encoder_run(e, ids, n, err, sizeof err) == 0, "encode with a probe: %s", err);
    kept = lz_encoder_kept(e);
    dc = lz_encoder_doc_cache(e);
    long psum = 0;
    for (int lh = 0; kept && lh < L * KV; lh++) psum += kept[lh];
    CHECK(kept && psum == (long)L * KV * 75 && dc->n == n, "probe: kept %ld == L*KV*0.5n, document rows %d", psum,
          dc->n);
    /* reconstruction: the document itself is the probe, i.e. exactly a cue probe set to its ids */
    int *cue_kept = malloc((size_t)L * KV * sizeof(int));
    if (cue_kept && kept) memcpy(cue_kept, kept, (size_t)L * KV * sizeof(int));
    lz_encoder_set_probe(e, ids, n);
    CHECK(lz_encoder_run(e, ids, n, err, sizeof err) == 0, "encode with the document as a cue probe: %s", err);
    dc = lz_encoder_doc_cache(e);
    const int T1 = dc->cap; /* grown: the probe's rows need room too */
    size_t nk = (size_t)L * KV * T1 * d;
    float *ref_k = malloc(nk * sizeof(float)), *ref_v = malloc(nk * sizeof(float));
    int *ref_kept = malloc((size_t)L * KV * sizeof(int));
    int have_ref = ref_k && ref_v && ref_kept && cue_kept && lz_encoder_kept(e);
    if (have_ref) {
        memcpy(ref_k, dc->k, nk * sizeof(float));
        memcpy(ref_v, dc->v, nk * sizeof(float));
        memcpy(ref_kept, lz_encoder_kept(e), (size_t)L * KV * sizeof(int));
    }
    lz_encoder_set_probe(e, probe, 5); /* the cue again: reconstruction must not use it */
    p.probe = LZ_KVPOLICY_PROBE_RECONSTRUCT;
    lz_encoder_set_kvpolicy(e, &p);
    CHECK(lz_encoder_run(e, ids, n, err, sizeof err) == 0, "encode with reconstruction: %s", err);
    kept = lz_encoder_kept(e);
    dc = lz_encoder_doc_cache(e);
    int recon_same = have_ref && kept && dc->cap == T1 && dc->n == n &&
                     !memcmp(kept, ref_kept, (size_t)L * KV * sizeof(int));
    long rsum = 0;
    for (int lh = 0; recon_same && lh < L * KV; lh++) {
        size_t o = (size_t)lh * T1 * d, sz = (size_t)kept[lh] * d * sizeof(float);
        recon_same = !memcmp(dc->k + o, ref_k + o, sz) && !memcmp(dc->v + o, ref_v + o, sz);
        rsum += kept[lh];
    }
    CHECK(recon_same, "reconstruction keeps exactly the rows of a cue probe equal to the document");
    CHECK(rsum == (long)L * KV * 75, "reconstruction: kept %ld == L*KV*0.5n", rsum);
    /* a cue run after it still uses the cue: the same kept counts as the first cue run */
    p.probe = LZ_KVPOLICY_PROBE_CUE;
    lz_encoder_set_kvpolicy(e, &p);
    CHECK(lz_encoder_run(e, ids, n, err, sizeof err) == 0, "cue probe again: %s", err);
    kept = lz_encoder_kept(e);
    CHECK(have_ref && kept && !memcmp(kept, cue_kept, (size_t)L * KV * sizeof(int)),
          "the cue probe survives a reconstruction run");
    free(ref_k); free(ref_v); free(ref_kept); free(cue_kept);
    /* self window: the encoder's kept rows equal a plan made here from every document
     * query, captured by hand after the same prefix, and scored by the naive loops */
    p.probe = LZ_KVPOLICY_PROBE_SELF;
    lz_encoder_set_kvpolicy(e, &p);
    CHECK(lz_encoder_run(e, ids, n, err, sizeof err) == 0, "encode with the self window: %s", err);
    kept = lz_encoder_kept(e);
    dc = lz_encoder_doc_cache(e);
    {
        lz_kv_cache pc, kc2;
        lz_llama_scratch *sc = lz_llama_scratch_new(m, 64);
        float *qa = malloc((size_t)L * n * H * d * sizeof(float)), *sn = malloc((size_t)L * KV * n * sizeof(float));
        float *tn = malloc((size_t)L * KV * n * sizeof(float)); /* raw scores: the plan's tie order, as the encoder's */
        int *kn = malloc((size_t)L * KV * sizeof(int)), *rn = malloc((size_t)L * KV * n * sizeof(int));
        int ok = sc && qa && sn && tn && kn && rn && kept && lz_kv_cache_init(&pc, c, 4) == 0;
        ok = ok && lz_kv_cache_init(&kc2, c, n) == 0;
        if (ok) {
            lz_kv_cache_reset(&pc, 0);
            lz_llama_forward(m, sc, &pc, NULL, 0, prefix, 4, NULL, LZ_LOGITS_NONE);
            lz_kv_segment sg = {.k = pc.k, .v = pc.v, .n = 4, .stride = pc.cap};
            lz_kv_cache_reset(&kc2, 4);
            lz_llama_scratch_capture(sc, qa, 4, n);
            lz_llama_forward(m, sc, &kc2, &sg, 1, ids, n, NULL, LZ_LOGITS_NONE);
            lz_llama_scratch_capture(sc, NULL, 0, 0);
            lz_kvscore_params sp = {.q = qa, .k = kc2.k, .k_stride = kc2.cap, .pk = pc.k, .pk_stride = pc.cap,
                                    .n_prefix = 4, .n = n, .w = n, .m = n, .L = L, .H = H, .KV = KV, .d = d,
                                    .kernel = p.kernel};
            ok = lz_kvpolicy_score_naive(&sp, sn, tn) == 0 && lz_kvpolicy_plan(&p, sn, tn, L, KV, n, kn, rn) == 0;
            ok = ok && !memcmp(kn, kept, (size_t)L * KV * sizeof(int));
            long ssum = 0;
            for (int lh = 0; ok && lh < L * KV; lh++) {
                ssum += kn[lh];
                for (int i = 0; i < kn[lh]; i++) { /* the stored row i is the hand-encoded row rn[i] */
                    /* to within rounding: the encoder's pass and this one batch their products differently,
                     * and BLAS kernels with FMA (Haswell, Zen) round them differently (up to 5.4e-7 seen);
                     * two different rows of K differ by O(1) */
                    const float *a = dc->k + ((size_t)lh * dc->cap + i) * d;
                    const float *b = kc2.k + ((size_t)lh * kc2.cap + rn[(size_t)lh * n + i]) * d;
                    for (int x = 0; x < d; x++) ok &= fabsf(a[x] - b[x]) <= 1e-5f * (1.0f + fabsf(b[x]));
                }
            }
            CHECK(ok && ssum == (long)L * KV * 75, "self window: the encoder keeps the naive plan's rows (%ld kept)",
                  ssum);
            lz_kv_cache_free(&kc2);
            lz_kv_cache_free(&pc);
        } else CHECK(0, "self window reference setup");
        lz_llama_scratch_free(sc);
        free(qa); free(sn); free(tn); free(kn); free(rn);
    }
    lz_encoder_set_kvpolicy(e, NULL);
    lz_encoder_run(e, ids, n, err, sizeof err);
    lz_encoder_pack(e, 1, codec, LZ_PAYLOAD_CODEC_RAW, 1, &blob, &len0, err, sizeof err);
    free(blob);
    CHECK(len1 * 10 < len0 * 6, "compressed payload %zu bytes vs %zu whole", len1, len0);
    CHECK(lz_encoder_policy_seconds(e) > 0, "scoring time measured");
    lz_payload_codec_free(codec);
    lz_encoder_free(e);
    free(k0); free(v0); free(q1); free(q2); free(q3);
    lz_test_model_free(m, dir, path);
}

/* lz_encoder_run_fetched: a document taken from a pass of the reference
 * backend (ingest/pass_ref.h) packs to the same bytes as lz_encoder_run, under every policy the
 * backend takes (lz_encoder_backend_plan: none, a window, the self window,
 * and the windows it asks for); a probe policy is not planned and refused. */
static void test_backend_passes(void)
{
    char dir[256], path[512], err[512];
    lz_llama *m = lz_test_model(3, 8, 2, 16, 64, dir, sizeof dir, path, sizeof path);
    if (!m) return;
    const lz_llama_config *c = &m->cfg;
    const int n = 150, n2 = 40;
    int ids[150], other[40], prefix[4] = {1, 20, 30, 40};
    for (int i = 0; i < n; i++) ids[i] = 3 + (int)(frand() * (c->vocab - 4));
    for (int i = 0; i < n2; i++) other[i] = 3 + (int)(frand() * (c->vocab - 4));
    lz_encoder *ec = NULL, *eb = NULL;
    lz_pass_ref *ref = NULL;
    if (lz_encoder_new(m, prefix, 4, &ec, err, sizeof err) || lz_encoder_new(m, prefix, 4, &eb, err, sizeof err) ||
        !(ref = lz_pass_ref_new(m, lz_encoder_prefix_cache(eb)))) {
        CHECK(0, "encoders: %s", err);
        return;
    }
    const lz_encode_backend b = lz_pass_ref_backend(ref, 512, 1024);
    lz_encoder_set_backend(eb, &b);
    lz_payload_codec *codec = lz_payload_codec_new();
    const char *specs[4] = {"none", "ada-snapkv b=0.5 w=16 k=5 a=0.2 mean", "ada-snapkv b=0.5 w=150 k=5 a=0.2 mean self",
                            "ada-snapkv b=0.5 w=16 k=5 a=0.2 mean recon"};
    const int want_cw[4] = {0, 16, n, -1}, want_c0[4] = {-1, n - 16, 0, -1};
    for (int t = 0; t < 4; t++) {
        lz_kvpolicy p;
        if (lz_kvpolicy_parse_spec(specs[t], &p)) { CHECK(0, "spec %s", specs[t]); continue; }
        lz_encoder_set_kvpolicy(ec, &p);
        lz_encoder_set_kvpolicy(eb, &p);
        int c0 = -9, cw = -9, c02, cw2;
        const int planned = lz_encoder_backend_plan(eb, n, &c0, &cw);
        if (want_cw[t] < 0) { /* a probe runs after the document: the CPU does it all */
            CHECK(!planned, "%s: not planned for the backend", specs[t]);
            CHECK(lz_encoder_run_fetched(eb, ids, n, 0, err, sizeof err) != 0 && strstr(err, "did not run"),
                  "%s: a fetch refused (%s)", specs[t], err);
            continue;
        }
        CHECK(planned && cw == want_cw[t] && (cw == 0 || c0 == want_c0[t]), "%s: planned %d, window %d rows from %d",
              specs[t], planned, cw, c0);
        lz_encoder_backend_plan(eb, n2, &c02, &cw2);
        const int *pids[2] = {other, ids}, pn[2] = {n2, n}, pc0[2] = {c02, c0}, pcw[2] = {cw2, cw};
        CHECK(b.start(b.ctx, pids, pn, pc0, pcw, 2, err, sizeof err) == 0 && b.finish(b.ctx, err, sizeof err) == 0, "pass");
        void *b0 = NULL, *b1 = NULL;
        size_t l0 = 0, l1 = 1;
        CHECK(lz_encoder_run(ec, ids, n, err, sizeof err) == 0 &&
                  lz_encoder_pack(ec, 1, codec, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, 1, &b0, &l0, err, sizeof err) == 0,
              "%s: CPU: %s", specs[t], err);
        const long before = lz_encoder_backend_docs(eb);
        CHECK(lz_encoder_run_fetched(eb, ids, n, 1, err, sizeof err) == 0 &&
                  lz_encoder_pack(eb, 1, codec, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, 1, &b1, &l1, err, sizeof err) == 0,
              "%s: fetched: %s", specs[t], err);
        CHECK(lz_encoder_backend_docs(eb) == before + 1, "counted as the backend's");
        CHECK(b0 && b1 && l0 == l1 && !memcmp(b0, b1, l0), "%s: the fetched document packs to the CPU's bytes (%zu, %zu)",
              specs[t], l0, l1);
        free(b0);
        free(b1);
        /* the wrong slot: a document of another length is refused, not stored */
        CHECK(lz_encoder_run_fetched(eb, ids, n, 0, err, sizeof err) != 0 && strstr(err, "rows"),
              "%s: another document's result refused (%s)", specs[t], err);
    }
    lz_payload_codec_free(codec);
    lz_encoder_free(ec);
    lz_encoder_free(eb);
    lz_pass_ref_free(ref);
    lz_test_model_free(m, dir, path);
}

int main(void)
{
    test_allocation();
    test_layer_budgets();
    test_plan();
    test_spec();
    test_maxpool();
    test_scoring();
    test_self_scoring();
    test_compact();
    test_encoder();
    test_backend_passes();
    return lz_test_done();
}

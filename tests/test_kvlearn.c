/* test_kvlearn.c - the learned key-importance model (ingest/kvlearn.h): its
 * features undo the keys' rotation, the ridge fit recovers a known linear
 * model, the file round-trips and refuses corrupted, truncated and foreign
 * files, kvpolicy_weigh equals the obvious loops, and the encoder keeps
 * exactly the rows a hand-made plan from the model's scores keeps. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ingest/encode.h"
#include "ingest/kvlearn.h"
#include "ingest/kvpolicy.h"
#include "model/llama.h"
#include "base/rope.h"
#include "tests/test.h"
#include "tests/test_model.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { return (float)lz_test_u01(&rng); }

static void inv_freqs(float *inv, int d)
{
    for (int i = 0; i < d / 2; i++) inv[i] = powf(10000.0f, -2.0f * i / d);
}

static void test_features(void)
{
    enum { d = 16, n = 9, s = 5 };
    float inv[d / 2], k[n * d], k0[n * d], v[n * d], cs[n * d], x[n * (2 * d + 4)];
    inv_freqs(inv, d);
    const int F = lz_kvlearn_nfeat(d);
    CHECK(F == 2 * d + 4, "F = 2d + 4 (%d)", F);
    for (int layout = 0; layout < 2; layout++) {
        for (int i = 0; i < n * d; i++) k0[i] = 2 * frand() - 1, v[i] = 2 * frand() - 1;
        memcpy(k, k0, sizeof k);
        for (int j = 0; j < n; j++) lz_rope_apply(k + j * d, d, s + j, layout, inv); /* stored: rotated at s + j */
        lz_kvlearn_unrotation(cs, n, s, d, inv);
        lz_kvlearn_features(x, k, v, cs, d, n, layout);
        double dk = 0, dv = 0;
        int pos_ok = 1;
        for (int j = 0; j < n; j++) {
            const float *xj = x + j * F;
            for (int i = 0; i < d; i++) dk = fmax(dk, fabs(xj[d + i] - k0[j * d + i])), dv = fmax(dv, fabs(xj[i] - v[j * d + i]));
            pos_ok &= xj[2 * d] == (float)j / n && xj[2 * d + 1] == 1.0f / (1 + j) && xj[2 * d + 2] == (j == 0) &&
                      xj[2 * d + 3] == 1.0f;
        }
        CHECK(dk < 1e-5 && dv == 0, "%s layout: features hold the value and the key unrotated (%.2g)",
              layout ? "half" : "adjacent", dk);
        CHECK(pos_ok, "position features j/n, 1/(1+j), j == 0, bias");
    }
}

/* A known linear model of log scores is recovered by the fit (predictions on
 * fresh keys equal within 1e-3 relative), and lz_kvlearn_predict is exp(w.x). */
static void test_fit(void)
{
    enum { L = 2, KV = 2, d = 8, T = 40, n = 37, s = 3, DOCS = 12 };
    const int F = lz_kvlearn_nfeat(d);
    float inv[d / 2], wt[L * KV * (2 * d + 4)];
    inv_freqs(inv, d);
    for (int i = 0; i < L * KV * F; i++) wt[i] = 0.6f * (2 * frand() - 1);
    lz_kvlearn truth = {.L = L, .KV = KV, .d = d, .F = F, .w = wt};
    lz_kvlearn_acc *a = lz_kvlearn_acc_new(L, KV, d);
    lz_kvlearn m;
    CHECK(a && lz_kvlearn_fit(a, 1e-9, &m) == -1, "no document: no fit");
    float *k = malloc(sizeof(float) * L * KV * T * d), *v = malloc(sizeof(float) * L * KV * T * d);
    float *attn = malloc(sizeof(float) * L * KV * n), *pred = malloc(sizeof(float) * L * KV * n);
    for (int doc = 0; doc < DOCS; doc++) {
        for (int i = 0; i < L * KV * T * d; i++) k[i] = 2 * frand() - 1, v[i] = 2 * frand() - 1;
        CHECK(lz_kvlearn_predict(&truth, k, v, T, s, n, LZ_ROPE_HALF, inv, attn) == 0, "predict");
        CHECK(lz_kvlearn_acc_doc(a, k, v, T, s, n, attn, LZ_ROPE_HALF, inv) == 0, "accumulate");
    }
    CHECK(lz_kvlearn_acc_docs(a) == DOCS, "documents counted");
    CHECK(lz_kvlearn_fit(a, 1e-9, &m) == 0 && m.n_docs == DOCS && m.F == F, "fit");
    for (int i = 0; i < L * KV * T * d; i++) k[i] = 2 * frand() - 1, v[i] = 2 * frand() - 1;
    lz_kvlearn_predict(&truth, k, v, T, s, n, LZ_ROPE_HALF, inv, attn);
    lz_kvlearn_predict(&m, k, v, T, s, n, LZ_ROPE_HALF, inv, pred);
    double md = 0;
    for (int i = 0; i < L * KV * n; i++) md = fmax(md, fabs(pred[i] / attn[i] - 1));
    CHECK(md < 1e-3, "the fit recovers the model: fresh keys scored within %.2g relative", md);
    /* exp(w . x) by hand for one key */
    float cs[n * d], x[n * (2 * d + 4)];
    lz_kvlearn_unrotation(cs, n, s, d, inv);
    lz_kvlearn_features(x, k + (size_t)3 * T * d, v + (size_t)3 * T * d, cs, d, n, LZ_ROPE_HALF);
    double y = 0;
    for (int i = 0; i < F; i++) y += (double)m.w[3 * F + i] * x[5 * F + i];
    CHECK(fabs(pred[3 * n + 5] / exp(y) - 1) < 1e-5, "predict = exp(w . x) (%g vs %g)", pred[3 * n + 5], exp(y));
    lz_kvlearn_free(&m);
    lz_kvlearn_acc_free(a);
    free(k); free(v); free(attn); free(pred);
}

static void test_file(void)
{
    char dir[256], path[512], err[512];
    if (!lz_test_tmpdir(dir, sizeof dir)) { CHECK(0, "tmpdir"); return; }
    snprintf(path, sizeof path, "%s/m.kvlearn", dir);
    enum { L = 3, KV = 2, d = 8 };
    const int F = lz_kvlearn_nfeat(d);
    float w[L * KV * (2 * d + 4)];
    for (int i = 0; i < L * KV * F; i++) w[i] = frand() - 0.5f;
    lz_kvlearn m = {.L = L, .KV = KV, .d = d, .F = F, .n_docs = 7, .w = w}, r;
    for (int i = 0; i < 32; i++) m.fingerprint[i] = (uint8_t)(i * 7);
    CHECK(lz_kvlearn_save(&m, path, err, sizeof err) == 0 && m.hash != 0, "save: %s", err);
    CHECK(lz_kvlearn_load(path, &r, err, sizeof err) == 0, "load: %s", err);
    CHECK(r.L == L && r.KV == KV && r.d == d && r.F == F && r.n_docs == 7 && r.hash == m.hash &&
              !memcmp(r.fingerprint, m.fingerprint, 32) && r.w && !memcmp(r.w, w, sizeof w),
          "round trip: sizes, hash %08x, fingerprint and weights", (unsigned)r.hash);
    lz_kvlearn_free(&r);
    size_t len;
    char *buf = lz_test_read_file(path, &len);
    char bad[600];
    snprintf(bad, sizeof bad, "%s/bad.kvlearn", dir);
    struct { const char *what; size_t at, cut; int extra; const char *msg; } cases[] = {
        {"a flipped weight byte", 60, 0, 0, "checksum mismatch"},
        {"a flipped feature count", 20, 0, 0, "bad sizes"},
        {"the magic", 0, 0, 0, "LZKVLRN1"},
        {"truncated", (size_t)-1, 9, 0, "truncated"},
        {"a trailing byte", (size_t)-1, 0, 1, "trailing bytes"},
    };
    for (size_t c = 0; buf && c < sizeof cases / sizeof cases[0]; c++) {
        FILE *f = fopen(bad, "wb");
        char *copy = malloc(len + 1);
        memcpy(copy, buf, len);
        if (cases[c].at != (size_t)-1) copy[cases[c].at] ^= 0x5a;
        copy[len] = 'x';
        fwrite(copy, 1, len - cases[c].cut + cases[c].extra, f);
        fclose(f);
        free(copy);
        err[0] = 0;
        CHECK(lz_kvlearn_load(bad, &r, err, sizeof err) == -1 && strstr(err, cases[c].msg) && strstr(err, bad),
              "%s refused, naming the file: %s", cases[c].what, err);
    }
    CHECK(lz_kvlearn_load("/nonexistent/x.kvlearn", &r, err, sizeof err) == -1 && strstr(err, "/nonexistent/x.kvlearn"),
          "a missing file: %s", err);
    free(buf);
    unlink(bad);
    unlink(path);
    rmdir(dir);
}

/* weigh: scores = maxpool(attn * (mean|v|)^P / layer mean), raw before pooling */
static void test_weigh(void)
{
    enum { L = 2, KV = 2, d = 4, m = 11, T = 12 };
    float attn[L * KV * m], v[L * KV * T * d], sc[L * KV * m], raw[L * KV * m];
    for (int i = 0; i < L * KV * m; i++) attn[i] = frand();
    for (int i = 0; i < L * KV * T * d; i++) v[i] = 2 * frand() - 1;
    lz_kvscore_params p = {.m = m, .L = L, .KV = KV, .d = d, .kernel = 1};
    CHECK(lz_kvpolicy_weigh(&p, attn, sc, raw) == 0 && !memcmp(sc, attn, sizeof sc) && !memcmp(raw, attn, sizeof raw),
          "no value weights, kernel 1: the scores as given");
    p.v = v, p.v_stride = T, p.v_power = 2, p.kernel = 3;
    CHECK(lz_kvpolicy_weigh(&p, attn, sc, raw) == 0, "weigh");
    double md = 0;
    for (int l = 0; l < L; l++) {
        double lm = 0, vn[KV * m];
        for (int g = 0; g < KV; g++)
            for (int j = 0; j < m; j++) {
                double a = 0;
                for (int e = 0; e < d; e++) a += fabs(v[(((size_t)l * KV + g) * T + j) * d + e]);
                vn[g * m + j] = pow(a / d, 2);
                lm += vn[g * m + j] / (KV * m);
            }
        for (int g = 0; g < KV; g++)
            for (int j = 0; j < m; j++) {
                double want = -1;
                for (int t = j - 1; t <= j + 1; t++)
                    if (t >= 0 && t < m) want = fmax(want, attn[(l * KV + g) * m + t] * vn[g * m + t] / lm);
                md = fmax(md, fabs(sc[(l * KV + g) * m + j] - want) / want);
                md = fmax(md, fabs(raw[(l * KV + g) * m + j] - attn[(l * KV + g) * m + j] * vn[g * m + j] / lm) /
                                  fmax(1e-9, raw[(l * KV + g) * m + j]));
            }
    }
    CHECK(md < 1e-5, "value weights and pooling equal the obvious loops (%.2g)", md);
    p.m = 0;
    CHECK(lz_kvpolicy_weigh(&p, attn, sc, raw) == -1, "no candidates refused");
}

static void test_spec(void)
{
    lz_kvpolicy p, q;
    char s[LZ_KVPOLICY_SPEC_MAX], t[LZ_KVPOLICY_SPEC_MAX];
    lz_kvpolicy_default(&p);
    p.kind = LZ_KVPOLICY_ADA_SNAPKV;
    lz_kvpolicy_parse_budget("0.2", &p);
    p.probe = LZ_KVPOLICY_PROBE_LEARNED;
    p.scorer_hash = 0x1234abcd;
    p.value_norm = 1, p.value_power = 2, p.scope_model = 1;
    lz_kvpolicy_spec(&p, s, sizeof s);
    CHECK(lz_kvpolicy_parse_spec(s, &q) == 0 && q.probe == LZ_KVPOLICY_PROBE_LEARNED && q.scorer_hash == 0x1234abcd &&
              q.value_power == 2.0f && q.scope_model,
          "spec with a learned scorer '%s'", s);
    lz_kvpolicy_spec(&q, t, sizeof t);
    CHECK(!strcmp(s, t) && strstr(s, " learned=1234abcd vnorm=2 model"), "round trip '%s'", t);
    CHECK(lz_kvpolicy_budget(&p, 100) == 20 && lz_kvpolicy_budget(&p, 20) == 4, "no window floor");
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean learned=00000000", &q) == -1, "hash 0 refused");
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean learned=12g4abcd", &q) == -1, "bad hex refused");
    CHECK(lz_kvpolicy_parse_spec("snapkv b=0.2 w=32 k=7 a=0.2 mean learned=1234abcd recon", &q) == -1,
          "two windows refused");
}

/* The encoder with a learned scorer keeps exactly the rows of a plan made by
 * hand from lz_kvlearn_predict + lz_kvpolicy_weigh on the uncompressed rows. */
static void test_encoder(void)
{
    char dir[256], path[512], err[512];
    lz_llama *m = lz_test_model(2, 4, 2, 16, 64, dir, sizeof dir, path, sizeof path);
    if (!m) return;
    const lz_llama_config *c = &m->cfg;
    const int L = c->n_layers, KV = c->n_kv_heads, d = c->head_dim, n = 60, F = lz_kvlearn_nfeat(d);
    int ids[60], prefix[3] = {1, 9, 12};
    for (int i = 0; i < n; i++) ids[i] = 3 + (int)(frand() * (c->vocab - 4));
    float *w = malloc(sizeof(float) * L * KV * F);
    for (int i = 0; i < L * KV * F; i++) w[i] = frand() - 0.5f;
    lz_kvlearn sc = {.L = L, .KV = KV, .d = d, .F = F, .w = w, .hash = 7};
    lz_encoder *e;
    if (lz_encoder_new(m, prefix, 3, &e, err, sizeof err)) { CHECK(0, "encoder: %s", err); return; }
    CHECK(lz_encoder_run(e, ids, n, err, sizeof err) == 0, "plain run");
    const lz_kv_cache *dc = lz_encoder_doc_cache(e);
    const int T = dc->cap;
    float *k0 = malloc(sizeof(float) * L * KV * T * d), *v0 = malloc(sizeof(float) * L * KV * T * d);
    memcpy(k0, dc->k, sizeof(float) * L * KV * T * d);
    memcpy(v0, dc->v, sizeof(float) * L * KV * T * d);
    lz_kvpolicy p;
    lz_kvpolicy_default(&p);
    p.kind = LZ_KVPOLICY_ADA_SNAPKV;
    lz_kvpolicy_parse_budget("0.25", &p);
    p.probe = LZ_KVPOLICY_PROBE_LEARNED, p.scorer_hash = 7, p.value_norm = 1, p.value_power = 2, p.kernel = 3;
    lz_encoder_set_kvpolicy(e, &p);
    CHECK(lz_encoder_run(e, ids, n, err, sizeof err) == -1 && strstr(err, "learned scorer"), "no scorer set: %s", err);
    lz_encoder_set_scorer(e, &sc);
    CHECK(lz_encoder_run(e, ids, n, err, sizeof err) == 0, "learned run: %s", err);
    const int *kept = lz_encoder_kept(e);
    dc = lz_encoder_doc_cache(e);
    float *attn = malloc(sizeof(float) * L * KV * n), *s1 = malloc(sizeof(float) * L * KV * n),
          *r1 = malloc(sizeof(float) * L * KV * n);
    int kn[4], *rows = malloc(sizeof(int) * L * KV * n);
    lz_kvscore_params sp = {.m = n, .L = L, .KV = KV, .d = d, .kernel = 3, .v = v0, .v_stride = T, .v_power = 2};
    int ok = kept && dc->cap == T && lz_kvlearn_predict(&sc, k0, v0, T, 3, n, c->rope_layout, m->inv_freq, attn) == 0 &&
             lz_kvpolicy_weigh(&sp, attn, s1, r1) == 0 && lz_kvpolicy_plan(&p, s1, r1, L, KV, n, kn, rows) == 0 &&
             !memcmp(kn, kept, sizeof(int) * L * KV);
    long sum = 0;
    for (int lh = 0; ok && lh < L * KV; lh++) {
        sum += kn[lh];
        for (int i = 0; i < kn[lh]; i++)
            ok &= !memcmp(dc->k + ((size_t)lh * T + i) * d, k0 + ((size_t)lh * T + rows[(size_t)lh * n + i]) * d,
                          sizeof(float) * d) &&
                  !memcmp(dc->v + ((size_t)lh * T + i) * d, v0 + ((size_t)lh * T + rows[(size_t)lh * n + i]) * d,
                          sizeof(float) * d);
    }
    CHECK(ok && sum == (long)L * KV * 15, "the encoder keeps the hand-made plan's rows (%ld kept)", sum);
    /* a scorer of another shape is refused */
    lz_kvlearn wrong = sc;
    wrong.d = 8;
    lz_encoder_set_scorer(e, &wrong);
    CHECK(lz_encoder_run(e, ids, n, err, sizeof err) == -1 && strstr(err, "shape"), "wrong shape: %s", err);
    lz_encoder_free(e);
    lz_test_model_free(m, dir, path);
    free(w); free(k0); free(v0); free(attn); free(s1); free(r1); free(rows);
}

/* The shipped key-importance model belongs to the shipped default model. */
static void test_shipped(void)
{
    const char *mp = "models/default.gguf", *sp = "models/default.kvlearn";
    char err[512];
    if (access(mp, R_OK) || access(sp, R_OK)) {
        printf("SKIP %s or %s not found (run from the repository root)\n", mp, sp);
        return;
    }
    lz_llama *m;
    lz_kvlearn k;
    if (lz_llama_load(mp, &m, err, sizeof err)) { CHECK(0, "load %s: %s", mp, err); return; }
    CHECK(lz_kvlearn_load(sp, &k, err, sizeof err) == 0, "load %s: %s", sp, err);
    CHECK(k.w && !memcmp(k.fingerprint, m->fingerprint, 32) && k.L == m->cfg.n_layers && k.KV == m->cfg.n_kv_heads &&
              k.d == m->cfg.head_dim && k.n_docs > 0,
          "%s fits %s (fitted on %u documents, learned=%08x)", sp, mp, k.n_docs, (unsigned)k.hash);
    lz_kvlearn_free(&k);
    lz_llama_free(m);
}

int main(void)
{
    test_features();
    test_fit();
    test_file();
    test_weigh();
    test_spec();
    test_encoder();
    test_shipped();
    return lz_test_done();
}

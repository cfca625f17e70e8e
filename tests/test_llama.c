/* test_llama.c - the CPU engine: stories260K reproduces llama2.c's greedy
 * output and logits; batched prefill equals token-by-token decode; external
 * segments with a missing rotation equal recomputation (one document) and
 * materialised rotated keys; quantized weight types load; lazygen --ids;
 * the same bits on any thread count. */
#include <cblas.h>
#include <math.h>
#include <omp.h>

#include "model/llama.h"
#include "model/mkmodel.h"
#include "model/sampler.h"
#include "tests/test.h"

static float max_abs_diff(const float *a, const float *b, size_t n, float *max_ref)
{
    float m = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        m = fmaxf(m, fabsf(a[i] - b[i]));
        r = fmaxf(r, fabsf(b[i]));
    }
    if (max_ref) *max_ref = r;
    return m;
}

static void test_golden(void)
{
    char p[512], g[512];
    if (!lz_test_fixture("models/stories260K.gguf", p, sizeof p) ||
        !lz_test_fixture("models/stories260K.golden.txt", g, sizeof g))
        return;
    /* parse the golden file */
    FILE *f = fopen(g, "r");
    char line[4096];
    int prompt[16], n_prompt = 0, gen[64], n_gen = 0;
    float logit_rows[3][6];
    int n_rows = 0;
    while (f && fgets(line, sizeof line, f)) {
        char *s = line;
        int v, k;
        if (!strncmp(line, "PROMPT_IDS", 10)) {
            s += 10;
            while (sscanf(s, "%d%n", &v, &k) == 1 && n_prompt < 16) { prompt[n_prompt++] = v; s += k; }
        } else if (!strncmp(line, "GEN_IDS", 7)) {
            s += 7;
            while (sscanf(s, "%d%n", &v, &k) == 1 && n_gen < 64) { gen[n_gen++] = v; s += k; }
        } else if (!strncmp(line, "pos ", 4) && n_rows < 3) {
            s = strstr(line, "]:");
            if (s) {
                s += 2;
                for (int j = 0; j < 6; j++) { float x; sscanf(s, "%f%n", &x, &k); logit_rows[n_rows][j] = x; s += k; }
                n_rows++;
            }
        }
    }
    if (f) fclose(f);
    CHECK(n_prompt == 5 && n_gen == 36 && n_rows == 3, "golden parsed (%d %d %d)", n_prompt, n_gen, n_rows);
    int want_prompt[5] = {1, 403, 407, 261, 378};
    CHECK(!memcmp(prompt, want_prompt, sizeof want_prompt), "golden prompt ids");

    char err[512];
    lz_llama *m;
    if (lz_llama_load(p, &m, err, sizeof err)) { CHECK(0, "load: %s", err); return; }
    CHECK(m->cfg.n_layers == 5 && m->cfg.dim == 64 && m->cfg.n_heads == 8 && m->cfg.n_kv_heads == 4 &&
              m->cfg.head_dim == 8 && m->cfg.vocab == 512,
          "stories260K config");
    if (m->tok) {
        int *ids, n;
        const char *text = "Once upon a time";
        CHECK(lz_tokenizer_encode(m->tok, text, strlen(text), LZ_TOK_BOS, &ids, &n) == 0, "encode");
        CHECK(n == 5 && !memcmp(ids, want_prompt, sizeof want_prompt), "tokenizer gives the golden prompt ids");
        free(ids);
    }
    const int V = m->cfg.vocab;
    lz_kv_cache c;
    lz_kv_cache_init(&c, &m->cfg, 64);
    lz_llama_scratch *s = lz_llama_scratch_new(m, 8);
    float *all = malloc((size_t)5 * V * sizeof(float));
    CHECK(lz_llama_forward(m, s, &c, NULL, 0, prompt, 5, all, LZ_LOGITS_ALL) == 0, "prefill");
    for (int r = 0; r < 3; r++)
        for (int j = 0; j < 6; j++) CHECK_CLOSE(all[(size_t)r * V + j], logit_rows[r][j], 1e-4, 0);
    /* greedy continuation */
    float *lg = all + (size_t)4 * V;
    int out[36], ok = 1;
    for (int i = 0; i < 36; i++) {
        out[i] = lz_sample_argmax(lg, V);
        if (out[i] != gen[i]) ok = 0;
        if (i < 35 && lz_llama_forward(m, s, &c, NULL, 0, &out[i], 1, lg, LZ_LOGITS_LAST)) { ok = 0; break; }
    }
    CHECK(ok, "36 greedy ids equal the golden ids");
    free(all);
    lz_llama_scratch_free(s);
    lz_kv_cache_free(&c);
    lz_llama_free(m);

    /* the CLI prints the same ids */
    const char *bin = getenv("LZ_BIN");
    if (bin) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "%s/lazygen -m %s -p 'Once upon a time' -n 36 --ids --threads 1", bin, p);
        FILE *pp = popen(cmd, "r");
        char l1[4096] = "", l2[4096] = "";
        if (pp) {
            if (!fgets(l1, sizeof l1, pp)) l1[0] = 0;
            if (!fgets(l2, sizeof l2, pp)) l2[0] = 0;
            CHECK(pclose(pp) == 0, "lazygen exit status");
        }
        CHECK(!strcmp(l1, "prompt: 1 403 407 261 378\n"), "lazygen prompt line: %s", l1);
        char want[1024] = "output:";
        for (int i = 0; i < 36; i++) snprintf(want + strlen(want), sizeof want - strlen(want), " %d", gen[i]);
        strcat(want, "\n");
        CHECK(!strcmp(l2, want), "lazygen output line: %s", l2);
    }
}

static lz_llama *make_model(const char *dir, const char *name, lz_mkmodel_opts *o)
{
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (lz_mkmodel_write(o, path, err, sizeof err)) { CHECK(0, "mkmodel: %s", err); return NULL; }
    lz_llama *m;
    if (lz_llama_load(path, &m, err, sizeof err)) { CHECK(0, "load %s: %s", name, err); return NULL; }
    return m;
}

/* Batched prefill (all logits) equals one token at a time; chunking equal. */
static void test_batching(lz_llama *m)
{
    const int V = m->cfg.vocab, n = 23;
    int toks[23];
    for (int i = 0; i < n; i++) toks[i] = 3 + (i * 37) % (V - 3);
    lz_kv_cache a, b;
    lz_kv_cache_init(&a, &m->cfg, 64);
    lz_kv_cache_init(&b, &m->cfg, 64);
    lz_llama_scratch *big = lz_llama_scratch_new(m, 32), *small = lz_llama_scratch_new(m, 5);
    float *la = malloc((size_t)n * V * sizeof(float)), *lb = malloc((size_t)V * sizeof(float));
    CHECK(lz_llama_forward(m, big, &a, NULL, 0, toks, n, la, LZ_LOGITS_ALL) == 0, "batched");
    float worst = 0, ref = 0;
    for (int i = 0; i < n; i++) {
        lz_llama_forward(m, small, &b, NULL, 0, &toks[i], 1, lb, LZ_LOGITS_LAST);
        float r;
        worst = fmaxf(worst, max_abs_diff(lb, la + (size_t)i * V, (size_t)V, &r));
        ref = fmaxf(ref, r);
    }
    CHECK(worst <= 1e-4f * fmaxf(ref, 1.0f), "batched vs sequential logits differ by %g (scale %g)", worst, ref);
    size_t kv = (size_t)m->cfg.n_layers * m->cfg.n_kv_heads * 64 * m->cfg.head_dim;
    (void)kv;
    /* chunked prefill through a 5-token scratch equals the 32-token one */
    lz_kv_cache_reset(&b, 0);
    CHECK(lz_llama_forward(m, small, &b, NULL, 0, toks, n, lb, LZ_LOGITS_LAST) == 0, "chunked");
    CHECK(max_abs_diff(lb, la + (size_t)(n - 1) * V, (size_t)V, NULL) <= 1e-4f * fmaxf(ref, 1.0f), "chunked == batched");
    /* a full cache is refused */
    lz_kv_cache_reset(&b, 0);
    int many[65] = {0};
    CHECK(lz_llama_forward(m, small, &b, NULL, 0, many, 65, lb, LZ_LOGITS_LAST) != 0, "overflowing cache refused");
    int bad = V + 5;
    CHECK(lz_llama_forward(m, small, &b, NULL, 0, &bad, 1, lb, LZ_LOGITS_LAST) != 0, "token id out of range refused");
    free(la); free(lb);
    lz_llama_scratch_free(big); lz_llama_scratch_free(small);
    lz_kv_cache_free(&a); lz_kv_cache_free(&b);
}

/* The forward pass's bits do not depend on the thread count: a prompt of
 * 37 tokens (its K, V and logits) and a decode step, on 1, 2, 3 and 5
 * threads, fp32 weights (sgemm / sgemv) and bf16 (widened blocks /
 * lz_mat_gemv), output widths that are not a multiple of the block. */
static void test_thread_bits(const char *dir)
{
    const int types[2] = {LZ_GGML_F32, LZ_GGML_BF16}, threads[4] = {1, 2, 3, 5}, n = 37;
    for (int ti = 0; ti < 2; ti++) {
        lz_mkmodel_opts o;
        lz_mkmodel_defaults(&o);
        o.dim = 320, o.n_layers = 2, o.n_heads = 5, o.n_kv_heads = 5, o.head_dim = 64, o.ffn_dim = 1000;
        o.tensor_type = types[ti];
        lz_llama *m = make_model(dir, ti ? "thr16.gguf" : "thr32.gguf", &o);
        if (!m) return;
        const int V = m->cfg.vocab;
        int toks[37];
        for (int i = 0; i < n; i++) toks[i] = 3 + (i * 53) % (V - 3);
        const size_t kvn = (size_t)m->cfg.n_layers * m->cfg.n_kv_heads * 64 * m->cfg.head_dim;
        float *k0 = malloc(kvn * 4), *v0 = malloc(kvn * 4), *l0 = malloc((size_t)2 * V * 4), *l1 = malloc((size_t)2 * V * 4);
        int same = k0 && v0 && l0 && l1;
        for (int t = 0; same && t < 4; t++) {
            lz_llama_set_threads(threads[t]);
            lz_kv_cache c;
            lz_llama_scratch *sc = lz_llama_scratch_new(m, 64);
            if (!sc || lz_kv_cache_init(&c, &m->cfg, 64)) { same = 0; break; }
            lz_kv_cache_reset(&c, 0);
            float *l = t ? l1 : l0;
            same = !lz_llama_forward(m, sc, &c, NULL, 0, toks, n, l, LZ_LOGITS_LAST) &&
                   !lz_llama_forward(m, sc, &c, NULL, 0, &toks[5], 1, l + V, LZ_LOGITS_LAST);
            for (size_t lh = 0; lh < (size_t)m->cfg.n_layers * m->cfg.n_kv_heads; lh++) /* rows past n + 1 unset */
                for (size_t e = (size_t)(n + 1) * m->cfg.head_dim; e < (size_t)64 * m->cfg.head_dim; e++)
                    c.k[lh * 64 * m->cfg.head_dim + e] = c.v[lh * 64 * m->cfg.head_dim + e] = 0;
            if (t == 0) {
                memcpy(k0, c.k, kvn * 4);
                memcpy(v0, c.v, kvn * 4);
            } else
                same = same && !memcmp(k0, c.k, kvn * 4) && !memcmp(v0, c.v, kvn * 4) && !memcmp(l0, l1, (size_t)2 * V * 4);
            if (!same) printf("%s weights: %d threads differ from 1 (K %d, V %d, prompt logits %d, step logits %d)\n",
                              ti ? "bf16" : "fp32", threads[t], memcmp(k0, c.k, kvn * 4) != 0, memcmp(v0, c.v, kvn * 4) != 0,
                              memcmp(l0, l1, (size_t)V * 4) != 0, memcmp(l0 + V, l1 + V, (size_t)V * 4) != 0);
            lz_llama_scratch_free(sc);
            lz_kv_cache_free(&c);
        }
        CHECK(same, "%s weights: the same K, V and logits bits on 1, 2, 3 and 5 threads", ti ? "bf16" : "fp32");
        free(k0), free(v0), free(l0), free(l1);
        lz_llama_free(m);
    }
    lz_llama_set_threads(2);
}

/* Builds a standalone segment from a cache filled with tokens at pos0. */
static lz_kv_segment seg_from(const lz_kv_cache *c, int64_t rot)
{
    lz_kv_segment s = {.k = c->k, .v = c->v, .n_kept = NULL, .n = c->n, .stride = c->cap, .rot = rot};
    return s;
}

/* Prefix P, documents A and B encoded standalone after P (positions s..),
 * question Q. With one document placed right after P (rot 0) lazy equals
 * full recomputation; placed later (rot != 0) it equals materialising the
 * rotated keys; with two documents full differs from lazy. */
static void test_segments(lz_llama *m)
{
    const int V = m->cfg.vocab;
    int P[4] = {1, 40, 41, 42}, A[9], B[7], Q[5];
    for (int i = 0; i < 9; i++) A[i] = 100 + 7 * i;
    for (int i = 0; i < 7; i++) B[i] = 200 + 5 * i;
    for (int i = 0; i < 5; i++) Q[i] = 300 + 3 * i;
    lz_llama_scratch *s = lz_llama_scratch_new(m, 32);
    lz_kv_cache cp, ca, cb, cq, cf;
    lz_kv_cache_init(&cp, &m->cfg, 32); lz_kv_cache_init(&ca, &m->cfg, 32); lz_kv_cache_init(&cb, &m->cfg, 32);
    lz_kv_cache_init(&cq, &m->cfg, 32); lz_kv_cache_init(&cf, &m->cfg, 64);
    float *l1 = malloc((size_t)V * sizeof(float)), *l2 = malloc((size_t)V * sizeof(float));
    float *l3 = malloc((size_t)V * sizeof(float));
    /* prefix, then each document standalone after it */
    lz_llama_forward(m, s, &cp, NULL, 0, P, 4, NULL, LZ_LOGITS_NONE);
    lz_kv_segment sp = seg_from(&cp, 0);
    lz_kv_cache_reset(&ca, 4);
    lz_llama_forward(m, s, &ca, &sp, 1, A, 9, NULL, LZ_LOGITS_NONE);
    lz_kv_cache_reset(&cb, 4);
    lz_llama_forward(m, s, &cb, &sp, 1, B, 7, NULL, LZ_LOGITS_NONE);
    /* view of the document's own tokens (cache holds only them) */
    lz_kv_segment sa = seg_from(&ca, 0), sb;

    /* 1) one document at its own position: lazy == full */
    lz_kv_segment segs1[2] = {sp, sa};
    lz_kv_cache_reset(&cq, 4 + 9);
    lz_llama_forward(m, s, &cq, segs1, 2, Q, 5, l1, LZ_LOGITS_LAST);
    int full[18];
    memcpy(full, P, sizeof P); memcpy(full + 4, A, sizeof A); memcpy(full + 13, Q, sizeof Q);
    lz_kv_cache_reset(&cf, 0);
    lz_llama_forward(m, s, &cf, NULL, 0, full, 18, l2, LZ_LOGITS_LAST);
    float ref, diff = max_abs_diff(l1, l2, (size_t)V, &ref);
    CHECK(diff <= 1e-5f * fmaxf(ref, 1.0f) * 10, "one document: lazy vs full differ by %g (scale %g)", diff, ref);

    /* 2) documents B then A: A placed at 4+7 -> rot 7. Lazy vs materialised keys */
    sb = seg_from(&cb, 0);
    lz_kv_segment sa_rot = seg_from(&ca, 7);
    lz_kv_segment segs2[3] = {sp, sb, sa_rot};
    lz_kv_cache_reset(&cq, 4 + 7 + 9);
    lz_llama_forward(m, s, &cq, segs2, 3, Q, 5, l1, LZ_LOGITS_LAST);
    /* materialise: copy A's keys rotated by R(7) */
    lz_kv_cache mat;
    lz_kv_cache_init(&mat, &m->cfg, 32);
    memcpy(mat.k, ca.k, (size_t)m->cfg.n_layers * m->cfg.n_kv_heads * 32 * m->cfg.head_dim * sizeof(float));
    memcpy(mat.v, ca.v, (size_t)m->cfg.n_layers * m->cfg.n_kv_heads * 32 * m->cfg.head_dim * sizeof(float));
    mat.n = 9;
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int h = 0; h < m->cfg.n_kv_heads; h++)
            for (int j = 0; j < 9; j++)
                lz_rope_apply(mat.k + (((size_t)l * m->cfg.n_kv_heads + h) * 32 + j) * m->cfg.head_dim,
                              m->cfg.head_dim, 7, m->cfg.rope_layout, m->inv_freq);
    lz_kv_segment sa_mat = seg_from(&mat, 0);
    lz_kv_segment segs3[3] = {sp, sb, sa_mat};
    lz_kv_cache_reset(&cq, 4 + 7 + 9);
    lz_llama_forward(m, s, &cq, segs3, 3, Q, 5, l2, LZ_LOGITS_LAST);
    diff = max_abs_diff(l1, l2, (size_t)V, &ref);
    CHECK(diff <= 1e-5f * fmaxf(ref, 1.0f) * 10, "lazy vs materialised rotated keys differ by %g", diff);

    /* 3) two documents: full recomputation differs (documents see each other) */
    int full2[25];
    memcpy(full2, P, sizeof P); memcpy(full2 + 4, B, sizeof B); memcpy(full2 + 11, A, sizeof A);
    memcpy(full2 + 20, Q, sizeof Q);
    lz_kv_cache_reset(&cf, 0);
    lz_llama_forward(m, s, &cf, NULL, 0, full2, 25, l3, LZ_LOGITS_LAST);
    diff = max_abs_diff(l1, l3, (size_t)V, &ref);
    CHECK(diff > 1e-3f * fmaxf(ref, 1.0f), "two documents: full should differ from lazy (diff %g)", diff);

    /* 4) unequal kept lengths per head: cutting head 0 of layer 0 changes the result */
    int *kept = malloc((size_t)m->cfg.n_layers * m->cfg.n_kv_heads * sizeof(int));
    for (int i = 0; i < m->cfg.n_layers * m->cfg.n_kv_heads; i++) kept[i] = 9;
    kept[0] = 3;
    lz_kv_segment sa_cut = sa_rot;
    sa_cut.n_kept = kept;
    lz_kv_segment segs4[3] = {sp, sb, sa_cut};
    lz_kv_cache_reset(&cq, 4 + 7 + 9);
    lz_llama_forward(m, s, &cq, segs4, 3, Q, 5, l2, LZ_LOGITS_LAST);
    CHECK(max_abs_diff(l1, l2, (size_t)V, NULL) > 0, "per-head kept lengths are honoured");
    free(kept);
    free(l1); free(l2); free(l3);
    lz_kv_cache_free(&cp); lz_kv_cache_free(&ca); lz_kv_cache_free(&cb); lz_kv_cache_free(&cq);
    lz_kv_cache_free(&cf); lz_kv_cache_free(&mat);
    lz_llama_scratch_free(s);
}

/* The same weights stored as F16 / BF16 / Q8_0 give close logits. */
static void test_types(const char *dir)
{
    lz_mkmodel_opts o;
    lz_mkmodel_defaults(&o);
    o.dim = 64; o.ffn_dim = 192; o.head_dim = 16; o.n_heads = 4; o.n_kv_heads = 1; o.tied = 1;
    o.llama3_freqs = 1; o.rope_theta = 500000.0f;
    lz_llama *ref = make_model(dir, "f32.gguf", &o);
    if (!ref) return;
    CHECK(ref->cfg.has_rope_divisors && ref->cfg.tied_output, "llama3 freqs read, output tied");
    const int V = ref->cfg.vocab;
    int toks[6] = {1, 300, 301, 302, 303, 304};
    float *l0 = malloc((size_t)V * sizeof(float)), *l1 = malloc((size_t)V * sizeof(float));
    lz_kv_cache c;
    lz_kv_cache_init(&c, &ref->cfg, 8);
    lz_llama_scratch *s = lz_llama_scratch_new(ref, 8);
    lz_llama_forward(ref, s, &c, NULL, 0, toks, 6, l0, LZ_LOGITS_LAST);
    lz_llama_scratch_free(s);
    int types[3] = {LZ_GGML_F16, LZ_GGML_BF16, LZ_GGML_Q8_0};
    const char *names[3] = {"f16.gguf", "bf16.gguf", "q8.gguf"};
    double tols[3] = {5e-3, 5e-2, 5e-2};
    for (int t = 0; t < 3; t++) {
        o.tensor_type = types[t];
        lz_llama *m = make_model(dir, names[t], &o);
        if (!m) continue;
        CHECK(strcmp(m->fingerprint_hex, ref->fingerprint_hex) != 0, "fingerprint differs between weight types");
        s = lz_llama_scratch_new(m, 8);
        lz_kv_cache_reset(&c, 0);
        lz_llama_forward(m, s, &c, NULL, 0, toks, 6, l1, LZ_LOGITS_LAST);
        float r, d = max_abs_diff(l1, l0, (size_t)V, &r);
        CHECK(d <= tols[t] * fmaxf(r, 1.0f), "%s logits differ by %g (scale %g)", names[t], d, r);
        lz_llama_scratch_free(s);
        lz_llama_free(m);
    }
    free(l0); free(l1);
    lz_kv_cache_free(&c);
    lz_llama_free(ref);
}

int main(void)
{
    char dir[256];
    if (!lz_test_tmpdir(dir, sizeof dir)) { printf("cannot make temp dir\n"); return 1; }
    { /* a program that never set the pool: the first scratch makes it one pool of every core
       * (OpenBLAS single-threaded inside OpenMP's threads) */
        lz_mkmodel_opts t;
        lz_mkmodel_defaults(&t);
        lz_llama *m0 = make_model(dir, "pool.gguf", &t);
        openblas_set_num_threads(omp_get_num_procs() > 1 ? omp_get_num_procs() : 2); /* what it starts with */
        lz_llama_scratch *s0 = m0 ? lz_llama_scratch_new(m0, 8) : NULL;
        CHECK(s0 && openblas_get_num_threads() == 1 && omp_get_max_threads() == omp_get_num_procs(),
              "first scratch sets the thread pool (OpenBLAS %d threads, OpenMP %d of %d)", openblas_get_num_threads(),
              omp_get_max_threads(), omp_get_num_procs());
        lz_llama_scratch_free(s0);
        lz_llama_free(m0);
    }
    lz_llama_set_threads(2);
    test_golden();
    lz_mkmodel_opts o;
    lz_mkmodel_defaults(&o);
    lz_llama *m = make_model(dir, "tiny.gguf", &o);
    if (m) {
        CHECK(m->tok != NULL, "generated model has a tokenizer");
        test_batching(m);
        test_segments(m);
        test_thread_bits(dir);
        lz_llama_free(m);
    }
    o.rope_theta = 10000.0f;
    lz_llama *m2 = make_model(dir, "tiny2.gguf", &o);
    lz_llama *m3;
    o.seed = 99;
    m3 = make_model(dir, "tiny3.gguf", &o);
    if (m2 && m3) CHECK(strcmp(m2->fingerprint_hex, m3->fingerprint_hex) != 0, "different weights, different fingerprints");
    lz_llama_free(m2);
    lz_llama_free(m3);
    test_types(dir);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    return lz_test_done();
}

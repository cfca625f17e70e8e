/* test_weights.c - weight matrices used in place (formats/weights.h): widening
 * is exact (bf16, fp16, Q8_0, also from an offset inside a Q8_0 block), the
 * one-token dot products (AVX2 and portable) match a double-precision
 * reference (column counts around the SIMD blocks, row ranges, beta 0 and
 * 1), and a model whose BF16 / F16 / Q8_0 matrices stay in place computes
 * what the same file widened to fp32 at load (LAZY_F32_WEIGHTS=1) computes:
 * same fingerprint, prefill and decode logits within 1e-6, same greedy
 * tokens, no weight copies. */
#include "tests/test.h"
#include "tests/test_model.h"

#include "formats/gguf.h"
#include "base/env.h"
#include "base/half.h"
#include "formats/weights.h"

/* rows x cols random weights stored as type; want[] receives their exact values */
static void *make_matrix(int type, int rows, int cols, uint64_t *rng, float *want)
{
    const size_t n = (size_t)rows * cols;
    if (type == LZ_MAT_Q8_0) {
        uint8_t *q = malloc(n / 32 * 34);
        for (size_t b = 0; b < n / 32; b++) {
            uint16_t d = lz_f32_to_f16((float)(lz_test_u01(rng) * 0.02 + 1e-3));
            memcpy(q + b * 34, &d, 2);
            for (int j = 0; j < 32; j++) {
                int8_t v = (int8_t)(lz_test_irand((unsigned long long *)rng, 255) - 127);
                q[b * 34 + 2 + j] = (uint8_t)v;
                want[b * 32 + j] = lz_f16_to_f32(d) * (float)v;
            }
        }
        return q;
    }
    uint16_t *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        float v = (float)(lz_test_u01(rng) * 4.0 - 2.0);
        h[i] = type == LZ_MAT_BF16 ? lz_f32_to_bf16(v) : lz_f32_to_f16(v);
        want[i] = type == LZ_MAT_BF16 ? lz_bf16_to_f32(h[i]) : lz_f16_to_f32(h[i]);
    }
    return h;
}

static void test_widen_and_dot(int type)
{
    const char *tn = type == LZ_MAT_BF16 ? "bf16" : type == LZ_MAT_F16 ? "f16" : "q8_0";
    static const int cols_16[] = {1, 7, 15, 16, 17, 33, 255, 1024}, cols_q8[] = {32, 64, 96, 1024};
    const int *cols_list = type == LZ_MAT_Q8_0 ? cols_q8 : cols_16;
    const int n_cols = type == LZ_MAT_Q8_0 ? 4 : 8;
    uint64_t rng = 0x9e3779b97f4a7c15ull + (uint64_t)type;
    for (int ci = 0; ci < n_cols; ci++) {
        const int cols = cols_list[ci], rows = 20; /* rows 1..18: two 8-row SIMD blocks and a tail */
        const size_t n = (size_t)rows * cols;
        float *wf = malloc(n * sizeof *wf), *want = malloc(n * sizeof *want), *x = malloc((size_t)cols * sizeof *x),
              part[3];
        void *h = make_matrix(type, rows, cols, &rng, want);
        for (int i = 0; i < cols; i++) x[i] = (float)(lz_test_u01(&rng) * 2.0 - 1.0);
        const lz_mat m = {h, type};

        /* widening: each element exactly its value, whole or from an offset */
        lz_mat_get_f32(m, 0, n, wf);
        int bad = 0;
        for (size_t i = 0; i < n; i++) bad += memcmp(&wf[i], &want[i], 4) != 0;
        CHECK(bad == 0, "%s cols %d: %d elements widened wrong", tn, cols, bad);
        const size_t off = n > 37 ? n - 37 : 0, k = n - off < 3 ? n - off : 3; /* Q8_0: inside a block */
        lz_mat_get_f32(m, off, k, part);
        CHECK(!memcmp(part, wf + off, k * 4), "%s cols %d: widening from an offset", tn, cols);
        float *own;
        const float *view = lz_mat_f32(m, n, &own);
        CHECK(view && own == view && !memcmp(view, wf, n * 4), "%s cols %d: fp32 view", tn, cols);
        free(own);

        /* rows 1 .. rows-2 only; beta 0 ignores a NaN there, beta 1 adds to it */
        float y[20], y1[20];
        for (int r = 0; r < rows; r++) y[r] = r == 0 || r == rows - 1 ? 12345.f : NAN;
        lz_mat_gemv(y, m, x, cols, 1, rows - 1, 0.f);
        CHECK(y[0] == 12345.f && y[rows - 1] == 12345.f, "%s cols %d: rows outside the range written", tn, cols);
        for (int r = 0; r < rows; r++) y1[r] = y[r];
        lz_mat_gemv(y1, m, x, cols, 1, rows - 1, 1.f);
        for (int r = 1; r < rows - 1; r++) {
            double ref = 0, mag = 0;
            for (int i = 0; i < cols; i++) {
                ref += (double)x[i] * wf[(size_t)r * cols + i];
                mag += fabs((double)x[i] * wf[(size_t)r * cols + i]);
            }
            CHECK(fabs(y[r] - ref) <= 1e-5 * mag + 1e-30, "%s cols %d row %d: %.9g vs %.9g", tn, cols, r, y[r], ref);
            CHECK(fabs(y1[r] - 2 * ref) <= 2e-5 * mag + 1e-30, "%s cols %d row %d beta 1: %.9g vs %.9g", tn, cols, r,
                  y1[r], 2 * ref);
        }
        free(h);
        free(wf);
        free(want);
        free(x);
    }
    float vals[3] = {1.f, -2.f, 3.f};
    float *own = (float *)1;
    CHECK(lz_mat_f32((lz_mat){vals, LZ_MAT_F32}, 3, &own) == vals && own == NULL, "fp32 view of fp32 is the matrix");
}

/* max |a - b| / max |b| over n */
static double rel_err(const float *a, const float *b, size_t n)
{
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mb = fmax(mb, fabs((double)b[i]));
    }
    return mb > 0 ? md / mb : md;
}

/* prefill (all logits) then greedy decode steps of m; returns the logits, (n + steps, V) */
static float *run(const lz_llama *m, const int *ids, int n, int steps, int *gen)
{
    const int V = m->cfg.vocab;
    float *lg = malloc((size_t)(n + steps) * V * sizeof(float));
    lz_llama_scratch *s = lz_llama_scratch_new(m, 32);
    lz_kv_cache c;
    if (!lg || !s || lz_kv_cache_init(&c, &m->cfg, n + steps)) { fprintf(stderr, "oom\n"); exit(1); }
    lz_kv_cache_reset(&c, 0);
    CHECK(lz_llama_forward(m, s, &c, NULL, 0, ids, n, lg, LZ_LOGITS_ALL) == 0, "prefill");
    const float *last = lg + (size_t)(n - 1) * V;
    for (int i = 0; i < steps; i++) {
        int b = 0;
        for (int v = 1; v < V; v++) if (last[v] > last[b]) b = v;
        gen[i] = b;
        float *out = lg + (size_t)(n + i) * V;
        CHECK(lz_llama_forward(m, s, &c, NULL, 0, &gen[i], 1, out, LZ_LOGITS_LAST) == 0, "decode");
        last = out;
    }
    lz_kv_cache_free(&c);
    lz_llama_scratch_free(s);
    return lg;
}

static void test_model_in_place(int ggml_type)
{
    const int mtype = ggml_type == LZ_GGML_BF16 ? LZ_MAT_BF16 : ggml_type == LZ_GGML_F16 ? LZ_MAT_F16 : LZ_MAT_Q8_0;
    const char *tn = lz_ggml_type_name((uint32_t)ggml_type);
    char dir[512], path[600], err[512];
    lz_llama *m = lz_test_model_typed(2, 4, 2, 16, 64, ggml_type, dir, sizeof dir, path, sizeof path), *w = NULL;
    if (!m) return;
    CHECK(m->tok_embd.type == mtype && m->layers[1].w_down.type == mtype, "%s: matrices in place", tn);
    CHECK(m->n_owned == 1, "%s: %d blocks allocated (the layer table only)", tn, m->n_owned);
    setenv("LAZY_F32_WEIGHTS", "1", 1);
    lz_env_reload(); /* the switches are read once (base/env.h) */
    CHECK(lz_llama_load(path, &w, err, sizeof err) == 0, "%s", err);
    unsetenv("LAZY_F32_WEIGHTS");
    lz_env_reload();
    if (!w) { lz_test_model_free(m, dir, path); return; }
    CHECK(w->tok_embd.type == LZ_MAT_F32 && w->layers[1].w_down.type == LZ_MAT_F32 && w->n_owned > 1,
          "%s: LAZY_F32_WEIGHTS widens at load", tn);
    CHECK(!memcmp(m->fingerprint, w->fingerprint, 32), "%s: fingerprint depends on the storage", tn);

    enum { N = 24, STEPS = 6 };
    int ids[N], gen_m[STEPS], gen_w[STEPS];
    for (int i = 0; i < N; i++) ids[i] = 3 + (i * 53 + 7) % (m->cfg.vocab - 3);
    float *lm = run(m, ids, N, STEPS, gen_m), *lw = run(w, ids, N, STEPS, gen_w);
    const size_t V = (size_t)m->cfg.vocab;
    const double ep = rel_err(lm, lw, N * V), ed = rel_err(lm + N * V, lw + N * V, STEPS * V);
    CHECK(ep <= 1e-6, "%s: prefill logits rel err %g", tn, ep);
    CHECK(ed <= 1e-6, "%s: decode logits rel err %g", tn, ed);
    CHECK(!memcmp(gen_m, gen_w, sizeof gen_m), "%s: greedy tokens differ", tn);
    printf("%s in place vs widened at load: prefill rel err %.2e, decode %.2e, greedy %s\n", tn, ep, ed,
           memcmp(gen_m, gen_w, sizeof gen_m) ? "DIFFER" : "equal");
    free(lm);
    free(lw);
    lz_llama_free(w);
    lz_test_model_free(m, dir, path);
}

/* lz_f32_to_bf16_n (vectorized) gives lz_f32_to_bf16's bits: every sign and
 * exponent with mantissas at and around the rounding ties, NaNs, infinities,
 * denormals, and 4M random patterns. */
static void test_bf16_bulk(void)
{
    const size_t n = ((size_t)1 << 22) + 2 * 256 * 64;
    float *x = malloc(n * sizeof(float));
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
    size_t k = 0;
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (uint32_t se = 0; se < 512; se++) /* sign and exponent */
        for (uint32_t j = 0; j < 64; j++) {
            const uint32_t man = j < 32 ? (0x7fffu + j - 16) : (0x8000u + (j - 32) * 0x1000u) | (j & 1);
            x[k++] = lz_bits_to_f32(se << 23 | (man & 0x7fffffu));
        }
    while (k < n) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        x[k++] = lz_bits_to_f32((uint32_t)r);
    }
    for (size_t i = 0; i < n; i++) a[i] = lz_f32_to_bf16(x[i]);
    lz_f32_to_bf16_n(b, x, n);
    size_t bad = 0, nan = 0;
    for (size_t i = 0; i < n; i++) {
        bad += a[i] != b[i];
        nan += (lz_f32_to_bits(x[i]) & 0x7fffffffu) > 0x7f800000u;
    }
    CHECK(bad == 0 && nan > 0, "bulk bf16 rounding == scalar on %zu values (%zu NaN): %zu differ", n, nan, bad);
    free(x), free(a), free(b);
}

int main(void)
{
    for (int simd = 1; simd >= 0; simd--) { /* the AVX2 dot products where the CPU has them, then the portable ones */
        lz_mat_set_simd(simd);
        test_widen_and_dot(LZ_MAT_BF16);
        test_widen_and_dot(LZ_MAT_F16);
        test_widen_and_dot(LZ_MAT_Q8_0);
    }
    lz_mat_set_simd(1);
    test_model_in_place(LZ_GGML_BF16);
    test_model_in_place(LZ_GGML_F16);
    test_model_in_place(LZ_GGML_Q8_0);
    test_bf16_bulk();
    return lz_test_done();
}

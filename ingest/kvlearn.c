/* kvlearn.c - learned key importance (see kvlearn.h): features, ridge fit by
 * normal equations and Cholesky (double), the checksummed model file, and
 * prediction.
 *
 * Legend: L layers, KV kv heads, d head_dim, F = 2d + 4 features, n keys.
 */
#include "ingest/kvlearn.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rope.h"
#include "base/sha256.h"

static const char MAGIC[8] = {'L', 'Z', 'K', 'V', 'L', 'R', 'N', '1'};

int lz_kvlearn_nfeat(int d) { return 2 * d + 4; }

void lz_kvlearn_unrotation(float *cs, int n, int s, int d, const float *inv_freq)
{
    for (int j = 0; j < n; j++) lz_rope_cos_sin(cs + (size_t)j * d, cs + (size_t)j * d + d / 2, d, -(int64_t)(s + j), inv_freq);
}

void lz_kvlearn_features(float *x, const float *k, const float *v, const float *cs, int d, int n, int layout)
{
    const int F = lz_kvlearn_nfeat(d);
    for (int j = 0; j < n; j++) {
        float *xj = x + (size_t)j * F;
        memcpy(xj, v + (size_t)j * d, (size_t)d * sizeof(float));
        memcpy(xj + d, k + (size_t)j * d, (size_t)d * sizeof(float));
        lz_rope_apply_cs(xj + d, d, layout, cs + (size_t)j * d, cs + (size_t)j * d + d / 2);
        xj[2 * d] = (float)j / (float)n;
        xj[2 * d + 1] = 1.0f / (float)(1 + j);
        xj[2 * d + 2] = j == 0 ? 1.0f : 0.0f;
        xj[2 * d + 3] = 1.0f;
    }
}

/* ---- fitting ---- */

struct lz_kvlearn_acc {
    int L, KV, d, F;
    uint32_t docs;
    double *xtx; /* (L, KV, F, F) */
    double *xty; /* (L, KV, F) */
};

lz_kvlearn_acc *lz_kvlearn_acc_new(int L, int KV, int d)
{
    lz_kvlearn_acc *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->L = L, a->KV = KV, a->d = d, a->F = lz_kvlearn_nfeat(d);
    a->xtx = calloc((size_t)L * KV * a->F * a->F, sizeof(double));
    a->xty = calloc((size_t)L * KV * a->F, sizeof(double));
    if (!a->xtx || !a->xty) { lz_kvlearn_acc_free(a); return NULL; }
    return a;
}

void lz_kvlearn_acc_free(lz_kvlearn_acc *a)
{
    if (!a) return;
    free(a->xtx);
    free(a->xty);
    free(a);
}

uint32_t lz_kvlearn_acc_docs(const lz_kvlearn_acc *a) { return a->docs; }

/* The features of every (layer, kv head) block of one document, handed to fn
 * block by block (x: (n, F)). Returns 0 or -1 (out of memory). */
typedef void (*block_fn)(void *ctx, int lg, const float *x, int n);
static int each_block(int L, int KV, int d, const float *k, const float *v, int T, int s, int n, int layout,
                      const float *inv_freq, block_fn fn, void *ctx)
{
    float *cs = malloc((size_t)n * d * sizeof(float)), *x = malloc((size_t)n * lz_kvlearn_nfeat(d) * sizeof(float));
    if (!cs || !x) { free(cs); free(x); return -1; }
    lz_kvlearn_unrotation(cs, n, s, d, inv_freq);
    for (int lg = 0; lg < L * KV; lg++) {
        lz_kvlearn_features(x, k + (size_t)lg * T * d, v + (size_t)lg * T * d, cs, d, n, layout);
        fn(ctx, lg, x, n);
    }
    free(cs);
    free(x);
    return 0;
}

typedef struct { lz_kvlearn_acc *a; const float *attn; } acc_ctx;

/* (x, log(attn + 1e-6)) of a block's keys into its normal equations */
static void acc_block(void *ctx, int lg, const float *x, int n)
{
    const acc_ctx *c = ctx;
    const int F = c->a->F;
    double *A = c->a->xtx + (size_t)lg * F * F, *b = c->a->xty + (size_t)lg * F;
    for (int j = 0; j < n; j++) {
        const float *xj = x + (size_t)j * F;
        const double y = log((double)c->attn[(size_t)lg * n + j] + 1e-6);
        for (int r = 0; r < F; r++) {
            const double xr = xj[r];
            b[r] += xr * y;
            for (int q = 0; q <= r; q++) A[(size_t)r * F + q] += xr * xj[q]; /* lower triangle */
        }
    }
}

int lz_kvlearn_acc_doc(lz_kvlearn_acc *a, const float *k, const float *v, int T, int s, int n, const float *attn,
                       int layout, const float *inv_freq)
{
    acc_ctx c = {a, attn};
    if (each_block(a->L, a->KV, a->d, k, v, T, s, n, layout, inv_freq, acc_block, &c)) return -1;
    a->docs++;
    return 0;
}

/* Solves (A + lambda I) w = b in place for symmetric A (lower triangle used).
 * Returns 0, or -1 when not positive definite. */
static int ridge_solve(double *A, double *b, int F, double ridge)
{
    double tr = 0;
    for (int i = 0; i < F; i++) tr += A[(size_t)i * F + i];
    const double lambda = ridge * (tr > 0 ? tr / F : 1.0);
    for (int i = 0; i < F; i++) A[(size_t)i * F + i] += lambda;
    for (int i = 0; i < F; i++) { /* Cholesky: A = G G^T, G in the lower triangle */
        for (int r = i; r < F; r++) {
            double x = A[(size_t)r * F + i];
            for (int c = 0; c < i; c++) x -= A[(size_t)r * F + c] * A[(size_t)i * F + c];
            if (r == i) {
                if (!(x > 0)) return -1;
                A[(size_t)i * F + i] = sqrt(x);
            } else {
                A[(size_t)r * F + i] = x / A[(size_t)i * F + i];
            }
        }
    }
    for (int i = 0; i < F; i++) { /* G y = b */
        for (int c = 0; c < i; c++) b[i] -= A[(size_t)i * F + c] * b[c];
        b[i] /= A[(size_t)i * F + i];
    }
    for (int i = F - 1; i >= 0; i--) { /* G^T w = y */
        for (int r = i + 1; r < F; r++) b[i] -= A[(size_t)r * F + i] * b[r];
        b[i] /= A[(size_t)i * F + i];
    }
    return 0;
}

int lz_kvlearn_fit(const lz_kvlearn_acc *a, double ridge, lz_kvlearn *out)
{
    memset(out, 0, sizeof *out);
    if (!a->docs) return -1;
    const int F = a->F, H = a->L * a->KV;
    double *A = malloc((size_t)F * F * sizeof(double)), *b = malloc((size_t)F * sizeof(double));
    out->w = malloc((size_t)H * F * sizeof(float));
    if (!A || !b || !out->w) { free(A); free(b); free(out->w); out->w = NULL; return -1; }
    out->L = a->L, out->KV = a->KV, out->d = a->d, out->F = F, out->n_docs = a->docs;
    int rc = 0;
    for (int lg = 0; lg < H && !rc; lg++) {
        memcpy(A, a->xtx + (size_t)lg * F * F, (size_t)F * F * sizeof(double));
        memcpy(b, a->xty + (size_t)lg * F, (size_t)F * sizeof(double));
        rc = ridge_solve(A, b, F, ridge);
        for (int i = 0; i < F; i++) out->w[(size_t)lg * F + i] = (float)b[i];
    }
    free(A);
    free(b);
    if (rc) { free(out->w); out->w = NULL; }
    return rc;
}

/* ---- file ---- */

static void put_u32(uint8_t *p, uint32_t x)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(x >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

enum { HEADER = 8 + 5 * 4 + 32 };

int lz_kvlearn_save(lz_kvlearn *m, const char *path, char *err, size_t errlen)
{
    const size_t nw = (size_t)m->L * m->KV * m->F, len = HEADER + nw * 4 + 32;
    uint8_t *buf = malloc(len);
    if (!buf) { snprintf(err, errlen, "%s: out of memory", path); return -1; }
    memcpy(buf, MAGIC, 8);
    uint32_t hdr[5] = {(uint32_t)m->L, (uint32_t)m->KV, (uint32_t)m->d, (uint32_t)m->F, m->n_docs};
    for (int i = 0; i < 5; i++) put_u32(buf + 8 + 4 * i, hdr[i]);
    memcpy(buf + 28, m->fingerprint, 32);
    for (size_t i = 0; i < nw; i++) {
        uint32_t u;
        memcpy(&u, &m->w[i], 4);
        put_u32(buf + HEADER + 4 * i, u);
    }
    lz_sha256(buf, len - 32, buf + len - 32);
    m->hash = get_u32(buf + len - 32) ? get_u32(buf + len - 32) : 1;
    /* written to a temporary name, then renamed: a crash never leaves half a file */
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(buf, 1, len, f) == len;
    ok = f && fclose(f) == 0 && ok;
    free(buf);
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}

int lz_kvlearn_load(const char *path, lz_kvlearn *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: %s", path, strerror(errno)); return -1; }
    uint8_t head[HEADER];
    if (fread(head, 1, HEADER, f) != HEADER || memcmp(head, MAGIC, 8)) {
        fclose(f);
        snprintf(err, errlen, "%s: not a key-importance model file (no LZKVLRN1 header)", path);
        return -1;
    }
    uint32_t L = get_u32(head + 8), KV = get_u32(head + 12), d = get_u32(head + 16), F = get_u32(head + 20);
    if (L < 1 || L > 1024 || KV < 1 || KV > 1024 || d < 2 || d > 1024 || d % 2 || F != (uint32_t)lz_kvlearn_nfeat((int)d)) {
        fclose(f);
        snprintf(err, errlen, "%s: bad sizes (L %u, KV %u, d %u, F %u)", path, L, KV, d, F);
        return -1;
    }
    const size_t nw = (size_t)L * KV * F, len = HEADER + nw * 4 + 32;
    uint8_t *buf = malloc(len + 1);
    if (!buf) { fclose(f); snprintf(err, errlen, "%s: out of memory", path); return -1; }
    memcpy(buf, head, HEADER);
    size_t got = HEADER + fread(buf + HEADER, 1, len + 1 - HEADER, f);
    fclose(f);
    uint8_t sum[32];
    if (got != len) {
        snprintf(err, errlen, "%s: %s (%zu bytes, expected %zu)", path, got < len ? "truncated" : "trailing bytes", got,
                 len);
        free(buf);
        return -1;
    }
    lz_sha256(buf, len - 32, sum);
    if (memcmp(sum, buf + len - 32, 32)) {
        snprintf(err, errlen, "%s: checksum mismatch (the file is corrupted)", path);
        free(buf);
        return -1;
    }
    m->w = malloc(nw * sizeof(float));
    if (!m->w) { free(buf); snprintf(err, errlen, "%s: out of memory", path); return -1; }
    for (size_t i = 0; i < nw; i++) {
        uint32_t u = get_u32(buf + HEADER + 4 * i);
        memcpy(&m->w[i], &u, 4);
        if (!isfinite(m->w[i])) {
            snprintf(err, errlen, "%s: weight %zu is not finite", path, i);
            free(buf);
            lz_kvlearn_free(m);
            return -1;
        }
    }
    m->L = (int)L, m->KV = (int)KV, m->d = (int)d, m->F = (int)F, m->n_docs = get_u32(head + 24);
    memcpy(m->fingerprint, head + 28, 32);
    m->hash = get_u32(buf + len - 32) ? get_u32(buf + len - 32) : 1;
    free(buf);
    return 0;
}

void lz_kvlearn_free(lz_kvlearn *m)
{
    free(m->w);
    m->w = NULL;
}

/* ---- scoring ---- */

typedef struct { const lz_kvlearn *m; float *out; } predict_ctx;

/* out = exp(w . x) of a block's keys */
static void predict_block(void *ctx, int lg, const float *x, int n)
{
    const predict_ctx *c = ctx;
    const int F = c->m->F;
    const float *w = c->m->w + (size_t)lg * F;
    for (int j = 0; j < n; j++) {
        const float *xj = x + (size_t)j * F;
        float y = 0;
        for (int i = 0; i < F; i++) y += w[i] * xj[i];
        c->out[(size_t)lg * n + j] = expf(fminf(y, 80.0f));
    }
}

int lz_kvlearn_predict(const lz_kvlearn *m, const float *k, const float *v, int T, int s, int n, int layout,
                       const float *inv_freq, float *out)
{
    predict_ctx c = {m, out};
    return each_block(m->L, m->KV, m->d, k, v, T, s, n, layout, inv_freq, predict_block, &c);
}

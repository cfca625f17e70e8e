/* pass_ref.c - the CPU reference of a multi-document backend (pass_ref.h):
 * a pass's documents computed at start, one after the other, by the CPU
 * engine's document table (engine/cpu_encode.h) into the pending half of
 * two sets of caches; finish swaps the halves, so that the finished pass
 * stays fetchable while the next one is computed. */
#include "ingest/pass_ref.h"

#include "engine/cpu_encode.h"
#include "ingest/kvpolicy.h"
#include "base/fp8.h"
#include "base/half.h"
#include "store/payload.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    lz_kv_cache kv;
    float *q;      /* (L, cw, H, d) window queries */
    size_t cap_q;  /* floats */
    int c0, cw;
    uint8_t *planes; /* fetch_planes: (2, L, KV, n, d) of a dtype, then fp8's (2, L, KV) scales */
    size_t cap_p;
} ref_doc;

struct lz_pass_ref {
    const lz_llama *m;
    lz_kv_segment prefix;
    lz_engine_cpu_encode *cpu; /* the forward passes */
    lz_encode_backend cpu_b;
    ref_doc *docs[2]; /* [0] finished (fetchable), [1] pending */
    int n[2], cap[2];
    int max_tokens, pass_tokens;
    long started, fail_at; /* passes started; the one to fail (-1: none) */
    pthread_mutex_t one; /* encode (a pass of one) is called from several threads: one at a time */
};

lz_pass_ref *lz_pass_ref_new(const lz_llama *m, const lz_kv_cache *pc)
{
    lz_pass_ref *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->m = m;
    r->fail_at = -1;
    pthread_mutex_init(&r->one, NULL);
    r->prefix = (lz_kv_segment){.k = pc->k, .v = pc->v, .n = pc->n, .stride = pc->cap};
    if (!(r->cpu = lz_engine_cpu_encode_new(m))) {
        free(r);
        return NULL;
    }
    lz_engine_cpu_encode_set_prefix(r->cpu, pc);
    r->cpu_b = lz_engine_cpu_encode_table(r->cpu, 0);
    return r;
}

void lz_pass_ref_free(lz_pass_ref *r)
{
    if (!r) return;
    for (int h = 0; h < 2; h++) {
        for (int i = 0; i < r->cap[h]; i++) {
            lz_kv_cache_free(&r->docs[h][i].kv);
            free(r->docs[h][i].q);
            free(r->docs[h][i].planes);
        }
        free(r->docs[h]);
    }
    lz_engine_cpu_encode_free(r->cpu);
    pthread_mutex_destroy(&r->one);
    free(r);
}

/* Runs ids[0..n) after the prefix into pending slot i, capturing rows c0..c0+cw-1; 0 or -1. */
static int run_one(lz_pass_ref *r, int i, const int *ids, int n, int c0, int cw, char *err, size_t errlen)
{
    const lz_llama_config *c = &r->m->cfg;
    ref_doc *x = &r->docs[1][i];
    if (x->kv.cap < n) {
        lz_kv_cache_free(&x->kv);
        if (lz_kv_cache_init(&x->kv, c, n)) return snprintf(err, errlen, "out of memory"), -1;
    }
    const size_t qn = (size_t)c->n_layers * cw * c->n_heads * c->head_dim;
    if (qn > x->cap_q) {
        float *q = realloc(x->q, qn * sizeof *q);
        if (!q) return snprintf(err, errlen, "out of memory"), -1;
        x->q = q;
        x->cap_q = qn;
    }
    x->c0 = c0;
    x->cw = cw;
    return r->cpu_b.encode(r->cpu_b.ctx, ids, n, &x->kv, x->q, c0, cw, err, errlen);
}

static int ref_start(void *ctx, const int *const *ids, const int *n, const int *c0, const int *cw, int n_docs, char *err,
                     size_t errlen)
{
    lz_pass_ref *r = ctx;
    r->n[1] = 0;
    /* the half this pass overwrites held the pass before the fetchable one: its planes are
     * poisoned at once, as the GPU's read-back overwrites its buffer, so that an encoder still
     * reading them (instead of its copy) packs garbage and the tests see it */
    for (int i = 0; i < r->cap[1]; i++)
        if (r->docs[1][i].planes) memset(r->docs[1][i].planes, 0xa5, r->docs[1][i].cap_p);
    if (r->started++ == r->fail_at) return snprintf(err, errlen, "pass %ld failed (injected)", r->fail_at), -1;
    int rows = 0;
    for (int i = 0; i < n_docs; i++) {
        rows += n[i];
        const int w = cw && cw[i] > 0 ? cw[i] : 0;
        /* a pass holds as many rows as the longest document (as the GPU's: encode is a pass of one) */
        const int room = r->pass_tokens > r->max_tokens ? r->pass_tokens : r->max_tokens;
        if (n[i] <= 0 || n[i] > r->max_tokens || rows > room || (w && (c0[i] < 0 || c0[i] + w > n[i])))
            return snprintf(err, errlen, "document %d of %d tokens (window %d..%d) in a pass of %d tokens", i, n[i],
                            w ? c0[i] : 0, w ? c0[i] + w : 0, room),
                   -1;
    }
    if (n_docs > r->cap[1]) {
        ref_doc *d = realloc(r->docs[1], (size_t)n_docs * sizeof *d);
        if (!d) return snprintf(err, errlen, "out of memory"), -1;
        memset(d + r->cap[1], 0, (size_t)(n_docs - r->cap[1]) * sizeof *d);
        r->docs[1] = d;
        r->cap[1] = n_docs;
    }
    for (int i = 0; i < n_docs; i++)
        if (run_one(r, i, ids[i], n[i], c0 ? c0[i] : 0, cw && cw[i] > 0 ? cw[i] : 0, err, errlen)) return -1;
    r->n[1] = n_docs;
    return 0;
}

static int ref_finish(void *ctx, char *err, size_t errlen)
{
    lz_pass_ref *r = ctx;
    if (!r->n[1]) return snprintf(err, errlen, "no pass started"), -1;
    ref_doc *d = r->docs[0];
    const int cap = r->cap[0];
    r->docs[0] = r->docs[1], r->cap[0] = r->cap[1], r->n[0] = r->n[1];
    r->docs[1] = d, r->cap[1] = cap, r->n[1] = 0;
    return 0;
}

static int ref_fetch(void *ctx, int i, lz_kv_cache *out, float *qwin, char *err, size_t errlen)
{
    const lz_pass_ref *r = ctx;
    if (i < 0 || i >= r->n[0]) return snprintf(err, errlen, "document %d of a pass of %d", i, r->n[0]), -1;
    const ref_doc *x = &r->docs[0][i];
    const lz_llama_config *c = &r->m->cfg;
    const int n = x->kv.n, d = c->head_dim;
    if (n > out->cap) return snprintf(err, errlen, "a document of %d tokens into a cache of %d", n, out->cap), -1;
    for (int lh = 0; lh < c->n_layers * c->n_kv_heads; lh++) {
        memcpy(out->k + (size_t)lh * out->cap * d, x->kv.k + (size_t)lh * x->kv.cap * d, (size_t)n * d * sizeof(float));
        memcpy(out->v + (size_t)lh * out->cap * d, x->kv.v + (size_t)lh * x->kv.cap * d, (size_t)n * d * sizeof(float));
    }
    if (x->cw && qwin) memcpy(qwin, x->q, (size_t)c->n_layers * x->cw * c->n_heads * d * sizeof(float));
    out->n = n;
    out->pos0 = x->kv.pos0;
    return 0;
}

/* Document i as planes of dtype, made from its fp32 caches by the payload encoder's rules
 * (bf16: nearest even; fp8: a scale a (part, layer, kv head), its absolute maximum over 448),
 * as the GPU hands its own bf16 or fp8 bytes: the payloads equal fetch's. */
static int ref_fetch_planes(void *ctx, int i, int n, int dtype, const void **k, const void **v, const float **ks,
                            const float **vs, char *err, size_t errlen)
{
    lz_pass_ref *r = ctx;
    if (i < 0 || i >= r->n[0]) return snprintf(err, errlen, "document %d of a pass of %d", i, r->n[0]), -1;
    ref_doc *x = &r->docs[0][i];
    if (x->kv.n != n) return snprintf(err, errlen, "document %d has %d rows, not %d", i, x->kv.n, n), -1;
    const lz_llama_config *c = &r->m->cfg;
    const size_t nh = (size_t)c->n_layers * c->n_kv_heads, row = (size_t)x->kv.n * c->head_dim;
    const size_t es = dtype == LZ_PAYLOAD_DTYPE_F32 ? 4 : dtype == LZ_PAYLOAD_DTYPE_BF16 ? 2 : dtype == LZ_PAYLOAD_DTYPE_FP8 ? 1 : 0;
    if (!es) return 0;
    const size_t part = nh * row * es, need = 2 * part + 2 * nh * sizeof(float);
    if (need > x->cap_p) {
        uint8_t *p = realloc(x->planes, need);
        if (!p) return snprintf(err, errlen, "out of memory"), -1;
        x->planes = p, x->cap_p = need;
    }
    float *sc = (float *)(void *)(x->planes + 2 * part);
    for (size_t j = 0; j < 2 * nh; j++) {
        const float *src = (j < nh ? x->kv.k : x->kv.v) + (j % nh) * (size_t)x->kv.cap * c->head_dim;
        uint8_t *dst = x->planes + (j < nh ? 0 : part) + (j % nh) * row * es;
        if (es == 4) {
            memcpy(dst, src, row * 4);
        } else if (es == 2) {
            for (size_t e = 0; e < row; e++) ((uint16_t *)(void *)dst)[e] = lz_f32_to_bf16(src[e]);
        } else {
            float amax = 0;
            for (size_t e = 0; e < row; e++) {
                if (!isfinite(src[e]))
                    return snprintf(err, errlen, "a NaN or Inf in %s of layer %zu, kv head %zu", j < nh ? "K" : "V",
                                    (j % nh) / c->n_kv_heads, (j % nh) % c->n_kv_heads),
                           -1;
                amax = fmaxf(amax, fabsf(src[e]));
            }
            sc[j] = amax > 0 ? amax / LZ_E4M3_MAX : 1.0f;
            lz_f32_to_e4m3_n(dst, src, row, 1.0f / sc[j]);
        }
    }
    *k = x->planes, *v = x->planes + part;
    *ks = es == 1 ? sc : NULL, *vs = es == 1 ? sc + nh : NULL;
    return 1;
}

/* The masses as the encoder would make them (lz_kvpolicy_mass on the same
 * caches and window), for a window of the document's last rows. */
static int ref_fetch_mass(void *ctx, int i, float *mass)
{
    const lz_pass_ref *r = ctx;
    if (i < 0 || i >= r->n[0]) return 0;
    const ref_doc *x = &r->docs[0][i];
    const int n = x->kv.n;
    if (!x->cw || x->c0 + x->cw != n) return 0;
    const lz_llama_config *c = &r->m->cfg;
    const lz_kvscore_params sp = {.q = x->q, .k = x->kv.k, .k_stride = x->kv.cap, .pk = r->prefix.k,
                                  .pk_stride = r->prefix.stride, .n_prefix = r->prefix.n, .n = n, .w = x->cw,
                                  .m = x->cw == n ? n : 0, .L = c->n_layers, .H = c->n_heads, .KV = c->n_kv_heads,
                                  .d = c->head_dim, .kernel = 1};
    return lz_kvpolicy_mass(&sp, mass) ? 0 : 1;
}

static int ref_encode(void *ctx, const int *ids, int n, lz_kv_cache *out, float *qwin, int c0, int cw, char *err,
                      size_t errlen)
{
    lz_pass_ref *r = ctx;
    pthread_mutex_lock(&r->one);
    const int rc = ref_start(ctx, &ids, &n, &c0, &cw, 1, err, errlen) || ref_finish(ctx, err, errlen) ||
                   ref_fetch(ctx, 0, out, qwin, err, errlen);
    pthread_mutex_unlock(&r->one);
    return rc ? -1 : 0;
}

void lz_pass_ref_fail_at(lz_pass_ref *r, long k) { r->fail_at = k; }

lz_encode_backend lz_pass_ref_backend(lz_pass_ref *r, int max_tokens, int pass_tokens)
{
    r->max_tokens = max_tokens;
    r->pass_tokens = pass_tokens;
    return (lz_encode_backend){.ctx = r, .encode = ref_encode, .max_tokens = max_tokens, .start = ref_start,
                               .finish = ref_finish, .fetch = ref_fetch, .fetch_mass = ref_fetch_mass,
                               .pass_tokens = pass_tokens, .fetch_planes = ref_fetch_planes};
}

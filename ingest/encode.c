/* encode.c - prefix once, then documents standalone after it (the prefix's
 * KV is an external segment with rotation 0, so document tokens see it as
 * the attention sink they will see at query time). Every forward pass goes
 * through a document table: the backend's when it takes the document, else
 * the encoder's own CPU engine's (engine/cpu_encode.h); what stays here is
 * the KV policy's scoring and the payload. */
#include "ingest/encode.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

struct lz_encoder {
    const lz_llama *m;
    lz_engine_cpu_encode *cpu; /* the CPU engine's table: whatever the backend does not take */
    lz_encode_backend cpu_b;
    lz_kv_cache prefix; /* (L, KV, s, d) keys rotated at 0..s-1 */
    lz_kv_cache doc;    /* (L, KV, T, d) keys rotated at s..s+n-1 */
    lz_kv_segment seg;
    int dtype;          /* payload element type (LZ_PAYLOAD_DTYPE_*, 0 = bf16) */
    lz_kvpolicy policy; /* KV eviction (kind NONE: store everything) */
    int compressed;     /* the last document was compressed: kept holds its counts */
    int *kept;          /* (L, KV) */
    float *qwin;        /* (L, w, H, d) captured window queries */
    float *scores, *raw;/* (L, KV, m) */
    int *rows;          /* (L, KV, n) kept token indices */
    size_t cap_q, cap_s, cap_r, cap_raw;
    double t_policy;
    int *probe;         /* (n_probe) tokens run after a document to score it (policy.probe) */
    int n_probe;
    const lz_kvlearn *scorer; /* policy.probe LEARNED: the key-importance model (not owned) */
    lz_kvlearn_acc *learn;    /* reconstruction runs add their scores here (not owned) */
    float *attn;              /* (L, KV, n) predicted or attention-only scores */
    size_t cap_a;
    float *mass;              /* (L, KV, G, m) the backend's attention masses of the last document */
    size_t cap_m;
    int have_mass;            /* ... made by it: the scoring only finishes them */
    long mass_docs;           /* documents scored from the backend's masses */
    const lz_encode_backend *backend; /* documents on an accelerator (not owned), or NULL */
    long backend_docs;
    /* the last document as the backend's planes of e->dtype (fetch_planes), copied out of the
     * backend's buffers at the fetch (the next pass's read-back may overwrite those while this
     * document is packed) and packed as they are: K, V, then fp8's K and V scales */
    int planes;
    uint8_t *pbuf;
    size_t cap_p;
    long plane_docs;
};

static int grow(void **p, size_t *cap, size_t need)
{
    if (*cap >= need) return 0;
    void *q = realloc(*p, need);
    if (!q) return -1;
    *p = q;
    *cap = need;
    return 0;
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

int lz_encoder_new(const lz_llama *m, const int *prefix, int n_prefix, lz_encoder **out, char *err,
                   size_t errlen)
{
    return lz_encoder_new_on(m, prefix, n_prefix, NULL, out, err, errlen);
}

int lz_encoder_new_on(const lz_llama *m, const int *prefix, int n_prefix, const lz_encode_backend *b,
                      lz_encoder **out, char *err, size_t errlen)
{
    *out = NULL;
    lz_encoder *e = calloc(1, sizeof *e);
    if (!e) return fail(err, errlen, "out of memory");
    e->m = m;
    lz_kvpolicy_default(&e->policy);
    e->kept = malloc((size_t)m->cfg.n_layers * m->cfg.n_kv_heads * sizeof(int));
    if (!e->kept) { free(e); return fail(err, errlen, "out of memory"); }
    e->cpu = lz_engine_cpu_encode_new(m);
    if (!e->cpu || lz_kv_cache_init(&e->prefix, &m->cfg, n_prefix > 0 ? n_prefix : 1) != 0) {
        lz_encoder_free(e);
        return fail(err, errlen, "out of memory (encoder scratch for %d tokens)", LZ_ENCODE_CHUNK);
    }
    e->cpu_b = lz_engine_cpu_encode_table(e->cpu, 0);
    lz_kv_cache_reset(&e->prefix, 0);
    /* the prefix is a document of its own at 0..n_prefix-1 (no prefix set on either table yet) */
    const int on_b = b && n_prefix > 0 && n_prefix <= b->max_tokens;
    const lz_encode_backend *t = on_b ? b : &e->cpu_b;
    char berr[256] = "";
    if (n_prefix > 0 && t->encode(t->ctx, prefix, n_prefix, &e->prefix, NULL, 0, 0, berr, sizeof berr)) {
        lz_encoder_free(e);
        if (on_b)
            return fail(err, errlen, "accelerated forward pass over the %d-token prompt prefix failed: %s", n_prefix,
                        berr);
        return fail(err, errlen, "forward pass over the %d-token prompt prefix failed", n_prefix);
    }
    lz_engine_cpu_encode_set_prefix(e->cpu, &e->prefix);
    e->seg = (lz_kv_segment){.k = e->prefix.k, .v = e->prefix.v, .n = n_prefix, .stride = e->prefix.cap};
    *out = e;
    return 0;
}

int lz_encoder_new_like(const lz_encoder *src, lz_encoder **out, char *err, size_t errlen)
{
    *out = NULL;
    const lz_llama_config *c = &src->m->cfg;
    const int s = src->prefix.n;
    lz_encoder *e;
    if (lz_encoder_new_on(src->m, NULL, 0, NULL, &e, err, errlen)) return -1;
    lz_kv_cache_free(&e->prefix);
    if (lz_kv_cache_init(&e->prefix, c, s > 0 ? s : 1) != 0) {
        lz_encoder_free(e);
        return fail(err, errlen, "out of memory (a %d-token prefix)", s);
    }
    const size_t d = (size_t)c->head_dim;
    for (size_t lh = 0; lh < (size_t)c->n_layers * c->n_kv_heads; lh++) { /* (L, KV, cap, d): caps may differ */
        memcpy(e->prefix.k + lh * e->prefix.cap * d, src->prefix.k + lh * src->prefix.cap * d, (size_t)s * d * sizeof(float));
        memcpy(e->prefix.v + lh * e->prefix.cap * d, src->prefix.v + lh * src->prefix.cap * d, (size_t)s * d * sizeof(float));
    }
    e->prefix.n = s;
    e->prefix.pos0 = src->prefix.pos0;
    lz_engine_cpu_encode_set_prefix(e->cpu, &e->prefix);
    e->seg = (lz_kv_segment){.k = e->prefix.k, .v = e->prefix.v, .n = s, .stride = e->prefix.cap};
    *out = e;
    return 0;
}

void lz_encoder_free(lz_encoder *e)
{
    if (!e) return;
    lz_engine_cpu_encode_free(e->cpu);
    lz_kv_cache_free(&e->prefix);
    lz_kv_cache_free(&e->doc);
    free(e->kept);
    free(e->qwin);
    free(e->pbuf);
    free(e->scores);
    free(e->raw);
    free(e->rows);
    free(e->probe);
    free(e->attn);
    free(e->mass);
    free(e);
}

void lz_encoder_set_scorer(lz_encoder *e, const lz_kvlearn *m) { e->scorer = m; }
void lz_encoder_set_learn(lz_encoder *e, lz_kvlearn_acc *a) { e->learn = a; }

int lz_encoder_set_probe(lz_encoder *e, const int *ids, int n)
{
    free(e->probe);
    e->probe = NULL;
    e->n_probe = 0;
    if (n <= 0) return 0;
    if (!(e->probe = malloc((size_t)n * sizeof(int)))) return -1;
    memcpy(e->probe, ids, (size_t)n * sizeof(int));
    e->n_probe = n;
    return 0;
}

void lz_encoder_set_kvpolicy(lz_encoder *e, const lz_kvpolicy *p)
{
    if (p) e->policy = *p;
    else lz_kvpolicy_default(&e->policy);
}

const int *lz_encoder_kept(const lz_encoder *e) { return e->compressed ? e->kept : NULL; }
double lz_encoder_policy_seconds(const lz_encoder *e) { return e->t_policy; }

/* Scores the window of w rows, plans, compacts the document's rows in place.
 * With a probe, the cache holds n + w rows (the probe's last) and m = n; with
 * the self window, w = m = n (the document's own rows). */
static int compress_doc(lz_encoder *e, int n, int w, char *err, size_t errlen)
{
    const lz_llama_config *c = &e->m->cfg;
    const int probe = e->policy.probe, L = c->n_layers, KV = c->n_kv_heads;
    const int m = probe ? n : n - w, self = probe == LZ_KVPOLICY_PROBE_SELF;
    const int learned = probe == LZ_KVPOLICY_PROBE_LEARNED;
    if (grow((void **)&e->scores, &e->cap_s, (size_t)L * KV * m * sizeof(float)) ||
        grow((void **)&e->raw, &e->cap_raw, (size_t)L * KV * m * sizeof(float)) ||
        grow((void **)&e->attn, &e->cap_a, (size_t)L * KV * m * sizeof(float)) ||
        grow((void **)&e->rows, &e->cap_r, (size_t)L * KV * n * sizeof(int)))
        return fail(err, errlen, "out of memory (KV eviction scores for %d tokens)", n);
    lz_kvscore_params sp = {.q = e->qwin, .k = e->doc.k, .k_stride = e->doc.cap, .pk = e->prefix.k,
                            .pk_stride = e->prefix.cap, .n_prefix = e->seg.n, .n = self ? n : m + w, .w = w, .m = m, .L = L,
                            .H = c->n_heads, .KV = KV, .d = c->head_dim, .agg = e->policy.agg,
                            .kernel = e->policy.kernel, .v = e->policy.value_norm ? e->doc.v : NULL, .v_power = e->policy.value_power,
                            .v_stride = e->doc.cap};
    if (e->learn && probe == LZ_KVPOLICY_PROBE_RECONSTRUCT) { /* calibration: attention-only targets */
        lz_kvscore_params sa = sp;
        sa.v = NULL;
        if (lz_kvpolicy_score(&sa, e->attn, NULL) ||
            lz_kvlearn_acc_doc(e->learn, e->doc.k, e->doc.v, e->doc.cap, e->seg.n, n, e->attn, c->rope_layout,
                               e->m->inv_freq))
            return fail(err, errlen, "out of memory (key-importance fit, %d tokens)", n);
    }
    double t = lz_now_s();
    /* learned: the key-importance model's masses, then value weights and pooling as any score */
    const int rc = learned ? lz_kvlearn_predict(e->scorer, e->doc.k, e->doc.v, e->doc.cap, e->seg.n, n,
                                                c->rope_layout, e->m->inv_freq, e->attn) ||
                                 lz_kvpolicy_weigh(&sp, e->attn, e->scores, e->raw)
                   : e->have_mass ? lz_kvpolicy_finish(&sp, e->mass, e->scores, e->raw) /* the backend's masses */
                                  : lz_kvpolicy_score(&sp, e->scores, e->raw);
    if (rc || lz_kvpolicy_plan(&e->policy, e->scores, e->raw, L, KV, n, e->kept, e->rows))
        return fail(err, errlen, "KV eviction scoring failed for %d tokens (out of memory)", n);
    lz_kvpolicy_compact(e->doc.k, e->doc.v, e->doc.cap, L, KV, c->head_dim, n, e->kept, e->rows);
    e->compressed = 1;
    e->t_policy += lz_now_s() - t;
    return 0;
}

/* What lz_encoder_run does with a document of n tokens. */
typedef struct {
    int self, learned; /* the policy's window: the document's own queries; a learned scorer (no window) */
    int evict, probe;  /* KV eviction applies; a probe (pids) runs after the document */
    const int *pids;
    int n_pids, w;     /* probe tokens; window rows */
    int backend, c0, cw; /* the forward pass on the backend (else the CPU table), capturing rows c0..c0+cw-1 */
} run_plan;

/* The probe: the cue set by lz_encoder_set_probe, or the document itself
 * again (ids); the self window runs none (the document's own queries are the
 * window). The backend takes documents no probe follows unless it runs
 * probes (encode_probe); the window is the document's last w rows, or all
 * (self), or the probe's. */
static void plan_run(const lz_encoder *e, const int *ids, int n, run_plan *r)
{
    const int recon = e->policy.probe == LZ_KVPOLICY_PROBE_RECONSTRUCT;
    r->self = e->policy.probe == LZ_KVPOLICY_PROBE_SELF;
    r->learned = e->policy.probe == LZ_KVPOLICY_PROBE_LEARNED;
    r->pids = recon ? ids : e->probe;
    r->n_pids = recon ? n : e->n_probe;
    r->evict = lz_kvpolicy_budget(&e->policy, n) > 0;
    r->probe = !r->self && !r->learned && e->policy.probe && r->n_pids > 0 && r->evict;
    r->w = r->self ? n : r->probe ? r->n_pids : e->policy.window;
    const lz_encode_backend *b = e->backend;
    r->backend = b && n > 0 && n <= b->max_tokens && (!r->probe || b->encode_probe);
    r->cw = r->evict && !r->learned ? r->w : 0;
    r->c0 = r->self ? 0 : n - r->w;
}

int lz_encoder_backend_plan(const lz_encoder *e, int n, int *c0, int *cw)
{
    run_plan r;
    plan_run(e, NULL, n, &r);
    *c0 = r.c0;
    *cw = r.cw;
    return r.backend && !r.probe; /* a pass runs no probe (encode_probe is one document's) */
}

/* lz_encoder_run; fetched >= 0: the backend's forward pass already ran (document fetched of its last pass). */
static int run_doc(lz_encoder *e, const int *ids, int n, int fetched, char *err, size_t errlen)
{
    run_plan r;
    plan_run(e, ids, n, &r);
    if (!r.self && !r.learned && e->policy.probe && !r.n_pids && r.evict)
        return fail(err, errlen, "KV eviction with a probe window but no probe tokens set");
    const lz_kvlearn *sc = e->scorer;
    if (r.learned && r.evict &&
        (!sc || sc->L != e->m->cfg.n_layers || sc->KV != e->m->cfg.n_kv_heads || sc->d != e->m->cfg.head_dim))
        return fail(err, errlen, "KV eviction with a learned scorer but %s", sc ? "its shape is not the model's" : "none set");
    if (fetched >= 0 && (!r.backend || r.probe || !e->backend->fetch))
        return fail(err, errlen, "a document of %d tokens fetched from a backend that did not run it", n);
    const int need = n + (r.probe ? r.n_pids : 0);
    if (need > e->doc.cap) {
        int cap = e->doc.cap ? e->doc.cap : 256;
        while (cap < need) cap *= 2;
        lz_kv_cache_free(&e->doc);
        if (lz_kv_cache_init(&e->doc, &e->m->cfg, cap) != 0)
            return fail(err, errlen, "out of memory (KV cache for %d tokens)", cap);
    }
    lz_kv_cache_reset(&e->doc, e->seg.n);
    e->compressed = 0;
    e->have_mass = 0;
    e->planes = 0;
    int V = e->m->cfg.vocab;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V) return fail(err, errlen, "token id %d at %d outside the vocabulary (%d)", ids[i], i, V);
    const lz_llama_config *c = &e->m->cfg;
    const int w = r.w;
    if (r.evict && !r.learned && /* the window's queries: rows n - w .. n - 1 (probe: its own; self: all) */
        grow((void **)&e->qwin, &e->cap_q, (size_t)c->n_layers * w * c->n_heads * c->head_dim * sizeof(float)))
        return fail(err, errlen, "out of memory (window queries)");
    const lz_encode_backend *b = r.backend ? e->backend : &e->cpu_b; /* the table that runs the document */
    char berr[256] = "";
    if (r.backend) {
        const int dtype = e->dtype ? e->dtype : LZ_PAYLOAD_DTYPE_BF16;
        if (fetched >= 0 && !r.evict && !r.probe && b->fetch_planes) { /* stored whole: the backend's own bytes */
            const void *pk, *pv;
            const float *pks, *pvs;
            const int prc = b->fetch_planes(b->ctx, fetched, n, dtype, &pk, &pv, &pks, &pvs, berr, sizeof berr);
            if (prc < 0) return fail(err, errlen, "accelerated forward pass over %d tokens: %s", n, berr);
            if (prc == 1) {
                const size_t es = dtype == LZ_PAYLOAD_DTYPE_F32 ? 4 : dtype == LZ_PAYLOAD_DTYPE_FP8 ? 1 : 2;
                const size_t nh = (size_t)c->n_layers * c->n_kv_heads, part = nh * n * c->head_dim * es;
                const size_t sc = es == 1 ? nh * sizeof(float) : 0;
                if (grow((void **)&e->pbuf, &e->cap_p, 2 * part + 2 * sc)) return fail(err, errlen, "out of memory");
                if (sc) memcpy(e->pbuf, pks, sc), memcpy(e->pbuf + sc, pvs, sc); /* scales first: aligned */
                memcpy(e->pbuf + 2 * sc, pk, part);
                memcpy(e->pbuf + 2 * sc + part, pv, part);
                e->planes = 1;
                e->doc.n = n;
                e->backend_docs++;
                e->plane_docs++;
                return 0;
            }
        }
    }
    const int rows = n + (r.probe ? r.n_pids : 0); /* the probe's rows are scored, never stored */
    int frc = fetched >= 0 ? b->fetch(b->ctx, fetched, &e->doc, e->qwin, berr, sizeof berr)
              : r.probe    ? b->encode_probe(b->ctx, ids, n, r.pids, r.n_pids, &e->doc, e->qwin, berr, sizeof berr)
                           : b->encode(b->ctx, ids, n, &e->doc, e->qwin, r.c0, r.cw, berr, sizeof berr);
    if (!frc && e->doc.n != rows) snprintf(berr, sizeof berr, "%d rows returned", e->doc.n), frc = -1;
    if (!frc && fetched >= 0 && r.cw && b->fetch_mass) { /* the scoring's heavy part, made by the backend */
        const size_t mn = (size_t)c->n_layers * c->n_heads * (r.self ? n : n - r.w) * sizeof(float);
        e->have_mass = !grow((void **)&e->mass, &e->cap_m, mn) && b->fetch_mass(b->ctx, fetched, e->mass) == 1;
        e->mass_docs += e->have_mass;
    }
    if (frc && r.backend) return fail(err, errlen, "accelerated forward pass over %d tokens failed: %s", n, berr);
    if (frc) return fail(err, errlen, "%s", berr);
    e->backend_docs += r.backend;
    if (r.evict) {
        int rc = compress_doc(e, n, w, err, errlen);
        e->doc.n = n; /* drop the probe's rows */
        return rc;
    }
    return 0;
}

int lz_encoder_run(lz_encoder *e, const int *ids, int n, char *err, size_t errlen)
{
    return run_doc(e, ids, n, -1, err, errlen);
}

int lz_encoder_run_fetched(lz_encoder *e, const int *ids, int n, int i, char *err, size_t errlen)
{
    return run_doc(e, ids, n, i < 0 ? 0 : i, err, errlen);
}

void lz_encoder_set_dtype(lz_encoder *e, int dtype) { e->dtype = dtype; }
void lz_encoder_set_backend(lz_encoder *e, const lz_encode_backend *b) { e->backend = b; }
long lz_encoder_backend_docs(const lz_encoder *e) { return e->backend_docs; }
long lz_encoder_mass_docs(const lz_encoder *e) { return e->mass_docs; }
long lz_encoder_plane_docs(const lz_encoder *e) { return e->plane_docs; }

const lz_kv_cache *lz_encoder_doc_cache(const lz_encoder *e) { return &e->doc; }
const lz_kv_cache *lz_encoder_prefix_cache(const lz_encoder *e) { return &e->prefix; }

int lz_encoder_pack(lz_encoder *e, int doc, lz_payload_codec *c, int codec, int level, void **blob,
                    size_t *len, char *err, size_t errlen)
{
    const lz_kv_cache *kc = doc ? &e->doc : &e->prefix;
    const lz_llama_config *cfg = &e->m->cfg;
    lz_payload_src src = {.k = kc->k, .v = kc->v, .stride = kc->cap, .n_layers = cfg->n_layers,
                          .n_kv_heads = cfg->n_kv_heads, .head_dim = cfg->head_dim, .n_tokens = kc->n,
                          .n_kept = doc && e->compressed ? e->kept : NULL, .pos_base = doc ? e->seg.n : 0,
                          .model = e->m->fingerprint, .dtype = e->dtype};
    if (doc && e->planes) {
        const int dt = e->dtype ? e->dtype : LZ_PAYLOAD_DTYPE_BF16;
        const size_t es = dt == LZ_PAYLOAD_DTYPE_F32 ? 4 : dt == LZ_PAYLOAD_DTYPE_FP8 ? 1 : 2;
        const size_t nh = (size_t)cfg->n_layers * cfg->n_kv_heads, part = nh * kc->n * cfg->head_dim * es;
        const size_t sc = es == 1 ? nh * sizeof(float) : 0;
        src.k = src.v = NULL;
        src.k_planes = e->pbuf + 2 * sc, src.v_planes = e->pbuf + 2 * sc + part;
        if (sc) src.k_scales = (const float *)(void *)e->pbuf, src.v_scales = src.k_scales + nh;
    }
    return lz_payload_encode(c, &src, codec, level, blob, len, err, errlen) ? -1 : 0;
}

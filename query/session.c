/* session.c - the four answer modes over one shared answer path (see
 * session.h). Every mode ends the same way: a list of external KV segments
 * plus a local cache, the question prefilled over them, then decoding one
 * token at a time over the same segments. Only how the segments are made
 * differs, and that is all a mode is. */
#include "query/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/half.h"
#include "model/prompt.h"
#include "model/sampler.h"
#include "base/sha256.h"
#include "store/payload.h"
#include "ingest/model_desc.h"
#include "query/kv_entry.h"

struct lz_query_session {
    lz_llama *m;
    lz_store *store;
    lz_query_opts o;
    lz_doc_cache *cache;
    lz_payload_codec *codec;
    kv_entry_env env;    /* how the host tier's entries are made (query/kv_entry.h) */
    lz_llama_scratch *scratch;
    lz_sampler sampler;
    int *prefix;         /* prompt prefix tokens (s) */
    int n_prefix;
    kv_entry prefix_kv;  /* stored once per model */
    int kv16;            /* the store's payloads (so every cached entry) are bf16 */
    uint8_t prefix_digest[32]; /* the prefix payload's key, hashed (a backend's content key) */
    float *logits;       /* (V) */
    /* LZ_COLD_AUTO's costs: store decode (bytes/s) and backend recompute (tokens/s) */
    double decode_bps, recompute_tps;
};

/* The priors of LZ_COLD_AUTO's rates, before anything is measured: payload decode on a
 * 16-core host (bench_codec) and an 8B model's multi-document passes on an H200 (lazyingest
 * --gpu's forward seconds), the figures of bench/RESULTS.md. */
#define COLD_DECODE_PRIOR 4.0e9
#define COLD_RECOMPUTE_PRIOR 2.0e4

/* rate <- the moving average with a new measurement (a weight of 0.3) */
static void rate_update(double *rate, double amount, double seconds)
{
    if (seconds > 1e-6 && amount > 0) *rate = 0.7 * *rate + 0.3 * (amount / seconds);
}

void lz_query_cold_rates(const lz_query_session *q, double *decode_bps, double *recompute_tps)
{
    *decode_bps = q->decode_bps;
    *recompute_tps = q->recompute_tps;
}

void lz_query_set_cold_rates(lz_query_session *q, double decode_bps, double recompute_tps)
{
    if (decode_bps > 0) q->decode_bps = decode_bps;
    if (recompute_tps > 0) q->recompute_tps = recompute_tps;
}

const char *lz_query_mode_name(int mode)
{
    static const char *names[] = {"lazy", "block", "prefix", "full"};
    return mode >= 0 && mode < 4 ? names[mode] : "?";
}

int lz_query_mode_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, lz_query_mode_name(i))) return i;
    return -1;
}

void lz_query_opts_default(lz_query_opts *o)
{
    memset(o, 0, sizeof *o);
    o->mode = LZ_MODE_LAZY;
    o->cache_bytes = (size_t)1 << 30;
    o->max_new_tokens = 64; /* a comparison answer gives its reasoning first (~35 tokens) */
    o->top_p = 0.9f;
    o->seed = 42;
    o->batch = 256;
}

void lz_query_result_free(lz_query_result *r)
{
    free(r->answer);
    free(r->answer_ids);
    free(r->logits);
    memset(r, 0, sizeof *r);
}

static void entry_free(lz_query_session *q, kv_entry *e) { kv_entry_free(&q->env, e); }

static void cache_free_value(void *v, void *ctx) { entry_free(ctx, v); }

typedef struct {
    lz_query_session *q;
    const char *what;
    kv_entry *e;
    char *err;
    size_t errlen;
} load_ctx;

static int decode_in_place(const void *blob, size_t len, void *ctx)
{
    load_ctx *l = ctx;
    l->e = kv_entry_decode(&l->q->env, blob, len, l->what, l->err, l->errlen);
    return l->e ? 0 : -1;
}

/* Reads (zero-copy, from LMDB's map) and decodes the payload of key; checks it
 * belongs to this model. what names the document in errors. */
static kv_entry *load_payload(lz_query_session *q, const uint8_t *key, const char *what, char *err, size_t errlen)
{
    char e2[384] = "";
    load_ctx l = {q, what, NULL, err, errlen};
    int rc = lz_store_read_payload(q->store, key, decode_in_place, &l, e2, sizeof e2);
    if (rc > 0) /* the store's status: nothing was decoded */
        snprintf(err, errlen, "%s: KV payload missing from the store (%s); run lazyingest --check --repair", what, e2);
    return rc ? NULL : l.e;
}

int lz_query_session_new(lz_llama *m, lz_store *s, const lz_query_opts *o, lz_query_session **out, char *err,
                         size_t errlen)
{
    *out = NULL;
    if (!m->tok) { snprintf(err, errlen, "the model has no tokenizer"); return -1; }
    lz_query_session *q = calloc(1, sizeof *q);
    if (!q) { snprintf(err, errlen, "out of memory"); return -1; }
    q->m = m;
    q->store = s;
    q->o = *o;
    q->decode_bps = COLD_DECODE_PRIOR;
    q->recompute_tps = COLD_RECOMPUTE_PRIOR;
    if (q->o.batch <= 0) q->o.batch = 256;
    lz_store_model_desc desc;
    lz_ingest_model_desc(m, NULL, &desc);
    int rc = lz_store_check_model(s, &desc, err, errlen);
    if (rc) { free(q); return rc; }
    q->cache = lz_doc_cache_new(o->cache_bytes, cache_free_value, q);
    if (q->cache) lz_doc_cache_set_policy(q->cache, (lz_cache_policy)o->cache_policy);
    q->codec = lz_payload_codec_new();
    q->env = (kv_entry_env){.cfg = &m->cfg, .fingerprint = m->fingerprint, .f32 = o->cache_f32,
                            .backend = o->backend && o->backend->host_alloc && o->backend->host_free ? o->backend : NULL,
                            .codec = q->codec};
    q->scratch = lz_llama_scratch_new(m, q->o.batch);
    q->logits = malloc((size_t)m->cfg.vocab * sizeof(float));
    if (!q->cache || !q->codec || !q->scratch || !q->logits ||
        lz_sampler_init(&q->sampler, m->cfg.vocab, o->temperature, o->top_p, o->seed) ||
        lz_prompt_prefix_tokens(m->tok, &q->prefix, &q->n_prefix)) {
        snprintf(err, errlen, "out of memory");
        lz_query_session_free(q);
        return -1;
    }
    /* the prefix this binary builds must be the one the store was encoded after */
    const int *sp;
    int sn;
    uint8_t prefix_key[LZ_META_KEY_LEN];
    lz_store_prefix(s, &sp, &sn, prefix_key);
    if (sn != q->n_prefix || memcmp(sp, q->prefix, (size_t)q->n_prefix * sizeof(int))) {
        snprintf(err, errlen, "the store was encoded after another prompt prefix (%d tokens, this build uses %d); "
                 "re-run lazyingest on the corpus", sn, q->n_prefix);
        lz_query_session_free(q);
        return -1;
    }
    lz_sha256(prefix_key, LZ_META_KEY_LEN, q->prefix_digest);
    kv_entry *pe = load_payload(q, prefix_key, "the prompt prefix", err, errlen);
    if (!pe) { lz_query_session_free(q); return -1; }
    if (pe->n != q->n_prefix) {
        snprintf(err, errlen, "the prompt prefix payload has %d tokens, expected %d", pe->n, q->n_prefix);
        entry_free(q, pe);
        lz_query_session_free(q);
        return -1;
    }
    q->prefix_kv = *pe;
    q->kv16 = pe->k16 != NULL;
    free(pe);
    *out = q;
    return 0;
}

void lz_query_session_free(lz_query_session *q)
{
    if (!q) return;
    lz_doc_cache_free(q->cache);
    lz_payload_codec_free(q->codec);
    lz_llama_scratch_free(q->scratch);
    lz_sampler_free(&q->sampler);
    free(q->prefix);
    kv_entry_clear(&q->env, &q->prefix_kv);
    free(q->logits);
    free(q);
}

void lz_query_cache_stats(const lz_query_session *q, lz_doc_cache_stats *st) { lz_doc_cache_get_stats(q->cache, st); }
int lz_query_prefix_len(const lz_query_session *q) { return q->n_prefix; }

int64_t lz_query_doc_budget(const lz_query_session *q, const char *question)
{
    int *ids, n;
    if (q->o.max_positions <= 0) return INT64_MAX / 2;
    if (lz_prompt_question_tokens(q->m->tok, question, &ids, &n)) return -1;
    free(ids);
    return (int64_t)q->o.max_positions - q->n_prefix - n - q->o.max_new_tokens;
}

/* Entry for a document from the cache or the store; *owned = 1 when the
 * cache did not take it (the caller frees it after the query). */
static kv_entry *fetch(lz_query_session *q, const void *ckey, size_t ckey_len, const lz_query_doc *d, int64_t rotate,
                       kv_entry *pre, int *owned, lz_query_result *r, char *err, size_t errlen)
{
    *owned = 0;
    kv_entry *e = lz_doc_cache_get(q->cache, ckey, ckey_len);
    if (e) {
        entry_free(q, pre);
        r->hits++;
        return e;
    }
    r->misses++;
    char what[320];
    snprintf(what, sizeof what, "document '%s'", d->ext_id);
    e = pre ? pre : load_payload(q, d->payload_key, what, err, errlen);
    if (!e) return NULL;
    if (e->n != d->n_tokens) {
        snprintf(err, errlen, "%s: payload has %d tokens, the store row says %d", what, e->n, d->n_tokens);
        entry_free(q, e);
        return NULL;
    }
    r->bytes_loaded += (int64_t)e->bytes;
    if (rotate) { /* BLOCK: materialise the keys rotated to their final positions (bf16: rounded back) */
        const lz_llama_config *c = &q->m->cfg;
        const int d = c->head_dim;
        float row[LZ_MAX_HEAD_DIM];
        for (int l = 0; l < c->n_layers; l++)
            for (int h = 0; h < c->n_kv_heads; h++) {
                const int kept = e->n_kept[l * c->n_kv_heads + h];
                const size_t r0 = (size_t)e->head_row[l * c->n_kv_heads + h];
                for (int j = 0; j < kept; j++) {
                    float *kr = e->k ? e->k + (r0 + j) * d : row;
                    uint16_t *k16 = e->k16 ? e->k16 + (r0 + j) * d : NULL;
                    if (k16) for (int i = 0; i < d; i++) row[i] = lz_bf16_to_f32(k16[i]);
                    lz_rope_apply(kr, d, rotate, c->rope_layout, q->m->inv_freq);
                    if (k16) for (int i = 0; i < d; i++) k16[i] = lz_f32_to_bf16(row[i]);
                }
            }
    }
    if (!lz_doc_cache_put(q->cache, ckey, ckey_len, e, e->bytes)) *owned = 1;
    return e;
}

/* Copies tokens [t0, t0 + n) of a local cache into a new entry (PREFIX
 * mode), bf16 (rounded, as the store's entries) or fp32. */
static kv_entry *slice_cache(lz_query_session *q, const lz_kv_cache *lc, int t0, int n, int bf16)
{
    const lz_llama_config *c = &q->m->cfg;
    kv_entry *e = kv_entry_alloc(&q->env, n, NULL, bf16);
    if (!e) return NULL;
    const size_t cnt = (size_t)n * c->head_dim;
    for (int l = 0; l < c->n_layers; l++)
        for (int h = 0; h < c->n_kv_heads; h++) {
            size_t src = (((size_t)l * c->n_kv_heads + h) * lc->cap + t0) * c->head_dim;
            size_t dst = ((size_t)l * c->n_kv_heads + h) * cnt;
            if (bf16) {
                lz_f32_to_bf16_n(e->k16 + dst, lc->k + src, cnt);
                lz_f32_to_bf16_n(e->v16 + dst, lc->v + src, cnt);
            } else {
                memcpy(e->k + dst, lc->k + src, cnt * sizeof(float));
                memcpy(e->v + dst, lc->v + src, cnt * sizeof(float));
            }
        }
    return e;
}

/* Reads a document's token ids (PREFIX and FULL recompute them). */
static int doc_tokens(lz_query_session *q, const lz_query_doc *d, int **ids, int *n, char *err, size_t errlen)
{
    if (lz_store_doc_tokens(q->store, d->id, ids, n, err, errlen)) return -1;
    if (*n != d->n_tokens) {
        snprintf(err, errlen, "document '%s': %d token ids stored, row says %d", d->ext_id, *n, d->n_tokens);
        free(*ids);
        return -1;
    }
    return 0;
}

/* Cache key of docs[i] placed at offset p: the payload key, plus the offset
 * in BLOCK mode (one rotated copy per position). Returns its length. */
static size_t cache_key(int mode, const lz_query_doc *d, int64_t p, uint8_t key[LZ_META_KEY_LEN + 8])
{
    memcpy(key, d->payload_key, LZ_META_KEY_LEN);
    if (mode != LZ_MODE_BLOCK) return LZ_META_KEY_LEN;
    memcpy(key + LZ_META_KEY_LEN, &p, 8);
    return LZ_META_KEY_LEN + 8;
}

/* Lazy mode with opts.cold = LZ_COLD_RECOMPUTE: the documents at offsets p..
 * that neither the backend nor the CPU cache holds and that are stored whole
 * (with LZ_COLD_AUTO: and whose recompute costs less than their load) are
 * recomputed on the backend from their token ids (one call, batched
 * there) instead of loaded; those the backend then holds are marked 2 in
 * held (a miss, not loaded). 0 or -1. */
static int recompute_cold(lz_query_session *q, const lz_query_backend *be, const lz_query_doc *docs, int n_docs,
                          int64_t p, uint8_t *held, const lz_kv_segment *prefix, uint8_t (*digest)[32],
                          lz_query_result *r, char *err, size_t errlen)
{
    const double t0 = lz_now_s();
    const size_t nd = n_docs > 0 ? (size_t)n_docs : 1;
    int *ns = malloc(nd * sizeof *ns), **ids = calloc(nd, sizeof *ids);
    const uint8_t **keys = malloc(nd * sizeof *keys);
    int m = 0, rc = -1;
    if (!ns || !ids || !keys) { snprintf(err, errlen, "out of memory"); goto done; }
    for (int i = 0; i < n_docs; p += docs[i].n_tokens, i++) {
        if (held[i] || !docs[i].whole || docs[i].n_tokens <= 0) continue;
        uint8_t key[LZ_META_KEY_LEN + 8];
        size_t klen = cache_key(LZ_MODE_LAZY, &docs[i], p, key);
        if (lz_doc_cache_contains(q->cache, key, klen)) continue; /* cached on the CPU: uploaded from there */
        if (q->o.cold == LZ_COLD_AUTO) { /* whichever costs less, at the rates measured so far */
            const lz_llama_config *c = &q->m->cfg;
            const double bytes = 2.0 * c->n_layers * c->n_kv_heads * c->head_dim * docs[i].n_tokens * (q->kv16 ? 2 : 4);
            if (bytes / q->decode_bps <= docs[i].n_tokens / q->recompute_tps) continue;
        }
        int again = 0; /* the same document twice in one prompt: computed once */
        for (int j = 0; j < m && !again; j++) again = !memcmp(keys[j], digest[1 + i], 32);
        if (again) continue;
        if (doc_tokens(q, &docs[i], &ids[m], &ns[m], err, errlen)) goto done;
        keys[m++] = digest[1 + i];
    }
    if (m && be->encode(be->ctx, prefix, q->prefix_digest, (const int *const *)ids, ns, keys, m, err, errlen)) goto done;
    int64_t made = 0;
    for (int j = 0; j < m; j++) /* those it could not take (too long for it) are loaded as usual */
        if (be->resident(be->ctx, keys[j])) {
            r->n_recomputed++;
            r->n_computed += ns[j];
            made += ns[j];
            for (int i = 0; i < n_docs; i++) /* with its repeats */
                if (!held[i] && !memcmp(digest[1 + i], keys[j], 32)) held[i] = 2;
        }
    rate_update(&q->recompute_tps, (double)made, lz_now_s() - t0);
    rc = 0;
done:
    for (int j = 0; ids && j < m; j++) free(ids[j]);
    free(ns);
    free(ids);
    free(keys);
    r->t_recompute += lz_now_s() - t0;
    return rc;
}

/* The question's documents that no tier above the store holds, read in one snapshot and
 * decoded together on all threads into pre[i] (store-to-host: one batch, not one payload at a
 * time). A document that fails is left NULL: fetch loads it alone and reports why. */
typedef struct {
    lz_query_session *q;
    const int *which; /* docs of the batch */
    int n;
    kv_entry **pre;
} misses_ctx;

static int decode_misses(const void *const *blobs, const size_t *lens, void *ctx)
{
    misses_ctx *m = ctx;
    kv_entry **out = calloc((size_t)m->n, sizeof *out);
    if (!out) return 0;
    kv_entry_decode_many(&m->q->env, blobs, lens, m->n, out, NULL);
    for (int i = 0; i < m->n; i++) m->pre[m->which[i]] = out[i];
    free(out);
    return 0;
}

static void preload_misses(lz_query_session *q, const lz_query_doc *docs, int n_docs, int mode, int64_t p0,
                           const uint8_t *held, kv_entry **pre)
{
    int64_t p = p0;
    int *which = malloc((size_t)(n_docs > 0 ? n_docs : 1) * sizeof *which), n = 0;
    uint8_t(*keys)[LZ_META_KEY_LEN] = malloc((size_t)(n_docs > 0 ? n_docs : 1) * LZ_META_KEY_LEN);
    if (!which || !keys) { free(which); free(keys); return; } /* fetch loads them one at a time */
    for (int i = 0; i < n_docs; p += docs[i].n_tokens, i++) {
        uint8_t key[LZ_META_KEY_LEN + 8];
        size_t klen = cache_key(mode, &docs[i], p, key);
        int dup = 0; /* the same payload earlier in the list: fetch finds it cached (or loads it) */
        for (int j = 0; j < i && !dup; j++) dup = !memcmp(docs[j].payload_key, docs[i].payload_key, LZ_META_KEY_LEN);
        if (dup || held[i] || lz_doc_cache_contains(q->cache, key, klen)) continue;
        memcpy(keys[n], docs[i].payload_key, LZ_META_KEY_LEN);
        which[n++] = i;
    }
    if (n) {
        misses_ctx m = {q, which, n, pre};
        char e2[256];
        const double t0 = lz_now_s();
        lz_store_read_payloads(q->store, (const uint8_t(*)[LZ_META_KEY_LEN])keys, n, decode_misses, &m, e2, sizeof e2);
        double bytes = 0;
        for (int i = 0; i < n; i++) {
            kv_entry **e = &pre[which[i]];
            if (*e) bytes += (double)(*e)->bytes;
            if (*e && (*e)->n != docs[which[i]].n_tokens) { /* fetch reports it */
                entry_free(q, *e);
                *e = NULL;
            }
        }
        if (bytes > 0) rate_update(&q->decode_bps, bytes, lz_now_s() - t0);
    }
    free(which);
    free(keys);
}

/* PREFIX's chain keys: the key of the prompt prefix alone, then chain_next folds in each
 * document in order (a document's key names it after exactly these predecessors). */
static void chain_start(const lz_query_session *q, uint8_t chain[32])
{
    lz_sha256(q->prefix, (size_t)q->n_prefix * sizeof(int), chain);
}

static void chain_next(uint8_t chain[32], const lz_query_doc *d)
{
    uint8_t buf[32 + LZ_META_KEY_LEN];
    memcpy(buf, chain, 32);
    memcpy(buf + 32, d->payload_key, LZ_META_KEY_LEN);
    lz_sha256(buf, sizeof buf, chain);
}

/* FULL and PREFIX on a backend: after begin (none, or the prefix and the reused chain), every
 * token the prompt still needs in one step: FULL the prefix, the documents and the question;
 * PREFIX the documents from local_from and the question; then PREFIX keeps each document it
 * computed under its chain key (backend->keep_own), as vLLM's prefix cache keeps its blocks.
 * The first answer token's logits in q->logits. 0 or -1. */
static int backend_prompt(lz_query_session *q, const lz_query_backend *be, const lz_query_doc *docs, int n_docs,
                          int local_from, const int *qids, int n_q, lz_query_result *r, char *err, size_t errlen)
{
    const int s = q->n_prefix, full = q->o.mode == LZ_MODE_FULL;
    size_t n_all = (size_t)n_q + (full ? (size_t)s : 0);
    for (int i = local_from; i < n_docs; i++) n_all += (size_t)docs[i].n_tokens;
    int *all = malloc(n_all * sizeof *all), *t0s = malloc(((size_t)n_docs + 1) * sizeof *t0s);
    int rc = -1;
    size_t at = 0;
    if (!all || !t0s) { snprintf(err, errlen, "out of memory"); goto done; }
    if (full) { memcpy(all, q->prefix, (size_t)s * sizeof *all); at = (size_t)s; }
    for (int i = local_from; i < n_docs; i++) {
        int *ids, n;
        if (doc_tokens(q, &docs[i], &ids, &n, err, errlen)) goto done;
        t0s[i] = (int)at;
        memcpy(all + at, ids, (size_t)n * sizeof *ids);
        at += (size_t)n;
        free(ids);
    }
    memcpy(all + at, qids, (size_t)n_q * sizeof *qids);
    if (be->step(be->ctx, all, (int)n_all, q->logits, err, errlen)) goto done;
    r->n_computed += (int)n_all;
    if (!full) {
        uint8_t chain[32];
        chain_start(q, chain);
        for (int i = 0; i < n_docs; i++) {
            chain_next(chain, &docs[i]);
            if (i >= local_from && docs[i].n_tokens > 0 &&
                be->keep_own(be->ctx, t0s[i], docs[i].n_tokens, chain, err, errlen) < 0)
                goto done;
        }
    }
    rc = 0;
done:
    free(all);
    free(t0s);
    return rc;
}

int lz_query_answer(lz_query_session *q, const char *question, const lz_query_doc *docs, int n_docs,
                    lz_query_result *r, char *err, size_t errlen)
{
    const lz_llama_config *c = &q->m->cfg;
    const int s = q->n_prefix, mode = q->o.mode;
    memset(r, 0, sizeof *r);
    if (!question || !*question) { snprintf(err, errlen, "the question is empty"); return -1; }
    int *qids = NULL, n_q = 0;
    if (lz_prompt_question_tokens(q->m->tok, question, &qids, &n_q)) { snprintf(err, errlen, "out of memory"); return -1; }
    int64_t total = s + (int64_t)n_q + q->o.max_new_tokens;
    for (int i = 0; i < n_docs; i++) total += docs[i].n_tokens;
    if (q->o.max_positions > 0 && total > q->o.max_positions) {
        snprintf(err, errlen, "the prompt needs %lld positions (prefix %d, %d documents, question %d, answer %d) "
                 "but the model's context is %d", (long long)total, s, n_docs, n_q, q->o.max_new_tokens,
                 q->o.max_positions);
        free(qids);
        return -1;
    }
    if (total > (int64_t)1 << 24) {
        snprintf(err, errlen, "the prompt would need %lld positions (question %d tokens, %d documents); too long",
                 (long long)total, n_q, n_docs);
        free(qids);
        return -1;
    }
    r->n_prompt = (int)(total - q->o.max_new_tokens);
    const int mat = mode == LZ_MODE_BLOCK && q->o.backend && q->o.backend->begin_block; /* see lz_query_backend */
    const int gpu_prefix = mode == LZ_MODE_PREFIX && q->o.backend && q->o.backend->keep_own && q->o.backend->resident;
    double t0 = lz_now_s();
    int rc = -1;
    lz_doc_cache_begin(q->cache);
    lz_kv_segment *segs = calloc((size_t)n_docs + 1, sizeof *segs);
    uint8_t(*digest)[32] = calloc((size_t)n_docs + 1, 32); /* content keys of the segments (backend) */
    const uint8_t **digests = calloc((size_t)n_docs + 1, sizeof *digests);
    kv_entry **owned = calloc((size_t)n_docs + 1, sizeof *owned);
    kv_entry **pre = calloc((size_t)n_docs + 1, sizeof *pre); /* decoded ahead (preload_misses) */
    uint8_t *held = calloc((size_t)n_docs + 1, 1);            /* resident on the backend: never loaded */
    int n_segs = 0, n_owned = 0;
    lz_kv_cache lc = {0};
    if (!segs || !owned || !digest || !digests || !pre || !held) { snprintf(err, errlen, "out of memory"); goto done; }

    int64_t p = s;      /* offset of the next document */
    int local_from = 0; /* first document computed into the local cache (PREFIX, FULL) */
    if (mode == LZ_MODE_FULL) {
        local_from = 0;
    } else {
        memcpy(digest[n_segs], q->prefix_digest, 32);
        segs[n_segs++] = kv_entry_segment(&q->prefix_kv, 0);
        if (mode == LZ_MODE_LAZY || mode == LZ_MODE_BLOCK) {
            /* block on a backend that rotates its own copies: the host tier keyed as lazy's */
            const int hmode = mat ? LZ_MODE_LAZY : mode;
            /* the documents an accelerator still holds (and the CPU cache does not) are neither
             * loaded nor decoded: its cache is the larger (GPU memory), the CPU's the smaller */
            const lz_query_backend *rb = q->o.backend && q->o.backend->resident ? q->o.backend : NULL;
            int64_t pp = p;
            for (int i = 0; i < n_docs; pp += docs[i].n_tokens, i++) {
                uint8_t key[LZ_META_KEY_LEN + 8];
                size_t klen = cache_key(mode, &docs[i], pp, key);
                lz_sha256(key, klen, digest[1 + i]); /* block: the copy at this offset */
                klen = cache_key(hmode, &docs[i], pp, key);
                held[i] = rb && !lz_doc_cache_contains(q->cache, key, klen) && rb->resident(rb->ctx, digest[1 + i]);
            }
            const lz_query_backend *eb = q->o.backend;
            if (mode == LZ_MODE_LAZY && (q->o.cold == LZ_COLD_RECOMPUTE || q->o.cold == LZ_COLD_AUTO) && eb &&
                eb->encode && eb->resident &&
                recompute_cold(q, eb, docs, n_docs, p, held, &segs[0], digest, r, err, errlen))
                goto done;
            preload_misses(q, docs, n_docs, hmode, p, held, pre);
            for (int i = 0; i < n_docs; i++) {
                if (held[i]) { /* a segment without data: the backend reads only its placement */
                    if (held[i] == 2) r->misses++; /* recomputed just now */
                    else r->hits++;
                    segs[n_segs++] = (lz_kv_segment){.n = docs[i].n_tokens, .stride = docs[i].n_tokens > 0 ? docs[i].n_tokens : 1,
                                                     .rot = mode == LZ_MODE_LAZY || mat ? p - s : 0};
                    p += docs[i].n_tokens;
                    continue;
                }
                uint8_t key[LZ_META_KEY_LEN + 8];
                size_t klen = cache_key(hmode, &docs[i], p, key);
                int own;
                kv_entry *e = fetch(q, key, klen, &docs[i], mode == LZ_MODE_BLOCK && !mat ? p - s : 0, pre[i], &own, r, err,
                                    errlen);
                pre[i] = NULL; /* fetch took it */
                if (!e) goto done;
                if (own) owned[n_owned++] = e;
                segs[n_segs++] = kv_entry_segment(e, mode == LZ_MODE_LAZY || mat ? p - s : 0);
                p += docs[i].n_tokens;
            }
            local_from = n_docs;
        } else { /* PREFIX: the longest chain of documents computed after exactly these predecessors */
            uint8_t chain[32];
            chain_start(q, chain);
            for (local_from = 0; local_from < n_docs; local_from++) {
                chain_next(chain, &docs[local_from]);
                if (gpu_prefix) { /* the chains live in the backend's memory, as vLLM's */
                    if (!q->o.backend->resident(q->o.backend->ctx, chain)) { r->misses++; break; }
                    r->hits++;
                    memcpy(digest[n_segs], chain, 32);
                    segs[n_segs++] = (lz_kv_segment){.n = docs[local_from].n_tokens,
                                                     .stride = docs[local_from].n_tokens > 0 ? docs[local_from].n_tokens : 1};
                    p += docs[local_from].n_tokens;
                    continue;
                }
                kv_entry *e = lz_doc_cache_get(q->cache, chain, 32);
                if (!e) { r->misses++; break; }
                r->hits++;
                segs[n_segs++] = kv_entry_segment(e, 0);
                p += docs[local_from].n_tokens;
            }
        }
    }
    r->t_load = lz_now_s() - t0;

    /* lazy, block, full, prefix (with keep_own): the prompt's rest, the question and the answer
     * on the accelerator when there is one */
    const lz_query_backend *be = mode != LZ_MODE_PREFIX || gpu_prefix ? q->o.backend : NULL;
    for (int i = 0; be && i < n_segs; i++) digests[i] = digest[i];
    if (be && (mat ? be->begin_block : be->begin)(be->ctx, segs, digests, n_segs, mode == LZ_MODE_FULL ? 0 : p, err,
                                                  errlen))
        goto done;
    if (be && (mode == LZ_MODE_FULL || mode == LZ_MODE_PREFIX)) { /* every token after the reused ones, one step */
        if (backend_prompt(q, be, docs, n_docs, local_from, qids, n_q, r, err, errlen)) goto done;
        r->t_ttft = lz_now_s() - t0;
    }
    /* the local cache: documents still to compute (PREFIX/FULL), question, answer */
    int64_t pos0 = mode == LZ_MODE_FULL ? 0 : p;
    int64_t n_local = be ? 1 : total - pos0;
    if (lz_kv_cache_init(&lc, c, (int)n_local)) { snprintf(err, errlen, "out of memory for %lld tokens of KV", (long long)n_local); goto done; }
    lz_kv_cache_reset(&lc, pos0);
    if (mode == LZ_MODE_FULL && !be &&
        lz_llama_forward(q->m, q->scratch, &lc, NULL, 0, q->prefix, s, NULL, LZ_LOGITS_NONE)) {
        snprintf(err, errlen, "forward pass failed on the prefix");
        goto done;
    }
    if (mode == LZ_MODE_FULL && !be) r->n_computed += s;
    uint8_t chain[32];
    if (mode == LZ_MODE_PREFIX) { /* recompute the chain key up to local_from */
        chain_start(q, chain);
        for (int i = 0; i < local_from; i++) chain_next(chain, &docs[i]);
    }
    for (int i = be ? n_docs : local_from; i < n_docs; i++) { /* on the CPU */
        int *ids, n;
        if (doc_tokens(q, &docs[i], &ids, &n, err, errlen)) goto done;
        int start = lc.n;
        int frc = n ? lz_llama_forward(q->m, q->scratch, &lc, segs, n_segs, ids, n, NULL, LZ_LOGITS_NONE) : 0;
        free(ids);
        if (frc) { snprintf(err, errlen, "forward pass failed on document '%s'", docs[i].ext_id); goto done; }
        r->n_computed += n;
        if (mode == LZ_MODE_PREFIX) {
            chain_next(chain, &docs[i]);
            kv_entry *e = slice_cache(q, &lc, start, n, q->kv16);
            if (e && !lz_doc_cache_put(q->cache, chain, 32, e, e->bytes)) entry_free(q, e);
        }
    }
    if (!r->t_ttft) { /* not run with the prompt's rest */
        if (be ? be->step(be->ctx, qids, n_q, q->logits, err, errlen)
               : lz_llama_forward(q->m, q->scratch, &lc, segs, n_segs, qids, n_q, q->logits, LZ_LOGITS_LAST)) {
            if (!be) snprintf(err, errlen, "forward pass failed on the question");
            goto done;
        }
        r->n_computed += n_q;
        r->t_ttft = lz_now_s() - t0;
    }
    if (q->o.keep_logits) {
        r->logits = malloc((size_t)c->vocab * sizeof(float));
        if (r->logits) memcpy(r->logits, q->logits, (size_t)c->vocab * sizeof(float));
    }

    /* decode: the same segments, one token at a time */
    double t1 = lz_now_s();
    size_t cap = 256, len = 0;
    r->answer = malloc(cap);
    r->answer_ids = malloc((size_t)(q->o.max_new_tokens > 0 ? q->o.max_new_tokens : 1) * sizeof(int));
    if (!r->answer || !r->answer_ids) { snprintf(err, errlen, "out of memory"); goto done; }
    r->answer[0] = 0;
    int prev = qids[n_q - 1];
    int plain = lz_prompt_style_of(q->m->tok) == LZ_PROMPT_PLAIN;
    for (int i = 0; i < q->o.max_new_tokens; i++) {
        int next = lz_sample(&q->sampler, q->logits);
        if (lz_tokenizer_is_eog(q->m->tok, next)) break;
        char piece[256];
        int pl = lz_tokenizer_piece(q->m->tok, prev, next, piece, sizeof piece);
        if (pl > (int)sizeof piece) pl = (int)sizeof piece;
        if (pl < 0) pl = 0;
        /* plain prompts end the answer at its first line break */
        if (plain && len > 0 && memchr(piece, '\n', (size_t)pl)) break;
        r->answer_ids[r->n_answer++] = next;
        if (len + (size_t)pl + 1 > cap) {
            while (len + (size_t)pl + 1 > cap) cap *= 2;
            char *a = realloc(r->answer, cap);
            if (!a) { snprintf(err, errlen, "out of memory"); goto done; }
            r->answer = a;
        }
        memcpy(r->answer + len, piece, (size_t)pl);
        len += (size_t)pl;
        r->answer[len] = 0;
        if (q->o.on_piece && pl) q->o.on_piece(piece, pl, q->o.ctx);
        prev = next;
        if (i + 1 == q->o.max_new_tokens) break;
        if (be ? be->step(be->ctx, &next, 1, q->logits, err, errlen)
               : lz_llama_forward(q->m, q->scratch, &lc, segs, n_segs, &next, 1, q->logits, LZ_LOGITS_LAST)) {
            if (!be) snprintf(err, errlen, "forward pass failed while decoding");
            goto done;
        }
    }
    r->t_decode = lz_now_s() - t1;
    rc = 0;
done:
    if (rc && q->o.backend && q->o.backend->settle) q->o.backend->settle(q->o.backend->ctx); /* before memory goes */
    for (int i = 0; i < n_owned; i++) entry_free(q, owned[i]);
    for (int i = 0; pre && i < n_docs; i++) entry_free(q, pre[i]); /* left by an error */
    free(pre);
    free(held);
    free(owned);
    free(segs);
    free(digest);
    free(digests);
    free(qids);
    lz_kv_cache_free(&lc);
    if (rc) lz_query_result_free(r);
    return rc;
}

/* Start-up preload: the most accessed documents, in popularity order,
 * PRELOAD_BATCH at a time read in one snapshot and decoded together on all
 * threads (kv_entry_decode_many), then inserted in that order: the same
 * documents a one-by-one preload takes (room is planned with the entries'
 * exact sizes). */
#define PRELOAD_BATCH 64
typedef struct {
    uint8_t key[LZ_META_KEY_LEN];
    int64_t hits;
    int n_tokens;
    kv_entry *e;
} preload_item;

typedef struct {
    lz_query_session *q;
    lz_query_preload_result *res;
    int gpu_done; /* the backend's cache is full (or failed): no more offers */
    char *err;
    size_t errlen;
    preload_item items[PRELOAD_BATCH];
    int n;
} preload_ctx;

/* The backend's hook, when it has one and still takes documents. */
static const lz_query_backend *preload_backend(const preload_ctx *P)
{
    const lz_query_backend *be = P->q->o.backend;
    return be && be->preload && !P->gpu_done ? be : NULL;
}

/* In the batch's snapshot: which documents a tier has room for (in order), decoded at once. */
static int preload_decode(const void *const *blobs, const size_t *lens, void *ctx)
{
    preload_ctx *P = ctx;
    lz_query_session *q = P->q;
    lz_doc_cache_stats st;
    lz_doc_cache_get_stats(q->cache, &st);
    const void *take[PRELOAD_BATCH];
    int64_t planned = 0;
    for (int i = 0; i < P->n; i++) {
        take[i] = NULL;
        if (!blobs[i]) { P->res->failed++; continue; }
        const size_t need = kv_entry_bytes_of(&q->env, blobs[i], lens[i], P->items[i].n_tokens);
        const int host_room = (int64_t)need <= st.bytes_budget - st.bytes_used - planned;
        if (!host_room && !(P->items[i].hits > 0 && preload_backend(P))) continue; /* smaller ones may fit */
        if (host_room) planned += (int64_t)need;
        take[i] = blobs[i];
    }
    kv_entry *out[PRELOAD_BATCH];
    kv_entry_decode_many(&q->env, take, lens, P->n, out, NULL);
    for (int i = 0; i < P->n; i++) {
        P->items[i].e = out[i];
        if (take[i] && !out[i]) P->res->failed++;
    }
    return 0;
}

static void preload_batch(preload_ctx *P)
{
    lz_query_session *q = P->q;
    uint8_t keys[PRELOAD_BATCH][LZ_META_KEY_LEN];
    for (int i = 0; i < P->n; i++) memcpy(keys[i], P->items[i].key, LZ_META_KEY_LEN), P->items[i].e = NULL;
    char e2[256];
    if (P->n && lz_store_read_payloads(q->store, (const uint8_t(*)[LZ_META_KEY_LEN])keys, P->n, preload_decode, P, e2,
                                       sizeof e2))
        P->res->failed += P->n;
    for (int i = 0; i < P->n; i++) {
        kv_entry *e = P->items[i].e;
        if (!e) continue;
        const lz_query_backend *be = preload_backend(P);
        if (be && P->items[i].hits > 0) { /* the hottest into the backend's cache first, while it has room */
            uint8_t digest[32];
            lz_sha256(P->items[i].key, LZ_META_KEY_LEN, digest); /* the content key lz_query_answer hands it */
            const lz_kv_segment sg = kv_entry_segment(e, 0);
            const int kept = be->preload(be->ctx, &sg, digest, 0, P->err, P->errlen);
            if (kept > 0) { P->res->gpu++; P->res->gpu_bytes += (int64_t)e->bytes; }
            else P->gpu_done = 1; /* full, or failed (its message in err) */
        }
        if (lz_doc_cache_preload(q->cache, P->items[i].key, LZ_META_KEY_LEN, e, e->bytes)) {
            P->res->host++;
            P->res->host_bytes += (int64_t)e->bytes;
        } else {
            entry_free(q, e);
        }
    }
    P->n = 0;
}

/* One popular document: seed its frequencies, queue it for a batch. */
static int preload_one(int64_t doc_id, int64_t hits, const uint8_t *key, int n_tokens, void *ctx)
{
    preload_ctx *P = ctx;
    lz_query_session *q = P->q;
    (void)doc_id;
    lz_doc_cache_prior(q->cache, key, LZ_META_KEY_LEN, (double)hits);
    const lz_query_backend *be = preload_backend(P);
    if (be && hits > 0) {
        uint8_t digest[32];
        lz_sha256(key, LZ_META_KEY_LEN, digest);
        if (be->preload(be->ctx, NULL, digest, (double)hits, P->err, P->errlen) < 0) P->gpu_done = 1;
    }
    preload_item *it = &P->items[P->n++];
    memcpy(it->key, key, LZ_META_KEY_LEN);
    it->hits = hits;
    it->n_tokens = n_tokens;
    it->e = NULL;
    if (P->n == PRELOAD_BATCH) preload_batch(P);
    return 0;
}

/* Only LAZY (and BLOCK on a backend with begin_block) preloads: one copy serves every position,
 * while other BLOCK and PREFIX keys depend on placements that no query has made yet. */
int lz_query_preload(lz_query_session *q, int all, lz_query_preload_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    const double t0 = lz_now_s();
    /* lazy's entries serve every placement; so do block's on a backend that rotates its own copies */
    const int content = q->o.mode == LZ_MODE_LAZY || (q->o.mode == LZ_MODE_BLOCK && q->o.backend && q->o.backend->begin_block);
    if (!content || (q->o.cache_bytes == 0 && !(q->o.backend && q->o.backend->preload))) return 0;
    preload_ctx *P = calloc(1, sizeof *P);
    if (!P) { snprintf(err, errlen, "out of memory"); return -1; }
    *P = (preload_ctx){.q = q, .res = res, .err = err, .errlen = errlen};
    err[0] = 0;
    int rc = lz_store_top_accessed(q->store, all ? INT32_MAX : 100000, all, preload_one, P, err, errlen);
    preload_batch(P); /* the rest (after an error too: nothing queued is lost) */
    free(P);
    res->seconds = lz_now_s() - t0;
    return rc || err[0] ? -1 : 0;
}

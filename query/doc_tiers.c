/* doc_tiers.c - a question's documents through the tiers below the backend
 * (doc_tiers.h): the host tier, the store (a question's misses in one snapshot,
 * decoded together), or recomputed on the backend. */
#include "query/doc_tiers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/half.h"
#include "kernels/lz_rerotate.h"

kv_entry *tiers_fetch(lz_query_session *q, const void *ckey, size_t ckey_len, const lz_query_doc *d, int64_t rotate,
                       kv_entry *pre, int *owned, int *status, lz_query_result *r, char *err, size_t errlen)
{
    *owned = 0;
    *status = -1;
    kv_entry *e = lz_doc_cache_get(q->cache, ckey, ckey_len);
    if (e) {
        session_entry_free(q, pre);
        r->hits++;
        return e;
    }
    r->misses++;
    char what[320];
    snprintf(what, sizeof what, "document '%s'", d->ext_id);
    e = pre ? pre : session_load_payload(q, d->payload_key, what, status, err, errlen);
    if (!e) return NULL;
    if (e->n != d->n_tokens) {
        snprintf(err, errlen, "%s: payload has %d tokens, the store row says %d", what, e->n, d->n_tokens);
        session_entry_free(q, e);
        return NULL;
    }
    r->bytes_loaded += (int64_t)e->bytes;
    if (rotate && e->k8) { /* BLOCK over fp8 kept as stored: the copy re-quantised at scale x sqrt(2) */
        const lz_llama_config *c = &q->m->cfg;
        const size_t nh = (size_t)c->n_layers * c->n_kv_heads;
        size_t rows = 0;
        for (size_t i = 0; i < nh; i++) rows += (size_t)e->n_kept[i];
        const lz_rerotate_params rp = {.inv_freq = q->m->inv_freq, .n_rows = (int64_t)rows, .offset = rotate,
                                       .head_dim = c->head_dim, .rope_layout = c->rope_layout, .dst8 = e->k8,
                                       .src8 = e->k8, .scale8_in = e->k_scales, .scale8_out = e->k_scales,
                                       .n_scales = (int)nh};
        if (lz_rerotate_ref(&rp, NULL)) {
            snprintf(err, errlen, "%s: re-rotating its fp8 keys failed", what);
            session_entry_free(q, e);
            return NULL;
        }
    } else if (rotate) { /* BLOCK: materialise the keys rotated to their final positions (bf16: rounded back) */
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

/* Reads a document's token ids (PREFIX and FULL recompute them). */
int tiers_doc_tokens(lz_query_session *q, const lz_query_doc *d, int **ids, int *n, char *err, size_t errlen)
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
size_t tiers_cache_key(int mode, const lz_query_doc *d, int64_t p, uint8_t key[LZ_META_KEY_LEN + 8])
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
 * held (a miss, not loaded). 0, -1, or LZ_QUERY_ENOMEM (no memory here or on the backend). */
int tiers_recompute_cold(lz_query_session *q, const lz_query_backend *be, const lz_query_doc *docs, int n_docs,
                          int64_t p, uint8_t *held, const lz_kv_segment *prefix, uint8_t (*digest)[32],
                          lz_query_result *r, char *err, size_t errlen)
{
    const double t0 = lz_now_s();
    const size_t nd = n_docs > 0 ? (size_t)n_docs : 1;
    int *ns = malloc(nd * sizeof *ns), **ids = calloc(nd, sizeof *ids);
    const uint8_t **keys = malloc(nd * sizeof *keys);
    int m = 0, rc = -1;
    if (!ns || !ids || !keys) { snprintf(err, errlen, "out of memory"); rc = LZ_QUERY_ENOMEM; goto done; }
    for (int i = 0; i < n_docs; p += docs[i].n_tokens, i++) {
        if (held[i] || !docs[i].whole || docs[i].n_tokens <= 0) continue;
        uint8_t key[LZ_META_KEY_LEN + 8];
        size_t klen = tiers_cache_key(LZ_MODE_LAZY, &docs[i], p, key);
        if (lz_doc_cache_contains(q->cache, key, klen)) continue; /* cached on the CPU: uploaded from there */
        if (q->o.cold == LZ_COLD_AUTO) { /* whichever costs less, at the rates measured so far */
            const lz_llama_config *c = &q->m->cfg;
            const double bytes = 2.0 * c->n_layers * c->n_kv_heads * c->head_dim * docs[i].n_tokens * q->kv_elem;
            if (bytes / q->decode_bps <= docs[i].n_tokens / q->recompute_tps) continue;
        }
        int again = 0; /* the same document twice in one prompt: computed once */
        for (int j = 0; j < m && !again; j++) again = !memcmp(keys[j], digest[1 + i], 32);
        if (again) continue;
        if (tiers_doc_tokens(q, &docs[i], &ids[m], &ns[m], err, errlen)) goto done;
        keys[m++] = digest[1 + i];
    }
    const int erc = m ? be->encode(be->ctx, prefix, q->prefix_digest, (const int *const *)ids, ns, keys, m, err, errlen) : 0;
    if (erc) { rc = erc == LZ_QUERY_ENOMEM ? LZ_QUERY_ENOMEM : -1; goto done; }
    int64_t made = 0;
    for (int j = 0; j < m; j++) /* those it could not take (too long for it) are loaded as usual */
        if (be->resident(be->ctx, keys[j])) {
            r->n_recomputed++;
            r->n_computed += ns[j];
            made += ns[j];
            for (int i = 0; i < n_docs; i++) /* with its repeats */
                if (!held[i] && !memcmp(digest[1 + i], keys[j], 32)) held[i] = 2;
        }
    session_rate_update(&q->recompute_tps, (double)made, lz_now_s() - t0);
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
    kv_entry_decode_many(&m->q->env, blobs, lens, m->n, out, NULL, NULL);
    for (int i = 0; i < m->n; i++) m->pre[m->which[i]] = out[i];
    free(out);
    return 0;
}

void tiers_load_misses(lz_query_session *q, const lz_query_doc *docs, int n_docs, int mode, int64_t p0,
                           const uint8_t *held, kv_entry **pre)
{
    int64_t p = p0;
    int *which = malloc((size_t)(n_docs > 0 ? n_docs : 1) * sizeof *which), n = 0;
    uint8_t(*keys)[LZ_META_KEY_LEN] = malloc((size_t)(n_docs > 0 ? n_docs : 1) * LZ_META_KEY_LEN);
    if (!which || !keys) { free(which); free(keys); return; } /* fetch loads them one at a time */
    for (int i = 0; i < n_docs; p += docs[i].n_tokens, i++) {
        uint8_t key[LZ_META_KEY_LEN + 8];
        size_t klen = tiers_cache_key(mode, &docs[i], p, key);
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
                session_entry_free(q, *e);
                *e = NULL;
            }
        }
        if (bytes > 0) session_rate_update(&q->decode_bps, bytes, lz_now_s() - t0);
    }
    free(which);
    free(keys);
}


/* encode.c - prefix once, then documents standalone after it (the prefix's
 * KV is an external segment with rotation 0, so document tokens see it as
 * the attention sink they will see at query time). */
#include "ingest/encode.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

struct lz_encoder {
    const lz_llama *m;
    lz_llama_scratch *scratch;
    lz_kv_cache prefix; /* (L, KV, s, d) keys rotated at 0..s-1 */
    lz_kv_cache doc;    /* (L, KV, T, d) keys rotated at s..s+n-1 */
    lz_kv_segment seg;
    int dtype;          /* payload element type (LZ_PAYLOAD_DTYPE_*, 0 = bf16) */
};

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
    *out = NULL;
    lz_encoder *e = calloc(1, sizeof *e);
    if (!e) return fail(err, errlen, "out of memory");
    e->m = m;
    e->scratch = lz_llama_scratch_new(m, LZ_ENCODE_CHUNK);
    if (!e->scratch || lz_kv_cache_init(&e->prefix, &m->cfg, n_prefix > 0 ? n_prefix : 1) != 0) {
        lz_encoder_free(e);
        return fail(err, errlen, "out of memory (encoder scratch for %d tokens)", LZ_ENCODE_CHUNK);
    }
    lz_kv_cache_reset(&e->prefix, 0);
    if (n_prefix > 0 &&
        lz_llama_forward(m, e->scratch, &e->prefix, NULL, 0, prefix, n_prefix, NULL, LZ_LOGITS_NONE) != 0) {
        lz_encoder_free(e);
        return fail(err, errlen, "forward pass over the %d-token prompt prefix failed", n_prefix);
    }
    e->seg = (lz_kv_segment){ e->prefix.k, e->prefix.v, NULL, n_prefix, e->prefix.cap, 0 };
    *out = e;
    return 0;
}

void lz_encoder_free(lz_encoder *e)
{
    if (!e) return;
    lz_llama_scratch_free(e->scratch);
    lz_kv_cache_free(&e->prefix);
    lz_kv_cache_free(&e->doc);
    free(e);
}

int lz_encoder_run(lz_encoder *e, const int *ids, int n, char *err, size_t errlen)
{
    if (n > e->doc.cap) {
        int cap = e->doc.cap ? e->doc.cap : 256;
        while (cap < n) cap *= 2;
        lz_kv_cache_free(&e->doc);
        if (lz_kv_cache_init(&e->doc, &e->m->cfg, cap) != 0)
            return fail(err, errlen, "out of memory (KV cache for %d tokens)", cap);
    }
    lz_kv_cache_reset(&e->doc, e->seg.n);
    int V = e->m->cfg.vocab;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V) return fail(err, errlen, "token id %d at %d outside the vocabulary (%d)", ids[i], i, V);
    if (n > 0 && lz_llama_forward(e->m, e->scratch, &e->doc, e->seg.n ? &e->seg : NULL, e->seg.n ? 1 : 0, ids, n,
                                  NULL, LZ_LOGITS_NONE) != 0)
        return fail(err, errlen, "forward pass over %d tokens failed", n);
    return 0;
}

void lz_encoder_set_dtype(lz_encoder *e, int dtype) { e->dtype = dtype; }

const lz_kv_cache *lz_encoder_doc_cache(const lz_encoder *e) { return &e->doc; }
const lz_kv_cache *lz_encoder_prefix_cache(const lz_encoder *e) { return &e->prefix; }

int lz_encoder_pack(lz_encoder *e, int doc, lz_payload_codec *c, int codec, int level, void **blob,
                    size_t *len, char *err, size_t errlen)
{
    const lz_kv_cache *kc = doc ? &e->doc : &e->prefix;
    const lz_llama_config *cfg = &e->m->cfg;
    lz_payload_src src = { kc->k, kc->v, kc->cap, 0, cfg->n_layers, cfg->n_kv_heads, cfg->head_dim, kc->n,
                           NULL, doc ? e->seg.n : 0, e->m->fingerprint, e->dtype };
    return lz_payload_encode(c, &src, codec, level, blob, len, err, errlen) ? -1 : 0;
}

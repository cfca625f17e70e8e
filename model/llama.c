/* llama.c - model lifetime shared by every loader: owned allocations,
 * configuration checks, rotary frequencies, the model fingerprint, the KV
 * cache, and dispatch from a path to the GGUF or Hugging Face loader. */
#include "model/llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/sha256.h"

void *lz_llama_alloc(lz_llama *m, size_t bytes)
{
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? m->cap_owned * 2 : 64;
        void **o = realloc(m->owned, (size_t)cap * sizeof *o);
        if (!o) return NULL;
        m->owned = o;
        m->cap_owned = cap;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p) m->owned[m->n_owned++] = p;
    return p;
}

void lz_llama_free(lz_llama *m)
{
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    lz_tokenizer_free(m->tok);
    if (m->gguf) lz_gguf_close((lz_gguf *)m->gguf);
    if (m->free_extra) m->free_extra(m->extra);
    free(m);
}

/* Hashes n values of a weight: its length and 64 evenly spaced windows of 64
 * values (whole tensor when small), as fp32 bytes. Cheap at load even for 8B
 * models. Widened first, so a fingerprint does not depend on whether packed
 * weights stay in place (formats/weights.h) or were widened at load. */
static void hash_weight(lz_sha256_ctx *s, lz_mat w, int64_t n)
{
    lz_sha256_update(s, &n, sizeof n);
    if (!w.data) return;
    float buf[64];
    if (n <= 64 * 64) {
        for (int64_t i = 0; i < n; i += 64) {
            size_t k = (size_t)(n - i < 64 ? n - i : 64);
            lz_mat_get_f32(w, (size_t)i, k, buf);
            lz_sha256_update(s, buf, k * 4);
        }
        return;
    }
    for (int k = 0; k < 64; k++) {
        lz_mat_get_f32(w, (size_t)((n - 64) / 63 * k), 64, buf);
        lz_sha256_update(s, buf, 64 * 4);
    }
}

static void fingerprint(lz_llama *m)
{
    const lz_llama_config *c = &m->cfg;
    lz_sha256_ctx s;
    lz_sha256_init(&s);
    lz_sha256_update(&s, "lazy-model-v1", 13);
    lz_sha256_update(&s, m->arch, strlen(m->arch));
    int32_t ints[] = {c->dim, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->ffn_dim, c->vocab,
                      c->rope_layout, c->tied_output};
    lz_sha256_update(&s, ints, sizeof ints);
    lz_sha256_update(&s, &c->norm_eps, 4);
    lz_sha256_update(&s, m->inv_freq, (size_t)c->head_dim / 2 * 4);
    int64_t D = c->dim, F = c->ffn_dim, Hd = (int64_t)c->n_heads * c->head_dim,
            KVd = (int64_t)c->n_kv_heads * c->head_dim;
    hash_weight(&s, m->tok_embd, (int64_t)c->vocab * D);
    hash_weight(&s, (lz_mat){m->out_norm, LZ_MAT_F32}, D);
    hash_weight(&s, m->output, (int64_t)c->vocab * D);
    for (int l = 0; l < c->n_layers; l++) {
        const lz_llama_layer *L = &m->layers[l];
        hash_weight(&s, (lz_mat){L->attn_norm, LZ_MAT_F32}, D);
        hash_weight(&s, L->wq, Hd * D);
        hash_weight(&s, L->wk, KVd * D);
        hash_weight(&s, L->wv, KVd * D);
        hash_weight(&s, L->wo, D * Hd);
        hash_weight(&s, (lz_mat){L->ffn_norm, LZ_MAT_F32}, D);
        hash_weight(&s, L->w_gate, F * D);
        hash_weight(&s, L->w_up, F * D);
        hash_weight(&s, L->w_down, D * F);
    }
    if (m->tok) {
        int nv = lz_tokenizer_vocab_size(m->tok);
        char piece[256];
        for (int i = 0; i < nv; i++) {
            int len = lz_tokenizer_piece(m->tok, 0, i, piece, sizeof piece);
            if (len > 0) lz_sha256_update(&s, piece, (size_t)(len < 256 ? len : 256));
        }
    }
    lz_sha256_final(&s, m->fingerprint);
    lz_sha256_hex(m->fingerprint, m->fingerprint_hex);
}

int lz_llama_finish(lz_llama *m, char *err, size_t errlen)
{
    lz_llama_config *c = &m->cfg;
    if (c->dim <= 0 || c->n_layers <= 0 || c->n_heads <= 0 || c->n_kv_heads <= 0 || c->head_dim <= 0 ||
        c->ffn_dim <= 0 || c->vocab <= 0) {
        snprintf(err, errlen, "invalid model shape: dim %d layers %d heads %d kv_heads %d head_dim %d ffn %d vocab %d",
                 c->dim, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->ffn_dim, c->vocab);
        return LZ_ECORRUPT;
    }
    if (c->n_heads % c->n_kv_heads) {
        snprintf(err, errlen, "heads %d not a multiple of kv heads %d", c->n_heads, c->n_kv_heads);
        return LZ_ECORRUPT;
    }
    if (c->head_dim % 2 || c->head_dim > LZ_MAX_HEAD_DIM) {
        snprintf(err, errlen, "head_dim %d must be even and at most %d", c->head_dim, LZ_MAX_HEAD_DIM);
        return LZ_EUNSUPPORTED;
    }
    if (!(c->rope_theta > 0)) c->rope_theta = 10000.0f;
    if (!(c->norm_eps > 0)) c->norm_eps = 1e-5f;
    if (!m->tok_embd.data || !m->out_norm || !m->layers) {
        snprintf(err, errlen, "model is missing token_embd, output_norm or layers");
        return LZ_ECORRUPT;
    }
    if (!m->output.data) { m->output = m->tok_embd; c->tied_output = 1; }
    for (int l = 0; l < c->n_layers; l++) {
        const lz_llama_layer *L = &m->layers[l];
        if (!L->attn_norm || !L->wq.data || !L->wk.data || !L->wv.data || !L->wo.data || !L->ffn_norm ||
            !L->w_gate.data || !L->w_up.data || !L->w_down.data) {
            snprintf(err, errlen, "layer %d is missing a weight", l);
            return LZ_ECORRUPT;
        }
    }
    if (c->has_rope_divisors) {
        for (int i = 0; i < c->head_dim / 2; i++)
            if (!(c->rope_divisors[i] > 0)) {
                snprintf(err, errlen, "rope frequency divisor %d is %g (must be > 0)", i, c->rope_divisors[i]);
                return LZ_ECORRUPT;
            }
    }
    lz_rope_inv_freqs(m->inv_freq, c->head_dim, c->rope_theta, c->has_rope_divisors ? c->rope_divisors : NULL);
    if (!m->arch[0]) snprintf(m->arch, sizeof m->arch, "llama");
    if (m->tok) {
        if (c->bos < 0) c->bos = lz_tokenizer_bos(m->tok);
        if (c->eos < 0) c->eos = lz_tokenizer_eos(m->tok);
    }
    fingerprint(m);
    return 0;
}

int lz_llama_load(const char *path, lz_llama **out, char *err, size_t errlen)
{
    struct stat st;
    *out = NULL;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: no such file or folder", path);
        return LZ_EIO;
    }
    if (S_ISDIR(st.st_mode)) return lz_llama_load_hf(path, out, err, errlen);
    return lz_llama_load_gguf(path, out, err, errlen);
}

int lz_kv_cache_init(lz_kv_cache *c, const lz_llama_config *cfg, int cap)
{
    memset(c, 0, sizeof *c);
    c->n_layers = cfg->n_layers;
    c->n_kv_heads = cfg->n_kv_heads;
    c->head_dim = cfg->head_dim;
    c->cap = cap;
    size_t n = (size_t)cfg->n_layers * cfg->n_kv_heads * (size_t)cap * cfg->head_dim;
    c->k = malloc(n * sizeof(float));
    c->v = malloc(n * sizeof(float));
    if (!c->k || !c->v) { lz_kv_cache_free(c); return -1; }
    return 0;
}

void lz_kv_cache_free(lz_kv_cache *c)
{
    if (!c) return;
    free(c->k);
    free(c->v);
    c->k = c->v = NULL;
    c->cap = c->n = 0;
}

void lz_kv_cache_reset(lz_kv_cache *c, int64_t pos0)
{
    c->n = 0;
    c->pos0 = pos0;
}

/* llama_gguf.c - loads a Llama-family model from GGUF: hyper-parameters from
 * the <arch>.* keys, rotary scaling (rope_freqs.weight, linear scaling),
 * weights (F32, and F16/BF16/Q8_0 matrices, used in place from the mapping:
 * formats/weights.h; norms, and everything with LAZY_F32_WEIGHTS set,
 * dequantized to fp32 at load) and the tokenizer. Every shape is checked against the config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "model/llama.h"

typedef struct {
    lz_llama *m;
    const lz_gguf *g;
    const char *path;
    char *err;
    size_t errlen;
} loader;

static int key_int(loader *L, const char *arch, const char *suffix, int64_t def, int required, int64_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int rc = lz_gguf_get_int(L->g, key, out);
    if (rc == LZ_ENOTFOUND && !required) { *out = def; return 0; }
    if (rc) {
        snprintf(L->err, L->errlen, "%s: key '%s' %s", L->path, key,
                 rc == LZ_ENOTFOUND ? "is missing" : "is not an integer");
        return LZ_ECORRUPT;
    }
    if (*out < 0 || *out > (1 << 30)) {
        snprintf(L->err, L->errlen, "%s: key '%s' = %lld is out of range", L->path, key, (long long)*out);
        return LZ_ECORRUPT;
    }
    return 0;
}

static int key_float(loader *L, const char *arch, const char *suffix, double def, double *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int rc = lz_gguf_get_float(L->g, key, out);
    if (rc == LZ_ENOTFOUND) { *out = def; return 0; }
    if (rc) { snprintf(L->err, L->errlen, "%s: key '%s' is not a number", L->path, key); return LZ_ECORRUPT; }
    return 0;
}

/* Finds tensor name with shape (ne0, ne1) (ne1 = 1 for vectors). */
static int find(loader *L, const char *name, int64_t ne0, int64_t ne1, int optional, const lz_gguf_tensor **out)
{
    const lz_gguf_tensor *t = lz_gguf_find_tensor(L->g, name);
    *out = NULL;
    if (!t) {
        if (optional) return 0;
        snprintf(L->err, L->errlen, "%s: tensor '%s' is missing", L->path, name);
        return LZ_ECORRUPT;
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
        snprintf(L->err, L->errlen, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                 L->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                 (long long)ne0, (long long)ne1);
        return LZ_ECORRUPT;
    }
    *out = t;
    return 0;
}

/* fp32 weights of tensor t: in place for F32, dequantized copy otherwise. */
static int to_f32(loader *L, const lz_gguf_tensor *t, const float **out)
{
    if (t->type == LZ_GGML_F32 && ((uintptr_t)t->data % 4) == 0) {
        *out = t->data;
        return 0;
    }
    float *w = lz_llama_alloc(L->m, (size_t)t->n_elements * sizeof(float));
    if (!w) { snprintf(L->err, L->errlen, "%s: out of memory for tensor '%s'", L->path, t->name); return LZ_ENOMEM; }
    if (lz_gguf_tensor_to_f32(t, w)) {
        snprintf(L->err, L->errlen, "%s: tensor '%s' has unsupported type %s", L->path, t->name,
                 lz_ggml_type_name(t->type));
        return LZ_EUNSUPPORTED;
    }
    *out = w;
    return 0;
}

/* A vector (norm, rope_freqs): fp32. */
static int weight(loader *L, const char *name, int64_t ne0, int64_t ne1, int optional, const float **out)
{
    const lz_gguf_tensor *t;
    int rc = find(L, name, ne0, ne1, optional, &t);
    *out = NULL;
    return rc || !t ? rc : to_f32(L, t, out);
}

/* A matrix: F16 / BF16 / Q8_0 in place from the mapping (lz_mat_in_place), else fp32. */
static int matrix(loader *L, const char *name, int64_t ne0, int64_t ne1, int optional, lz_mat *out)
{
    const lz_gguf_tensor *t;
    int rc = find(L, name, ne0, ne1, optional, &t);
    *out = (lz_mat){NULL, LZ_MAT_F32};
    if (rc || !t) return rc;
    const int type = t->type == LZ_GGML_BF16 ? LZ_MAT_BF16 : t->type == LZ_GGML_F16 ? LZ_MAT_F16
                     : t->type == LZ_GGML_Q8_0 ? LZ_MAT_Q8_0 : LZ_MAT_F32;
    if (type != LZ_MAT_F32 && (type == LZ_MAT_Q8_0 || (uintptr_t)t->data % 2 == 0) && lz_mat_in_place()) {
        *out = (lz_mat){t->data, type}; /* Q8_0: the reader checked ne[0] % 32 == 0 */
        return 0;
    }
    const float *w;
    if ((rc = to_f32(L, t, &w))) return rc;
    *out = (lz_mat){w, LZ_MAT_F32};
    return 0;
}

static int load(loader *L)
{
    lz_llama *m = L->m;
    lz_llama_config *c = &m->cfg;
    const char *arch_s;
    size_t arch_n;
    int rc;
    if (lz_gguf_get_str(L->g, "general.architecture", &arch_s, &arch_n) || arch_n == 0 || arch_n >= sizeof m->arch) {
        snprintf(L->err, L->errlen, "%s: key 'general.architecture' is missing or invalid", L->path);
        return LZ_ECORRUPT;
    }
    memcpy(m->arch, arch_s, arch_n);
    m->arch[arch_n] = 0;
    if (strcmp(m->arch, "llama") && strcmp(m->arch, "mistral")) {
        snprintf(L->err, L->errlen, "%s: architecture '%s' is not supported (llama, mistral are)", L->path, m->arch);
        return LZ_EUNSUPPORTED;
    }
    const char *a = m->arch;
    int64_t dim, nl, nh, nkv, ffn, ctx, hd, rot;
    double eps, theta, scale;
    if ((rc = key_int(L, a, "embedding_length", 0, 1, &dim)) || (rc = key_int(L, a, "block_count", 0, 1, &nl)) ||
        (rc = key_int(L, a, "attention.head_count", 0, 1, &nh)) ||
        (rc = key_int(L, a, "feed_forward_length", 0, 1, &ffn)) ||
        (rc = key_int(L, a, "context_length", 2048, 0, &ctx)))
        return rc;
    if (nh <= 0) { snprintf(L->err, L->errlen, "%s: attention.head_count is 0", L->path); return LZ_ECORRUPT; }
    if ((rc = key_int(L, a, "attention.head_count_kv", nh, 0, &nkv)) ||
        (rc = key_int(L, a, "attention.key_length", dim / nh, 0, &hd)) ||
        (rc = key_int(L, a, "rope.dimension_count", hd, 0, &rot)) ||
        (rc = key_float(L, a, "attention.layer_norm_rms_epsilon", 1e-5, &eps)) ||
        (rc = key_float(L, a, "rope.freq_base", 10000.0, &theta)) ||
        (rc = key_float(L, a, "rope.scaling.factor", 0.0, &scale)))
        return rc;
    if (rot != hd) {
        snprintf(L->err, L->errlen, "%s: partial rotary (rope.dimension_count %lld != head_dim %lld) is not supported",
                 L->path, (long long)rot, (long long)hd);
        return LZ_EUNSUPPORTED;
    }
    c->dim = (int)dim; c->n_layers = (int)nl; c->n_heads = (int)nh; c->n_kv_heads = (int)nkv;
    c->head_dim = (int)hd; c->ffn_dim = (int)ffn; c->ctx = (int)ctx;
    c->norm_eps = (float)eps; c->rope_theta = (float)theta;
    c->rope_layout = LZ_ROPE_ADJACENT;
    c->bos = c->eos = -1;
    if (c->head_dim <= 0 || c->head_dim % 2 || c->head_dim > LZ_MAX_HEAD_DIM || c->n_kv_heads <= 0 ||
        c->n_heads % c->n_kv_heads || dim <= 0 || nl <= 0 || ffn <= 0) {
        snprintf(L->err, L->errlen, "%s: inconsistent shape: dim %lld layers %lld heads %lld kv heads %lld head_dim %lld",
                 L->path, (long long)dim, (long long)nl, (long long)nh, (long long)nkv, (long long)hd);
        return LZ_ECORRUPT;
    }
    const char *st;
    size_t stn;
    if (lz_gguf_get_str(L->g, "llama.rope.scaling.type", &st, &stn) == 0 && !(stn == 6 && !memcmp(st, "linear", 6)) &&
        !(stn == 4 && !memcmp(st, "none", 4)) && !(stn == 6 && !memcmp(st, "llama3", 6))) {
        snprintf(L->err, L->errlen, "%s: rope scaling '%.*s' is not supported (linear, llama3 via rope_freqs are)",
                 L->path, (int)stn, st);
        return LZ_EUNSUPPORTED;
    }
    const lz_gguf_tensor *tt = lz_gguf_find_tensor(L->g, "token_embd.weight");
    if (!tt) { snprintf(L->err, L->errlen, "%s: tensor 'token_embd.weight' is missing", L->path); return LZ_ECORRUPT; }
    c->vocab = (int)tt->ne[1];

    int64_t D = dim, Hd = nh * hd, KVd = nkv * hd, F = ffn;
    if ((rc = matrix(L, "token_embd.weight", D, c->vocab, 0, &m->tok_embd)) ||
        (rc = weight(L, "output_norm.weight", D, 1, 0, &m->out_norm)) ||
        (rc = matrix(L, "output.weight", D, c->vocab, 1, &m->output)))
        return rc;
    const float *freqs = NULL;
    if ((rc = weight(L, "rope_freqs.weight", hd / 2, 1, 1, &freqs))) return rc;
    if (freqs) {
        c->has_rope_divisors = 1;
        memcpy(c->rope_divisors, freqs, (size_t)hd / 2 * sizeof(float));
    } else if (scale > 0 && scale != 1.0) {
        c->has_rope_divisors = 1;
        for (int i = 0; i < hd / 2; i++) c->rope_divisors[i] = (float)scale;
    }
    /* each layer is 9 tensors: a block_count the file cannot hold is refused before its
     * allocation (fuzz/fuzz_model.c: 2^26 + 1 layers in a 50 KB file asked for 8.6 GB) */
    if (nl > lz_gguf_n_tensors(L->g) / 9) {
        snprintf(L->err, L->errlen, "%s: key '%s.block_count' = %lld layers, but the file holds %lld tensors (9 a layer)",
                 L->path, a, (long long)nl, (long long)lz_gguf_n_tensors(L->g));
        return LZ_ECORRUPT;
    }
    m->layers = lz_llama_alloc(m, (size_t)nl * sizeof *m->layers);
    if (!m->layers) return LZ_ENOMEM;
    memset(m->layers, 0, (size_t)nl * sizeof *m->layers);
    for (int l = 0; l < nl; l++) {
        lz_llama_layer *y = &m->layers[l];
        char n[9][64];
        static const char *suffix[9] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                        "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};
        for (int i = 0; i < 9; i++) snprintf(n[i], sizeof n[i], "blk.%d.%s.weight", l, suffix[i]);
        if ((rc = weight(L, n[0], D, 1, 0, &y->attn_norm)) || (rc = matrix(L, n[1], D, Hd, 0, &y->wq)) ||
            (rc = matrix(L, n[2], D, KVd, 0, &y->wk)) || (rc = matrix(L, n[3], D, KVd, 0, &y->wv)) ||
            (rc = matrix(L, n[4], Hd, D, 0, &y->wo)) || (rc = weight(L, n[5], D, 1, 0, &y->ffn_norm)) ||
            (rc = matrix(L, n[6], D, F, 0, &y->w_gate)) || (rc = matrix(L, n[7], D, F, 0, &y->w_up)) ||
            (rc = matrix(L, n[8], F, D, 0, &y->w_down)))
            return rc;
    }
    if (lz_gguf_get(L->g, "tokenizer.ggml.model")) {
        char terr[256] = "";
        if ((rc = lz_tokenizer_from_gguf(L->g, &m->tok, terr, sizeof terr))) {
            snprintf(L->err, L->errlen, "%s: tokenizer: %s", L->path, terr);
            return LZ_ECORRUPT;
        }
        if (lz_tokenizer_vocab_size(m->tok) > c->vocab) {
            snprintf(L->err, L->errlen, "%s: tokenizer has %d tokens but the embedding only %d rows", L->path,
                     lz_tokenizer_vocab_size(m->tok), c->vocab);
            return LZ_ECORRUPT;
        }
    }
    int64_t v;
    if (lz_gguf_get_int(L->g, "tokenizer.ggml.bos_token_id", &v) == 0) c->bos = (int)v;
    if (lz_gguf_get_int(L->g, "tokenizer.ggml.eos_token_id", &v) == 0) c->eos = (int)v;
    return 0;
}

int lz_llama_load_gguf(const char *path, lz_llama **out, char *err, size_t errlen)
{
    lz_gguf *g;
    *out = NULL;
    int rc = lz_gguf_open(path, &g, err, errlen);
    if (rc) return rc == LZ_ENOMEM ? LZ_ENOMEM : rc == LZ_EIO ? LZ_EIO : LZ_ECORRUPT;
    lz_llama *m = calloc(1, sizeof *m);
    if (!m) { lz_gguf_close(g); return LZ_ENOMEM; }
    m->gguf = g;
    loader L = {.m = m, .g = g, .path = path, .err = err, .errlen = errlen};
    rc = load(&L);
    if (!rc) rc = lz_llama_finish(m, err, errlen);
    if (rc && err && errlen && err[0] && !strstr(err, path)) {
        /* lz_llama_finish (model/llama.c) does not know the file: named here (fuzz/fuzz_model.c checks) */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", err);
        snprintf(err, errlen, "%s: %s", path, msg);
    }
    if (rc) { lz_llama_free(m); return rc; }
    *out = m;
    return 0;
}

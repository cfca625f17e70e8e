/* load_hf.c - loads a Llama-family model from a Hugging Face folder:
 * config.json (LlamaForCausalLM, MistralForCausalLM), model.safetensors or
 * shards with model.safetensors.index.json, tokenizer.json (optional: the
 * model loads weight-only without it).
 *
 * Weights: F32 used in place from the mapping (when 4-byte aligned); F16 and
 * BF16 matrices too (formats/weights.h), norms widened to fp32 at load (all of
 * them with LAZY_F32_WEIGHTS set). q/k rows stay as Hugging Face stores them,
 * so the rotary layout is LZ_ROPE_HALF (pairs (i, i+d/2)); base/rope.h does
 * the rotation for both layouts. rope_scaling "llama3" becomes per-pair
 * divisors through lz_rope_llama3_divisors, "linear" a constant divisor;
 * other scalings are refused. Mistral's sliding_window is not applied
 * (attention is full), so the context is capped at the window, where full
 * attention is exact: longer prompts get the tools' context error instead
 * of silently different answers.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/llama.h"
#include "formats/safetensors.h"

typedef struct {
    lz_llama *m;
    const lz_st_set *st;
    const char *dir;
    char *err;
    size_t errlen;
} loader;

/* Integer field of config.json; def is used when absent or null (required: error). */
static int cfg_int(loader *L, json_t *cfg, const char *key, int64_t def, int required, int64_t *out)
{
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) {
        if (required) { snprintf(L->err, L->errlen, "%s/config.json: '%s' is missing", L->dir, key); return LZ_ECORRUPT; }
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 30)) {
        snprintf(L->err, L->errlen, "%s/config.json: '%s' must be an integer in [0, 2^30]", L->dir, key);
        return LZ_ECORRUPT;
    }
    *out = (int64_t)json_integer_value(v);
    return 0;
}

static int cfg_num(loader *L, json_t *cfg, const char *where, const char *key, double def, int required, double *out)
{
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) {
        if (required) { snprintf(L->err, L->errlen, "%s/config.json: %s'%s' is missing", L->dir, where, key); return LZ_ECORRUPT; }
        *out = def;
        return 0;
    }
    if (!json_is_number(v)) {
        snprintf(L->err, L->errlen, "%s/config.json: %s'%s' is not a number", L->dir, where, key);
        return LZ_ECORRUPT;
    }
    *out = json_number_value(v);
    return 0;
}

/* bos/eos: an integer, a list (first element is used) or null. */
static int token_id(json_t *v)
{
    if (json_is_array(v) && json_array_size(v) > 0) v = json_array_get(v, 0);
    if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < (1 << 30)) return (int)json_integer_value(v);
    return -1;
}

static int is_true(json_t *cfg, const char *key) { return json_is_true(json_object_get(cfg, key)); }

/* Rotary base and scaling: transformers 4 writes rope_theta + rope_scaling,
 * transformers 5 may write rope_parameters {rope_type, rope_theta, ...}. */
static int rope_config(loader *L, json_t *cfg)
{
    lz_llama_config *c = &L->m->cfg;
    json_t *rs = json_object_get(cfg, "rope_scaling");
    json_t *rp = json_object_get(cfg, "rope_parameters");
    double theta;
    int rc;
    if ((rc = cfg_num(L, cfg, "", "rope_theta", 0, 0, &theta))) return rc;
    if (theta == 0 && json_is_object(rp) && (rc = cfg_num(L, rp, "rope_parameters.", "rope_theta", 0, 0, &theta))) return rc;
    if (theta == 0) theta = 10000.0;
    if (!(theta > 1)) { snprintf(L->err, L->errlen, "%s/config.json: rope_theta %g must be > 1", L->dir, theta); return LZ_ECORRUPT; }
    c->rope_theta = (float)theta;
    json_t *sc = json_is_object(rs) ? rs : json_is_object(rp) ? rp : NULL;
    const char *where = sc == rs ? "rope_scaling." : "rope_parameters.";
    if (!sc) {
        if (rs && !json_is_null(rs)) { snprintf(L->err, L->errlen, "%s/config.json: rope_scaling is not an object", L->dir); return LZ_ECORRUPT; }
        return 0;
    }
    json_t *jt = json_object_get(sc, "rope_type");
    if (!json_is_string(jt)) jt = json_object_get(sc, "type");
    const char *type = json_is_string(jt) ? json_string_value(jt) : "default";
    double prf;
    if ((rc = cfg_num(L, sc, where, "partial_rotary_factor", 1.0, 0, &prf))) return rc;
    if (prf != 1.0) {
        snprintf(L->err, L->errlen, "%s/config.json: partial_rotary_factor %g is not supported (1 is)", L->dir, prf);
        return LZ_EUNSUPPORTED;
    }
    int half = c->head_dim / 2;
    if (!strcmp(type, "default")) return 0;
    if (!strcmp(type, "linear")) {
        double f;
        if ((rc = cfg_num(L, sc, where, "factor", 0, 1, &f))) return rc;
        if (!(f > 0)) { snprintf(L->err, L->errlen, "%s/config.json: %sfactor %g must be > 0", L->dir, where, f); return LZ_ECORRUPT; }
        c->has_rope_divisors = 1;
        for (int i = 0; i < half; i++) c->rope_divisors[i] = (float)f;
        return 0;
    }
    if (!strcmp(type, "llama3")) {
        double f, lo, hi, orig;
        if ((rc = cfg_num(L, sc, where, "factor", 0, 1, &f)) || (rc = cfg_num(L, sc, where, "low_freq_factor", 0, 1, &lo)) ||
            (rc = cfg_num(L, sc, where, "high_freq_factor", 0, 1, &hi)) ||
            (rc = cfg_num(L, sc, where, "original_max_position_embeddings", 0, 1, &orig)))
            return rc;
        if (!(f > 0) || !(lo > 0) || !(hi > lo) || !(orig > 0)) {
            snprintf(L->err, L->errlen,
                     "%s/config.json: llama3 rope scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor, "
                     "original_max_position_embeddings > 0 (got %g, %g, %g, %g)", L->dir, f, lo, hi, orig);
            return LZ_ECORRUPT;
        }
        c->has_rope_divisors = 1;
        lz_rope_llama3_divisors(c->rope_divisors, c->head_dim, c->rope_theta, (float)f, (float)lo, (float)hi, (float)orig);
        return 0;
    }
    snprintf(L->err, L->errlen, "%s/config.json: rope scaling type '%s' is not supported (llama3, linear are)", L->dir, type);
    return LZ_EUNSUPPORTED;
}

static int parse_config(loader *L, json_t *cfg)
{
    lz_llama *m = L->m;
    lz_llama_config *c = &m->cfg;
    int rc;
    json_t *archs = json_object_get(cfg, "architectures");
    const char *arch = NULL;
    if (json_is_array(archs) && json_array_size(archs) > 0 && json_is_string(json_array_get(archs, 0)))
        arch = json_string_value(json_array_get(archs, 0));
    json_t *mt = json_object_get(cfg, "model_type");
    const char *model_type = json_is_string(mt) ? json_string_value(mt) : NULL;
    if (arch && !strcmp(arch, "LlamaForCausalLM")) snprintf(m->arch, sizeof m->arch, "llama");
    else if (arch && !strcmp(arch, "MistralForCausalLM")) snprintf(m->arch, sizeof m->arch, "mistral");
    else if (!arch && model_type && (!strcmp(model_type, "llama") || !strcmp(model_type, "mistral")))
        snprintf(m->arch, sizeof m->arch, "%s", model_type);
    else {
        snprintf(L->err, L->errlen, "%s/config.json: architecture '%s' is not supported (LlamaForCausalLM, MistralForCausalLM are)",
                 L->dir, arch ? arch : model_type ? model_type : "(none)");
        return LZ_EUNSUPPORTED;
    }
    json_t *act = json_object_get(cfg, "hidden_act");
    if (json_is_string(act) && strcmp(json_string_value(act), "silu")) {
        snprintf(L->err, L->errlen, "%s/config.json: hidden_act '%s' is not supported (silu is)", L->dir, json_string_value(act));
        return LZ_EUNSUPPORTED;
    }
    if (is_true(cfg, "attention_bias") || is_true(cfg, "mlp_bias")) {
        snprintf(L->err, L->errlen, "%s/config.json: attention_bias / mlp_bias are not supported", L->dir);
        return LZ_EUNSUPPORTED;
    }
    int64_t dim, nl, nh, nkv, ffn, hd, ctx, vocab;
    if ((rc = cfg_int(L, cfg, "hidden_size", 0, 1, &dim)) || (rc = cfg_int(L, cfg, "intermediate_size", 0, 1, &ffn)) ||
        (rc = cfg_int(L, cfg, "num_hidden_layers", 0, 1, &nl)) || (rc = cfg_int(L, cfg, "num_attention_heads", 0, 1, &nh)) ||
        (rc = cfg_int(L, cfg, "vocab_size", 0, 1, &vocab)) ||
        (rc = cfg_int(L, cfg, "max_position_embeddings", 2048, 0, &ctx)))
        return rc;
    if (nh <= 0 || dim <= 0) { snprintf(L->err, L->errlen, "%s/config.json: hidden_size and num_attention_heads must be > 0", L->dir); return LZ_ECORRUPT; }
    int64_t window;
    if ((rc = cfg_int(L, cfg, "sliding_window", 0, 0, &window))) return rc;
    if (window > 0 && window < ctx) ctx = window; /* full attention = sliding window up to here */
    if ((rc = cfg_int(L, cfg, "num_key_value_heads", nh, 0, &nkv)) || (rc = cfg_int(L, cfg, "head_dim", dim / nh, 0, &hd)))
        return rc;
    double eps;
    if ((rc = cfg_num(L, cfg, "", "rms_norm_eps", 1e-6, 0, &eps))) return rc;
    c->dim = (int)dim; c->n_layers = (int)nl; c->n_heads = (int)nh; c->n_kv_heads = (int)nkv;
    c->head_dim = (int)hd; c->ffn_dim = (int)ffn; c->vocab = (int)vocab; c->ctx = (int)ctx;
    c->norm_eps = (float)eps;
    c->rope_layout = LZ_ROPE_HALF;
    c->tied_output = is_true(cfg, "tie_word_embeddings");
    c->bos = token_id(json_object_get(cfg, "bos_token_id"));
    c->eos = token_id(json_object_get(cfg, "eos_token_id"));
    if (c->head_dim <= 0 || c->head_dim % 2 || c->head_dim > LZ_MAX_HEAD_DIM || nkv <= 0 || nh % nkv || nl <= 0 ||
        ffn <= 0 || vocab <= 0) {
        snprintf(L->err, L->errlen,
                 "%s/config.json: inconsistent shape: hidden %lld layers %lld heads %lld kv heads %lld head_dim %lld "
                 "(even, <= %d) ffn %lld vocab %lld", L->dir, (long long)dim, (long long)nl, (long long)nh,
                 (long long)nkv, (long long)hd, LZ_MAX_HEAD_DIM, (long long)ffn, (long long)vocab);
        return LZ_ECORRUPT;
    }
    return rope_config(L, cfg);
}

/* Finds tensor name with shape (rows, cols) (cols = 0 for vectors) and
 * returns fp32 weights: in place for aligned F32, converted copy otherwise. */
/* Finds tensor name of shape (rows, cols) (cols 0: a vector) in F32, F16 or BF16. */
static int find(loader *L, const char *name, int64_t rows, int64_t cols, int optional, const lz_st_tensor **out)
{
    const lz_st_tensor *t = lz_st_set_find(L->st, name);
    *out = NULL;
    if (!t) {
        if (optional) return 0;
        snprintf(L->err, L->errlen, "%s: tensor '%s' is missing from the safetensors files", L->dir, name);
        return LZ_ECORRUPT;
    }
    int nd = cols ? 2 : 1;
    if (t->n_dims != nd || t->shape[0] != rows || (nd == 2 && t->shape[1] != cols)) {
        char got[96] = "", want[48];
        for (int d = 0; d < t->n_dims; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        if (nd == 2) snprintf(want, sizeof want, "[%lld, %lld]", (long long)rows, (long long)cols);
        else snprintf(want, sizeof want, "[%lld]", (long long)rows);
        snprintf(L->err, L->errlen, "%s: tensor '%s' in %s has shape [%s], config.json implies %s", L->dir, name, t->file,
                 got, want);
        return LZ_ECORRUPT;
    }
    if (t->dtype != LZ_ST_F32 && t->dtype != LZ_ST_F16 && t->dtype != LZ_ST_BF16) {
        snprintf(L->err, L->errlen, "%s: tensor '%s' in %s has dtype %s (F32, F16, BF16 are supported)", L->dir, name,
                 t->file, lz_st_dtype_name(t->dtype));
        return LZ_EUNSUPPORTED;
    }
    *out = t;
    return 0;
}

/* fp32 values of t: in place when F32 (and aligned), else a widened copy. */
static int to_f32(loader *L, const lz_st_tensor *t, const float **out)
{
    if (t->dtype == LZ_ST_F32 && (uintptr_t)t->data % 4 == 0) {
        *out = t->data;
        return 0;
    }
    float *w = lz_llama_alloc(L->m, (size_t)t->n_elements * sizeof(float));
    if (!w) { snprintf(L->err, L->errlen, "%s: out of memory for tensor '%s'", L->dir, t->name); return LZ_ENOMEM; }
    lz_st_to_f32(t, w);
    *out = w;
    return 0;
}

/* A vector (norm): fp32. */
static int weight(loader *L, const char *name, int64_t rows, int64_t cols, int optional, const float **out)
{
    const lz_st_tensor *t;
    int rc = find(L, name, rows, cols, optional, &t);
    *out = NULL;
    return rc || !t ? rc : to_f32(L, t, out);
}

/* A matrix: F16 / BF16 in place from the mapping (lz_mat_in_place), else fp32. */
static int matrix(loader *L, const char *name, int64_t rows, int64_t cols, lz_mat *out)
{
    const lz_st_tensor *t;
    int rc = find(L, name, rows, cols, 0, &t);
    *out = (lz_mat){NULL, LZ_MAT_F32};
    if (rc) return rc;
    if ((t->dtype == LZ_ST_BF16 || t->dtype == LZ_ST_F16) && (uintptr_t)t->data % 2 == 0 && lz_mat_in_place()) {
        *out = (lz_mat){t->data, t->dtype == LZ_ST_BF16 ? LZ_MAT_BF16 : LZ_MAT_F16};
        return 0;
    }
    const float *w;
    if ((rc = to_f32(L, t, &w))) return rc;
    *out = (lz_mat){w, LZ_MAT_F32};
    return 0;
}

static int load_weights(loader *L)
{
    lz_llama *m = L->m;
    const lz_llama_config *c = &m->cfg;
    int64_t D = c->dim, V = c->vocab, F = c->ffn_dim, Hd = (int64_t)c->n_heads * c->head_dim,
            KVd = (int64_t)c->n_kv_heads * c->head_dim;
    int rc;
    if ((rc = matrix(L, "model.embed_tokens.weight", V, D, &m->tok_embd)) ||
        (rc = weight(L, "model.norm.weight", D, 0, 0, &m->out_norm)))
        return rc;
    if (c->tied_output) m->output = m->tok_embd; /* transformers ties lm_head to the embedding */
    else if ((rc = matrix(L, "lm_head.weight", V, D, &m->output))) return rc;
    m->layers = lz_llama_alloc(m, (size_t)c->n_layers * sizeof *m->layers);
    if (!m->layers) { snprintf(L->err, L->errlen, "%s: out of memory", L->dir); return LZ_ENOMEM; }
    memset(m->layers, 0, (size_t)c->n_layers * sizeof *m->layers);
    for (int l = 0; l < c->n_layers; l++) {
        lz_llama_layer *y = &m->layers[l];
        static const char *suffix[9] = {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                        "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
                                        "mlp.down_proj"};
        char n[9][96];
        for (int i = 0; i < 9; i++) snprintf(n[i], sizeof n[i], "model.layers.%d.%s.weight", l, suffix[i]);
        if ((rc = weight(L, n[0], D, 0, 0, &y->attn_norm)) || (rc = matrix(L, n[1], Hd, D, &y->wq)) ||
            (rc = matrix(L, n[2], KVd, D, &y->wk)) || (rc = matrix(L, n[3], KVd, D, &y->wv)) ||
            (rc = matrix(L, n[4], D, Hd, &y->wo)) || (rc = weight(L, n[5], D, 0, 0, &y->ffn_norm)) ||
            (rc = matrix(L, n[6], F, D, &y->w_gate)) || (rc = matrix(L, n[7], F, D, &y->w_up)) ||
            (rc = matrix(L, n[8], D, F, &y->w_down)))
            return rc;
    }
    return 0;
}

static int load_tokenizer(loader *L)
{
    char tj[4096], tc[4096];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", L->dir);
    snprintf(tc, sizeof tc, "%s/tokenizer_config.json", L->dir);
    if (access(tj, R_OK) != 0) return 0; /* weight-only load */
    char terr[384] = "";
    if (lz_tokenizer_from_hf(tj, access(tc, R_OK) == 0 ? tc : NULL, &L->m->tok, terr, sizeof terr)) {
        snprintf(L->err, L->errlen, "%s: tokenizer: %s", L->dir, terr);
        return LZ_ECORRUPT;
    }
    if (lz_tokenizer_vocab_size(L->m->tok) > L->m->cfg.vocab) {
        snprintf(L->err, L->errlen, "%s: tokenizer has %d tokens but the embedding only %d rows", L->dir,
                 lz_tokenizer_vocab_size(L->m->tok), L->m->cfg.vocab);
        return LZ_ECORRUPT;
    }
    return 0;
}

static void free_set(void *p) { lz_st_set_close(p); }

int lz_llama_load_hf(const char *dir, lz_llama **out, char *err, size_t errlen)
{
    *out = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    if (!cfg) {
        snprintf(err, errlen, "%s: %s (line %d)", path, je.text, je.line);
        return access(path, R_OK) ? LZ_EIO : LZ_ECORRUPT;
    }
    lz_llama *m = calloc(1, sizeof *m);
    if (!m) { json_decref(cfg); return LZ_ENOMEM; }
    loader L = {.m = m, .dir = dir, .err = err, .errlen = errlen};
    int rc = json_is_object(cfg) ? parse_config(&L, cfg)
                                 : (snprintf(err, errlen, "%s: not a JSON object", path), LZ_ECORRUPT);
    json_decref(cfg);
    lz_st_set *st = NULL;
    if (!rc && (rc = lz_st_set_open_dir(dir, &st, err, errlen)) == 0) {
        m->extra = st;
        m->free_extra = free_set;
        L.st = st;
    }
    if (!rc) rc = load_weights(&L);
    if (!rc) rc = load_tokenizer(&L);
    if (!rc) rc = lz_llama_finish(m, err, errlen);
    if (rc) { lz_llama_free(m); return rc; }
    *out = m;
    return 0;
}

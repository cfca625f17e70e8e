/* test_hf.c - the Hugging Face loader against the GGUF loader, without any
 * external model: a random GGUF model (model/mkmodel.c) is written back as a
 * Hugging Face folder (config.json + safetensors, q/k rows un-permuted to the
 * half-split rotary layout), and both loads must give the same logits, also
 * at positions beyond 8192 with llama3 scaling, sharded, in BF16/F16, with a
 * head_dim that is not hidden/heads. lazy-convert must turn the folder back
 * into a GGUF with identical logits. Corrupt safetensors files, unsupported
 * configs and llama3 divisors (hand-computed values) are checked too. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/chat.h"
#include "formats/gguf.h"
#include "base/env.h"
#include "base/half.h"
#include "model/llama.h"
#include "model/mkmodel.h"
#include "formats/safetensors.h"
#include "tests/test.h"

static char tmp[512];

/* Last-position logits of ids[n] starting at position pos0 (malloc'd), and the
 * greedy continuation of n_gen tokens into gen. */
static float *run(const lz_llama *m, const int *ids, int n, int64_t pos0, int n_gen, int *gen)
{
    lz_kv_cache c;
    lz_llama_scratch *s = lz_llama_scratch_new(m, 16);
    float *lg = malloc((size_t)m->cfg.vocab * sizeof(float)), *first = malloc((size_t)m->cfg.vocab * sizeof(float));
    if (!s || !lg || !first || lz_kv_cache_init(&c, &m->cfg, n + n_gen)) { fprintf(stderr, "oom\n"); exit(1); }
    lz_kv_cache_reset(&c, pos0);
    if (lz_llama_forward(m, s, &c, NULL, 0, ids, n, lg, LZ_LOGITS_LAST)) { fprintf(stderr, "forward failed\n"); exit(1); }
    memcpy(first, lg, (size_t)m->cfg.vocab * sizeof(float));
    for (int i = 0; i < n_gen; i++) {
        int b = 0;
        for (int v = 1; v < m->cfg.vocab; v++) if (lg[v] > lg[b]) b = v;
        gen[i] = b;
        if (i + 1 < n_gen) lz_llama_forward(m, s, &c, NULL, 0, &gen[i], 1, lg, LZ_LOGITS_LAST);
    }
    lz_kv_cache_free(&c);
    lz_llama_scratch_free(s);
    free(lg);
    return first;
}

/* max |a-b| / max |b| */
static double rel_err(const float *a, const float *b, int n)
{
    double md = 0, mb = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}

#define F32(p) ((lz_mat){(p), LZ_MAT_F32})

/* One weight to write: fp32 values converted to the folder's dtype. */
typedef struct {
    char name[96];
    int64_t shape[2];
    int n_dims;
    void *data;
} hf_tensor;

static void add(hf_tensor *ts, int *n, const char *name, lz_mat wm, int64_t rows, int64_t cols, int dtype)
{
    float *own;
    const float *w = lz_mat_f32(wm, (size_t)rows * (size_t)(cols ? cols : 1), &own);
    if (!cols) dtype = LZ_ST_F32; /* norms stay F32 (as mkmodel writes them): one file mixes dtypes */
    hf_tensor *t = &ts[(*n)++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    size_t ne = (size_t)rows * (size_t)(cols ? cols : 1);
    t->data = malloc(ne * lz_st_dtype_size(dtype));
    for (size_t i = 0; i < ne; i++) {
        if (dtype == LZ_ST_F32) ((float *)t->data)[i] = w[i];
        else if (dtype == LZ_ST_BF16) ((uint16_t *)t->data)[i] = lz_f32_to_bf16(w[i]);
        else ((uint16_t *)t->data)[i] = lz_f32_to_f16(w[i]);
    }
    free(own);
}

/* q/k rows of H heads from GGUF's adjacent layout back to Hugging Face's
 * half-split layout: out row j*d/2+i = in row 2i+j (inverse of llama.cpp's permute). */
static float *unpermute(lz_mat w, int H, int d, int D)
{
    float *o = malloc((size_t)H * d * D * sizeof(float));
    for (int h = 0; h < H; h++)
        for (int i = 0; i < d / 2; i++)
            for (int j = 0; j < 2; j++)
                lz_mat_get_f32(w, ((size_t)h * d + 2 * i + j) * D, (size_t)D,
                               o + ((size_t)h * d + (size_t)j * (d / 2) + i) * D);
    return o;
}

/* Writes m as a Hugging Face folder. rope_json is the "rope_scaling" value
 * ("null" for none); n_shards 1 writes model.safetensors, more an index. */
static void write_hf(const lz_llama *m, const char *dir, int dtype, int n_shards, const char *rope_json, int permute)
{
    const lz_llama_config *c = &m->cfg;
    char path[1024], rope[512];
    /* transformers 4 writes rope_theta + rope_scaling; transformers 5 one rope_parameters object
     * ("v5:" prefix: rope_json's members go there, with rope_theta) */
    if (!strncmp(rope_json, "v5:", 3))
        snprintf(rope, sizeof rope, "\"rope_parameters\": {\"rope_theta\": %.9g, %s}", c->rope_theta, rope_json + 3);
    else
        snprintf(rope, sizeof rope, "\"rope_theta\": %.9g, \"rope_scaling\": %s", c->rope_theta, rope_json);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f,
            "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": %d,\n"
            " \"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d,\n"
            " \"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, \"max_position_embeddings\": 131072,\n"
            " \"rms_norm_eps\": %.9g, %s, \"tie_word_embeddings\": %s,\n"
            " \"hidden_act\": \"silu\", \"attention_bias\": false, \"bos_token_id\": 1, \"eos_token_id\": [2, 3],\n"
            " \"torch_dtype\": \"float32\"}\n",
            c->dim, c->ffn_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->vocab, c->norm_eps, rope,
            c->tied_output ? "true" : "false");
    fclose(f);
    int D = c->dim, F = c->ffn_dim, V = c->vocab, d = c->head_dim, Hd = c->n_heads * d, KVd = c->n_kv_heads * d;
    hf_tensor *ts = calloc((size_t)(3 + 9 * c->n_layers), sizeof *ts);
    int n = 0;
    add(ts, &n, "model.embed_tokens.weight", m->tok_embd, V, D, dtype);
    add(ts, &n, "model.norm.weight", F32(m->out_norm), D, 0, dtype);
    if (!c->tied_output) add(ts, &n, "lm_head.weight", m->output, V, D, dtype);
    for (int l = 0; l < c->n_layers; l++) {
        const lz_llama_layer *y = &m->layers[l];
        char nm[96];
#define NM(s) (snprintf(nm, sizeof nm, "model.layers.%d." s ".weight", l), nm)
        float *q = permute ? unpermute(y->wq, c->n_heads, d, D) : NULL, *k = permute ? unpermute(y->wk, c->n_kv_heads, d, D) : NULL;
        add(ts, &n, NM("input_layernorm"), F32(y->attn_norm), D, 0, dtype);
        add(ts, &n, NM("self_attn.q_proj"), q ? F32(q) : y->wq, Hd, D, dtype);
        add(ts, &n, NM("self_attn.k_proj"), k ? F32(k) : y->wk, KVd, D, dtype);
        add(ts, &n, NM("self_attn.v_proj"), y->wv, KVd, D, dtype);
        add(ts, &n, NM("self_attn.o_proj"), y->wo, D, Hd, dtype);
        add(ts, &n, NM("post_attention_layernorm"), F32(y->ffn_norm), D, 0, dtype);
        add(ts, &n, NM("mlp.gate_proj"), y->w_gate, F, D, dtype);
        add(ts, &n, NM("mlp.up_proj"), y->w_up, F, D, dtype);
        add(ts, &n, NM("mlp.down_proj"), y->w_down, D, F, dtype);
#undef NM
        free(q);
        free(k);
    }
    lz_st_out *outs = calloc((size_t)n, sizeof *outs);
    for (int i = 0; i < n; i++)
        outs[i] = (lz_st_out){ts[i].name, ts[i].n_dims == 1 ? LZ_ST_F32 : dtype, ts[i].n_dims, ts[i].shape, ts[i].data};
    char err[256];
    if (n_shards <= 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        CHECK(lz_st_write(path, outs, n, err, sizeof err) == 0, "%s", err);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        FILE *ix = fopen(path, "w");
        fprintf(ix, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
        int per = (n + n_shards - 1) / n_shards;
        for (int s = 0; s < n_shards; s++) {
            int lo = s * per, hi = lo + per < n ? lo + per : n;
            char shard[64];
            snprintf(shard, sizeof shard, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
            snprintf(path, sizeof path, "%s/%s", dir, shard);
            CHECK(lz_st_write(path, outs + lo, hi - lo, err, sizeof err) == 0, "%s", err);
            for (int i = lo; i < hi; i++) fprintf(ix, "%s\"%s\": \"%s\"", i ? ", " : "", ts[i].name, shard);
        }
        fprintf(ix, "}}\n");
        fclose(ix);
    }
    for (int i = 0; i < n; i++) free(ts[i].data);
    free(ts);
    free(outs);
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

/* A safetensors file with the given header JSON and data_bytes of zeros. */
static void write_raw_st(const char *path, const char *hdr, uint64_t claimed_len, size_t data_bytes)
{
    size_t hl = strlen(hdr);
    uint8_t *b = calloc(1, 8 + hl + data_bytes);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(claimed_len >> (8 * i));
    memcpy(b + 8, hdr, hl);
    write_bytes(path, b, 8 + hl + data_bytes);
    free(b);
}

static void expect_st_error(const char *name, const char *hdr, int64_t claimed_len, size_t data, const char *needle)
{
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/%s.safetensors", tmp, name);
    write_raw_st(path, hdr, claimed_len < 0 ? strlen(hdr) : (uint64_t)claimed_len, data);
    lz_safetensors *f = NULL;
    int rc = lz_st_open(path, &f, err, sizeof err);
    CHECK(rc == LZ_ECORRUPT && f == NULL, "%s: rc %d", name, rc);
    CHECK(strstr(err, path) != NULL, "%s: error does not name the file: %s", name, err);
    CHECK(strstr(err, needle) != NULL, "%s: error '%s' lacks '%s'", name, err, needle);
    lz_st_close(f);
}

static void test_corrupt_safetensors(void)
{
    const char *ok = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/ok.safetensors", tmp);
    write_raw_st(path, ok, strlen(ok), 24);
    lz_safetensors *f = NULL;
    CHECK(lz_st_open(path, &f, err, sizeof err) == 0, "%s", err);
    if (f) {
        const lz_st_tensor *t = lz_st_find(f, "w");
        CHECK(t && t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->nbytes == 24, "tensor w");
        CHECK(lz_st_find(f, "nope") == NULL, "absent tensor");
        lz_st_close(f);
    }
    expect_st_error("badlen", ok, 1 << 20, 24, "header length");
    expect_st_error("short", "", 0, 0, "too short");
    expect_st_error("pastend", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", -1, 16, "'w'");
    expect_st_error("pastend2", "{\"big\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", -1, 16,
                    "outside the data section");
    expect_st_error("dtype", "{\"w\":{\"dtype\":\"F99\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8, "unknown dtype 'F99'");
    expect_st_error("shape", "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", -1, 24,
                    "dtype BF16 x shape needs 12");
    expect_st_error("json", "{\"w\":{\"dtype\":", -1, 0, "header JSON");
    expect_st_error("negshape", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", -1, 4, "shape[0]");
    expect_st_error("offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", -1, 4, "data_offsets");
}

static void test_llama3_divisors(void)
{
    /* Llama-3.1: theta 500000, d 128, factor 8, low 1, high 4, original 8192
     * (values computed by hand in double precision from transformers' formula) */
    float div[64];
    lz_rope_llama3_divisors(div, 128, 500000.0f, 8.0f, 1.0f, 4.0f, 8192.0f);
    static const struct { int i; double want; } cases[] = {
        {0, 1.0}, {20, 1.0}, {28, 1.0}, {30, 1.5534146285049255}, {31, 2.0263132059050553},
        {32, 2.694529687894733}, {34, 5.257326588708467}, {40, 8.0}, {63, 8.0}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) CHECK_CLOSE(div[cases[k].i], cases[k].want, 0, 2e-5);
}

/* Loads an HF folder and expects failure with needle in the message. */
static void expect_hf_error(const char *dir, int want_rc, const char *needle)
{
    char err[512] = "";
    lz_llama *m = NULL;
    int rc = lz_llama_load_hf(dir, &m, err, sizeof err);
    CHECK(rc == want_rc && m == NULL, "%s: rc %d (want %d): %s", dir, rc, want_rc, err);
    CHECK(strstr(err, needle) != NULL, "error '%s' lacks '%s'", err, needle);
    lz_llama_free(m);
}

/* Replaces the first occurrence of from in dir/config.json by to. */
static void edit_config(const char *dir, const char *from, const char *to)
{
    char path[1024], buf[8192];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "r");
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strstr(buf, from), out[8192];
    if (!p) { CHECK(0, "config has no '%s'", from); return; }
    snprintf(out, sizeof out, "%.*s%s%s", (int)(p - buf), buf, to, p + strlen(from));
    write_bytes(path, out, strlen(out));
}

typedef struct {
    const char *name;
    int head_dim, tied, llama3, dtype, n_shards;
    int64_t pos0;
    int v5; /* config.json in transformers 5's rope_parameters form */
} variant;

static void test_variant(const variant *v)
{
    char gguf[1024], dir[1024], err[512] = "";
    lz_mkmodel_opts o;
    lz_mkmodel_defaults(&o);
    o.head_dim = v->head_dim;
    o.tied = v->tied;
    o.llama3_freqs = v->llama3;
    o.rope_theta = v->llama3 ? 500000.0f : 10000.0f;
    o.tensor_type = v->dtype == LZ_ST_BF16 ? LZ_GGML_BF16 : v->dtype == LZ_ST_F16 ? LZ_GGML_F16 : LZ_GGML_F32;
    o.seed = 7 + (uint64_t)v->head_dim;
    snprintf(gguf, sizeof gguf, "%s/%s.gguf", tmp, v->name);
    snprintf(dir, sizeof dir, "%s/%s", tmp, v->name);
    CHECK(lz_mkmodel_write(&o, gguf, err, sizeof err) == 0, "%s", err);
    lz_llama *g = NULL, *h = NULL;
    CHECK(lz_llama_load_gguf(gguf, &g, err, sizeof err) == 0, "%s", err);
    if (!g) return;
    mkdir(dir, 0755);
    const char *rope = v->llama3 && v->v5 ? "v5:\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                                            "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192"
                       : v->llama3 ? "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                                     "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}"
                       : v->v5     ? "v5:\"rope_type\": \"default\""
                                   : "null";
    write_hf(g, dir, v->dtype, v->n_shards, rope, 1);
    CHECK(lz_llama_load_hf(dir, &h, err, sizeof err) == 0, "%s: %s", v->name, err);
    if (!h) { lz_llama_free(g); return; }
    CHECK(h->cfg.rope_layout == LZ_ROPE_HALF && g->cfg.rope_layout == LZ_ROPE_ADJACENT, "layouts");
    CHECK(h->cfg.tied_output == v->tied, "%s: tied %d", v->name, h->cfg.tied_output);
    CHECK(h->cfg.bos == 1 && h->cfg.eos == 2, "%s: bos %d eos %d", v->name, h->cfg.bos, h->cfg.eos);
    for (int i = 0; i < g->cfg.head_dim / 2; i++)
        CHECK(h->inv_freq[i] == g->inv_freq[i], "%s: inv_freq[%d] %g vs %g", v->name, i, h->inv_freq[i], g->inv_freq[i]);
    /* weights are used in place (F32, and F16 / BF16 matrices; mkmodel's norms are F32): the only
     * allocation is the layer table; LAZY_F32_WEIGHTS=1 widens 16-bit matrices to fp32 copies */
    const int mtype = v->dtype == LZ_ST_BF16 ? LZ_MAT_BF16 : v->dtype == LZ_ST_F16 ? LZ_MAT_F16 : LZ_MAT_F32;
    CHECK(h->n_owned == 1, "%s: %d blocks copied", v->name, h->n_owned);
    CHECK(h->layers[0].wq.type == mtype && h->tok_embd.type == mtype, "%s: matrices in place", v->name);
    lz_llama *h32 = NULL, *g32 = NULL;
    setenv("LAZY_F32_WEIGHTS", "1", 1);
    lz_env_reload(); /* the switches are read once (base/env.h) */
    CHECK(lz_llama_load_hf(dir, &h32, err, sizeof err) == 0, "%s: %s", v->name, err);
    CHECK(lz_llama_load_gguf(gguf, &g32, err, sizeof err) == 0, "%s", err);
    unsetenv("LAZY_F32_WEIGHTS");
    lz_env_reload();
    if (!h32 || !g32) { lz_llama_free(h32); lz_llama_free(g32); lz_llama_free(h); lz_llama_free(g); return; }
    CHECK(h32->layers[0].wq.type == LZ_MAT_F32 && (v->dtype == LZ_ST_F32 ? h32->n_owned == 1 : h32->n_owned > 1),
          "%s: LAZY_F32_WEIGHTS: %d blocks, type %d", v->name, h32->n_owned, h32->layers[0].wq.type);
    CHECK(!memcmp(h32->fingerprint, h->fingerprint, 32) && !memcmp(g32->fingerprint, g->fingerprint, 32),
          "%s: fingerprint depends on the weights' storage", v->name);
    int ids[40], gen_g[8], gen_h[8];
    for (int i = 0; i < 40; i++) ids[i] = 3 + (i * 37 + 11) % (g->cfg.vocab - 3);
    float *lg = run(g, ids, 40, v->pos0, 8, gen_g), *lh = run(h, ids, 40, v->pos0, 8, gen_h);
    int gen_w[8];
    float *lw = run(g32, ids, 40, v->pos0, 8, gen_w); /* every matrix widened at load: OpenBLAS throughout */
    double e = rel_err(lh, lg, g->cfg.vocab), ew = rel_err(lg, lw, g->cfg.vocab);
    /* in place, only the one-token products differ from fp32 copies (summation order) */
    CHECK(ew < 1e-6 && !memcmp(gen_g, gen_w, sizeof gen_g), "%s: in place vs widened rel err %g", v->name, ew);
    CHECK(e < 1e-5, "%s: HF vs GGUF logits rel err %g", v->name, e);
    CHECK(!memcmp(gen_g, gen_h, sizeof gen_g), "%s: greedy continuations differ", v->name);
    printf("%-22s head_dim %2d tied %d llama3 %d %-4s shards %d pos0 %5lld: rel err %.2e, greedy %s\n", v->name,
           v->head_dim, v->tied, v->llama3, lz_st_dtype_name(v->dtype), v->n_shards, (long long)v->pos0, e,
           memcmp(gen_g, gen_h, sizeof gen_g) ? "DIFFER" : "equal");

    /* lazy-convert: the folder back to GGUF (adjacent rows, rope_freqs) gives the original logits */
    const char *bin = getenv("LZ_BIN");
    char conv[1024], cmd[3072];
    snprintf(conv, sizeof conv, "%s/%s.converted.gguf", tmp, v->name);
    snprintf(cmd, sizeof cmd, "%s/lazy-convert %s %s --outtype f32 2>/dev/null", bin ? bin : "build/bin", dir, conv);
    CHECK(system(cmd) == 0, "%s failed", cmd);
    lz_llama *cg = NULL;
    CHECK(lz_llama_load_gguf(conv, &cg, err, sizeof err) == 0, "%s", err);
    if (cg) {
        int gen_c[8];
        float *lc = run(cg, ids, 40, v->pos0, 8, gen_c);
        CHECK(cg->cfg.has_rope_divisors == g->cfg.has_rope_divisors, "rope_freqs written");
        double ec = rel_err(lc, lw, g->cfg.vocab); /* both fp32 in memory: conversion is lossless */
        CHECK(ec == 0, "%s: converted GGUF vs original logits rel err %g", v->name, ec);
        CHECK(!memcmp(gen_g, gen_c, sizeof gen_g), "%s: converted greedy differs", v->name);
        free(lc);
        lz_llama_free(cg);
    }

    /* sensitivity: the same folder without the q/k un-permutation must NOT match */
    if (v->n_shards == 1 && v->dtype == LZ_ST_F32) {
        char bad[1024];
        snprintf(bad, sizeof bad, "%s/%s-unpermuted", tmp, v->name);
        mkdir(bad, 0755);
        write_hf(g, bad, v->dtype, 1, rope, 0);
        lz_llama *b = NULL;
        CHECK(lz_llama_load_hf(bad, &b, err, sizeof err) == 0, "%s", err);
        if (b) {
            int gen_b[8];
            float *lb = run(b, ids, 40, v->pos0, 8, gen_b);
            double eb = rel_err(lb, lg, g->cfg.vocab);
            CHECK(eb > 1e-3, "%s: wrong rotary layout went unnoticed (rel err %g)", v->name, eb);
            free(lb);
            lz_llama_free(b);
        }
    }
    free(lg);
    free(lh);
    free(lw);
    lz_llama_free(h);
    lz_llama_free(g);
    lz_llama_free(h32);
    lz_llama_free(g32);
}

static void test_config_errors(void)
{
    char gguf[1024], dir[1024], err[512] = "";
    lz_mkmodel_opts o;
    lz_mkmodel_defaults(&o);
    snprintf(gguf, sizeof gguf, "%s/cfg.gguf", tmp);
    snprintf(dir, sizeof dir, "%s/cfg", tmp);
    CHECK(lz_mkmodel_write(&o, gguf, err, sizeof err) == 0, "%s", err);
    lz_llama *g = NULL;
    CHECK(lz_llama_load_gguf(gguf, &g, err, sizeof err) == 0, "%s", err);
    if (!g) return;
    mkdir(dir, 0755);
    write_hf(g, dir, LZ_ST_F32, 1, "{\"type\": \"yarn\", \"factor\": 4.0}", 1);
    expect_hf_error(dir, LZ_EUNSUPPORTED, "rope scaling type 'yarn' is not supported");
    edit_config(dir, "{\"type\": \"yarn\", \"factor\": 4.0}", "{\"rope_type\": \"linear\", \"factor\": 2.0}");
    lz_llama *h = NULL;
    CHECK(lz_llama_load_hf(dir, &h, err, sizeof err) == 0, "%s", err);
    if (h) {
        CHECK(h->cfg.has_rope_divisors && h->cfg.rope_divisors[0] == 2.0f && h->inv_freq[1] == g->inv_freq[1] / 2.0f,
              "linear scaling");
        lz_llama_free(h);
    }
    edit_config(dir, "LlamaForCausalLM", "GPT2LMHeadModel");
    expect_hf_error(dir, LZ_EUNSUPPORTED, "architecture 'GPT2LMHeadModel' is not supported");
    edit_config(dir, "GPT2LMHeadModel", "MistralForCausalLM");
    CHECK(lz_llama_load_hf(dir, &h, err, sizeof err) == 0 && !strcmp(h->arch, "mistral"), "mistral: %s", err);
    lz_llama_free(h);
    h = NULL;
    /* a sliding window (not applied) caps the context where full attention is exact */
    edit_config(dir, "\"max_position_embeddings\": 131072", "\"max_position_embeddings\": 131072, \"sliding_window\": 4096");
    CHECK(lz_llama_load_hf(dir, &h, err, sizeof err) == 0 && h->cfg.ctx == 4096, "sliding window caps the context: %s %d",
          err, h ? h->cfg.ctx : -1);
    lz_llama_free(h);
    h = NULL;
    edit_config(dir, "\"sliding_window\": 4096", "\"sliding_window\": null");
    CHECK(lz_llama_load_hf(dir, &h, err, sizeof err) == 0 && h->cfg.ctx == 131072, "null window: full context: %s", err);
    lz_llama_free(h);
    h = NULL;
    edit_config(dir, "\"sliding_window\": null", "\"sliding_window\": \"big\"");
    expect_hf_error(dir, LZ_ECORRUPT, "'sliding_window' must be an integer");
    edit_config(dir, ", \"sliding_window\": \"big\"", "");
    /* config shape disagrees with the tensors */
    char ffn[64], ffn2[64];
    snprintf(ffn, sizeof ffn, "\"intermediate_size\": %d", g->cfg.ffn_dim);
    snprintf(ffn2, sizeof ffn2, "\"intermediate_size\": %d", g->cfg.ffn_dim + 1);
    edit_config(dir, ffn, ffn2);
    expect_hf_error(dir, LZ_ECORRUPT, "tensor 'model.layers.0.mlp.gate_proj.weight'");
    edit_config(dir, ffn2, ffn);
    edit_config(dir, "\"hidden_size\"", "\"hidden_sizes\"");
    expect_hf_error(dir, LZ_ECORRUPT, "'hidden_size' is missing");
    edit_config(dir, "\"hidden_sizes\"", "\"hidden_size\"");
    /* a weight of an unsupported dtype */
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    remove(path);
    int64_t sh[2] = {g->cfg.vocab, g->cfg.dim};
    double *dd = calloc((size_t)g->cfg.vocab * g->cfg.dim, sizeof *dd);
    lz_st_out one = {"model.embed_tokens.weight", LZ_ST_F64, 2, sh, dd};
    CHECK(lz_st_write(path, &one, 1, err, sizeof err) == 0, "%s", err);
    expect_hf_error(dir, LZ_EUNSUPPORTED, "tensor 'model.embed_tokens.weight' in");
    expect_hf_error(dir, LZ_EUNSUPPORTED, "has dtype F64 (F32, F16, BF16 are supported)");
    sh[0] = 1;
    one.name = "model.norm.weight";
    CHECK(lz_st_write(path, &one, 1, err, sizeof err) == 0, "%s", err);
    expect_hf_error(dir, LZ_ECORRUPT, "tensor 'model.embed_tokens.weight' is missing");
    free(dd);
    /* no weights at all */
    remove(path);
    expect_hf_error(dir, LZ_EIO, "neither model.safetensors nor model.safetensors.index.json");
    lz_llama_free(g);
}

static void test_chat(void)
{
    const char *l3 = "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content|trim }}<|eot_id|>{% endfor %}";
    CHECK(lz_chat_detect(l3) == LZ_CHAT_LLAMA3, "llama3 template");
    CHECK(lz_chat_detect("{{ 'Cutting Knowledge Date' }}<|start_header_id|><|end_header_id|><|eot_id|>") == LZ_CHAT_LLAMA31, "3.1");
    CHECK(lz_chat_detect("[INST] {{ m }} [/INST]") == LZ_CHAT_PLAIN && lz_chat_detect(NULL) == LZ_CHAT_PLAIN, "plain");
    lz_chat_msg msgs[2] = {{"system", " Be brief. "}, {"user", "Hi\n"}};
    char *s = NULL;
    CHECK(lz_chat_format_msgs(LZ_CHAT_LLAMA3, msgs, 2, 1, &s) == 0, "format");
    CHECK(s && !strcmp(s, "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                          "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                          "<|start_header_id|>assistant<|end_header_id|>\n\n"), "llama3: %s", s);
    free(s);
    CHECK(lz_chat_format_msgs(LZ_CHAT_LLAMA31, msgs + 1, 1, 1, &s) == 0, "format");
    CHECK(s && !strcmp(s, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                          "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                          "<|start_header_id|>assistant<|end_header_id|>\n\n"), "llama3.1: %s", s);
    free(s);
    CHECK(lz_chat_format_msgs(LZ_CHAT_PLAIN, msgs, 2, 1, &s) == 0, "format");
    CHECK(s && !strcmp(s, "Be brief.\n\nUser: Hi\nAssistant:"), "plain: %s", s);
    free(s);
    /* a folder's template decides; no template means the raw prompt in auto mode */
    char dir[1024], path[1200], err[256] = "";
    snprintf(dir, sizeof dir, "%s/chat", tmp);
    mkdir(dir, 0755);
    int is_chat;
    lz_chat_format fmt;
    CHECK(lz_chat_prompt(dir, LZ_CHAT_AUTO, NULL, "Hello", &s, &is_chat, &fmt, err, sizeof err) == 0, "%s", err);
    CHECK(s && !strcmp(s, "Hello") && !is_chat, "no template: raw prompt");
    free(s);
    CHECK(lz_chat_prompt(dir, LZ_CHAT_ON, NULL, "Hello", &s, &is_chat, &fmt, err, sizeof err) == 0, "%s", err);
    CHECK(s && !strcmp(s, "User: Hello\nAssistant:") && is_chat && fmt == LZ_CHAT_PLAIN, "forced plain: %s", s);
    free(s);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    const char *cfg = "{\"model_max_length\": 1000000000000000019884624838656, \"chat_template\": "
                      "\"<|start_header_id|>{{ r }}<|end_header_id|>\\n\\n<|eot_id|>\"}";
    write_bytes(path, cfg, strlen(cfg));
    CHECK(lz_chat_prompt(dir, LZ_CHAT_AUTO, NULL, "Hello", &s, &is_chat, &fmt, err, sizeof err) == 0, "%s", err);
    CHECK(s && is_chat && fmt == LZ_CHAT_LLAMA3 &&
          !strcmp(s, "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
          "auto llama3: %s", s);
    free(s);
    CHECK(lz_chat_prompt(dir, LZ_CHAT_OFF, NULL, "Hello", &s, &is_chat, &fmt, err, sizeof err) == 0 && !is_chat &&
          !strcmp(s, "Hello"), "off");
    free(s);
    /* the shared Llama-3.1 tokenizer config, when present */
    char fx[1024];
    if (lz_test_fixture("tokenizers/llama3.1-tokenizer_config.json", fx, sizeof fx)) {
        char fdir[600];
        snprintf(fdir, sizeof fdir, "%s/fixture", tmp);
        mkdir(fdir, 0755);
        snprintf(path, sizeof path, "%s/tokenizer_config.json", fdir);
        char abs[4096];
        CHECK(realpath(fx, abs) && symlink(abs, path) == 0, "symlink %s", path);
        char *t = NULL;
        CHECK(lz_chat_template_hf(fdir, &t, err, sizeof err) == 0 && t, "fixture template: %s", err);
        CHECK(lz_chat_detect(t) == LZ_CHAT_LLAMA3, "fixture template is Llama-3's");
        free(t);
    }
}

int main(void)
{
    if (!lz_test_tmpdir(tmp, sizeof tmp)) { fprintf(stderr, "mkdtemp failed\n"); return 1; }
    lz_llama_set_threads(2);
    test_llama3_divisors();
    test_corrupt_safetensors();
    static const variant vs[] = {
        {"untied-f32", 16, 0, 0, LZ_ST_F32, 1, 0, 0},
        {"llama3-f32-pos9000", 16, 0, 1, LZ_ST_F32, 1, 9000, 0},
        {"llama3-v5cfg-pos8100", 16, 0, 1, LZ_ST_F32, 1, 8100, 1},
        {"tied-gqa-sharded", 16, 1, 1, LZ_ST_F32, 3, 8170, 0},
        {"headdim24-bf16", 24, 0, 1, LZ_ST_BF16, 1, 8180, 0},
        {"headdim24-f16-sharded", 24, 1, 0, LZ_ST_F16, 2, 100, 1},
    };
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) test_variant(&vs[i]);
    test_config_errors();
    test_chat();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmp);
    return lz_test_done();
}

/* mkmodel.c - random-weight GGUF Llama models (see mkmodel.h). Weights are
 * uniform in +-1/sqrt(fan_in) from a seeded generator, norms near 1, so the
 * activations stay in a realistic range. */
#include "model/mkmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf_write.h"
#include "base/rope.h"

void lz_mkmodel_defaults(lz_mkmodel_opts *o)
{
    memset(o, 0, sizeof *o);
    o->dim = 64; o->n_layers = 2; o->n_heads = 4; o->n_kv_heads = 2; o->head_dim = 16;
    o->ffn_dim = 172; o->vocab = 512; o->ctx = 2048;
    o->rope_theta = 10000.0f; o->norm_eps = 1e-5f;
    o->tensor_type = LZ_GGML_F32;
    o->seed = 1;
}

static uint64_t next(uint64_t *s)
{
    *s ^= *s >> 12; *s ^= *s << 25; *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}
static float uniform(uint64_t *s) { return (float)(next(s) >> 40) / 16777216.0f * 2.0f - 1.0f; } /* [-1, 1) */

/* Vocabulary: <unk> <s> </s>, 256 byte tokens, then pieces in merge order. */
static int build_vocab(int V, char ***tokens_out, float **scores_out, int32_t **types_out)
{
    char **tok = calloc((size_t)V, sizeof *tok);
    float *score = calloc((size_t)V, sizeof *score);
    int32_t *type = calloc((size_t)V, sizeof *type);
    if (!tok || !score || !type) goto oom;
    int n = 0;
    const char *special[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3 && n < V; i++) { tok[n] = strdup(special[i]); type[n] = i == 0 ? 2 : 3; n++; }
    for (int b = 0; b < 256 && n < V; b++) {
        char buf[8];
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        tok[n] = strdup(buf); type[n] = 6; n++;
    }
    static const char *words[] = {"the", "and", "was", "to", "a", "of", "in", "he", "she", "it", "on", "for",
                                  "Once", "upon", "time", "there", "little", "girl", "boy", "named", "big",
                                  "day", "play", "with", "his", "her", "they", "said", "is", "at"};
    /* 1) "▁" and printable ASCII characters */
    int base = n;
    if (n < V) { tok[n] = strdup("\xe2\x96\x81"); type[n] = 1; n++; }
    for (int c = 33; c < 127 && n < V; c++) { char b[2] = {(char)c, 0}; tok[n] = strdup(b); type[n] = 1; n++; }
    /* 2) "▁x" for letters, 3) whole words, 4) letter pairs */
    for (int c = 'a'; c <= 'z' && n < V; c++) { char b[8]; snprintf(b, sizeof b, "\xe2\x96\x81%c", c); tok[n] = strdup(b); type[n] = 1; n++; }
    for (size_t w = 0; w < sizeof words / sizeof *words && n < V; w++) {
        char b[64];
        snprintf(b, sizeof b, "\xe2\x96\x81%s", words[w]);
        tok[n] = strdup(b); type[n] = 1; n++;
    }
    for (int a = 'a'; a <= 'z' && n < V; a++)
        for (int c = 'a'; c <= 'z' && n < V; c++) { char b[3] = {(char)a, (char)c, 0}; tok[n] = strdup(b); type[n] = 1; n++; }
    for (int a = 'a'; a <= 'z' && n < V; a++)
        for (int c = 'a'; c <= 'z' && n < V; c++) {
            char b[8];
            snprintf(b, sizeof b, "\xe2\x96\x81%c%c", a, c);
            tok[n] = strdup(b); type[n] = 1; n++;
        }
    for (int i = 0; n < V; i++) { char b[32]; snprintf(b, sizeof b, "<unused%d>", i); tok[n] = strdup(b); type[n] = 5; n++; }
    for (int i = 0; i < V; i++) {
        if (!tok[i]) goto oom;
        score[i] = i >= base ? -(float)(i - base) : 0.0f;
    }
    *tokens_out = tok; *scores_out = score; *types_out = type;
    return 0;
oom:
    if (tok) for (int i = 0; i < V; i++) free(tok[i]);
    free(tok); free(score); free(type);
    return -1;
}

int lz_mkmodel_write(const lz_mkmodel_opts *o, const char *path, char *err, size_t errlen)
{
    if (o->dim <= 0 || o->n_layers <= 0 || o->n_heads <= 0 || o->n_kv_heads <= 0 || o->n_heads % o->n_kv_heads ||
        o->head_dim <= 0 || o->head_dim % 2 || o->ffn_dim <= 0 || o->vocab < 3 + 256 + 96) {
        snprintf(err, errlen, "invalid shape (need heads %% kv_heads == 0, even head_dim, vocab >= %d)", 3 + 256 + 96);
        return -1;
    }
    lz_gguf_writer *w = lz_gguf_writer_new();
    char **tok = NULL;
    float *score = NULL, *buf = NULL;
    int32_t *type = NULL;
    int rc = -1;
    if (!w || build_vocab(o->vocab, &tok, &score, &type)) { snprintf(err, errlen, "out of memory"); goto done; }
    int bad = lz_gguf_write_str(w, "general.architecture", "llama") ||
              lz_gguf_write_str(w, "general.name", "lazy random model") ||
              lz_gguf_write_u32(w, "llama.context_length", (uint32_t)o->ctx) ||
              lz_gguf_write_u32(w, "llama.embedding_length", (uint32_t)o->dim) ||
              lz_gguf_write_u32(w, "llama.block_count", (uint32_t)o->n_layers) ||
              lz_gguf_write_u32(w, "llama.feed_forward_length", (uint32_t)o->ffn_dim) ||
              lz_gguf_write_u32(w, "llama.attention.head_count", (uint32_t)o->n_heads) ||
              lz_gguf_write_u32(w, "llama.attention.head_count_kv", (uint32_t)o->n_kv_heads) ||
              lz_gguf_write_u32(w, "llama.attention.key_length", (uint32_t)o->head_dim) ||
              lz_gguf_write_u32(w, "llama.attention.value_length", (uint32_t)o->head_dim) ||
              lz_gguf_write_u32(w, "llama.rope.dimension_count", (uint32_t)o->head_dim) ||
              lz_gguf_write_f32(w, "llama.rope.freq_base", o->rope_theta) ||
              lz_gguf_write_f32(w, "llama.attention.layer_norm_rms_epsilon", o->norm_eps) ||
              lz_gguf_write_str(w, "tokenizer.ggml.model", "llama") ||
              lz_gguf_write_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, (uint64_t)o->vocab) ||
              lz_gguf_write_arr(w, "tokenizer.ggml.scores", LZ_GGUF_FLOAT32, score, (uint64_t)o->vocab) ||
              lz_gguf_write_arr(w, "tokenizer.ggml.token_type", LZ_GGUF_INT32, type, (uint64_t)o->vocab) ||
              lz_gguf_write_u32(w, "tokenizer.ggml.bos_token_id", 1) ||
              lz_gguf_write_u32(w, "tokenizer.ggml.eos_token_id", 2) ||
              lz_gguf_write_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    uint64_t rng = o->seed ? o->seed : 1;
    int64_t D = o->dim, F = o->ffn_dim, Hd = (int64_t)o->n_heads * o->head_dim, KVd = (int64_t)o->n_kv_heads * o->head_dim;
    size_t maxn = (size_t)(o->vocab * D > F * D ? o->vocab * D : F * D);
    if ((size_t)(Hd * D) > maxn) maxn = (size_t)(Hd * D);
    buf = malloc(maxn * sizeof(float));
    if (!buf) { snprintf(err, errlen, "out of memory"); goto done; }
#define MAT(name, in, out, t)                                                                    \
    do {                                                                                         \
        float s_ = 1.0f / sqrtf((float)(in));                                                    \
        for (int64_t i_ = 0; i_ < (int64_t)(in) * (out); i_++) buf[i_] = uniform(&rng) * s_;     \
        int64_t ne_[2] = {(in), (out)};                                                          \
        bad |= lz_gguf_write_tensor(w, name, t, 2, ne_, buf);                                    \
    } while (0)
#define NORM(name, n)                                                                            \
    do {                                                                                         \
        for (int64_t i_ = 0; i_ < (n); i_++) buf[i_] = 1.0f + 0.1f * uniform(&rng);              \
        int64_t ne_[1] = {(n)};                                                                  \
        bad |= lz_gguf_write_tensor(w, name, LZ_GGML_F32, 1, ne_, buf);                          \
    } while (0)
    {
        /* embeddings ~ unit-variance rows so logits are spread */
        for (int64_t i = 0; i < (int64_t)o->vocab * D; i++) buf[i] = uniform(&rng);
        int64_t ne[2] = {D, o->vocab};
        bad |= lz_gguf_write_tensor(w, "token_embd.weight", o->tensor_type, 2, ne, buf);
    }
    NORM("output_norm.weight", D);
    if (!o->tied) MAT("output.weight", D, o->vocab, o->tensor_type);
    if (o->llama3_freqs) {
        lz_rope_llama3_divisors(buf, o->head_dim, o->rope_theta, 8.0f, 1.0f, 4.0f, 8192.0f);
        int64_t ne[1] = {o->head_dim / 2};
        bad |= lz_gguf_write_tensor(w, "rope_freqs.weight", LZ_GGML_F32, 1, ne, buf);
    }
    for (int l = 0; l < o->n_layers; l++) {
        char n[64];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s ".weight", l), n)
        NORM(NAME("attn_norm"), D);
        MAT(NAME("attn_q"), D, Hd, o->tensor_type);
        MAT(NAME("attn_k"), D, KVd, o->tensor_type);
        MAT(NAME("attn_v"), D, KVd, o->tensor_type);
        MAT(NAME("attn_output"), Hd, D, o->tensor_type);
        NORM(NAME("ffn_norm"), D);
        MAT(NAME("ffn_gate"), D, F, o->tensor_type);
        MAT(NAME("ffn_up"), D, F, o->tensor_type);
        MAT(NAME("ffn_down"), F, D, o->tensor_type);
#undef NAME
    }
#undef MAT
#undef NORM
    if (bad) { snprintf(err, errlen, "could not build the model (out of memory, or Q8_0 with a dimension not a multiple of 32)"); goto done; }
    rc = lz_gguf_writer_save(w, path, err, errlen);
done:
    if (tok) for (int i = 0; i < o->vocab; i++) free(tok[i]);
    free(tok); free(score); free(type); free(buf);
    lz_gguf_writer_free(w);
    return rc;
}

/* llama.h - the Llama-family decoder on the CPU, fp32 math (bf16 / fp16 / Q8_0
 * are widened as they are read, formats/weights.h): weights, KV cache,
 * batched forward pass with optional external KV segments (lazy attention).
 *
 * Legend: D = model width, L = layers, H = query heads, KV = key/value heads
 * (GQA: H % KV == 0), d = head_dim (may differ from D/H), F = FFN width,
 * V = vocabulary, n = tokens in a forward call, T = cache capacity (tokens).
 *
 * Weight matrices are row-major (out_features, in_features), as GGUF stores
 * them (ne[0] = in). q/k rows are in the model's rotary layout (cfg.rope_layout:
 * ADJACENT for GGUF, HALF for raw Hugging Face weights); the rotary math is
 * base/rope.h and nowhere else.
 *
 * External segments (cached documents): each holds K/V for every (layer, kv
 * head), keys rotated at their stored positions; the forward pass attends to
 * them before the cache's own tokens and applies the missing rotation `rot`
 * (placement offset minus stored base) to the query, never to the keys.
 */
#ifndef LZ_LLAMA_H
#define LZ_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "base/rope.h"
#include "tokenizer/tokenizer.h"
#include "formats/weights.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LZ_MAX_HEAD_DIM 256

typedef struct {
    int dim;        /* D */
    int n_layers;   /* L */
    int n_heads;    /* H */
    int n_kv_heads; /* KV */
    int head_dim;   /* d */
    int ffn_dim;    /* F */
    int vocab;      /* V */
    int ctx;        /* trained context length (informational; positions are not capped) */
    float norm_eps;
    float rope_theta;
    int rope_layout;                          /* lz_rope_layout */
    int has_rope_divisors;
    float rope_divisors[LZ_MAX_HEAD_DIM / 2]; /* per-pair frequency divisors (llama3 / linear scaling) */
    int tied_output;                          /* output == tok_embd */
    int bos, eos;                             /* -1 if unknown */
} lz_llama_config;

/* Matrices are lz_mat (fp32, or bf16 / fp16 in place from the file:
 * formats/weights.h); norm vectors are always fp32. */
typedef struct {
    const float *attn_norm; /* (D) */
    lz_mat wq;              /* (H*d, D) */
    lz_mat wk;              /* (KV*d, D) */
    lz_mat wv;              /* (KV*d, D) */
    lz_mat wo;              /* (D, H*d) */
    const float *ffn_norm;  /* (D) */
    lz_mat w_gate;          /* (F, D)  ffn_gate, "w1" */
    lz_mat w_up;            /* (F, D)  ffn_up,   "w3" */
    lz_mat w_down;          /* (D, F)  ffn_down, "w2" */
} lz_llama_layer;

typedef struct lz_llama {
    lz_llama_config cfg;
    lz_mat tok_embd;       /* (V, D) */
    const float *out_norm; /* (D) */
    lz_mat output;         /* (V, D); == tok_embd when tied */
    lz_llama_layer *layers;/* (L) */
    float inv_freq[LZ_MAX_HEAD_DIM / 2]; /* (d/2) rotary inverse frequencies, divisors applied */
    uint8_t fingerprint[32];             /* sha256 of config, vocabulary and sampled weights */
    char fingerprint_hex[65];
    char arch[32];                       /* "llama", "mistral", ... */
    lz_tokenizer *tok;                   /* owned; may be NULL for weight-only loads */
    /* ownership (freed by lz_llama_free) */
    void **owned;          /* malloc'd blocks */
    int n_owned, cap_owned;
    void *gguf;            /* lz_gguf* kept open when weights point into its mapping */
    void *extra;           /* loader-specific resources (e.g. safetensors mappings) */
    void (*free_extra)(void *);
} lz_llama;

/* Status: base/status.h (LZ_OK or an LZ_E* code). */

/* Loads a GGUF file or a Hugging Face folder (config.json + *.safetensors +
 * tokenizer.json), chosen by what path is. */
int lz_llama_load(const char *path, lz_llama **out, char *err, size_t errlen);
int lz_llama_load_gguf(const char *path, lz_llama **out, char *err, size_t errlen);
/* Hugging Face folder: config.json, model.safetensors or sharded with
 * model.safetensors.index.json, tokenizer.json (model/load_hf.c). */
int lz_llama_load_hf(const char *dir, lz_llama **out, char *err, size_t errlen);
void lz_llama_free(lz_llama *m); /* NULL is a no-op */

/* For loaders: allocate a block owned by the model (freed with it). */
void *lz_llama_alloc(lz_llama *m, size_t bytes);
/* For loaders: validates shapes and config, computes inv_freq and the
 * fingerprint. Call once every weight pointer is set. */
int lz_llama_finish(lz_llama *m, char *err, size_t errlen);

/* Threads used by the forward pass (OpenMP threads, each calling single-threaded OpenBLAS);
 * <= 0 means all cores. A program that never calls it gets all cores when it makes its first
 * lz_llama_scratch_new. */
void lz_llama_set_threads(int n);

/* KV cache of the tokens a sequence computed itself. Keys are stored rotated
 * at their absolute positions pos0 + t. */
typedef struct {
    int n_layers, n_kv_heads, head_dim;
    int cap;      /* T */
    int n;        /* tokens held */
    int64_t pos0; /* position of token 0 */
    float *k;     /* (L, KV, T, d) */
    float *v;     /* (L, KV, T, d) */
} lz_kv_cache;

int lz_kv_cache_init(lz_kv_cache *c, const lz_llama_config *cfg, int cap);
void lz_kv_cache_free(lz_kv_cache *c);
/* Empties the cache; the next token is at position pos0. */
void lz_kv_cache_reset(lz_kv_cache *c, int64_t pos0);

/* External KV block (a cached document or the shared prefix). */
typedef struct {
    const float *k;      /* (L, KV, stride, d) keys rotated at stored positions */
    const float *v;      /* (L, KV, stride, d) */
    const int *n_kept;   /* (L, KV) tokens kept per head, or NULL: all heads have n */
    int n;               /* tokens */
    int stride;          /* token stride of k/v per (layer, head), >= every kept count */
    int64_t rot;         /* rotation missing from the stored keys (placement - stored base) */
    const int64_t *head_row; /* (L, KV) first token row of each (layer, kv head) block in k and v
                              * (packed storage of unequal kept counts), or NULL: (l * KV + h) * stride */
    const uint16_t *k16;     /* bf16 keys and values in the same layout, read instead of k and v when */
    const uint16_t *v16;     /* set (a bf16 store's payload as it is: half the memory, the same values) */
    const uint8_t *k8;       /* fp8 e4m3 keys and values in the same layout (an fp8 store's payload as it */
    const uint8_t *v8;       /* is, schema/PAYLOAD.md), read instead of k16 / k when set: element = */
    const float *k_scales;   /* lz_e4m3_to_f32(byte) * k_scales[l * KV + h] (values: v_scales), one */
    const float *v_scales;   /* scale a (layer, kv head); all four set together */
} lz_kv_segment;

/* Element offset of segment block (layer l, kv head h) in k and v. */
static inline size_t lz_kv_segment_block(const lz_kv_segment *sg, int l, int h, int KV, int d)
{
    size_t lh = (size_t)l * KV + h;
    return (sg->head_row ? (size_t)sg->head_row[lh] : lh * (size_t)sg->stride) * (size_t)d;
}

/* Scratch for forward calls of up to max_batch tokens. */
typedef struct lz_llama_scratch lz_llama_scratch;
lz_llama_scratch *lz_llama_scratch_new(const lz_llama *m, int max_batch);
void lz_llama_scratch_free(lz_llama_scratch *s);
/* Optional query capture (KV eviction scoring, diagnostics): while set, every
 * forward call through s copies the ROTATED query rows of absolute positions
 * [first_pos, first_pos + count) of every layer into q_out (L, count, H, d),
 * row first_pos + r of layer l at q_out[(l * count + r) * H * d]. Rows the
 * calls never reach are left untouched. count <= 0 (or q_out NULL) turns it
 * off; costs nothing when off. */
void lz_llama_scratch_capture(lz_llama_scratch *s, float *q_out, int64_t first_pos, int count);

enum { LZ_LOGITS_NONE = 0, LZ_LOGITS_LAST = 1, LZ_LOGITS_ALL = 2 };

/* Runs n tokens at positions cache->pos0 + cache->n + i through the model,
 * appending their K/V to cache. Each token attends to all segments (in
 * order, every key visible) and causally to the cache. logits receives
 * (V) for LZ_LOGITS_LAST, (n, V) for LZ_LOGITS_ALL, nothing for NONE.
 * n may exceed the scratch's max_batch (processed in chunks). Returns 0, or
 * -1 if the cache is full or an argument is invalid. */
int lz_llama_forward(const lz_llama *m, lz_llama_scratch *s, lz_kv_cache *cache,
                     const lz_kv_segment *segs, int n_segs,
                     const int *tokens, int n, float *logits, int logits_mode);

/* One sequence of a batched forward call: n tokens at positions cache->pos0 + cache->n + i,
 * appended to its own cache, attending to its own segments (as lz_llama_forward). */
typedef struct {
    lz_kv_cache *cache;        /* its cache: one entry a cache in a call */
    const lz_kv_segment *segs; /* (n_segs) */
    int n_segs;
    const int *tokens;         /* (n) */
    int n;
    float *logits;             /* (V) the last token's logits, or NULL: none */
} lz_llama_seq;

/* Runs every sequence of seqs[0..n_seqs) through the model in one pass (continuous
 * batching: B decode tokens, or question prefills of several requests): the projections
 * run over all their rows at once, so the weights are read once per max_batch rows however
 * many sequences there are; rope, the cache append and attention run per sequence. The
 * results equal lz_llama_forward's per sequence to fp32 rounding (the products sum in
 * another order; one sequence alone gives the same bits). 0, or -1 when a cache is full, a
 * cache appears twice, a token is out of range or memory runs out (the caches may then
 * hold some of the tokens: start those sequences again). */
int lz_llama_forward_batch(const lz_llama *m, lz_llama_scratch *s, const lz_llama_seq *seqs, int n_seqs);

#ifdef __cplusplus
}
#endif
#endif /* LZ_LLAMA_H */

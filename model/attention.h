/* attention.h - lazy attention on the CPU in fp32: n query rows of one layer
 * attend to external KV segments (cached documents, each missing a rotation
 * `rot` that is applied to the query: q . R(rot) K = (R(-rot) q) . K) and then
 * causally to the sequence's own cached keys. GQA; per-head kept lengths.
 *
 * Legend: n = query rows, H = query heads, KV = kv heads, d = head_dim,
 * T = cache capacity (token stride of the cache).
 */
#ifndef LZ_ATTENTION_H
#define LZ_ATTENTION_H

#include "model/llama.h"

typedef struct {
    const float *q;            /* (n, H, d) queries, rotated at their absolute positions */
    float *out;                /* (n, H, d) */
    int n, n_heads, n_kv_heads, head_dim;
    int layer;                 /* selects each segment's (layer, kv head) blocks */
    const lz_kv_segment *segs; /* (n_segs) attended fully, in order, before the cache */
    int n_segs;
    const float *k, *v;        /* (KV, T, d) the cache of this layer */
    int cache_stride;          /* T */
    int n_past;                /* cache tokens before query row 0; row i sees n_past + i + 1 */
    const float *inv_freq;     /* (d/2) rotary inverse frequencies */
    int rope_layout;           /* lz_rope_layout */
} lz_attn_params;

/* Computes out, choosing the path by the number of query rows. Parallel
 * over OpenMP threads (OpenBLAS single-threaded inside). Returns 0, or -1 on
 * allocation failure. */
int lz_attention_cpu(const lz_attn_params *p);
/* The two paths, exposed for tests: per (row, head) dot products, and GEMMs
 * over blocks of rows of one KV head's group. Same results to fp32 rounding. */
int lz_attention_cpu_rows(const lz_attn_params *p);
int lz_attention_cpu_gemm(const lz_attn_params *p);

#endif /* LZ_ATTENTION_H */

/* lz_kvmass.h - KV eviction's attention masses (ingest/kvpolicy.h,
 * lz_kvpolicy_mass: the heavy part of its scoring) from the keys as the GPU
 * keeps them (bf16): for layer l, kv group g and head hh of the group,
 *   mass[l][g][hh][j] = sum over window rows t of
 *       softmax_i(q[l][t][g*G + hh] . key_i / sqrt(d))  at key i = s + j,
 * where row t is document token n - w + t and sees the s prefix keys and the
 * document's keys 0 .. n - w + t (causal); candidates j < m. The GPU kernel
 * runs one CTA per (layer, kv group), one warp per head of the group, a lane
 * per window row; each head's sums are made by one warp in key order, so the
 * result does not depend on scheduling.
 *
 * Legend: L = layers, H / KV = heads, G = H / KV, d = head_dim, s = prefix
 * tokens, n = document tokens, w = window rows, m = candidate keys.
 */
#ifndef LZ_KVMASS_H
#define LZ_KVMASS_H

#include "kernels/lz_attn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float *mass;       /* (L, KV, G, m) out */
    const float *q;    /* (L, w, H, d) the window's rotated queries */
    const lz_bf16 *k;  /* (L, KV, k_stride, d) document keys, token j at row j */
    const lz_bf16 *pk; /* (L, KV, pk_stride, d) prefix keys (NULL when s = 0) */
    int k_stride, pk_stride;
    int n_prefix, n, w, m; /* s; n; 1 <= w <= n; 1 <= m <= n (m = 0: n - w) */
    int L, H, KV, d;       /* H % KV == 0, G <= 32; d even, <= 128 (the GPU: G <= 8, d 64 or 128) */
} lz_kvmass_params;

int lz_kvmass(const lz_kvmass_params *p, void *stream);     /* CUDA */
int lz_kvmass_ref(const lz_kvmass_params *p, void *stream); /* CPU: plain loops, one row at a time */
/* LZ_ATTN_OK, or LZ_ATTN_EARG on bad shapes (both check alike). */
int lz_kvmass_check(const lz_kvmass_params *p);

#ifdef __cplusplus
}
#endif
#endif /* LZ_KVMASS_H */

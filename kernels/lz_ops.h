/* lz_ops.h - the small kernels of the GPU forward pass (gpu/llama_cuda*.cu):
 * embedding lookup, rmsnorm, rotary into head-major layout, silu-gate, the
 * token-major transpose and the own sequence's bookkeeping. Each CUDA
 * launcher (kernels/lz_ops.cu; device pointers, asynchronous on stream) has a
 * CPU reference with the same signature (kernels/lz_ops_ref.c; host
 * pointers, stream ignored); tests/cuda/test_ops.cu compares them on random
 * inputs. Plain C. Return 0, or a cudaError_t.
 *
 * Legend: n = tokens (rows), D = width, H / KV = heads, d = head_dim, N =
 * rows a layer's own sequence holds, L = layers, W = segments + 1.
 */
#ifndef LZ_OPS_H
#define LZ_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/lz_attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* x (n, D) fp32 = rows ids[0..n) of table (V, D) bf16 */
int lz_op_embed(float *x, const lz_bf16 *table, const int *ids, int n, int D, void *stream);
int lz_op_embed_ref(float *x, const lz_bf16 *table, const int *ids, int n, int D, void *stream);

/* out (n, D) bf16 = x / sqrt(mean(x^2) + eps) * w, row by row */
int lz_op_rmsnorm(lz_bf16 *out, const float *x, const float *w, int n, int D, float eps, void *stream);
int lz_op_rmsnorm_ref(lz_bf16 *out, const float *x, const float *w, int n, int D, float eps, void *stream);

/* Token-major q (n, H, d), k and v (n, KV, d), fp32, rows ld floats apart
 * (0: packed, H * d for q and KV * d for k and v; one product's (n, (H + 2
 * KV) d) output is q, k = q + H d, v = k + KV d with ld = (H + 2 KV) d), to
 * head-major bf16 qh (H, n, d), kh and vh (KV, n, d): q and k rotated at
 * position pos0 + i (+ *count when count is not NULL: a length kept in the
 * same memory as the data), layout and inv_freq as base/rope.h. qcap (cw,
 * H, d) fp32, when not NULL, receives the rotated q of rows c0 .. c0 + cw -
 * 1. d even, <= 512 (else LZ_ATTN_EHEADDIM). */
int lz_op_heads(lz_bf16 *qh, lz_bf16 *kh, lz_bf16 *vh, const float *q, const float *k, const float *v, int ld, int n,
                int H, int KV, int d, int64_t pos0, const int *count, int layout, const float *inv_freq, float *qcap,
                int c0, int cw, void *stream);
int lz_op_heads_ref(lz_bf16 *qh, lz_bf16 *kh, lz_bf16 *vh, const float *q, const float *k, const float *v, int ld,
                    int n, int H, int KV, int d, int64_t pos0, const int *count, int layout, const float *inv_freq,
                    float *qcap, int c0, int cw, void *stream);

/* lz_op_heads (no window queries) that also appends k and v, as
 * lz_op_append, to a layer's own rows own_k, own_v (KV, N, d) after *count
 * (count required): a decode step's rotary and both appends in one launch,
 * bit for bit the three. On sm_90 launched as a programmatic dependent of the
 * kernel before it (which must be the one that wrote q, k, v or later). */
int lz_op_heads_own(lz_bf16 *qh, lz_bf16 *kh, lz_bf16 *vh, lz_bf16 *own_k, lz_bf16 *own_v, int N, const float *q,
                    const float *k, const float *v, int ld, int n, int H, int KV, int d, int64_t pos0,
                    const int *count, int layout, const float *inv_freq, void *stream);
int lz_op_heads_own_ref(lz_bf16 *qh, lz_bf16 *kh, lz_bf16 *vh, lz_bf16 *own_k, lz_bf16 *own_v, int N, const float *q,
                        const float *k, const float *v, int ld, int n, int H, int KV, int d, int64_t pos0,
                        const int *count, int layout, const float *inv_freq, void *stream);

/* out[e] = bf16(silu(gate[e]) * up[e]), e < count */
int lz_op_silu_mul(lz_bf16 *out, const float *gate, const float *up, size_t count, void *stream);
int lz_op_silu_mul_ref(lz_bf16 *out, const float *gate, const float *up, size_t count, void *stream);

/* The same over one product's gate and up rows side by side: out (n, F) =
 * bf16(silu(gu[i][e]) * gu[i][F + e]), gu (n, 2F) fp32; bit for bit as
 * lz_op_silu_mul on the halves. */
int lz_op_swiglu(lz_bf16 *out, const float *gu, int n, int F, void *stream);
int lz_op_swiglu_ref(lz_bf16 *out, const float *gu, int n, int F, void *stream);

/* out (n, H * d) = oh (H, n, d) */
int lz_op_tokens(lz_bf16 *out, const lz_bf16 *oh, int n, int H, int d, void *stream);
int lz_op_tokens_ref(lz_bf16 *out, const lz_bf16 *oh, int n, int H, int d, void *stream);

/* The own sequence (a decode step reads its length from memory, so a
 * captured graph replays): qlen[(l * W + S) * KV + h] = *count for every
 * layer l < L and kv head h; own (KV, N, d) rows *count .. *count + n - 1 =
 * t (KV, n, d); *count += n. */
int lz_op_own_len(int32_t *qlen, int L, int W, int S, int KV, const int *count, void *stream);
int lz_op_own_len_ref(int32_t *qlen, int L, int W, int S, int KV, const int *count, void *stream);
int lz_op_append(lz_bf16 *own, const lz_bf16 *t, int n, int KV, int N, int d, const int *count, void *stream);
int lz_op_append_ref(lz_bf16 *own, const lz_bf16 *t, int n, int KV, int N, int d, const int *count, void *stream);
int lz_op_count_add(int *count, int n, void *stream);

/* The own sequence's blocks in lz_decode's block words (kernels/lz_decode.h),
 * for a step of n rows (the own rows then hold *count + n keys): for each of
 * the LKV (layer, kv head) lists of NB words, whose first n_fixed[i] words are
 * the segments' and whose next ones are the own rows' 64-key blocks, n_blocks[i]
 * = n_fixed[i] + the blocks holding *count + n keys; the last of those gets its
 * key count, every one before it 64. (*count + n) >= 1. */
int lz_op_own_words(uint64_t *words, int32_t *n_blocks, const int32_t *n_fixed, int LKV, int NB, const int *count,
                    int n, void *stream);
int lz_op_own_words_ref(uint64_t *words, int32_t *n_blocks, const int32_t *n_fixed, int LKV, int NB,
                        const int *count, int n, void *stream);
int lz_op_count_add_ref(int *count, int n, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* LZ_OPS_H */

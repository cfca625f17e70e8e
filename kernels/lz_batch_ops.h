/* lz_batch_ops.h - the small kernels of a decode pass over several sequences
 * at once (gpu/llama_cuda_batch.cu): the batch's block words gathered from
 * each sequence's own, each row's rotary with its K/V appended to its own
 * sequence, and every sequence one token longer. The batched twins of
 * lz_ops.h's own_words and heads_own (the same math, base/rope.h). Each CUDA
 * launcher (kernels/lz_batch_ops.cu; device pointers, the sequence table in
 * device memory, asynchronous on stream) has a CPU reference with the same
 * signature (kernels/lz_batch_ops_ref.c; host memory, stream ignored);
 * tests/cuda/test_ops.cu compares them on random inputs. Return 0, or a
 * cudaError_t / lz_attn_status.
 *
 * Legend: B = sequences in the pass, L = layers, H / KV = heads, d =
 * head_dim, NB = block words a (layer, sequence, kv head) list of the batch,
 * nb = a sequence's own words a list, N = a sequence's own rows a (layer, kv
 * head).
 */
#ifndef LZ_BATCH_OPS_H
#define LZ_BATCH_OPS_H

#include <stdint.h>

#include "kernels/lz_attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One sequence of the pass. */
typedef struct {
    const uint64_t *words, *vrows; /* its (L, KV, nb) block words and values' rows (lz_decode.h) */
    const int32_t *nf;             /* (L, KV) its segments' words in each list (its own rows' follow) */
    int nb, N;
    int64_t dk, dv;                /* its words' rows moved by these into the batch's k_pool / v_pool */
    int64_t own_k, own_v;          /* its own rows' first row (layer 0, kv head 0) in the batch's pools */
    lz_bf16 *ok, *ov;              /* its own rows (L, KV, N, d) */
    int64_t pos0;                  /* the position of its first own token */
    int *count;                    /* its own length so far */
    /* fp8 segments (lz_decode.h's fp8 blocks; zero-initialised: none): */
    const float *ksc, *vsc;        /* (L, KV, nb) its blocks' scales beside its words (> 0: fp8), or NULL */
    int64_t dk8, dv8;              /* its fp8 words' rows moved by these into the batch's k_pool8 / v_pool8 */
} lz_op_batch_seq;

/* words, vrows (L, B, KV, NB) and n_blocks (L, B, KV): list (l, b, h) is sequence b's first
 * nf[l KV + h] words with their rows moved by dk (values' rows by dv; an fp8 word's, one whose
 * ksc > 0, by dk8 / dv8), then its own rows' blocks for *count + 1 keys from row own_k +
 * (l KV + h) N (values own_v + ...), 64 keys a block, the first marked LZ_DECODE_SEG_START at
 * offset 0. NB >= every nf + own blocks. k_scales, v_scales (L, B, KV, NB; both or neither, NULL:
 * no sequence has fp8 words): each block's scales, 0 for bf16 blocks (the own rows' among them). */
int lz_op_batch_words(uint64_t *words, uint64_t *vrows, int32_t *n_blocks, float *k_scales, float *v_scales,
                      const lz_op_batch_seq *seq, int B, int L, int KV, int NB, void *stream);
int lz_op_batch_words_ref(uint64_t *words, uint64_t *vrows, int32_t *n_blocks, float *k_scales, float *v_scales,
                          const lz_op_batch_seq *seq, int B, int L, int KV, int NB, void *stream);

/* Row b of q (B rows of (H + 2 KV) d floats, ld apart: q, then k, then v) to qh (B, H, d) bf16
 * with q rotated at pos0 + *count of sequence b, and its k (rotated the same) and v appended
 * to layer l of b's own rows at row *count. d even, <= 512. */
int lz_op_batch_heads(lz_bf16 *qh, const float *q, int ld, int H, int KV, int d, int l, int layout,
                      const float *inv_freq, const lz_op_batch_seq *seq, int B, void *stream);
int lz_op_batch_heads_ref(lz_bf16 *qh, const float *q, int ld, int H, int KV, int d, int l, int layout,
                          const float *inv_freq, const lz_op_batch_seq *seq, int B, void *stream);

/* *count += 1 for every sequence of the pass. */
int lz_op_batch_count(const lz_op_batch_seq *seq, int B, void *stream);
int lz_op_batch_count_ref(const lz_op_batch_seq *seq, int B, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* LZ_BATCH_OPS_H */

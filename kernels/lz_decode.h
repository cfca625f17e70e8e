/* lz_decode.h - one query row per sequence (decode), batched over sequences,
 * over a paged pool of K/V rows: lazy (the query is rotated by R(-p) once per
 * segment, keys never) and the non-lazy twin (keys already at final
 * positions). Split-KV (flash-decoding) over each sequence's blocks.
 *
 * Legend: B = sequences, KV = kv heads, H = query heads (KV*G, G <= 16),
 * d = head_dim (64 or 128), R = pool rows, NB = max blocks per (b, kv head).
 *
 * Block word (one uint64 per block of <= 64 consecutive pool rows of ONE
 * segment and ONE kv head, so the kernel reads nothing but K, V and the word):
 *
 *   bits  0..35  first pool row r (row r at k_pool[r*d]), < 2^36
 *   bits 36..56  segment offset p, < 2^21 (2,097,151 positions)
 *   bits 57..62  keys in the block minus 1 (1..64 keys)
 *   bit  63      first block of a segment (LZ_DECODE_SEG_START)
 *
 * The lazy kernel re-rotates its query only at blocks marked
 * LZ_DECODE_SEG_START (one sign test a block instead of comparing offsets),
 * so every block whose offset differs from the previous block's must carry
 * it; lz_decode_add_segment marks the first block of each segment. The
 * references and the non-lazy kernel ignore the bit.
 *
 * The question's own keys (and generated tokens) are a segment at offset 0.
 *
 * Memory layout (the one the benchmark measures): each cached document
 * occupies (KV, T, d) consecutive pool rows, as the CPU engine stores a layer
 * (L, KV, T, d), so a block is up to 64 consecutive d-element rows (16 KiB of
 * K and 16 KiB of V at d = 128) read with coalesced 16-byte loads.
 */
#ifndef LZ_DECODE_H
#define LZ_DECODE_H

#include "kernels/lz_attn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LZ_DECODE_BLOCK 64                 /* keys per block word, at most */
#define LZ_DECODE_MAX_ROW ((1ull << 36) - 1)
#define LZ_DECODE_MAX_OFFSET ((1ll << 21) - 1)
#define LZ_DECODE_MAX_SPLIT 256            /* split-KV parts, at most */

#ifdef __CUDACC__
#define LZ_DEC_HD __host__ __device__ __forceinline__
#else
#define LZ_DEC_HD static inline
#endif

#define LZ_DECODE_SEG_START (1ull << 63)

LZ_DEC_HD uint64_t lz_decode_word(uint64_t row, int64_t offset, int n_keys)
{
    return row | ((uint64_t)offset << 36) | ((uint64_t)(n_keys - 1) << 57);
}
LZ_DEC_HD uint64_t lz_decode_word_row(uint64_t w) { return w & ((1ull << 36) - 1); }
LZ_DEC_HD int64_t lz_decode_word_offset(uint64_t w) { return (int64_t)((w >> 36) & ((1ull << 21) - 1)); }
LZ_DEC_HD int lz_decode_word_keys(uint64_t w) { return (int)((w >> 57) & 63) + 1; }

typedef struct {
    lz_bf16 *o;               /* (B, H, d) output */
    const lz_bf16 *q;         /* (B, H, d) query, rotated at its position n */
    const lz_bf16 *k_pool;    /* (R, d) key rows, each rotated at its local position */
    const lz_bf16 *v_pool;    /* (R, d) value rows */
    const uint64_t *blocks;   /* (B, KV, NB) block words, see above */
    const uint64_t *v_rows;   /* optional (B, KV, NB): block i's values start at v_pool row v_rows[i]
                                 (K and V kept apart, as an engine's per-document allocations are);
                                 NULL: at the block word's row, as the keys */
    const int32_t *n_blocks;  /* (B, KV) blocks in use per (b, h); 0 allowed */
    const float *inv_freq;    /* (d/2) rotary inverse frequencies incl. divisors */
    int max_blocks;           /* NB: stride of blocks between (b, h) lists */
    int batch;                /* B */
    int n_heads;              /* H */
    int n_kv_heads;           /* KV; H = KV * G, G <= 16 */
    int head_dim;             /* d: 64 or 128 */
    int rope_layout;          /* LZ_ROPE_ADJACENT or LZ_ROPE_HALF */
    float scale;              /* softmax scale */
    int n_split;              /* split-KV parts, <= LZ_DECODE_MAX_SPLIT; 0 = choose (lz_decode_splits) */
    float *work;              /* scratch, lz_decode_workspace() bytes, ZERO-FILLED before its
                                 first use (per-(b, h) counters; the kernels leave them zero);
                                 unused when 1 part. One call at a time per workspace. */
    size_t work_bytes;
} lz_decode_params;

int lz_decode_splits(const lz_decode_params *p, int n_sm);
size_t lz_decode_workspace(const lz_decode_params *p, int n_split);

/* Appends the block words of one segment (len rows from pool row `row`,
 * placed at `offset`) to words[*n .. cap). Returns 0, LZ_ATTN_ERANGE (row or
 * offset too large for the word) or LZ_ATTN_EARG (cap exceeded). */
int lz_decode_add_segment(uint64_t *words, int *n, int cap, uint64_t row, int64_t len,
                          int64_t offset);
/* The same with the values at v_pool rows from v_row, into v_rows[*n ..]
 * beside the words (lz_decode_params.v_rows). */
int lz_decode_add_segment_kv(uint64_t *words, uint64_t *v_rows, int *n, int cap, uint64_t row, uint64_t v_row,
                             int64_t len, int64_t offset);

/* CUDA kernels (kernels/lz_decode.cu), asynchronous on stream. */
int lz_decode_lazy(const lz_decode_params *p, void *stream);
int lz_decode(const lz_decode_params *p, void *stream);
/* CPU references (kernels/lz_decode_ref.c), host memory, same parameters. */
int lz_decode_lazy_ref(const lz_decode_params *p, void *stream);
int lz_decode_ref(const lz_decode_params *p, void *stream);

int lz_decode_check(const lz_decode_params *p);

#ifdef __cplusplus
}
#endif
#endif /* LZ_DECODE_H */

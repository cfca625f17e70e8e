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
 *
 * fp8 blocks (documents stored as e4m3, schema/PAYLOAD.md): with k_scales set,
 * block i of (b, h) is fp8 when k_scales[i] > 0: its rows are rows of k_pool8
 * / v_pool8 (d bytes each; v_rows applies to them as to v_pool), a key element
 * is lz_e4m3_to_f32(byte) * k_scales[i] and a value element byte * v_scales[i]
 * (base/fp8.h); a block with k_scales[i] <= 0 is bf16, rows of k_pool / v_pool
 * as without scales. One call mixes both: the question's own keys and the
 * generated tokens stay bf16 while documents are fp8. The CUDA kernels
 * (kernels/lz_decode_fp8.cu, chosen when k_scales != NULL; the bf16 kernels
 * are untouched otherwise) read an fp8 block with the same 16-byte loads, half
 * the bytes, and dequantise in registers: the e4m3 bytes become fp16 (exact)
 * for fp16 tensor-core products with an fp16 copy of the query; k_scales[i]
 * multiplies the block's scores and v_scales[i] its share of the output. So
 * with fp8 blocks the query must be below 65,504 in magnitude, and an e4m3 NaN
 * byte (S.1111.111) reads as +-480, not NaN (the references keep NaN; the
 * payload encoder writes NaN only for NaN inputs).
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
    const lz_bf16 *k_pool;    /* (R, d) key rows, each rotated at its local position (may be NULL
                                 when k_scales is set and every block is fp8) */
    const lz_bf16 *v_pool;    /* (R, d) value rows (NULL as k_pool) */
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
    /* fp8 blocks (optional; all four set together, or k_scales NULL = every block bf16): */
    const uint8_t *k_pool8;   /* (R8, d) e4m3 key rows, row r at k_pool8[r*d]; 16-byte aligned */
    const uint8_t *v_pool8;   /* (R8, d) e4m3 value rows */
    const float *k_scales;    /* (B, KV, NB) beside the block words: > 0 = block i is fp8 with this key scale */
    const float *v_scales;    /* (B, KV, NB) value scale of each fp8 block */
    /* 1: launched as a programmatic dependent of the stream's previous kernel (sm_90; the bf16
     * kernels only, fp8 calls launch plainly): each CTA reads n_blocks, the block words and its
     * first blocks of K/V while that kernel still runs, and q, and the last block of each (b, h),
     * only once it has finished. So only q and that block (the one a decode step's own new row
     * lands in: lz_op_heads_own, lz_op_batch_heads) may be written by the kernel before; 0: a
     * plain launch. */
    int pdl;
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

/* The same for an fp8 segment (rows of k_pool8 / v_pool8): its blocks' scales
 * go to k_scales[*n ..] and v_scales[*n ..] (k_scale must be > 0). The other
 * blocks of an fp8 call need k_scales <= 0: zero-fill the array first. */
int lz_decode_add_segment_fp8(uint64_t *words, uint64_t *v_rows, float *k_scales, float *v_scales, int *n, int cap,
                              uint64_t row, uint64_t v_row, int64_t len, int64_t offset, float k_scale,
                              float v_scale);

/* CUDA kernels (kernels/lz_decode.cu; with k_scales, kernels/lz_decode_fp8.cu),
 * asynchronous on stream. */
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

/* lz_attn.h - what every attention kernel family in kernels/ shares: the bf16
 * storage type, status codes, and the cached-document segment descriptor.
 * Plain C (no CUDA headers): the CPU build and the CUDA build both include it.
 *
 * Legend: S = segments (cached documents), KV = key/value heads, H = query
 * heads (H = KV * G, G = GQA ratio), M = query rows, d = head_dim, T = cap
 * (token stride between kv heads of one segment), R = rows of a paged pool.
 *
 * Status codes: 0 = success; LZ_ATTN_E* (negative) = bad arguments found by
 * the host-side checks; a positive value is a cudaError_t from the runtime.
 */
#ifndef LZ_ATTN_H
#define LZ_ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* bf16 values are stored as their 16 raw bits (layout-compatible with
 * __nv_bfloat16); base/half.h converts on the host. */
typedef uint16_t lz_bf16;

enum lz_attn_status {
    LZ_ATTN_OK = 0,
    LZ_ATTN_EHEADDIM = -1,  /* head_dim is not 64 or 128 */
    LZ_ATTN_EGQA = -2,      /* n_heads not a multiple of n_kv_heads, or ratio > 16 */
    LZ_ATTN_ELAYOUT = -3,   /* rope_layout not LZ_ROPE_ADJACENT / LZ_ROPE_HALF */
    LZ_ATTN_EARG = -4,      /* a NULL pointer, negative size or count */
    LZ_ATTN_EWORK = -5,     /* split-KV workspace missing or too small */
    LZ_ATTN_ERANGE = -6     /* a value does not fit its packed field (see lz_decode.h) */
};

/* Text for a status: ours by name, positive values as "CUDA error N". */
const char *lz_attn_strerror(int status);

/* One cached document placed in the prompt. Its keys are stored rotated at
 * local positions 0..len-1 (Ada-KV: len differs per kv head); placing it at
 * offset p means key j belongs at p + j, i.e. R(p) * K_j.
 *
 * fp8 segments (schema/PAYLOAD.md's e4m3 payload): k8 / v8 hold e4m3 bytes in
 * the layout of k / v, with one fp32 scale per kv head: key element =
 * lz_e4m3_to_f32(byte) * k_scale[h] (base/fp8.h), value likewise with v_scale.
 * A segment is fp8 when k8 != NULL and the call allows fp8 segments
 * (lz_prefill_params.seg_fp8); k and v are not read then. Zero-initialised
 * fields (positional or designated initialisers, memset) give a bf16 segment. */
typedef struct {
    const lz_bf16 *k; /* (KV, T, d): head h, token j at k[(h*T + j)*d] */
    const lz_bf16 *v; /* (KV, T, d): same layout as k */
    int64_t offset;   /* placement offset p (any non-negative int64) */
    int64_t cap;      /* T: token stride between kv heads, >= every len of this segment */
    const uint8_t *k8;    /* optional (KV, T, d) e4m3 keys, head h, token j at k8[(h*T + j)*d]; 16-byte aligned */
    const uint8_t *v8;    /* (KV, T, d) e4m3 values when k8 is set */
    const float *k_scale; /* (KV) scales of the fp8 keys (device memory for the CUDA kernels) */
    const float *v_scale; /* (KV) scales of the fp8 values */
} lz_attn_segment;

#ifdef __cplusplus
}
#endif
#endif /* LZ_ATTN_H */

/* lz_rerotate.h - materialises a re-rotated copy of stored keys:
 * dst = R(offset) * src, row by row (what `block` mode caches per placement,
 * and how the tests build the non-lazy twin's input). bf16 in and out, fp32
 * math through base/rope.h.
 *
 * fp8 (src8 set): e4m3 in and out. With the input's scale s_in (one per kv
 * head, lz_attn.h), the output is dst8 = e4m3(R(offset) * (src8 * s_in) /
 * s_out) with s_out = s_in * sqrt(2): a rotation of a pair can grow one
 * component to sqrt(2) times the pair's largest (|x0 c - x1 s| <= (|c| + |s|)
 * max <= sqrt(2) max), so the result never saturates. s_in cancels: the
 * kernel computes e4m3(R(offset) * e4m3_to_f32(src8) * LZ_REROTATE_FP8_SHRINK)
 * in fp32 (round to nearest even, saturating, base/fp8.h) and needs no scale;
 * the copy's scale is s_in * LZ_REROTATE_FP8_GROWTH (written into scale8_out
 * when given). Each rotation costs the copy one more e4m3 rounding (3 mantissa
 * bits): block mode over fp8 equals lazy over fp8 within that rounding, not
 * exactly.
 *
 * Legend: N = rows (for a segment: KV * T), d = head_dim (even).
 */
#ifndef LZ_REROTATE_H
#define LZ_REROTATE_H

#include "kernels/lz_attn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    lz_bf16 *dst;          /* (N, d) rotated rows; may equal src (in place) */
    const lz_bf16 *src;    /* (N, d) rows rotated at local positions */
    const float *inv_freq; /* (d/2) inverse frequencies incl. divisors */
    int64_t n_rows;        /* N >= 0 */
    int64_t offset;        /* rotation R(offset) applied to every row */
    int head_dim;          /* d: even, <= 256 */
    int rope_layout;       /* LZ_ROPE_ADJACENT or LZ_ROPE_HALF */
    /* fp8 (optional; src and dst unused when src8 is set): */
    uint8_t *dst8;          /* (N, d) e4m3 rotated rows; may equal src8 (in place) */
    const uint8_t *src8;    /* (N, d) e4m3 rows rotated at local positions */
    const float *scale8_in; /* optional (n_scales) scales of the input (device memory for the kernel) */
    float *scale8_out;      /* optional (n_scales): scale8_in[i] * LZ_REROTATE_FP8_GROWTH; may equal scale8_in */
    int n_scales;           /* scales to write (e.g. KV for a segment); 0 = none */
} lz_rerotate_params;

#define LZ_REROTATE_FP8_GROWTH 1.41421356f /* sqrt(2) as a float: the copy's scale is s_in times this */
#define LZ_REROTATE_FP8_SHRINK 0.70710678f /* 1/sqrt(2) as a float: what the rotated values are multiplied by */

int lz_rerotate(const lz_rerotate_params *p, void *stream);     /* CUDA */
int lz_rerotate_ref(const lz_rerotate_params *p, void *stream); /* CPU */
/* Argument checks shared by both: LZ_ATTN_EARG (a NULL pointer of the mode in
 * use, negative sizes), LZ_ATTN_EHEADDIM (d odd, <= 0 or > 256), LZ_ATTN_ELAYOUT. */
int lz_rerotate_check(const lz_rerotate_params *p);

#ifdef __cplusplus
}
#endif
#endif /* LZ_REROTATE_H */

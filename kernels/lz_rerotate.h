/* lz_rerotate.h - materialises a re-rotated copy of stored keys:
 * dst = R(offset) * src, row by row (what `block` mode caches per placement,
 * and how the tests build the non-lazy twin's input). bf16 in and out, fp32
 * math through base/rope.h.
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
} lz_rerotate_params;

int lz_rerotate(const lz_rerotate_params *p, void *stream);     /* CUDA */
int lz_rerotate_ref(const lz_rerotate_params *p, void *stream); /* CPU */

#ifdef __cplusplus
}
#endif
#endif /* LZ_REROTATE_H */

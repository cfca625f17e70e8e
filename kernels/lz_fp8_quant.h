/* lz_fp8_quant.h - K/V rows quantised to fp8 e4m3 with one scale a group (a
 * (layer, kv head) of one document: the store's fp8 payload, schema/PAYLOAD.md),
 * right after the forward pass that made them (ingest on the GPU: the host
 * never widens or narrows them). Group g of len elements:
 *   amax = max |x|; scale = amax / 448 (1 when amax is 0); y = e4m3(x * (1 / scale))
 * with base/fp8.h's rounding (nearest even, saturating at 448): the bits the
 * CPU's payload encoder writes for the same values. A group holding NaN or
 * Inf is reported (never silently saturated): *bad = the lowest such group + 1.
 *
 * Legend: G = groups, len = elements a group (groups back to back in x and y).
 */
#ifndef LZ_FP8_QUANT_H
#define LZ_FP8_QUANT_H

#include "kernels/lz_attn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint8_t *y;          /* (G, len) e4m3 out */
    float *scales;       /* (G) out */
    int *bad;            /* (1) in/out: 0 before the call; after, 0 or the first non-finite group + 1
                            (the CUDA kernel lowers it by compare-and-swap; may be shared by several calls,
                            then it names the first bad group of the call that found one) */
    const lz_bf16 *x;    /* (G, len) in */
    int64_t len;         /* elements a group, >= 1 */
    int n_groups;        /* G >= 0 */
} lz_fp8_quant_params;

int lz_fp8_quant(const lz_fp8_quant_params *p, void *stream);     /* CUDA, asynchronous */
int lz_fp8_quant_ref(const lz_fp8_quant_params *p, void *stream); /* CPU, host memory */
int lz_fp8_quant_check(const lz_fp8_quant_params *p);             /* LZ_ATTN_OK or LZ_ATTN_EARG */

#ifdef __cplusplus
}
#endif
#endif /* LZ_FP8_QUANT_H */

/* lz_fp8_quant_ref.c - the CPU reference of lz_fp8_quant (lz_fp8_quant.h):
 * the payload encoder's rule (store/payload.c) over bf16 groups, with
 * base/fp8.h's conversion. */
#include <math.h>

#include "kernels/lz_fp8_quant.h"
#include "base/fp8.h"
#include "base/half.h"

int lz_fp8_quant_check(const lz_fp8_quant_params *p)
{
    if (!p || p->n_groups < 0 || p->len < 1 || !p->bad) return LZ_ATTN_EARG;
    if (p->n_groups && (!p->x || !p->y || !p->scales)) return LZ_ATTN_EARG;
    return LZ_ATTN_OK;
}

int lz_fp8_quant_ref(const lz_fp8_quant_params *p, void *stream)
{
    (void)stream;
    const int rc = lz_fp8_quant_check(p);
    if (rc) return rc;
    for (int g = 0; g < p->n_groups; g++) {
        const lz_bf16 *x = p->x + (size_t)g * p->len;
        float amax = 0;
        int finite = 1;
        for (int64_t e = 0; e < p->len; e++) {
            const float v = lz_bf16_to_f32(x[e]);
            finite &= isfinite(v) != 0;
            amax = fmaxf(amax, fabsf(v));
        }
        if (!finite && (*p->bad == 0 || g + 1 < *p->bad)) *p->bad = g + 1;
        const float scale = amax > 0 && isfinite(amax) ? amax / LZ_E4M3_MAX : 1.0f, inv = 1.0f / scale;
        p->scales[g] = scale;
        uint8_t *y = p->y + (size_t)g * p->len;
        for (int64_t e = 0; e < p->len; e++) y[e] = lz_f32_to_e4m3(lz_bf16_to_f32(x[e]) * inv);
    }
    return LZ_ATTN_OK;
}

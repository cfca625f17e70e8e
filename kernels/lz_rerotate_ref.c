/* lz_rerotate_ref.c - CPU reference of lz_rerotate (lz_rerotate.h): each row
 * decoded to fp32, rotated by R(offset) through base/rope.h, rounded to bf16;
 * fp8 rows decoded from e4m3, rotated, multiplied by LZ_REROTATE_FP8_SHRINK
 * and rounded back to e4m3 (base/fp8.h), the scales times
 * LZ_REROTATE_FP8_GROWTH.
 *
 * Legend: N = rows, d = head_dim.
 */
#include "kernels/lz_rerotate.h"
#include "base/fp8.h"
#include "base/half.h"
#include "base/rope.h"

int lz_rerotate_ref(const lz_rerotate_params *p, void *stream)
{
    (void)stream;
    int rc = lz_rerotate_check(p);
    if (rc) return rc;
    const int d = p->head_dim;
    float x[256];
    for (int64_t r = 0; r < p->n_rows; r++) {
        if (p->src8) {
            for (int i = 0; i < d; i++) x[i] = lz_e4m3_to_f32(p->src8[r * d + i]);
            lz_rope_apply(x, d, p->offset, p->rope_layout, p->inv_freq);
            for (int i = 0; i < d; i++) p->dst8[r * d + i] = lz_f32_to_e4m3(x[i] * LZ_REROTATE_FP8_SHRINK);
        } else {
            for (int i = 0; i < d; i++) x[i] = lz_bf16_to_f32(p->src[r * d + i]);
            lz_rope_apply(x, d, p->offset, p->rope_layout, p->inv_freq);
            for (int i = 0; i < d; i++) p->dst[r * d + i] = lz_f32_to_bf16(x[i]);
        }
    }
    for (int i = 0; i < p->n_scales; i++) p->scale8_out[i] = p->scale8_in[i] * LZ_REROTATE_FP8_GROWTH;
    return LZ_ATTN_OK;
}

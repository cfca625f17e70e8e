/* lz_rerotate_ref.c - CPU reference of lz_rerotate (lz_rerotate.h): each row
 * decoded to fp32, rotated by R(offset) through base/rope.h, rounded to bf16.
 *
 * Legend: N = rows, d = head_dim.
 */
#include "kernels/lz_rerotate.h"
#include "base/half.h"
#include "base/rope.h"

int lz_rerotate_ref(const lz_rerotate_params *p, void *stream)
{
    (void)stream;
    if (!p || !p->dst || !p->src || !p->inv_freq || p->n_rows < 0) return LZ_ATTN_EARG;
    if (p->head_dim <= 0 || p->head_dim > 256 || p->head_dim % 2) return LZ_ATTN_EHEADDIM;
    if (p->rope_layout != LZ_ROPE_ADJACENT && p->rope_layout != LZ_ROPE_HALF)
        return LZ_ATTN_ELAYOUT;
    const int d = p->head_dim;
    float x[256];
    for (int64_t r = 0; r < p->n_rows; r++) {
        for (int i = 0; i < d; i++) x[i] = lz_bf16_to_f32(p->src[r * d + i]);
        lz_rope_apply(x, d, p->offset, p->rope_layout, p->inv_freq);
        for (int i = 0; i < d; i++) p->dst[r * d + i] = lz_f32_to_bf16(x[i]);
    }
    return LZ_ATTN_OK;
}

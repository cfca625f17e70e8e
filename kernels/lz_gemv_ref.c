/* lz_gemv_ref.c - CPU reference of lz_gemv (lz_gemv.h): the same products in
 * double precision, rounded to fp32 once; and the shared argument check. */
#include "kernels/lz_gemv.h"
#include "model/half.h"

int lz_gemv_check(const lz_gemv_mat *mats, int n_mats, const lz_bf16 *x, int in)
{
    if (!mats || !x || n_mats < 1 || n_mats > LZ_GEMV_MAX_MATS || in < 8 || in % 8 || in > LZ_GEMV_MAX_IN)
        return LZ_ATTN_EARG;
    for (int m = 0; m < n_mats; m++)
        if (!mats[m].w || !mats[m].y || mats[m].rows < 1) return LZ_ATTN_EARG;
    return LZ_ATTN_OK;
}

int lz_gemv_ref(const lz_gemv_mat *mats, int n_mats, const lz_bf16 *x, int in, float beta, void *stream)
{
    (void)stream;
    int rc = lz_gemv_check(mats, n_mats, x, in);
    if (rc) return rc;
    for (int m = 0; m < n_mats; m++)
        for (int r = 0; r < mats[m].rows; r++) {
            const lz_bf16 *w = mats[m].w + (size_t)r * in;
            double s = 0;
            for (int i = 0; i < in; i++) s += (double)lz_bf16_to_f32(w[i]) * lz_bf16_to_f32(x[i]);
            if (beta != 0.f) s += (double)beta * mats[m].y[r];
            mats[m].y[r] = (float)s;
        }
    return 0;
}

/* lz_gemv_ref.c - CPU references of lz_gemv and its fused forms (lz_gemv.h):
 * the same products in double precision, rounded to fp32 once, on the input
 * the CPU references of lz_op_rmsnorm / lz_op_silu_mul make; and the shared
 * argument check. */
#include <stdlib.h>

#include "kernels/lz_gemv.h"
#include "kernels/lz_ops.h"
#include "base/half.h"
#include "base/rope.h"

int lz_gemv_check(const lz_gemv_mat *mats, int n_mats, const void *x, int in)
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

/* x (in) through make_x into a bf16 row, then lz_gemv_ref */
static int fused_ref(const lz_gemv_mat *mats, int n_mats, const float *a, const float *b, float eps, int in, float beta,
                     int silu)
{
    int rc = lz_gemv_check(mats, n_mats, a, in);
    if (rc || !b) return rc ? rc : LZ_ATTN_EARG;
    lz_bf16 *x = malloc((size_t)in * sizeof *x);
    if (!x) return LZ_ATTN_EARG;
    if (silu) lz_op_silu_mul_ref(x, a, b, (size_t)in, NULL);
    else lz_op_rmsnorm_ref(x, a, b, 1, in, eps, NULL);
    rc = lz_gemv_ref(mats, n_mats, x, in, beta, NULL);
    free(x);
    return rc;
}

int lz_gemv_rmsnorm_ref(const lz_gemv_mat *mats, int n_mats, const float *x, const float *norm_w, float eps, int in,
                        float beta, void *stream)
{
    (void)stream;
    return fused_ref(mats, n_mats, x, norm_w, eps, in, beta, 0);
}

int lz_gemv_silu_ref(const lz_gemv_mat *mats, int n_mats, const float *gate, const float *up, int in, float beta,
                     void *stream)
{
    (void)stream;
    return fused_ref(mats, n_mats, gate, up, 0.f, in, beta, 1);
}

int lz_gemv_swiglu_check(const lz_bf16 *w_gate, const lz_bf16 *w_up, int rows, const float *x, const float *norm_w,
                         int in, const lz_bf16 *h)
{
    if (!w_gate || !w_up || !x || !norm_w || !h || rows < 1 || in < 8 || in % 8 || in > LZ_GEMV_MAX_IN)
        return LZ_ATTN_EARG;
    return LZ_ATTN_OK;
}

int lz_gemv_rmsnorm_swiglu_ref(const lz_bf16 *w_gate, const lz_bf16 *w_up, int rows, const float *x, const float *norm_w,
                               float eps, int in, lz_bf16 *h, void *stream)
{
    (void)stream;
    int rc = lz_gemv_swiglu_check(w_gate, w_up, rows, x, norm_w, in, h);
    if (rc) return rc;
    float *gu = malloc(2 * (size_t)rows * sizeof *gu);
    if (!gu) return LZ_ATTN_EARG;
    const lz_gemv_mat m[2] = {{w_gate, gu, rows}, {w_up, gu + rows, rows}};
    if (!(rc = lz_gemv_rmsnorm_ref(m, 2, x, norm_w, eps, in, 0.f, NULL))) lz_op_silu_mul_ref(h, gu, gu + rows, (size_t)rows, NULL);
    free(gu);
    return rc;
}

int lz_gemv_rope_check(const lz_gemv_rope *p, const float *x, const float *norm_w, int in)
{
    if (!p || !x || !norm_w || in < 8 || in % 8 || in > LZ_GEMV_MAX_IN) return LZ_ATTN_EARG;
    if (p->d <= 0 || p->d % 2 || p->d > 512) return LZ_ATTN_EHEADDIM;
    if (!p->wq || !p->wk || !p->wv || p->H < 1 || p->KV < 1 || p->H % p->KV || !p->inv_freq || !p->count || !p->qh ||
        !p->kh || !p->vh || !p->own_k || !p->own_v || p->N < 1 ||
        (p->layout != LZ_ROPE_ADJACENT && p->layout != LZ_ROPE_HALF))
        return LZ_ATTN_EARG;
    return LZ_ATTN_OK;
}

/* the three rows [q | k | v] by lz_gemv_rmsnorm_ref, then lz_op_heads_own_ref of one row */
int lz_gemv_rmsnorm_rope_ref(const lz_gemv_rope *p, const float *x, const float *norm_w, float eps, int in,
                             void *stream)
{
    (void)stream;
    int rc = lz_gemv_rope_check(p, x, norm_w, in);
    if (rc) return rc;
    const int Hd = p->H * p->d, KVd = p->KV * p->d;
    float *row = malloc((size_t)(Hd + 2 * KVd) * sizeof *row);
    if (!row) return LZ_ATTN_EARG;
    const lz_gemv_mat m[3] = {{p->wq, row, Hd}, {p->wk, row + Hd, KVd}, {p->wv, row + Hd + KVd, KVd}};
    if (!(rc = lz_gemv_rmsnorm_ref(m, 3, x, norm_w, eps, in, 0.f, NULL)))
        rc = lz_op_heads_own_ref(p->qh, p->kh, p->vh, p->own_k, p->own_v, p->N, row, row + Hd, row + Hd + KVd,
                                 Hd + 2 * KVd, 1, p->H, p->KV, p->d, p->pos0, p->count, p->layout, p->inv_freq, NULL);
    free(row);
    return rc;
}

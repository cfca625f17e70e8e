/* lz_ops_ref.c - CPU references of the small GPU forward-pass kernels
 * (lz_ops.h): the same signatures, host memory, plain loops, fp32 math and
 * bf16 rounding where the kernels round. */
#include <math.h>
#include <string.h>

#include "kernels/lz_decode.h"
#include "kernels/lz_ops.h"
#include "base/half.h"
#include "base/rope.h"

int lz_op_embed_ref(float *x, const lz_bf16 *table, const int *ids, int n, int D, void *stream)
{
    (void)stream;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < D; j++) x[(size_t)i * D + j] = lz_bf16_to_f32(table[(size_t)ids[i] * D + j]);
    return 0;
}

int lz_op_rmsnorm_ref(lz_bf16 *out, const float *x, const float *w, int n, int D, float eps, void *stream)
{
    (void)stream;
    for (int i = 0; i < n; i++) {
        const float *xr = x + (size_t)i * D;
        float ss = 0.f;
        for (int j = 0; j < D; j++) ss += xr[j] * xr[j];
        const float r = 1.0f / sqrtf(ss / (float)D + eps);
        for (int j = 0; j < D; j++) out[(size_t)i * D + j] = lz_f32_to_bf16(xr[j] * r * w[j]);
    }
    return 0;
}

int lz_op_heads_ref(lz_bf16 *qh, lz_bf16 *kh, lz_bf16 *vh, const float *q, const float *k, const float *v, int ld,
                    int n, int H, int KV, int d, int64_t pos0, const int *count, int layout, const float *inv_freq,
                    float *qcap, int c0, int cw, void *stream)
{
    (void)stream;
    if (d <= 0 || d % 2 || d > 512) return LZ_ATTN_EHEADDIM;
    if (count) pos0 += *count;
    const size_t ldq = ld ? (size_t)ld : (size_t)H * d, ldk = ld ? (size_t)ld : (size_t)KV * d;
    float x[512];
    for (int i = 0; i < n; i++)
        for (int hh = 0; hh < H + 2 * KV; hh++) {
            const float *src;
            lz_bf16 *dst;
            if (hh < H) { src = q + i * ldq + (size_t)hh * d; dst = qh + ((size_t)hh * n + i) * d; }
            else if (hh < H + KV) { src = k + i * ldk + (size_t)(hh - H) * d; dst = kh + ((size_t)(hh - H) * n + i) * d; }
            else { src = v + i * ldk + (size_t)(hh - H - KV) * d; dst = vh + ((size_t)(hh - H - KV) * n + i) * d; }
            memcpy(x, src, (size_t)d * sizeof(float));
            if (hh < H + KV) lz_rope_apply(x, d, pos0 + i, layout, inv_freq);
            for (int e = 0; e < d; e++) dst[e] = lz_f32_to_bf16(x[e]);
            if (qcap && hh < H && i >= c0 && i < c0 + cw) memcpy(qcap + ((size_t)(i - c0) * H + hh) * d, x, (size_t)d * 4);
        }
    return 0;
}

int lz_op_silu_mul_ref(lz_bf16 *out, const float *gate, const float *up, size_t count, void *stream)
{
    (void)stream;
    for (size_t e = 0; e < count; e++) out[e] = lz_f32_to_bf16(gate[e] / (1.0f + expf(-gate[e])) * up[e]);
    return 0;
}

int lz_op_swiglu_ref(lz_bf16 *out, const float *gu, int n, int F, void *stream)
{
    for (int i = 0; i < n; i++)
        lz_op_silu_mul_ref(out + (size_t)i * F, gu + (size_t)i * 2 * F, gu + (size_t)i * 2 * F + F, (size_t)F, stream);
    return 0;
}

int lz_op_tokens_ref(lz_bf16 *out, const lz_bf16 *oh, int n, int H, int d, void *stream)
{
    (void)stream;
    for (int i = 0; i < n; i++)
        for (int h = 0; h < H; h++)
            memcpy(out + ((size_t)i * H + h) * d, oh + ((size_t)h * n + i) * d, (size_t)d * sizeof(lz_bf16));
    return 0;
}

int lz_op_own_len_ref(int32_t *qlen, int L, int W, int S, int KV, const int *count, void *stream)
{
    (void)stream;
    for (int l = 0; l < L; l++)
        for (int h = 0; h < KV; h++) qlen[((size_t)l * W + S) * KV + h] = *count;
    return 0;
}

int lz_op_heads_own_ref(lz_bf16 *qh, lz_bf16 *kh, lz_bf16 *vh, lz_bf16 *own_k, lz_bf16 *own_v, int N, const float *q,
                        const float *k, const float *v, int ld, int n, int H, int KV, int d, int64_t pos0,
                        const int *count, int layout, const float *inv_freq, void *stream)
{
    if (d <= 0 || d % 2 || d > 512) return LZ_ATTN_EHEADDIM;
    if (!own_k || !own_v || !count) return LZ_ATTN_EARG;
    int rc = lz_op_heads_ref(qh, kh, vh, q, k, v, ld, n, H, KV, d, pos0, count, layout, inv_freq, NULL, 0, 0, stream);
    if (!rc) rc = lz_op_append_ref(own_k, kh, n, KV, N, d, count, stream);
    if (!rc) rc = lz_op_append_ref(own_v, vh, n, KV, N, d, count, stream);
    return rc;
}

int lz_op_append_ref(lz_bf16 *own, const lz_bf16 *t, int n, int KV, int N, int d, const int *count, void *stream)
{
    (void)stream;
    for (int h = 0; h < KV; h++)
        memcpy(own + ((size_t)h * N + *count) * d, t + (size_t)h * n * d, (size_t)n * d * sizeof(lz_bf16));
    return 0;
}

int lz_op_own_words_ref(uint64_t *words, int32_t *n_blocks, const int32_t *n_fixed, int LKV, int NB,
                        const int *count, int n, void *stream)
{
    (void)stream;
    const int len = *count + n, nob = (len + LZ_DECODE_BLOCK - 1) / LZ_DECODE_BLOCK;
    for (int i = 0; i < LKV; i++) {
        uint64_t *w = words + (size_t)i * NB;
        const int last = n_fixed[i] + nob - 1;
        n_blocks[i] = last + 1;
        w[last] = lz_decode_word(lz_decode_word_row(w[last]), lz_decode_word_offset(w[last]),
                                 len - (nob - 1) * LZ_DECODE_BLOCK) | (w[last] & LZ_DECODE_SEG_START);
        for (int j = n_fixed[i]; j < last; j++)
            w[j] = lz_decode_word(lz_decode_word_row(w[j]), lz_decode_word_offset(w[j]), LZ_DECODE_BLOCK) |
                   (w[j] & LZ_DECODE_SEG_START);
    }
    return 0;
}

int lz_op_count_add_ref(int *count, int n, void *stream)
{
    (void)stream;
    *count += n;
    return 0;
}

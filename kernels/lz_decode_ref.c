/* lz_decode_ref.c - CPU references of the decode kernels (lz_decode.h):
 * plain C, fp32 math from bf16 inputs (fp8 blocks: e4m3 decoded by base/fp8.h
 * times the block's scale), bf16 output. The lazy twin rotates each
 * key by its block's segment offset, R(p) * K_j, through base/rope.h (the
 * kernel rotates the query by R(-p) instead; the tests check both agree).
 *
 * Legend: B = sequences, KV = kv heads, H = query heads, G = H/KV, d =
 * head_dim, NB = max block words per (b, kv head), N = keys of one (b, h).
 */
#include <math.h>
#include <stdlib.h>

#include "kernels/lz_decode.h"
#include "base/fp8.h"
#include "base/half.h"
#include "base/rope.h"

static int decode_ref(const lz_decode_params *p, int lazy)
{
    int rc = lz_decode_check(p);
    if (rc) return rc;
    const int d = p->head_dim, KV = p->n_kv_heads, G = p->n_heads / KV;
    float *k = malloc(sizeof(float) * d), *v = malloc(sizeof(float) * d), *q = malloc(sizeof(float) * (size_t)G * d);
    float *acc = malloc(sizeof(float) * (size_t)G * d);
    float *mx = malloc(sizeof(float) * G);
    double *sum = malloc(sizeof(double) * G);
    if (!k || !v || !q || !acc || !mx || !sum) {
        free(k); free(v); free(q); free(acc); free(mx); free(sum);
        return LZ_ATTN_EARG;
    }
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < KV; h++) {
            for (int g = 0; g < G; g++) {
                const lz_bf16 *qs = p->q + ((size_t)b * p->n_heads + h * G + g) * d;
                for (int i = 0; i < d; i++) q[g * d + i] = lz_bf16_to_f32(qs[i]);
                for (int i = 0; i < d; i++) acc[g * d + i] = 0.0f;
                mx[g] = -INFINITY;
                sum[g] = 0.0;
            }
            const uint64_t *w = p->blocks + ((size_t)b * KV + h) * p->max_blocks;
            const uint64_t *vr = p->v_rows ? p->v_rows + ((size_t)b * KV + h) * p->max_blocks : NULL;
            const float *ksc = p->k_scales ? p->k_scales + ((size_t)b * KV + h) * p->max_blocks : NULL;
            const float *vsc = p->k_scales ? p->v_scales + ((size_t)b * KV + h) * p->max_blocks : NULL;
            int nb = p->n_blocks[(size_t)b * KV + h];
            for (int bi = 0; bi < nb; bi++) {
                uint64_t row = lz_decode_word_row(w[bi]);
                int64_t off = lz_decode_word_offset(w[bi]);
                int nk = lz_decode_word_keys(w[bi]);
                const int f8 = ksc && ksc[bi] > 0.0f;
                for (int j = 0; j < nk; j++) {
                    const uint64_t vrow = (vr ? vr[bi] : row) + j;
                    if (f8) {
                        const uint8_t *ks = p->k_pool8 + (row + j) * d, *vs = p->v_pool8 + vrow * d;
                        for (int i = 0; i < d; i++) k[i] = lz_e4m3_to_f32(ks[i]) * ksc[bi];
                        for (int i = 0; i < d; i++) v[i] = lz_e4m3_to_f32(vs[i]) * vsc[bi];
                    } else {
                        const lz_bf16 *ks = p->k_pool + (row + j) * d, *vs = p->v_pool + vrow * d;
                        for (int i = 0; i < d; i++) k[i] = lz_bf16_to_f32(ks[i]);
                        for (int i = 0; i < d; i++) v[i] = lz_bf16_to_f32(vs[i]);
                    }
                    if (lazy && off) lz_rope_apply(k, d, off, p->rope_layout, p->inv_freq);
                    for (int g = 0; g < G; g++) { /* online softmax, one key at a time */
                        float s = 0.0f;
                        for (int i = 0; i < d; i++) s += q[g * d + i] * k[i];
                        s *= p->scale;
                        float m2 = s > mx[g] ? s : mx[g];
                        float a = expf(mx[g] - m2), e = expf(s - m2);
                        sum[g] = sum[g] * a + e;
                        for (int i = 0; i < d; i++)
                            acc[g * d + i] = acc[g * d + i] * a + e * v[i];
                        mx[g] = m2;
                    }
                }
            }
            for (int g = 0; g < G; g++) {
                lz_bf16 *o = p->o + ((size_t)b * p->n_heads + h * G + g) * d;
                for (int i = 0; i < d; i++)
                    o[i] = lz_f32_to_bf16(sum[g] > 0 ? (float)(acc[g * d + i] / sum[g]) : 0.0f);
            }
        }
    free(k); free(v); free(q); free(acc); free(mx); free(sum);
    return LZ_ATTN_OK;
}

int lz_decode_lazy_ref(const lz_decode_params *p, void *stream)
{
    (void)stream;
    return decode_ref(p, 1);
}

int lz_decode_ref(const lz_decode_params *p, void *stream)
{
    (void)stream;
    return decode_ref(p, 0);
}

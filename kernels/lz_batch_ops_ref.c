/* lz_batch_ops_ref.c - the CPU references of lz_batch_ops.h: plain loops over
 * the same index arithmetic, rotary by base/rope.h. */
#include <math.h>

#include "kernels/lz_batch_ops.h"
#include "kernels/lz_decode.h"
#include "base/half.h"
#include "base/rope.h"

int lz_op_batch_words_ref(uint64_t *words, uint64_t *vrows, int32_t *n_blocks, float *k_scales, float *v_scales,
                          const lz_op_batch_seq *seq, int B, int L, int KV, int NB, void *stream)
{
    (void)stream;
    if (B < 0 || L < 0 || KV < 0 || NB < 0 || (B && !seq) || !k_scales != !v_scales) return LZ_ATTN_EARG;
    const uint64_t rows = LZ_DECODE_MAX_ROW;
    for (int i = 0; i < L * B * KV; i++) {
        const int l = i / (B * KV), b = (i / KV) % B, h = i % KV, lh = l * KV + h;
        const lz_op_batch_seq *s = &seq[b];
        const uint64_t *sw = s->words + (size_t)lh * s->nb, *sv = s->vrows + (size_t)lh * s->nb;
        const float *sks = s->ksc ? s->ksc + (size_t)lh * s->nb : NULL, *svs = s->vsc ? s->vsc + (size_t)lh * s->nb : NULL;
        uint64_t *w = words + (size_t)i * NB, *vr = vrows + (size_t)i * NB;
        float *ks = k_scales ? k_scales + (size_t)i * NB : NULL, *vs = v_scales ? v_scales + (size_t)i * NB : NULL;
        const int nf = s->nf[lh];
        for (int j = 0; j < nf; j++) {
            const int f8 = sks && sks[j] > 0;
            w[j] = (sw[j] & ~rows) | (lz_decode_word_row(sw[j]) + (uint64_t)(f8 ? s->dk8 : s->dk));
            vr[j] = sv[j] + (uint64_t)(f8 ? s->dv8 : s->dv);
            if (ks) ks[j] = f8 ? sks[j] : 0.f, vs[j] = f8 ? svs[j] : 0.f;
        }
        const int len = *s->count + 1, nob = (len + LZ_DECODE_BLOCK - 1) / LZ_DECODE_BLOCK;
        const uint64_t kr = (uint64_t)s->own_k + (uint64_t)lh * s->N, vrr = (uint64_t)s->own_v + (uint64_t)lh * s->N;
        for (int j = 0; j < nob; j++) {
            const int keys = len - j * LZ_DECODE_BLOCK < LZ_DECODE_BLOCK ? len - j * LZ_DECODE_BLOCK : LZ_DECODE_BLOCK;
            w[nf + j] = lz_decode_word(kr + (uint64_t)j * LZ_DECODE_BLOCK, 0, keys) | (j == 0 ? LZ_DECODE_SEG_START : 0);
            vr[nf + j] = vrr + (uint64_t)j * LZ_DECODE_BLOCK;
            if (ks) ks[nf + j] = 0.f, vs[nf + j] = 0.f;
        }
        n_blocks[i] = nf + nob;
    }
    return LZ_ATTN_OK;
}

int lz_op_batch_heads_ref(lz_bf16 *qh, const float *q, int ld, int H, int KV, int d, int l, int layout,
                          const float *inv_freq, const lz_op_batch_seq *seq, int B, void *stream)
{
    (void)stream;
    if (d <= 0 || d % 2 || d > 512) return LZ_ATTN_EHEADDIM;
    if (B < 0 || (B && (!seq || !q || !qh || !inv_freq))) return LZ_ATTN_EARG;
    for (int b = 0; b < B; b++) {
        const lz_op_batch_seq *s = &seq[b];
        const int cnt = *s->count;
        const float *row = q + (size_t)b * ld;
        for (int hh = 0; hh < H + 2 * KV; hh++) {
            const float *src;
            lz_bf16 *dst;
            int rotate = 1;
            if (hh < H) {
                src = row + (size_t)hh * d;
                dst = qh + ((size_t)b * H + hh) * d;
            } else {
                const int kvh = hh < H + KV ? hh - H : hh - H - KV;
                src = row + (size_t)(hh < H + KV ? H : H + KV) * d + (size_t)kvh * d;
                dst = (hh < H + KV ? s->ok : s->ov) + (((size_t)l * KV + kvh) * s->N + cnt) * d;
                rotate = hh < H + KV;
            }
            for (int t = 0; t < d / 2; t++) {
                int a, c;
                lz_rope_pair(layout, d, t, &a, &c);
                float x0 = src[a], x1 = src[c];
                if (rotate) {
                    const float ang = (float)(s->pos0 + cnt) * inv_freq[t];
                    lz_rope_rotate_pair(&x0, &x1, cosf(ang), sinf(ang));
                }
                dst[a] = lz_f32_to_bf16(x0);
                dst[c] = lz_f32_to_bf16(x1);
            }
        }
    }
    return LZ_ATTN_OK;
}

int lz_op_batch_count_ref(const lz_op_batch_seq *seq, int B, void *stream)
{
    (void)stream;
    if (B < 0 || (B && !seq)) return LZ_ATTN_EARG;
    for (int b = 0; b < B; b++) *seq[b].count += 1;
    return LZ_ATTN_OK;
}

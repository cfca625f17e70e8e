/* lz_decode_group_ref.c - the CPU reference of decode attention grouped by
 * document (lz_decode_group.h), its argument checks and workspace size: plain
 * C, fp32 math from bf16 inputs (fp8 blocks: e4m3 decoded by base/fp8.h times
 * the block's scale). Each item's members get a partial (normalised
 * output and log2-sum-exp, as the kernel's) over the item's blocks with keys
 * rotated by R(p) for the member's offset p (base/rope.h); each row's partials
 * are then merged. bf16 output.
 *
 * Legend: B = rows, KV = kv heads, H = query heads, G = H/KV, d = head_dim,
 * P = max_parts.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/lz_decode_group.h"
#include "base/fp8.h"
#include "base/half.h"
#include "base/rope.h"

size_t lz_decode_group_workspace(const lz_decode_group_params *p)
{
    const size_t rows = (size_t)p->dec.batch * p->dec.n_heads * (p->max_parts > 0 ? p->max_parts : 0);
    return rows * ((size_t)p->dec.head_dim + 1) * sizeof(float);
}

int lz_decode_group_check(const lz_decode_group_params *p)
{
    if (!p) return LZ_ATTN_EARG;
    lz_decode_params d = p->dec;
    d.n_split = 0;
    int rc = lz_decode_check(&d);
    if (rc) return rc;
    if (p->n_items < 0 || (p->n_items && !p->items) || !p->n_parts || p->max_parts < 1 || p->layer < 0)
        return LZ_ATTN_EARG;
    if (!p->work || p->work_bytes < lz_decode_group_workspace(p)) return LZ_ATTN_EWORK;
    return LZ_ATTN_OK;
}

/* item it's blocks [*i0, *i1) in list (reader, h) at p->layer; 0 or EARG */
static int item_range(const lz_decode_group_params *p, const lz_decode_item *it, int h, int *i0, int *i1)
{
    const int KV = p->dec.n_kv_heads;
    if (!it->seg_first || it->n_seg < 1 || it->seg < 0 || it->seg >= it->n_seg || it->reader < 0 ||
        it->reader >= p->dec.batch || it->first < 0 || it->last < it->first)
        return LZ_ATTN_EARG;
    const int32_t *sf = it->seg_first + ((size_t)p->layer * KV + h) * it->n_seg;
    const int nb = p->dec.n_blocks[(size_t)it->reader * KV + h];
    const int s0 = sf[it->seg], end = it->seg == it->n_seg - 1 ? nb : sf[it->seg + 1];
    if (s0 < 0 || end < s0 || end > nb || nb > p->dec.max_blocks) return LZ_ATTN_EARG;
    *i0 = s0 + it->first < end ? s0 + it->first : end;
    *i1 = s0 + it->last < end ? s0 + it->last : end;
    return LZ_ATTN_OK;
}

static int check_item(const lz_decode_group_params *p, const lz_decode_item *it, int G)
{
    if (it->n_members < 1 || it->n_members > LZ_DECODE_GROUP_MAX || it->n_members * G > 16) return LZ_ATTN_EARG;
    for (int m = 0; m < it->n_members; m++) {
        if (it->member[m] < 0 || it->member[m] >= p->dec.batch || it->offset[m] < 0 ||
            it->offset[m] > LZ_DECODE_MAX_OFFSET || it->part[m] < 0 || it->part[m] >= p->n_parts[it->member[m]] ||
            p->n_parts[it->member[m]] > p->max_parts)
            return LZ_ATTN_EARG;
    }
    return LZ_ATTN_OK;
}

/* one member's partial over blocks [i0, i1) of list lw / lv: out (G, d) normalised, lse (G) */
static void partial(const lz_decode_group_params *p, const uint64_t *lw, const uint64_t *lv, const float *lks,
                    const float *lvs, int i0, int i1, const lz_bf16 *qsrc, int64_t off, float *out, float *lse, float *k,
                    float *v, float *q, double *sum, float *mx)
{
    const lz_decode_params *dp = &p->dec;
    const int d = dp->head_dim, G = dp->n_heads / dp->n_kv_heads;
    for (int g = 0; g < G; g++) {
        for (int i = 0; i < d; i++) q[g * d + i] = lz_bf16_to_f32(qsrc[(size_t)g * d + i]), out[g * d + i] = 0.0f;
        mx[g] = -INFINITY;
        sum[g] = 0.0;
    }
    for (int bi = i0; bi < i1; bi++) {
        const uint64_t row = lz_decode_word_row(lw[bi]);
        const int nk = lz_decode_word_keys(lw[bi]), f8 = lks && lks[bi] > 0.0f;
        for (int j = 0; j < nk; j++) {
            const uint64_t vrow = (lv ? lv[bi] : row) + j;
            if (f8) {
                const uint8_t *ks = dp->k_pool8 + (row + j) * d, *vs = dp->v_pool8 + vrow * d;
                for (int i = 0; i < d; i++) k[i] = lz_e4m3_to_f32(ks[i]) * lks[bi];
                for (int i = 0; i < d; i++) v[i] = lz_e4m3_to_f32(vs[i]) * lvs[bi];
            } else {
                for (int i = 0; i < d; i++) k[i] = lz_bf16_to_f32(dp->k_pool[(row + j) * d + i]);
                for (int i = 0; i < d; i++) v[i] = lz_bf16_to_f32(dp->v_pool[vrow * d + i]);
            }
            if (off) lz_rope_apply(k, d, off, dp->rope_layout, dp->inv_freq);
            for (int g = 0; g < G; g++) {
                float s = 0.0f;
                for (int i = 0; i < d; i++) s += q[g * d + i] * k[i];
                s *= dp->scale;
                const float m2 = s > mx[g] ? s : mx[g], a = expf(mx[g] - m2), e = expf(s - m2);
                sum[g] = sum[g] * a + e;
                for (int i = 0; i < d; i++) out[g * d + i] = out[g * d + i] * a + e * v[i];
                mx[g] = m2;
            }
        }
    }
    for (int g = 0; g < G; g++) {
        for (int i = 0; i < d; i++) out[g * d + i] = sum[g] > 0 ? (float)(out[g * d + i] / sum[g]) : 0.0f;
        /* natural-log max and sum to the kernel's log2 units */
        lse[g] = sum[g] > 0 ? (float)((mx[g] + log(sum[g])) * 1.4426950408889634) : -INFINITY;
    }
}

int lz_decode_group_ref(const lz_decode_group_params *p, void *stream)
{
    (void)stream;
    int rc = lz_decode_group_check(p);
    if (rc) return rc;
    const lz_decode_params *dp = &p->dec;
    const int d = dp->head_dim, KV = dp->n_kv_heads, H = dp->n_heads, G = H / KV, P = p->max_parts;
    for (int b = 0; b < dp->batch; b++)
        if (p->n_parts[b] < 0 || p->n_parts[b] > P) return LZ_ATTN_EARG;
    for (int t = 0; t < p->n_items; t++)
        if ((rc = check_item(p, &p->items[t], G))) return rc;
    float *part = p->work, *lse = p->work + (size_t)dp->batch * H * P * d;
    /* every partial empty until an item writes it: a row's unwritten ones would be a caller's bug */
    for (size_t i = 0; i < (size_t)dp->batch * H * P; i++) lse[i] = -INFINITY;
    memset(part, 0, (size_t)dp->batch * H * P * d * sizeof(float));
    float *k = malloc(sizeof(float) * d), *v = malloc(sizeof(float) * d), *q = malloc(sizeof(float) * (size_t)G * d);
    float *out = malloc(sizeof(float) * (size_t)G * d), *l2 = malloc(sizeof(float) * G), *mx = malloc(sizeof(float) * G);
    double *sum = malloc(sizeof(double) * G);
    if (!k || !v || !q || !out || !l2 || !mx || !sum) {
        rc = LZ_ATTN_EARG;
        goto done;
    }
    for (int t = 0; t < p->n_items; t++) {
        const lz_decode_item *it = &p->items[t];
        for (int h = 0; h < KV; h++) {
            int i0, i1;
            if ((rc = item_range(p, it, h, &i0, &i1))) goto done;
            const size_t list = ((size_t)it->reader * KV + h) * dp->max_blocks;
            const uint64_t *lw = dp->blocks + list, *lv = dp->v_rows ? dp->v_rows + list : NULL;
            const float *lks = dp->k_scales ? dp->k_scales + list : NULL, *lvs = dp->k_scales ? dp->v_scales + list : NULL;
            for (int m = 0; m < it->n_members; m++) {
                const int b = it->member[m];
                partial(p, lw, lv, lks, lvs, i0, i1, dp->q + ((size_t)b * H + h * G) * d, it->offset[m], out, l2, k, v,
                        q, sum, mx);
                for (int g = 0; g < G; g++) {
                    const size_t r = ((size_t)b * H + h * G + g) * P + it->part[m];
                    memcpy(part + r * d, out + (size_t)g * d, sizeof(float) * d);
                    lse[r] = l2[g];
                }
            }
        }
    }
    for (int b = 0; b < dp->batch; b++)
        for (int hq = 0; hq < H; hq++) {
            const size_t r0 = ((size_t)b * H + hq) * P;
            float M = -INFINITY;
            for (int j = 0; j < p->n_parts[b]; j++) M = lse[r0 + j] > M ? lse[r0 + j] : M;
            double wsum = 0;
            for (int i = 0; i < d; i++) out[i] = 0.0f;
            for (int j = 0; M != -INFINITY && j < p->n_parts[b]; j++) {
                if (lse[r0 + j] == -INFINITY) continue;
                const float w = exp2f(lse[r0 + j] - M);
                wsum += w;
                for (int i = 0; i < d; i++) out[i] += w * part[(r0 + j) * d + i];
            }
            lz_bf16 *o = dp->o + ((size_t)b * H + hq) * d;
            for (int i = 0; i < d; i++) o[i] = lz_f32_to_bf16(wsum > 0 ? (float)(out[i] / wsum) : 0.0f);
        }
done:
    free(k); free(v); free(q); free(out); free(l2); free(mx); free(sum);
    return rc;
}

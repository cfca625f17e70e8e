/* lz_prefill_ref.c - CPU references of the prefill kernels (lz_prefill.h):
 * plain C, fp32 math from bf16 inputs (fp8 segments: e4m3 decoded by
 * base/fp8.h times the kv head's scale), bf16 output. The lazy twin rotates
 * every stored key by its segment's offset through base/rope.h, by the
 * definition R(p) * K_j (the kernels do the same per K tile).
 *
 * Legend: S = segments, KV = kv heads, H = query heads, G = H/KV, M = rows,
 * d = head_dim, T = segment cap, N = visible keys of one kv head.
 */
#include <math.h>
#include <stdlib.h>

#include "kernels/lz_prefill.h"
#include "base/fp8.h"
#include "base/half.h"
#include "base/rope.h"

static void load_row(float *dst, const lz_bf16 *src, int d)
{
    for (int i = 0; i < d; i++) dst[i] = lz_bf16_to_f32(src[i]);
}
static void load_row8(float *dst, const uint8_t *src, float scale, int d)
{
    for (int i = 0; i < d; i++) dst[i] = lz_e4m3_to_f32(src[i]) * scale;
}

static int prefill_ref(const lz_prefill_params *p, int lazy)
{
    int rc = lz_prefill_check(p);
    if (rc) return rc;
    const int d = p->head_dim, M = p->n_rows, KV = p->n_kv_heads, G = p->n_heads / KV;
    int64_t nseg_max = 0;
    for (int h = 0; h < KV; h++) {
        int64_t n = 0;
        for (int s = 0; s < p->n_seg; s++) n += p->seg_len[(size_t)s * KV + h];
        if (n > nseg_max) nseg_max = n;
    }
    int64_t nmax = nseg_max + M;
    float *K = malloc(sizeof(float) * (size_t)nmax * d);  /* (N, d) keys at final positions */
    float *V = malloc(sizeof(float) * (size_t)nmax * d);  /* (N, d) */
    float *sc = malloc(sizeof(float) * (size_t)nmax);     /* (N) scores of one row */
    float *q = malloc(sizeof(float) * d), *acc = malloc(sizeof(float) * d);
    if (!K || !V || !sc || !q || !acc) {
        free(K); free(V); free(sc); free(q); free(acc);
        return LZ_ATTN_EARG;
    }
    for (int h = 0; h < KV; h++) {
        int64_t n = 0;
        for (int s = 0; s < p->n_seg; s++) {
            const lz_attn_segment *sg = &p->segs[s];
            int32_t len = p->seg_len[(size_t)s * KV + h];
            const int f8 = p->seg_fp8 && sg->k8;
            const size_t row0 = p->seg_row ? (size_t)p->seg_row[(size_t)s * KV + h] : (size_t)h * sg->cap;
            for (int32_t j = 0; j < len; j++, n++) {
                const size_t at = (row0 + j) * d;
                if (f8) {
                    load_row8(K + n * d, sg->k8 + at, sg->k_scale[h], d);
                    load_row8(V + n * d, sg->v8 + at, sg->v_scale[h], d);
                } else {
                    load_row(K + n * d, sg->k + at, d);
                    load_row(V + n * d, sg->v + at, d);
                }
                if (lazy) lz_rope_apply(K + n * d, d, sg->offset, p->rope_layout, p->inv_freq);
            }
        }
        int64_t nseg = n;
        for (int j = 0; j < M; j++, n++) {
            load_row(K + n * d, p->k_self + ((size_t)h * M + j) * d, d);
            load_row(V + n * d, p->v_self + ((size_t)h * M + j) * d, d);
            if (lazy && p->self_offset)
                lz_rope_apply(K + n * d, d, p->self_offset, p->rope_layout, p->inv_freq);
        }
        for (int g = 0; g < G; g++) {
            int hq = h * G + g;
            for (int m = 0; m < M; m++) {
                load_row(q, p->q + ((size_t)hq * M + m) * d, d);
                int64_t nv = nseg + m + 1; /* own keys 0..m */
                float mx = -INFINITY;
                for (int64_t j = 0; j < nv; j++) {
                    float s = 0.0f;
                    for (int i = 0; i < d; i++) s += q[i] * K[j * d + i];
                    sc[j] = s * p->scale;
                    if (sc[j] > mx) mx = sc[j];
                }
                double sum = 0.0;
                for (int i = 0; i < d; i++) acc[i] = 0.0f;
                for (int64_t j = 0; j < nv; j++) {
                    float e = expf(sc[j] - mx);
                    sum += e;
                    for (int i = 0; i < d; i++) acc[i] += e * V[j * d + i];
                }
                lz_bf16 *o = p->o + ((size_t)hq * M + m) * d;
                for (int i = 0; i < d; i++) o[i] = lz_f32_to_bf16((float)(acc[i] / sum));
            }
        }
    }
    free(K); free(V); free(sc); free(q); free(acc);
    return LZ_ATTN_OK;
}

int lz_prefill_lazy_ref(const lz_prefill_params *p, void *stream)
{
    (void)stream;
    return prefill_ref(p, 1);
}

int lz_prefill_ref(const lz_prefill_params *p, void *stream)
{
    (void)stream;
    return prefill_ref(p, 0);
}

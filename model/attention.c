/* attention.c - lazy attention on the CPU (see attention.h). Two passes per
 * (row, head): scores into a per-thread buffer, then softmax and the weighted
 * sum of values. The missing segment rotation is applied to a copy of the
 * query, once per (row, head, segment); keys are never rotated or copied. */
#include "model/attention.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static inline float dot(const float *a, const float *b, int d)
{
    float s = 0;
    for (int i = 0; i < d; i++) s += a[i] * b[i];
    return s;
}

static inline void axpy(float *y, float a, const float *x, int d)
{
    for (int i = 0; i < d; i++) y[i] += a * x[i];
}

int lz_attention_cpu(const lz_attn_params *p)
{
    const int d = p->head_dim, H = p->n_heads, KV = p->n_kv_heads, group = H / KV;
    const float scale = 1.0f / sqrtf((float)d);
    size_t max_keys = (size_t)p->n_past + (size_t)p->n;
    for (int s = 0; s < p->n_segs; s++) max_keys += (size_t)p->segs[s].n;
    int nthreads = omp_get_max_threads();
    float *scratch = malloc(((size_t)nthreads * (max_keys + (size_t)d)) * sizeof(float));
    if (!scratch) return -1;

#pragma omp parallel for schedule(dynamic, 1)
    for (int rh = 0; rh < p->n * H; rh++) {
        const int i = rh / H, h = rh % H, g = h / group;
        float *scores = scratch + (size_t)omp_get_thread_num() * (max_keys + (size_t)d);
        float *qr = scores + max_keys;
        const float *q = p->q + ((size_t)i * H + h) * d;
        float *o = p->out + ((size_t)i * H + h) * d;
        size_t nk = 0;
        float mx = -INFINITY;
        /* pass 1: scores */
        for (int s = 0; s < p->n_segs; s++) {
            const lz_kv_segment *sg = &p->segs[s];
            int len = sg->n_kept ? sg->n_kept[p->layer * KV + g] : sg->n;
            const float *kb = sg->k + ((size_t)p->layer * KV + g) * (size_t)sg->stride * d;
            memcpy(qr, q, (size_t)d * sizeof(float));
            if (sg->rot) lz_rope_apply(qr, d, -sg->rot, p->rope_layout, p->inv_freq);
            for (int j = 0; j < len; j++) {
                float x = dot(qr, kb + (size_t)j * d, d) * scale;
                scores[nk++] = x;
                mx = x > mx ? x : mx;
            }
        }
        const int n_self = p->n_past + i + 1;
        const float *kc = p->k + (size_t)g * p->cache_stride * d;
        for (int j = 0; j < n_self; j++) {
            float x = dot(q, kc + (size_t)j * d, d) * scale;
            scores[nk++] = x;
            mx = x > mx ? x : mx;
        }
        /* pass 2: softmax and values */
        float sum = 0;
        for (size_t j = 0; j < nk; j++) { scores[j] = expf(scores[j] - mx); sum += scores[j]; }
        float inv = 1.0f / sum;
        memset(o, 0, (size_t)d * sizeof(float));
        nk = 0;
        for (int s = 0; s < p->n_segs; s++) {
            const lz_kv_segment *sg = &p->segs[s];
            int len = sg->n_kept ? sg->n_kept[p->layer * KV + g] : sg->n;
            const float *vb = sg->v + ((size_t)p->layer * KV + g) * (size_t)sg->stride * d;
            for (int j = 0; j < len; j++) axpy(o, scores[nk++] * inv, vb + (size_t)j * d, d);
        }
        const float *vc = p->v + (size_t)g * p->cache_stride * d;
        for (int j = 0; j < n_self; j++) axpy(o, scores[nk++] * inv, vc + (size_t)j * d, d);
    }
    free(scratch);
    return 0;
}

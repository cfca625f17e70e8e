/* attention.c - lazy attention on the CPU (see attention.h). Two paths with
 * the same math: per (row, head) dot products for decode (few rows), and
 * GEMMs for prefill, where the query rows of one KV head's group and a block
 * of rows form a matrix: S = Q_rot K^T per segment (Q rotated by R(-rot) once
 * per segment), a masked row softmax, then O = P V. Keys are never rotated
 * or copied. */
#include "model/attention.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp8.h"
#include "base/half.h"

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

/* The same over bf16 rows (widened exactly: the same products and order) */
static inline float dot16(const float *a, const uint16_t *b, int d)
{
    float s = 0;
    for (int i = 0; i < d; i++) s += a[i] * lz_bf16_to_f32(b[i]);
    return s;
}

static inline void axpy16(float *y, float a, const uint16_t *x, int d)
{
    for (int i = 0; i < d; i++) y[i] += a * lz_bf16_to_f32(x[i]);
}

/* The same over fp8 rows through lut, the 256 codes at the head's scale */
static inline float dot8(const float *a, const uint8_t *b, const float *lut, int d)
{
    float s = 0;
    for (int i = 0; i < d; i++) s += a[i] * lut[b[i]];
    return s;
}

static inline void axpy8(float *y, float a, const uint8_t *x, const float *lut, int d)
{
    for (int i = 0; i < d; i++) y[i] += a * lut[x[i]];
}

/* lut[b] = e4m3(b) * the scale of (layer, kv head g) of an fp8 segment's keys (kv 0) or values (1) */
static void fp8_lut(float *lut, const lz_kv_segment *sg, int kv, const lz_attn_params *p, int g)
{
    const float sc = (kv ? sg->v_scales : sg->k_scales)[p->layer * p->n_kv_heads + g];
    for (int b = 0; b < 256; b++) lut[b] = lz_e4m3_to_f32((uint8_t)b) * sc;
}

/* Rows [0, len) of a segment block (layer, kv head g) as fp32: the block
 * itself, or (bf16, fp8) widened into buf. */
static const float *seg_rows(const lz_kv_segment *sg, int kv, const lz_attn_params *p, int g, int len, float *buf)
{
    const int d = p->head_dim;
    const size_t off = lz_kv_segment_block(sg, p->layer, g, p->n_kv_heads, d);
    if (sg->k8) {
        float lut[256];
        fp8_lut(lut, sg, kv, p, g);
        const uint8_t *src = (kv ? sg->v8 : sg->k8) + off;
        for (size_t e = 0; e < (size_t)len * d; e++) buf[e] = lut[src[e]];
        return buf;
    }
    if (!sg->k16) return (kv ? sg->v : sg->k) + off;
    const uint16_t *src = (kv ? sg->v16 : sg->k16) + off;
    for (size_t e = 0; e < (size_t)len * d; e++) buf[e] = lz_bf16_to_f32(src[e]);
    return buf;
}

int lz_attention_cpu_rows(const lz_attn_params *p)
{
    const int d = p->head_dim, H = p->n_heads, KV = p->n_kv_heads, group = H / KV;
    const float scale = 1.0f / sqrtf((float)d);
    size_t max_keys = (size_t)p->n_past + (size_t)p->n;
    for (int s = 0; s < p->n_segs; s++) max_keys += (size_t)p->segs[s].n;
    int nthreads = omp_get_max_threads();
    float *scratch = malloc(((size_t)nthreads * (max_keys + (size_t)d)) * sizeof(float));
    if (!scratch) return -1;
    /* small problems (tiny models, short contexts) run on one thread: waking the
     * others costs more than the work */
    const int par = (double)p->n * H * (double)max_keys * d >= 262144.0;

#pragma omp parallel for schedule(dynamic, 1) if (par)
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
            const size_t off = lz_kv_segment_block(sg, p->layer, g, KV, d);
            memcpy(qr, q, (size_t)d * sizeof(float));
            if (sg->rot) lz_rope_apply(qr, d, -sg->rot, p->rope_layout, p->inv_freq);
            float lut[256];
            if (sg->k8) fp8_lut(lut, sg, 0, p, g);
            for (int j = 0; j < len; j++) {
                float x = (sg->k8    ? dot8(qr, sg->k8 + off + (size_t)j * d, lut, d)
                           : sg->k16 ? dot16(qr, sg->k16 + off + (size_t)j * d, d)
                                     : dot(qr, sg->k + off + (size_t)j * d, d)) *
                          scale;
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
            const size_t off = lz_kv_segment_block(sg, p->layer, g, KV, d);
            float lut[256];
            if (sg->k8) fp8_lut(lut, sg, 1, p, g);
            for (int j = 0; j < len; j++) {
                const float a = scores[nk++] * inv;
                if (sg->k8) axpy8(o, a, sg->v8 + off + (size_t)j * d, lut, d);
                else if (sg->k16) axpy16(o, a, sg->v16 + off + (size_t)j * d, d);
                else axpy(o, a, sg->v + off + (size_t)j * d, d);
            }
        }
        const float *vc = p->v + (size_t)g * p->cache_stride * d;
        for (int j = 0; j < n_self; j++) axpy(o, scores[nk++] * inv, vc + (size_t)j * d, d);
    }
    free(scratch);
    return 0;
}

/* GEMM path: one task per (kv head, block of query rows). */
#define ROW_BLOCK 64

int lz_attention_cpu_gemm(const lz_attn_params *p)
{
    const int d = p->head_dim, H = p->n_heads, KV = p->n_kv_heads, group = H / KV;
    const float scale = 1.0f / sqrtf((float)d);
    size_t n_keys = (size_t)p->n_past + (size_t)p->n;
    for (int s = 0; s < p->n_segs; s++) n_keys += (size_t)p->segs[s].n;
    const int n_blocks = (p->n + ROW_BLOCK - 1) / ROW_BLOCK;
    const size_t M = (size_t)ROW_BLOCK * group; /* matrix rows per task */
    int nthreads = omp_get_max_threads();
    size_t wide = 0; /* rows of the longest bf16 segment block: widened per block */
    for (int s = 0; s < p->n_segs; s++)
        if ((p->segs[s].k16 || p->segs[s].k8) && (size_t)p->segs[s].n > wide) wide = (size_t)p->segs[s].n;
    size_t per_thread = M * n_keys + 2 * M * (size_t)d + wide * (size_t)d;
    float *scratch = malloc((size_t)nthreads * per_thread * sizeof(float));
    if (!scratch) return -1;

#pragma omp parallel for schedule(dynamic, 1)
    for (int task = 0; task < KV * n_blocks; task++) {
        const int g = task / n_blocks, i0 = (task % n_blocks) * ROW_BLOCK;
        const int rows = p->n - i0 < ROW_BLOCK ? p->n - i0 : ROW_BLOCK;
        const int m = rows * group; /* matrix row r = (i - i0) * group + hh */
        float *S = scratch + (size_t)omp_get_thread_num() * per_thread;
        float *Q = S + M * n_keys, *Qr = Q + M * (size_t)d, *W = Qr + M * (size_t)d;
        for (int r = 0; r < m; r++)
            memcpy(Q + (size_t)r * d, p->q + ((size_t)(i0 + r / group) * H + g * group + r % group) * d,
                   (size_t)d * sizeof(float));
        /* scores, segment by segment, then the cache */
        size_t col = 0;
        for (int s = 0; s < p->n_segs; s++) {
            const lz_kv_segment *sg = &p->segs[s];
            int len = sg->n_kept ? sg->n_kept[p->layer * KV + g] : sg->n;
            if (len <= 0) continue;
            const float *kb = seg_rows(sg, 0, p, g, len, W);
            const float *qq = Q;
            if (sg->rot) { /* one cos/sin table per segment, shared by every row */
                float cs[LZ_MAX_HEAD_DIM / 2], sn[LZ_MAX_HEAD_DIM / 2];
                lz_rope_cos_sin(cs, sn, d, -sg->rot, p->inv_freq);
                memcpy(Qr, Q, (size_t)m * d * sizeof(float));
                for (int r = 0; r < m; r++) lz_rope_apply_cs(Qr + (size_t)r * d, d, p->rope_layout, cs, sn);
                qq = Qr;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, len, d, scale, qq, d, kb, d, 0.0f, S + col,
                        (int)n_keys);
            col += (size_t)len;
        }
        const size_t seg_cols = col;
        const int n_self = p->n_past + i0 + rows; /* cache keys the last row of the block sees */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n_self, d, scale, Q, d,
                    p->k + (size_t)g * p->cache_stride * d, d, 0.0f, S + col, (int)n_keys);
        /* causal mask and softmax per row */
        for (int r = 0; r < m; r++) {
            float *row = S + (size_t)r * n_keys;
            const size_t visible = seg_cols + (size_t)(p->n_past + i0 + r / group + 1);
            float mx = -INFINITY, sum = 0;
            for (size_t j = 0; j < visible; j++) mx = row[j] > mx ? row[j] : mx;
            for (size_t j = 0; j < visible; j++) { row[j] = expf(row[j] - mx); sum += row[j]; }
            float inv = 1.0f / sum;
            for (size_t j = 0; j < visible; j++) row[j] *= inv;
            for (size_t j = visible; j < seg_cols + (size_t)n_self; j++) row[j] = 0.0f;
        }
        /* O = P V, accumulated over segments and the cache */
        float *O = Qr;
        col = 0;
        float beta = 0.0f;
        for (int s = 0; s < p->n_segs; s++) {
            const lz_kv_segment *sg = &p->segs[s];
            int len = sg->n_kept ? sg->n_kept[p->layer * KV + g] : sg->n;
            if (len <= 0) continue;
            const float *vb = seg_rows(sg, 1, p, g, len, W);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d, len, 1.0f, S + col, (int)n_keys, vb, d, beta, O, d);
            beta = 1.0f;
            col += (size_t)len;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d, n_self, 1.0f, S + col, (int)n_keys,
                    p->v + (size_t)g * p->cache_stride * d, d, beta, O, d);
        for (int r = 0; r < m; r++)
            memcpy(p->out + ((size_t)(i0 + r / group) * H + g * group + r % group) * d, O + (size_t)r * d,
                   (size_t)d * sizeof(float));
    }
    free(scratch);
    return 0;
}

int lz_attention_cpu(const lz_attn_params *p)
{
    /* few rows (decode): dot products; many rows (prefill): GEMMs */
    return p->n * (p->n_heads / p->n_kv_heads) >= 16 ? lz_attention_cpu_gemm(p) : lz_attention_cpu_rows(p);
}

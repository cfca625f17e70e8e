/* decode_group_case.h - a random batched decode step for the grouped decode
 * (kernels/lz_decode_group.h), built in host memory for tests/test_decode_group.c
 * (the CPU reference against the per-row lz_decode_lazy_ref) and
 * tests/cuda/kernels_test.cuh (the CUDA kernel against the reference).
 *
 * ND documents in one pool, each with its own length per (layer, kv head)
 * (as Ada-KV stores them) and its values at rows of their own; B rows each
 * placing 0..S_MAX of them (drawn with Zipf-like skew, so most are shared) at
 * random offsets (some past 65,536), then its own rows. The block words,
 * values' rows and counts of one layer are those lz_decode_lazy reads; each
 * row's seg_first table covers every layer; the plan's rows are ready. With
 * fp8, the documents are e4m3 rows of k8 / v8 with a key and a value scale
 * per (document, layer, kv head) (lz_decode.h's fp8 blocks), the own rows
 * bf16.
 * Legend: B = rows, KV = kv heads, G = heads a kv head, H = KV*G, d =
 * head_dim, L = layers, NB = block words a list.
 */
#ifndef LZ_DECODE_GROUP_CASE_H
#define LZ_DECODE_GROUP_CASE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/lz_decode_group.h"
#include "base/fp8.h"
#include "base/half.h"
#include "base/rope.h"

#define DGC_S_MAX 6

typedef struct {
    int B, KV, G, H, d, L, layer, ND, NB, layout;
    size_t R;           /* pool rows */
    lz_bf16 *k, *v, *q; /* (R, d), (R, d), (B, H, d) */
    float *inv_freq;    /* d / 2 */
    uint64_t *words, *vrows; /* (B, KV, NB) at layer */
    int32_t *n_blocks;       /* (B, KV) */
    int fp8;
    uint8_t *k8, *v8;        /* (R, d) e4m3 rows (fp8) */
    float *ksc, *vsc;        /* (B, KV, NB) each block's scales, 0 for bf16 blocks (fp8) */
    int32_t *segf;           /* (B, L, KV, DGC_S_MAX + 1): row b's table at b * L * KV * (S_MAX + 1), n_seg a stride */
    int n_seg[64];
    uint64_t keys[64][DGC_S_MAX];
    int32_t offs[64][DGC_S_MAX], blocks[64][DGC_S_MAX + 1];
    lz_decode_group_row rows[64];
} dgc_case;

static inline uint64_t dgc_next(uint64_t *s)
{
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}
static inline double dgc_u(uint64_t *s) { return (double)(dgc_next(s) >> 11) / 9007199254740992.0; }

static inline void dgc_free(dgc_case *c)
{
    free(c->k); free(c->v); free(c->q); free(c->inv_freq); free(c->words); free(c->vrows); free(c->n_blocks);
    free(c->segf); free(c->k8); free(c->v8); free(c->ksc); free(c->vsc);
    memset(c, 0, sizeof *c);
}

/* B <= 64; 0, or -1 (out of memory) */
static inline int dgc_make(dgc_case *c, uint64_t seed, int B, int KV, int G, int d, int layout, int ND, int fp8)
{
    memset(c, 0, sizeof *c);
    uint64_t s = seed | 1;
    c->B = B, c->KV = KV, c->G = G, c->H = KV * G, c->d = d, c->L = 2, c->layer = 1, c->ND = ND, c->layout = layout;
    const int L = c->L, W = DGC_S_MAX + 1;
    /* document lengths (L, KV) each, 1..300, one in five a whole block multiple; own lengths 1..200 */
    int *dlen = (int *)malloc(sizeof(int) * (size_t)ND * L * KV);
    size_t *drow = (size_t *)malloc(sizeof(size_t) * (size_t)ND * L * KV);
    int own[64];
    size_t ownrow[64];
    if (!dlen || !drow) { free(dlen); free(drow); return -1; }
    size_t R = 0;
    for (int i = 0; i < ND * L * KV; i++) {
        dlen[i] = dgc_u(&s) < 0.2 ? 64 * (1 + (int)(dgc_u(&s) * 4)) : 1 + (int)(dgc_u(&s) * 300);
        drow[i] = R;
        R += (size_t)dlen[i];
    }
    for (int b = 0; b < B; b++) {
        own[b] = 1 + (int)(dgc_u(&s) * 200);
        ownrow[b] = R;
        R += (size_t)own[b] * KV;
    }
    const size_t vbase = R + 7; /* values apart from the keys (v_rows) */
    c->R = vbase + R;
    c->k = (lz_bf16 *)malloc(sizeof(lz_bf16) * c->R * d);
    c->v = (lz_bf16 *)malloc(sizeof(lz_bf16) * c->R * d);
    c->q = (lz_bf16 *)malloc(sizeof(lz_bf16) * (size_t)B * c->H * d);
    c->inv_freq = (float *)malloc(sizeof(float) * (size_t)d / 2);
    c->NB = DGC_S_MAX * 5 + 4 + 1;
    c->words = (uint64_t *)calloc((size_t)B * KV * c->NB, sizeof(uint64_t));
    c->vrows = (uint64_t *)calloc((size_t)B * KV * c->NB, sizeof(uint64_t));
    c->n_blocks = (int32_t *)calloc((size_t)B * KV, sizeof(int32_t));
    c->segf = (int32_t *)calloc((size_t)B * L * KV * W, sizeof(int32_t));
    c->fp8 = fp8;
    if (fp8) {
        c->k8 = (uint8_t *)malloc(c->R * d);
        c->v8 = (uint8_t *)malloc(c->R * d);
        c->ksc = (float *)calloc((size_t)B * KV * c->NB, sizeof(float));
        c->vsc = (float *)calloc((size_t)B * KV * c->NB, sizeof(float));
    }
    if (!c->k || !c->v || !c->q || !c->inv_freq || !c->words || !c->vrows || !c->n_blocks || !c->segf ||
        (fp8 && (!c->k8 || !c->v8 || !c->ksc || !c->vsc))) {
        free(dlen); free(drow); dgc_free(c);
        return -1;
    }
    for (size_t i = 0; i < c->R * d; i++) {
        c->k[i] = lz_f32_to_bf16((float)(2 * dgc_u(&s) - 1));
        c->v[i] = lz_f32_to_bf16((float)(2 * dgc_u(&s) - 1));
    }
    for (size_t i = 0; fp8 && i < c->R * d; i++) {
        c->k8[i] = lz_f32_to_e4m3((float)(448 * (2 * dgc_u(&s) - 1)));
        c->v8[i] = lz_f32_to_e4m3((float)(448 * (2 * dgc_u(&s) - 1)));
    }
    /* each document's scales per (layer, kv head), K then V */
    float *dsc = (float *)malloc(sizeof(float) * 2 * (size_t)ND * L * KV);
    if (!dsc) { free(dlen); free(drow); dgc_free(c); return -1; }
    for (int i = 0; i < 2 * ND * L * KV; i++) dsc[i] = (float)((0.5 + dgc_u(&s)) / 448.0);
    for (size_t i = 0; i < (size_t)B * c->H * d; i++) c->q[i] = lz_f32_to_bf16((float)(2 * dgc_u(&s) - 1));
    lz_rope_inv_freqs(c->inv_freq, d, 500000.0f, NULL);
    for (int b = 0; b < B; b++) {
        const int S = (int)(dgc_u(&s) * (DGC_S_MAX + 1));
        c->n_seg[b] = S + 1;
        int docs[DGC_S_MAX];
        for (int i = 0; i < S; i++) {
            docs[i] = (int)(ND * pow(dgc_u(&s), 2.0)); /* skewed: low ids placed most */
            if (docs[i] >= ND) docs[i] = ND - 1;
            const double r = dgc_u(&s);
            c->offs[b][i] = r < 0.1 ? 0 : (r < 0.3 ? 65536 + (int)(dgc_u(&s) * (LZ_DECODE_MAX_OFFSET - 65536))
                                                 : (int)(dgc_u(&s) * 8192));
            c->keys[b][i] = (uint64_t)docs[i] + 1;
            int most = 0;
            for (int lh = 0; lh < L * KV; lh++) {
                const int nb = (dlen[docs[i] * L * KV + lh] + 63) / 64;
                most = nb > most ? nb : most;
            }
            c->blocks[b][i] = most;
        }
        c->blocks[b][S] = (own[b] + 63) / 64;
        int32_t *sf = c->segf + (size_t)b * L * KV * W;
        for (int l = 0; l < L; l++)
            for (int h = 0; h < KV; h++) {
                int n = 0;
                uint64_t *w = c->words + ((size_t)b * KV + h) * c->NB, *vr = c->vrows + ((size_t)b * KV + h) * c->NB;
                float *ks = fp8 ? c->ksc + ((size_t)b * KV + h) * c->NB : NULL, *vs = fp8 ? c->vsc + ((size_t)b * KV + h) * c->NB : NULL;
                for (int i = 0; i <= S; i++) {
                    sf[((size_t)l * KV + h) * (S + 1) + i] = n;
                    const int len = i < S ? dlen[(docs[i] * L + l) * KV + h] : own[b];
                    const size_t row = i < S ? drow[(docs[i] * L + l) * KV + h] : ownrow[b] + (size_t)h * own[b];
                    if (l == c->layer && fp8 && i < S) {
                        const size_t at = (docs[i] * L + l) * KV + h;
                        lz_decode_add_segment_fp8(w, vr, ks, vs, &n, c->NB, row, vbase + row, len, c->offs[b][i], dsc[at],
                                                  dsc[(size_t)ND * L * KV + at]);
                    } else if (l == c->layer)
                        lz_decode_add_segment_kv(w, vr, &n, c->NB, row, vbase + row, len, i < S ? c->offs[b][i] : 0);
                    else
                        n += (len + 63) / 64;
                }
                if (l == c->layer) c->n_blocks[(size_t)b * KV + h] = n;
            }
        c->rows[b] = (lz_decode_group_row){sf, S + 1, c->keys[b], c->offs[b], c->blocks[b]};
    }
    free(dlen);
    free(drow);
    free(dsc);
    return 0;
}

/* the lz_decode_params of the case (host pointers; o the caller's) */
static inline lz_decode_params dgc_params(const dgc_case *c, lz_bf16 *o)
{
    lz_decode_params p;
    memset(&p, 0, sizeof p);
    p.o = o;
    p.q = c->q;
    p.k_pool = c->k;
    p.v_pool = c->v;
    p.blocks = c->words;
    p.v_rows = c->vrows;
    p.n_blocks = c->n_blocks;
    p.inv_freq = c->inv_freq;
    p.max_blocks = c->NB;
    p.batch = c->B;
    p.n_heads = c->H;
    p.n_kv_heads = c->KV;
    p.head_dim = c->d;
    p.rope_layout = c->layout;
    p.scale = 1.0f / sqrtf((float)c->d);
    p.n_split = 1;
    if (c->fp8) p.k_pool8 = c->k8, p.v_pool8 = c->v8, p.k_scales = c->ksc, p.v_scales = c->vsc;
    return p;
}

/* the grouped decode's parameters over the case (host pointers) for items[0..n) and their
 * partial counts; its workspace malloc'ed (NULL when out of memory; the caller frees it) */
static inline lz_decode_group_params dgc_group_params(const dgc_case *c, lz_bf16 *o, const lz_decode_item *items, int n,
                                                      const int32_t *n_parts, int max_parts)
{
    lz_decode_group_params gp;
    memset(&gp, 0, sizeof gp);
    gp.dec = dgc_params(c, o);
    gp.items = items;
    gp.n_items = n;
    gp.layer = c->layer;
    gp.n_parts = n_parts;
    gp.max_parts = max_parts;
    gp.work_bytes = lz_decode_group_workspace(&gp);
    gp.work = (float *)malloc(gp.work_bytes);
    return gp;
}

#endif /* LZ_DECODE_GROUP_CASE_H */

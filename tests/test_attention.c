/* test_attention.c - lazy CPU attention (model/attention.c) against a naive
 * reference that materialises every segment's keys rotated by R(rot) and
 * runs plain softmax attention, on random inputs: GQA ratios 1/2/4, both
 * rotary layouts, llama3 divisors, unequal kept lengths per (layer, head)
 * including empty heads, offsets past 65,536, 1-150 query rows, through
 * both paths (per-row dot products and GEMMs); segments read as fp8 e4m3
 * with a scale a (layer, head) give the bits of their values in fp32. */
#include <math.h>

#include "model/attention.h"
#include "base/fp8.h"
#include "tests/test.h"

static uint64_t rng = 88172645463325252ull;
static float frand(void) { return (float)(lz_test_xorshift(&rng) >> 40) / 16777216.0f * 2.0f - 1.0f; }
static int irand(int n) { return (int)(lz_test_xorshift(&rng) % (uint64_t)n); }

/* Naive: build the full key/value list per kv head (segments rotated, then
 * the cache), scores in double, causal over the cache. */
static void naive(const lz_attn_params *p, float *out)
{
    const int d = p->head_dim, H = p->n_heads, KV = p->n_kv_heads;
    for (int i = 0; i < p->n; i++)
        for (int h = 0; h < H; h++) {
            int g = h / (H / KV);
            double sc[8192];
            const float *vs[8192];
            int nk = 0;
            float kr[256];
            const float *q = p->q + ((size_t)i * H + h) * d;
            for (int s = 0; s < p->n_segs; s++) {
                const lz_kv_segment *sg = &p->segs[s];
                int len = sg->n_kept ? sg->n_kept[p->layer * KV + g] : sg->n;
                for (int j = 0; j < len; j++) {
                    const float *k = sg->k + (((size_t)p->layer * KV + g) * sg->stride + j) * d;
                    memcpy(kr, k, (size_t)d * 4);
                    lz_rope_apply(kr, d, sg->rot, p->rope_layout, p->inv_freq); /* materialise */
                    double x = 0;
                    for (int t = 0; t < d; t++) x += (double)q[t] * kr[t];
                    sc[nk] = x / sqrt((double)d);
                    vs[nk++] = sg->v + (((size_t)p->layer * KV + g) * sg->stride + j) * d;
                }
            }
            for (int j = 0; j < p->n_past + i + 1; j++) {
                const float *k = p->k + ((size_t)g * p->cache_stride + j) * d;
                double x = 0;
                for (int t = 0; t < d; t++) x += (double)q[t] * k[t];
                sc[nk] = x / sqrt((double)d);
                vs[nk++] = p->v + ((size_t)g * p->cache_stride + j) * d;
            }
            double mx = -1e300, sum = 0;
            for (int j = 0; j < nk; j++) mx = fmax(mx, sc[j]);
            for (int j = 0; j < nk; j++) { sc[j] = exp(sc[j] - mx); sum += sc[j]; }
            float *o = out + ((size_t)i * H + h) * d;
            for (int t = 0; t < d; t++) {
                double acc = 0;
                for (int j = 0; j < nk; j++) acc += sc[j] / sum * vs[j][t];
                o[t] = (float)acc;
            }
        }
}

static void one_case(int trial)
{
    const int L = 2, KV = 1 + irand(3), group = 1 << irand(3), H = KV * group;
    const int d = (irand(2) ? 16 : 64), layout = irand(2), n = 1 + irand(trial % 4 == 1 ? 150 : 6), n_past = irand(5);
    const int layer = irand(L), n_segs = 1 + irand(5);
    float inv_freq[128], div[128];
    for (int i = 0; i < d / 2; i++) div[i] = 1.0f + (float)irand(8);
    lz_rope_inv_freqs(inv_freq, d, 500000.0f, irand(2) ? div : NULL);
    lz_kv_segment segs[8], segs8[8];
    float *blocks[16];
    uint8_t *bytes8[16];
    float *scales8[8];
    int *kept[8];
    int nb = 0, n8 = 0;
    for (int s = 0; s < n_segs; s++) {
        int len = 1 + irand(40), stride = len + irand(3);
        size_t sz = (size_t)L * KV * stride * d;
        float *k = malloc(sz * 4), *v = malloc(sz * 4);
        for (size_t t = 0; t < sz; t++) { k[t] = frand(); v[t] = frand(); }
        kept[s] = malloc((size_t)L * KV * sizeof(int));
        for (int t = 0; t < L * KV; t++) kept[s][t] = irand(4) == 0 ? 0 : irand(len + 1); /* some empty heads */
        int64_t rot = irand(2) ? (int64_t)irand(1 << 20) + 65536 : irand(300) - 100;
        segs[s] = (lz_kv_segment){.k = k, .v = v, .n_kept = irand(3) ? kept[s] : NULL, .n = len, .stride = stride, .rot = rot};
        segs8[s] = segs[s];
        scales8[s] = NULL;
        if (irand(2)) { /* an fp8 twin: its values made e4m3 * a scale a (layer, head), the fp32 copy holding them too */
            const int nh = L * KV;
            uint8_t *k8 = malloc(sz), *v8 = malloc(sz);
            float *sc = malloc((size_t)2 * nh * 4);
            for (int part = 0; part < 2; part++)
                for (int lh = 0; lh < nh; lh++) {
                    float *x = (part ? v : k) + (size_t)lh * stride * d, mx = 0;
                    for (int t = 0; t < stride * d; t++) mx = fmaxf(mx, fabsf(x[t]));
                    const float scale = mx > 0 ? mx / 448.f : 1.f;
                    sc[part * nh + lh] = scale;
                    for (int t = 0; t < stride * d; t++) {
                        const uint8_t b = lz_f32_to_e4m3(x[t] / scale);
                        (part ? v8 : k8)[(size_t)lh * stride * d + t] = b;
                        x[t] = lz_e4m3_to_f32(b) * scale;
                    }
                }
            segs8[s].k = segs8[s].v = NULL;
            segs8[s].k8 = k8, segs8[s].v8 = v8, segs8[s].k_scales = sc, segs8[s].v_scales = sc + nh;
            bytes8[n8++] = k8, bytes8[n8++] = v8;
            scales8[s] = sc;
        }
        blocks[nb++] = k;
        blocks[nb++] = v;
    }
    int T = n_past + n + 2;
    float *kc = malloc((size_t)KV * T * d * 4), *vc = malloc((size_t)KV * T * d * 4);
    for (size_t t = 0; t < (size_t)KV * T * d; t++) { kc[t] = frand(); vc[t] = frand(); }
    float *q = malloc((size_t)n * H * d * 4), *o1 = malloc((size_t)n * H * d * 4), *o2 = malloc((size_t)n * H * d * 4);
    for (size_t t = 0; t < (size_t)n * H * d; t++) q[t] = 2 * frand();
    for (size_t t = 0; t < (size_t)n * H * d; t++) o1[t] = NAN; /* poisoned: every element must be written */
    lz_attn_params p = {.q = q, .out = o1, .n = n, .n_heads = H, .n_kv_heads = KV, .head_dim = d, .layer = layer,
                        .segs = segs, .n_segs = n_segs, .k = kc, .v = vc, .cache_stride = T, .n_past = n_past,
                        .inv_freq = inv_freq, .rope_layout = layout};
    int gemm = trial % 2;
    CHECK((gemm ? lz_attention_cpu_gemm(&p) : lz_attention_cpu_rows(&p)) == 0, "attention");
    naive(&p, o2);
    double err = 0, ref = 0;
    int nan = 0;
    for (size_t t = 0; t < (size_t)n * H * d; t++) {
        if (isnan(o1[t])) nan = 1;
        err = fmax(err, fabs(o1[t] - o2[t]));
        ref = fmax(ref, fabs(o2[t]));
    }
    CHECK(!nan, "trial %d: output element not written or NaN", trial);
    if (n8) { /* the fp8 twins read through their scales: the same floats, the same bits */
        float *o3 = malloc((size_t)n * H * d * 4);
        lz_attn_params p8 = p;
        p8.segs = segs8, p8.out = o3;
        CHECK((gemm ? lz_attention_cpu_gemm(&p8) : lz_attention_cpu_rows(&p8)) == 0 && !memcmp(o1, o3, (size_t)n * H * d * 4),
              "trial %d (%s path): fp8 segments differ from their values in fp32", trial, gemm ? "gemm" : "rows");
        free(o3);
    }
    CHECK(err <= 1e-5 * fmax(ref, 1e-3) + 1e-6, "trial %d (%s path, n %d KV %d group %d d %d layout %d segs %d): err %g ref %g",
          trial, gemm ? "gemm" : "rows", n, KV, group, d, layout, n_segs, err, ref);
    for (int b = 0; b < nb; b++) free(blocks[b]);
    for (int b = 0; b < n8; b++) free(bytes8[b]);
    for (int s = 0; s < n_segs; s++) free(scales8[s]);
    for (int s = 0; s < n_segs; s++) free(kept[s]);
    free(kc); free(vc); free(q); free(o1); free(o2);
}

int main(void)
{
    for (int t = 0; t < 300; t++) one_case(t);
    return lz_test_done();
}

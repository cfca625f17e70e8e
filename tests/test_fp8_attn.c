/* test_fp8_attn.c - CPU checks of the fp8 (e4m3) side of the attention
 * references in kernels/ (the contract the CUDA kernels are tested against):
 * decode, lazy and twin, with fp8 and bf16 blocks mixed in one call (B > 1,
 * Ada-KV per-head lengths, offsets past 65,536, values at rows of their own),
 * and prefill with fp8 and bf16 segments mixed, each against a direct
 * two-pass computation in double over the dequantised values (e4m3 times the
 * kv head's scale); the fp8 re-rotation (within one e4m3 rounding of the exact
 * rotation, never saturating, scales times sqrt(2)); and lazy over fp8
 * documents at their offsets == non-lazy over the fp8 re-rotated copies within
 * the bound that one more e4m3 rounding of the keys allows. Needs no GPU.
 *
 * Legend: B = sequences, S = segments, KV = kv heads, G = H/KV, H = query
 * heads, M = rows, d = head_dim, N = keys of one (b, kv head), NB = block words
 * per (b, kv head).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/lz_decode.h"
#include "kernels/lz_prefill.h"
#include "kernels/lz_rerotate.h"
#include "base/fp8.h"
#include "base/half.h"
#include "base/rope.h"
#include "tests/test.h"
#include "tests/test_bf16.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double urand(void) { return lz_test_u01(&rng); }
static int irand(int n) { return (int)(urand() * n); } /* [0, n) */

/* Relative error of bf16 outputs against a double reference: ||a - b|| / ||b||. */
static double nerr_ref(const lz_bf16 *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double x = lz_bf16_to_f32(a[i]);
        if (isnan(x)) return INFINITY;
        num += (x - b[i]) * (x - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* n random values of magnitude up to amp; amp varies between heads so that scales differ */
static void fill_f(float *x, size_t n, float amp)
{
    for (size_t i = 0; i < n; i++) x[i] = amp * (float)(2.0 * urand() - 1.0);
}
static float rand_amp(void)
{
    static const float a[] = {0.02f, 0.3f, 1.0f, 2.0f};
    return a[irand(4)];
}
/* e4m3 bytes of x with the payload's scale absmax / 448 (1 when all zero); returns the scale */
static float quant(uint8_t *dst, const float *x, size_t n)
{
    float mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmaxf(mx, fabsf(x[i]));
    const float s = mx > 0 ? mx / LZ_E4M3_MAX : 1.0f;
    for (size_t i = 0; i < n; i++) dst[i] = lz_f32_to_e4m3(x[i] / s);
    return s;
}

static void inv_freqs(float *f, int d, int llama3)
{
    float div[64];
    if (llama3) lz_rope_llama3_divisors(div, d, 500000.0f, 8.0f, 1.0f, 4.0f, 8192.0f);
    lz_rope_inv_freqs(f, d, llama3 ? 500000.0f : 10000.0f, llama3 ? div : NULL);
}

/* out[g*d ..] = softmax(scale * q_g . K^T) V over n keys, in double (two passes) */
static void direct_attn(double *out, const float *q, int G, const float *K, const float *V, int64_t n, int d,
                        float scale)
{
    double *sc = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    for (int g = 0; g < G; g++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int i = 0; i < d; i++) s += (double)q[g * d + i] * K[j * d + i];
            sc[j] = s * scale;
            if (sc[j] > mx) mx = sc[j];
        }
        for (int i = 0; i < d; i++) out[g * d + i] = 0;
        for (int64_t j = 0; j < n; j++) {
            double e = exp(sc[j] - mx);
            sum += e;
            for (int i = 0; i < d; i++) out[g * d + i] += e * V[j * d + i];
        }
        for (int i = 0; i < d; i++) out[g * d + i] = sum > 0 ? out[g * d + i] / sum : 0;
    }
    free(sc);
}

/* Lazy over fp8 documents at their offsets against the non-lazy twin over the
 * fp8 re-rotated copies: the copies' keys carry one more e4m3 rounding (3
 * mantissa bits: up to 2^-4 relative an element, about 2.2% rms) after the
 * rotation, so the scores move by about 2% of their size, and the weights with
 * them: the outputs' relative error grows with the scores' spread, about 1%
 * with keys and queries in [-1, 1], up to 2% with keys up to 2 (the worst case
 * of the run is printed at the end; keys up to 4 reach 5%).
 * tests/cuda/kernels_test.cuh adds the kernels' own rounding to it. */
#define LAZY_BLOCK_BOUND 4e-2
static double worst_lazy_block;

/* ---- decode: B sequences, each S segments (fp8 or bf16 at random) + own keys (bf16, offset 0) ---- */

enum { DEC_SMAX = 6, DEC_NB = DEC_SMAX * 4 + 2 };

static void test_decode(int d, int layout, int G, int KV, int B, int vsep, int llama3)
{
    const int H = KV * G, NB = DEC_NB;
    float inv[64];
    inv_freqs(inv, d, llama3);
    /* plan: rows of both pools (bf16 rows R, e4m3 rows R8); the rerotated copies for the twin */
    int S[8], cap[8][DEC_SMAX + 1], f8[8][DEC_SMAX + 1];
    int64_t off[8][DEC_SMAX + 1];
    size_t R = 0, R8 = 0;
    for (int b = 0; b < B; b++) {
        S[b] = 1 + irand(DEC_SMAX);
        int64_t pos = 70000 + irand(50000);
        for (int s = 0; s <= S[b]; s++) {
            cap[b][s] = 1 + irand(s == S[b] ? 60 : 150);
            f8[b][s] = s < S[b] && urand() < 0.65;
            off[b][s] = s == S[b] ? 0 : pos;
            pos += cap[b][s] + irand(2000);
            if (f8[b][s]) R8 += (size_t)KV * cap[b][s];
            else R += (size_t)KV * cap[b][s];
        }
    }
    lz_bf16 *kp = calloc(R * d + 1, 2), *vp = calloc(R * d + 1, 2), *kpr = calloc(R * d + 1, 2);
    uint8_t *kp8 = calloc(R8 * d + 1, 1), *vp8 = calloc(R8 * d + 1, 1), *kp8r = calloc(R8 * d + 1, 1);
    size_t nw = (size_t)B * KV * NB;
    uint64_t *w = calloc(nw, 8), *wr = calloc(nw, 8), *vr = vsep ? calloc(nw, 8) : NULL;
    float *ks = calloc(nw, 4), *vs = calloc(nw, 4), *ksr = calloc(nw, 4);
    int32_t *nb = calloc((size_t)B * KV, 4), *nbr = calloc((size_t)B * KV, 4);
    /* the keys and values each (b, h) sees, dequantised: lazy (rotated by the offset) and twin (as stored) */
    const int64_t NMAX = (int64_t)(DEC_SMAX + 1) * 150;
    float *Kl = malloc(sizeof(float) * (size_t)B * KV * NMAX * d), *Kt = malloc(sizeof(float) * (size_t)B * KV * NMAX * d);
    float *Vd = malloc(sizeof(float) * (size_t)B * KV * NMAX * d);
    int64_t *nkeys = calloc((size_t)B * KV, sizeof(int64_t));
    float *tmp = malloc(sizeof(float) * 150 * d), *row = malloc(sizeof(float) * d);
    size_t r = 0, r8 = 0;
    int64_t total = 0, total8 = 0;
    for (int b = 0; b < B; b++)
        for (int s = 0; s <= S[b]; s++) {
            const int c = cap[b][s];
            for (int h = 0; h < KV; h++) {
                const int len = (s < S[b] && urand() < 0.15) ? 0 : (h == s % KV ? c : 1 + irand(c));
                const size_t at = ((size_t)b * KV + h) * NB;
                const size_t ki = (size_t)b * KV + h;
                float kamp = rand_amp(), vamp = rand_amp();
                if (f8[b][s]) {
                    /* a kv head's rows of this segment: cap rows, the first len kept; scales over the kept */
                    const size_t kr = r8 + (size_t)h * c, vrow = vsep ? R8 - r8 - (size_t)KV * c + (size_t)h * c : kr;
                    fill_f(tmp, (size_t)len * d, kamp);
                    float sk = quant(kp8 + kr * d, tmp, (size_t)len * d);
                    fill_f(tmp, (size_t)len * d, vamp);
                    float sv = quant(vp8 + vrow * d, tmp, (size_t)len * d);
                    CHECK(lz_decode_add_segment_fp8(w + at, vr ? vr + at : NULL, ks + at, vs + at, &nb[ki], NB, kr,
                                                    vrow, len, off[b][s], sk, sv) == 0, "add fp8 segment");
                    /* the twin's words: the same blocks (v_rows and v_scales rewritten alike), offset 0 */
                    CHECK(lz_decode_add_segment_fp8(wr + at, vr ? vr + at : NULL, ksr + at, vs + at, &nbr[ki], NB, kr,
                                                    vrow, len, 0, sk * LZ_REROTATE_FP8_GROWTH, sv) == 0,
                          "add fp8 segment (twin)");
                    /* the rerotated copy of this head's keys for the twin */
                    if (len) {
                        lz_rerotate_params rp = {0};
                        rp.inv_freq = inv; rp.n_rows = len; rp.offset = off[b][s]; rp.head_dim = d;
                        rp.rope_layout = layout; rp.src8 = kp8 + kr * d; rp.dst8 = kp8r + kr * d;
                        CHECK(lz_rerotate_ref(&rp, NULL) == 0, "rerotate fp8 rows");
                    }
                    for (int j = 0; j < len; j++) {
                        float *kl = Kl + ((ki * NMAX) + nkeys[ki]) * d, *kt = Kt + ((ki * NMAX) + nkeys[ki]) * d;
                        float *vd = Vd + ((ki * NMAX) + nkeys[ki]) * d;
                        for (int i = 0; i < d; i++) {
                            kt[i] = lz_e4m3_to_f32(kp8[(kr + j) * d + i]) * sk;
                            vd[i] = lz_e4m3_to_f32(vp8[(vrow + j) * d + i]) * sv;
                        }
                        memcpy(kl, kt, sizeof(float) * d);
                        lz_rope_apply(kl, d, off[b][s], layout, inv);
                        nkeys[ki]++;
                    }
                    total8 += len;
                } else {
                    const size_t kr = r + (size_t)h * c, vrow = vsep ? R - r - (size_t)KV * c + (size_t)h * c : kr;
                    for (int j = 0; j < len; j++) {
                        fill_f(row, d, kamp);
                        for (int i = 0; i < d; i++) kp[(kr + j) * d + i] = lz_f32_to_bf16(row[i]);
                        fill_f(row, d, vamp);
                        for (int i = 0; i < d; i++) vp[(vrow + j) * d + i] = lz_f32_to_bf16(row[i]);
                    }
                    CHECK(lz_decode_add_segment_kv(w + at, vr ? vr + at : NULL, &nb[ki], NB, kr, vrow, len, off[b][s]) == 0,
                          "add bf16 segment");
                    CHECK(lz_decode_add_segment_kv(wr + at, NULL, &nbr[ki], NB, kr, vrow, len, 0) == 0,
                          "add bf16 segment (twin)");
                    if (len) {
                        lz_rerotate_params rp = {.dst = kpr + kr * d, .src = kp + kr * d, .inv_freq = inv, .n_rows = len,
                                                 .offset = off[b][s], .head_dim = d, .rope_layout = layout};
                        CHECK(lz_rerotate_ref(&rp, NULL) == 0, "rerotate bf16 rows");
                    }
                    for (int j = 0; j < len; j++) {
                        float *kl = Kl + ((ki * NMAX) + nkeys[ki]) * d, *kt = Kt + ((ki * NMAX) + nkeys[ki]) * d;
                        float *vd = Vd + ((ki * NMAX) + nkeys[ki]) * d;
                        for (int i = 0; i < d; i++) {
                            kt[i] = lz_bf16_to_f32(kp[(kr + j) * d + i]);
                            vd[i] = lz_bf16_to_f32(vp[(vrow + j) * d + i]);
                        }
                        memcpy(kl, kt, sizeof(float) * d);
                        if (off[b][s]) lz_rope_apply(kl, d, off[b][s], layout, inv);
                        nkeys[ki]++;
                    }
                }
                total += len;
            }
            if (f8[b][s]) r8 += (size_t)KV * c;
            else r += (size_t)KV * c;
        }
    const size_t nq = (size_t)B * H * d;
    lz_bf16 *q = malloc(nq * 2), *o = malloc(nq * 2), *o2 = malloc(nq * 2), *o3 = malloc(nq * 2);
    float *qf = malloc(sizeof(float) * nq);
    for (size_t i = 0; i < nq; i++) {
        q[i] = lz_f32_to_bf16((float)(2 * urand() - 1));
        qf[i] = lz_bf16_to_f32(q[i]);
    }
    lz_decode_params p = {0};
    p.o = o; p.q = q; p.k_pool = kp; p.v_pool = vp; p.blocks = w; p.v_rows = vr; p.n_blocks = nb;
    p.inv_freq = inv; p.max_blocks = NB; p.batch = B; p.n_heads = H; p.n_kv_heads = KV; p.head_dim = d;
    p.rope_layout = layout; p.scale = 1.0f / sqrtf((float)d);
    p.k_pool8 = kp8; p.v_pool8 = vp8; p.k_scales = ks; p.v_scales = vs;
    CHECK(lz_decode_lazy_ref(&p, NULL) == 0, "decode lazy ref");
    lz_decode_params p2 = p;
    p2.o = o2;
    CHECK(lz_decode_ref(&p2, NULL) == 0, "decode twin ref");
    /* the direct computation of both */
    double *want = malloc(sizeof(double) * nq), *want2 = malloc(sizeof(double) * nq);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < KV; h++) {
            const size_t ki = (size_t)b * KV + h, qo = ((size_t)b * H + h * G) * d;
            direct_attn(want + qo, qf + qo, G, Kl + ki * NMAX * d, Vd + ki * NMAX * d, nkeys[ki], d, p.scale);
            direct_attn(want2 + qo, qf + qo, G, Kt + ki * NMAX * d, Vd + ki * NMAX * d, nkeys[ki], d, p.scale);
        }
    double e1 = nerr_ref(o, want, nq), e2 = nerr_ref(o2, want2, nq);
    /* bf16 output rounding (2^-9 relative at most) dominates: 4e-3 */
    CHECK(e1 < 4e-3, "decode lazy ref vs direct d=%d layout=%d G=%d B=%d: %g", d, layout, G, B, e1);
    CHECK(e2 < 4e-3, "decode twin ref vs direct d=%d layout=%d G=%d B=%d: %g", d, layout, G, B, e2);
    /* lazy == block: the twin over the re-rotated copies (fp8 keys rounded to e4m3 once more, scale x sqrt(2)) */
    lz_decode_params p3 = p;
    p3.o = o3; p3.k_pool = kpr; p3.k_pool8 = kp8r; p3.blocks = wr; p3.n_blocks = nbr; p3.k_scales = ksr;
    CHECK(lz_decode_ref(&p3, NULL) == 0, "decode twin ref over re-rotated copies");
    double e3 = lz_test_bf16_nerr(o3, o, nq);
    CHECK(e3 < LAZY_BLOCK_BOUND, "decode lazy vs block over fp8 d=%d layout=%d G=%d: %g", d, layout, G, e3);
    if (e3 > worst_lazy_block) worst_lazy_block = e3;
    printf("decode d=%3d %-8s G=%d KV=%d B=%d%s keys=%lld (fp8 %lld): ref-vs-direct lazy %.2e twin %.2e, "
           "lazy-vs-block %.2e\n", d, layout ? "half" : "adjacent", G, KV, B, vsep ? " v_rows" : "", (long long)total,
           (long long)total8, e1, e2, e3);
    free(kp); free(vp); free(kpr); free(kp8); free(vp8); free(kp8r); free(w); free(wr); free(vr);
    free(ks); free(vs); free(ksr); free(nb); free(nbr); free(Kl); free(Kt); free(Vd); free(nkeys);
    free(tmp); free(row); free(q); free(o); free(o2); free(o3); free(qf); free(want); free(want2);
}

/* ---- prefill: S segments (fp8 or bf16 at random) + M own rows (bf16) ---- */

static void test_prefill(int d, int layout, int G, int KV, int S, int M, int llama3)
{
    const int H = KV * G;
    float inv[64];
    inv_freqs(inv, d, llama3);
    lz_attn_segment segs[8], rsegs[8], bsegs[8], nsegs[8];
    memset(segs, 0, sizeof segs);
    int32_t len[8 * 4];
    float ksc[8][4], vsc[8][4], kscr[8][4];
    void *bufs[8][6];
    memset(bufs, 0, sizeof bufs);
    int64_t pos = 70000 + irand(30000), nseg_keys[4] = {0};
    int n8 = 0;
    const int64_t NMAX = 8 * 120 + 64;
    float *Kl = malloc(sizeof(float) * (size_t)KV * NMAX * d), *Kt = malloc(sizeof(float) * (size_t)KV * NMAX * d);
    float *Vd = malloc(sizeof(float) * (size_t)KV * NMAX * d), *tmp = malloc(sizeof(float) * 120 * d);
    for (int s = 0; s < S; s++) {
        const int cap = 1 + irand(120), f8 = urand() < 0.6;
        for (int h = 0; h < KV; h++) len[s * KV + h] = urand() < 0.15 ? 0 : 1 + irand(cap);
        len[s * KV + s % KV] = cap;
        const size_t n = (size_t)KV * cap * d;
        lz_bf16 *k = calloc(n, 2), *v = calloc(n, 2), *kr = calloc(n, 2); /* bf16 (fp8: the dequantised values) */
        uint8_t *k8 = calloc(n, 1), *v8 = calloc(n, 1), *k8r = calloc(n, 1);
        bufs[s][0] = k; bufs[s][1] = v; bufs[s][2] = kr; bufs[s][3] = k8; bufs[s][4] = v8; bufs[s][5] = k8r;
        for (int h = 0; h < KV; h++) {
            const int l = len[s * KV + h];
            const size_t at = (size_t)h * cap * d;
            fill_f(tmp, (size_t)l * d, rand_amp());
            ksc[s][h] = quant(k8 + at, tmp, (size_t)l * d);
            for (size_t i = 0; i < (size_t)l * d; i++) k[at + i] = lz_f32_to_bf16(f8 ? lz_e4m3_to_f32(k8[at + i]) * ksc[s][h] : tmp[i]);
            fill_f(tmp, (size_t)l * d, rand_amp());
            vsc[s][h] = quant(v8 + at, tmp, (size_t)l * d);
            for (size_t i = 0; i < (size_t)l * d; i++) v[at + i] = lz_f32_to_bf16(f8 ? lz_e4m3_to_f32(v8[at + i]) * vsc[s][h] : tmp[i]);
            kscr[s][h] = ksc[s][h] * LZ_REROTATE_FP8_GROWTH;
            for (int j = 0; j < l; j++) { /* what the references must see */
                float *kl = Kl + ((size_t)h * NMAX + nseg_keys[h]) * d, *kt = Kt + ((size_t)h * NMAX + nseg_keys[h]) * d;
                float *vd = Vd + ((size_t)h * NMAX + nseg_keys[h]) * d;
                for (int i = 0; i < d; i++) {
                    const size_t e = at + (size_t)j * d + i;
                    kt[i] = f8 ? lz_e4m3_to_f32(k8[e]) * ksc[s][h] : lz_bf16_to_f32(k[e]);
                    vd[i] = f8 ? lz_e4m3_to_f32(v8[e]) * vsc[s][h] : lz_bf16_to_f32(v[e]);
                }
                memcpy(kl, kt, sizeof(float) * d);
                lz_rope_apply(kl, d, pos, layout, inv);
                nseg_keys[h]++;
            }
        }
        lz_rerotate_params rp = {.dst = kr, .src = k, .inv_freq = inv, .n_rows = (int64_t)KV * cap, .offset = pos,
                             .head_dim = d, .rope_layout = layout};
        CHECK(lz_rerotate_ref(&rp, NULL) == 0, "rerotate bf16 segment");
        lz_rerotate_params rp8 = {0};
        rp8.inv_freq = inv; rp8.n_rows = (int64_t)KV * cap; rp8.offset = pos; rp8.head_dim = d; rp8.rope_layout = layout;
        rp8.src8 = k8; rp8.dst8 = k8r;
        CHECK(lz_rerotate_ref(&rp8, NULL) == 0, "rerotate fp8 segment");
        segs[s] = (lz_attn_segment){.k = k, .v = v, .offset = pos, .cap = cap};
        rsegs[s] = (lz_attn_segment){.k = kr, .v = v, .offset = 0, .cap = cap};
        bsegs[s] = segs[s]; /* k8 set too: with seg_fp8 = 0 the bf16 rows must be read */
        nsegs[s] = segs[s];
        if (f8) {
            segs[s].k8 = k8; segs[s].v8 = v8; segs[s].k_scale = ksc[s]; segs[s].v_scale = vsc[s];
            rsegs[s].k8 = k8r; rsegs[s].v8 = v8; rsegs[s].k_scale = kscr[s]; rsegs[s].v_scale = vsc[s];
            bsegs[s].k8 = k8; bsegs[s].v8 = v8; bsegs[s].k_scale = ksc[s]; bsegs[s].v_scale = vsc[s];
            n8++;
        }
        pos += cap + irand(3000);
    }
    const size_t nq = (size_t)H * M * d, nk = (size_t)KV * M * d;
    lz_bf16 *q = malloc(nq * 2), *kself = malloc(nk * 2), *vself = malloc(nk * 2), *kselfr = malloc(nk * 2);
    for (size_t i = 0; i < nq; i++) q[i] = lz_f32_to_bf16((float)(2 * urand() - 1));
    for (size_t i = 0; i < nk; i++) kself[i] = lz_f32_to_bf16((float)(2 * urand() - 1));
    for (size_t i = 0; i < nk; i++) vself[i] = lz_f32_to_bf16((float)(2 * urand() - 1));
    const int64_t self_off = urand() < 0.3 ? 0 : pos;
    lz_rerotate_params rs = {.dst = kselfr, .src = kself, .inv_freq = inv, .n_rows = (int64_t)KV * M,
                             .offset = self_off, .head_dim = d, .rope_layout = layout};
    CHECK(lz_rerotate_ref(&rs, NULL) == 0, "rerotate own keys");
    for (int h = 0; h < KV; h++)
        for (int j = 0; j < M; j++) {
            const int64_t n = nseg_keys[h] + j;
            float *kl = Kl + ((size_t)h * NMAX + n) * d, *kt = Kt + ((size_t)h * NMAX + n) * d;
            float *vd = Vd + ((size_t)h * NMAX + n) * d;
            for (int i = 0; i < d; i++) {
                kt[i] = lz_bf16_to_f32(kself[((size_t)h * M + j) * d + i]);
                vd[i] = lz_bf16_to_f32(vself[((size_t)h * M + j) * d + i]);
            }
            memcpy(kl, kt, sizeof(float) * d);
            if (self_off) lz_rope_apply(kl, d, self_off, layout, inv);
        }
    lz_bf16 *o = malloc(nq * 2), *o2 = malloc(nq * 2), *o3 = malloc(nq * 2), *o4 = malloc(nq * 2), *o5 = malloc(nq * 2);
    lz_prefill_params p = {0};
    p.o = o; p.q = q; p.k_self = kself; p.v_self = vself; p.self_offset = self_off; p.segs = segs; p.seg_len = len;
    p.inv_freq = inv; p.n_seg = S; p.n_rows = M; p.n_heads = H; p.n_kv_heads = KV; p.head_dim = d;
    p.rope_layout = layout; p.scale = 1.0f / sqrtf((float)d); p.seg_fp8 = 1;
    CHECK(lz_prefill_lazy_ref(&p, NULL) == 0, "prefill lazy ref");
    lz_prefill_params p2 = p;
    p2.o = o2;
    CHECK(lz_prefill_ref(&p2, NULL) == 0, "prefill twin ref");
    double *want = malloc(sizeof(double) * nq), *want2 = malloc(sizeof(double) * nq);
    float *qf = malloc(sizeof(float) * d);
    for (int h = 0; h < KV; h++)
        for (int g = 0; g < G; g++)
            for (int m = 0; m < M; m++) {
                const size_t qo = ((size_t)(h * G + g) * M + m) * d;
                for (int i = 0; i < d; i++) qf[i] = lz_bf16_to_f32(q[qo + i]);
                const int64_t nv = nseg_keys[h] + m + 1;
                direct_attn(want + qo, qf, 1, Kl + (size_t)h * NMAX * d, Vd + (size_t)h * NMAX * d, nv, d, p.scale);
                direct_attn(want2 + qo, qf, 1, Kt + (size_t)h * NMAX * d, Vd + (size_t)h * NMAX * d, nv, d, p.scale);
            }
    double e1 = nerr_ref(o, want, nq), e2 = nerr_ref(o2, want2, nq);
    CHECK(e1 < 4e-3, "prefill lazy ref vs direct d=%d layout=%d G=%d S=%d: %g", d, layout, G, S, e1);
    CHECK(e2 < 4e-3, "prefill twin ref vs direct d=%d layout=%d G=%d S=%d: %g", d, layout, G, S, e2);
    /* lazy == block over the fp8 re-rotated copies (and the bf16 ones, own keys included) */
    lz_prefill_params p3 = p;
    p3.o = o3; p3.segs = rsegs; p3.k_self = kselfr; p3.self_offset = 0;
    CHECK(lz_prefill_ref(&p3, NULL) == 0, "prefill twin ref over re-rotated copies");
    double e3 = lz_test_bf16_nerr(o3, o, nq);
    CHECK(e3 < LAZY_BLOCK_BOUND, "prefill lazy vs block over fp8 d=%d layout=%d G=%d S=%d: %g", d, layout, G, S, e3);
    if (e3 > worst_lazy_block) worst_lazy_block = e3;
    /* seg_fp8 = 0: k8 is ignored, the bf16 rows are read (the same bits as without k8) */
    lz_prefill_params p4 = p;
    p4.o = o4; p4.segs = bsegs; p4.seg_fp8 = 0;
    CHECK(lz_prefill_lazy_ref(&p4, NULL) == 0, "prefill lazy ref, seg_fp8 0");
    lz_prefill_params p5 = p;
    p5.o = o5; p5.segs = nsegs;
    CHECK(lz_prefill_lazy_ref(&p5, NULL) == 0, "prefill lazy ref, no k8");
    CHECK(memcmp(o4, o5, nq * 2) == 0, "seg_fp8 = 0 ignores k8");
    printf("prefill d=%3d %-8s G=%d KV=%d S=%d (fp8 %d) M=%2d self@%s: ref-vs-direct lazy %.2e twin %.2e, "
           "lazy-vs-block %.2e\n", d, layout ? "half" : "adjacent", G, KV, S, n8, M, self_off ? "pos" : "0", e1, e2, e3);
    for (int s = 0; s < S; s++)
        for (int i = 0; i < 6; i++) free(bufs[s][i]);
    free(Kl); free(Kt); free(Vd); free(tmp); free(q); free(kself); free(vself); free(kselfr);
    free(o); free(o2); free(o3); free(o4); free(o5); free(want); free(want2); free(qf);
}

/* ---- fp8 re-rotation ---- */

/* dst8 * s * sqrt(2) is the exact rotation of src8 * s within one e4m3 rounding,
 * never saturates (pairs of +-448 included), in place equals out of place, and
 * the scales grow by LZ_REROTATE_FP8_GROWTH. */
static void test_rerotate_fp8(int d, int layout)
{
    const int N = 200;
    float inv[64];
    inv_freqs(inv, d, 1);
    uint8_t *src = malloc((size_t)N * d), *dst = malloc((size_t)N * d), *inp = malloc((size_t)N * d);
    for (int r = 0; r < N; r++)
        for (int i = 0; i < d; i++) {
            uint8_t b = (uint8_t)irand(256);
            if ((b & 0x7f) == 0x7f) b ^= 1;                  /* no NaN */
            if (r < 20) b = (b & 0x80) | 0x7e;                /* rows of +-448 */
            src[(size_t)r * d + i] = b;
        }
    memcpy(inp, src, (size_t)N * d);
    float sin_[4] = {0.5f, 0.01f, 3.0f, 1e-3f}, sout[4], sin2[4];
    memcpy(sin2, sin_, sizeof sin_);
    const int64_t off = 123457 + irand(1000000);
    lz_rerotate_params p = {0};
    p.inv_freq = inv; p.n_rows = N; p.offset = off; p.head_dim = d; p.rope_layout = layout;
    p.src8 = src; p.dst8 = dst; p.scale8_in = sin_; p.scale8_out = sout; p.n_scales = 4;
    CHECK(lz_rerotate_ref(&p, NULL) == 0, "rerotate fp8");
    int bad = 0, sat = 0;
    float x[256];
    double worst = 0;
    for (int r = 0; r < N; r++) {
        for (int i = 0; i < d; i++) x[i] = lz_e4m3_to_f32(src[(size_t)r * d + i]);
        lz_rope_apply(x, d, off, layout, inv);
        for (int i = 0; i < d; i++) {
            const double y = x[i], got = lz_e4m3_to_f32(dst[(size_t)r * d + i]) * (double)LZ_REROTATE_FP8_GROWTH;
            const double err = fabs(got - y), lim = 0.0625 * fabs(y) + 2e-3 + 1e-5 * fabs(y);
            if (err > lim) bad++;
            if (fabs(y) > 0.05 && err / fabs(y) > worst) worst = err / fabs(y); /* normal e4m3 range */
            if (fabs(y * LZ_REROTATE_FP8_SHRINK) > LZ_E4M3_MAX * (1 + 1e-6)) sat++;
        }
    }
    CHECK(bad == 0, "fp8 rerotate d=%d layout=%d: %d values off by more than one e4m3 rounding", d, layout, bad);
    CHECK(sat == 0, "fp8 rerotate d=%d layout=%d: %d values would saturate", d, layout, sat);
    for (int i = 0; i < 4; i++) CHECK(sout[i] == sin_[i] * LZ_REROTATE_FP8_GROWTH, "scale %d grows by sqrt(2)", i);
    /* in place, scales in place */
    p.dst8 = inp; p.src8 = inp; p.scale8_in = sin2; p.scale8_out = sin2;
    CHECK(lz_rerotate_ref(&p, NULL) == 0, "rerotate fp8 in place");
    CHECK(memcmp(inp, dst, (size_t)N * d) == 0, "in place equals out of place");
    CHECK(memcmp(sin2, sout, sizeof sout) == 0, "scales in place");
    printf("rerotate fp8 d=%3d %-8s offset %lld: worst relative error %.3f (one e4m3 rounding: 0.0625)\n", d,
           layout ? "half" : "adjacent", (long long)off, worst);
    free(src); free(dst); free(inp);
}

/* ---- argument checks of the fp8 fields ---- */
static void test_checks(void)
{
    float inv[64];
    inv_freqs(inv, 128, 0);
    lz_bf16 dummy[16];
    uint64_t w[1];
    int32_t n[1] = {0};
    float sc[1];
    uint8_t b8[16];
    lz_decode_params p = {0};
    p.o = dummy; p.q = dummy; p.blocks = w; p.n_blocks = n; p.inv_freq = inv; p.batch = 1; p.n_heads = 1;
    p.n_kv_heads = 1; p.head_dim = 128; p.rope_layout = LZ_ROPE_HALF;
    CHECK(lz_decode_check(&p) == LZ_ATTN_EARG, "no pools refused");
    p.k_pool8 = b8; p.v_pool8 = b8; p.k_scales = sc;
    CHECK(lz_decode_check(&p) == LZ_ATTN_EARG, "k_scales without v_scales refused");
    p.v_scales = sc;
    CHECK(lz_decode_check(&p) == LZ_ATTN_OK, "fp8 pools alone accepted");
    p.k_pool8 = NULL;
    CHECK(lz_decode_check(&p) == LZ_ATTN_EARG, "k_scales without k_pool8 refused");
    uint64_t ws[4];
    float ks[4], vs[4];
    int nw = 0;
    CHECK(lz_decode_add_segment_fp8(ws, NULL, ks, vs, &nw, 4, 0, 0, 100, 5, 0.0f, 1.0f) == LZ_ATTN_EARG,
          "fp8 segment with a zero key scale refused");
    CHECK(lz_decode_add_segment_fp8(ws, NULL, ks, vs, &nw, 4, 0, 0, 100, 5, 0.5f, 2.0f) == 0 && nw == 2 &&
              ks[0] == 0.5f && ks[1] == 0.5f && vs[1] == 2.0f,
          "fp8 segment: two blocks with their scales");
    lz_rerotate_params r = {0};
    r.inv_freq = inv; r.n_rows = 1; r.head_dim = 128; r.rope_layout = LZ_ROPE_HALF; r.src8 = b8;
    CHECK(lz_rerotate_check(&r) == LZ_ATTN_EARG, "fp8 rerotate without dst8 refused");
    r.dst8 = b8; r.n_scales = 1;
    CHECK(lz_rerotate_check(&r) == LZ_ATTN_EARG, "scales to write without arrays refused");
    r.n_scales = 0;
    CHECK(lz_rerotate_check(&r) == LZ_ATTN_OK, "fp8 rerotate accepted");
}

int main(void)
{
    test_checks();
    for (int layout = 0; layout < 2; layout++)
        for (int di = 0; di < 2; di++) {
            const int d = di ? 128 : 64;
            test_rerotate_fp8(d, layout);
            for (int gi = 0; gi < 3; gi++) {
                const int G = gi == 0 ? 1 : gi == 1 ? 4 : 8, KV = G == 1 ? 4 : G == 4 ? 2 : 1;
                test_decode(d, layout, G, KV, 1 + irand(3), gi == 1, gi & 1);
                test_prefill(d, layout, G, KV, 1 + irand(6), 1 + irand(40), gi != 1);
            }
        }
    printf("worst lazy-vs-block over fp8: %.2e (bound %.0e)\n", worst_lazy_block, LAZY_BLOCK_BOUND);
    return lz_test_done();
}

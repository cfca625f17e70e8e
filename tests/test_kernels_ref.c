/* test_kernels_ref.c - CPU checks of the attention references in kernels/:
 * lazy == non-lazy on materialised rotated keys, decode == prefill with one
 * row, per-head lengths (empty ones too), offsets past 65,536, block words,
 * and the lazy prefill reference == the engine's own CPU attention
 * (model/attention.h) on the same inputs: the kernels' contract is the
 * engine's. Needs no GPU; tests/cuda/ compares the CUDA kernels against these.
 *
 * Legend: S = segments, KV = kv heads, H = query heads, G = H/KV, M = rows,
 * d = head_dim, T = segment cap.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/lz_batch_ops.h"
#include "kernels/lz_decode.h"
#include "ingest/kvpolicy.h"
#include "kernels/lz_gemv.h"
#include "kernels/lz_kvmass.h"
#include "kernels/lz_ops.h"
#include "kernels/lz_prefill.h"
#include "kernels/lz_rerotate.h"
#include "model/attention.h"
#include "base/half.h"
#include "base/rope.h"
#include "tests/test.h"
#include "tests/test_bf16.h"

static uint64_t rng = 88172645463325252ull;
static double urand(void) { return lz_test_u01(&rng); } /* [0, 1) */
static void fill(lz_bf16 *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = lz_f32_to_bf16((float)(2.0 * urand() - 1.0));
}

typedef struct { /* one random case: S segments with per-head lengths */
    int S, KV, G, M, d, layout;
    lz_attn_segment seg[8], rot[8];
    int32_t len[8 * 4];
    lz_bf16 *k[8], *v[8], *kr[8];
    float inv_freq[64];
} scase;

static void make_case(scase *c, int S, int KV, int G, int M, int d, int layout, int llama3)
{
    c->S = S; c->KV = KV; c->G = G; c->M = M; c->d = d; c->layout = layout;
    float div[64];
    if (llama3) lz_rope_llama3_divisors(div, d, 500000.0f, 8.0f, 1.0f, 4.0f, 8192.0f);
    lz_rope_inv_freqs(c->inv_freq, d, llama3 ? 500000.0f : 10000.0f, llama3 ? div : NULL);
    int64_t pos = 70000; /* past 65,536 */
    for (int s = 0; s < S; s++) {
        int cap = 1 + (int)(urand() * 40);
        for (int h = 0; h < KV; h++) c->len[s * KV + h] = urand() < 0.2 ? 0 : 1 + (int)(urand() * cap);
        c->len[s * KV] = cap; /* head 0 full */
        size_t n = (size_t)KV * cap * d;
        c->k[s] = malloc(n * 2); c->v[s] = malloc(n * 2); c->kr[s] = malloc(n * 2);
        fill(c->k[s], n); fill(c->v[s], n);
        c->seg[s] = (lz_attn_segment){.k = c->k[s], .v = c->v[s], .offset = pos, .cap = cap};
        lz_rerotate_params rp = {.dst = c->kr[s], .src = c->k[s], .inv_freq = c->inv_freq, .n_rows = (int64_t)KV * cap,
                                 .offset = pos, .head_dim = d, .rope_layout = layout};
        CHECK(lz_rerotate_ref(&rp, NULL) == 0, "rerotate");
        c->rot[s] = (lz_attn_segment){.k = c->kr[s], .v = c->v[s], .offset = 0, .cap = cap};
        pos += cap + (int)(urand() * 5000);
    }
}
static void free_case(scase *c)
{
    for (int s = 0; s < c->S; s++) { free(c->k[s]); free(c->v[s]); free(c->kr[s]); }
}

/* R(p) applied to keys stored at local j equals keys rotated at p + j. */
static void test_rerotate_composes(int layout)
{
    const int d = 128;
    float inv[64], x[128], y[128];
    lz_rope_inv_freqs(inv, d, 10000.0f, NULL);
    lz_bf16 src[128], dst[128], want[128];
    for (int i = 0; i < d; i++) x[i] = (float)(2 * urand() - 1);
    memcpy(y, x, sizeof x);
    lz_rope_apply(x, d, 17, layout, inv);        /* stored at local 17 */
    lz_rope_apply(y, d, 100017, layout, inv);    /* final position 100000 + 17 */
    for (int i = 0; i < d; i++) { src[i] = lz_f32_to_bf16(x[i]); want[i] = lz_f32_to_bf16(y[i]); }
    lz_rerotate_params rp = {.dst = dst, .src = src, .inv_freq = inv, .n_rows = 1, .offset = 100000, .head_dim = d,
                             .rope_layout = layout};
    CHECK(lz_rerotate_ref(&rp, NULL) == 0, "rerotate");
    double e = lz_test_bf16_nerr(dst, want, d);
    CHECK(e < 1e-2, "layout %d: composed rotation error %g", layout, e);
}

/* Lazy prefill == non-lazy prefill on materialised keys; the lazy self offset too. */
static void test_prefill_lazy_eq(int d, int layout, int G, int llama3)
{
    scase c;
    make_case(&c, 1 + (int)(urand() * 6), 2, G, 1 + (int)(urand() * 9), d, layout, llama3);
    int H = c.KV * G, M = c.M;
    size_t nq = (size_t)H * M * d, nk = (size_t)c.KV * M * d;
    lz_bf16 *q = malloc(nq * 2), *ks = malloc(nk * 2), *ksr = malloc(nk * 2), *vs = malloc(nk * 2);
    lz_bf16 *o1 = malloc(nq * 2), *o2 = malloc(nq * 2);
    fill(q, nq); fill(ks, nk); fill(vs, nk);
    int64_t self_off = 123456;
    lz_rerotate_params rp = {.dst = ksr, .src = ks, .inv_freq = c.inv_freq, .n_rows = (int64_t)c.KV * M,
                             .offset = self_off, .head_dim = d, .rope_layout = layout};
    CHECK(lz_rerotate_ref(&rp, NULL) == 0, "rerotate self");
    lz_prefill_params p = {0};
    p.o = o1; p.q = q; p.k_self = ks; p.v_self = vs; p.self_offset = self_off;
    p.segs = c.seg; p.seg_len = c.len; p.inv_freq = c.inv_freq; p.n_seg = c.S;
    p.n_rows = M; p.n_heads = H; p.n_kv_heads = c.KV; p.head_dim = d; p.rope_layout = layout;
    p.scale = 1.0f / sqrtf((float)d);
    CHECK(lz_prefill_lazy_ref(&p, NULL) == 0, "lazy ref");
    lz_prefill_params p2 = p;
    p2.o = o2; p2.segs = c.rot; p2.k_self = ksr; p2.self_offset = 0;
    CHECK(lz_prefill_ref(&p2, NULL) == 0, "ref");
    double e = lz_test_bf16_nerr(o1, o2, nq);
    CHECK(e < 1e-2, "prefill lazy vs materialised d=%d layout=%d G=%d: %g", d, layout, G, e);
    free(q); free(ks); free(ksr); free(vs); free(o1); free(o2);
    free_case(&c);
}

/* The lazy prefill reference == the engine's CPU attention (both of its
 * paths) on the same bf16-exact inputs: segments placed at offsets past
 * 65,536 with per-head kept lengths (empty ones too), the rows' own keys
 * causal, GQA. The engine takes q as (rows, H, d) and segments as
 * lz_kv_segment (rot = the kernel's offset), the kernel (H, rows, d) and
 * lz_attn_segment: both compute in fp32, so they may differ only by the
 * kernel's bf16 output rounding (round to nearest, 7 fraction bits: at most
 * 2^-8 relative per element) and fp32 accumulation order (values in [-1, 1]
 * summed over at most a few hundred keys: 1e-4 absolute allowed). */
static void test_engine_matches_prefill(int d, int layout, int G, int llama3)
{
    scase c;
    make_case(&c, 1 + (int)(urand() * 6), 2, G, 1 + (int)(urand() * 9), d, layout, llama3);
    const int H = c.KV * G, M = c.M, KV = c.KV;
    const size_t nq = (size_t)H * M * d, nk = (size_t)KV * M * d;
    lz_bf16 *q = malloc(nq * 2), *ks = malloc(nk * 2), *vs = malloc(nk * 2), *o = malloc(nq * 2);
    float *qe = malloc(nq * 4), *oe = malloc(nq * 4), *ke = malloc(nk * 4), *ve = malloc(nk * 4);
    fill(q, nq); fill(ks, nk); fill(vs, nk);
    for (int hh = 0; hh < H; hh++) /* kernel (H, M, d) -> engine (M, H, d) */
        for (int m = 0; m < M; m++)
            for (int i = 0; i < d; i++) qe[((size_t)m * H + hh) * d + i] = lz_bf16_to_f32(q[((size_t)hh * M + m) * d + i]);
    for (size_t i = 0; i < nk; i++) { ke[i] = lz_bf16_to_f32(ks[i]); ve[i] = lz_bf16_to_f32(vs[i]); }
    /* the kernel: own keys at final positions (self_offset 0), segments at their offsets */
    lz_prefill_params p = {0};
    p.o = o; p.q = q; p.k_self = ks; p.v_self = vs; p.self_offset = 0;
    p.segs = c.seg; p.seg_len = c.len; p.inv_freq = c.inv_freq; p.n_seg = c.S;
    p.n_rows = M; p.n_heads = H; p.n_kv_heads = KV; p.head_dim = d; p.rope_layout = layout;
    p.scale = 1.0f / sqrtf((float)d);
    CHECK(lz_prefill_lazy_ref(&p, NULL) == 0, "lazy ref");
    /* the engine: one layer; each segment's blocks (KV, cap, d) in fp32 */
    lz_kv_segment es[8];
    float *sk[8], *sv[8];
    for (int s = 0; s < c.S; s++) {
        const int cap = (int)c.seg[s].cap;
        const size_t n = (size_t)KV * cap * d;
        sk[s] = malloc(n * 4); sv[s] = malloc(n * 4);
        for (size_t i = 0; i < n; i++) { sk[s][i] = lz_bf16_to_f32(c.k[s][i]); sv[s][i] = lz_bf16_to_f32(c.v[s][i]); }
        es[s] = (lz_kv_segment){.k = sk[s], .v = sv[s], .n_kept = &c.len[s * KV], .n = cap, .stride = cap,
                                .rot = c.seg[s].offset};
    }
    lz_attn_params ap = {qe, oe, M, H, KV, d, 0, es, c.S, ke, ve, M, 0, c.inv_freq, layout};
    for (int path = 0; path < 2; path++) {
        CHECK((path ? lz_attention_cpu_gemm(&ap) : lz_attention_cpu_rows(&ap)) == 0, "engine attention");
        double num = 0, den = 0, worst = 0; /* worst: excess over the per-element allowance */
        for (int hh = 0; hh < H; hh++)
            for (int m = 0; m < M; m++)
                for (int i = 0; i < d; i++) {
                    const double x = lz_bf16_to_f32(o[((size_t)hh * M + m) * d + i]), y = oe[((size_t)m * H + hh) * d + i];
                    num += (x - y) * (x - y);
                    den += y * y;
                    const double excess = fabs(x - y) - (0x1p-8 * fabs(y) + 1e-4);
                    if (excess > worst) worst = excess;
                }
        const double e = sqrt(num / (den > 0 ? den : 1));
        CHECK(e < 0x1p-8 && worst <= 0, "engine %s path vs lazy prefill ref d=%d layout=%d G=%d S=%d M=%d: "
              "normalised %.3g, worst element %.3g over its allowance", path ? "gemm" : "rows", d, layout, G, c.S, M, e,
              worst);
        /* the same segments read as bf16 (k16 / v16, as a bf16 store's documents are cached): identical output */
        float *o32 = malloc((size_t)M * H * d * 4);
        memcpy(o32, oe, (size_t)M * H * d * 4);
        lz_kv_segment es16[8];
        for (int s = 0; s < c.S; s++) { es16[s] = es[s]; es16[s].k = es16[s].v = NULL; es16[s].k16 = c.k[s]; es16[s].v16 = c.v[s]; }
        lz_attn_params ap16 = ap;
        ap16.segs = es16;
        CHECK((path ? lz_attention_cpu_gemm(&ap16) : lz_attention_cpu_rows(&ap16)) == 0, "engine attention, bf16");
        CHECK(!memcmp(o32, oe, (size_t)M * H * d * 4), "engine %s path: bf16 segments differ from their fp32 widening",
              path ? "gemm" : "rows");
        free(o32);
    }
    for (int s = 0; s < c.S; s++) { free(sk[s]); free(sv[s]); }
    free(q); free(ks); free(vs); free(o); free(qe); free(oe); free(ke); free(ve);
    free_case(&c);
}

/* Decode (one row, paged blocks) == prefill with M = 1; lazy == materialised. */
static void test_decode_eq_prefill(int d, int layout, int G)
{
    scase c;
    make_case(&c, 1 + (int)(urand() * 6), 2, G, 1, d, layout, 1);
    int H = c.KV * G, KV = c.KV, NB = 64;
    lz_bf16 *q = malloc((size_t)H * d * 2), *ks = malloc((size_t)KV * d * 2),
            *vs = malloc((size_t)KV * d * 2);
    fill(q, (size_t)H * d); fill(ks, (size_t)KV * d); fill(vs, (size_t)KV * d);
    /* pool: each segment's rows, then the own key; rotated pool for the twin */
    size_t rows = KV;
    for (int s = 0; s < c.S; s++) rows += (size_t)KV * c.seg[s].cap;
    lz_bf16 *kp = malloc(rows * d * 2), *kpr = malloc(rows * d * 2), *vp = malloc(rows * d * 2);
    uint64_t *w = calloc((size_t)KV * NB, 8), *wr = calloc((size_t)KV * NB, 8);
    int32_t nb[4] = {0}, nbr[4] = {0};
    size_t r = 0;
    for (int s = 0; s < c.S; s++) {
        size_t n = (size_t)KV * c.seg[s].cap * d;
        memcpy(kp + r * d, c.k[s], n * 2); memcpy(kpr + r * d, c.kr[s], n * 2);
        memcpy(vp + r * d, c.v[s], n * 2);
        for (int h = 0; h < KV; h++) {
            uint64_t row = r + (size_t)h * c.seg[s].cap;
            CHECK(lz_decode_add_segment(w + h * NB, &nb[h], NB, row, c.len[s * KV + h], c.seg[s].offset) == 0, "add");
            CHECK(lz_decode_add_segment(wr + h * NB, &nbr[h], NB, row, c.len[s * KV + h], 0) == 0, "add");
        }
        r += (size_t)KV * c.seg[s].cap;
    }
    memcpy(kp + r * d, ks, (size_t)KV * d * 2); memcpy(kpr + r * d, ks, (size_t)KV * d * 2);
    memcpy(vp + r * d, vs, (size_t)KV * d * 2);
    for (int h = 0; h < KV; h++) {
        CHECK(lz_decode_add_segment(w + h * NB, &nb[h], NB, r + h, 1, 0) == 0, "add self");
        CHECK(lz_decode_add_segment(wr + h * NB, &nbr[h], NB, r + h, 1, 0) == 0, "add self");
    }
    lz_bf16 *o1 = malloc((size_t)H * d * 2), *o2 = malloc((size_t)H * d * 2),
            *o3 = malloc((size_t)H * d * 2);
    lz_decode_params dp = {0};
    dp.o = o1; dp.q = q; dp.k_pool = kp; dp.v_pool = vp; dp.blocks = w; dp.n_blocks = nb;
    dp.inv_freq = c.inv_freq; dp.max_blocks = NB; dp.batch = 1; dp.n_heads = H;
    dp.n_kv_heads = KV; dp.head_dim = d; dp.rope_layout = layout; dp.scale = 1.0f / sqrtf((float)d);
    CHECK(lz_decode_lazy_ref(&dp, NULL) == 0, "decode lazy ref");
    lz_decode_params dp2 = dp;
    dp2.o = o2; dp2.k_pool = kpr; dp2.blocks = wr; dp2.n_blocks = nbr;
    CHECK(lz_decode_ref(&dp2, NULL) == 0, "decode ref");
    { /* values moved to a pool of their own, the blocks in reverse order, found through v_rows: the same output */
        const size_t rows = r + KV;
        lz_bf16 *pool2 = calloc(2 * rows * d, 2), *o4 = malloc((size_t)H * d * 2);
        uint64_t *vr = calloc((size_t)KV * NB, 8);
        for (int h = 0; h < KV; h++)
            for (int i = 0; i < nb[h]; i++) { /* block [row, row + nk) -> [2 rows - row - nk, 2 rows - row) */
                const uint64_t row = lz_decode_word_row(w[h * NB + i]);
                const int nk = lz_decode_word_keys(w[h * NB + i]);
                vr[h * NB + i] = 2 * rows - row - (uint64_t)nk;
                memcpy(pool2 + vr[h * NB + i] * d, vp + row * d, (size_t)nk * d * 2);
            }
        lz_decode_params dp4 = dp;
        dp4.o = o4; dp4.v_pool = pool2; dp4.v_rows = vr;
        CHECK(lz_decode_lazy_ref(&dp4, NULL) == 0 && !memcmp(o4, o1, (size_t)H * d * 2),
              "decode with values at rows of their own (v_rows) d=%d layout=%d G=%d: the same output", d, layout, G);
        free(pool2); free(o4); free(vr);
    }
    lz_prefill_params p = {0};
    p.o = o3; p.q = q; p.k_self = ks; p.v_self = vs; p.segs = c.seg; p.seg_len = c.len;
    p.inv_freq = c.inv_freq; p.n_seg = c.S; p.n_rows = 1; p.n_heads = H; p.n_kv_heads = KV;
    p.head_dim = d; p.rope_layout = layout; p.scale = dp.scale;
    CHECK(lz_prefill_lazy_ref(&p, NULL) == 0, "prefill lazy ref");
    double e1 = lz_test_bf16_nerr(o1, o2, (size_t)H * d), e2 = lz_test_bf16_nerr(o1, o3, (size_t)H * d);
    CHECK(e1 < 1e-2, "decode lazy vs materialised d=%d layout=%d G=%d: %g", d, layout, G, e1);
    CHECK(e2 < 1e-2, "decode vs prefill M=1 d=%d layout=%d G=%d: %g", d, layout, G, e2);
    free(q); free(ks); free(vs); free(kp); free(kpr); free(vp); free(w); free(wr);
    free(o1); free(o2); free(o3);
    free_case(&c);
}

static void test_words_and_checks(void)
{
    uint64_t w = lz_decode_word(LZ_DECODE_MAX_ROW - 5, LZ_DECODE_MAX_OFFSET, 64);
    CHECK(lz_decode_word_row(w) == LZ_DECODE_MAX_ROW - 5, "row");
    CHECK(lz_decode_word_offset(w) == LZ_DECODE_MAX_OFFSET, "offset");
    CHECK(lz_decode_word_keys(w) == 64, "keys");
    uint64_t ws[8];
    int n = 0;
    CHECK(lz_decode_add_segment(ws, &n, 8, 1000, 130, 200000) == 0, "add");
    CHECK(n == 3 && lz_decode_word_keys(ws[2]) == 2 && lz_decode_word_row(ws[1]) == 1064 &&
          lz_decode_word_offset(ws[2]) == 200000, "split into 64+64+2, n=%d", n);
    CHECK((ws[0] & LZ_DECODE_SEG_START) && !(ws[1] & LZ_DECODE_SEG_START) &&
          !(ws[2] & LZ_DECODE_SEG_START), "segment start marks the first block only");
    CHECK(lz_decode_add_segment(ws, &n, 8, 0, 1, LZ_DECODE_MAX_OFFSET + 1) == LZ_ATTN_ERANGE, "offset range");
    CHECK(lz_decode_add_segment(ws, &n, 8, 0, 64 * 6, 0) == LZ_ATTN_EARG, "capacity");
    { /* values at rows of their own: one v row a block, from v_row on, 64 apart; the words as without */
        uint64_t wk[4], wv[4] = {0}, vr[4] = {0};
        int nk = 0, nv = 0;
        CHECK(lz_decode_add_segment(wk, &nk, 4, 5000, 150, 777) == 0 &&
                  lz_decode_add_segment_kv(wv, vr, &nv, 4, 5000, 90000, 150, 777) == 0 && nk == 3 && nv == 3 &&
                  !memcmp(wk, wv, sizeof(uint64_t) * 3) && vr[0] == 90000 && vr[1] == 90064 && vr[2] == 90128 &&
                  vr[3] == 0,
              "add_segment_kv: the same words, v rows 90000/90064/90128 (got %llu %llu %llu)",
              (unsigned long long)vr[0], (unsigned long long)vr[1], (unsigned long long)vr[2]);
        nv = 0;
        CHECK(lz_decode_add_segment_kv(wv, vr, &nv, 4, LZ_DECODE_MAX_ROW - 10, 0, 64, 0) == LZ_ATTN_ERANGE &&
                  lz_decode_add_segment_kv(wv, vr, &nv, 4, 0, 0, 1, LZ_DECODE_MAX_OFFSET + 1) == LZ_ATTN_ERANGE &&
                  nv == 0, "add_segment_kv: rows or offsets past the word's fields refused, nothing added");
    }
    lz_prefill_params p = {0};
    CHECK(lz_prefill_check(&p) == LZ_ATTN_EHEADDIM, "head_dim 0");
    p.head_dim = 128; p.n_heads = 6; p.n_kv_heads = 4;
    CHECK(lz_prefill_check(&p) == LZ_ATTN_EGQA, "gqa");
    CHECK(strcmp(lz_attn_strerror(LZ_ATTN_EWORK), "ok") != 0, "strerror");
}

/* The CUDA prefill's shape and split choice (host code, testable here): the
 * issue's shapes on a 132-SM H200, explicit choices, invalid combinations. */
static void test_prefill_plan(void)
{
    static uint16_t dummy[8];
    static int32_t lens[10];
    static float inv[64];
    lz_prefill_params p = {0};
    p.o = dummy; p.q = dummy; p.k_self = dummy; p.v_self = dummy; p.inv_freq = inv; p.seg_len = lens;
    p.segs = (const lz_attn_segment *)dummy;
    p.n_heads = 32; p.n_kv_heads = 8; p.head_dim = 128; p.rope_layout = LZ_ROPE_HALF;
    int bm, rpw, ns, wg;
    /* question prefill, 128 rows over 4096 keys in 10 segments: 64 rows a CTA,
     * 8 x 8 row tiles at two CTAs per SM: 4 parts */
    p.n_rows = 128; p.n_seg = 10; p.seg_keys = 4096;
    lz_prefill_plan(&p, 132, &bm, &rpw, &ns, &wg);
    CHECK(bm == 64 && rpw == 16 && ns == 4 && wg, "128x4096: %d rows/CTA, %d rows/warp, %d parts, wgmma %d", bm,
          rpw, ns, wg);
    p.wgmma = 1; /* mma.sync asked for */
    lz_prefill_plan(&p, 132, &bm, &rpw, &ns, &wg);
    CHECK(bm == 64 && rpw == 16 && ns == 4 && !wg, "128x4096 mma.sync: %d/%d/%d/%d", bm, rpw, ns, wg);
    p.wgmma = 0;
    CHECK(lz_prefill_splits(&p, 132) == ns, "splits == plan");
    /* 32 rows: 16 row tiles: 16 parts */
    p.n_rows = 32;
    lz_prefill_plan(&p, 132, &bm, &rpw, &ns, &wg);
    CHECK(bm == 64 && rpw == 16 && ns == 16, "32x4096: %d/%d/%d", bm, rpw, ns);
    /* ingest, 2048 rows: 64-row wgmma CTAs, one part; with mma.sync asked
     * for, the rows fill the GPU: 32 rows a warp */
    p.n_rows = 2048; p.n_seg = 0; p.seg_keys = 0;
    lz_prefill_plan(&p, 132, &bm, &rpw, &ns, &wg);
    CHECK(bm == 64 && rpw == 16 && ns == 1 && wg, "ingest: %d/%d/%d/%d", bm, rpw, ns, wg);
    p.wgmma = 1;
    lz_prefill_plan(&p, 132, &bm, &rpw, &ns, &wg);
    CHECK(bm == 128 && rpw == 32 && ns == 1 && !wg, "ingest, mma.sync: %d/%d/%d/%d", bm, rpw, ns, wg);
    p.wgmma = 0;
    /* explicit choices are kept; a forced split is kept; too few tiles cap the split */
    p.rows_per_warp = 16; p.rows_per_cta = 128; p.n_split = 3;
    lz_prefill_plan(&p, 132, &bm, &rpw, &ns, &wg);
    CHECK(bm == 128 && rpw == 16 && ns == 3 && !wg, "explicit: %d/%d/%d/%d", bm, rpw, ns, wg);
    p.n_split = 0; p.n_rows = 1;
    lz_prefill_plan(&p, 132, &bm, &rpw, &ns, &wg);
    CHECK(ns == 1, "one row, no keys: one part (%d)", ns);
    CHECK(lz_prefill_check(&p) == 0, "valid shape accepted");
    p.rows_per_cta = 96;
    CHECK(lz_prefill_check(&p) == LZ_ATTN_EARG, "rows_per_cta 96 refused");
    p.rows_per_cta = 64; p.rows_per_warp = 32;
    CHECK(lz_prefill_check(&p) == LZ_ATTN_EARG, "32 rows a warp needs 128 rows a CTA");
    p.rows_per_warp = 8;
    CHECK(lz_prefill_check(&p) == LZ_ATTN_EARG, "rows_per_warp 8 refused");
    p.rows_per_warp = 16; p.rows_per_cta = 128; p.wgmma = 2;
    CHECK(lz_prefill_check(&p) == LZ_ATTN_EARG, "wgmma needs 64 rows a CTA");
    p.rows_per_cta = 64;
    CHECK(lz_prefill_check(&p) == 0, "wgmma with 64 rows a CTA accepted");
    p.wgmma = 3;
    CHECK(lz_prefill_check(&p) == LZ_ATTN_EARG, "wgmma 3 refused");
    p.wgmma = 0;
    static float table[8] __attribute__((aligned(16)));
    p.rope_cs = table;
    CHECK(lz_prefill_check(&p) == 0, "a 16-byte aligned cos/sin table accepted");
    p.rope_cs = table + 1;
    CHECK(lz_prefill_check(&p) == LZ_ATTN_EARG, "a cos/sin table off 16 bytes refused (bulk copies)");
    p.rope_cs = NULL;
}

/* The host cos/sin table of the lazy prefill: slot s holds -offset_s * inv_freq
 * (the own keys last), the angle formed in float as the kernels do. */
static void test_rope_table(void)
{
    float inv[32], cs[3 * 32 * 2];
    for (int i = 0; i < 32; i++) inv[i] = powf(10000.0f, -(float)i / 32);
    int64_t offs[2] = {1000, 70000};
    lz_prefill_rope_table(cs, offs, 2, 5, inv, 64);
    double worst = 0;
    for (int sl = 0; sl < 3; sl++)
        for (int i = 0; i < 32; i++) {
            int64_t off = sl < 2 ? offs[sl] : 5;
            float ang = (float)(-off) * inv[i];
            double e = fabs(cs[(sl * 32 + i) * 2] - cos(ang)) + fabs(cs[(sl * 32 + i) * 2 + 1] - sin(ang));
            worst = e > worst ? e : worst;
        }
    CHECK(worst < 1e-5, "rope table vs cos/sin of the float angle: %g", worst);
    CHECK(cs[0] == cosf(-1000.0f) && cs[(2 * 32) * 2] == cosf(-5.0f), "slot order: segments, then own keys");
}

/* The decode split choice on a 132-SM H200 (the benchmark's shapes). */
static void test_decode_splits(void)
{
    lz_decode_params p = {0};
    p.n_kv_heads = 8;
    p.batch = 16; p.max_blocks = 70; /* 4096 keys in 10 segments */
    CHECK(lz_decode_splits(&p, 132) == 2, "16 x 4096: 2 parts (two CTAs per SM), got %d", lz_decode_splits(&p, 132));
    p.batch = 1; p.max_blocks = 258; /* 16384 keys */
    CHECK(lz_decode_splits(&p, 132) == 16, "1 x 16384: 16 parts, got %d", lz_decode_splits(&p, 132));
    p.batch = 64; p.max_blocks = 40;
    CHECK(lz_decode_splits(&p, 132) == 1, "64 x 2048: 1 part, got %d", lz_decode_splits(&p, 132));
    p.n_split = 5;
    CHECK(lz_decode_splits(&p, 132) == 5, "a forced split is kept");
}

/* The CPU references of the forward pass's small GPU kernels (kernels/lz_ops_ref.c)
 * against the engine's own math written out here: the layouts (token-major to
 * head-major and back), the rotation at pos0 + *count (base/rope.h), the window
 * capture, rmsnorm and silu in double, and the own sequence's bookkeeping. A
 * wrong index, pair or position fails them. */
static void test_ops_ref(int layout)
{
    const int n = 5, H = 4, KV = 2, d = 8, D = 16;
    float q[5 * 4 * 8], k[5 * 2 * 8], v[5 * 2 * 8], inv[4], qc[2 * 4 * 8];
    for (size_t i = 0; i < sizeof q / 4; i++) q[i] = (float)(urand() * 2 - 1);
    for (size_t i = 0; i < sizeof k / 4; i++) k[i] = (float)(urand() * 2 - 1), v[i] = (float)(urand() * 2 - 1);
    lz_rope_inv_freqs(inv, d, 10000.f, NULL);
    lz_bf16 qh[5 * 4 * 8], kh[5 * 2 * 8], vh[5 * 2 * 8], back_q[5 * 4 * 8];
    const int count = 70001;
    lz_op_heads_ref(qh, kh, vh, q, k, v, 0, n, H, KV, d, 3, &count, layout, inv, qc, 3, 2, NULL);
    int bad = 0, badc = 0;
    for (int i = 0; i < n; i++)
        for (int h = 0; h < H + KV; h++) {
            float x[8];
            memcpy(x, h < H ? q + ((size_t)i * H + h) * d : k + ((size_t)i * KV + h - H) * d, sizeof x);
            lz_rope_apply(x, d, 3 + count + i, layout, inv);
            const lz_bf16 *got = h < H ? qh + ((size_t)h * n + i) * d : kh + ((size_t)(h - H) * n + i) * d;
            for (int e = 0; e < d; e++) bad += got[e] != lz_f32_to_bf16(x[e]);
            if (h < H && i >= 3)
                for (int e = 0; e < d; e++) badc += qc[((size_t)(i - 3) * H + h) * d + e] != x[e];
            if (h < KV)
                for (int e = 0; e < d; e++) bad += vh[((size_t)h * n + i) * d + e] != lz_f32_to_bf16(v[((size_t)i * KV + h) * d + e]);
        }
    CHECK(bad == 0 && badc == 0, "heads ref layout %d: %d values, %d window values wrong", layout, bad, badc);
    lz_op_tokens_ref(back_q, qh, n, H, d, NULL);
    for (int i = 0; i < n; i++)
        for (int h = 0; h < H; h++) bad += memcmp(back_q + ((size_t)i * H + h) * d, qh + ((size_t)h * n + i) * d, d * 2) != 0;
    CHECK(bad == 0, "tokens ref: the transpose");
    float x[5 * 16], w[16], gate[80], up[80];
    lz_bf16 o[80], s[80];
    for (int i = 0; i < n * D; i++) x[i] = (float)(urand() * 4 - 2), gate[i] = (float)(urand() * 8 - 4), up[i] = (float)urand();
    for (int j = 0; j < D; j++) w[j] = (float)(urand() + 0.5);
    lz_op_rmsnorm_ref(o, x, w, n, D, 1e-5f, NULL);
    lz_op_silu_mul_ref(s, gate, up, (size_t)n * D, NULL);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double ss = 0;
        for (int j = 0; j < D; j++) ss += (double)x[i * D + j] * x[i * D + j];
        for (int j = 0; j < D; j++) {
            const double want = x[i * D + j] / sqrt(ss / D + 1e-5) * w[j], g = gate[i * D + j];
            worst = fmax(worst, fabs(lz_bf16_to_f32(o[i * D + j]) - want) / (fabs(want) + 1e-6));
            const double sw = g / (1 + exp(-g)) * up[i * D + j];
            worst = fmax(worst, fabs(lz_bf16_to_f32(s[i * D + j]) - sw) / (fabs(sw) + 1e-6));
        }
    }
    CHECK(worst <= 0x1p-8, "rmsnorm / silu refs: relative %g beyond bf16 rounding", worst);
    /* one product's output: rows [q | k | v] (heads, ld) and [gate | up] (swiglu), the same values */
    float qkv[5 * 8 * 8], gu[5 * 32];
    for (int i = 0; i < n; i++) {
        memcpy(qkv + i * 64, q + i * H * d, (size_t)H * d * 4);
        memcpy(qkv + i * 64 + H * d, k + i * KV * d, (size_t)KV * d * 4);
        memcpy(qkv + i * 64 + (H + KV) * d, v + i * KV * d, (size_t)KV * d * 4);
        memcpy(gu + i * 2 * D, gate + i * D, (size_t)D * 4);
        memcpy(gu + i * 2 * D + D, up + i * D, (size_t)D * 4);
    }
    lz_bf16 qh2[5 * 4 * 8], kh2[5 * 2 * 8], vh2[5 * 2 * 8], s2[80];
    float qc2[2 * 4 * 8];
    lz_op_heads_ref(qh2, kh2, vh2, qkv, qkv + H * d, qkv + (H + KV) * d, (H + 2 * KV) * d, n, H, KV, d, 3, &count,
                    layout, inv, qc2, 3, 2, NULL);
    lz_op_swiglu_ref(s2, gu, n, D, NULL);
    CHECK(!memcmp(qh, qh2, sizeof qh) && !memcmp(kh, kh2, sizeof kh) && !memcmp(vh, vh2, sizeof vh) &&
              !memcmp(qc, qc2, sizeof qc) && !memcmp(s, s2, sizeof s),
          "heads with a row stride and swiglu over [gate | up] rows: the packed results");
    /* own sequence: lengths of segment S in every layer, append after count, count += n */
    int32_t ql[3 * 4 * 2];
    for (int e = 0; e < 24; e++) ql[e] = -1;
    int cnt = 4;
    lz_op_own_len_ref(ql, 3, 4, 2, 2, &cnt, NULL);
    for (int e = 0; e < 24; e++) bad += ql[e] != ((e / 2) % 4 == 2 ? 4 : -1);
    lz_bf16 own[2 * 12 * 8];
    memset(own, 0, sizeof own);
    lz_op_append_ref(own, kh, n, KV, 12, d, &cnt, NULL);
    for (int h = 0; h < KV; h++)
        for (int r = 0; r < 12; r++)
            for (int e = 0; e < d; e++)
                bad += own[((size_t)h * 12 + r) * d + e] != (r >= 4 && r < 4 + n ? kh[((size_t)h * n + r - 4) * d + e] : 0);
    { /* heads with both appends: the heads and the two appends */
        lz_bf16 qh3[5 * 4 * 8], kh3[5 * 2 * 8], vh3[5 * 2 * 8], ok_[2 * 12 * 8], ov_[2 * 12 * 8], want_v[2 * 12 * 8];
        memset(ok_, 0, sizeof ok_);
        memset(ov_, 0, sizeof ov_);
        memset(want_v, 0, sizeof want_v);
        lz_op_append_ref(want_v, vh, n, KV, 12, d, &cnt, NULL);
        lz_op_heads_own_ref(qh3, kh3, vh3, ok_, ov_, 12, q, k, v, 0, n, H, KV, d, 3, &cnt, layout, inv, NULL);
        lz_bf16 want_q[5 * 4 * 8], want_k[5 * 2 * 8], want_vh[5 * 2 * 8];
        lz_op_heads_ref(want_q, want_k, want_vh, q, k, v, 0, n, H, KV, d, 3, &cnt, layout, inv, NULL, 0, 0, NULL);
        lz_bf16 want_ko[2 * 12 * 8];
        memset(want_ko, 0, sizeof want_ko);
        lz_op_append_ref(want_ko, want_k, n, KV, 12, d, &cnt, NULL);
        CHECK(!memcmp(qh3, want_q, sizeof qh3) && !memcmp(kh3, want_k, sizeof kh3) && !memcmp(vh3, want_vh, sizeof vh3) &&
                  !memcmp(ov_, want_v, sizeof ov_) && !memcmp(ok_, want_ko, sizeof ok_),
              "heads_own ref: the heads and both appends");
        CHECK(lz_op_heads_own_ref(qh3, kh3, vh3, NULL, ov_, 12, q, k, v, 0, n, H, KV, d, 3, &cnt, layout, inv, NULL) ==
                  LZ_ATTN_EARG, "heads_own ref without own rows: refused");
    }
    lz_op_count_add_ref(&cnt, n, NULL);
    CHECK(bad == 0 && cnt == 4 + n, "own sequence refs (%d wrong, count %d)", bad, cnt);
    { /* own rows' block words, step after step (one row, then a jump past three blocks, then one):
       * every block before the last full, the last holding the rest, n_blocks counting them */
        uint64_t w[12];
        int32_t nf = 2, nb = 0;
        int k0 = 0, c = 0, okw = 1;
        lz_decode_add_segment(w, &k0, 12, 100, 70, 9000); /* a segment's 2 blocks */
        lz_decode_add_segment(w, &k0, 12, 5000, 64 * 8, 0); /* own rows: 8 full blocks */
        const int steps[] = {1, 1, 62, 1, 200, 1, 1};
        for (int t = 0; t < 7; t++) {
            lz_op_own_words_ref(w, &nb, &nf, 1, 12, &c, steps[t], NULL);
            c += steps[t];
            int keys = 0;
            for (int j = nf; j < nb; j++) keys += lz_decode_word_keys(w[j]);
            okw &= keys == c && nb == nf + (c + 63) / 64 && lz_decode_word_keys(w[0]) == 64 &&
                   lz_decode_word_keys(w[1]) == 6 && lz_decode_word_row(w[nf + 1]) == 5064 &&
                   (w[nf] & LZ_DECODE_SEG_START) && !(w[nf + 1] & LZ_DECODE_SEG_START);
        }
        CHECK(okw, "own block words ref: counts after each step (%d rows)", c);
    }
    lz_bf16 table[7 * 16];
    int ids[3] = {6, 0, 3};
    for (int e = 0; e < 7 * 16; e++) table[e] = lz_f32_to_bf16((float)e);
    lz_op_embed_ref(x, table, ids, 3, 16, NULL);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 16; j++) bad += x[i * 16 + j] != (float)(ids[i] * 16 + j);
    CHECK(bad == 0, "embed ref");
}

/* lz_gemv_ref (the GPU matrix-vector product's reference): two matrices
 * sharing x against the engine's float sums (within float rounding), beta 0
 * overwrites a NaN y, beta 1 adds; bad shapes refused. */
static void test_gemv_ref(void)
{
    enum { IN = 40, R0 = 3, R1 = 5 };
    lz_bf16 x[IN], w0[R0 * IN], w1[R1 * IN];
    float y0[R0], y1[R1], keep1[R1];
    for (int i = 0; i < IN; i++) x[i] = lz_f32_to_bf16((float)(2 * urand() - 1));
    for (int i = 0; i < R0 * IN; i++) w0[i] = lz_f32_to_bf16((float)(2 * urand() - 1));
    for (int i = 0; i < R1 * IN; i++) w1[i] = lz_f32_to_bf16((float)(2 * urand() - 1));
    for (int beta = 0; beta < 2; beta++) {
        for (int r = 0; r < R0; r++) y0[r] = beta ? (float)urand() : NAN;
        for (int r = 0; r < R1; r++) y1[r] = keep1[r] = beta ? (float)urand() : NAN;
        float keep0[R0];
        memcpy(keep0, y0, sizeof y0);
        lz_gemv_mat m[2] = {{w0, y0, R0}, {w1, y1, R1}};
        CHECK(lz_gemv_ref(m, 2, x, IN, (float)beta, NULL) == 0, "gemv reference runs");
        int ok = 1;
        for (int k = 0; k < 2; k++)
            for (int r = 0; r < (k ? R1 : R0); r++) {
                float want = beta ? (k ? keep1[r] : keep0[r]) : 0.f;
                for (int i = 0; i < IN; i++) want += lz_bf16_to_f32((k ? w1 : w0)[r * IN + i]) * lz_bf16_to_f32(x[i]);
                ok &= fabsf((k ? y1 : y0)[r] - want) <= 1e-5f * (1.f + fabsf(want));
            }
        CHECK(ok, "gemv reference = the sums (beta %d)", beta);
    }
    lz_gemv_mat m[1] = {{w0, y0, R0}};
    CHECK(lz_gemv_ref(m, 1, x, 36, 0.f, NULL) == LZ_ATTN_EARG, "gemv width not a multiple of 8 refused");
    CHECK(lz_gemv_ref(m, 0, x, 40, 0.f, NULL) == LZ_ATTN_EARG, "gemv without matrices refused");
}

/* lz_kvmass_ref (the GPU kernel's reference, bf16 keys) computes what the
 * ingest's scoring computes (lz_kvpolicy_mass, fp32 keys: the same bf16
 * values widened): normalised error <= 1e-5; bad shapes refused. */
static void test_kvmass_ref(int L, int H, int KV, int d, int s, int n, int w, int m)
{
    const int G = H / KV, mm = m ? m : n - w;
    const size_t qn = (size_t)L * w * H * d, kn = (size_t)L * KV * n * d, pn = (size_t)L * KV * (s ? s : 1) * d;
    const size_t on = (size_t)L * KV * G * mm;
    float *q = malloc(qn * 4), *kf = malloc(kn * 4), *pkf = malloc(pn * 4), *a = malloc(on * 4), *b = malloc(on * 4);
    lz_bf16 *k = malloc(kn * 2), *pk = malloc(pn * 2);
    for (size_t i = 0; i < qn; i++) q[i] = (float)(lz_test_u01(&rng) * 3 - 1.5);
    for (size_t i = 0; i < kn; i++) kf[i] = lz_bf16_to_f32(k[i] = lz_f32_to_bf16((float)(lz_test_u01(&rng) * 4 - 2)));
    for (size_t i = 0; i < pn; i++) pkf[i] = lz_bf16_to_f32(pk[i] = lz_f32_to_bf16((float)(lz_test_u01(&rng) * 8 - 4)));
    lz_kvmass_params p = {a, q, k, s ? pk : NULL, n, s ? s : 1, s, n, w, m, L, H, KV, d};
    lz_kvscore_params sp = {.q = q, .k = kf, .k_stride = n, .pk = s ? pkf : NULL, .pk_stride = s ? s : 1, .n_prefix = s,
                            .n = n, .w = w, .m = m, .L = L, .H = H, .KV = KV, .d = d, .kernel = 1};
    CHECK(lz_kvmass_ref(&p, NULL) == 0 && lz_kvpolicy_mass(&sp, b) == 0, "kvmass ref and kvpolicy mass run");
    double num = 0, den = 0;
    for (size_t i = 0; i < on; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    const double ne = sqrt(num / (den > 0 ? den : 1));
    CHECK(ne <= 1e-5, "kvmass ref vs the ingest's scoring L=%d H=%d KV=%d d=%d s=%d n=%d w=%d m=%d: %.3g", L, H, KV, d, s, n,
          w, m, ne);
    lz_kvmass_params bad = p;
    bad.w = n + 1;
    CHECK(lz_kvmass_ref(&bad, NULL) == LZ_ATTN_EARG, "a window past the document refused");
    bad = p;
    bad.H = H + 1;
    CHECK(lz_kvmass_ref(&bad, NULL) == LZ_ATTN_EARG, "heads not a multiple of the kv heads refused");
    free(q), free(kf), free(pkf), free(a), free(b), free(k), free(pk);
}

/* The batched pass's references (kernels/lz_batch_ops.h) against the one-sequence ones: the
 * gathered words of each list are the sequence's segment words with their rows shifted, then
 * exactly the words lz_decode_add_segment_kv makes for its own rows (*count + 1 keys at offset
 * 0); a row's rotary and appends equal lz_op_heads_own_ref's for that sequence alone; the
 * lengths grow by one. */
static void test_batch_ops_ref(int layout)
{
    enum { B = 3, L = 2, H = 8, KV = 2, d = 64, nb = 6, N = 200, NB = nb + 4 };
    uint64_t sw[B][L * KV * nb], sv[B][L * KV * nb];
    int32_t nf[B][L * KV];
    int cnt[B] = {0, 63, 130};
    static lz_bf16 ok[B][L * KV * N * d], ov[B][L * KV * N * d];
    lz_op_batch_seq seq[B];
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < L * KV * nb; i++)
            sw[b][i] = lz_decode_word(1000 * b + i, 7 * i, 1 + i % 64) | (i % 3 ? 0 : LZ_DECODE_SEG_START), sv[b][i] = 50 * i;
        for (int i = 0; i < L * KV; i++) nf[b][i] = (b + i) % (nb - 1);
        seq[b] = (lz_op_batch_seq){sw[b], sv[b], nf[b], nb, N, 100 * b, 200 * b, 10000 * b, 20000 * b, ok[b], ov[b],
                                   1000 + 17 * b, &cnt[b], NULL, NULL, 0, 0};
    }
    static uint64_t w[L * B * KV * NB], v[L * B * KV * NB];
    int32_t n[L * B * KV];
    CHECK(lz_op_batch_words_ref(w, v, n, NULL, NULL, seq, B, L, KV, NB, NULL) == 0, "batch words ref");
    int words_ok = 1;
    for (int i = 0; i < L * B * KV; i++) {
        const int l = i / (B * KV), b = (i / KV) % B, h = i % KV, lh = l * KV + h, f = nf[b][lh];
        for (int j = 0; j < f; j++)
            words_ok &= lz_decode_word_row(w[(size_t)i * NB + j]) == lz_decode_word_row(sw[b][lh * nb + j]) + 100u * b &&
                        (w[(size_t)i * NB + j] >> 36) == (sw[b][lh * nb + j] >> 36) && v[(size_t)i * NB + j] == sv[b][lh * nb + j] + 200u * b;
        uint64_t ew[NB], ev[NB];
        int m = 0;
        words_ok &= lz_decode_add_segment_kv(ew, ev, &m, NB, 10000u * b + (uint64_t)lh * N, 20000u * b + (uint64_t)lh * N,
                                            cnt[b] + 1, 0) == 0 &&
                    n[i] == f + m && !memcmp(w + (size_t)i * NB + f, ew, (size_t)m * 8) && !memcmp(v + (size_t)i * NB + f, ev, (size_t)m * 8);
    }
    CHECK(words_ok, "batch words: segment words shifted, then lz_decode_add_segment_kv's own-row words");
    { /* fp8 words (sequence 1's even ones): moved by dk8 / dv8, their scales beside them; the rest 0 */
        static float sks[L * KV * nb], svs[L * KV * nb], ks[L * B * KV * NB], vs[L * B * KV * NB];
        static uint64_t w8[L * B * KV * NB], v8[L * B * KV * NB];
        int32_t n8[L * B * KV];
        for (int i = 0; i < L * KV * nb; i++) sks[i] = i % 2 ? 0.f : 0.25f + i, svs[i] = i % 2 ? 0.f : 3.f + i;
        lz_op_batch_seq s8[B];
        memcpy(s8, seq, sizeof s8);
        s8[1].ksc = sks, s8[1].vsc = svs, s8[1].dk8 = 7777, s8[1].dv8 = 8888;
        for (int i = 0; i < L * B * KV * NB; i++) ks[i] = vs[i] = -1.f;
        CHECK(lz_op_batch_words_ref(w8, v8, n8, ks, vs, s8, B, L, KV, NB, NULL) == 0, "batch words ref (fp8)");
        CHECK(lz_op_batch_words_ref(w8, v8, n8, ks, NULL, s8, B, L, KV, NB, NULL) == LZ_ATTN_EARG,
              "batch words: one scale array without the other refused");
        int f8_ok = 1;
        for (int i = 0; i < L * B * KV; i++) {
            const int l = i / (B * KV), b = (i / KV) % B, h = i % KV, lh = l * KV + h, f = nf[b][lh];
            f8_ok &= n8[i] == n[i];
            for (int j = 0; j < n8[i]; j++) {
                const size_t at = (size_t)i * NB + j;
                const int fp8 = b == 1 && j < f && j % 2 == 0 && sks[lh * nb + j] > 0; /* (lh * nb + j) % 2 == j % 2: nb even */
                const uint64_t dk = fp8 ? 7777u : b == 1 && j < f ? 100u : 0u, dv = fp8 ? 8888u : b == 1 && j < f ? 200u : 0u;
                if (b != 1 || j >= f) { f8_ok &= w8[at] == w[at] && v8[at] == v[at] && ks[at] == 0.f && vs[at] == 0.f; continue; }
                f8_ok &= lz_decode_word_row(w8[at]) == lz_decode_word_row(sw[b][lh * nb + j]) + dk &&
                         (w8[at] >> 36) == (sw[b][lh * nb + j] >> 36) && v8[at] == sv[b][lh * nb + j] + dv &&
                         ks[at] == (fp8 ? sks[lh * nb + j] : 0.f) && vs[at] == (fp8 ? svs[lh * nb + j] : 0.f);
            }
        }
        CHECK(f8_ok, "batch words: fp8 words moved by dk8 / dv8 with their scales, bf16 and own blocks at scale 0");
    }
    const int ld = (H + 2 * KV) * d;
    float q[B * ld], inv[d / 2];
    for (int i = 0; i < B * ld; i++) q[i] = sinf(0.37f * i) * 2.f;
    lz_rope_inv_freqs(inv, d, 500000.f, NULL);
    static lz_bf16 qh[B * H * d], qa[H * d], ka[KV * d], va[KV * d], ok1[L * KV * N * d], ov1[L * KV * N * d];
    CHECK(lz_op_batch_heads_ref(qh, q, ld, H, KV, d, 1, layout, inv, seq, B, NULL) == 0, "batch heads ref");
    int heads_ok = 1;
    for (int b = 0; b < B; b++) {
        memset(ok1, 0, sizeof ok1), memset(ov1, 0, sizeof ov1);
        const float *row = q + (size_t)b * ld;
        CHECK(lz_op_heads_own_ref(qa, ka, va, ok1 + (size_t)KV * N * d, ov1 + (size_t)KV * N * d, N, row, row + H * d,
                                  row + (H + KV) * d, 0, 1, H, KV, d, seq[b].pos0, &cnt[b], layout, inv, NULL) == 0,
              "heads_own ref");
        heads_ok &= !memcmp(qa, qh + (size_t)b * H * d, sizeof qa) &&
                    !memcmp(ok1 + (size_t)KV * N * d, ok[b] + (size_t)KV * N * d, (size_t)KV * N * d * 2) &&
                    !memcmp(ov1 + (size_t)KV * N * d, ov[b] + (size_t)KV * N * d, (size_t)KV * N * d * 2);
    }
    CHECK(heads_ok, "batch heads (layout %d): each row as lz_op_heads_own_ref alone, bit for bit", layout);
    CHECK(lz_op_batch_count_ref(seq, B, NULL) == 0 && cnt[0] == 1 && cnt[1] == 64 && cnt[2] == 131, "batch count");
}

/* lz_gemv_rmsnorm_swiglu_ref against the FFN's gate written out here in double (rmsnorm,
 * bf16 input, both dots, silu(g) u rounded to bf16), and its argument checks */
static void test_swiglu_ref(void)
{
    enum { ROWS = 37, IN = 64 };
    float x[IN], nw[IN];
    lz_bf16 wg[ROWS * IN], wu[ROWS * IN], h[ROWS];
    for (int i = 0; i < IN; i++) x[i] = (float)(urand() * 4 - 2), nw[i] = (float)(0.5 + urand());
    for (int i = 0; i < ROWS * IN; i++) wg[i] = lz_f32_to_bf16((float)(urand() - 0.5)), wu[i] = lz_f32_to_bf16((float)(urand() - 0.5));
    CHECK(lz_gemv_rmsnorm_swiglu_ref(wg, wu, ROWS, x, nw, 1e-5f, IN, h, NULL) == 0, "swiglu reference runs");
    double ss = 0;
    for (int i = 0; i < IN; i++) ss += (double)x[i] * x[i];
    const double r = 1.0 / sqrt(ss / IN + 1e-5);
    double worst = 0;
    for (int o = 0; o < ROWS; o++) {
        double g = 0, u = 0;
        for (int i = 0; i < IN; i++) {
            const double xi = lz_bf16_to_f32(lz_f32_to_bf16((float)(x[i] * r * nw[i])));
            g += lz_bf16_to_f32(wg[o * IN + i]) * xi, u += lz_bf16_to_f32(wu[o * IN + i]) * xi;
        }
        const double want = g / (1 + exp(-g)) * u, e = fabs(lz_bf16_to_f32(h[o]) - want) / (fabs(want) + 1e-2);
        worst = e > worst ? e : worst;
    }
    CHECK(worst < 1e-2, "swiglu reference = the gate written out: worst %.3g", worst);
    CHECK(lz_gemv_rmsnorm_swiglu_ref(wg, wu, 0, x, nw, 1e-5f, IN, h, NULL) == LZ_ATTN_EARG &&
              lz_gemv_rmsnorm_swiglu_ref(wg, wu, ROWS, x, nw, 1e-5f, IN - 4, h, NULL) == LZ_ATTN_EARG &&
              lz_gemv_rmsnorm_swiglu_ref(wg, NULL, ROWS, x, nw, 1e-5f, IN, h, NULL) == LZ_ATTN_EARG,
          "swiglu reference refuses 0 rows, in not a multiple of 8, a missing matrix");
}

/* lz_gemv_rmsnorm_rope_ref against the rotary written out here in double (rmsnorm, bf16
 * input, the dots, R(pos) on each pair of q and k by base/rope.h's pairing), own rows outside
 * row count untouched, and its argument checks */
static void test_rope_ref(int layout)
{
    enum { H = 4, KV = 2, D = 16, IN = 32, N = 5 };
    const int Hd = H * D, KVd = KV * D, cnt = 3;
    const int64_t pos0 = 70000;
    float x[IN], nw[IN], inv[D / 2];
    lz_bf16 wq[Hd * IN], wk[KVd * IN], wv[KVd * IN], qh[Hd], kh[KVd], vh[KVd], ok[KVd * N], ov[KVd * N];
    for (int i = 0; i < IN; i++) x[i] = (float)(urand() * 4 - 2), nw[i] = (float)(0.5 + urand());
    for (int t = 0; t < D / 2; t++) inv[t] = powf(10000.f, -2.f * t / D);
    for (int i = 0; i < Hd * IN; i++) wq[i] = lz_f32_to_bf16((float)(urand() - 0.5));
    for (int i = 0; i < KVd * IN; i++) wk[i] = lz_f32_to_bf16((float)(urand() - 0.5)), wv[i] = lz_f32_to_bf16((float)(urand() - 0.5));
    for (int i = 0; i < KVd * N; i++) ok[i] = ov[i] = lz_f32_to_bf16(7.f);
    lz_gemv_rope p = {wq, wk, wv, H, KV, D, layout, inv, pos0, &cnt, qh, kh, vh, ok, ov, N};
    CHECK(lz_gemv_rmsnorm_rope_ref(&p, x, nw, 1e-5f, IN, NULL) == 0, "rope reference runs");
    double ss = 0;
    for (int i = 0; i < IN; i++) ss += (double)x[i] * x[i];
    const double r = 1.0 / sqrt(ss / IN + 1e-5);
    double xb[IN];
    for (int i = 0; i < IN; i++) xb[i] = lz_bf16_to_f32(lz_f32_to_bf16((float)(x[i] * r * nw[i])));
    double worst = 0;
    int untouched = 1;
    for (int hh = 0; hh < H + 2 * KV; hh++) {
        const lz_bf16 *w = hh < H ? wq + hh * D * IN : hh < H + KV ? wk + (hh - H) * D * IN : wv + (hh - H - KV) * D * IN;
        const lz_bf16 *got = hh < H ? qh + hh * D : hh < H + KV ? kh + (hh - H) * D : vh + (hh - H - KV) * D;
        const lz_bf16 *own = hh < H ? NULL : (hh < H + KV ? ok + (hh - H) * N * D : ov + (hh - H - KV) * N * D);
        double y[D];
        for (int e = 0; e < D; e++) {
            y[e] = 0;
            for (int i = 0; i < IN; i++) y[e] += lz_bf16_to_f32(w[e * IN + i]) * xb[i];
        }
        for (int t = 0; t < D / 2 && hh < H + KV; t++) {
            const int a = layout == LZ_ROPE_HALF ? t : 2 * t, b = layout == LZ_ROPE_HALF ? t + D / 2 : 2 * t + 1;
            const double ang = (double)(pos0 + cnt) * inv[t], y0 = y[a], y1 = y[b];
            y[a] = y0 * cos(ang) - y1 * sin(ang), y[b] = y0 * sin(ang) + y1 * cos(ang);
        }
        for (int e = 0; e < D; e++) {
            const double er = fabs(lz_bf16_to_f32(got[e]) - y[e]) / (fabs(y[e]) + 0.1);
            worst = er > worst ? er : worst;
            if (own) {
                for (int row = 0; row < N; row++)
                    untouched &= row == cnt ? own[row * D + e] == got[e] : lz_bf16_to_f32(own[row * D + e]) == 7.f;
            }
        }
    }
    /* the angle at 70,003 in fp32 (base/rope.h) against double: a few 1e-3 radians at most */
    CHECK(worst < 2e-2, "rope reference = the rotary written out (layout %d): worst %.3g", layout, worst);
    CHECK(untouched, "rope reference: k and v at own row %d, the other rows untouched", cnt);
    lz_gemv_rope bad = p;
    bad.d = 15;
    CHECK(lz_gemv_rmsnorm_rope_ref(&bad, x, nw, 1e-5f, IN, NULL) == LZ_ATTN_EHEADDIM, "rope reference refuses an odd d");
    bad = p, bad.own_k = NULL;
    CHECK(lz_gemv_rmsnorm_rope_ref(&bad, x, nw, 1e-5f, IN, NULL) == LZ_ATTN_EARG, "rope reference refuses no own rows");
    bad = p, bad.H = 3;
    CHECK(lz_gemv_rmsnorm_rope_ref(&bad, x, nw, 1e-5f, IN, NULL) == LZ_ATTN_EARG, "rope reference refuses H not a multiple of KV");
    CHECK(lz_gemv_rmsnorm_rope_ref(&p, x, nw, 1e-5f, IN - 4, NULL) == LZ_ATTN_EARG, "rope reference refuses in not a multiple of 8");
}

int main(void)
{
    test_rope_ref(LZ_ROPE_ADJACENT);
    test_rope_ref(LZ_ROPE_HALF);
    test_swiglu_ref();
    test_batch_ops_ref(LZ_ROPE_ADJACENT);
    test_batch_ops_ref(LZ_ROPE_HALF);
    test_words_and_checks();
    test_decode_splits();
    test_rope_table();
    test_prefill_plan();
    test_gemv_ref();
    for (int layout = 0; layout < 2; layout++) {
        test_ops_ref(layout);
        test_rerotate_composes(layout);
        for (int di = 0; di < 2; di++)
            for (int gi = 0; gi < 3; gi++) {
                int d = di ? 128 : 64, G = gi == 0 ? 1 : (gi == 1 ? 4 : 8);
                test_prefill_lazy_eq(d, layout, G, (gi + layout) & 1);
                test_engine_matches_prefill(d, layout, G, (gi + layout + di) & 1);
                test_decode_eq_prefill(d, layout, G);
            }
    }
    test_kvmass_ref(2, 8, 2, 64, 7, 60, 16, 0);
    test_kvmass_ref(2, 4, 4, 32, 0, 30, 30, 30);
    return lz_test_done();
}

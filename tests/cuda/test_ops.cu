/* test_ops.cu - every kernel of kernels/lz_ops.cu against its CPU reference
 * (kernels/lz_ops_ref.c) on fresh random inputs: exact for the data movement
 * (embedding, transpose, the own sequence's bookkeeping), within two bf16
 * ulps where the kernel rounds fp32 math to bf16 (rmsnorm, rotary, silu),
 * 1e-5 relative for the fp32 window queries; outputs poisoned first. And
 * kernels/lz_kvmass.cu (KV eviction's attention masses) against its reference,
 * and kernels/lz_argmax.cu (greedy tokens on the device) against its reference
 * and lz_sample_argmax, exactly, on rows with ties, NaN, -inf and banned ids.
 * Usage: test_ops (on the GPU machine) */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/lz_argmax.h"
#include "kernels/lz_batch_ops.h"
#include "kernels/lz_decode.h"
#include "kernels/lz_fp8_quant.h"
#include "kernels/lz_kvmass.h"
#include "kernels/lz_ops.h"
#include "base/half.h"
#include "base/rope.h"
extern "C" {
#include "model/sampler.h" /* plain C, no guards of its own */
}
#include "tests/cuda/cuda_check.h"
#include "tests/test.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float urand(void) { return (float)lz_test_u01(&rng); }

template <class T> static T *dev(const T *h, size_t n)
{
    T *d;
    CK(cudaMalloc((void **)&d, n * sizeof(T) + 1));
    if (h) CK(cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice));
    else CK(cudaMemset(d, 0xff, n * sizeof(T) + 1)); /* poison: NaN bf16 / fp32 */
    return d;
}
template <class T> static T *back(const T *d, size_t n)
{
    T *h = (T *)malloc(n * sizeof(T) + 1);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
static float *frand(size_t n, float scale)
{
    float *x = (float *)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (urand() * 2.f - 1.f) * scale;
    return x;
}
/* elements of a (GPU) and b (reference) bf16 further apart than ulps bf16
 * ulps of b plus atol (the rotary: device and host cos/sin of one fp32 angle
 * differ in the last bit, which a cancelling pair turns into an absolute,
 * not a relative, difference of ~1e-6 of its inputs) */
static size_t bf16_bad(const lz_bf16 *a, const lz_bf16 *b, size_t n, int ulps, float atol = 0.f)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        const float x = lz_bf16_to_f32(a[i]), y = lz_bf16_to_f32(b[i]);
        bad += !(fabsf(x - y) <= ulps * 0x1p-8f * fabsf(y) + atol + 1e-30f);
    }
    return bad;
}

static void test_shapes(int n, int D, int H, int KV, int d, int layout)
{
    const size_t nd = (size_t)n * D, V = 97;
    /* embedding */
    lz_bf16 *tab = (lz_bf16 *)malloc(V * D * 2);
    for (size_t i = 0; i < V * D; i++) tab[i] = lz_f32_to_bf16(urand() - 0.5f);
    int *ids = (int *)malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) ids[i] = (int)(urand() * V) % (int)V;
    float *x_ref = (float *)malloc(nd * 4), *x_d = dev<float>(NULL, nd);
    lz_bf16 *tab_d = dev(tab, V * D);
    int *ids_d = dev(ids, n);
    CHECK(lz_op_embed(x_d, tab_d, ids_d, n, D, NULL) == 0, "embed launch");
    lz_op_embed_ref(x_ref, tab, ids, n, D, NULL);
    float *x_g = back(x_d, nd);
    CHECK(!memcmp(x_g, x_ref, nd * 4), "embed n=%d D=%d", n, D);
    /* rmsnorm */
    float *x = frand(nd, 3.f), *w = frand(D, 1.f);
    float *xd = dev(x, nd), *wd = dev(w, D);
    lz_bf16 *o_d = dev<lz_bf16>(NULL, nd), *o_ref = (lz_bf16 *)malloc(nd * 2);
    CHECK(lz_op_rmsnorm(o_d, xd, wd, n, D, 1e-5f, NULL) == 0, "rmsnorm launch");
    lz_op_rmsnorm_ref(o_ref, x, w, n, D, 1e-5f, NULL);
    lz_bf16 *o_g = back(o_d, nd);
    CHECK(bf16_bad(o_g, o_ref, nd, 2) == 0, "rmsnorm n=%d D=%d: %zu elements off", n, D, bf16_bad(o_g, o_ref, nd, 2));
    /* heads: rotary into head-major, window queries, a length read from memory */
    float inv[64];
    lz_rope_inv_freqs(inv, d, 500000.f, NULL);
    const size_t nq = (size_t)n * H * d, nk = (size_t)n * KV * d;
    float *q = frand(nq, 2.f), *k = frand(nk, 2.f), *v = frand(nk, 2.f);
    float *qd = dev(q, nq), *kd = dev(k, nk), *vd = dev(v, nk), *invd = dev(inv, (size_t)d / 2);
    lz_bf16 *qh_d = dev<lz_bf16>(NULL, nq), *kh_d = dev<lz_bf16>(NULL, nk), *vh_d = dev<lz_bf16>(NULL, nk);
    lz_bf16 *qh = (lz_bf16 *)malloc(nq * 2), *kh = (lz_bf16 *)malloc(nk * 2), *vh = (lz_bf16 *)malloc(nk * 2);
    const int cw = n > 3 ? 3 : n, c0 = n - cw, cnt = 70000 + n; /* positions past 65,536 */
    int *cnt_d = dev(&cnt, 1);
    float *qc_d = dev<float>(NULL, (size_t)cw * H * d), *qc = (float *)malloc((size_t)cw * H * d * 4);
    CHECK(lz_op_heads(qh_d, kh_d, vh_d, qd, kd, vd, 0, n, H, KV, d, 5, cnt_d, layout, invd, qc_d, c0, cw, NULL) == 0,
          "heads");
    lz_op_heads_ref(qh, kh, vh, q, k, v, 0, n, H, KV, d, 5, &cnt, layout, inv, qc, c0, cw, NULL);
    lz_bf16 *qh_g = back(qh_d, nq), *kh_g = back(kh_d, nk), *vh_g = back(vh_d, nk);
    float *qc_g = back(qc_d, (size_t)cw * H * d);
    /* inputs within [-2, 2]: 1e-4 absolute is ~100x the cos/sin disagreement; a wrong angle or pair is O(1) */
    CHECK(bf16_bad(qh_g, qh, nq, 2, 1e-4f) == 0 && bf16_bad(kh_g, kh, nk, 2, 1e-4f) == 0 && !memcmp(vh_g, vh, nk * 2),
          "heads n=%d H=%d KV=%d d=%d layout=%d: %zu / %zu off", n, H, KV, d, layout, bf16_bad(qh_g, qh, nq, 2, 1e-4f),
          bf16_bad(kh_g, kh, nk, 2, 1e-4f));
    double worst = 0;
    for (size_t e = 0; e < (size_t)cw * H * d; e++) worst = fmax(worst, fabs(qc_g[e] - qc[e]) / (fabs(qc[e]) + 1e-3));
    CHECK(worst <= 1e-4, "window queries: relative %g", worst);
    /* heads over one product's rows [q | k | v] (row stride): the same as over separate arrays */
    {
        const size_t ld = (size_t)(H + 2 * KV) * d;
        float *qkv = (float *)malloc((size_t)n * ld * 4);
        for (int i = 0; i < n; i++) {
            memcpy(qkv + i * ld, q + (size_t)i * H * d, (size_t)H * d * 4);
            memcpy(qkv + i * ld + (size_t)H * d, k + (size_t)i * KV * d, (size_t)KV * d * 4);
            memcpy(qkv + i * ld + (size_t)(H + KV) * d, v + (size_t)i * KV * d, (size_t)KV * d * 4);
        }
        float *qkv_d = dev(qkv, (size_t)n * ld);
        CHECK(lz_op_heads(qh_d, kh_d, vh_d, qkv_d, qkv_d + (size_t)H * d, qkv_d + (size_t)(H + KV) * d, (int)ld, n, H, KV,
                          d, 5, cnt_d, layout, invd, qc_d, c0, cw, NULL) == 0, "heads (row stride)");
        lz_bf16 *qh2 = back(qh_d, nq), *kh2 = back(kh_d, nk), *vh2 = back(vh_d, nk);
        float *qc2 = back(qc_d, (size_t)cw * H * d);
        CHECK(!memcmp(qh2, qh_g, nq * 2) && !memcmp(kh2, kh_g, nk * 2) && !memcmp(vh2, vh_g, nk * 2) &&
                  !memcmp(qc2, qc_g, (size_t)cw * H * d * 4),
              "heads with a row stride: the packed layout's results");
        cudaFree(qkv_d); free(qkv); free(qh2); free(kh2); free(vh2); free(qc2);
    }
    /* silu */
    float *gt = frand(nd, 6.f), *up = frand(nd, 2.f), *gtd = dev(gt, nd), *upd = dev(up, nd);
    lz_bf16 *s_d = dev<lz_bf16>(NULL, nd), *s_ref = (lz_bf16 *)malloc(nd * 2);
    CHECK(lz_op_silu_mul(s_d, gtd, upd, nd, NULL) == 0, "silu launch");
    lz_op_silu_mul_ref(s_ref, gt, up, nd, NULL);
    lz_bf16 *s_g = back(s_d, nd);
    CHECK(bf16_bad(s_g, s_ref, nd, 2) == 0, "silu: %zu off", bf16_bad(s_g, s_ref, nd, 2));
    { /* swiglu over rows [gate | up]: bit for bit the silu kernel's */
        float *gu = (float *)malloc(nd * 2 * 4);
        for (int i = 0; i < n; i++) {
            memcpy(gu + (size_t)i * 2 * D, gt + (size_t)i * D, (size_t)D * 4);
            memcpy(gu + (size_t)i * 2 * D + D, up + (size_t)i * D, (size_t)D * 4);
        }
        float *gu_d = dev(gu, nd * 2);
        lz_bf16 *w_d = dev<lz_bf16>(NULL, nd), *w_ref = (lz_bf16 *)malloc(nd * 2);
        CHECK(lz_op_swiglu(w_d, gu_d, n, D, NULL) == 0, "swiglu launch");
        lz_op_swiglu_ref(w_ref, gu, n, D, NULL);
        lz_bf16 *w_g = back(w_d, nd);
        CHECK(!memcmp(w_g, s_g, nd * 2) && bf16_bad(w_g, w_ref, nd, 2) == 0, "swiglu: the silu kernel's values");
        cudaFree(gu_d); cudaFree(w_d); free(gu); free(w_ref); free(w_g);
    }
    /* tokens: (H, n, d) -> (n, H*d) */
    lz_bf16 *t_d = dev<lz_bf16>(NULL, nq), *t_ref = (lz_bf16 *)malloc(nq * 2);
    CHECK(lz_op_tokens(t_d, qh_d, n, H, d, NULL) == 0, "tokens launch");
    lz_op_tokens_ref(t_ref, qh_g, n, H, d, NULL);
    lz_bf16 *t_g = back(t_d, nq);
    CHECK(!memcmp(t_g, t_ref, nq * 2), "tokens");
    /* the own sequence: lengths, append after *count, count += n */
    const int L = 3, W = 4, S = 2, N = n + 9, start = 4;
    int32_t *ql = (int32_t *)malloc((size_t)L * W * KV * 4);
    for (int e = 0; e < L * W * KV; e++) ql[e] = e;
    int32_t *ql_d = dev(ql, (size_t)L * W * KV);
    int st = start, *st_d = dev(&st, 1);
    CHECK(lz_op_own_len(ql_d, L, W, S, KV, st_d, NULL) == 0, "own len launch");
    lz_op_own_len_ref(ql, L, W, S, KV, &st, NULL);
    int32_t *ql_g = back(ql_d, (size_t)L * W * KV);
    CHECK(!memcmp(ql_g, ql, (size_t)L * W * KV * 4), "own lengths");
    lz_bf16 *own = (lz_bf16 *)malloc((size_t)KV * N * d * 2);
    for (size_t e = 0; e < (size_t)KV * N * d; e++) own[e] = (lz_bf16)e;
    lz_bf16 *own_d = dev(own, (size_t)KV * N * d);
    CHECK(lz_op_append(own_d, kh_d, n, KV, N, d, st_d, NULL) == 0, "append launch");
    lz_op_append_ref(own, kh_g, n, KV, N, d, &st, NULL);
    lz_bf16 *own_g = back(own_d, (size_t)KV * N * d);
    CHECK(!memcmp(own_g, own, (size_t)KV * N * d * 2), "append after %d rows", start);
    { /* heads with both appends in one launch: bit for bit heads + two appends, and the CPU reference's */
        const size_t no = (size_t)KV * N * d;
        lz_bf16 *oa[2], *ob[2], *ha[3], *hb[3];
        for (int j = 0; j < 2; j++) { oa[j] = dev(own, no); ob[j] = dev(own, no); }
        for (int j = 0; j < 3; j++) { ha[j] = dev<lz_bf16>(NULL, j ? nk : nq); hb[j] = dev<lz_bf16>(NULL, j ? nk : nq); }
        CHECK(lz_op_heads(ha[0], ha[1], ha[2], qd, kd, vd, 0, n, H, KV, d, 5, st_d, layout, invd, NULL, 0, 0, NULL) == 0 &&
                  lz_op_append(oa[0], ha[1], n, KV, N, d, st_d, NULL) == 0 &&
                  lz_op_append(oa[1], ha[2], n, KV, N, d, st_d, NULL) == 0, "heads, appends");
        CHECK(lz_op_heads_own(hb[0], hb[1], hb[2], ob[0], ob[1], N, qd, kd, vd, 0, n, H, KV, d, 5, st_d, layout, invd,
                              NULL) == 0, "heads_own launch");
        int same = 1;
        for (int j = 0; j < 3; j++) {
            lz_bf16 *x = back(ha[j], j ? nk : nq), *y = back(hb[j], j ? nk : nq);
            same &= !memcmp(x, y, (j ? nk : nq) * 2);
            free(x); free(y);
        }
        lz_bf16 *hk[2];
        for (int j = 0; j < 2; j++) {
            lz_bf16 *x = back(oa[j], no);
            hk[j] = back(ob[j], no);
            same &= !memcmp(x, hk[j], no * 2);
            free(x);
        }
        CHECK(same, "heads_own n=%d: bit for bit heads + two appends", n);
        lz_bf16 *rq = (lz_bf16 *)malloc(nq * 2), *rk = (lz_bf16 *)malloc(nk * 2), *rv = (lz_bf16 *)malloc(nk * 2);
        lz_bf16 *rok = (lz_bf16 *)malloc(no * 2), *rov = (lz_bf16 *)malloc(no * 2);
        for (size_t e = 0; e < no; e++) rok[e] = rov[e] = (lz_bf16)e;
        int c = start;
        CHECK(lz_op_heads_own_ref(rq, rk, rv, rok, rov, N, q, k, v, 0, n, H, KV, d, 5, &c, layout, inv, NULL) == 0 &&
                  bf16_bad(hk[0], rok, no, 2, 1e-4f) == 0 && !memcmp(hk[1], rov, no * 2),
              "heads_own n=%d: the CPU reference's own rows (%zu keys off)", n, bf16_bad(hk[0], rok, no, 2, 1e-4f));
        CHECK(lz_op_heads_own(hb[0], hb[1], hb[2], NULL, ob[1], N, qd, kd, vd, 0, n, H, KV, d, 5, st_d, layout, invd,
                              NULL) == LZ_ATTN_EARG, "heads_own without own rows: refused");
        for (int j = 0; j < 2; j++) { cudaFree(oa[j]); cudaFree(ob[j]); free(hk[j]); }
        for (int j = 0; j < 3; j++) { cudaFree(ha[j]); cudaFree(hb[j]); }
        free(rq); free(rk); free(rv); free(rok); free(rov);
    }
    CHECK(lz_op_count_add(st_d, n, NULL) == 0, "count launch");
    lz_op_count_add_ref(&st, n, NULL);
    int *st_g = back(st_d, 1);
    CHECK(*st_g == st && st == start + n, "count %d", *st_g);
    { /* lz_decode's block words of the own rows, step after step (one row, then a jump of n rows) */
        const int LKV = 3 * KV, own_blocks = (N + 9 + n + LZ_DECODE_BLOCK - 1) / LZ_DECODE_BLOCK + 3, NB = 6 + own_blocks;
        uint64_t *w = (uint64_t *)calloc((size_t)LKV * NB, 8);
        int32_t *nf = (int32_t *)malloc(LKV * 4), *nbk = (int32_t *)calloc(LKV, 4);
        for (int i = 0; i < LKV; i++) {
            nf[i] = (int)(urand() * 6);
            for (int j = 0; j < nf[i]; j++) w[(size_t)i * NB + j] = lz_decode_word(7 * j, 1000 + j, 1 + j) | LZ_DECODE_SEG_START;
            int k = nf[i];
            lz_decode_add_segment(w + (size_t)i * NB, &k, NB, 100000 + (uint64_t)i * 4096, (int64_t)own_blocks * 64, 0);
        }
        uint64_t *w_d = dev(w, (size_t)LKV * NB);
        int32_t *nf_d = dev(nf, LKV), *nb_d = dev(nbk, LKV);
        int c = 0, *c_d = dev(&c, 1), ok = 1;
        for (int stp = 0; stp < 140 && ok; stp++) {
            const int rows = stp == 70 ? n : 1; /* a question's rows in one step once */
            ok &= lz_op_own_words(w_d, nb_d, nf_d, LKV, NB, c_d, rows, NULL) == 0;
            lz_op_own_words_ref(w, nbk, nf, LKV, NB, &c, rows, NULL);
            uint64_t *wg = back(w_d, (size_t)LKV * NB);
            int32_t *nbg = back(nb_d, LKV);
            ok &= !memcmp(wg, w, (size_t)LKV * NB * 8) && !memcmp(nbg, nbk, LKV * 4);
            const int len = c + rows; /* every own block but the last full, the last holding the rest */
            for (int i = 0; i < LKV && ok; i++) {
                int keys = 0;
                for (int j = nf[i]; j < nbk[i]; j++) keys += lz_decode_word_keys(w[(size_t)i * NB + j]);
                ok &= keys == len && lz_decode_word_row(w[(size_t)i * NB + nf[i]]) == 100000 + (uint64_t)i * 4096;
            }
            free(wg); free(nbg);
            c += rows;
            CK(cudaMemcpy(c_d, &c, 4, cudaMemcpyHostToDevice));
        }
        CHECK(ok, "own block words n=%d: the reference's, every own row counted once (up to %d rows)", n, c);
        cudaFree(w_d); cudaFree(nf_d); cudaFree(nb_d); cudaFree(c_d); free(w); free(nf); free(nbk);
    }
    printf("ops n=%4d D=%4d H=%2d KV=%d d=%3d layout=%d: clean\n", n, D, H, KV, d, layout);
    cudaFree(tab_d); cudaFree(ids_d); cudaFree(x_d); cudaFree(xd); cudaFree(wd); cudaFree(o_d); cudaFree(qd); cudaFree(kd);
    cudaFree(vd); cudaFree(invd); cudaFree(qh_d); cudaFree(kh_d); cudaFree(vh_d); cudaFree(cnt_d); cudaFree(qc_d);
    cudaFree(gtd); cudaFree(upd); cudaFree(s_d); cudaFree(t_d); cudaFree(ql_d); cudaFree(st_d); cudaFree(own_d);
    free(tab); free(ids); free(x_ref); free(x_g); free(x); free(w); free(o_ref); free(o_g); free(q); free(k); free(v);
    free(qh); free(kh); free(vh); free(qc); free(qh_g); free(kh_g); free(vh_g); free(qc_g); free(gt); free(up);
    free(s_ref); free(s_g); free(t_ref); free(t_g); free(ql); free(ql_g); free(own); free(own_g); free(st_g);
}

/* lz_kvmass against lz_kvmass_ref: KV eviction's attention masses on fresh
 * random keys and window queries, normalised error <= 1e-5 (both fp32; the
 * sums run in another order), every output written (poisoned first), the
 * same bits on a second run (no atomics). */
static void test_kvmass(int L, int H, int KV, int d, int s, int n, int w, int m)
{
    const int G = H / KV, mm = m ? m : n - w, T = n + 3, S = s + 2;
    const size_t qn = (size_t)L * w * H * d, kn = (size_t)L * KV * T * d, pn = (size_t)L * KV * S * d;
    const size_t on = (size_t)L * KV * G * mm;
    float *q = frand(qn, 1.5f);
    lz_bf16 *k = (lz_bf16 *)malloc(kn * 2), *pk = (lz_bf16 *)malloc(pn * 2);
    for (size_t i = 0; i < kn; i++) k[i] = lz_f32_to_bf16((urand() * 2.f - 1.f) * 2.f);
    for (size_t i = 0; i < pn; i++) pk[i] = lz_f32_to_bf16((urand() * 2.f - 1.f) * 4.f); /* a sink */
    float *ref = (float *)malloc(on * 4), *qd = dev(q, qn), *md = dev<float>(NULL, on);
    lz_bf16 *kd = dev(k, kn), *pkd = dev(pk, pn);
    lz_kvmass_params p = {ref, q, k, s ? pk : NULL, T, S, s, n, w, m, L, H, KV, d};
    CHECK(lz_kvmass_ref(&p, NULL) == 0, "kvmass ref");
    p.mass = md, p.q = qd, p.k = kd, p.pk = s ? pkd : NULL;
    CHECK(lz_kvmass(&p, NULL) == 0, "kvmass launch L=%d H=%d KV=%d d=%d s=%d n=%d w=%d m=%d", L, H, KV, d, s, n, w, m);
    float *got = back(md, on);
    double num = 0, den = 0;
    size_t bad = 0;
    for (size_t i = 0; i < on; i++) {
        bad += !isfinite(got[i]) || got[i] < 0.f;
        num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    const double ne = sqrt(num / (den > 0 ? den : 1));
    CHECK(bad == 0 && ne <= 1e-5, "kvmass L=%d H=%d KV=%d d=%d s=%d n=%d w=%d m=%d: normalised error %.3g, %zu unwritten/negative",
          L, H, KV, d, s, n, w, m, ne, bad);
    CK(cudaMemset(md, 0xff, on * 4));
    CHECK(lz_kvmass(&p, NULL) == 0, "kvmass again");
    float *again = back(md, on);
    CHECK(!memcmp(again, got, on * 4), "kvmass: the same bits on a second run");
    printf("kvmass L=%d H=%d KV=%d d=%3d s=%2d n=%4d w=%4d m=%4d: GPU vs CPU normalised error %.2e\n", L, H, KV, d, s, n,
           w, mm, ne);
    free(q), free(k), free(pk), free(ref), free(got), free(again);
    cudaFree(qd), cudaFree(md), cudaFree(kd), cudaFree(pkd);
}

/* lz_fp8_quant against lz_fp8_quant_ref: fp8 quantisation of G groups of len
 * bf16 values (spanning e4m3's subnormals, values that round to 448, and
 * groups of zeros), the same scales and bytes bit for bit; a group holding
 * NaN or Inf named by its index (the lowest of several); the scalar path
 * (len not a multiple of 8) too. */
static void test_fp8_quant(int G, int64_t len)
{
    const size_t n = (size_t)G * len;
    lz_bf16 *x = (lz_bf16 *)malloc(n * 2);
    for (int g = 0; g < G; g++) {
        const float mag = g % 5 == 0 ? 1e-3f : g % 5 == 1 ? 40.f : 1.f; /* the scale varies by group */
        for (int64_t e = 0; e < len; e++)
            x[(size_t)g * len + e] = lz_f32_to_bf16(g % 7 == 3 ? 0.f : (urand() * 2.f - 1.f) * mag * (urand() < 0.01f ? 30.f : 1.f));
    }
    uint8_t *y_ref = (uint8_t *)malloc(n + 1);
    float *s_ref = (float *)malloc((size_t)G * 4 + 4);
    int bad_ref = 0, bad_g = 0;
    lz_fp8_quant_params p = {y_ref, s_ref, &bad_ref, x, len, G};
    CHECK(lz_fp8_quant_ref(&p, NULL) == 0 && bad_ref == 0, "fp8 quant ref G=%d len=%lld", G, (long long)len);
    lz_bf16 *xd = dev(x, n);
    uint8_t *yd = dev<uint8_t>(NULL, n);
    float *sd = dev<float>(NULL, (size_t)G);
    int *bd = dev(&bad_g, 1);
    p = (lz_fp8_quant_params){yd, sd, bd, xd, len, G};
    CHECK(lz_fp8_quant(&p, NULL) == 0, "fp8 quant launch G=%d len=%lld", G, (long long)len);
    uint8_t *y = back(yd, n);
    float *s = back(sd, (size_t)G);
    int *b = back(bd, 1);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += y[i] != y_ref[i];
    CHECK(diff == 0 && !memcmp(s, s_ref, (size_t)G * 4) && *b == 0,
          "fp8 quant G=%d len=%lld: %zu bytes differ from the reference, scales %s, bad %d", G, (long long)len, diff,
          memcmp(s, s_ref, (size_t)G * 4) ? "differ" : "equal", *b);
    if (G >= 4) { /* NaN in group G-1, Inf in group 2: the lowest is named, by both */
        x[(size_t)(G - 1) * len + len / 2] = 0x7fc0;
        x[(size_t)2 * len + len - 1] = 0xff80;
        bad_ref = 0;
        p = (lz_fp8_quant_params){y_ref, s_ref, &bad_ref, x, len, G};
        lz_fp8_quant_ref(&p, NULL);
        CK(cudaMemcpy(xd, x, n * 2, cudaMemcpyHostToDevice));
        CK(cudaMemset(bd, 0, 4));
        p = (lz_fp8_quant_params){yd, sd, bd, xd, len, G};
        CHECK(lz_fp8_quant(&p, NULL) == 0, "fp8 quant launch (non-finite)");
        int *b2 = back(bd, 1);
        CHECK(bad_ref == 3 && *b2 == 3, "fp8 quant: a non-finite group named (ref %d, GPU %d, want 3)", bad_ref, *b2);
        free(b2);
    }
    printf("fp8 quant G=%4d len=%7lld: %zu bytes, bit for bit\n", G, (long long)len, n);
    free(x), free(y_ref), free(s_ref), free(y), free(s), free(b);
    cudaFree(xd), cudaFree(yd), cudaFree(sd), cudaFree(bd);
}

/* kernels/lz_batch_ops.cu against its references: B sequences of different lengths, positions,
 * pool shifts and segment word counts; the gathered block words exactly, the rotary rows and
 * appended K/V within two bf16 ulps (device and host cos/sin of one angle differ in the last
 * bit: an absolute 1e-6 slack), every length one longer. */
static void test_batch_ops(int B, int L, int H, int KV, int d, int layout)
{
    const int nb = 12, N = 300, NB = nb + 6;
    lz_op_batch_seq *hs = (lz_op_batch_seq *)calloc((size_t)B, sizeof *hs), *ds = (lz_op_batch_seq *)calloc((size_t)B, sizeof *ds);
    uint64_t **hw = (uint64_t **)calloc((size_t)B, sizeof *hw), **hv = (uint64_t **)calloc((size_t)B, sizeof *hv);
    int32_t **hnf = (int32_t **)calloc((size_t)B, sizeof *hnf);
    int *cnt = (int *)calloc((size_t)B, sizeof *cnt);
    const size_t own = (size_t)L * KV * N * d;
    lz_bf16 **ok = (lz_bf16 **)calloc((size_t)B, sizeof *ok), **ov = (lz_bf16 **)calloc((size_t)B, sizeof *ov);
    for (int b = 0; b < B; b++) {
        const size_t nw = (size_t)L * KV * nb;
        hw[b] = (uint64_t *)malloc(nw * 8), hv[b] = (uint64_t *)malloc(nw * 8);
        hnf[b] = (int32_t *)malloc((size_t)L * KV * 4);
        for (size_t i = 0; i < nw; i++) {
            hw[b][i] = lz_decode_word((uint64_t)(urand() * 1e6), (int64_t)(urand() * 1e5), 1 + (int)(urand() * 63)) |
                       (urand() < 0.3f ? LZ_DECODE_SEG_START : 0);
            hv[b][i] = (uint64_t)(urand() * 1e6);
        }
        for (int i = 0; i < L * KV; i++) hnf[b][i] = (int32_t)(urand() * (nb - 5));
        cnt[b] = b == 0 ? 0 : (int)(urand() * 250); /* a first own token, and up to 4 blocks */
        ok[b] = (lz_bf16 *)calloc(own, 2), ov[b] = (lz_bf16 *)calloc(own, 2);
        hs[b] = (lz_op_batch_seq){hw[b], hv[b], hnf[b], nb, N, (int64_t)(urand() * 1e6), (int64_t)(urand() * 1e6),
                                  (int64_t)(urand() * 1e7), (int64_t)(urand() * 1e7), ok[b], ov[b],
                                  (int64_t)(urand() * 70000), &cnt[b]};
        if (b % 2) { /* fp8 words among its own: about half of them, with their scales and row shifts */
            float *ks = (float *)malloc(nw * 4), *vs = (float *)malloc(nw * 4);
            for (size_t i = 0; i < nw; i++) ks[i] = urand() < 0.5f ? 0.f : 0.01f + urand(), vs[i] = ks[i] > 0 ? 0.02f + urand() : 0.f;
            hs[b].ksc = ks, hs[b].vsc = vs;
            hs[b].dk8 = (int64_t)(urand() * 1e7), hs[b].dv8 = (int64_t)(urand() * 1e7);
        }
        ds[b] = hs[b];
        if (b % 2) ds[b].ksc = dev(hs[b].ksc, nw), ds[b].vsc = dev(hs[b].vsc, nw);
        ds[b].words = dev(hw[b], nw), ds[b].vrows = dev(hv[b], nw), ds[b].nf = dev(hnf[b], (size_t)L * KV);
        ds[b].ok = dev(ok[b], own), ds[b].ov = dev(ov[b], own), ds[b].count = dev(&cnt[b], 1);
    }
    lz_op_batch_seq *dseq = dev(ds, (size_t)B);
    const size_t tw = (size_t)L * B * KV * NB;
    uint64_t *w_ref = (uint64_t *)calloc(tw, 8), *v_ref = (uint64_t *)calloc(tw, 8);
    int32_t *n_ref = (int32_t *)calloc((size_t)L * B * KV, 4);
    uint64_t *wd = dev<uint64_t>(NULL, tw), *vd = dev<uint64_t>(NULL, tw);
    int32_t *nd = dev<int32_t>(NULL, (size_t)L * B * KV);
    float *ks_ref = (float *)calloc(tw, 4), *vs_ref = (float *)calloc(tw, 4);
    float *ksd = dev<float>(NULL, tw), *vsd = dev<float>(NULL, tw);
    CHECK(lz_op_batch_words_ref(w_ref, v_ref, n_ref, ks_ref, vs_ref, hs, B, L, KV, NB, NULL) == 0 &&
              lz_op_batch_words(wd, vd, nd, ksd, vsd, dseq, B, L, KV, NB, NULL) == 0,
          "batch words launch");
    uint64_t *w = back(wd, tw), *v = back(vd, tw);
    float *ks = back(ksd, tw), *vs = back(vsd, tw);
    int32_t *nn = back(nd, (size_t)L * B * KV);
    int same = !memcmp(nn, n_ref, (size_t)L * B * KV * 4);
    for (int i = 0; i < L * B * KV && same; i++)
        same = !memcmp(w + (size_t)i * NB, w_ref + (size_t)i * NB, (size_t)n_ref[i] * 8) &&
               !memcmp(v + (size_t)i * NB, v_ref + (size_t)i * NB, (size_t)n_ref[i] * 8) &&
               !memcmp(ks + (size_t)i * NB, ks_ref + (size_t)i * NB, (size_t)n_ref[i] * 4) &&
               !memcmp(vs + (size_t)i * NB, vs_ref + (size_t)i * NB, (size_t)n_ref[i] * 4);
    CHECK(same, "batch words B=%d L=%d KV=%d: the reference's words, values' rows, fp8 scales and counts", B, L, KV);
    free(ks_ref), free(vs_ref), free(ks), free(vs);
    cudaFree(ksd), cudaFree(vsd);
    const int ld = (H + 2 * KV) * d;
    float *q = frand((size_t)B * ld, 2.f), *inv = (float *)malloc((size_t)d / 2 * 4);
    lz_rope_inv_freqs(inv, d, 500000.f, NULL);
    float *qd = dev(q, (size_t)B * ld), *invd = dev(inv, (size_t)d / 2);
    lz_bf16 *qh_ref = (lz_bf16 *)malloc((size_t)B * H * d * 2), *qhd = dev<lz_bf16>(NULL, (size_t)B * H * d);
    size_t bad = 0;
    for (int l = 0; l < L; l++) {
        CHECK(lz_op_batch_heads_ref(qh_ref, q, ld, H, KV, d, l, layout, inv, hs, B, NULL) == 0 &&
                  lz_op_batch_heads(qhd, qd, ld, H, KV, d, l, layout, invd, dseq, B, NULL) == 0,
              "batch heads launch");
        lz_bf16 *qh = back(qhd, (size_t)B * H * d);
        bad += bf16_bad(qh, qh_ref, (size_t)B * H * d, 2, 1e-6f);
        free(qh);
    }
    for (int b = 0; b < B; b++) {
        lz_bf16 *gk = back(ds[b].ok, own), *gv = back(ds[b].ov, own);
        bad += bf16_bad(gk, ok[b], own, 2, 1e-6f) + bf16_bad(gv, ov[b], own, 0);
        free(gk), free(gv);
    }
    CHECK(bad == 0, "batch heads B=%d H=%d KV=%d d=%d layout=%d: %zu values beyond two bf16 ulps", B, H, KV, d, layout, bad);
    CHECK(lz_op_batch_count_ref(hs, B, NULL) == 0 && lz_op_batch_count(dseq, B, NULL) == 0, "batch count launch");
    int lens_ok = 1;
    for (int b = 0; b < B; b++) {
        int *c = back(ds[b].count, 1);
        lens_ok &= *c == cnt[b];
        free(c);
    }
    CHECK(lens_ok, "batch count: every sequence one longer");
    printf("batch ops B=%d L=%d H=%2d KV=%d d=%3d layout=%d: words and fp8 scales exact, rotary and appends within 2 ulps\n", B, L, H, KV,
           d, layout);
    for (int b = 0; b < B; b++) {
        cudaFree((void *)ds[b].words), cudaFree((void *)ds[b].vrows), cudaFree((void *)ds[b].nf), cudaFree(ds[b].ok);
        cudaFree(ds[b].ov), cudaFree(ds[b].count), cudaFree((void *)ds[b].ksc), cudaFree((void *)ds[b].vsc);
        free(hw[b]), free(hv[b]), free(hnf[b]), free(ok[b]), free(ov[b]), free((void *)hs[b].ksc), free((void *)hs[b].vsc);
    }
    cudaFree(dseq), cudaFree(wd), cudaFree(vd), cudaFree(nd), cudaFree(qd), cudaFree(invd), cudaFree(qhd);
    free(hs), free(ds), free(hw), free(hv), free(hnf), free(cnt), free(ok), free(ov), free(w_ref), free(v_ref), free(n_ref);
    free(w), free(v), free(nn), free(q), free(inv), free(qh_ref);
}

/* lz_argmax: rows of V logits ld apart, some drawn from few values (ties), some with NaN,
 * -inf or a banned maximum, the first column NaN or banned in some; exact against the
 * reference, and the reference against lz_sample_argmax over the masked row */
static void test_argmax(int rows, int V, int ld, int n_ban)
{
    float *l = (float *)malloc((size_t)rows * ld * sizeof(float));
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < ld; j++) {
            float *x = &l[(size_t)i * ld + j];
            *x = i % 3 == 1 ? (float)(int)(urand() * 4) : urand() * 20.f - 10.f; /* row 1 mod 3: ties */
            if (i % 4 == 2 && urand() < 0.05f) *x = NAN;
            if (i % 5 == 3 && urand() < 0.05f) *x = -INFINITY;
        }
    int ban[1 + LZ_ARGMAX_MAX_BAN];
    ban[0] = n_ban;
    for (int b = 1; b <= n_ban; b++) ban[b] = b == 1 ? 0 : (int)(urand() * V);
    if (n_ban > 1 && rows > 0) l[ban[2]] = 1e30f; /* row 0's maximum is banned */
    if (rows > 1) l[ld] = NAN;                    /* row 1 starts with a NaN */
    if (rows > 2) l[2 * (size_t)ld] = 1e30f;      /* row 2's first column wins, unless banned */
    for (int j = 0; rows > 4 && j < V; j++) /* row 3: -inf but a NaN and a banned NaN; row 4: NaN */
        l[3 * (size_t)ld + j] = j == V / 2 || (n_ban > 1 && j == ban[2]) ? NAN : -INFINITY, l[4 * (size_t)ld + j] = NAN;
    int *ref = (int *)malloc(2 * (size_t)rows * sizeof(int)), *d_next = dev<int>(NULL, 2 * (size_t)rows);
    const float *dl = dev(l, (size_t)rows * ld);
    const int *dban = dev(ban, 1 + (size_t)n_ban);
    CHECK(lz_argmax(d_next, dl, rows, V, ld, n_ban ? dban : NULL, NULL) == 0, "argmax launch");
    lz_argmax_ref(ref, l, rows, V, ld, n_ban ? ban : NULL, NULL);
    int *got = back(d_next, 2 * (size_t)rows), same = !memcmp(got, ref, 2 * (size_t)rows * sizeof(int)), seq = 1;
    float *row = (float *)malloc((size_t)V * sizeof(float));
    for (int i = 0; i < rows; i++) {
        memcpy(row, l + (size_t)i * ld, (size_t)V * sizeof(float));
        seq &= lz_sample_argmax(row, V) == ref[2 * i];
        for (int b = 1; b <= n_ban; b++)
            if (ban[b] < V) row[ban[b]] = -INFINITY;
        seq &= lz_sample_argmax(row, V) == ref[2 * i + 1];
    }
    CHECK(same, "argmax rows %d V %d ld %d ban %d: the kernel = its reference", rows, V, ld, n_ban);
    CHECK(seq, "argmax rows %d V %d ban %d: the reference = lz_sample_argmax over the (masked) rows", rows, V, n_ban);
    CK(cudaFree((void *)dl));
    CK(cudaFree((void *)dban));
    CK(cudaFree(d_next));
    free(l), free(ref), free(got), free(row);
}

int main(void)
{
    test_argmax(37, 128256, 128256, 3); /* Llama 3's vocabulary, its three end-of-generation ids */
    test_argmax(5, 1000, 1003, 0);
    test_argmax(6, 1, 1, 1);
    test_argmax(9, 5000, 5000, LZ_ARGMAX_MAX_BAN);
    test_argmax(4, 1001, 1004, 2); /* float4 rows and a scalar tail */
    CHECK(lz_argmax(NULL, NULL, 1, 10, 9, NULL, NULL) == LZ_ARGMAX_EINVAL, "argmax: ld < V refused");
    test_batch_ops(5, 3, 32, 8, 128, LZ_ROPE_HALF);
    test_batch_ops(2, 2, 8, 8, 64, LZ_ROPE_ADJACENT);
    test_fp8_quant(256, 160 * 128); /* an 8B model's 160-token document: (layer, kv head) groups */
    test_fp8_quant(7, 1001);        /* the scalar path */
    test_fp8_quant(64, 8);
    test_fp8_quant(1, 4096 * 128);
    test_shapes(1, 64, 4, 4, 64, LZ_ROPE_ADJACENT);
    test_shapes(37, 256, 8, 2, 128, LZ_ROPE_HALF);
    test_shapes(300, 1536, 12, 4, 128, LZ_ROPE_ADJACENT);
    test_shapes(129, 4096, 32, 8, 128, LZ_ROPE_HALF);
    test_shapes(9, 6000, 8, 8, 64, LZ_ROPE_ADJACENT);  /* rmsnorm: 32 values a thread in registers */
    test_shapes(3, 10000, 8, 2, 64, LZ_ROPE_HALF);     /* rmsnorm: past 8,192, the loop */
    test_kvmass(2, 32, 8, 128, 21, 160, 32, 0);  /* Llama-3-8B's heads, a window of 32 */
    test_kvmass(3, 8, 8, 64, 0, 45, 45, 45);     /* no prefix, the self window (w = m = n) */
    test_kvmass(2, 8, 1, 64, 5, 300, 70, 0);     /* G = 8, rows past a warp */
    test_kvmass(1, 12, 4, 128, 9, 1, 1, 1);      /* a one-token document */
    lz_kvmass_params bad = {};
    CHECK(lz_kvmass(&bad, NULL) == LZ_ATTN_EARG, "kvmass: bad parameters refused");
    return lz_test_done();
}

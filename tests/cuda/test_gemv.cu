/* test_gemv.cu - lz_gemv (kernels/lz_gemv.cu) against its CPU reference
 * (kernels/lz_gemv_ref.c, double precision) on fresh random inputs: one to
 * three matrices sharing x, widths from 8 to LZ_GEMV_MAX_IN, beta 0 (y
 * poisoned first: never read) and 1; every row within 1e-5 of the sum of
 * |w x| terms; bad arguments refused. The fused forms (x = rmsnorm of an
 * fp32 row, x = silu(gate) * up) equal, bit for bit, lz_op_rmsnorm or
 * lz_op_silu_mul followed by lz_gemv, and their CPU references within 1e-3
 * (x's bf16 rounding may differ in a last bit); the q/k/v product with the
 * rotary and appends in its epilogue equals lz_gemv_rmsnorm then
 * lz_op_heads_own bit for bit (both rotary layouts, head_dim 64 / 128, GQA
 * 1 / 4 / 8, positions past 65,536). A chain of dependent products
 * launched back to back, and replayed from a graph, equals the same chain run
 * one launch at a time. All of it under three launch settings (lz_gemv_tune):
 * the default persistent grids, one block a SM (each warp loops over row
 * pairs), and one block per 16 rows. With --bench, the matrix-vector
 * products of a decode step of Llama-3.1-8B's shape, ours against
 * cublasGemmEx at one column (what gpu/llama_cuda.cu used), weights read
 * from HBM (rotating sets larger than L2): microseconds and GB/s of weights,
 * against the device-to-device copy rate measured in the same run; and the
 * step's products at 2 to 64 rows by cuBLAS (a question's prefill, a batched
 * decode step).
 * Usage: test_gemv [--bench]   (on the GPU machine) */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/lz_gemv.h"
#include "kernels/lz_ops.h"
#include "base/half.h"
#include "base/rope.h"
#include "tests/cuda/cuda_check.h"
#include "tests/test.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float urand(void) { return (float)lz_test_u01(&rng); }

static lz_bf16 *rand_bf16(size_t n)
{
    lz_bf16 *h = (lz_bf16 *)malloc(n * 2);
    for (size_t i = 0; i < n; i++) h[i] = lz_f32_to_bf16((urand() * 2.f - 1.f) * (urand() < 0.01f ? 30.f : 1.f));
    return h;
}

template <class T> static T *dev(const T *h, size_t n)
{
    T *d;
    CK(cudaMalloc((void **)&d, n * sizeof(T)));
    if (h) CK(cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice));
    else CK(cudaMemset(d, 0xff, n * sizeof(T))); /* poison: NaN */
    return d;
}

/* One case: n_mats matrices of rows[m] x in, beta. */
static void check_case(int n_mats, const int *rows, int in, float beta)
{
    lz_gemv_mat hm[LZ_GEMV_MAX_MATS], dm[LZ_GEMV_MAX_MATS];
    lz_bf16 *hx = rand_bf16((size_t)in), *dx = dev(hx, (size_t)in);
    float *y0[LZ_GEMV_MAX_MATS];
    for (int m = 0; m < n_mats; m++) {
        const size_t nw = (size_t)rows[m] * in;
        lz_bf16 *w = rand_bf16(nw);
        y0[m] = (float *)malloc((size_t)rows[m] * 4);
        for (int r = 0; r < rows[m]; r++) y0[m][r] = (urand() * 2.f - 1.f) * 10.f;
        hm[m] = (lz_gemv_mat){w, (float *)malloc((size_t)rows[m] * 4), rows[m]};
        memcpy(hm[m].y, y0[m], (size_t)rows[m] * 4);
        dm[m] = (lz_gemv_mat){dev(w, nw), beta != 0.f ? dev(y0[m], (size_t)rows[m]) : dev<float>(NULL, (size_t)rows[m]),
                              rows[m]};
    }
    CHECK(lz_gemv(dm, n_mats, dx, in, beta, NULL) == 0, "launch");
    CK(cudaDeviceSynchronize());
    CHECK(lz_gemv_ref(hm, n_mats, hx, in, beta, NULL) == 0, "reference");
    double worst = 0;
    int bad = 0;
    for (int m = 0; m < n_mats; m++) {
        float *got = (float *)malloc((size_t)rows[m] * 4);
        CK(cudaMemcpy(got, dm[m].y, (size_t)rows[m] * 4, cudaMemcpyDeviceToHost));
        for (int r = 0; r < rows[m]; r++) {
            double mag = fabs((double)beta * y0[m][r]);
            for (int i = 0; i < in; i++)
                mag += fabs((double)lz_bf16_to_f32(hm[m].w[(size_t)r * in + i]) * lz_bf16_to_f32(hx[i]));
            const double e = fabs((double)got[r] - hm[m].y[r]) / (mag > 0 ? mag : 1);
            if (!(e <= 1e-5)) bad++;
            if (e > worst || e != e) worst = e != e ? INFINITY : e;
        }
        free(got);
    }
    CHECK(bad == 0, "gemv %d matrices (%d, %d, %d rows) x %d, beta %g: %d rows off, worst %.3g", n_mats, rows[0],
          n_mats > 1 ? rows[1] : 0, n_mats > 2 ? rows[2] : 0, in, beta, bad, worst);
    printf("gemv %d matrices rows %5d %5d %5d in %5d beta %g: worst row error %.2e (of sum |w x|)\n", n_mats, rows[0],
           n_mats > 1 ? rows[1] : 0, n_mats > 2 ? rows[2] : 0, in, beta, worst);
    for (int m = 0; m < n_mats; m++) {
        free((void *)hm[m].w); free(hm[m].y); free(y0[m]);
        CK(cudaFree((void *)dm[m].w)); CK(cudaFree(dm[m].y));
    }
    free(hx);
    CK(cudaFree(dx));
}

/* A fused form against the separate kernels (exact) and its CPU reference. */
static void check_fused(int silu, int n_mats, const int *rows, int in, float beta)
{
    float *a = (float *)malloc((size_t)in * 4), *b = (float *)malloc((size_t)in * 4);
    for (int i = 0; i < in; i++) {
        a[i] = (urand() * 2.f - 1.f) * 3.f;
        b[i] = silu ? (urand() * 2.f - 1.f) * 2.f : 0.5f + urand();
    }
    float *da = dev(a, (size_t)in), *db = dev(b, (size_t)in);
    lz_bf16 *dx = dev<lz_bf16>(NULL, (size_t)in);
    lz_gemv_mat hm[3], dm[3], dm2[3];
    float *y0[3];
    for (int m = 0; m < n_mats; m++) {
        const size_t nw = (size_t)rows[m] * in;
        lz_bf16 *w = rand_bf16(nw), *dw = dev(w, nw);
        y0[m] = (float *)malloc((size_t)rows[m] * 4);
        for (int r = 0; r < rows[m]; r++) y0[m][r] = urand() * 2.f - 1.f;
        hm[m] = (lz_gemv_mat){w, (float *)malloc((size_t)rows[m] * 4), rows[m]};
        memcpy(hm[m].y, y0[m], (size_t)rows[m] * 4);
        dm[m] = (lz_gemv_mat){dw, dev(y0[m], (size_t)rows[m]), rows[m]};
        dm2[m] = (lz_gemv_mat){dw, dev(y0[m], (size_t)rows[m]), rows[m]};
    }
    const float eps = 1e-5f;
    int rc = silu ? lz_gemv_silu(dm, n_mats, da, db, in, beta, NULL) : lz_gemv_rmsnorm(dm, n_mats, da, db, eps, in, beta, NULL);
    CHECK(rc == 0, "fused launch");
    if (silu) lz_op_silu_mul(dx, da, db, (size_t)in, NULL);
    else lz_op_rmsnorm(dx, da, db, 1, in, eps, NULL);
    CHECK(lz_gemv(dm2, n_mats, dx, in, beta, NULL) == 0, "separate launch");
    CK(cudaDeviceSynchronize());
    rc = silu ? lz_gemv_silu_ref(hm, n_mats, a, b, in, beta, NULL) : lz_gemv_rmsnorm_ref(hm, n_mats, a, b, eps, in, beta, NULL);
    CHECK(rc == 0, "fused reference");
    int same = 1;
    double worst = 0;
    for (int m = 0; m < n_mats; m++) {
        float *got = (float *)malloc((size_t)rows[m] * 4), *sep = (float *)malloc((size_t)rows[m] * 4);
        CK(cudaMemcpy(got, dm[m].y, (size_t)rows[m] * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(sep, dm2[m].y, (size_t)rows[m] * 4, cudaMemcpyDeviceToHost));
        same &= memcmp(got, sep, (size_t)rows[m] * 4) == 0;
        for (int r = 0; r < rows[m]; r++) {
            double mag = fabs((double)beta * y0[m][r]) + 1e-30;
            for (int i = 0; i < in; i++) mag += fabs((double)lz_bf16_to_f32(hm[m].w[(size_t)r * in + i])) * 3.0;
            const double e = fabs((double)got[r] - hm[m].y[r]) / mag;
            worst = (e > worst || e != e) ? (e != e ? INFINITY : e) : worst;
        }
        free(got); free(sep);
    }
    CHECK(same, "%s fused = the separate kernels, bit for bit (in %d)", silu ? "silu" : "rmsnorm", in);
    CHECK(worst <= 1e-3, "%s fused vs CPU reference: worst %.3g (in %d)", silu ? "silu" : "rmsnorm", worst, in);
    printf("gemv with %-7s fused, %d matrices, in %5d, beta %g: equal to the separate kernels %s, vs CPU %.2e\n",
           silu ? "silu" : "rmsnorm", n_mats, in, beta, same ? "yes" : "NO", worst);
    for (int m = 0; m < n_mats; m++) {
        free((void *)hm[m].w); free(hm[m].y); free(y0[m]);
        CK(cudaFree((void *)dm[m].w)); CK(cudaFree(dm[m].y)); CK(cudaFree(dm2[m].y));
    }
    free(a); free(b);
    CK(cudaFree(da)); CK(cudaFree(db)); CK(cudaFree(dx));
}

/* lz_gemv_rmsnorm_swiglu: h against the two rows of lz_gemv_rmsnorm then lz_op_silu_mul
 * (exact), and against its CPU reference (h's bf16 within rounding of the products) */
static void check_swiglu(int rows, int in)
{
    float *x = (float *)malloc((size_t)in * 4), *nw = (float *)malloc((size_t)in * 4);
    for (int i = 0; i < in; i++) x[i] = (urand() * 2.f - 1.f) * 3.f, nw[i] = 0.5f + urand();
    const size_t n = (size_t)rows * in;
    lz_bf16 *wg = rand_bf16(n), *wu = rand_bf16(n), *dwg = dev(wg, n), *dwu = dev(wu, n);
    float *dx = dev(x, (size_t)in), *dnw = dev(nw, (size_t)in), *dgu = dev<float>(NULL, 2 * (size_t)rows);
    lz_bf16 *dh = dev<lz_bf16>(NULL, (size_t)rows), *dh2 = dev<lz_bf16>(NULL, (size_t)rows);
    const float eps = 1e-5f;
    CHECK(lz_gemv_rmsnorm_swiglu(dwg, dwu, rows, dx, dnw, eps, in, dh, NULL) == 0, "swiglu launch");
    const lz_gemv_mat m[2] = {{dwg, dgu, rows}, {dwu, dgu + rows, rows}};
    CHECK(lz_gemv_rmsnorm(m, 2, dx, dnw, eps, in, 0.f, NULL) == 0 && lz_op_silu_mul(dh2, dgu, dgu + rows, (size_t)rows, NULL) == 0,
          "separate launches");
    CK(cudaDeviceSynchronize());
    lz_bf16 *got = (lz_bf16 *)malloc((size_t)rows * 2), *sep = (lz_bf16 *)malloc((size_t)rows * 2),
            *ref = (lz_bf16 *)malloc((size_t)rows * 2);
    CK(cudaMemcpy(got, dh, (size_t)rows * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(sep, dh2, (size_t)rows * 2, cudaMemcpyDeviceToHost));
    CHECK(lz_gemv_rmsnorm_swiglu_ref(wg, wu, rows, x, nw, eps, in, ref, NULL) == 0, "swiglu reference");
    /* each row's error against its own size plus the rows' mean size: silu(g) u near zero
     * (g or u cancelling) rounds to bf16 from an fp32 g, u whose last bits differ */
    double worst = 0, mean = 0;
    for (int r = 0; r < rows; r++) mean += fabs((double)lz_bf16_to_f32(ref[r])) / rows;
    for (int r = 0; r < rows; r++) {
        const double a = lz_bf16_to_f32(got[r]), b = lz_bf16_to_f32(ref[r]);
        const double e = fabs(a - b) / (fabs(b) + mean + 1e-30);
        worst = (e > worst || e != e) ? (e != e ? INFINITY : e) : worst;
    }
    const int same = !memcmp(got, sep, (size_t)rows * 2);
    CHECK(same, "swiglu fused = rmsnorm products then silu_mul, bit for bit (rows %d, in %d)", rows, in);
    CHECK(worst <= 2e-2, "swiglu fused vs CPU reference: worst %.3g (rows %d, in %d)", worst, rows, in);
    printf("gemv gate/up with the silu gate fused, rows %5d, in %5d: equal to the separate kernels %s, vs CPU %.2e\n", rows,
           in, same ? "yes" : "NO", worst);
    CHECK(lz_gemv_rmsnorm_swiglu(dwg, dwu, 0, dx, dnw, eps, in, dh, NULL) == LZ_ATTN_EARG &&
              lz_gemv_rmsnorm_swiglu(dwg, dwu, rows, dx, dnw, eps, in + 4, dh, NULL) == LZ_ATTN_EARG &&
              lz_gemv_rmsnorm_swiglu(dwg, dwu, rows, dx, dnw, eps, in, NULL, NULL) == LZ_ATTN_EARG,
          "swiglu refuses 0 rows, in not a multiple of 8, no output");
    free(x), free(nw), free(wg), free(wu), free(got), free(sep), free(ref);
    CK(cudaFree(dwg)); CK(cudaFree(dwu)); CK(cudaFree(dx)); CK(cudaFree(dnw)); CK(cudaFree(dgu));
    CK(cudaFree(dh)); CK(cudaFree(dh2));
}

/* lz_gemv_rmsnorm_rope: the heads and both appends against lz_gemv_rmsnorm's three rows then
 * lz_op_heads_own (exact, own rows outside row *count untouched), and against its CPU reference
 * (within the rounding of bf16 outputs of products whose fp32 sums differ in last bits) */
static void check_rope(int H, int KV, int d, int in, int layout, int N, int cnt, int64_t pos0)
{
    const int Hd = H * d, KVd = KV * d;
    float *x = (float *)malloc((size_t)in * 4), *nw = (float *)malloc((size_t)in * 4), *inv = (float *)malloc((size_t)d * 2);
    for (int i = 0; i < in; i++) x[i] = (urand() * 2.f - 1.f) * 3.f, nw[i] = 0.5f + urand();
    for (int t = 0; t < d / 2; t++) inv[t] = powf(500000.f, -2.f * t / d);
    lz_bf16 *wq = rand_bf16((size_t)Hd * in), *wk = rand_bf16((size_t)KVd * in), *wv = rand_bf16((size_t)KVd * in);
    const size_t no = (size_t)KVd * N;
    lz_bf16 *own0 = rand_bf16(no); /* what the own rows held before */
    lz_gemv_rope g = {dev(wq, (size_t)Hd * in), dev(wk, (size_t)KVd * in), dev(wv, (size_t)KVd * in), H, KV, d, layout,
                      dev(inv, (size_t)d / 2), pos0, dev(&cnt, 1), dev<lz_bf16>(NULL, Hd), dev<lz_bf16>(NULL, KVd),
                      dev<lz_bf16>(NULL, KVd), dev(own0, no), dev(own0, no), N};
    lz_gemv_rope sep = g;
    sep.qh = dev<lz_bf16>(NULL, Hd), sep.kh = dev<lz_bf16>(NULL, KVd), sep.vh = dev<lz_bf16>(NULL, KVd);
    sep.own_k = dev(own0, no), sep.own_v = dev(own0, no);
    float *dx = dev(x, (size_t)in), *dnw = dev(nw, (size_t)in), *drow = dev<float>(NULL, (size_t)Hd + 2 * KVd);
    const float eps = 1e-5f;
    CHECK(lz_gemv_rmsnorm_rope(&g, dx, dnw, eps, in, NULL) == 0, "rope launch");
    const lz_gemv_mat m[3] = {{g.wq, drow, Hd}, {g.wk, drow + Hd, KVd}, {g.wv, drow + Hd + KVd, KVd}};
    CHECK(lz_gemv_rmsnorm(m, 3, dx, dnw, eps, in, 0.f, NULL) == 0 &&
              lz_op_heads_own(sep.qh, sep.kh, sep.vh, sep.own_k, sep.own_v, N, drow, drow + Hd, drow + Hd + KVd,
                              Hd + 2 * KVd, 1, H, KV, d, pos0, sep.count, layout, sep.inv_freq, NULL) == 0,
          "separate launches");
    CK(cudaDeviceSynchronize());
    /* [qh | kh | vh | own_k | own_v] of each, host side */
    const size_t tot = (size_t)Hd + 2 * KVd + 2 * no;
    lz_bf16 *got = (lz_bf16 *)malloc(tot * 2), *want = (lz_bf16 *)malloc(tot * 2), *ref = (lz_bf16 *)malloc(tot * 2);
    auto fetch = [&](lz_bf16 *h, const lz_gemv_rope &r) {
        CK(cudaMemcpy(h, r.qh, (size_t)Hd * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(h + Hd, r.kh, (size_t)KVd * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(h + Hd + KVd, r.vh, (size_t)KVd * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(h + Hd + 2 * KVd, r.own_k, no * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(h + Hd + 2 * KVd + no, r.own_v, no * 2, cudaMemcpyDeviceToHost));
    };
    fetch(got, g);
    fetch(want, sep);
    memcpy(ref + Hd + 2 * KVd, own0, no * 2);
    memcpy(ref + Hd + 2 * KVd + no, own0, no * 2);
    lz_gemv_rope hr = {wq, wk, wv, H, KV, d, layout, inv, pos0, &cnt, ref, ref + Hd, ref + Hd + KVd,
                       ref + Hd + 2 * KVd, ref + Hd + 2 * KVd + no, N};
    CHECK(lz_gemv_rmsnorm_rope_ref(&hr, x, nw, eps, in, NULL) == 0, "rope reference");
    const int same = !memcmp(got, want, tot * 2);
    /* [qh | kh | vh] element by element: one bf16 step of the element (the two sides round fp32
     * sums that differ in last bits) plus a share of its head's rms (an input element whose bf16
     * rounding differs moves every dot that reads it) */
    double worst = 0;
    for (int hh = 0; hh < H + 2 * KV; hh++) {
        const lz_bf16 *a = got + (size_t)hh * d, *b = ref + (size_t)hh * d;
        double rms = 0;
        for (int e = 0; e < d; e++) rms += (double)lz_bf16_to_f32(b[e]) * lz_bf16_to_f32(b[e]) / d;
        rms = sqrt(rms) + 1e-30;
        for (int e = 0; e < d; e++) {
            const double x = lz_bf16_to_f32(a[e]), y = lz_bf16_to_f32(b[e]);
            const double err = (fabs(x - y) - fabs(y) / 128) / rms;
            worst = (err > worst || err != err) ? (err != err ? INFINITY : err) : worst;
        }
    }
    int own_same = 1; /* row cnt of each head is its kh / vh row, every other row what it held */
    for (int kv = 0; kv < 2; kv++)
        for (int h = 0; h < KV; h++)
            for (int r = 0; r < N; r++) {
                const lz_bf16 *o = got + Hd + 2 * KVd + kv * no + ((size_t)h * N + r) * d;
                const lz_bf16 *w = r == cnt ? got + Hd + (size_t)(kv * KV + h) * d : own0 + ((size_t)h * N + r) * d;
                own_same &= !memcmp(o, w, (size_t)d * 2);
            }
    CHECK(same, "rope fused = rmsnorm products then heads_own, bit for bit (H %d KV %d d %d in %d layout %d)", H, KV, d, in,
          layout);
    CHECK(worst <= 2e-2, "rope fused vs CPU reference: worst %.3g of a head's rms past one bf16 step (H %d KV %d d %d in %d)",
          worst, H, KV, d, in);
    CHECK(own_same, "rope fused: k and v at own row %d of %d, every other row untouched", cnt, N);
    printf("gemv q/k/v with the rotary fused, H %2d KV %d d %3d in %5d layout %d pos %lld: equal to the separate kernels "
           "%s, vs CPU %.2e\n",
           H, KV, d, in, layout, (long long)(pos0 + cnt), same ? "yes" : "NO", worst);
    lz_gemv_rope bad = g;
    bad.d = d + 1;
    CHECK(lz_gemv_rmsnorm_rope(&bad, dx, dnw, eps, in, NULL) == LZ_ATTN_EHEADDIM, "rope refuses an odd head_dim");
    bad = g, bad.own_v = NULL;
    CHECK(lz_gemv_rmsnorm_rope(&bad, dx, dnw, eps, in, NULL) == LZ_ATTN_EARG &&
              lz_gemv_rmsnorm_rope(&g, dx, dnw, eps, in + 4, NULL) == LZ_ATTN_EARG &&
              lz_gemv_rmsnorm_rope(NULL, dx, dnw, eps, in, NULL) == LZ_ATTN_EARG,
          "rope refuses no own rows, in not a multiple of 8, no parameters");
    free(x), free(nw), free(inv), free(wq), free(wk), free(wv), free(own0), free(got), free(want), free(ref);
    const lz_gemv_rope *all[2] = {&g, &sep};
    for (int i = 0; i < 2; i++) {
        CK(cudaFree((void *)all[i]->qh)); CK(cudaFree((void *)all[i]->kh)); CK(cudaFree((void *)all[i]->vh));
        CK(cudaFree((void *)all[i]->own_k)); CK(cudaFree((void *)all[i]->own_v));
    }
    CK(cudaFree((void *)g.wq)); CK(cudaFree((void *)g.wk)); CK(cudaFree((void *)g.wv));
    CK(cudaFree((void *)g.inv_freq)); CK(cudaFree((void *)g.count));
    CK(cudaFree(dx)); CK(cudaFree(dnw)); CK(cudaFree(drow));
}

/* What enqueue() puts on st, captured as one CUDA graph and instantiated */
template <class F> static cudaGraphExec_t graph_of(F enqueue, cudaStream_t st)
{
    cudaGraph_t gr;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
    enqueue();
    CK(cudaStreamEndCapture(st, &gr));
    CK(cudaGraphInstantiate(&ge, gr, 0));
    CK(cudaGraphDestroy(gr));
    return ge;
}

/* A chain of dependent products as a decode step's FFN runs them, on a
 * non-default stream with nothing in between: gate/up = W rmsnorm(x), then x
 * += W_down silu(gate) up, four times over (each product reads what the one
 * before wrote, and the down product writes the x the gate/up product read).
 * Launched back to back (as programmatic dependents where the kernel is), the
 * result equals, bit for bit, the same chain with the device synchronised
 * after every launch; and the chain replayed from a CUDA graph equals it too. */
static void check_chain(int D, int F)
{
    const int steps = 4;
    lz_bf16 *hg = rand_bf16((size_t)2 * F * D), *hd = rand_bf16((size_t)D * F);
    for (size_t i = 0; i < (size_t)D * F; i++) hd[i] = lz_f32_to_bf16(lz_bf16_to_f32(hd[i]) * 0.02f);
    float *x0 = (float *)malloc((size_t)D * 4), *nw = (float *)malloc((size_t)D * 4);
    for (int i = 0; i < D; i++) x0[i] = urand() * 2.f - 1.f, nw[i] = 0.5f + urand();
    lz_bf16 *dg = dev(hg, (size_t)2 * F * D), *dd = dev(hd, (size_t)D * F);
    float *dn = dev(nw, (size_t)D), *gu = dev<float>(NULL, (size_t)2 * F);
    float *xs[3];
    float *out[3];
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (int mode = 0; mode < 3; mode++) { /* 0: synchronised, 1: back to back, 2: a graph of it */
        xs[mode] = dev(x0, (size_t)D);
        const lz_gemv_mat g2[2] = {{dg, gu, F}, {dg + (size_t)F * D, gu + F, F}};
        const lz_gemv_mat dm = {dd, xs[mode], D};
        auto chain = [&]() {
            for (int k = 0; k < steps; k++) {
                CHECK(lz_gemv_rmsnorm(g2, 2, xs[mode], dn, 1e-5f, D, 0.f, st) == 0, "chain gate/up launch");
                if (mode == 0) CK(cudaStreamSynchronize(st));
                CHECK(lz_gemv_silu(&dm, 1, gu, gu + F, F, 1.f, st) == 0, "chain down launch");
                if (mode == 0) CK(cudaStreamSynchronize(st));
            }
        };
        if (mode < 2) chain();
        else {
            cudaGraphExec_t ge = graph_of(chain, st);
            CK(cudaGraphLaunch(ge, st));
            CK(cudaGraphExecDestroy(ge));
        }
        CK(cudaStreamSynchronize(st));
        out[mode] = (float *)malloc((size_t)D * 4);
        CK(cudaMemcpy(out[mode], xs[mode], (size_t)D * 4, cudaMemcpyDeviceToHost));
    }
    int finite = 1, moved = 0;
    for (int i = 0; i < D; i++) finite &= isfinite(out[0][i]) != 0, moved |= out[0][i] != x0[i];
    CHECK(finite && moved, "chain D %d F %d: finite and changed", D, F);
    CHECK(!memcmp(out[0], out[1], (size_t)D * 4), "chain D %d F %d: back to back = synchronised, bit for bit", D, F);
    CHECK(!memcmp(out[0], out[2], (size_t)D * 4), "chain D %d F %d: graph = synchronised, bit for bit", D, F);
    printf("chain of %d gate/up + down products, D %d F %d: back to back %s, graph %s\n", steps, D, F,
           memcmp(out[0], out[1], (size_t)D * 4) ? "DIFFERS" : "equal", memcmp(out[0], out[2], (size_t)D * 4) ? "DIFFERS" : "equal");
    for (int m = 0; m < 3; m++) { CK(cudaFree(xs[m])); free(out[m]); }
    CK(cudaStreamDestroy(st));
    CK(cudaFree(dg)); CK(cudaFree(dd)); CK(cudaFree(dn)); CK(cudaFree(gu));
    free(hg); free(hd); free(x0); free(nw);
}

static void test_bad_args(void)
{
    lz_bf16 *x = dev<lz_bf16>(NULL, 64), *w = dev<lz_bf16>(NULL, 64 * 4);
    float *y = dev<float>(NULL, 4);
    lz_gemv_mat m[4] = {{w, y, 4}, {w, y, 4}, {w, y, 4}, {w, y, 4}};
    CHECK(lz_gemv(m, 1, x, 60, 0.f, NULL) == LZ_ATTN_EARG, "width not a multiple of 8 refused");
    CHECK(lz_gemv(m, 4, x, 64, 0.f, NULL) == LZ_ATTN_EARG, "four matrices refused");
    CHECK(lz_gemv(m, 0, x, 64, 0.f, NULL) == LZ_ATTN_EARG, "no matrix refused");
    CHECK(lz_gemv(m, 1, x, LZ_GEMV_MAX_IN + 8, 0.f, NULL) == LZ_ATTN_EARG, "too wide refused");
    m[1].rows = 0;
    CHECK(lz_gemv(m, 2, x, 64, 0.f, NULL) == LZ_ATTN_EARG, "empty matrix refused");
    CHECK(lz_gemv(m, 1, NULL, 64, 0.f, NULL) == LZ_ATTN_EARG, "no x refused");
    CK(cudaFree(x)); CK(cudaFree(w)); CK(cudaFree(y));
}

/* ---- --bench ---- */


/* median of 5 runs of 40 calls each, rotating among the sets */
template <class F> static double time_us(F call, int n_sets)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (int i = 0; i < 8; i++) call(i % n_sets);
    double t[5];
    for (int k = 0; k < 5; k++) {
        CK(cudaEventRecord(e0));
        for (int i = 0; i < 40; i++) call(i % n_sets);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t[k] = ms * 1e3 / 40;
    }
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            if (t[j] < t[i]) { double s = t[i]; t[i] = t[j]; t[j] = s; }
    return t[2];
}

static void bench(void)
{
    const double cbw = lz_copy_tbs();
    printf("\ndevice-to-device copy %.2f TB/s (read + write)\n", cbw);
    struct { const char *name; int n; int rows[3]; int in; float beta; int per_step; } sh[] = {
        {"q/k/v", 3, {4096, 1024, 1024}, 4096, 0.f, 32}, {"o", 1, {4096}, 4096, 1.f, 32},
        {"gate/up", 2, {14336, 14336}, 4096, 0.f, 32},  {"down", 1, {4096}, 14336, 1.f, 32},
        {"lm_head", 1, {128256}, 4096, 0.f, 1}};
    cublasHandle_t blas;
    if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) { printf("SKIP cuBLAS\n"); return; }
    double step_ours = 0, step_blas = 0, step_bytes = 0;
    for (auto &s : sh) {
        size_t wbytes = 0;
        for (int m = 0; m < s.n; m++) wbytes += (size_t)s.rows[m] * s.in * 2;
        const int n_sets = (int)((400u << 20) / wbytes) + 1; /* > 400 MB: out of the 60 MB L2 */
        lz_bf16 *x = dev<lz_bf16>(NULL, (size_t)s.in);
        CK(cudaMemset(x, 0, (size_t)s.in * 2));
        lz_gemv_mat *mats = (lz_gemv_mat *)calloc((size_t)n_sets * s.n, sizeof *mats);
        for (int k = 0; k < n_sets; k++)
            for (int m = 0; m < s.n; m++) {
                lz_bf16 *w = dev<lz_bf16>(NULL, (size_t)s.rows[m] * s.in);
                CK(cudaMemset(w, 0x3c, (size_t)s.rows[m] * s.in * 2));
                float *y = dev<float>(NULL, (size_t)s.rows[m]);
                CK(cudaMemset(y, 0, (size_t)s.rows[m] * 4));
                mats[k * s.n + m] = (lz_gemv_mat){w, y, s.rows[m]};
            }
        const double ours = time_us([&](int k) { lz_gemv(mats + k * s.n, s.n, x, s.in, s.beta, NULL); }, n_sets);
        const float alpha = 1.f;
        const double theirs = time_us([&](int k) {
            for (int m = 0; m < s.n; m++)
                cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.rows[m], 1, s.in, &alpha, mats[k * s.n + m].w, CUDA_R_16BF,
                             s.in, x, CUDA_R_16BF, s.in, &s.beta, mats[k * s.n + m].y, CUDA_R_32F, s.rows[m],
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        }, n_sets);
        CK(cudaDeviceSynchronize());
        printf("%-8s %6.1f MB of weights: ours %8.1f us (%5.2f TB/s, %3.0f%% of copy), cuBLAS %8.1f us (%5.2f TB/s), %.2fx\n",
               s.name, wbytes / 1e6, ours, wbytes / ours / 1e6, 100.0 * wbytes / ours / 1e6 / cbw, theirs,
               wbytes / theirs / 1e6, theirs / ours);
        step_ours += ours * s.per_step;
        step_blas += theirs * s.per_step;
        step_bytes += (double)wbytes * s.per_step;
        for (int k = 0; k < n_sets * s.n; k++) { CK(cudaFree((void *)mats[k].w)); CK(cudaFree(mats[k].y)); }
        free(mats);
        CK(cudaFree(x));
    }
    printf("one decode step's products (32 layers + lm_head, %.2f GB): ours %.2f ms, cuBLAS %.2f ms; at the copy rate "
           "%.2f ms\n", step_bytes / 1e9, step_ours / 1e3, step_blas / 1e3, step_bytes / (cbw * 1e12) * 1e3);
    cublasDestroy(blas);
}

/* What enqueue() puts on st captured as one CUDA graph, replayed 3 times, then 9 timed
 * replays: ms[0] the median, ms[1] the fastest, ms[2] the slowest. */
template <class F> static void graph_times(F enqueue, cudaStream_t st, cudaEvent_t e0, cudaEvent_t e1, double ms[3])
{
    cudaGraphExec_t ge = graph_of(enqueue, st);
    for (int i = 0; i < 3; i++) CK(cudaGraphLaunch(ge, st));
    double t[9];
    for (int k = 0; k < 9; k++) t[k] = lz_graph_ms(ge, st, e0, e1);
    for (int i = 0; i < 9; i++)
        for (int j = i + 1; j < 9; j++)
            if (t[j] < t[i]) { double u = t[i]; t[i] = t[j]; t[j] = u; }
    ms[0] = t[4], ms[1] = t[0], ms[2] = t[8];
    CK(cudaGraphExecDestroy(ge));
}

/* A decode step's products as the engine runs them (the fused forms, in
 * order, 32 layers of their own weights + the head: 15 GB, so nothing stays in
 * L2) replayed from one CUDA graph, under launch settings (lz_gemv_tune):
 * the grid of one block per 16 rows (how the products ran before) against
 * persistent grids of a few blocks a SM. */
static void bench_step(double cbw)
{
    const int L = 32, D = 4096, F = 14336, KVd = 1024, V = 128256;
    const size_t per_layer = ((size_t)D + 2 * KVd + D + 2 * (size_t)F) * D + (size_t)D * F;
    lz_bf16 *wts;
    if (cudaMalloc((void **)&wts, (per_layer * L + (size_t)V * D) * 2) != cudaSuccess) {
        printf("SKIP decode-step products: no room for 15 GB of weights\n");
        cudaGetLastError();
        return;
    }
    CK(cudaMemset(wts, 0, (per_layer * L + (size_t)V * D) * 2)); /* zeros: x stays finite */
    float *x = dev<float>(NULL, D), *nw = dev<float>(NULL, D), *q = dev<float>(NULL, D + 2 * KVd),
          *gu = dev<float>(NULL, 2 * (size_t)F), *logits = dev<float>(NULL, V);
    lz_bf16 *oh = dev<lz_bf16>(NULL, D), *hb = dev<lz_bf16>(NULL, F);
    CK(cudaMemset(x, 0, D * 4)); CK(cudaMemset(nw, 0, D * 4)); CK(cudaMemset(oh, 0, D * 2));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int swiglu = 0; /* 1: the FFN as the engine runs it (the silu gate in gate/up's epilogue) */
    auto step = [&]() {
        const lz_bf16 *w = wts;
        for (int l = 0; l < L; l++) {
            const lz_gemv_mat qkv[3] = {{w, q, D}, {w + (size_t)D * D, q + D, KVd}, {w + (size_t)(D + KVd) * D, q + D + KVd, KVd}};
            w += (size_t)(D + 2 * KVd) * D;
            const lz_gemv_mat o = {w, x, D};
            w += (size_t)D * D;
            const lz_gemv_mat g2[2] = {{w, gu, F}, {w + (size_t)F * D, gu + F, F}};
            w += 2 * (size_t)F * D;
            const lz_gemv_mat dn = {w, x, D};
            w += (size_t)D * F;
            lz_gemv_rmsnorm(qkv, 3, x, nw, 1e-5f, D, 0.f, st);
            lz_gemv(&o, 1, oh, D, 1.f, st);
            if (swiglu) {
                lz_gemv_rmsnorm_swiglu(g2[0].w, g2[1].w, F, x, nw, 1e-5f, D, hb, st);
                lz_gemv(&dn, 1, hb, F, 1.f, st);
            } else {
                lz_gemv_rmsnorm(g2, 2, x, nw, 1e-5f, D, 0.f, st);
                lz_gemv_silu(&dn, 1, gu, gu + F, F, 1.f, st);
            }
        }
        const lz_gemv_mat head = {w, logits, V};
        lz_gemv_rmsnorm(&head, 1, x, nw, 1e-5f, D, 0.f, st);
    };
    const double bytes = (double)(per_layer * L + (size_t)V * D) * 2;
    struct { const char *name; int bps, bps_silu, swiglu; } cf[] = {
        {"a block per 16 rows (before)", 1000, 1000, 0},
        {"persistent 4 / silu 2 a SM", 4, 2, 0},
        {"persistent 4 / silu 1 a SM", 4, 1, 0},
        {"persistent 4 / silu 4 a SM", 4, 4, 0},
        {"persistent 2 / silu 2 a SM", 2, 2, 0},
        {"persistent 3 / silu 2 a SM", 3, 2, 0},
        {"persistent 4, gate in gate/up (engine)", 4, 2, 1},
        {"persistent 3, gate in gate/up", 3, 2, 1}};
    printf("\none decode step's products (fused forms, 32 layers + head, %.2f GB), one CUDA graph, median of 9 replays:\n",
           bytes / 1e9);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (auto &c : cf) {
        lz_gemv_tune(c.bps, c.bps_silu);
        swiglu = c.swiglu;
        double t[3];
        graph_times(step, st, e0, e1, t);
        printf("  %-40s %.3f ms (%.3f-%.3f), %.2f TB/s, %.0f%% of copy\n", c.name, t[0], t[1], t[2], bytes / t[0] / 1e9,
               100.0 * bytes / t[0] / 1e9 / cbw);
    }
    lz_gemv_tune(0, 0);
    CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1)); CK(cudaStreamDestroy(st));
    CK(cudaFree(wts)); CK(cudaFree(x)); CK(cudaFree(nw)); CK(cudaFree(q)); CK(cudaFree(gu)); CK(cudaFree(logits));
    CK(cudaFree(oh)); CK(cudaFree(hb));
}

/* The same step's products at n rows by cublasGemmEx (bf16 in, fp32 out, as
 * gpu/llama_cuda.cu's gemm() calls it for several rows: a question's prefill,
 * a batched decode step) from one CUDA graph: what a step of n rows pays for
 * its weights against the copy rate. */
static void bench_step_blas(double cbw)
{
    const int L = 32, D = 4096, F = 14336, KVd = 1024, V = 128256, NMAX = 64;
    const size_t per_layer = ((size_t)D + 2 * KVd + D + 2 * (size_t)F) * D + (size_t)D * F;
    lz_bf16 *wts;
    if (cudaMalloc((void **)&wts, (per_layer * L + (size_t)V * D) * 2) != cudaSuccess) {
        printf("SKIP products at n rows: no room for 15 GB of weights\n");
        cudaGetLastError();
        return;
    }
    CK(cudaMemset(wts, 0, (per_layer * L + (size_t)V * D) * 2));
    lz_bf16 *x = dev<lz_bf16>(NULL, (size_t)NMAX * F);
    float *y = dev<float>(NULL, (size_t)NMAX * V);
    CK(cudaMemset(x, 0, (size_t)NMAX * F * 2));
    cublasHandle_t blas;
    if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) { printf("SKIP cuBLAS\n"); return; }
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cublasSetStream(blas, st);
    void *ws;
    CK(cudaMalloc(&ws, 32u << 20));
    cublasSetWorkspace(blas, ws, 32u << 20);
    const double bytes = (double)(per_layer * L + (size_t)V * D) * 2;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    printf("\none step's products at n rows by cublasGemmEx (%.2f GB of weights), one CUDA graph, median of 9:\n",
           bytes / 1e9);
    const int ns[] = {2, 8, 16, 32, 64};
    for (int n : ns) {
        const float one = 1.f, zero = 0.f;
        auto mm = [&](const lz_bf16 *w, int in, int out, float beta) {
            cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, CUDA_R_16BF, in, x, CUDA_R_16BF, in,
                         beta != 0.f ? &one : &zero, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        };
        auto step = [&]() {
            const lz_bf16 *w = wts;
            for (int l = 0; l < L; l++) {
                mm(w, D, D + 2 * KVd, 0.f), w += (size_t)(D + 2 * KVd) * D;
                mm(w, D, D, 1.f), w += (size_t)D * D;
                mm(w, D, 2 * F, 0.f), w += 2 * (size_t)F * D;
                mm(w, F, D, 1.f), w += (size_t)D * F;
            }
            mm(w, D, V, 0.f);
        };
        double t[3];
        graph_times(step, st, e0, e1, t);
        printf("  %2d rows: %.3f ms (%.3f-%.3f), %.2f TB/s, %.0f%% of copy\n", n, t[0], t[1], t[2], bytes / t[0] / 1e9,
               100.0 * bytes / t[0] / 1e9 / cbw);
    }
    CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1)); CK(cudaStreamDestroy(st));
    cublasDestroy(blas);
    CK(cudaFree(ws)); CK(cudaFree(wts)); CK(cudaFree(x)); CK(cudaFree(y));
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* in order with the FAIL lines */
    const int ins[] = {8, 64, 136, 4096, 14336, LZ_GEMV_MAX_IN};
    /* launch settings (lz_gemv_tune): the default persistent grids; one block a SM, so that
     * every warp takes several row pairs (the larger cases); a block per 16 rows */
    /* launch settings (lz_gemv_tune): the default persistent grids; one block a SM, so that
     * every warp takes several row pairs (the larger cases); a block per 16 rows */
    const int tunes[3][2] = {{0, 0}, {1, 1}, {1000, 1000}};
    for (int k = 0; k < 3; k++) {
        lz_gemv_tune(tunes[k][0], tunes[k][1]);
        printf("launch setting: %d / %d blocks a SM\n", tunes[k][0], tunes[k][1]);
        for (int t = 0; t < 14; t++) {
            const int n = 1 + t % 3, in = t < 6 ? ins[t] : 8 * (1 + (int)(urand() * 2047));
            int rows[3];
            for (int m = 0; m < 3; m++)
                rows[m] = urand() < 0.3 ? 1 + (int)(urand() * 7) : 1 + (int)(urand() * (t % 4 == 3 ? 9000 : 1500));
            check_case(n, rows, in, t % 2 ? 1.f : 0.f);
        }
        for (int t = 0; t < 6; t++) {
            const int in = t < 2 ? 4096 : 8 * (1 + (int)(urand() * 2047)), n = 1 + t % 3;
            int rows[3] = {1 + (int)(urand() * (t == 2 ? 7000 : 700)), 1 + (int)(urand() * 300), 1 + (int)(urand() * 300)};
            check_fused(t % 2, n, rows, in, t % 2 ? 1.f : 0.f);
        }
        check_swiglu(1 + (int)(urand() * 3000), 8 * (1 + (int)(urand() * 600)));
        check_swiglu(14336, 4096);
        check_rope(32, 8, 128, 4096, LZ_ROPE_HALF, 3000, 2074, 0); /* Llama-3.1-8B's shape */
        check_rope(32, 8, 128, 4096, LZ_ROPE_ADJACENT, 40, 17, 70000);
        for (int t = 0; t < 3; t++) {
            const int kv = 1 + (int)(urand() * 4), g = t == 0 ? 1 : t == 1 ? 4 : 8, dd = urand() < 0.5 ? 64 : 128;
            const int N = 1 + (int)(urand() * 300);
            check_rope(kv * g, kv, dd, 8 * (1 + (int)(urand() * 600)), t % 2 ? LZ_ROPE_HALF : LZ_ROPE_ADJACENT, N,
                       (int)(urand() * N), (int64_t)(urand() * 100000));
        }
        check_chain(512, 1536);
        check_chain(4096, 14336);
    }
    lz_gemv_tune(0, 0);
    test_bad_args();
    if (argc > 1 && !strcmp(argv[1], "--bench")) {
        bench();
        bench_step(lz_copy_tbs());
        bench_step_blas(lz_copy_tbs());
    }
    return lz_test_done();
}

/* kernels_test.cuh - the correctness bodies of kernels_check (tests/cuda/kernels_check.cu,
 * its test mode): the attention kernels against the CPU references on fresh random
 * inputs; segment counts 0-128, lengths 1-4096 (log-uniform), empty per-head
 * segments, offsets past 65,536 (up to ~2^21 for decode); outputs poisoned
 * with NaN before every run. Also lazy == non-lazy on materialised keys. fp8
 * (e4m3) documents: the same against the references, mixed with bf16 ones,
 * and lazy over fp8 == non-lazy over the fp8 re-rotated copies within a bound.
 * The driver seeds rng before each case and counts the CHECKs (tests/test.h).
 * Legend: S = segments, KV = kv heads, H = query heads, G = H/KV, M = rows,
 * d = head_dim, B = sequences, NB = block words per (b, kv head).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "kernels/lz_decode.h"
#include "kernels/lz_prefill.h"
#include "kernels/lz_rerotate.h"
#include "kernels/lz_ops.cuh"
#include "base/fp8.h"
#include "base/half.h"
#include "base/rope.h"
#include "tests/test.h"
#include "tests/cuda/cuda_check.h"

#define RC(x)                                                                           \
    do {                                                                                \
        int r_ = (x);                                                                   \
        CHECK(r_ == 0, "%s -> %s", #x, lz_attn_strerror(r_));                           \
    } while (0)

namespace kc_test {

static uint64_t rng;
static double urand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static int log_uniform_len(void) /* 1..4096, log-uniform */
{
    int l = (int)floor(exp(urand() * log(4097.0)));
    return l < 1 ? 1 : (l > 4096 ? 4096 : l);
}
static void fill(lz_bf16 *x, size_t n, float scale = 1.0f)
{
    for (size_t i = 0; i < n; i++) x[i] = lz_f32_to_bf16(scale * (float)(2.0 * urand() - 1.0));
}
static double nerr(const lz_bf16 *a, const lz_bf16 *b, size_t n, int *nan)
{
    double num = 0, den = 0;
    *nan = 0;
    for (size_t i = 0; i < n; i++) {
        double x = lz_bf16_to_f32(a[i]), y = lz_bf16_to_f32(b[i]);
        if (isnan(x) || isinf(x)) { (*nan)++; continue; }
        num += (x - y) * (x - y);
        den += y * y;
    }
    return sqrt(num / (den > 0 ? den : 1));
}
template <class T> static T *dalloc(size_t n) { T *p; CK(cudaMalloc(&p, n * sizeof(T) + 16)); return p; }
template <class T> static T *dup(const T *h, size_t n)
{
    T *p = dalloc<T>(n);
    CK(cudaMemcpy(p, h, n * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}
static void poison(lz_bf16 *d, size_t n) { CK(cudaMemset(d, 0xff, n * 2)); } /* 0xffff = NaN */
static lz_bf16 *fetch(const lz_bf16 *d, size_t n)
{
    lz_bf16 *h = (lz_bf16 *)malloc(n * 2);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost));
    return h;
}

static const char *LNAME[2] = {"adjacent", "half"};
static const double TOL = 1e-2;

static void inv_freqs(float *f, int d, int llama3)
{
    float div[128];
    if (llama3) lz_rope_llama3_divisors(div, d, 500000.0f, 8.0f, 1.0f, 4.0f, 8192.0f);
    lz_rope_inv_freqs(f, d, llama3 ? 500000.0f : 10000.0f, llama3 ? div : NULL);
}

/* One prefill case: GPU lazy vs CPU lazy ref; GPU non-lazy on keys materialised
 * by the GPU rerotate kernel vs GPU lazy; GPU rerotate vs CPU rerotate. */
static void prefill_case(int layout, int d, int G, int KV, int S, int M, int n_split, int llama3, int rpw, int bm = 0,
                         int wgmma = 0)
{
    const int H = KV * G;
    float inv[64];
    inv_freqs(inv, d, llama3);
    float *d_inv = dup(inv, d / 2);
    lz_attn_segment *segs = (lz_attn_segment *)calloc(S, sizeof *segs), *rsegs = (lz_attn_segment *)calloc(S, sizeof *rsegs);
    lz_attn_segment *hsegs = (lz_attn_segment *)calloc(S, sizeof *hsegs);
    int32_t *len = (int32_t *)calloc((size_t)S * KV, 4);
    lz_bf16 **hk = (lz_bf16 **)calloc(S, sizeof(void *)), **hv = (lz_bf16 **)calloc(S, sizeof(void *));
    int64_t pos = (int64_t)(urand() * 100000), seg_keys = 0;
    double rr_err = 0;
    /* a third of the cases: keys x0.25 in the first half of the segments, x5 in the later half
     * and the own keys, so the rows' running max grows by more than 2^8 after the first tiles
     * (from about 700 keys a segment) and the kernels rescale accumulated output (with keys in
     * [-1, 1] the max settles in the first tile). Scores that large carry bf16 rounding near the
     * tolerance: x8 gave 1.20e-2 lazy vs materialised, x13 1.02-1.13e-2 against the reference */
    const int grow = urand() < 1.0 / 3;
    auto kscale = [&](int s) { return !grow ? 1.0f : 2 * s >= S ? 5.0f : 0.25f; };
    for (int s = 0; s < S; s++) {
        int cap = log_uniform_len();
        for (int h = 0; h < KV; h++) len[s * KV + h] = urand() < 0.15 ? 0 : 1 + (int)(urand() * cap);
        len[s * KV + (s % KV)] = cap;
        seg_keys += cap;
        size_t n = (size_t)KV * cap * d;
        hk[s] = (lz_bf16 *)malloc(n * 2); hv[s] = (lz_bf16 *)malloc(n * 2);
        fill(hk[s], n, kscale(s)); fill(hv[s], n);
        lz_bf16 *dk = dup(hk[s], n), *dv = dup(hv[s], n), *dkr = dalloc<lz_bf16>(n);
        lz_rerotate_params rp = {dkr, dk, d_inv, (int64_t)KV * cap, pos, d, layout};
        RC(lz_rerotate(&rp, NULL));
        if (s == 0) { /* GPU vs CPU materialisation */
            lz_bf16 *want = (lz_bf16 *)malloc(n * 2), *got = fetch(dkr, n);
            lz_rerotate_params hp = {want, hk[s], inv, (int64_t)KV * cap, pos, d, layout};
            RC(lz_rerotate_ref(&hp, NULL));
            int nan;
            rr_err = nerr(got, want, n, &nan);
            CHECK(rr_err < 2e-3 && nan == 0, "rerotate gpu vs cpu: %g (nan %d)", rr_err, nan);
            free(want); free(got);
        }
        segs[s] = (lz_attn_segment){dk, dv, pos, cap};
        rsegs[s] = (lz_attn_segment){dkr, dv, 0, cap};
        hsegs[s] = (lz_attn_segment){hk[s], hv[s], pos, cap};
        pos += cap + (int64_t)(urand() * 3000);
    }
    size_t nq = (size_t)H * M * d, nk = (size_t)KV * M * d;
    lz_bf16 *q = (lz_bf16 *)malloc(nq * 2), *ks = (lz_bf16 *)malloc(nk * 2), *vs = (lz_bf16 *)malloc(nk * 2);
    fill(q, nq); fill(ks, nk, kscale(S)); fill(vs, nk);
    int64_t self_off = urand() < 0.25 ? 0 : pos; /* 0: own keys at their final positions (the engine's case) */
    lz_bf16 *d_q = dup(q, nq), *d_ks = dup(ks, nk), *d_vs = dup(vs, nk), *d_ksr = dalloc<lz_bf16>(nk);
    lz_rerotate_params rp = {d_ksr, d_ks, d_inv, (int64_t)KV * M, self_off, d, layout};
    RC(lz_rerotate(&rp, NULL));
    lz_attn_segment *d_segs = dup(segs, S), *d_rsegs = dup(rsegs, S);
    int32_t *d_len = dup(len, (size_t)S * KV);
    lz_bf16 *d_o = dalloc<lz_bf16>(nq), *d_o2 = dalloc<lz_bf16>(nq);
    /* a third of the cases address the heads by seg_row, in reverse order (head h at row
     * (KV - 1 - h) * cap): a kernel that read h * cap would take another head's keys */
    const int rowed = urand() < 1.0 / 3;
    int32_t *hrow = (int32_t *)malloc((size_t)S * KV * 4), *d_row = NULL;
    for (int s = 0; s < S; s++)
        for (int h = 0; h < KV; h++) hrow[s * KV + h] = (int32_t)((KV - 1 - h) * segs[s].cap);
    if (rowed) d_row = dup(hrow, (size_t)S * KV);

    lz_prefill_params p;
    memset(&p, 0, sizeof p);
    p.o = d_o; p.q = d_q; p.k_self = d_ks; p.v_self = d_vs; p.self_offset = self_off;
    p.segs = d_segs; p.seg_len = d_len; p.inv_freq = d_inv; p.seg_keys = seg_keys; p.n_seg = S;
    p.n_rows = M; p.n_heads = H; p.n_kv_heads = KV; p.head_dim = d; p.rope_layout = layout;
    p.scale = 1.0f / sqrtf((float)d); p.n_split = n_split; p.rows_per_warp = rpw; p.rows_per_cta = bm; p.wgmma = wgmma;
    p.seg_row = d_row;
    int dev, n_sm;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    /* half the cases hand the kernel the cos/sin table (lz_prefill_rope_table) */
    float *d_cs = NULL;
    if (urand() < 0.5) {
        int64_t *offs = (int64_t *)malloc((size_t)(S + 1) * 8);
        float *cs = (float *)malloc((size_t)(S + 1) * d * 4);
        for (int s2 = 0; s2 < S; s2++) offs[s2] = segs[s2].offset;
        lz_prefill_rope_table(cs, offs, S, self_off, inv, d);
        d_cs = dup(cs, (size_t)(S + 1) * d);
        p.rope_cs = d_cs;
        free(offs); free(cs);
    }
    int ns, used_bm, used_rpw, used_wg;
    lz_prefill_plan(&p, n_sm, &used_bm, &used_rpw, &ns, &used_wg);
    CHECK(ns == lz_prefill_splits(&p, n_sm), "plan and splits agree");
    p.work_bytes = lz_prefill_workspace(&p, ns);
    p.work = p.work_bytes ? dalloc<float>(p.work_bytes / 4) : NULL;
    poison(d_o, nq);
    RC(lz_prefill_lazy(&p, NULL));
    lz_prefill_params p2 = p;
    p2.o = d_o2; p2.segs = d_rsegs; p2.k_self = d_ksr; p2.self_offset = 0;
    poison(d_o2, nq);
    RC(lz_prefill(&p2, NULL));
    lz_bf16 *o = fetch(d_o, nq), *o2 = fetch(d_o2, nq), *ref = (lz_bf16 *)malloc(nq * 2);
    lz_prefill_params hp = p;
    hp.o = ref; hp.q = q; hp.k_self = ks; hp.v_self = vs; hp.segs = hsegs; hp.seg_len = len; hp.inv_freq = inv;
    hp.seg_row = rowed ? hrow : NULL;
    RC(lz_prefill_lazy_ref(&hp, NULL));
    int nan1, nan2;
    double e1 = nerr(o, ref, nq, &nan1), e2 = nerr(o2, o, nq, &nan2);
    printf("prefill %-8s d=%3d G=%d KV=%d S=%2d M=%3d split=%2d rows/cta=%3d rows/warp=%2d %s %s %s %s%s keys=%6lld: "
           "gpu-vs-ref %.2e, lazy-vs-materialised %.2e, nan/unwritten %d/%d\n",
           LNAME[layout], d, G, KV, S, M, ns, used_bm, used_rpw, used_wg ? "wgmma" : "mma  ", d_cs ? "cs-table" : "cs-own  ",
           grow ? "grow" : "flat", self_off ? "self@pos" : "self@0  ", rowed ? " seg_row" : "", (long long)seg_keys, e1,
           e2, nan1, nan2);
    CHECK(e1 <= TOL && nan1 == 0, "prefill gpu vs ref %g nan %d", e1, nan1);
    CHECK(e2 <= TOL && nan2 == 0, "prefill lazy vs materialised %g nan %d", e2, nan2);
    for (int s = 0; s < S; s++) {
        CK(cudaFree((void *)segs[s].k)); CK(cudaFree((void *)segs[s].v)); CK(cudaFree((void *)rsegs[s].k));
        free(hk[s]); free(hv[s]);
    }
    CK(cudaFree(d_inv)); CK(cudaFree(d_q)); CK(cudaFree(d_ks)); CK(cudaFree(d_vs)); CK(cudaFree(d_ksr));
    CK(cudaFree(d_segs)); CK(cudaFree(d_rsegs)); CK(cudaFree(d_len)); CK(cudaFree(d_o)); CK(cudaFree(d_o2));
    if (p.work) CK(cudaFree(p.work));
    if (d_cs) CK(cudaFree(d_cs));
    if (d_row) CK(cudaFree(d_row));
    free(hrow);
    free(segs); free(rsegs); free(hsegs); free(len); free(hk); free(hv);
    free(q); free(ks); free(vs); free(o); free(o2); free(ref);
}

/* The kernel a programmatic dependent decode (lz_decode_params.pdl) follows: it lets the
 * decode be scheduled at once, waits about 30 us, then writes the query and the last block of
 * every (b, h) (n_last rows at k_row[i] / v_row[i]); the decode must read them only after it. */
__global__ void pdl_producer(lz_bf16 *q, const lz_bf16 *q_true, size_t nq, lz_bf16 *kp, lz_bf16 *vp, const lz_bf16 *kp_true,
                             const lz_bf16 *vp_true, const uint64_t *k_row, const uint64_t *v_row, const int *n_last,
                             int n, int d)
{
    lz::pdl_trigger();
    const long long t0 = clock64();
    while (clock64() - t0 < 60000) __nanosleep(1000);
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < nq; e += (size_t)gridDim.x * blockDim.x)
        q[e] = q_true[e];
    for (int i = blockIdx.x; i < n; i += gridDim.x)
        for (int e = threadIdx.x; e < n_last[i] * d; e += blockDim.x) {
            kp[k_row[i] * d + e] = kp_true[k_row[i] * d + e];
            vp[v_row[i] * d + e] = vp_true[v_row[i] * d + e];
        }
}

/* One decode case: B sequences, each S random segments + own keys at offset 0
 * in one pool; GPU lazy vs CPU lazy ref; GPU non-lazy on a materialised pool.
 * vsep: values at rows of their own (p.v_rows; segments in reverse order).
 * pdl: the lazy call launched as a programmatic dependent of pdl_producer, its
 * query and each (b, h)'s last block NaN until that kernel writes them. */
static void decode_case(int layout, int d, int G, int KV, int B, int S_max, int n_split, int llama3, int64_t base,
                        int vsep = 0, int pdl = 0)
{
    const int H = KV * G, NB = 20 * 65 + 8;
    float inv[64];
    inv_freqs(inv, d, llama3);
    float *d_inv = dup(inv, d / 2);
    /* plan rows */
    size_t rows = 0;
    int *S = (int *)malloc(B * sizeof(int)), (*cap)[21] = (int(*)[21])malloc(B * sizeof *cap);
    for (int b = 0; b < B; b++) {
        S[b] = 1 + (int)(urand() * S_max);
        for (int s = 0; s <= S[b]; s++) {
            cap[b][s] = s == S[b] ? 1 + (int)(urand() * 300) : log_uniform_len();
            rows += (size_t)KV * cap[b][s];
        }
    }
    lz_bf16 *kp = (lz_bf16 *)malloc(rows * d * 2), *vp = (lz_bf16 *)malloc(rows * d * 2);
    fill(kp, rows * d); fill(vp, rows * d);
    lz_bf16 *d_kp = dup(kp, rows * d), *d_vp = dup(vp, rows * d), *d_kpr = dalloc<lz_bf16>(rows * d);
    CK(cudaMemcpy(d_kpr, d_kp, rows * d * 2, cudaMemcpyDeviceToDevice));
    uint64_t *w = (uint64_t *)calloc((size_t)B * KV * NB, 8), *wr = (uint64_t *)calloc((size_t)B * KV * NB, 8);
    int32_t *nb = (int32_t *)calloc((size_t)B * KV, 4), *nbr = (int32_t *)calloc((size_t)B * KV, 4);
    uint64_t *vr = vsep ? (uint64_t *)calloc((size_t)B * KV * NB, 8) : NULL;
    uint64_t *vrr = vsep ? (uint64_t *)calloc((size_t)B * KV * NB, 8) : NULL;
    size_t r = 0;
    int64_t total = 0;
    for (int b = 0; b < B; b++) {
        int64_t pos = base + (int64_t)(urand() * 50000);
        for (int s = 0; s <= S[b]; s++) {
            int c = cap[b][s];
            int64_t off = s == S[b] ? 0 : pos;
            if (off) { /* materialise this segment's rows for the twin */
                lz_rerotate_params rp = {d_kpr + r * d, d_kp + r * d, d_inv, (int64_t)KV * c, off, d, layout};
                RC(lz_rerotate(&rp, NULL));
            }
            for (int h = 0; h < KV; h++) {
                int l = (s < S[b] && urand() < 0.15) ? 0 : (h == s % KV ? c : 1 + (int)(urand() * c));
                total += l;
                uint64_t row = r + (size_t)h * c, vrow = vsep ? rows - r - (size_t)KV * c + (size_t)h * c : row;
                const size_t at = ((size_t)b * KV + h) * NB;
                RC(lz_decode_add_segment_kv(w + at, vr ? vr + at : NULL, &nb[b * KV + h], NB, row, vrow, l, off));
                RC(lz_decode_add_segment_kv(wr + at, vrr ? vrr + at : NULL, &nbr[b * KV + h], NB, row, vrow, l, 0));
            }
            r += (size_t)KV * c;
            pos += c + (int64_t)(urand() * 2000);
        }
    }
    size_t nq = (size_t)B * H * d;
    lz_bf16 *q = (lz_bf16 *)malloc(nq * 2);
    fill(q, nq);
    lz_bf16 *d_q = dup(q, nq), *d_o = dalloc<lz_bf16>(nq), *d_o2 = dalloc<lz_bf16>(nq);
    uint64_t *d_w = dup(w, (size_t)B * KV * NB), *d_wr = dup(wr, (size_t)B * KV * NB);
    int32_t *d_nb = dup(nb, (size_t)B * KV), *d_nbr = dup(nbr, (size_t)B * KV);
    uint64_t *d_vr = vr ? dup(vr, (size_t)B * KV * NB) : NULL, *d_vrr = vrr ? dup(vrr, (size_t)B * KV * NB) : NULL;
    lz_decode_params p;
    memset(&p, 0, sizeof p);
    p.o = d_o; p.q = d_q; p.k_pool = d_kp; p.v_pool = d_vp; p.blocks = d_w; p.n_blocks = d_nb;
    p.inv_freq = d_inv; p.max_blocks = NB; p.batch = B; p.n_heads = H; p.n_kv_heads = KV;
    p.head_dim = d; p.rope_layout = layout; p.scale = 1.0f / sqrtf((float)d); p.n_split = n_split;
    p.v_rows = d_vr;
    int dev, n_sm;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    int ns = lz_decode_splits(&p, n_sm);
    p.work_bytes = lz_decode_workspace(&p, ns);
    p.work = p.work_bytes ? dalloc<float>(p.work_bytes / 4) : NULL;
    if (p.work) CK(cudaMemset(p.work, 0, p.work_bytes)); /* counters start at zero */
    poison(d_o, nq);
    if (!pdl) {
        RC(lz_decode_lazy(&p, NULL));
    } else { /* the query and each (b, h)'s last block arrive late, written by the kernel before */
        std::vector<uint64_t> krow, vrow;
        std::vector<int> nlast;
        for (int i = 0; i < B * KV; i++) {
            if (nb[i] == 0) continue;
            const uint64_t wl = w[(size_t)i * NB + nb[i] - 1];
            krow.push_back(lz_decode_word_row(wl));
            vrow.push_back(vr ? vr[(size_t)i * NB + nb[i] - 1] : lz_decode_word_row(wl));
            nlast.push_back(lz_decode_word_keys(wl));
        }
        const int n = (int)krow.size();
        lz_bf16 *d_kt = dup(kp, rows * d), *d_vt = dup(vp, rows * d), *d_qt = dup(q, nq);
        uint64_t *d_krow = dup(krow.data(), (size_t)n), *d_vrow = dup(vrow.data(), (size_t)n);
        int *d_nlast = dup(nlast.data(), (size_t)n);
        poison((lz_bf16 *)d_q, nq);
        for (int i = 0; i < n; i++) {
            poison(d_kp + krow[i] * d, (size_t)nlast[i] * d);
            poison(d_vp + vrow[i] * d, (size_t)nlast[i] * d);
        }
        cudaStream_t st;
        CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        CK(cudaDeviceSynchronize());
        pdl_producer<<<32, 256, 0, st>>>(d_q, d_qt, nq, d_kp, d_vp, d_kt, d_vt, d_krow, d_vrow, d_nlast, n, d);
        lz_decode_params pp = p;
        pp.pdl = 1;
        RC(lz_decode_lazy(&pp, st));
        CK(cudaStreamSynchronize(st));
        CK(cudaStreamDestroy(st));
        CK(cudaFree(d_kt)); CK(cudaFree(d_vt)); CK(cudaFree(d_qt));
        CK(cudaFree(d_krow)); CK(cudaFree(d_vrow)); CK(cudaFree(d_nlast));
    }
    lz_decode_params p2 = p;
    p2.o = d_o2; p2.k_pool = d_kpr; p2.blocks = d_wr; p2.n_blocks = d_nbr; p2.v_rows = d_vrr;
    poison(d_o2, nq);
    RC(lz_decode(&p2, NULL));
    lz_bf16 *o = fetch(d_o, nq), *o2 = fetch(d_o2, nq), *ref = (lz_bf16 *)malloc(nq * 2);
    lz_decode_params hp = p;
    hp.o = ref; hp.q = q; hp.k_pool = kp; hp.v_pool = vp; hp.blocks = w; hp.n_blocks = nb; hp.inv_freq = inv;
    hp.v_rows = vr;
    RC(lz_decode_lazy_ref(&hp, NULL));
    int nan1, nan2;
    double e1 = nerr(o, ref, nq, &nan1), e2 = nerr(o2, o, nq, &nan2);
    printf("decode  %-8s d=%3d G=%d KV=%d B=%2d split=%2d keys=%7lld base=%7lld%s%s: gpu-vs-ref %.2e, "
           "lazy-vs-materialised %.2e, nan/unwritten %d/%d\n",
           LNAME[layout], d, G, KV, B, ns, (long long)total, (long long)base, vsep ? " v_rows" : "",
           pdl ? " pdl" : "", e1, e2, nan1, nan2);
    CHECK(e1 <= TOL && nan1 == 0, "decode gpu vs ref %g nan %d", e1, nan1);
    CHECK(e2 <= TOL && nan2 == 0, "decode lazy vs materialised %g nan %d", e2, nan2);
    CK(cudaFree(d_inv)); CK(cudaFree(d_kp)); CK(cudaFree(d_vp)); CK(cudaFree(d_kpr)); CK(cudaFree(d_q));
    CK(cudaFree(d_o)); CK(cudaFree(d_o2)); CK(cudaFree(d_w)); CK(cudaFree(d_wr)); CK(cudaFree(d_nb)); CK(cudaFree(d_nbr));
    if (p.work) CK(cudaFree(p.work));
    if (d_vr) { CK(cudaFree(d_vr)); CK(cudaFree(d_vrr)); }
    free(vr); free(vrr);
    free(S); free(cap); free(kp); free(vp); free(w); free(wr); free(nb); free(nbr); free(q); free(o); free(o2); free(ref);
}

/* ---- fp8 (e4m3) documents: kernels/lz_decode_fp8.cu, the F8 prefill kernels, fp8 lz_rerotate ---- */

/* Lazy over fp8 documents at their offsets == the non-lazy twin over the fp8
 * re-rotated copies (scale x sqrt(2)) within this relative output error: the
 * copies' keys carry one more e4m3 rounding (up to 2^-4 relative an element);
 * tests/test_fp8_attn.c measures the references' worst case at about 2% with
 * these inputs (keys up to 2), this adds the kernels' own rounding. */
static const double FP8_LAZY_BLOCK = 5e-2;

static float amp_key(void) { static const float a[] = {0.05f, 0.5f, 1.0f, 2.0f}; return a[(int)(urand() * 4)]; }
static float amp_value(void) { static const float a[] = {0.01f, 0.3f, 1.0f, 3.0f}; return a[(int)(urand() * 4)]; }
/* n e4m3 bytes of random values up to amp, with the payload's scale absmax / 448 (returned) */
static float quant_rand(uint8_t *dst, size_t n, float amp)
{
    float *x = (float *)malloc(n * sizeof(float) + 4), mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmaxf(mx, fabsf(x[i] = amp * (float)(2.0 * urand() - 1.0)));
    const float sc = mx > 0 ? mx / LZ_E4M3_MAX : 1.0f;
    for (size_t i = 0; i < n; i++) dst[i] = lz_f32_to_e4m3(x[i] / sc);
    free(x);
    return sc;
}
/* GPU vs CPU re-rotation of n fp8 rows: the CUDA kernel may round a value to the
 * neighbouring e4m3 code where fp32 cos/sin differ in the last bit; more is an error */
static void check_rerotate8(const uint8_t *d_src, const uint8_t *h_src, int64_t n, int64_t off, int d, int layout,
                            const float *d_inv, const float *inv)
{
    const size_t nb = (size_t)n * d;
    uint8_t *d_dst = dalloc<uint8_t>(nb), *want = (uint8_t *)malloc(nb + 1), *got = (uint8_t *)malloc(nb + 1);
    float sc = 0.37f, *d_sc = dup(&sc, 1), *d_sco = dalloc<float>(1), sco = 0;
    lz_rerotate_params rp;
    memset(&rp, 0, sizeof rp);
    rp.inv_freq = d_inv; rp.n_rows = n; rp.offset = off; rp.head_dim = d; rp.rope_layout = layout;
    rp.src8 = d_src; rp.dst8 = d_dst; rp.scale8_in = d_sc; rp.scale8_out = d_sco; rp.n_scales = 1;
    RC(lz_rerotate(&rp, NULL));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got, d_dst, nb, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&sco, d_sco, 4, cudaMemcpyDeviceToHost));
    lz_rerotate_params hp = rp;
    hp.inv_freq = inv; hp.src8 = h_src; hp.dst8 = want; hp.n_scales = 0;
    RC(lz_rerotate_ref(&hp, NULL));
    size_t far = 0, near = 0;
    for (size_t i = 0; i < nb; i++) {
        if (got[i] == want[i]) continue;
        /* neighbouring codes: same sign, magnitudes one apart (0x00 / 0x80 both zero) */
        const int a = got[i] & 0x7f, b = want[i] & 0x7f;
        const bool nb1 = ((got[i] ^ want[i]) & 0x80) == 0 ? abs(a - b) == 1 : (a + b <= 1);
        if (nb1) near++;
        else far++;
    }
    CHECK(far == 0 && near * 1000 <= nb, "fp8 rerotate gpu vs cpu: %zu codes far off, %zu neighbours of %zu", far, near, nb);
    CHECK(sco == 0.37f * LZ_REROTATE_FP8_GROWTH, "fp8 rerotate scale %g", sco);
    CK(cudaFree(d_dst)); CK(cudaFree(d_sc)); CK(cudaFree(d_sco));
    free(want); free(got);
}

/* One fp8 decode case: B sequences, each S documents (fp8; mode 2: each fp8 or
 * bf16 at random) + own keys (bf16, offset 0) in two pools (bf16 rows, e4m3
 * rows), Ada-KV lengths per head, a key and a value scale per (document, kv
 * head). GPU lazy vs CPU lazy ref; GPU twin over the copies re-rotated by the
 * GPU (fp8: lz_rerotate's e4m3 mode, scale x sqrt(2)) vs CPU twin ref on the
 * same copies; lazy vs twin (FP8_LAZY_BLOCK); GPU vs CPU fp8 re-rotation. */
static void decode_case_fp8(int layout, int d, int G, int KV, int B, int S_max, int n_split, int llama3, int64_t base,
                            int vsep, int mode)
{
    const int H = KV * G, NB = 20 * 65 + 8;
    float inv[64];
    inv_freqs(inv, d, llama3);
    float *d_inv = dup(inv, d / 2);
    int *S = (int *)malloc(B * sizeof(int)), (*cap)[21] = (int(*)[21])malloc(B * sizeof *cap);
    int (*f8)[21] = (int(*)[21])malloc(B * sizeof *f8);
    size_t rows = 0, rows8 = 0;
    for (int b = 0; b < B; b++) {
        S[b] = 1 + (int)(urand() * S_max);
        for (int s = 0; s <= S[b]; s++) {
            cap[b][s] = s == S[b] ? 1 + (int)(urand() * 300) : log_uniform_len();
            f8[b][s] = s < S[b] && (mode == 1 || urand() < 0.5);
            (f8[b][s] ? rows8 : rows) += (size_t)KV * cap[b][s];
        }
    }
    lz_bf16 *kp = (lz_bf16 *)malloc(rows * d * 2 + 2), *vp = (lz_bf16 *)malloc(rows * d * 2 + 2);
    fill(kp, rows * d); fill(vp, rows * d);
    uint8_t *kp8 = (uint8_t *)calloc(rows8 * d + 1, 1), *vp8 = (uint8_t *)calloc(rows8 * d + 1, 1);
    const size_t nw = (size_t)B * KV * NB;
    uint64_t *w = (uint64_t *)calloc(nw, 8), *wr = (uint64_t *)calloc(nw, 8);
    uint64_t *vr = vsep ? (uint64_t *)calloc(nw, 8) : NULL;
    float *ks = (float *)calloc(nw, 4), *vs = (float *)calloc(nw, 4), *ksr = (float *)calloc(nw, 4);
    int32_t *nb = (int32_t *)calloc((size_t)B * KV, 4), *nbr = (int32_t *)calloc((size_t)B * KV, 4);
    /* segments' rows and scales first (host), then the device copies and their re-rotation */
    struct Seg { size_t r; int f8, c; int64_t off; };
    std::vector<Seg> segs;
    size_t r = 0, r8 = 0;
    int64_t total = 0, total8 = 0;
    for (int b = 0; b < B; b++) {
        int64_t pos = base + (int64_t)(urand() * 50000);
        for (int s = 0; s <= S[b]; s++) {
            const int c = cap[b][s];
            const int64_t off = s == S[b] ? 0 : pos;
            const size_t r_at = f8[b][s] ? r8 : r, n_all = f8[b][s] ? rows8 : rows;
            segs.push_back({r_at, f8[b][s], c, off});
            for (int h = 0; h < KV; h++) {
                int l = (s < S[b] && urand() < 0.15) ? 0 : (h == s % KV ? c : 1 + (int)(urand() * c));
                total += l;
                uint64_t row = r_at + (size_t)h * c, vrow = vsep ? n_all - r_at - (size_t)KV * c + (size_t)h * c : row;
                const size_t at = ((size_t)b * KV + h) * NB;
                if (f8[b][s]) {
                    total8 += l;
                    const float sk = quant_rand(kp8 + row * d, (size_t)l * d, amp_key());
                    const float sv = quant_rand(vp8 + vrow * d, (size_t)l * d, amp_value());
                    RC(lz_decode_add_segment_fp8(w + at, vr ? vr + at : NULL, ks + at, vs + at, &nb[b * KV + h], NB, row,
                                                 vrow, l, off, sk, sv));
                    RC(lz_decode_add_segment_fp8(wr + at, vr ? vr + at : NULL, ksr + at, vs + at, &nbr[b * KV + h], NB, row,
                                                 vrow, l, 0, sk * LZ_REROTATE_FP8_GROWTH, sv));
                } else {
                    RC(lz_decode_add_segment_kv(w + at, vr ? vr + at : NULL, &nb[b * KV + h], NB, row, vrow, l, off));
                    RC(lz_decode_add_segment_kv(wr + at, vr ? vr + at : NULL, &nbr[b * KV + h], NB, row, vrow, l, 0));
                }
            }
            (f8[b][s] ? r8 : r) += (size_t)KV * c;
            pos += c + (int64_t)(urand() * 2000);
        }
    }
    lz_bf16 *d_kp = dup(kp, rows * d + 1), *d_vp = dup(vp, rows * d + 1), *d_kpr = dalloc<lz_bf16>(rows * d + 1);
    uint8_t *d_kp8 = dup(kp8, rows8 * d + 1), *d_vp8 = dup(vp8, rows8 * d + 1), *d_kp8r = dalloc<uint8_t>(rows8 * d + 1);
    CK(cudaMemcpy(d_kpr, d_kp, rows * d * 2, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(d_kp8r, d_kp8, rows8 * d, cudaMemcpyDeviceToDevice));
    bool checked8 = false;
    for (const Seg &sg : segs) {
        if (!sg.off) continue;
        lz_rerotate_params rp;
        memset(&rp, 0, sizeof rp);
        rp.inv_freq = d_inv; rp.n_rows = (int64_t)KV * sg.c; rp.offset = sg.off; rp.head_dim = d; rp.rope_layout = layout;
        if (sg.f8) {
            rp.src8 = d_kp8 + sg.r * d; rp.dst8 = d_kp8r + sg.r * d;
            if (!checked8) check_rerotate8(d_kp8 + sg.r * d, kp8 + sg.r * d, (int64_t)KV * sg.c, sg.off, d, layout, d_inv, inv);
            checked8 = true;
        } else {
            rp.src = d_kp + sg.r * d; rp.dst = d_kpr + sg.r * d;
        }
        RC(lz_rerotate(&rp, NULL));
    }
    size_t nq = (size_t)B * H * d;
    lz_bf16 *q = (lz_bf16 *)malloc(nq * 2);
    fill(q, nq);
    lz_bf16 *d_q = dup(q, nq), *d_o = dalloc<lz_bf16>(nq), *d_o2 = dalloc<lz_bf16>(nq);
    uint64_t *d_w = dup(w, nw), *d_wr = dup(wr, nw), *d_vr = vr ? dup(vr, nw) : NULL;
    float *d_ks = dup(ks, nw), *d_vs = dup(vs, nw), *d_ksr = dup(ksr, nw);
    int32_t *d_nb = dup(nb, (size_t)B * KV), *d_nbr = dup(nbr, (size_t)B * KV);
    lz_decode_params p;
    memset(&p, 0, sizeof p);
    p.o = d_o; p.q = d_q; p.k_pool = d_kp; p.v_pool = d_vp; p.blocks = d_w; p.n_blocks = d_nb; p.v_rows = d_vr;
    p.inv_freq = d_inv; p.max_blocks = NB; p.batch = B; p.n_heads = H; p.n_kv_heads = KV;
    p.head_dim = d; p.rope_layout = layout; p.scale = 1.0f / sqrtf((float)d); p.n_split = n_split;
    p.k_pool8 = d_kp8; p.v_pool8 = d_vp8; p.k_scales = d_ks; p.v_scales = d_vs;
    int dev, n_sm;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    int ns = lz_decode_splits(&p, n_sm);
    p.work_bytes = lz_decode_workspace(&p, ns);
    p.work = p.work_bytes ? dalloc<float>(p.work_bytes / 4) : NULL;
    if (p.work) CK(cudaMemset(p.work, 0, p.work_bytes));
    poison(d_o, nq);
    RC(lz_decode_lazy(&p, NULL));
    lz_decode_params p2 = p;
    p2.o = d_o2; p2.k_pool = d_kpr; p2.k_pool8 = d_kp8r; p2.blocks = d_wr; p2.n_blocks = d_nbr; p2.k_scales = d_ksr;
    poison(d_o2, nq);
    RC(lz_decode(&p2, NULL));
    lz_bf16 *o = fetch(d_o, nq), *o2 = fetch(d_o2, nq), *ref = (lz_bf16 *)malloc(nq * 2), *ref2 = (lz_bf16 *)malloc(nq * 2);
    lz_bf16 *kpr = fetch(d_kpr, rows * d + 1);
    uint8_t *kp8r = (uint8_t *)malloc(rows8 * d + 1);
    CK(cudaMemcpy(kp8r, d_kp8r, rows8 * d + 1, cudaMemcpyDeviceToHost));
    lz_decode_params hp = p;
    hp.o = ref; hp.q = q; hp.k_pool = kp; hp.v_pool = vp; hp.blocks = w; hp.n_blocks = nb; hp.inv_freq = inv;
    hp.v_rows = vr; hp.k_pool8 = kp8; hp.v_pool8 = vp8; hp.k_scales = ks; hp.v_scales = vs;
    RC(lz_decode_lazy_ref(&hp, NULL));
    lz_decode_params hp2 = hp;
    hp2.o = ref2; hp2.k_pool = kpr; hp2.k_pool8 = kp8r; hp2.blocks = wr; hp2.n_blocks = nbr; hp2.k_scales = ksr;
    RC(lz_decode_ref(&hp2, NULL));
    int nan1, nan2, nan3;
    double e1 = nerr(o, ref, nq, &nan1), e2 = nerr(o2, ref2, nq, &nan2), e3 = nerr(o2, o, nq, &nan3);
    printf("decode8 %-8s d=%3d G=%d KV=%d B=%2d split=%2d keys=%7lld (fp8 %7lld) base=%7lld%s: gpu-vs-ref lazy %.2e "
           "twin %.2e, lazy-vs-block %.2e, nan/unwritten %d/%d\n",
           LNAME[layout], d, G, KV, B, ns, (long long)total, (long long)total8, (long long)base, vsep ? " v_rows" : "",
           e1, e2, e3, nan1, nan2);
    CHECK(e1 <= TOL && nan1 == 0, "fp8 decode lazy gpu vs ref %g nan %d", e1, nan1);
    CHECK(e2 <= TOL && nan2 == 0, "fp8 decode twin gpu vs ref %g nan %d", e2, nan2);
    CHECK(e3 <= FP8_LAZY_BLOCK, "fp8 decode lazy vs block %g", e3);
    CK(cudaFree(d_inv)); CK(cudaFree(d_kp)); CK(cudaFree(d_vp)); CK(cudaFree(d_kpr)); CK(cudaFree(d_kp8));
    CK(cudaFree(d_vp8)); CK(cudaFree(d_kp8r)); CK(cudaFree(d_q)); CK(cudaFree(d_o)); CK(cudaFree(d_o2));
    CK(cudaFree(d_w)); CK(cudaFree(d_wr)); CK(cudaFree(d_ks)); CK(cudaFree(d_vs)); CK(cudaFree(d_ksr));
    CK(cudaFree(d_nb)); CK(cudaFree(d_nbr));
    if (d_vr) CK(cudaFree(d_vr));
    if (p.work) CK(cudaFree(p.work));
    free(S); free(cap); free(f8); free(kp); free(vp); free(kp8); free(vp8); free(w); free(wr); free(vr);
    free(ks); free(vs); free(ksr); free(nb); free(nbr); free(q); free(o); free(o2); free(ref); free(ref2);
    free(kpr); free(kp8r);
}

/* an fp8 segment's descriptor */
static lz_attn_segment seg8(const uint8_t *k8, const uint8_t *v8, const float *ks, const float *vs, int64_t off, int64_t cap)
{
    lz_attn_segment g;
    memset(&g, 0, sizeof g);
    g.k8 = k8; g.v8 = v8; g.k_scale = ks; g.v_scale = vs; g.offset = off; g.cap = cap;
    return g;
}

/* One fp8 prefill case: S segments (fp8; mode 2: each fp8 or bf16 at random),
 * Ada-KV lengths, own keys bf16, the kernel shape asked for (rpw, bm, wgmma).
 * GPU lazy vs CPU lazy ref; GPU twin over the GPU re-rotated copies vs CPU
 * twin ref on them; lazy vs twin (FP8_LAZY_BLOCK). */
static void prefill_case_fp8(int layout, int d, int G, int KV, int S, int M, int n_split, int llama3, int rpw, int bm,
                             int wgmma, int mode)
{
    const int H = KV * G;
    float inv[64];
    inv_freqs(inv, d, llama3);
    float *d_inv = dup(inv, d / 2);
    lz_attn_segment *segs = (lz_attn_segment *)calloc(S + 1, sizeof *segs), *rsegs = (lz_attn_segment *)calloc(S + 1, sizeof *rsegs);
    lz_attn_segment *hsegs = (lz_attn_segment *)calloc(S + 1, sizeof *hsegs), *hrsegs = (lz_attn_segment *)calloc(S + 1, sizeof *hrsegs);
    int32_t *len = (int32_t *)calloc((size_t)S * KV + 1, 4);
    std::vector<void *> hfree, dfree;
    int64_t pos = (int64_t)(urand() * 100000), seg_keys = 0;
    int n8 = 0;
    for (int s = 0; s < S; s++) {
        const int cap = log_uniform_len(), f8 = mode == 1 || urand() < 0.5;
        for (int h = 0; h < KV; h++) len[s * KV + h] = urand() < 0.15 ? 0 : 1 + (int)(urand() * cap);
        len[s * KV + (s % KV)] = cap;
        seg_keys += cap;
        const size_t n = (size_t)KV * cap * d;
        lz_rerotate_params rp;
        memset(&rp, 0, sizeof rp);
        rp.inv_freq = d_inv; rp.n_rows = (int64_t)KV * cap; rp.offset = pos; rp.head_dim = d; rp.rope_layout = layout;
        if (f8) {
            n8++;
            uint8_t *k8 = (uint8_t *)calloc(n + 1, 1), *v8 = (uint8_t *)calloc(n + 1, 1), *k8r = (uint8_t *)malloc(n + 1);
            float *ksc = (float *)malloc(KV * 4), *vsc = (float *)malloc(KV * 4), *kscr = (float *)malloc(KV * 4);
            for (int h = 0; h < KV; h++) {
                ksc[h] = quant_rand(k8 + (size_t)h * cap * d, (size_t)len[s * KV + h] * d, amp_key());
                vsc[h] = quant_rand(v8 + (size_t)h * cap * d, (size_t)len[s * KV + h] * d, amp_value());
            }
            uint8_t *dk = dup(k8, n + 1), *dv = dup(v8, n + 1), *dkr = dalloc<uint8_t>(n + 1);
            float *dks = dup(ksc, KV), *dvs = dup(vsc, KV), *dksr = dalloc<float>(KV);
            rp.src8 = dk; rp.dst8 = dkr; rp.scale8_in = dks; rp.scale8_out = dksr; rp.n_scales = KV;
            RC(lz_rerotate(&rp, NULL));
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(k8r, dkr, n + 1, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(kscr, dksr, KV * 4, cudaMemcpyDeviceToHost));
            if (n8 == 1) check_rerotate8(dk, k8, (int64_t)KV * cap, pos, d, layout, d_inv, inv);
            segs[s] = seg8(dk, dv, dks, dvs, pos, cap);
            rsegs[s] = seg8(dkr, dv, dksr, dvs, 0, cap);
            hsegs[s] = seg8(k8, v8, ksc, vsc, pos, cap);
            hrsegs[s] = seg8(k8r, v8, kscr, vsc, 0, cap);
            for (void *x : {(void *)k8, (void *)v8, (void *)k8r, (void *)ksc, (void *)vsc, (void *)kscr}) hfree.push_back(x);
            for (void *x : {(void *)dk, (void *)dv, (void *)dkr, (void *)dks, (void *)dvs, (void *)dksr}) dfree.push_back(x);
        } else {
            lz_bf16 *hk = (lz_bf16 *)malloc(n * 2), *hv = (lz_bf16 *)malloc(n * 2);
            fill(hk, n); fill(hv, n);
            lz_bf16 *dk = dup(hk, n), *dv = dup(hv, n), *dkr = dalloc<lz_bf16>(n);
            rp.src = dk; rp.dst = dkr;
            RC(lz_rerotate(&rp, NULL));
            lz_bf16 *hkr = fetch(dkr, n);
            segs[s] = (lz_attn_segment){dk, dv, pos, cap};
            rsegs[s] = (lz_attn_segment){dkr, dv, 0, cap};
            hsegs[s] = (lz_attn_segment){hk, hv, pos, cap};
            hrsegs[s] = (lz_attn_segment){hkr, hv, 0, cap};
            for (void *x : {(void *)hk, (void *)hv, (void *)hkr}) hfree.push_back(x);
            for (void *x : {(void *)dk, (void *)dv, (void *)dkr}) dfree.push_back(x);
        }
        pos += cap + (int64_t)(urand() * 3000);
    }
    size_t nq = (size_t)H * M * d, nk = (size_t)KV * M * d;
    lz_bf16 *q = (lz_bf16 *)malloc(nq * 2), *ks = (lz_bf16 *)malloc(nk * 2), *vs = (lz_bf16 *)malloc(nk * 2);
    fill(q, nq); fill(ks, nk); fill(vs, nk);
    int64_t self_off = urand() < 0.25 ? 0 : pos;
    lz_bf16 *d_q = dup(q, nq), *d_ks = dup(ks, nk), *d_vs = dup(vs, nk), *d_ksr = dalloc<lz_bf16>(nk);
    lz_rerotate_params rp = {d_ksr, d_ks, d_inv, (int64_t)KV * M, self_off, d, layout};
    RC(lz_rerotate(&rp, NULL));
    lz_bf16 *ksr = fetch(d_ksr, nk);
    lz_attn_segment *d_segs = dup(segs, S + 1), *d_rsegs = dup(rsegs, S + 1);
    int32_t *d_len = dup(len, (size_t)S * KV + 1);
    lz_bf16 *d_o = dalloc<lz_bf16>(nq), *d_o2 = dalloc<lz_bf16>(nq);
    lz_prefill_params p;
    memset(&p, 0, sizeof p);
    p.o = d_o; p.q = d_q; p.k_self = d_ks; p.v_self = d_vs; p.self_offset = self_off;
    p.segs = d_segs; p.seg_len = d_len; p.inv_freq = d_inv; p.seg_keys = seg_keys; p.n_seg = S;
    p.n_rows = M; p.n_heads = H; p.n_kv_heads = KV; p.head_dim = d; p.rope_layout = layout;
    p.scale = 1.0f / sqrtf((float)d); p.n_split = n_split; p.rows_per_warp = rpw; p.rows_per_cta = bm; p.wgmma = wgmma;
    p.seg_fp8 = 1;
    int dev, n_sm;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    float *d_cs = NULL;
    if (urand() < 0.5) { /* half the cases hand the kernel the cos/sin table */
        int64_t *offs = (int64_t *)malloc((size_t)(S + 1) * 8);
        float *cs = (float *)malloc((size_t)(S + 1) * d * 4);
        for (int s2 = 0; s2 < S; s2++) offs[s2] = segs[s2].offset;
        lz_prefill_rope_table(cs, offs, S, self_off, inv, d);
        d_cs = dup(cs, (size_t)(S + 1) * d);
        p.rope_cs = d_cs;
        free(offs); free(cs);
    }
    int ns, used_bm, used_rpw, used_wg;
    lz_prefill_plan(&p, n_sm, &used_bm, &used_rpw, &ns, &used_wg);
    p.work_bytes = lz_prefill_workspace(&p, ns);
    p.work = p.work_bytes ? dalloc<float>(p.work_bytes / 4) : NULL;
    poison(d_o, nq);
    RC(lz_prefill_lazy(&p, NULL));
    lz_prefill_params p2 = p;
    p2.o = d_o2; p2.segs = d_rsegs; p2.k_self = d_ksr; p2.self_offset = 0;
    poison(d_o2, nq);
    RC(lz_prefill(&p2, NULL));
    lz_bf16 *o = fetch(d_o, nq), *o2 = fetch(d_o2, nq), *ref = (lz_bf16 *)malloc(nq * 2), *ref2 = (lz_bf16 *)malloc(nq * 2);
    lz_prefill_params hp = p;
    hp.o = ref; hp.q = q; hp.k_self = ks; hp.v_self = vs; hp.segs = hsegs; hp.seg_len = len; hp.inv_freq = inv;
    RC(lz_prefill_lazy_ref(&hp, NULL));
    lz_prefill_params hp2 = hp;
    hp2.o = ref2; hp2.segs = hrsegs; hp2.k_self = ksr; hp2.self_offset = 0;
    RC(lz_prefill_ref(&hp2, NULL));
    int nan1, nan2, nan3;
    double e1 = nerr(o, ref, nq, &nan1), e2 = nerr(o2, ref2, nq, &nan2), e3 = nerr(o2, o, nq, &nan3);
    printf("prefill8 %-8s d=%3d G=%d KV=%d S=%3d (fp8 %3d) M=%3d split=%2d rows/cta=%3d rows/warp=%2d %s %s keys=%6lld: "
           "gpu-vs-ref lazy %.2e twin %.2e, lazy-vs-block %.2e, nan/unwritten %d/%d\n",
           LNAME[layout], d, G, KV, S, n8, M, ns, used_bm, used_rpw, used_wg ? "wgmma" : "mma  ",
           d_cs ? "cs-table" : "cs-own  ", (long long)seg_keys, e1, e2, e3, nan1, nan2);
    CHECK(e1 <= TOL && nan1 == 0, "fp8 prefill lazy gpu vs ref %g nan %d", e1, nan1);
    CHECK(e2 <= TOL && nan2 == 0, "fp8 prefill twin gpu vs ref %g nan %d", e2, nan2);
    CHECK(e3 <= FP8_LAZY_BLOCK, "fp8 prefill lazy vs block %g", e3);
    for (void *x : dfree) CK(cudaFree(x));
    for (void *x : hfree) free(x);
    CK(cudaFree(d_inv)); CK(cudaFree(d_q)); CK(cudaFree(d_ks)); CK(cudaFree(d_vs)); CK(cudaFree(d_ksr));
    CK(cudaFree(d_segs)); CK(cudaFree(d_rsegs)); CK(cudaFree(d_len)); CK(cudaFree(d_o)); CK(cudaFree(d_o2));
    if (p.work) CK(cudaFree(p.work));
    if (d_cs) CK(cudaFree(d_cs));
    free(segs); free(rsegs); free(hsegs); free(hrsegs); free(len);
    free(q); free(ks); free(vs); free(ksr); free(o); free(o2); free(ref); free(ref2);
}

/* Arguments the CUDA entry points refuse before launching anything: a grid
 * past its y limit (more than 65,535 row tiles), a cos/sin table off 16 bytes
 * (the kernels bulk-copy it). No memory is touched: dummy device pointers. */
static void refusal_cases(void)
{
    float *d_inv = dalloc<float>(64);
    lz_prefill_params p;
    memset(&p, 0, sizeof p);
    lz_bf16 *dummy = (lz_bf16 *)d_inv;
    p.o = dummy; p.q = dummy; p.k_self = dummy; p.v_self = dummy; p.inv_freq = d_inv;
    p.n_heads = 32; p.n_kv_heads = 8; p.head_dim = 128; p.rope_layout = LZ_ROPE_HALF; p.scale = 0.088f;
    p.n_split = 1; p.rows_per_warp = 16; p.rows_per_cta = 64; p.wgmma = 2;
    p.n_rows = 65535 * 64 / 4 + 1; /* G = 4: 65,536 row tiles of 64 */
    CHECK(lz_prefill(&p, NULL) == LZ_ATTN_EARG, "65,536 row tiles refused (twin)");
    CHECK(lz_prefill_lazy(&p, NULL) == LZ_ATTN_EARG, "65,536 row tiles refused (lazy)");
    p.n_rows = 64;
    p.rope_cs = d_inv + 1;
    CHECK(lz_prefill_lazy(&p, NULL) == LZ_ATTN_EARG, "a cos/sin table off 16 bytes refused");
    /* decode with fp8 blocks: the scales and e4m3 pools come together */
    lz_decode_params dp;
    memset(&dp, 0, sizeof dp);
    dp.o = dummy; dp.q = dummy; dp.blocks = (const uint64_t *)d_inv; dp.n_blocks = (const int32_t *)d_inv;
    dp.inv_freq = d_inv; dp.batch = 1; dp.n_heads = 4; dp.n_kv_heads = 1; dp.head_dim = 128;
    dp.rope_layout = LZ_ROPE_HALF; dp.max_blocks = 1; dp.n_split = 1;
    dp.k_scales = d_inv; dp.k_pool8 = (const uint8_t *)d_inv; dp.v_pool8 = (const uint8_t *)d_inv;
    CHECK(lz_decode_lazy(&dp, NULL) == LZ_ATTN_EARG, "fp8 decode without v_scales refused (lazy)");
    CHECK(lz_decode(&dp, NULL) == LZ_ATTN_EARG, "fp8 decode without v_scales refused (twin)");
    printf("prefill refusals: 65,536 row tiles (twin, lazy), a cos/sin table off 16 bytes; fp8 decode without "
           "v_scales\n");
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    CK(cudaFree(d_inv));
}

} /* namespace kc_test */

/* kernels_test_group.cuh - the grouped decode's correctness body of
 * kernels_check (tests/cuda/kernels_check.cu, its test mode): a random batched
 * step (tests/decode_group_case.h: shared documents at per-row offsets, some
 * past 65,536, per-head lengths, values at rows of their own), its items from
 * lz_decode_group_plan; lz_decode_group on the GPU against
 * lz_decode_group_ref (CPU), and against lz_decode_lazy on the GPU over the
 * same block words (each row alone). Outputs poisoned with NaN first. Helpers
 * from kernels_test.cuh.
 */
#include "kernels/lz_decode_group.h"
#include "tests/decode_group_case.h"

namespace kc_test {

static void decode_group_case(int layout, int d, int G, int KV, int B, int ND, int chunk, int pdl, int fp8)
{
    dgc_case c;
    CHECK(dgc_make(&c, rng, B, KV, G, d, layout, ND, fp8) == 0, "case");
    const size_t nq = (size_t)B * c.H * d, NW = (size_t)B * KV * c.NB;
    std::vector<lz_decode_item> items(8192);
    int32_t n_parts[64];
    int P = 0, reads = 0, placed = 0;
    const int n = lz_decode_group_plan(c.rows, B, G, chunk, items.data(), (int)items.size(), n_parts, &P, &reads,
                                       &placed);
    CHECK(n > 0, "plan: %d", n);
    /* the seg_first tables on the device: the items point into a copy of the case's */
    const size_t segn = (size_t)B * c.L * KV * (DGC_S_MAX + 1);
    int32_t *d_segf = dup(c.segf, segn);
    std::vector<lz_decode_item> ditems(items.begin(), items.begin() + (n > 0 ? n : 0));
    for (lz_decode_item &it : ditems) it.seg_first = d_segf + (it.seg_first - c.segf);
    lz_decode_item *d_items = dup(ditems.data(), ditems.size());
    lz_bf16 *d_k = dup(c.k, c.R * d), *d_v = dup(c.v, c.R * d), *d_q = dup(c.q, nq);
    lz_bf16 *d_o = dalloc<lz_bf16>(nq), *d_o2 = dalloc<lz_bf16>(nq);
    float *d_inv = dup(c.inv_freq, (size_t)d / 2);
    uint64_t *d_w = dup(c.words, NW), *d_vr = dup(c.vrows, NW);
    int32_t *d_nb = dup(c.n_blocks, (size_t)B * KV), *d_np = dup(n_parts, (size_t)B);
    lz_decode_group_params gp;
    memset(&gp, 0, sizeof gp);
    gp.dec = dgc_params(&c, d_o);
    gp.dec.q = d_q; gp.dec.k_pool = d_k; gp.dec.v_pool = d_v; gp.dec.blocks = d_w; gp.dec.v_rows = d_vr;
    gp.dec.n_blocks = d_nb; gp.dec.inv_freq = d_inv; gp.dec.pdl = pdl;
    uint8_t *d_k8 = fp8 ? dup(c.k8, c.R * d) : NULL, *d_v8 = fp8 ? dup(c.v8, c.R * d) : NULL;
    float *d_ksc = fp8 ? dup(c.ksc, NW) : NULL, *d_vsc = fp8 ? dup(c.vsc, NW) : NULL;
    gp.dec.k_pool8 = d_k8; gp.dec.v_pool8 = d_v8; gp.dec.k_scales = d_ksc; gp.dec.v_scales = d_vsc;
    gp.items = d_items; gp.n_items = n; gp.layer = c.layer; gp.n_parts = d_np; gp.max_parts = P;
    gp.work_bytes = lz_decode_group_workspace(&gp);
    gp.work = dalloc<float>(gp.work_bytes / 4);
    poison(d_o, nq);
    RC(lz_decode_group(&gp, NULL));
    /* the per-row lazy kernel over the same words */
    lz_decode_params dp = gp.dec;
    dp.o = d_o2;
    dp.n_split = 1;
    dp.pdl = 0;
    poison(d_o2, nq);
    RC(lz_decode_lazy(&dp, NULL));
    lz_bf16 *o = fetch(d_o, nq), *o2 = fetch(d_o2, nq), *ref = (lz_bf16 *)malloc(nq * 2);
    lz_decode_group_params hp = dgc_group_params(&c, ref, items.data(), n, n_parts, P);
    RC(lz_decode_group_ref(&hp, NULL));
    int nan1, nan2;
    const double e1 = nerr(o, ref, nq, &nan1), e2 = nerr(o, o2, nq, &nan2);
    printf("decode-group %-8s d=%3d G=%d KV=%d B=%2d docs=%2d chunk=%2d items=%4d parts<=%2d reads %d of %d "
           "blocks%s%s: gpu-vs-ref %.2e, grouped-vs-per-row %.2e, nan %d/%d\n",
           LNAME[layout], d, G, KV, B, ND, chunk, n, P, reads, placed, pdl ? " pdl" : "", fp8 ? " fp8" : "", e1, e2,
           nan1, nan2);
    CHECK(e1 <= TOL && nan1 == 0, "grouped decode gpu vs ref %g nan %d", e1, nan1);
    CHECK(e2 <= TOL && nan2 == 0, "grouped decode vs lz_decode_lazy %g nan %d", e2, nan2);
    free(o); free(o2); free(ref); free(hp.work);
    CK(cudaFree(d_segf)); CK(cudaFree(d_items)); CK(cudaFree(d_k)); CK(cudaFree(d_v)); CK(cudaFree(d_q));
    CK(cudaFree(d_o)); CK(cudaFree(d_o2)); CK(cudaFree(d_inv)); CK(cudaFree(d_w)); CK(cudaFree(d_vr));
    CK(cudaFree(d_nb)); CK(cudaFree(d_np)); CK(cudaFree(gp.work));
    if (fp8) { CK(cudaFree(d_k8)); CK(cudaFree(d_v8)); CK(cudaFree(d_ksc)); CK(cudaFree(d_vsc)); }
    dgc_free(&c);
}

} /* namespace kc_test */

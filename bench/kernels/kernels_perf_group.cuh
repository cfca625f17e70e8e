/* kernels_perf_group.cuh - the grouped decode's performance body of
 * kernels_check (its perf mode; helpers from kernels_perf.cuh): a batched
 * decode step's attention on the paper's serving setup (a pool of documents
 * of doc_tokens each, every row placing k of them drawn by Zipf(alpha)
 * without repeats, at its own offsets, then 48 own keys), at 32 query / 8 kv
 * heads, d = 128. Times lz_decode_lazy over every row's block words (each row
 * reads its documents: the L2 shares what it can) against lz_decode_group
 * over the same words, its items planned as the engine plans them
 * (gpu/llama_cuda_group.cu: chunks for about two CTAs a multiprocessor),
 * interleaved; prints both, the bytes each reads and the copy bandwidth's
 * time for the grouped bytes. With fp8, the documents are e4m3 (the own keys
 * bf16) and both kernels read them as such. One JSON record of kind
 * decode_group.
 */
#include "kernels/lz_decode_group.h"

namespace kc_perf {

static void bench_decode_group(int B, int n_docs, int k, int doc_tokens, double alpha, double copy_tbs, float *d_inv,
                               int fp8 = 0)
{
    const int OWN = 48, NB = k * ((doc_tokens + 63) / 64) + (OWN + 63) / 64;
    const size_t doc_rows = (size_t)KV * doc_tokens, rows = doc_rows * n_docs + (size_t)B * KV * OWN;
    lz_bf16 *kp = rand_dev(rows * D, 21), *vp = rand_dev(rows * D, 22), *q = rand_dev((size_t)B * H * D, 23), *o, *o2;
    CK(cudaMalloc(&o, (size_t)B * H * D * 2));
    CK(cudaMalloc(&o2, (size_t)B * H * D * 2));
    /* Zipf(alpha) over the documents, k distinct a row */
    std::vector<double> cdf(n_docs);
    double z = 0;
    for (int i = 0; i < n_docs; i++) cdf[i] = (z += pow(i + 1.0, -alpha));
    uint64_t s = 0x2545f4914f6cdd1dull;
    auto u = [&] { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return (double)(s >> 11) / 9007199254740992.0; };
    std::vector<uint64_t> w((size_t)B * KV * NB), vr((size_t)B * KV * NB);
    std::vector<float> ksc(fp8 ? w.size() : 0), vsc(fp8 ? w.size() : 0);
    uint8_t *k8 = fp8 ? rand_dev8(rows * D, 24) : NULL, *v8 = fp8 ? rand_dev8(rows * D, 25) : NULL;
    std::vector<int32_t> nb((size_t)B * KV), segf((size_t)B * KV * (k + 1));
    std::vector<uint64_t> keys((size_t)B * k);
    std::vector<int32_t> offs((size_t)B * k), blocks((size_t)B * (k + 1));
    std::vector<lz_decode_group_row> grow(B);
    std::vector<int> distinct(n_docs, 0);
    int32_t *d_segf;
    CK(cudaMalloc(&d_segf, segf.size() * 4));
    for (int b = 0; b < B; b++) {
        std::vector<int> docs;
        while ((int)docs.size() < k) {
            const double x = u() * z;
            const int d = (int)(std::lower_bound(cdf.begin(), cdf.end(), x) - cdf.begin());
            if (std::find(docs.begin(), docs.end(), d) == docs.end()) docs.push_back(d < n_docs ? d : n_docs - 1);
        }
        int64_t pos = 40;
        for (int i = 0; i < k; i++) {
            distinct[docs[i]] = 1;
            keys[(size_t)b * k + i] = (uint64_t)docs[i] + 1;
            offs[(size_t)b * k + i] = (int32_t)pos;
            blocks[(size_t)b * (k + 1) + i] = (doc_tokens + 63) / 64;
            pos += doc_tokens;
        }
        blocks[(size_t)b * (k + 1) + k] = (OWN + 63) / 64;
        for (int h = 0; h < KV; h++) {
            int n = 0;
            const size_t li = (size_t)b * KV + h;
            for (int i = 0; i <= k; i++) {
                segf[li * (k + 1) + i] = n;
                const size_t row = i < k ? (size_t)docs[i] * doc_rows + (size_t)h * doc_tokens
                                         : doc_rows * n_docs + ((size_t)b * KV + h) * OWN;
                if (fp8 && i < k)
                    LZ(lz_decode_add_segment_fp8(&w[li * NB], &vr[li * NB], &ksc[li * NB], &vsc[li * NB], &n, NB, row,
                                                 row, doc_tokens, offs[(size_t)b * k + i], 1.f / 448, 1.f / 448));
                else
                    LZ(lz_decode_add_segment_kv(&w[li * NB], &vr[li * NB], &n, NB, row, row, i < k ? doc_tokens : OWN,
                                                i < k ? offs[(size_t)b * k + i] : 0));
            }
            nb[li] = n;
        }
        /* a row's table is (L = 1, KV, k + 1) */
        grow[b] = {d_segf + (size_t)b * KV * (k + 1), k + 1, &keys[(size_t)b * k], &offs[(size_t)b * k],
                   &blocks[(size_t)b * (k + 1)]};
    }
    /* the per-row tables side by side: row b's (KV, k + 1) from b * KV * (k + 1) */
    CK(cudaMemcpy(d_segf, segf.data(), segf.size() * 4, cudaMemcpyHostToDevice));
    uint64_t *d_w, *d_vr;
    int32_t *d_nb;
    float *d_ksc = NULL, *d_vsc = NULL;
    CK(cudaMalloc(&d_w, w.size() * 8));
    CK(cudaMalloc(&d_vr, vr.size() * 8));
    CK(cudaMalloc(&d_nb, nb.size() * 4));
    CK(cudaMemcpy(d_w, w.data(), w.size() * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_vr, vr.data(), vr.size() * 8, cudaMemcpyHostToDevice));
    if (fp8) {
        CK(cudaMalloc(&d_ksc, ksc.size() * 4));
        CK(cudaMalloc(&d_vsc, vsc.size() * 4));
        CK(cudaMemcpy(d_ksc, ksc.data(), ksc.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_vsc, vsc.data(), vsc.size() * 4, cudaMemcpyHostToDevice));
    }
    CK(cudaMemcpy(d_nb, nb.data(), nb.size() * 4, cudaMemcpyHostToDevice));
    lz_decode_params p;
    memset(&p, 0, sizeof p);
    p.o = o; p.q = q; p.k_pool = kp; p.v_pool = vp; p.blocks = d_w; p.n_blocks = d_nb; p.inv_freq = d_inv;
    p.max_blocks = NB; p.batch = B; p.n_heads = H; p.n_kv_heads = KV; p.head_dim = D;
    p.rope_layout = LZ_ROPE_HALF; p.scale = 1.0f / sqrtf((float)D);
    p.v_rows = d_vr;
    if (fp8) p.k_pool8 = k8, p.v_pool8 = v8, p.k_scales = d_ksc, p.v_scales = d_vsc;
    const int ns = lz_decode_splits(&p, n_sm);
    p.work_bytes = lz_decode_workspace(&p, ns);
    if (p.work_bytes) CK(cudaMalloc(&p.work, p.work_bytes));
    if (p.work_bytes) CK(cudaMemset(p.work, 0, p.work_bytes));
    /* the plan, as the engine makes it */
    std::vector<lz_decode_item> items((size_t)B * (k + 1) * NB + 16);
    std::vector<int32_t> n_parts(B);
    int P = 0, reads = 0, placed = 0;
    int n = lz_decode_group_plan(grow.data(), B, H / KV, 1 << 30, items.data(), (int)items.size(), n_parts.data(), &P,
                                 &reads, &placed);
    const int chunk = std::max(4, (int)((int64_t)reads * KV / (2 * n_sm)));
    n = lz_decode_group_plan(grow.data(), B, H / KV, chunk, items.data(), (int)items.size(), n_parts.data(), &P, NULL,
                             NULL);
    if (n <= 0) { fprintf(stderr, "grouped decode plan failed\n"); exit(2); }
    lz_decode_item *d_items;
    int32_t *d_np;
    CK(cudaMalloc(&d_items, (size_t)n * sizeof(lz_decode_item)));
    CK(cudaMalloc(&d_np, (size_t)B * 4));
    CK(cudaMemcpy(d_items, items.data(), (size_t)n * sizeof(lz_decode_item), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_np, n_parts.data(), (size_t)B * 4, cudaMemcpyHostToDevice));
    lz_decode_group_params gp;
    memset(&gp, 0, sizeof gp);
    gp.dec = p;
    gp.dec.o = o2;
    gp.items = d_items; gp.n_items = n; gp.layer = 0; gp.n_parts = d_np; gp.max_parts = P;
    gp.work_bytes = lz_decode_group_workspace(&gp);
    CK(cudaMalloc(&gp.work, gp.work_bytes));
    auto run = [&](int grouped) {
        if (p.work_bytes) CK(cudaMemset(p.work, 0, p.work_bytes));
        return time_us([&](int, cudaStream_t st) {
            if (grouped) LZ(lz_decode_group(&gp, st));
            else LZ(lz_decode_lazy(&p, st));
        }, 1, 30);
    };
    double tg = 1e30, tr = 1e30;
    for (int r = 0; r < 3; r++) { /* interleaved, best of three medians each */
        tr = std::min(tr, run(0));
        tg = std::min(tg, run(1));
    }
    int nd = 0;
    for (int x : distinct) nd += x;
    const double blk = 2.0 * 64 * D * (fp8 ? 1 : 2) * KV; /* K + V bytes of one document block in every kv head */
    const double own = 2.0 * B * KV * OWN * D * 2;
    const double bytes_rows = placed * blk + own, bytes_group = reads * blk + own;
    printf("decode-group%s B=%d docs %d x %d tokens, %d a row by Zipf(%.1f): %d placed, %d distinct; chunk %d, %d items, "
           "<= %d parts a row\n  per row (lz_decode_lazy, split %d) %8.2f us (%.2f GB: %.2f TB/s)\n  grouped "
           "(lz_decode_group)            %8.2f us (%.2f GB: %.2f TB/s; the copy bandwidth %.2f us)  %.2fx\n",
           fp8 ? " fp8" : "", B, n_docs, doc_tokens, k, alpha, B * k, nd, chunk, n, P, ns, tr, bytes_rows / 1e9, bytes_rows / tr / 1e6, tg,
           bytes_group / 1e9, bytes_group / tg / 1e6, bytes_group / (copy_tbs * 1e6), tr / tg);
    jrec("\"kind\":\"decode_group\",\"fp8\":%d,\"B\":%d,\"docs\":%d,\"doc_tokens\":%d,\"k\":%d,\"alpha\":%.2f,\"distinct\":%d,"
         "\"chunk\":%d,\"items\":%d,\"per_row_us\":%.3f,\"grouped_us\":%.3f,\"bytes_per_row\":%.0f,\"bytes_grouped\":%.0f",
         fp8, B, n_docs, doc_tokens, k, alpha, nd, chunk, n, tr, tg, bytes_rows, bytes_group);
    CK(cudaFree(kp)); CK(cudaFree(vp)); CK(cudaFree(q)); CK(cudaFree(o)); CK(cudaFree(o2)); CK(cudaFree(d_w));
    CK(cudaFree(d_nb)); CK(cudaFree(d_segf)); CK(cudaFree(d_items)); CK(cudaFree(d_np)); CK(cudaFree(gp.work));
    CK(cudaFree(d_vr));
    if (fp8) { CK(cudaFree(k8)); CK(cudaFree(v8)); CK(cudaFree(d_ksc)); CK(cudaFree(d_vsc)); }
    if (p.work) CK(cudaFree(p.work));
}

} /* namespace kc_perf */

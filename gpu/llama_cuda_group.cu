/* llama_cuda_group.cu - a batched decode step's attention grouped by document
 * (kernels/lz_decode_group.h; lz_llama_gpu_decode_many's step in
 * llama_cuda_batch.cu): the slots that place one cached document read its K/V
 * once a step between them.
 *   group_slot  at a question's begin: lz_decode_group_tables (its segments'
 *               first block in every (layer, kv head) list, the device table
 *               the items point into, and per document the key naming its
 *               rows, its offset and most blocks), uploaded;
 *   group_step  each step: the items (lz_decode_group_plan over the slots'
 *               documents, the own rows an item each), uploaded with the rows'
 *               partial counts on the stream, the partials' workspace grown.
 * The items' chunk (blocks a CTA) keeps about two CTAs a multiprocessor;
 * LAZY_GPU_DECODE_GROUP (base/env.h) switches it off, on, or (auto) on when
 * the step reads at most four fifths of the document blocks a per-row step
 * reads (two fifths with fp8 documents, whose blocks the kernel converts in
 * shared memory, while the per-row fp8 kernel converts them in registers).
 */
#include <stdlib.h>
#include <string.h>

#include "gpu/llama_gpu.cuh"

namespace lzgpu {

void group_slot_free(Slot *s)
{
    cudaFree(s->dsegf);
    if (s->hsegf) cudaFreeHost(s->hsegf);
    free(s->gkey);
    free(s->goff);
    free(s->gblk);
    s->dsegf = s->hsegf = NULL;
    s->gkey = NULL;
    s->goff = s->gblk = NULL;
    s->gn = s->gcap = 0;
}

void group_free(lz_llama_gpu *g)
{
    cudaFree(g->dgrp);
    if (g->hgrp) cudaFreeHost(g->hgrp);
    cudaFree(g->gwork);
    g->dgrp = g->hgrp = NULL;
    g->gwork = NULL;
    g->grp_bytes = g->gwork_bytes = 0;
}

int group_slot(lz_llama_gpu *g, Slot *s, const lz_attn_segment *hs, int S, char *err, size_t errlen)
{
    const int L = g->cfg.n_layers, KV = g->cfg.n_kv_heads, W = S + 1;
    s->gn = 0;
    if (g->env_group == 0 || !s->dec) return 0;
    if (W > s->gcap) {
        group_slot_free(s);
        CUDA_OK(cudaMalloc((void **)&s->dsegf, (size_t)L * KV * W * sizeof(int32_t)), "grouped decode tables");
        CUDA_OK(cudaMallocHost((void **)&s->hsegf, (size_t)L * KV * W * sizeof(int32_t)), "grouped decode tables");
        s->gkey = (uint64_t *)malloc((size_t)W * sizeof(uint64_t));
        s->goff = (int32_t *)malloc((size_t)W * sizeof(int32_t));
        s->gblk = (int32_t *)malloc((size_t)W * sizeof(int32_t));
        if (!s->gkey || !s->goff || !s->gblk) {
            group_slot_free(s);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        s->gcap = W;
    }
    /* an offset past the words' range: the words refused it already (to be sure) */
    if (lz_decode_group_tables(hs, s->hqlen, s->hqrow, L, KV, W, s->hsegf, s->gkey, s->goff, s->gblk)) return 0;
    CUDA_OK(cudaMemcpyAsync(s->dsegf, s->hsegf, (size_t)L * KV * W * sizeof(int32_t), cudaMemcpyHostToDevice, g->st),
            "grouped decode tables");
    s->gn = W;
    return 0;
}

int group_step(lz_llama_gpu *g, Slot *const *ss, int B, const lz_decode_params *p, lz_decode_group_params *gp,
               char *err, size_t errlen)
{
    const int KV = g->cfg.n_kv_heads, G = g->cfg.n_heads / KV;
    if (g->env_group == 0 || 2 * G > 16 || B < 2) return 0;
    lz_decode_group_row *rows = (lz_decode_group_row *)malloc((size_t)B * sizeof *rows);
    if (!rows) { snprintf(err, errlen, "out of memory"); return -1; }
    size_t cap = 0;
    for (int b = 0; b < B; b++) {
        Slot *s = ss[b];
        if (!s->gn || s->gn != s->S + 1) { free(rows); return 0; }
        s->gblk[s->S] = (s->n_own + 1 + LZ_DECODE_BLOCK - 1) / LZ_DECODE_BLOCK; /* the own rows with this step's */
        rows[b] = (lz_decode_group_row){s->dsegf, s->gn, s->gkey, s->goff, s->gblk};
        for (int i = 0; i < s->gn; i++) cap += (size_t)s->gblk[i] + 1; /* items at most: a block each */
    }
    int reads = 0, placed = 0, most = 0;
    int n_sm = 0, dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev)) {
        cudaGetLastError();
        free(rows);
        snprintf(err, errlen, "GPU: device attributes");
        return -1;
    }
    /* the items sit at the front of the buffer, the partial counts behind them */
    const size_t bytes = cap * sizeof(lz_decode_item) + (size_t)B * sizeof(int32_t);
    if (bytes > g->grp_bytes) {
        cudaFree(g->dgrp);
        if (g->hgrp) cudaFreeHost(g->hgrp);
        g->dgrp = g->hgrp = NULL, g->grp_bytes = 0;
        if (cudaMalloc(&g->dgrp, bytes) != cudaSuccess || cudaMallocHost(&g->hgrp, bytes) != cudaSuccess) {
            cudaGetLastError();
            free(rows);
            group_free(g);
            snprintf(err, errlen, "GPU: grouped decode items: out of memory");
            return -1;
        }
        g->grp_bytes = bytes;
    }
    lz_decode_item *items = (lz_decode_item *)g->hgrp;
    int32_t *n_parts = (int32_t *)(void *)(items + cap);
    /* whole segments first: the blocks read; then chunks that give about two CTAs a multiprocessor */
    int n = lz_decode_group_plan(rows, B, G, 1 << 30, items, (int)cap, n_parts, &most, &reads, &placed);
    /* auto: too little shared. bf16: at most four fifths of the blocks; fp8, whose blocks the kernel
     * converts in shared memory: at most two fifths (H200, the paper's setup: 0.33 of them read
     * 1.63x faster than per row, 0.41 of them 0.73x) */
    const int64_t most_read = p->k_pool8 ? (int64_t)placed * 2 / 5 : (int64_t)placed * 4 / 5;
    if (n >= 0 && g->env_group == 2 && reads > most_read) n = 0;
    if (n > 0) {
        int chunk = (int)((int64_t)reads * KV / (2 * (int64_t)(n_sm > 0 ? n_sm : 1)));
        chunk = chunk < 4 ? 4 : chunk;
        n = lz_decode_group_plan(rows, B, G, chunk, items, (int)cap, n_parts, &most, NULL, NULL);
    }
    free(rows);
    if (n < 0) { snprintf(err, errlen, "GPU: grouped decode plan failed"); return -1; }
    if (n == 0) return 0;
    /* the items' bytes, then the counts right behind the ones written */
    int32_t *dparts = (int32_t *)(void *)((lz_decode_item *)g->dgrp + cap);
    CUDA_OK(cudaMemcpyAsync(g->dgrp, items, (size_t)n * sizeof(lz_decode_item), cudaMemcpyHostToDevice, g->st),
            "grouped decode items");
    CUDA_OK(cudaMemcpyAsync(dparts, n_parts, (size_t)B * sizeof(int32_t), cudaMemcpyHostToDevice, g->st),
            "grouped decode items");
    memset(gp, 0, sizeof *gp);
    gp->dec = *p;
    gp->items = (const lz_decode_item *)g->dgrp;
    gp->n_items = n;
    gp->n_parts = dparts;
    gp->max_parts = most;
    const size_t wb = lz_decode_group_workspace(gp);
    if (wb > g->gwork_bytes) {
        cudaFree(g->gwork);
        g->gwork = NULL, g->gwork_bytes = 0;
        CUDA_OK(cudaMalloc((void **)&g->gwork, wb), "grouped decode workspace");
        g->gwork_bytes = wb;
    }
    gp->work = g->gwork;
    gp->work_bytes = g->gwork_bytes;
    g->group_steps++;
    g->group_reads += reads;
    g->group_placed += placed;
    return 1;
}

} /* namespace lzgpu */

extern "C" void lz_llama_gpu_group_stats(const lz_llama_gpu *g, lz_llama_gpu_group_info *st)
{
    *st = (lz_llama_gpu_group_info){g->group_steps, g->group_reads, g->group_placed};
}

/* llama_cuda_slots.cu - the sequences the GPU engine holds at once
 * (llama_cuda.h's slots): their memory (own K/V rows of every slot in one
 * allocation, sized against the device's free memory), which are live, what
 * each pins (its documents held in the document cache's policy, or its own
 * when the policy turned them away), release, and whether another sequence's
 * documents fit now (the scheduler's admission). What a slot computes:
 * llama_cuda_query.cu (one) and llama_cuda_batch.cu (several). State:
 * llama_gpu.cuh.
 *
 * Legend: n = slots, T = own rows a slot holds, L = layers, KV = kv heads,
 * d = head_dim, V = vocabulary, D = width.
 */
#include <stdlib.h>
#include <string.h>

#include "gpu/llama_gpu.cuh"

#define LZ_GPU_ROOM ((size_t)1 << 30) /* device memory left free beside the slots: cuBLAS, workspaces, descriptors */

namespace lzgpu {

/* Device bytes of n slots of T own rows: K and V rows, and the batched passes' last rows and logits. */
static size_t slots_bytes(const lz_llama_gpu *g, int n, int T)
{
    const lz_llama_config *c = &g->cfg;
    const size_t rows = (size_t)2 * c->n_layers * c->n_kv_heads * T * c->head_dim * sizeof(bf16);
    const size_t batch = n > 1 ? (size_t)gemm_rows(g, n) * c->vocab * 4 + (size_t)n * (c->dim * 4 + sizeof(BatchSeq)) : 0;
    return (size_t)n * rows + batch + (size_t)n * 3 * sizeof(int);
}

void graphs_drop(lz_llama_gpu *g)
{
    for (int i = 0; i < g->n_slots; i++) slot_graphs_drop(&g->slots[i]);
}

void slot_graphs_drop(Slot *s)
{
    for (int k = 0; k < 2; k++)
        if (s->decode[k]) {
            cudaGraphExecDestroy(s->decode[k]);
            s->decode[k] = NULL;
        }
}

void slots_free(lz_llama_gpu *g)
{
    for (int i = 0; i < g->n_slots; i++) {
        Slot *s = &g->slots[i];
        slot_graphs_drop(s);
        cudaFree(s->qsegs);
        cudaFree(s->qlen);
        cudaFree(s->qcs);
        free(s->hqlen);
        cudaFree(s->dwords);
        if (s->hdw) cudaFreeHost(s->hdw);
        group_slot_free(s);
        free(s->pins);
    }
    free(g->slots);
    g->slots = NULL;
    g->n_slots = g->slot_tokens = 0;
    cudaFree(g->own_all);
    cudaFree(g->dcount);
    cudaFree(g->bseq);
    if (g->hbseq) cudaFreeHost(g->hbseq);
    cudaFree(g->blast);
    cudaFree(g->blogits);
    if (g->hblogits) cudaFreeHost(g->hblogits);
    cudaFree(g->bwords);
    group_free(g);
    cudaFree(g->bnext);
    if (g->hbnext) cudaFreeHost(g->hbnext);
    g->bnext = g->hbnext = NULL;
    g->own_all = NULL, g->dcount = NULL, g->bseq = g->hbseq = NULL, g->blast = g->blogits = g->hblogits = NULL;
    g->bwords = NULL, g->bwords_bytes = 0;
}

/* n slots of T own rows each (none before). 0, or LZ_LLAMA_GPU_ENOMEM (-1: the device failed
 * otherwise) with nothing made. */
static int slots_make(lz_llama_gpu *g, int n, int T, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const size_t per = (size_t)c->n_layers * c->n_kv_heads * T * c->head_dim; /* a slot's K (or V) elements */
    g->slots = (Slot *)calloc((size_t)n, sizeof *g->slots);
    bool ok = g->slots != NULL && cudaMalloc((void **)&g->own_all, (size_t)n * 2 * per * sizeof(bf16)) == cudaSuccess &&
              cudaMalloc((void **)&g->dcount, (size_t)n * sizeof(int)) == cudaSuccess &&
              cudaMemset(g->dcount, 0, (size_t)n * sizeof(int)) == cudaSuccess &&
              cudaMalloc((void **)&g->bnext, (size_t)n * 2 * sizeof(int)) == cudaSuccess &&
              cudaMallocHost((void **)&g->hbnext, (size_t)n * 2 * sizeof(int)) == cudaSuccess;
    if (ok && n > 1) /* the batched passes' buffers */
        ok = cudaMalloc((void **)&g->bseq, (size_t)n * sizeof(BatchSeq)) == cudaSuccess &&
             cudaMallocHost((void **)&g->hbseq, (size_t)n * sizeof(BatchSeq)) == cudaSuccess &&
             cudaMalloc((void **)&g->blast, (size_t)n * c->dim * sizeof(float)) == cudaSuccess &&
             cudaMalloc((void **)&g->blogits, (size_t)gemm_rows(g, n) * c->vocab * sizeof(float)) == cudaSuccess &&
             cudaMallocHost((void **)&g->hblogits, (size_t)n * c->vocab * sizeof(float)) == cudaSuccess;
    g->n_slots = g->slots ? n : 0;
    g->slot_tokens = T;
    if (!ok) {
        const cudaError_t ce = cudaGetLastError(); /* cudaSuccess: the host's calloc failed */
        slots_free(g);
        snprintf(err, errlen, "GPU: no device memory for %d sequences of %d tokens (%.2f GB)", n, T,
                 slots_bytes(g, n, T) / 1e9);
        return ce == cudaSuccess || ce == cudaErrorMemoryAllocation ? LZ_LLAMA_GPU_ENOMEM : -1;
    }
    for (int i = 0; i < n; i++) {
        Slot *s = &g->slots[i];
        s->N = T;
        s->own_k = g->own_all + (size_t)i * 2 * per;
        s->own_v = s->own_k + per;
        s->dn_own = g->dcount + i;
    }
    return 0;
}

int ensure_slots(lz_llama_gpu *g, char *err, size_t errlen)
{
    return g->slots ? 0 : slots_make(g, 1, g->max_tokens, err, errlen); /* one question at a time, as ever */
}

Slot *slot_get(lz_llama_gpu *g, int i, char *err, size_t errlen)
{
    if (ensure_slots(g, err, errlen)) return NULL;
    if (i < 0 || i >= g->n_slots) {
        snprintf(err, errlen, "GPU: slot %d (the engine holds %d: lz_llama_gpu_set_slots)", i, g->n_slots);
        return NULL;
    }
    return &g->slots[i];
}

void slot_unpin(lz_llama_gpu *g, Slot *s)
{
    s->live = s->ready = 0;
    if (!s->n_pins) return;
    /* copies into its documents may still be in flight, and steps may read them */
    if (g->layer_wait && g->cp) {
        cudaStreamSynchronize(g->cp);
        g->layer_wait = 0;
    }
    cudaStreamSynchronize(g->st);
    for (int j = 0; j < s->n_pins; j++) {
        const int i = doc_by_id(g, s->pins[j].id);
        if (i < 0) continue;
        if (s->pins[j].held) lz_doc_cache_release(g->pol, g->docs[i].key, 32);
        else if (!g->docs[i].keyed && !g->docs[i].pending) doc_drop(g, i);
    }
    s->n_pins = 0;
}

} /* namespace lzgpu */

using namespace lzgpu;

extern "C" int lz_llama_gpu_set_slots(lz_llama_gpu *g, int n, int max_seq_tokens, char *err, size_t errlen)
{
    if (n < 1 || max_seq_tokens < 1) {
        snprintf(err, errlen, "GPU: %d sequences of %d tokens (at least one of one)", n, max_seq_tokens);
        return -1;
    }
    if (ensure_query(g, err, errlen)) return -1;
    for (int i = 0; i < g->n_slots; i++)
        if (g->slots[i].live) {
            snprintf(err, errlen, "GPU: slot %d holds a question: release every slot before lz_llama_gpu_set_slots", i);
            return -1;
        }
    const size_t need = slots_bytes(g, n, max_seq_tokens), old = g->n_slots ? slots_bytes(g, g->n_slots, g->slot_tokens) : 0;
    size_t free_b = 0, total_b = 0;
    CUDA_OK(cudaMemGetInfo(&free_b, &total_b), "device memory");
    if (need + LZ_GPU_ROOM > free_b + old) {
        const lz_llama_config *c = &g->cfg;
        const double each = 2.0 * c->n_layers * c->n_kv_heads * max_seq_tokens * c->head_dim * 2;
        const size_t room = free_b + old > LZ_GPU_ROOM ? free_b + old - LZ_GPU_ROOM : 0;
        const int64_t fit = (int64_t)(room / (need / n));
        snprintf(err, errlen, "GPU: %d sequences of %d tokens need %.2f GB of device memory (%.1f MB of own K/V each), "
                 "but %.2f GB are free beside 1 GiB of working room (the weights and resident documents aside): %lld "
                 "such sequences fit", n, max_seq_tokens, need / 1e9, each / 1e6, room / 1e9, (long long)fit);
        return LZ_LLAMA_GPU_ENOMEM;
    }
    CUDA_OK(cudaStreamSynchronize(g->st), "slots");
    slots_free(g);
    const int rc = slots_make(g, n, max_seq_tokens, err, errlen);
    if (rc) return rc;
    lz_llama_gpu_set_cache(g, g->cache_bytes); /* the document budget within what is left */
    return 0;
}

extern "C" int lz_llama_gpu_slots(const lz_llama_gpu *g) { return g->n_slots ? g->n_slots : 1; }

extern "C" int lz_llama_gpu_slot_tokens(const lz_llama_gpu *g) { return g->n_slots ? g->slot_tokens : g->max_tokens; }

extern "C" int lz_llama_gpu_idle_slot(const lz_llama_gpu *g)
{
    if (!g->n_slots) return 0;
    for (int i = 0; i < g->n_slots; i++)
        if (!g->slots[i].live) return i;
    return -1;
}

extern "C" void lz_llama_gpu_release(lz_llama_gpu *g, int slot)
{
    if (slot >= 0 && slot < g->n_slots) slot_unpin(g, &g->slots[slot]);
}

extern "C" int lz_llama_gpu_keep_own_slot(lz_llama_gpu *g, int slot, int t0, int n, const uint8_t key[32], char *err,
                                          size_t errlen)
{
    const int rc = ensure_slots(g, err, errlen); /* its status, which slot_get's NULL does not say */
    if (rc) return rc;
    Slot *s = slot_get(g, slot, err, errlen);
    return s ? doc_keep_own(g, s, t0, n, key, err, errlen) : -1;
}

extern "C" int lz_llama_gpu_keep_own(lz_llama_gpu *g, int t0, int n, const uint8_t key[32], char *err, size_t errlen)
{
    if (!g->slots) { snprintf(err, errlen, "GPU: keeping own tokens %d..%d of 0", t0, t0 + n); return -1; }
    return lz_llama_gpu_keep_own_slot(g, 0, t0, n, key, err, errlen);
}

extern "C" int lz_llama_gpu_fits(const lz_llama_gpu *g, int64_t doc_tokens)
{
    const lz_llama_config *c = &g->cfg;
    const double need = (double)doc_tokens * 2 * c->n_layers * c->n_kv_heads * c->head_dim * sizeof(bf16);
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 1; /* unknown: the begin says */
    double room = (double)free_b - (double)LZ_GPU_ROOM;
    lz_kv_pool_stats ps;
    if (g->hbm) {
        lz_kv_pool_get_stats(g->hbm, &ps);
        room += (double)ps.capacity - (double)ps.used; /* the pool's free extents */
    }
    if (g->pol) { /* resident documents no live sequence holds may leave */
        lz_doc_cache_stats cs;
        lz_doc_cache_get_stats(g->pol, &cs);
        room += (double)g->used_bytes - (double)cs.bytes_held;
    }
    return need <= room;
}

extern "C" void lz_llama_gpu_slot_stats(const lz_llama_gpu *g, lz_llama_gpu_slot_info *st)
{
    memset(st, 0, sizeof *st);
    st->slots = lz_llama_gpu_slots(g);
    st->slot_tokens = lz_llama_gpu_slot_tokens(g);
    for (int i = 0; i < g->n_slots; i++) {
        const Slot *s = &g->slots[i];
        st->live += s->live;
        for (int j = 0; j < s->n_pins; j++) {
            const int k = doc_by_id(g, s->pins[j].id);
            if (k < 0) continue;
            st->pins++;
            st->pinned_bytes += (g->docs[k].rows ? g->docs[k].rows : 1) * g->cfg.head_dim * 2 * sizeof(bf16); /* K and V */
        }
    }
}

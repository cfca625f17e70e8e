/* llama_cuda_pool.cu - the memory of the document cache's two fast tiers
 * (llama_cuda.h), allocated in large regions and handed out as whole-document
 * extents by cache/kv_pool.h, so that a question's path never allocates or
 * frees device memory (cudaFree synchronises the device) and never pins host
 * memory (cudaHostAlloc costs about as much as copying the bytes):
 *   HBM      the resident documents' K and V (cache/kv_layout.h's layout, K
 *            then V in one extent); the first region holds the cache budget
 *            and a question's working room, later ones grow the pool only
 *            when its documents outgrow that (kept: a high-water mark);
 *   pinned   host memory in the same layout (the host tier's entries and the
 *            documents decoded from the store), so a miss is one DMA copy at
 *            PCIe speed; regions of LZ_GPU_HOST_REGION bytes, thread-safe
 *            (the store tier decodes on many threads), each mapped with
 *            transparent huge pages, touched on every thread, then registered
 *            with the driver: 11x faster than cudaHostAlloc on the H200 host
 *            (16.8 against 1.5 GB/s, dev/cuda/pin_rate.cu), the same copy speed.
 * And the copies between them: asynchronous on the question's stream, timed
 * with events (lz_llama_gpu_tier_stats). A pool that finds no memory returns
 * LZ_LLAMA_GPU_ENOMEM. State: llama_gpu.cuh. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache/kv_pool.h"
#include "gpu/llama_gpu.cuh"

#define LZ_GPU_POOL_ALIGN 256
#define LZ_GPU_POOL_GROW ((size_t)256 << 20)
#define LZ_GPU_HOST_REGION ((size_t)1 << 30)

namespace lzgpu {

/* bytes of pinned host memory (a multiple of the page size), or NULL */
static void *host_region_new(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, bytes, MADV_HUGEPAGE); /* a hint: registering 2 MiB pages is what is fast */
    const size_t chunk = (size_t)2 << 20;
    const long n = (long)((bytes + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        const size_t at = (size_t)i * chunk;
        memset((char *)p + at, 0, bytes - at < chunk ? bytes - at : chunk);
    }
    if (cudaHostRegister(p, bytes, cudaHostRegisterPortable) != cudaSuccess) {
        cudaGetLastError();
        munmap(p, bytes);
        return NULL;
    }
    return p;
}

static void host_region_free(void *p, size_t bytes)
{
    cudaHostUnregister(p);
    munmap(p, bytes);
}

/* A new HBM region of at least bytes (first: the budget and the working room). 0,
 * LZ_LLAMA_GPU_ENOMEM (no device memory for it, or none for its bookkeeping), or -1 (the device
 * failed otherwise). */
static int pool_grow(lz_llama_gpu *g, size_t bytes, char *err, size_t errlen)
{
    if (!g->hbm && !(g->hbm = lz_kv_pool_new(LZ_GPU_POOL_ALIGN))) {
        snprintf(err, errlen, "out of memory");
        return LZ_LLAMA_GPU_ENOMEM;
    }
    lz_kv_pool_stats st;
    lz_kv_pool_get_stats(g->hbm, &st);
    const lz_llama_config *c = &g->cfg;
    const size_t room = (size_t)2 * c->n_layers * c->n_kv_heads * g->max_tokens * c->head_dim * 2; /* max_tokens rows */
    size_t want = st.n_regions ? LZ_GPU_POOL_GROW : g->cache_bytes + (room > LZ_GPU_POOL_GROW ? room : LZ_GPU_POOL_GROW);
    if (want < bytes) want = bytes;
    want = (want + LZ_GPU_POOL_ALIGN - 1) / LZ_GPU_POOL_ALIGN * LZ_GPU_POOL_ALIGN;
    void *p = NULL;
    cudaError_t ce = cudaMalloc(&p, want);
    if (ce != cudaSuccess && want > bytes) { /* as much as it needs, at least */
        cudaGetLastError();
        want = (bytes + LZ_GPU_POOL_ALIGN - 1) / LZ_GPU_POOL_ALIGN * LZ_GPU_POOL_ALIGN;
        ce = cudaMalloc(&p, want);
    }
    if (ce != cudaSuccess) {
        cudaGetLastError();
        snprintf(err, errlen, "GPU: no device memory for %.1f MB more of document KV (the pool holds %.1f MB): %s",
                 bytes / 1e6, st.capacity / 1e6, cudaGetErrorString(ce));
        return ce == cudaErrorMemoryAllocation ? LZ_LLAMA_GPU_ENOMEM : -1; /* else a fault, not a shortage */
    }
    if (lz_kv_pool_add_region(g->hbm, (uintptr_t)p, want)) {
        cudaFree(p);
        snprintf(err, errlen, "out of memory");
        return LZ_LLAMA_GPU_ENOMEM;
    }
    g->pool_grows++;
    return 0;
}

int pool_take(lz_llama_gpu *g, size_t bytes, void **at, char *err, size_t errlen)
{
    int rc = g->hbm ? 0 : pool_grow(g, bytes, err, errlen);
    if (rc) return rc;
    for (;;) {
        uintptr_t a;
        if (!lz_kv_pool_alloc(g->hbm, bytes, &a)) { *at = (void *)a; return 0; }
        lz_kv_pool_stats st;
        lz_kv_pool_get_stats(g->hbm, &st);
        /* room enough in all but one piece: fragmentation, which the least valuable unpinned
         * document's leaving mends (the budget stays); else the working set outgrew the pool */
        const int fragmented = st.used + bytes + g->cache_bytes / 8 <= st.capacity;
        if (fragmented && !g->no_evict && g->pol && lz_doc_cache_evict_one(g->pol)) { g->pool_evictions++; continue; }
        if ((rc = pool_grow(g, bytes, err, errlen))) {
            if (!g->no_evict && g->pol && lz_doc_cache_evict_one(g->pol)) { g->pool_evictions++; continue; } /* device full */
            int live = 0;
            for (int i = 0; i < g->n_slots; i++) live += g->slots[i].live;
            if (live > 1 && rc == LZ_LLAMA_GPU_ENOMEM) { /* every resident document pinned by the live ones */
                const size_t at = strlen(err);
                snprintf(err + at, errlen > at ? errlen - at : 0,
                         "; every resident document is in use by the %d live sequences (admit fewer at once)", live);
            }
            return rc;
        }
    }
}

void pool_give(lz_llama_gpu *g, void *at, size_t bytes)
{
    if (at && g->hbm) lz_kv_pool_release(g->hbm, (uintptr_t)at, bytes);
}

void pool_free_all(lz_llama_gpu *g)
{
    uintptr_t base;
    size_t bytes;
    for (int i = 0; g->hbm && !lz_kv_pool_region(g->hbm, i, &base, &bytes); i++) cudaFree((void *)base);
    lz_kv_pool_free(g->hbm);
    g->hbm = NULL;
    for (int i = 0; g->hostp && !lz_kv_pool_region(g->hostp, i, &base, &bytes); i++) host_region_free((void *)base, bytes);
    lz_kv_pool_free(g->hostp);
    g->hostp = NULL;
    if (g->host_lock_made) pthread_mutex_destroy(&g->host_lock);
    if (g->up_ev[0]) cudaEventDestroy(g->up_ev[0]);
    if (g->up_ev[1]) cudaEventDestroy(g->up_ev[1]);
    for (int l = 0; g->lev && l < g->cfg.n_layers; l++) cudaEventDestroy(g->lev[l]);
    free(g->lev);
    if (g->cp) cudaStreamDestroy(g->cp);
    free(g->upq);
}

/* ---- copies into HBM, timed ---- */

/* The previous question's copies, done by now (its steps synchronised): their time counted. */
void upload_account(lz_llama_gpu *g)
{
    if (!g->up_open) return;
    float ms = 0;
    if (cudaEventSynchronize(g->up_ev[1]) == cudaSuccess && cudaEventElapsedTime(&ms, g->up_ev[0], g->up_ev[1]) == cudaSuccess)
        g->up_s += ms / 1e3;
    g->up_open = 0;
}

/* The events that time a question's copies, made at the first copy. 0 or -1. */
static int up_events(lz_llama_gpu *g, char *err, size_t errlen)
{
    if (g->up_ev[0]) return 0;
    CUDA_OK(cudaEventCreate(&g->up_ev[0]), "events");
    CUDA_OK(cudaEventCreate(&g->up_ev[1]), "events");
    return 0;
}

int upload_async(lz_llama_gpu *g, void *dst, const void *src, size_t bytes, char *err, size_t errlen)
{
    if (up_events(g, err, errlen)) return -1;
    if (!g->up_open) {
        CUDA_OK(cudaEventRecord(g->up_ev[0], g->st), "events");
        g->up_open = 1;
    }
    CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g->st), "copying a document to the device");
    CUDA_OK(cudaEventRecord(g->up_ev[1], g->st), "events");
    g->up_bytes += bytes;
    g->uploads++;
    return 0;
}

int upload_defer(lz_llama_gpu *g, const lz_llama_gpu::UpDoc *u, char *err, size_t errlen)
{
    if (g->n_upq == g->cap_upq) {
        const int n = g->cap_upq ? 2 * g->cap_upq : 32;
        lz_llama_gpu::UpDoc *q = (lz_llama_gpu::UpDoc *)realloc(g->upq, (size_t)n * sizeof *q);
        if (!q) { snprintf(err, errlen, "out of memory"); return LZ_LLAMA_GPU_ENOMEM; }
        g->upq = q;
        g->cap_upq = n;
    }
    g->upq[g->n_upq++] = *u;
    return 0;
}

int upload_layers(lz_llama_gpu *g, char *err, size_t errlen)
{
    const int L = g->cfg.n_layers, d = g->cfg.head_dim;
    if (!g->n_upq) return 0;
    if (!g->cp) {
        CUDA_OK(cudaStreamCreateWithFlags(&g->cp, cudaStreamNonBlocking), "the copy stream");
        if (!(g->lev = (cudaEvent_t *)calloc((size_t)L, sizeof *g->lev))) {
            snprintf(err, errlen, "out of memory");
            return LZ_LLAMA_GPU_ENOMEM;
        }
        for (int l = 0; l < L; l++) CUDA_OK(cudaEventCreateWithFlags(&g->lev[l], cudaEventDisableTiming), "events");
    }
    if (up_events(g, err, errlen)) return -1;
    /* after what the question's stream did before (its docs' extents may have held others) */
    CUDA_OK(cudaEventRecord(g->lev[0], g->st), "events");
    CUDA_OK(cudaStreamWaitEvent(g->cp, g->lev[0], 0), "events");
    if (!g->up_open) CUDA_OK(cudaEventRecord(g->up_ev[0], g->cp), "events");
    g->up_open = 1;
    for (int l = 0; l < L; l++) {
        for (int i = 0; i < g->n_upq; i++) {
            const lz_llama_gpu::UpDoc *u = &g->upq[i];
            if (l == 0 && u->sc_bytes) {
                CUDA_OK(cudaMemcpyAsync(u->sc, u->hsc, u->sc_bytes, cudaMemcpyHostToDevice, g->cp), "copying a document's scales");
                g->up_bytes += u->sc_bytes;
            }
            const size_t end = l + 1 < L ? u->first[l + 1] : u->rows;
            const size_t at = u->first[l] * d * u->es, n = (end - u->first[l]) * d * u->es;
            if (!n) continue;
            CUDA_OK(cudaMemcpyAsync((char *)u->k + at, (const char *)u->sk + at, n, cudaMemcpyHostToDevice, g->cp),
                    "copying a document to the device");
            CUDA_OK(cudaMemcpyAsync((char *)u->v + at, (const char *)u->sv + at, n, cudaMemcpyHostToDevice, g->cp),
                    "copying a document to the device");
            g->up_bytes += 2 * n;
        }
        CUDA_OK(cudaEventRecord(g->lev[l], g->cp), "events");
    }
    CUDA_OK(cudaEventRecord(g->up_ev[1], g->cp), "events");
    g->uploads += g->n_upq;
    g->n_upq = 0;
    g->layer_wait = 1;
    return 0;
}

int upload_wait(lz_llama_gpu *g, int l, char *err, size_t errlen)
{
    if (g->layer_wait) CUDA_OK(cudaStreamWaitEvent(g->st, g->lev[l], 0), "waiting for a layer's copies");
    return 0;
}

} /* namespace lzgpu */

using namespace lzgpu;


extern "C" void *lz_llama_gpu_host_alloc(lz_llama_gpu *g, size_t bytes)
{
    if (!g->host_lock_made) return NULL; /* lz_llama_gpu_new made it; a failed one: pageable */
    pthread_mutex_lock(&g->host_lock);
    void *out = NULL;
    if (!g->hostp) g->hostp = lz_kv_pool_new(LZ_GPU_POOL_ALIGN);
    uintptr_t a;
    if (g->hostp && !lz_kv_pool_alloc(g->hostp, bytes, &a)) out = (void *)a;
    if (g->hostp && !out) { /* a new pinned region */
        const size_t huge = (size_t)2 << 20;
        size_t want = bytes > LZ_GPU_HOST_REGION ? bytes : LZ_GPU_HOST_REGION;
        want = (want + huge - 1) / huge * huge;
        void *p = host_region_new(want); /* NULL: no more pinned memory; the caller uses pageable */
        if (p && lz_kv_pool_add_region(g->hostp, (uintptr_t)p, want)) host_region_free(p, want);
        else if (p && !lz_kv_pool_alloc(g->hostp, bytes, &a)) out = (void *)a;
    }
    pthread_mutex_unlock(&g->host_lock);
    return out;
}

extern "C" void lz_llama_gpu_host_free(lz_llama_gpu *g, void *p, size_t bytes)
{
    if (!p || !g->host_lock_made) return;
    pthread_mutex_lock(&g->host_lock);
    if (g->hostp) lz_kv_pool_release(g->hostp, (uintptr_t)p, bytes);
    pthread_mutex_unlock(&g->host_lock);
}

extern "C" void lz_llama_gpu_settle(lz_llama_gpu *g)
{
    if (g->layer_wait && g->cp) cudaStreamSynchronize(g->cp);
    g->layer_wait = 0;
    g->n_upq = 0;
}

extern "C" void lz_llama_gpu_tier_stats(lz_llama_gpu *g, lz_llama_gpu_tiers *t)
{
    memset(t, 0, sizeof *t);
    upload_account(g);
    t->uploads = g->uploads;
    t->bytes_up = g->up_bytes;
    t->copy_s = g->up_s;
    t->pool_grows = g->pool_grows;
    t->pool_evictions = g->pool_evictions;
    lz_kv_pool_stats st;
    if (g->hbm) {
        lz_kv_pool_get_stats(g->hbm, &st);
        t->pool_capacity = st.capacity;
        t->pool_used = st.used;
        t->pool_regions = st.n_regions;
    }
    if (g->host_lock_made) pthread_mutex_lock(&g->host_lock);
    if (g->hostp) {
        lz_kv_pool_get_stats(g->hostp, &st);
        t->pinned_capacity = st.capacity;
        t->pinned_used = st.used;
    }
    if (g->host_lock_made) pthread_mutex_unlock(&g->host_lock);
}

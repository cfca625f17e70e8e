/* llama_cuda_docs.cu - the documents a question's steps read on the GPU
 * (llama_cuda.h): uploaded from their stored KV (bf16 or fp32 as bf16, fp8
 * as stored with its scales; Ada-KV's unequal heads packed, as the host tier
 * keeps them), or recomputed there from their token ids exactly as lazyingest
 * encoded them (lz_llama_gpu_encode_keep: a batch of
 * whole documents, each with its own causal attention over the prefix on a
 * side stream); keyed by their payload and kept within the cache budget by
 * cache/'s policy (frequency-aware admission and eviction, or LRU), the
 * documents of every live slot's question pinned (held in the policy; those
 * it turned away owned by the slot) until the slot is released or begins
 * again. A shortage of memory on the way is LZ_LLAMA_GPU_ENOMEM (llama_cuda.h),
 * passed up unchanged. State: llama_gpu.cuh. */
#include <stdlib.h>
#include <string.h>

#include "kernels/lz_ops.h"
#include "kernels/lz_rerotate.h"
#include "base/half.h"
#include "cache/kv_layout.h"
#include "gpu/llama_gpu.cuh"

namespace lzgpu {

/* kept rows of segment sg at (layer l, kv head h) */
static int seg_kept(const lz_kv_segment *sg, int l, int h, int KV)
{
    return sg->n_kept ? sg->n_kept[l * KV + h] : sg->n;
}


static size_t doc_bytes(const lz_llama_gpu *g, const GpuDoc *x)
{
    (void)g;
    return x->ext_bytes;
}

/* Removes doc i (the last one takes its place). */
void doc_drop(lz_llama_gpu *g, int i)
{
    if (g->docs[i].keyed) g->used_bytes -= doc_bytes(g, &g->docs[i]);
    doc_free(g, &g->docs[i]);
    g->docs[i] = g->docs[--g->n_docs];
}

/* A new doc x: kept rows per (layer, kv head) as segment sg keeps them (sg
 * NULL: n each, a document stored whole) in cache/kv_layout.h's layout, and
 * its extent from the HBM pool: K then V (one row at least), bf16, or fp8
 * (fp8 set) followed by its scales. 0 or LZ_LLAMA_GPU_ENOMEM. */
static int doc_alloc(lz_llama_gpu *g, const lz_kv_segment *sg, int n, int fp8, GpuDoc *x, char *err, size_t errlen)
{
    const int L = g->cfg.n_layers, KV = g->cfg.n_kv_heads, d = g->cfg.head_dim;
    memset(x, 0, sizeof *x);
    x->hrow = (int32_t *)malloc((size_t)L * KV * sizeof(int32_t));
    x->first = (size_t *)malloc((size_t)L * sizeof(size_t));
    x->kept = (int32_t *)malloc((size_t)L * KV * sizeof(int32_t));
    if (fp8) x->hsc = (float *)malloc((size_t)2 * L * KV * sizeof(float));
    if (!x->hrow || !x->first || !x->kept || (fp8 && !x->hsc)) {
        doc_free(g, x);
        snprintf(err, errlen, "out of memory");
        return LZ_LLAMA_GPU_ENOMEM;
    }
    for (int l = 0; l < L; l++)
        for (int h = 0; h < KV; h++) x->kept[l * KV + h] = sg ? seg_kept(sg, l, h, KV) : n;
    x->rows = lz_kv_layout(L, KV, x->kept, n, x->hrow, x->first);
    for (int lh = 0; lh < L * KV; lh++) x->keys = x->kept[lh] > x->keys ? x->kept[lh] : x->keys;
    const size_t R = x->rows ? x->rows : 1;
    const size_t bytes = fp8 ? 2 * R * d + (size_t)2 * L * KV * sizeof(float) : R * d * 2 * 2;
    const int rc = pool_take(g, bytes, &x->ext, err, errlen);
    if (rc) {
        doc_free(g, x);
        return rc;
    }
    x->ext_bytes = bytes;
    if (fp8) {
        x->k8 = (uint8_t *)x->ext;
        x->v8 = x->k8 + R * d;
        x->ks = (float *)(void *)(x->v8 + R * d); /* R * d is even and the extent 256-aligned */
        x->vs = x->ks + (size_t)L * KV;
    } else {
        x->k = (bf16 *)x->ext;
        x->v = x->k + R * d;
    }
    return 0;
}

/* Whether segment sg's rows lie in the layout doc x has on the device (cache/kv_layout.h; the
 * host tier keeps its documents so), so that they go up as they are. */
static bool seg_direct(const lz_llama_gpu *g, const lz_kv_segment *sg, const GpuDoc *x)
{
    const int L = g->cfg.n_layers, KV = g->cfg.n_kv_heads, d = g->cfg.head_dim;
    bool direct = (sg->k8 ? sg->k8 && sg->v8 : sg->k16 && sg->v16) && x->rows > 0;
    for (int lh = 0; direct && lh < L * KV; lh++) {
        const int l = lh / KV, h = lh % KV;
        direct = lz_kv_segment_block(sg, l, h, KV, d) == (x->first[l] + (size_t)x->hrow[lh]) * d;
    }
    return direct;
}

/* Uploads segment sg (bf16, fp32 or fp8, any head layout) into a new doc (fp8 stays fp8, the
 * rest bf16): rows already in the layout the device reads go up as they are, asynchronously:
 * with defer, queued for the question's layer-by-layer copies (upload_layers), else now on the
 * stream (K, V and fp8's scales side by side: one copy); others through a staging copy, heads
 * in parallel (an 8B model's document is ~20 MB in bf16). 0, -1 or LZ_LLAMA_GPU_ENOMEM. */
static int doc_upload(lz_llama_gpu *g, const lz_kv_segment *sg, GpuDoc *x, int defer, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int L = c->n_layers, KV = c->n_kv_heads, d = c->head_dim;
    const int fp8 = sg->k8 != NULL;
    const size_t es = fp8 ? 1 : 2, nh = (size_t)L * KV, scb = fp8 ? 2 * nh * sizeof(float) : 0;
    const int arc = doc_alloc(g, sg, 0, fp8, x, err, errlen);
    if (arc) return arc;
    const size_t n = (x->rows ? x->rows : 1) * d; /* elements of K (and of V) */
    if (fp8) { /* the host's copy of the scales (the decode words carry them) */
        memcpy(x->hsc, sg->k_scales, nh * sizeof(float));
        memcpy(x->hsc + nh, sg->v_scales, nh * sizeof(float));
    }
    const void *sk = fp8 ? (const void *)sg->k8 : (const void *)sg->k16, *sv = fp8 ? (const void *)sg->v8 : (const void *)sg->v16;
    /* fp8's scales straight from the segment when they follow V there (a host-tier entry's) */
    const void *ssc = fp8 && sg->k_scales == (const float *)(const void *)(sg->v8 + n) && sg->v_scales == sg->k_scales + nh
                          ? (const void *)sg->k_scales
                          : (const void *)x->hsc;
    if (seg_direct(g, sg, x) && defer) { /* a question's: copied layer by layer beside its first step (upload_layers) */
        const lz_llama_gpu::UpDoc u = {fp8 ? (void *)x->k8 : (void *)x->k, fp8 ? (void *)x->v8 : (void *)x->v, sk, sv, es,
                                       x->first, x->rows, fp8 ? (void *)x->ks : NULL, ssc, scb};
        const int rc = upload_defer(g, &u, err, errlen);
        if (rc) doc_free(g, x);
        return rc;
    }
    if (seg_direct(g, sg, x)) {
        const int joint = (const char *)sv == (const char *)sk + n * es && (!fp8 || ssc == (const char *)sv + n * es);
        if (upload_async(g, x->ext, sk, joint ? x->ext_bytes : n * es, err, errlen) ||
            (!joint && upload_async(g, (char *)x->ext + n * es, sv, n * es, err, errlen)) ||
            (!joint && fp8 && upload_async(g, x->ks, ssc, scb, err, errlen))) {
            doc_free(g, x);
            return -1;
        }
        return 0;
    }
    uint8_t *stage = (uint8_t *)malloc(x->ext_bytes);
    if (!stage) { doc_free(g, x); snprintf(err, errlen, "out of memory"); return LZ_LLAMA_GPU_ENOMEM; }
#pragma omp parallel for schedule(dynamic, 4) if (n > ((size_t)1 << 20))
    for (int lh = 0; lh < L * KV; lh++) {
        const int l = lh / KV, h = lh % KV, kept = x->kept[lh];
        const size_t src = lz_kv_segment_block(sg, l, h, KV, d), dst = (x->first[l] + (size_t)x->hrow[lh]) * d;
        if (fp8) {
            memcpy(stage + dst, sg->k8 + src, (size_t)kept * d);
            memcpy(stage + n + dst, sg->v8 + src, (size_t)kept * d);
            continue;
        }
        uint16_t *dk = (uint16_t *)(void *)stage + dst, *dv = (uint16_t *)(void *)stage + n + dst;
        if (sg->k16) {
            memcpy(dk, sg->k16 + src, (size_t)kept * d * 2);
            memcpy(dv, sg->v16 + src, (size_t)kept * d * 2);
        } else {
            for (size_t e = 0; e < (size_t)kept * d; e++) {
                dk[e] = lz_f32_to_bf16(sg->k[src + e]);
                dv[e] = lz_f32_to_bf16(sg->v[src + e]);
            }
        }
    }
    if (fp8) memcpy(stage + 2 * n, x->hsc, scb);
    cudaError_t ce = cudaMemcpy(x->ext, stage, x->ext_bytes, cudaMemcpyHostToDevice); /* pageable: synchronous */
    free(stage);
    if (ce != cudaSuccess) {
        doc_free(g, x);
        snprintf(err, errlen, "GPU: uploading a document: %s", cudaGetErrorString(ce));
        return -1;
    }
    g->up_bytes += x->ext_bytes;
    g->uploads++;
    return 0;
}

lz_attn_segment doc_segment(const lz_llama_gpu *g, const GpuDoc *x, int l, int64_t offset)
{
    const int KV = g->cfg.n_kv_heads, d = g->cfg.head_dim;
    lz_attn_segment a;
    memset(&a, 0, sizeof a);
    a.offset = offset;
    a.cap = x->keys; /* >= every head's rows; the heads' rows themselves are x->hrow (seg_row) */
    if (x->k8) {
        a.k8 = x->k8 + x->first[l] * d;
        a.v8 = x->v8 + x->first[l] * d;
        a.k_scale = x->ks + (size_t)l * KV;
        a.v_scale = x->vs + (size_t)l * KV;
    } else {
        a.k = (const lz_bf16 *)(x->k + x->first[l] * d);
        a.v = (const lz_bf16 *)(x->v + x->first[l] * d);
    }
    return a;
}

int doc_by_id(const lz_llama_gpu *g, uint64_t id)
{
    for (int i = 0; i < g->n_docs; i++)
        if (g->docs[i].id == id) return i;
    return -1;
}

/* The policy evicted doc id: its device memory goes now. */
static void doc_evicted(void *value, void *ctx)
{
    lz_llama_gpu *g = (lz_llama_gpu *)ctx;
    const int i = doc_by_id(g, (uint64_t)(uintptr_t)value);
    if (i >= 0) doc_drop(g, i);
}

/* The policy object, made at the first use with the budget and policy set so far. */
static int ensure_policy(lz_llama_gpu *g, char *err, size_t errlen)
{
    if (g->pol) return 0;
    g->pol = lz_doc_cache_new(g->cache_bytes, doc_evicted, g);
    if (!g->pol) { snprintf(err, errlen, "out of memory"); return LZ_LLAMA_GPU_ENOMEM; }
    lz_doc_cache_set_policy(g->pol, (lz_cache_policy)g->policy);
    return 0;
}

extern "C" size_t lz_llama_gpu_set_cache(lz_llama_gpu *g, size_t bytes)
{
    /* at most what the device has free beside what is resident now, less 1 GiB of working room */
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        const size_t room = free_b + g->used_bytes > ((size_t)1 << 30) ? free_b + g->used_bytes - ((size_t)1 << 30) : 0;
        if (bytes > room) bytes = room;
    }
    g->cache_bytes = bytes;
    if (g->pol) lz_doc_cache_set_budget(g->pol, bytes); /* docs past it leave after the next question's lookups */
    return bytes;
}

extern "C" void lz_llama_gpu_set_cache_policy(lz_llama_gpu *g, int policy)
{
    g->policy = policy;
    if (g->pol) lz_doc_cache_set_policy(g->pol, (lz_cache_policy)policy);
}

extern "C" void lz_llama_gpu_cache_stats(const lz_llama_gpu *g, long *hits, long *misses, size_t *bytes)
{
    *hits = g->hits;
    *misses = g->misses;
    *bytes = g->used_bytes;
}

extern "C" void lz_llama_gpu_cache_policy_stats(const lz_llama_gpu *g, lz_doc_cache_stats *st)
{
    memset(st, 0, sizeof *st);
    if (g->pol) lz_doc_cache_get_stats(g->pol, st);
}

/* The doc with content key key, keyed or pending, or -1. */
static int doc_find(const lz_llama_gpu *g, const uint8_t *key)
{
    for (int i = 0; key && i < g->n_docs; i++)
        if ((g->docs[i].keyed || g->docs[i].pending) && !memcmp(g->docs[i].key, key, 32)) return i;
    return -1;
}

/* Room for one more doc in g->docs; 0 or LZ_LLAMA_GPU_ENOMEM. */
static int doc_room(lz_llama_gpu *g, char *err, size_t errlen)
{
    if (g->n_docs < g->cap_docs) return 0;
    int cap = g->cap_docs ? 2 * g->cap_docs : 64;
    GpuDoc *d2 = (GpuDoc *)realloc(g->docs, (size_t)cap * sizeof *d2);
    if (!d2) { snprintf(err, errlen, "out of memory"); return LZ_LLAMA_GPU_ENOMEM; }
    g->docs = d2;
    g->cap_docs = cap;
    return 0;
}

/* Adds x (its id set here) with content key key (NULL: this question only);
 * pending: kept, unkeyed, for the next begin to offer. */
static void doc_add(lz_llama_gpu *g, GpuDoc *x, const uint8_t *key, int pending)
{
    x->id = ++g->next_id;
    if (key) memcpy(x->key, key, 32);
    x->pending = key && pending;
    g->docs[g->n_docs++] = *x;
}

/* Offers doc i (unkeyed, with its key set) to the policy: keyed when admitted
 * (the policy may evict others, which moves entries), else it stays for this
 * question only. */
static void doc_offer(lz_llama_gpu *g, int i)
{
    GpuDoc *x = &g->docs[i];
    const uint64_t id = x->id;
    uint8_t key[32];
    memcpy(key, x->key, 32);
    const size_t bytes = doc_bytes(g, x);
    x->pending = 0;
    if (lz_doc_cache_put(g->pol, key, 32, (void *)(uintptr_t)id, bytes)) { /* admitted, so pinned: still there */
        g->docs[doc_by_id(g, id)].keyed = 1;
        g->used_bytes += bytes;
    }
}

int doc_pin(lz_llama_gpu *g, const uint8_t *key) { return key && g->pol && lz_doc_cache_get(g->pol, key, 32) != NULL; }

/* The doc of segment sg for this question: resident under key (cached: doc_pin
 * found it), else uploaded (offered to the policy, which keeps it or not;
 * unkeyed ones are dropped at the next question). Its id in *id; 0 or -1. */
/* Block mode: doc x's keys rotated in place by offset (its copy for one placement). 0 or -1. */
static int doc_rerotate(lz_llama_gpu *g, GpuDoc *x, int64_t offset, char *err, size_t errlen)
{
    if (!offset || !x->rows) return 0;
    lz_rerotate_params rp = {(lz_bf16 *)x->k, (const lz_bf16 *)x->k, g->inv_freq, (int64_t)x->rows, offset,
                             g->cfg.head_dim, g->cfg.rope_layout};
    if (x->k8) { /* fp8: re-quantised in place at its scale x sqrt(2) (kernels/lz_rerotate.h), the host's copy too */
        const int nh = g->cfg.n_layers * g->cfg.n_kv_heads;
        rp.dst = NULL, rp.src = NULL;
        rp.dst8 = x->k8, rp.src8 = x->k8;
        rp.scale8_in = x->ks, rp.scale8_out = x->ks, rp.n_scales = nh;
        for (int i = 0; i < nh; i++) x->hsc[i] *= LZ_REROTATE_FP8_GROWTH;
    }
    const int rc = lz_rerotate(&rp, g->st);
    if (rc) return fail(err, errlen, "re-rotating a document's keys", rc);
    return 0;
}

int doc_for(lz_llama_gpu *g, const lz_kv_segment *sg, const uint8_t *key, int cached, uint64_t *id, char *err,
            size_t errlen)
{
    int rc = ensure_policy(g, err, errlen);
    if (rc) return rc;
    if (cached) { /* admitted earlier: pinned for this question by doc_pin */
        const int at = doc_find(g, key);
        GpuDoc *x = &g->docs[at];
        if (x->fresh) g->misses++; /* recomputed for this question: not found, made */
        else g->hits++;
        x->fresh = 0;
        *id = x->id;
        return 0;
    }
    int at = doc_find(g, key);
    if (at >= 0 && g->docs[at].keyed) { /* already taken by this question (a repeated segment) */
        *id = g->docs[at].id;
        return 0;
    }
    if (key) g->misses++;
    if (at < 0) { /* not recomputed for it either: uploaded now (block: then rotated to its placement) */
        GpuDoc x;
        if ((rc = doc_room(g, err, errlen)) || (rc = doc_upload(g, sg, &x, !g->materialise, err, errlen))) return rc;
        if (g->materialise && doc_rerotate(g, &x, sg->rot, err, errlen)) { doc_free(g, &x); return -1; }
        doc_add(g, &x, key, 0);
        at = g->n_docs - 1;
    }
    GpuDoc *x = &g->docs[at];
    x->fresh = 0;
    *id = x->id;
    if (key) doc_offer(g, at);
    return 0;
}

extern "C" int lz_llama_gpu_preload(lz_llama_gpu *g, const lz_kv_segment *sg, const uint8_t key[32], double hits,
                                    char *err, size_t errlen)
{
    int rc = ensure_policy(g, err, errlen);
    if (rc) return rc;
    if (hits > 0) lz_doc_cache_prior(g->pol, key, 32, hits);
    if (!sg) return 0;
    if (doc_find(g, key) >= 0) return 1; /* every key the policy holds is a doc here */
    GpuDoc x;
    if ((rc = doc_room(g, err, errlen)) || (rc = doc_upload(g, sg, &x, 0, err, errlen))) return rc;
    const size_t bytes = doc_bytes(g, &x);
    CUDA_OK(cudaStreamSynchronize(g->st), "preloading a document"); /* the caller's memory read */
    doc_add(g, &x, key, 0);
    const uint64_t id = g->docs[g->n_docs - 1].id;
    if (!lz_doc_cache_preload(g->pol, key, 32, (void *)(uintptr_t)id, bytes)) { /* no room left */
        doc_drop(g, doc_by_id(g, id));
        return 0;
    }
    g->docs[doc_by_id(g, id)].keyed = 1;
    g->used_bytes += bytes;
    return 1;
}

int doc_keep_own(lz_llama_gpu *g, Slot *s, int t0, int n, const uint8_t key[32], char *err, size_t errlen)
{
    const int L = g->cfg.n_layers, KV = g->cfg.n_kv_heads, d = g->cfg.head_dim;
    const size_t N = (size_t)s->N, w = (size_t)n * d * sizeof(bf16);
    if (!s->ready || t0 < 0 || n <= 0 || t0 + n > s->n_own) {
        snprintf(err, errlen, "GPU: keeping own tokens %d..%d of %d", t0, t0 + n, s->n_own);
        return -1;
    }
    int rc = ensure_policy(g, err, errlen);
    if (rc) return rc;
    if (doc_find(g, key) >= 0) return 1;
    GpuDoc x;
    if ((rc = doc_room(g, err, errlen)) || (rc = doc_alloc(g, NULL, n, 0, &x, err, errlen))) return rc;
    for (int l = 0; l < L; l++) { /* a layer's heads: (KV, N, d) rows from t0 into (KV, n, d) */
        const size_t src = ((size_t)l * KV * N + t0) * d;
        cudaError_t ce = cudaMemcpy2DAsync(x.k + x.first[l] * d, w, s->own_k + src, N * d * sizeof(bf16), w, KV,
                                           cudaMemcpyDeviceToDevice, g->st);
        if (ce == cudaSuccess)
            ce = cudaMemcpy2DAsync(x.v + x.first[l] * d, w, s->own_v + src, N * d * sizeof(bf16), w, KV,
                                   cudaMemcpyDeviceToDevice, g->st);
        if (ce != cudaSuccess) {
            doc_free(g, &x);
            snprintf(err, errlen, "GPU: keeping own tokens: %s", cudaGetErrorString(ce));
            return -1;
        }
    }
    doc_add(g, &x, key, 0);
    const uint64_t id = g->docs[g->n_docs - 1].id;
    doc_offer(g, g->n_docs - 1);
    if ((rc = doc_use(g, s, id, err, errlen))) return rc; /* held while s lives (turned away: s's own) */
    return g->docs[doc_by_id(g, id)].keyed;
}

int doc_use(lz_llama_gpu *g, Slot *s, uint64_t id, char *err, size_t errlen)
{
    const int i = doc_by_id(g, id);
    if (i < 0) return 0;
    if (s->n_pins == s->cap_pins) {
        const int cap = s->cap_pins ? 2 * s->cap_pins : 16;
        Slot::Pin *p = (Slot::Pin *)realloc(s->pins, (size_t)cap * sizeof *p);
        if (!p) {
            if (!g->docs[i].keyed && !g->docs[i].pending) doc_drop(g, i); /* nobody else can find it */
            snprintf(err, errlen, "out of memory");
            return LZ_LLAMA_GPU_ENOMEM;
        }
        s->pins = p;
        s->cap_pins = cap;
    }
    const int held = g->docs[i].keyed && lz_doc_cache_hold(g->pol, g->docs[i].key, 32);
    s->pins[s->n_pins++] = (Slot::Pin){id, held};
    return 0;
}

void doc_trim(lz_llama_gpu *g)
{
    if (g->pol) lz_doc_cache_trim(g->pol);
}

int doc_question(lz_llama_gpu *g, Slot *s, char *err, size_t errlen)
{
    const int rc = ensure_policy(g, err, errlen);
    if (rc) return rc;
    upload_account(g);
    slot_unpin(g, s); /* its last question's documents: unkeyed ones out, keyed ones free to leave */
    lz_doc_cache_begin(g->pol);
    return 0;
}

extern "C" int lz_llama_gpu_resident(const lz_llama_gpu *g, const uint8_t key[32]) { return doc_find(g, key) >= 0; }

/* ---- documents recomputed on the query side ---- */

/* The prefix doc's descriptors for the recomputing passes (every call: the doc may have moved).
 * 0, -1 or LZ_LLAMA_GPU_ENOMEM. */
static int prefix_descriptors(lz_llama_gpu *g, const GpuDoc *pre, char *err, size_t errlen)
{
    const int L = g->cfg.n_layers, KV = g->cfg.n_kv_heads;
    if (!g->esegs) {
        cudaError_t ce = cudaMalloc((void **)&g->esegs, (size_t)L * sizeof(lz_attn_segment));
        if (ce != cudaSuccess) {
            cudaGetLastError();
            g->esegs = NULL;
            snprintf(err, errlen, "GPU: descriptors: %s", cudaGetErrorString(ce));
            return ce == cudaErrorMemoryAllocation ? LZ_LLAMA_GPU_ENOMEM : -1;
        }
        if ((ce = cudaMalloc((void **)&g->elen, (size_t)2 * L * KV * sizeof(int32_t))) != cudaSuccess) {
            cudaGetLastError();
            cudaFree(g->esegs);
            g->esegs = NULL;
            snprintf(err, errlen, "GPU: no memory for descriptors");
            return ce == cudaErrorMemoryAllocation ? LZ_LLAMA_GPU_ENOMEM : -1;
        }
    }
    lz_attn_segment *hs = (lz_attn_segment *)malloc((size_t)L * sizeof *hs);
    if (!hs) { snprintf(err, errlen, "out of memory"); return LZ_LLAMA_GPU_ENOMEM; }
    for (int l = 0; l < L; l++) hs[l] = doc_segment(g, pre, l, 0);
    cudaError_t ce = cudaMemcpy(g->esegs, hs, (size_t)L * sizeof *hs, cudaMemcpyHostToDevice);
    free(hs);
    if (ce == cudaSuccess) ce = cudaMemcpy(g->elen, pre->kept, (size_t)L * KV * sizeof(int32_t), cudaMemcpyHostToDevice);
    if (ce == cudaSuccess)
        ce = cudaMemcpy(g->elen + (size_t)L * KV, pre->hrow, (size_t)L * KV * sizeof(int32_t), cudaMemcpyHostToDevice);
    CUDA_OK(ce, "uploading the prefix descriptors");
    return 0;
}

/* Documents a previous encode_keep kept pending for a question that never began (it failed
 * between its recompute and its begin): dropped, so that none stays outside the budget for
 * good. Not offered to the policy instead: an admission may evict documents the question
 * about to begin was told are resident. A question's recompute and its begin run back to back
 * on the engine's thread, so every doc still pending here is such a one. */
static void drop_stale(lz_llama_gpu *g)
{
    for (int i = g->n_docs - 1; i >= 0; i--)
        if (g->docs[i].pending) doc_drop(g, i);
}

extern "C" int lz_llama_gpu_encode_keep(lz_llama_gpu *g, const lz_kv_segment *prefix, const uint8_t prefix_key[32],
                                        const int *const *ids, const int *n, const uint8_t *const *keys, int n_docs,
                                        char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int D = c->dim, KV = c->n_kv_heads, d = c->head_dim, L = c->n_layers, N = g->max_tokens;
    for (int i = 0; i < n_docs; i++) {
        if (n[i] <= 0) { snprintf(err, errlen, "GPU: a document of %d tokens to recompute", n[i]); return -1; }
        for (int j = 0; j < n[i] && n[i] <= N; j++)
            if (ids[i][j] < 0 || ids[i][j] >= c->vocab) { snprintf(err, errlen, "token id %d out of range", ids[i][j]); return -1; }
    }
    if (ensure_side(g, err, errlen)) return -1; /* the documents' attention side by side */
    drop_stale(g);
    /* the question about to begin uses them all: kept pending (outside the policy, so never
     * evicted) until its begin offers them */
    g->no_evict = 1; /* until done: the pool grows rather than evict (see llama_gpu.cuh) */
    int at = doc_find(g, prefix_key), rc;
    if (at < 0) { /* the prefix, kept like a document (the question's begin finds it) */
        GpuDoc x;
        if ((rc = doc_room(g, err, errlen)) || (rc = doc_upload(g, prefix, &x, 0, err, errlen))) {
            g->no_evict = 0;
            return rc;
        }
        x.fresh = 1;
        doc_add(g, &x, prefix_key, 1);
        at = g->n_docs - 1;
    }
    if ((rc = prefix_descriptors(g, &g->docs[at], err, errlen))) { g->no_evict = 0; return rc; }
    const int64_t s = prefix->n;
    lz_prefill_params p = attn_params(g, 1);
    p.n_seg = 1;
    p.seg_keys = g->docs[at].keys;
    p.seg_fp8 = g->docs[at].k8 != NULL; /* an fp8 store's prefix */
    int *hid = (int *)malloc((size_t)N * sizeof(int));
    Part *parts = (Part *)malloc((size_t)(n_docs > 0 ? n_docs : 1) * sizeof *parts);
    GpuDoc *xs = (GpuDoc *)calloc((size_t)(n_docs > 0 ? n_docs : 1), sizeof *xs);
    int *todo = (int *)malloc((size_t)(n_docs > 0 ? n_docs : 1) * sizeof(int));
    int n_todo = 0;
    rc = -1;
    if (!hid || !parts || !xs || !todo) { snprintf(err, errlen, "out of memory"); rc = LZ_LLAMA_GPU_ENOMEM; goto done; }
    for (int i = 0; i < n_docs; i++) { /* resident ones, repeats and those too long for a pass are skipped */
        int dup = n[i] > N || doc_find(g, keys[i]) >= 0;
        for (int j = 0; !dup && j < n_todo; j++) dup = !memcmp(keys[todo[j]], keys[i], 32);
        if (!dup) todo[n_todo++] = i;
    }
    /* batches of whole documents, at most max_tokens rows: one pass of the weights each */
    for (int b0 = 0, b1; b0 < n_todo; b0 = b1) {
        int rows = 0;
        for (b1 = b0; b1 < n_todo && rows + n[todo[b1]] <= N; b1++) {
            const int i = todo[b1];
            memcpy(hid + rows, ids[i], (size_t)n[i] * sizeof(int));
            rows += n[i];
        }
        int made = b0, ok = 1, brc = -1; /* brc: the status of a batch that failed */
        for (; ok && made < b1; made++) {
            const int arc = doc_alloc(g, NULL, n[todo[made]], 0, &xs[made], err, errlen);
            if (arc) ok = 0, brc = arc;
        }
        if (!ok) made--;
        for (int j = b0; ok && j < b1; j++) {
            p.n_rows = n[todo[j]];
            ok = !ensure_work(g, &p, err, errlen);
        }
        if (ok) ok = cudaMemcpyAsync(g->ids, hid, (size_t)rows * sizeof(int), cudaMemcpyHostToDevice, g->st) == cudaSuccess;
        if (ok) lz_op_embed(g->x, (const lz_bf16 *)g->tok_embd, g->ids, rows, D, g->st);
        for (int l = 0; ok && l < L; l++) {
            p.segs = g->esegs + l;
            p.seg_len = g->elen + (size_t)l * KV;
            p.seg_row = g->elen + (size_t)(L + l) * KV;
            for (int j = b0, off = 0; j < b1; off += n[todo[j]], j++) {
                const size_t at_l = (size_t)l * KV * n[todo[j]] * d;
                parts[j - b0] = (Part){off, n[todo[j]], xs[j].k + at_l, xs[j].v + at_l};
            }
            ok = !layer(g, l, rows, s, NULL, parts, b1 - b0, &p, 0, err, errlen);
        }
        cudaError_t ce = cudaGetLastError();
        if (ce == cudaSuccess) ce = cudaStreamSynchronize(g->st);
        if (ok && ce != cudaSuccess) {
            snprintf(err, errlen, "GPU: recomputing documents: %s", cudaGetErrorString(ce));
            ok = 0;
        }
        for (int j = b0; j < made; j++) {
            const int drc = ok ? doc_room(g, err, errlen) : 0;
            if (ok && !drc) {
                xs[j].fresh = 1;
                doc_add(g, &xs[j], keys[todo[j]], 1);
            } else {
                if (drc) brc = drc;
                ok = 0;
                doc_free(g, &xs[j]);
            }
        }
        if (!ok) { rc = brc; goto done; }
    }
    rc = 0;
done:
    g->no_evict = 0;
    free(hid);
    free(parts);
    free(xs);
    free(todo);
    return rc;
}

} /* namespace lzgpu */

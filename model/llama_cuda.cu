/* llama_cuda.cu - the ingest forward pass on the GPU (llama_cuda.h). Per
 * layer: rmsnorm (bf16 out) -> q, k, v GEMMs (cuBLAS, bf16 in, fp32 out) ->
 * rotary at absolute positions and head-major bf16 (k and v written where
 * the caller's KV will be read back) -> lz_prefill over the prefix segment
 * and the document's own keys (causal) -> o GEMM added to the fp32 residual
 * -> rmsnorm -> gate, up GEMMs -> silu(gate) * up (bf16) -> down GEMM added.
 * The math is model/forward.c's; model/rope.h is shared; the small kernels
 * are kernels/lz_ops.cu (each with a CPU reference).
 *
 * Legend: n = tokens, D = width, H/KV = heads, d = head_dim, F = FFN width,
 * V = vocabulary, L = layers, s = prefix tokens.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/lz_decode.h"
#include "kernels/lz_gemv.h"
#include "kernels/lz_ops.h"
#include "kernels/lz_prefill.h"
#include "model/half.h"
#include "model/llama_cuda.h"
#include "model/rope.h"

typedef __nv_bfloat16 bf16;

namespace {

struct Layer {
    bf16 *wq, *wk, *wv, *wo, *wg, *wu, *wd; /* (out, in) row-major; wk, wv follow wq and wu follows wg
                                               in memory: one product computes q|k|v, one gate|up */
    float *attn_norm, *ffn_norm;
};

} /* namespace */

/* A segment resident on the device: per layer l, (KV, cap[l], d) rows from
 * row first[l] of k and v; kept (L, KV). Keyed by a 32-byte content digest
 * (a store payload's key), or unkeyed: then it lives for one question. */
struct GpuDoc {
    uint8_t key[32];
    int keyed;
    bf16 *k, *v;
    size_t rows;
    int *cap;
    size_t *first;
    int32_t *kept;
    int64_t keys; /* rows of its longest (layer, head) */
    uint64_t used; /* the question that used it last */
    uint64_t id;   /* unique: entries move when others are dropped */
    int fresh;     /* computed here (lz_llama_gpu_encode_keep) and not yet used: its first lookup is a miss */
};

struct lz_llama_gpu {
    const lz_llama *m; /* the caller's, alive as long as g: the output head uploads at the first question */
    lz_llama_config cfg;
    int max_tokens;
    cublasHandle_t blas;
    cudaStream_t st;
    bf16 *tok_embd;
    Layer *layers; /* host array of device pointers */
    float *inv_freq;
    float *x, *q, *gate; /* (N, D); (N, (H + 2 KV) d): rows q | k | v; (N, 2 F): rows gate | up */
    bf16 *xb, *qh, *oh, *ot, *hb;
    bf16 *kall, *vall; /* (L, KV, n, d): the document's K and V, read back at the end */
    int *ids;
    bf16 *pk, *pv;     /* prefix (L, KV, s, d) */
    int s;
    lz_attn_segment *dsegs; /* (L) one prefix segment a layer */
    int32_t *dlen;          /* (KV) = s */
    float *work;
    size_t work_bytes;
    bf16 *host16;      /* pinned staging (2, L, KV, max_tokens, d) */
    /* query side */
    bf16 *out_w;       /* (V, D) output head (the embedding when tied) */
    float *out_norm, *logits, *hlogits; /* (D), (V) device, (V) pinned */
    bf16 *tk, *tv;     /* (KV, max_tokens, d) a step's own keys / values */
    bf16 *own_k, *own_v; /* (L, KV, max_tokens, d) the sequence's tokens so far */
    GpuDoc *docs;        /* resident segments, LRU by .used */
    int n_docs, cap_docs;
    size_t cache_bytes, used_bytes; /* budget and use of the keyed ones */
    uint64_t question, next_id;
    long hits, misses;
    int *dn_own;         /* device: the own sequence's length (read by the kernels; a graph replays them) */
    int *hids;           /* pinned: a step's token ids */
    cudaGraphExec_t decode; /* one decode step of this question, captured at its first one */
    void *blas_ws;       /* cuBLAS workspace (no allocation inside a captured graph) */
    float *wq;           /* ingest: the KV-eviction window's rotated queries (L, cw, H, d) */
    size_t wq_n;
    lz_attn_segment *qsegs;  /* (L, S + 1) device: the segments then the own sequence */
    int32_t *qlen, *hqlen;   /* (L, S + 1, KV) device / host */
    int S, n_own, qcap;      /* qcap: S + 1 the descriptor arrays hold */
    int ready;               /* a begin succeeded (a failed one leaves no question to step) */
    int64_t pos0, seg_keys;
    void **owned;
    int n_owned;
    lz_attn_segment *esegs; /* (L) device: the prefix doc, for documents recomputed on the query side */
    int32_t *elen;          /* (L, KV) device: its kept lengths */
    /* several parts in a layer (documents recomputed together): their rotary, attention and
     * token-major copies run on LZ_GPU_SIDE streams side by side, each with its own slot of
     * the attention workspace (work_slot bytes apart) */
    cudaStream_t side[4];
    cudaEvent_t fork, join[4];
    size_t work_slot;
    unsigned char *stage[2]; /* pinned, LZ_GPU_STAGE bytes each: weights on their way up (upload_bytes) */
    cudaEvent_t stage_ev[2];
    /* a decode step's attention by lz_decode_lazy: block words (L, KV, dNB) over the question's
     * segments then the own rows, the values' rows beside them, the blocks in use (L, KV) and the
     * segments' share of them; rows counted from dk0 / dv0. dec = 0 when a question's rows or
     * offsets do not fit the words (decode then runs lz_prefill_lazy, as question steps do) */
    uint64_t *dwords, *dvrows; /* one allocation: words, values' rows, dnf, dnb */
    int32_t *dnb, *dnf;
    size_t dcap;               /* its bytes, and those of the pinned staging hdw */
    uint64_t *hdw;
    int dNB, dec, dsplit; /* dsplit: lz_decode's split-KV parts (0: its choice) */
    const bf16 *dk0, *dv0;
    float *dwork;
    size_t dwork_bytes;
};

#define LZ_GPU_STAGE ((size_t)64 << 20)

#define LZ_GPU_SIDE 4

static int fail(char *err, size_t errlen, const char *what, int code)
{
    snprintf(err, errlen, "GPU: %s failed (%d)", what, code);
    return -1;
}

#define CUDA_OK(call, what)                                                                                       \
    do {                                                                                                          \
        cudaError_t e_ = (call);                                                                                  \
        if (e_ != cudaSuccess) {                                                                                  \
            snprintf(err, errlen, "GPU: %s: %s", what, cudaGetErrorString(e_));                                   \
            return -1;                                                                                            \
        }                                                                                                         \
    } while (0)

/* cudaMalloc owned by g (freed with it). */
template <class T> static T *dalloc(lz_llama_gpu *g, size_t count)
{
    void *p = NULL;
    if (cudaMalloc(&p, count > 0 ? count * sizeof(T) : 1) != cudaSuccess) return NULL;
    void **o = (void **)realloc(g->owned, (size_t)(g->n_owned + 1) * sizeof *o);
    if (!o) { cudaFree(p); return NULL; }
    g->owned = o;
    g->owned[g->n_owned++] = p;
    return (T *)p;
}

static void stage_free(lz_llama_gpu *g)
{
    for (int i = 0; i < 2; i++) {
        if (g->stage[i]) cudaFreeHost(g->stage[i]);
        if (g->stage_ev[i]) cudaEventDestroy(g->stage_ev[i]);
        g->stage[i] = NULL;
        g->stage_ev[i] = NULL;
    }
}

/* bytes of pageable host memory (the model file's mapping) to the device:
 * LZ_GPU_STAGE chunks copied on every thread into two pinned buffers, each
 * uploaded while the next one fills. A plain cudaMemcpy from pageable memory
 * copies through the driver's staging on one thread (an 8B model's 15 GB took
 * about 2.2 s on the H200 machine). 0 or -1. */
static int stage_alloc(lz_llama_gpu *g)
{
    for (int i = 0; i < 2; i++)
        if (cudaMallocHost((void **)&g->stage[i], LZ_GPU_STAGE) != cudaSuccess ||
            cudaEventCreateWithFlags(&g->stage_ev[i], cudaEventDisableTiming) != cudaSuccess) {
            stage_free(g);
            return -1;
        }
    return 0;
}

static int upload_bytes(lz_llama_gpu *g, void *dst, const void *src, size_t bytes)
{
    if (bytes < LZ_GPU_STAGE || (!g->stage[0] && stage_alloc(g))) /* small, or no pinned memory: plainly */
        return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess ? 0 : -1;
    const size_t piece = (size_t)1 << 20;
    for (size_t off = 0, i = 0; off < bytes; off += LZ_GPU_STAGE, i++) {
        const size_t n = bytes - off < LZ_GPU_STAGE ? bytes - off : LZ_GPU_STAGE;
        const int b = (int)(i & 1);
        if (cudaEventSynchronize(g->stage_ev[b]) != cudaSuccess) return -1; /* its last upload is done */
        unsigned char *to = g->stage[b];
        const unsigned char *from = (const unsigned char *)src + off;
#pragma omp parallel for schedule(static)
        for (long long o = 0; o < (long long)((n + piece - 1) / piece); o++) {
            const size_t at = (size_t)o * piece;
            memcpy(to + at, from + at, n - at < piece ? n - at : piece);
        }
        if (cudaMemcpyAsync((char *)dst + off, to, n, cudaMemcpyHostToDevice, g->st) != cudaSuccess ||
            cudaEventRecord(g->stage_ev[b], g->st) != cudaSuccess)
            return -1;
    }
    return cudaStreamSynchronize(g->st) == cudaSuccess ? 0 : -1;
}

/* A weight matrix of count values to device memory d as bf16 (widened first when not bf16); d or NULL. */
static bf16 *upload_into(lz_llama_gpu *g, bf16 *d, lz_mat m, size_t count)
{
    if (!d) return NULL;
    if (m.type == LZ_MAT_BF16) return upload_bytes(g, d, m.data, count * 2) ? NULL : d;
    const size_t chunk = (size_t)1 << 20;
    float *f = (float *)malloc(chunk * sizeof(float));
    uint16_t *h = (uint16_t *)malloc(chunk * 2);
    int ok = f && h;
    for (size_t at = 0; ok && at < count; at += chunk) {
        const size_t c = count - at < chunk ? count - at : chunk;
        lz_mat_get_f32(m, at, c, f);
        for (size_t i = 0; i < c; i++) h[i] = lz_f32_to_bf16(f[i]);
        ok = cudaMemcpy(d + at, h, c * 2, cudaMemcpyHostToDevice) == cudaSuccess;
    }
    free(f);
    free(h);
    return ok ? d : NULL;
}

static bf16 *upload_mat(lz_llama_gpu *g, lz_mat m, size_t count) { return upload_into(g, dalloc<bf16>(g, count), m, count); }

static float *upload_f32(lz_llama_gpu *g, const float *x, size_t count)
{
    float *d = dalloc<float>(g, count);
    if (d && cudaMemcpy(d, x, count * 4, cudaMemcpyHostToDevice) != cudaSuccess) return NULL;
    return d;
}

static void doc_free(GpuDoc *x)
{
    cudaFree(x->k);
    cudaFree(x->v);
    free(x->cap);
    free(x->first);
    free(x->kept);
    memset(x, 0, sizeof *x);
}

extern "C" void lz_llama_gpu_free(lz_llama_gpu *g)
{
    if (!g) return;
    stage_free(g);
    for (int i = 0; i < g->n_owned; i++) cudaFree(g->owned[i]);
    free(g->owned);
    free(g->layers);
    if (g->host16) cudaFreeHost(g->host16);
    if (g->hlogits) cudaFreeHost(g->hlogits);
    if (g->hids) cudaFreeHost(g->hids);
    if (g->decode) cudaGraphExecDestroy(g->decode);
    for (int i = 0; i < g->n_docs; i++) doc_free(&g->docs[i]);
    free(g->docs);
    cudaFree(g->qsegs);
    cudaFree(g->qlen);
    free(g->hqlen);
    cudaFree(g->work);
    cudaFree(g->wq);
    cudaFree(g->esegs);
    cudaFree(g->elen);
    cudaFree(g->dwords);
    if (g->hdw) cudaFreeHost(g->hdw);
    cudaFree(g->dwork);
    for (int i = 0; i < LZ_GPU_SIDE; i++) {
        if (g->side[i]) cudaStreamDestroy(g->side[i]);
        if (g->join[i]) cudaEventDestroy(g->join[i]);
    }
    if (g->fork) cudaEventDestroy(g->fork);
    if (g->blas) cublasDestroy(g->blas);
    if (g->st) cudaStreamDestroy(g->st);
    free(g);
}

extern "C" int lz_llama_gpu_new(const lz_llama *m, int max_tokens, lz_llama_gpu **out, char *err, size_t errlen)
{
    *out = NULL;
    const lz_llama_config *c = &m->cfg;
    if (c->head_dim != 64 && c->head_dim != 128) {
        snprintf(err, errlen, "GPU: head_dim %d (the attention kernels take 64 or 128)", c->head_dim);
        return -1;
    }
    if (max_tokens <= 0) { snprintf(err, errlen, "GPU: max_tokens %d", max_tokens); return -1; }
    /* benchmarks' A/B of the decode products' grids: "blocks_per_sm,silu_blocks_per_sm" (lz_gemv_tune) */
    if (const char *t = getenv("LAZY_GPU_GEMV")) {
        int bps = 0, silu = 0;
        if (sscanf(t, "%d,%d", &bps, &silu) != 2) {
            snprintf(err, errlen, "LAZY_GPU_GEMV=%s: expected blocks_per_sm,silu_blocks_per_sm", t);
            return -1;
        }
        lz_gemv_tune(bps, silu);
    }
    lz_llama_gpu *g = (lz_llama_gpu *)calloc(1, sizeof *g);
    if (!g) { snprintf(err, errlen, "out of memory"); return -1; }
    g->m = m;
    g->cfg = *c;
    g->max_tokens = max_tokens;
    const size_t D = c->dim, F = c->ffn_dim, Hd = (size_t)c->n_heads * c->head_dim,
                 KVd = (size_t)c->n_kv_heads * c->head_dim, L = c->n_layers, N = max_tokens;
    cudaError_t ce = cudaStreamCreate(&g->st);
    if (ce != cudaSuccess) {
        snprintf(err, errlen, "GPU: %s", cudaGetErrorString(ce));
        lz_llama_gpu_free(g);
        return -1;
    }
    int rc;
    if ((rc = (int)cublasCreate(&g->blas)) || (rc = (int)cublasSetStream(g->blas, g->st))) {
        lz_llama_gpu_free(g);
        return fail(err, errlen, "cuBLAS setup", rc);
    }
    g->layers = (Layer *)calloc(L, sizeof *g->layers);
    int ok = g->layers && (g->tok_embd = upload_mat(g, m->tok_embd, (size_t)c->vocab * D)) &&
             (g->inv_freq = upload_f32(g, m->inv_freq, (size_t)c->head_dim / 2));
    for (size_t l = 0; ok && l < L; l++) {
        const lz_llama_layer *y = &m->layers[l];
        Layer *w = &g->layers[l];
        ok = (w->wq = dalloc<bf16>(g, (Hd + 2 * KVd) * D)) && (w->wg = dalloc<bf16>(g, 2 * F * D));
        if (ok) w->wk = w->wq + Hd * D, w->wv = w->wk + KVd * D, w->wu = w->wg + F * D;
        ok = ok && upload_into(g, w->wq, y->wq, Hd * D) && upload_into(g, w->wk, y->wk, KVd * D) &&
             upload_into(g, w->wv, y->wv, KVd * D) && (w->wo = upload_mat(g, y->wo, D * Hd)) &&
             upload_into(g, w->wg, y->w_gate, F * D) && upload_into(g, w->wu, y->w_up, F * D) &&
             (w->wd = upload_mat(g, y->w_down, D * F)) && (w->attn_norm = upload_f32(g, y->attn_norm, D)) &&
             (w->ffn_norm = upload_f32(g, y->ffn_norm, D));
    }
    const size_t widest = D > F ? (D > Hd ? D : Hd) : (F > Hd ? F : Hd);
    ok = ok && (g->x = dalloc<float>(g, N * D)) && (g->q = dalloc<float>(g, N * (Hd + 2 * KVd))) &&
         (g->gate = dalloc<float>(g, N * 2 * F)) &&
         (g->xb = dalloc<bf16>(g, N * widest)) && (g->qh = dalloc<bf16>(g, N * Hd)) && (g->oh = dalloc<bf16>(g, N * Hd)) &&
         (g->ot = dalloc<bf16>(g, N * Hd)) && (g->hb = dalloc<bf16>(g, N * F)) && (g->ids = dalloc<int>(g, N)) &&
         (g->blas_ws = dalloc<char>(g, (size_t)32 << 20)) &&
         cublasSetWorkspace(g->blas, g->blas_ws, (size_t)32 << 20) == CUBLAS_STATUS_SUCCESS;
    if (!ok) {
        lz_llama_gpu_free(g);
        snprintf(err, errlen, "GPU: out of device memory for the weights and %d tokens of activations", max_tokens);
        return -1;
    }
    stage_free(g); /* the weights are up */
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) g->cache_bytes = free_b / 2;
    *out = g;
    return 0;
}

/* Ingest's buffers (the document's K / V on the device and pinned for the
 * read-back, the prefix descriptors), allocated at first use: a GPU context
 * that only answers questions does not hold them. 0 or -1. */
static int ensure_ingest(lz_llama_gpu *g, char *err, size_t errlen)
{
    if (g->kall) return 0;
    const lz_llama_config *c = &g->cfg;
    const size_t L = c->n_layers, N = g->max_tokens, KVd = (size_t)c->n_kv_heads * c->head_dim;
    if ((g->kall = dalloc<bf16>(g, L * N * KVd)) && (g->vall = dalloc<bf16>(g, L * N * KVd)) &&
        (g->dsegs = dalloc<lz_attn_segment>(g, L)) && (g->dlen = dalloc<int32_t>(g, c->n_kv_heads)) &&
        cudaMallocHost((void **)&g->host16, 2 * L * N * KVd * 2) == cudaSuccess)
        return 0;
    g->kall = NULL;
    snprintf(err, errlen, "GPU: out of memory for %d tokens of document KV", g->max_tokens);
    return -1;
}

/* The query side's buffers (the output head, logits, the own sequence), at the first question. */
static int ensure_query(lz_llama_gpu *g, char *err, size_t errlen)
{
    if (g->own_k) return 0;
    const lz_llama_config *c = &g->cfg;
    const size_t D = c->dim, L = c->n_layers, N = g->max_tokens, KVd = (size_t)c->n_kv_heads * c->head_dim;
    if ((g->out_w = c->tied_output ? g->tok_embd : upload_mat(g, g->m->output, (size_t)c->vocab * D)) &&
        (g->out_norm = upload_f32(g, g->m->out_norm, D)) && (g->logits = dalloc<float>(g, (size_t)c->vocab)) &&
        cudaMallocHost((void **)&g->hlogits, (size_t)c->vocab * sizeof(float)) == cudaSuccess &&
        (g->tk = dalloc<bf16>(g, N * KVd)) && (g->tv = dalloc<bf16>(g, N * KVd)) && (g->dn_own = dalloc<int>(g, 1)) &&
        cudaMallocHost((void **)&g->hids, N * sizeof(int)) == cudaSuccess && (g->own_v = dalloc<bf16>(g, L * N * KVd)) &&
        (g->own_k = dalloc<bf16>(g, L * N * KVd))) {
        stage_free(g); /* the output head is up */
        return 0;
    }
    g->own_k = NULL;
    snprintf(err, errlen, "GPU: out of memory for the output head and %d tokens of a question and its answer",
             g->max_tokens);
    return -1;
}

extern "C" int lz_llama_gpu_set_prefix(lz_llama_gpu *g, const lz_kv_cache *prefix, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int L = c->n_layers, KV = c->n_kv_heads, d = c->head_dim, s = prefix->n;
    if (ensure_ingest(g, err, errlen)) return -1;
    g->s = s;
    if (s == 0) return 0;
    const size_t per = (size_t)L * KV * s * d;
    uint16_t *hk = (uint16_t *)malloc(per * 2), *hv = (uint16_t *)malloc(per * 2);
    if (!hk || !hv) { free(hk); free(hv); snprintf(err, errlen, "out of memory"); return -1; }
    for (int lh = 0; lh < L * KV; lh++)
        for (size_t e = 0; e < (size_t)s * d; e++) {
            hk[(size_t)lh * s * d + e] = lz_f32_to_bf16(prefix->k[(size_t)lh * prefix->cap * d + e]);
            hv[(size_t)lh * s * d + e] = lz_f32_to_bf16(prefix->v[(size_t)lh * prefix->cap * d + e]);
        }
    g->pk = dalloc<bf16>(g, per);
    g->pv = dalloc<bf16>(g, per);
    int ok = g->pk && g->pv && cudaMemcpy(g->pk, hk, per * 2, cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMemcpy(g->pv, hv, per * 2, cudaMemcpyHostToDevice) == cudaSuccess;
    free(hk);
    free(hv);
    if (!ok) { snprintf(err, errlen, "GPU: uploading the %d-token prefix failed", s); return -1; }
    lz_attn_segment *segs = (lz_attn_segment *)malloc((size_t)L * sizeof *segs);
    int32_t *len = (int32_t *)malloc((size_t)KV * sizeof *len);
    if (!segs || !len) { free(segs); free(len); snprintf(err, errlen, "out of memory"); return -1; }
    for (int l = 0; l < L; l++)
        segs[l] = (lz_attn_segment){(const lz_bf16 *)(g->pk + (size_t)l * KV * s * d),
                                    (const lz_bf16 *)(g->pv + (size_t)l * KV * s * d), 0, s};
    for (int h = 0; h < KV; h++) len[h] = s;
    ok = cudaMemcpy(g->dsegs, segs, (size_t)L * sizeof *segs, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(g->dlen, len, (size_t)KV * sizeof *len, cudaMemcpyHostToDevice) == cudaSuccess;
    free(segs);
    free(len);
    if (!ok) { snprintf(err, errlen, "GPU: uploading the prefix descriptors failed"); return -1; }
    return 0;
}

/* Rows a product runs for n rows: n rounded up to a multiple of 64 (at most
 * max_tokens). cuBLAS chooses a kernel for every new shape, about 0.25 ms on
 * the host, plus about 4 ms the first time the process uses that kernel (H200,
 * CUDA 13; bench/kernels/cublas_shapes.cu, bench/RESULTS.md); questions and batches
 * of recomputed documents of every length would each pay it. The extra rows
 * of x hold stale values (possibly not even numbers): a product's output row
 * depends on its own input row only, and nothing reads the extra output rows. */
static int gemm_rows(const lz_llama_gpu *g, int n)
{
    if (n <= 1) return n;
    const int r = (n + 63) / 64 * 64;
    return r < g->max_tokens ? r : (n > g->max_tokens ? n : g->max_tokens);
}

/* y (n, out) (+)= x (n, in) @ W (out, in)^T: column-major y^T = W x^T; one
 * row (a decode step, a question's output head) by lz_gemv, which reads the
 * weights at about twice cuBLAS's rate there (tests/cuda/test_gemv.cu). */
static int gemm(lz_llama_gpu *g, float *y, const bf16 *x, const bf16 *w, int n, int in, int out, float beta)
{
    const float alpha = 1.0f;
    if (n == 1 && in % 8 == 0 && in <= LZ_GEMV_MAX_IN) {
        const lz_gemv_mat m = {(const lz_bf16 *)w, y, out};
        return lz_gemv(&m, 1, (const lz_bf16 *)x, in, beta, g->st);
    }
    n = gemm_rows(g, n);
    return (int)cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &alpha, w, CUDA_R_16BF, in, x, CUDA_R_16BF, in,
                        &beta, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

/* Attention parameters shared by ingest and query for n rows (segments,
 * lengths and own keys set by the caller). */
static lz_prefill_params attn_params(const lz_llama_gpu *g, int n)
{
    const lz_llama_config *c = &g->cfg;
    lz_prefill_params p;
    memset(&p, 0, sizeof p);
    p.q = (const lz_bf16 *)g->qh;
    p.o = (lz_bf16 *)g->oh;
    p.inv_freq = g->inv_freq;
    p.n_rows = n;
    p.n_heads = c->n_heads;
    p.n_kv_heads = c->n_kv_heads;
    p.head_dim = c->head_dim;
    p.rope_layout = c->rope_layout;
    p.scale = 1.0f / sqrtf((float)c->head_dim);
    return p;
}

/* One sequence among a layer's n rows: rows off..off+n-1 at positions pos0..,
 * its keys and values written (KV, n, d) to kh, vh (its own keys in the
 * attention). Several documents recomputed together are several parts. */
struct Part {
    int off, n;
    bf16 *kh, *vh;
    bf16 *own_k, *own_v; /* a query step: the layer's own rows (KV, N, d), where k and v are also appended */
    const lz_decode_params *dec; /* a decode step: its attention by lz_decode_lazy (own rows appended first) */
};

/* Layer l over the n rows of g->x: norm, q / k / v, then for every part
 * rotary (at positions pos0.., k and v into the part's kh, vh) and attention
 * over p's segments and the part's own keys (lazy: lz_prefill_lazy), then o
 * and FFN over all rows; the residual stream updated in place. */
static int layer(lz_llama_gpu *g, int l, int n, int64_t pos0, const int *count, const Part *parts, int n_parts,
                 const lz_prefill_params *p, int lazy, float *qcap, int c0, int cw, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int D = c->dim, H = c->n_heads, KV = c->n_kv_heads, d = c->head_dim, F = c->ffn_dim, Hd = H * d, KVd = KV * d;
    const Layer *w = &g->layers[l];
    cudaStream_t st = g->st;
    int rc;
    /* one row (a decode step): every product by lz_gemv, the norms and the FFN gate fused into
     * the products that read them, q/k/v and gate/up in one launch each, and the attention
     * output read as it is ((H, 1, d) is already token-major) */
    auto fits = [](int in) { return in % 8 == 0 && in <= LZ_GEMV_MAX_IN; };
    const bool one = n == 1 && fits(D) && fits(Hd) && fits(F);
    if (one) {
        const lz_gemv_mat m[3] = {{(const lz_bf16 *)w->wq, g->q, Hd}, {(const lz_bf16 *)w->wk, g->q + Hd, KVd},
                                  {(const lz_bf16 *)w->wv, g->q + Hd + KVd, KVd}};
        if ((rc = lz_gemv_rmsnorm(m, 3, g->x, w->attn_norm, c->norm_eps, D, 0.f, st))) return fail(err, errlen, "q/k/v", rc);
    } else {
        lz_op_rmsnorm((lz_bf16 *)g->xb, g->x, w->attn_norm, n, D, c->norm_eps, st);
        if ((rc = gemm(g, g->q, g->xb, w->wq, n, D, Hd + 2 * KVd, 0.f))) /* rows q | k | v */
            return fail(err, errlen, "cuBLAS q/k/v", rc);
    }
    /* one part on the layer's stream; several side by side on the side streams (a recomputed
     * document's attention alone fills a fraction of the GPU) */
    const int n_side = n_parts > 1 && g->side[0] ? (n_parts < LZ_GPU_SIDE ? n_parts : LZ_GPU_SIDE) : 0;
    if (n_side) {
        CUDA_OK(cudaEventRecord(g->fork, st), "fork");
        for (int j = 0; j < n_side; j++) CUDA_OK(cudaStreamWaitEvent(g->side[j], g->fork, 0), "fork");
    }
    for (int i = 0; i < n_parts; i++) { /* a part's q and output: (H, n, d) from row off * H * d */
        const Part &pt = parts[i];
        cudaStream_t ps = n_side ? g->side[i % n_side] : st;
        const size_t qo = (size_t)pt.off * Hd;
        const float *row = g->q + (size_t)pt.off * (Hd + 2 * KVd);
        if (pt.own_k)
            rc = lz_op_heads_own((lz_bf16 *)(g->qh + qo), (lz_bf16 *)pt.kh, (lz_bf16 *)pt.vh, (lz_bf16 *)pt.own_k,
                                 (lz_bf16 *)pt.own_v, g->max_tokens, row, row + Hd, row + Hd + KVd, Hd + 2 * KVd, pt.n, H,
                                 KV, d, pos0, count, c->rope_layout, g->inv_freq, ps);
        else
            rc = lz_op_heads((lz_bf16 *)(g->qh + qo), (lz_bf16 *)pt.kh, (lz_bf16 *)pt.vh, row, row + Hd, row + Hd + KVd,
                             Hd + 2 * KVd, pt.n, H, KV, d, pos0, count, c->rope_layout, g->inv_freq, qcap, c0, cw, ps);
        if (rc) return fail(err, errlen, "rotary", rc);
        lz_prefill_params pp = *p;
        if (n_side) { /* this stream's slot of the workspace */
            pp.work = (float *)((char *)g->work + (size_t)(i % n_side) * g->work_slot);
            pp.work_bytes = g->work_slot;
        }
        pp.q = (const lz_bf16 *)(g->qh + qo);
        pp.o = (lz_bf16 *)(g->oh + qo);
        pp.n_rows = pt.n;
        pp.k_self = (const lz_bf16 *)pt.kh;
        pp.v_self = (const lz_bf16 *)pt.vh;
        if (pt.dec) rc = lz_decode_lazy(pt.dec, ps);
        else rc = lazy ? lz_prefill_lazy(&pp, ps) : lz_prefill(&pp, ps);
        if (rc) return fail(err, errlen, "attention", rc);
        if (!one) lz_op_tokens((lz_bf16 *)(g->ot + qo), (const lz_bf16 *)(g->oh + qo), pt.n, H, d, ps);
    }
    for (int j = 0; j < n_side; j++) {
        CUDA_OK(cudaEventRecord(g->join[j], g->side[j]), "join");
        CUDA_OK(cudaStreamWaitEvent(st, g->join[j], 0), "join");
    }
    if ((rc = gemm(g, g->x, one ? g->oh : g->ot, w->wo, n, Hd, D, 1.f))) return fail(err, errlen, "o projection", rc);
    if (one) {
        const lz_gemv_mat m[2] = {{(const lz_bf16 *)w->wg, g->gate, F}, {(const lz_bf16 *)w->wu, g->gate + F, F}};
        const lz_gemv_mat md = {(const lz_bf16 *)w->wd, g->x, D};
        if ((rc = lz_gemv_rmsnorm(m, 2, g->x, w->ffn_norm, c->norm_eps, D, 0.f, st))) return fail(err, errlen, "gate/up", rc);
        if ((rc = lz_gemv_silu(&md, 1, g->gate, g->gate + F, F, 1.f, st))) return fail(err, errlen, "down projection", rc);
        return 0;
    }
    lz_op_rmsnorm((lz_bf16 *)g->xb, g->x, w->ffn_norm, n, D, c->norm_eps, st);
    if ((rc = gemm(g, g->gate, g->xb, w->wg, n, D, 2 * F, 0.f))) return fail(err, errlen, "cuBLAS gate/up", rc); /* rows gate | up */
    lz_op_swiglu((lz_bf16 *)g->hb, g->gate, n, F, st);
    if ((rc = gemm(g, g->x, g->hb, w->wd, n, F, D, 1.f))) return fail(err, errlen, "down projection", rc);
    return 0;
}

/* The attention workspace for p (grown, never shrunk). */
static int ensure_work(lz_llama_gpu *g, lz_prefill_params *p, char *err, size_t errlen)
{
    int dev, n_sm;
    CUDA_OK(cudaGetDevice(&dev), "device");
    CUDA_OK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev), "device");
    size_t need = lz_prefill_workspace(p, lz_prefill_splits(p, n_sm));
    if (g->side[0]) { /* LZ_GPU_SIDE slots of 256-byte aligned size, one for each side stream */
        need = (need + 255) / 256 * 256;
        g->work_slot = need > g->work_slot ? need : g->work_slot;
        need = g->work_slot * LZ_GPU_SIDE;
    }
    if (need > g->work_bytes) {
        if (g->decode) cudaGraphExecDestroy(g->decode); /* it points at the old workspace */
        g->decode = NULL;
        cudaFree(g->work);
        g->work = NULL;
        g->work_bytes = 0;
        CUDA_OK(cudaMalloc((void **)&g->work, need), "attention workspace");
        g->work_bytes = need;
    }
    p->work = g->work;
    p->work_bytes = g->work_bytes;
    return 0;
}

extern "C" int lz_llama_gpu_encode(lz_llama_gpu *g, const int *ids, int n, lz_kv_cache *out, float *qwin, int c0, int cw,
                                   char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int D = c->dim, KV = c->n_kv_heads, d = c->head_dim, L = c->n_layers, KVd = KV * d;
    if (n <= 0 || n > g->max_tokens || n > out->cap) {
        snprintf(err, errlen, "GPU: %d tokens (at most %d, cache %d)", n, g->max_tokens, out->cap);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab) { snprintf(err, errlen, "token id %d out of range", ids[i]); return -1; }
    if (ensure_ingest(g, err, errlen)) return -1;
    if (!qwin || cw <= 0) cw = 0;
    if (cw && (c0 < 0 || c0 + cw > n)) { snprintf(err, errlen, "GPU: capture rows %d..%d of %d", c0, c0 + cw, n); return -1; }
    const size_t wq_n = (size_t)L * cw * c->n_heads * d;
    if (wq_n > g->wq_n) {
        cudaFree(g->wq);
        g->wq = NULL;
        g->wq_n = 0;
        CUDA_OK(cudaMalloc((void **)&g->wq, wq_n * sizeof(float)), "window queries");
        g->wq_n = wq_n;
    }
    cudaStream_t st = g->st;
    CUDA_OK(cudaMemcpyAsync(g->ids, ids, (size_t)n * sizeof(int), cudaMemcpyHostToDevice, st), "ids");
    lz_op_embed(g->x, (const lz_bf16 *)g->tok_embd, g->ids, n, D, st);
    lz_prefill_params p = attn_params(g, n);
    p.n_seg = g->s > 0;
    p.seg_len = g->dlen;
    p.seg_keys = g->s;
    if (ensure_work(g, &p, err, errlen)) return -1;
    for (int l = 0; l < L; l++) {
        p.segs = g->dsegs + l;
        float *qc = cw ? g->wq + (size_t)l * cw * c->n_heads * d : NULL;
        const Part part = {0, n, g->kall + (size_t)l * n * KVd, g->vall + (size_t)l * n * KVd};
        if (layer(g, l, n, g->s, NULL, &part, 1, &p, 0, qc, c0, cw, err, errlen)) return -1;
    }
    CUDA_OK(cudaGetLastError(), "kernel launch");
    const size_t per = (size_t)L * n * KVd;
    CUDA_OK(cudaMemcpyAsync(g->host16, g->kall, per * 2, cudaMemcpyDeviceToHost, st), "K read-back");
    CUDA_OK(cudaMemcpyAsync(g->host16 + per, g->vall, per * 2, cudaMemcpyDeviceToHost, st), "V read-back");
    if (cw) CUDA_OK(cudaMemcpyAsync(qwin, g->wq, wq_n * sizeof(float), cudaMemcpyDeviceToHost, st), "window queries");
    CUDA_OK(cudaStreamSynchronize(st), "forward pass");
    const uint16_t *hk = (const uint16_t *)g->host16, *hv = hk + per;
    /* (L, KV, n, d) -> the cache's (L, KV, cap, d), widened on every thread (an 8B model's
     * document of 160 tokens is 21 MB of bf16) */
#pragma omp parallel for schedule(static) if (per > ((size_t)1 << 20))
    for (int lh = 0; lh < L * KV; lh++)
        for (size_t e = 0; e < (size_t)n * d; e++) {
            out->k[(size_t)lh * out->cap * d + e] = lz_bf16_to_f32(hk[(size_t)lh * n * d + e]);
            out->v[(size_t)lh * out->cap * d + e] = lz_bf16_to_f32(hv[(size_t)lh * n * d + e]);
        }
    out->n = n;
    out->pos0 = g->s;
    return 0;
}

/* ---- query side ---- */

/* kept rows of segment sg at (layer l, kv head h) */
static int seg_kept(const lz_kv_segment *sg, int l, int h, int KV)
{
    return sg->n_kept ? sg->n_kept[l * KV + h] : sg->n;
}


static size_t doc_bytes(const lz_llama_gpu *g, const GpuDoc *x) { return x->rows * g->cfg.head_dim * 2 * 2; }

/* Removes doc i (the last one takes its place). */
static void doc_drop(lz_llama_gpu *g, int i)
{
    if (g->docs[i].keyed) g->used_bytes -= doc_bytes(g, &g->docs[i]);
    doc_free(&g->docs[i]);
    g->docs[i] = g->docs[--g->n_docs];
}

/* A new doc x: kept rows per (layer, kv head) as segment sg keeps them (sg
 * NULL: n each, a document stored whole), a layer's heads padded to its
 * longest, and room for its K and V on the device (one row at least). */
static int doc_alloc(const lz_llama_gpu *g, const lz_kv_segment *sg, int n, GpuDoc *x, char *err, size_t errlen)
{
    const int L = g->cfg.n_layers, KV = g->cfg.n_kv_heads, d = g->cfg.head_dim;
    memset(x, 0, sizeof *x);
    x->cap = (int *)malloc((size_t)L * sizeof(int));
    x->first = (size_t *)malloc((size_t)L * sizeof(size_t));
    x->kept = (int32_t *)malloc((size_t)L * KV * sizeof(int32_t));
    if (!x->cap || !x->first || !x->kept) { doc_free(x); snprintf(err, errlen, "out of memory"); return -1; }
    for (int l = 0; l < L; l++) {
        int most = 0;
        for (int h = 0; h < KV; h++) {
            x->kept[l * KV + h] = sg ? seg_kept(sg, l, h, KV) : n;
            most = x->kept[l * KV + h] > most ? x->kept[l * KV + h] : most;
        }
        x->cap[l] = most;
        x->first[l] = x->rows;
        x->rows += (size_t)KV * most;
        x->keys = most > x->keys ? most : x->keys;
    }
    const size_t bytes = (x->rows ? x->rows : 1) * d * 2;
    cudaError_t ce = cudaMalloc((void **)&x->k, bytes);
    if (ce == cudaSuccess) ce = cudaMalloc((void **)&x->v, bytes);
    if (ce != cudaSuccess) {
        doc_free(x);
        snprintf(err, errlen, "GPU: no memory for a document of %d tokens (%zu rows of K and V): %s", x->keys,
                 x->rows, cudaGetErrorString(ce));
        return -1;
    }
    return 0;
}

/* Uploads segment sg (bf16 or fp32, packed heads padded per layer) into a new doc. */
static int doc_upload(lz_llama_gpu *g, const lz_kv_segment *sg, GpuDoc *x, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int L = c->n_layers, KV = c->n_kv_heads, d = c->head_dim;
    if (doc_alloc(g, sg, 0, x, err, errlen)) return -1;
    const size_t n = (x->rows ? x->rows : 1) * d;
    /* bf16 rows already where the device wants them (every head of a layer keeps as many
     * rows, packed in order: a document stored whole) go up as they are; others through a
     * staging copy, heads in parallel (an 8B model's document is ~20 MB) */
    bool direct = sg->k16 && x->rows > 0;
    for (int lh = 0; direct && lh < L * KV; lh++) {
        const int l = lh / KV, h = lh % KV;
        direct = x->kept[lh] == x->cap[l] && lz_kv_segment_block(sg, l, h, KV, d) == (x->first[l] + (size_t)h * x->cap[l]) * d;
    }
    uint16_t *stage = direct ? NULL : (uint16_t *)malloc(n * 2 * 2);
    if (!direct && !stage) { doc_free(x); snprintf(err, errlen, "out of memory"); return -1; }
    const uint16_t *sk = direct ? sg->k16 : stage, *sv = direct ? sg->v16 : stage + n;
    if (!direct) {
#pragma omp parallel for schedule(dynamic, 4) if (n > ((size_t)1 << 20))
        for (int lh = 0; lh < L * KV; lh++) {
            const int l = lh / KV, h = lh % KV, kept = x->kept[lh];
            const size_t src = lz_kv_segment_block(sg, l, h, KV, d), dst = (x->first[l] + (size_t)h * x->cap[l]) * d;
            uint16_t *dk = stage + dst, *dv = stage + n + dst;
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
    }
    cudaError_t ce = cudaMemcpy(x->k, sk, n * 2, cudaMemcpyHostToDevice);
    if (ce == cudaSuccess) ce = cudaMemcpy(x->v, sv, n * 2, cudaMemcpyHostToDevice);
    free(stage);
    if (ce != cudaSuccess) {
        doc_free(x);
        snprintf(err, errlen, "GPU: uploading a document: %s", cudaGetErrorString(ce));
        return -1;
    }
    return 0;
}

extern "C" void lz_llama_gpu_set_cache(lz_llama_gpu *g, size_t bytes) { g->cache_bytes = bytes; }

extern "C" void lz_llama_gpu_cache_stats(const lz_llama_gpu *g, long *hits, long *misses, size_t *bytes)
{
    *hits = g->hits;
    *misses = g->misses;
    *bytes = g->used_bytes;
}

/* The keyed doc with content key key, or -1. */
static int doc_find(const lz_llama_gpu *g, const uint8_t *key)
{
    for (int i = 0; key && i < g->n_docs; i++)
        if (g->docs[i].keyed && !memcmp(g->docs[i].key, key, 32)) return i;
    return -1;
}

/* Room for one more doc in g->docs; 0 or -1. */
static int doc_room(lz_llama_gpu *g, char *err, size_t errlen)
{
    if (g->n_docs < g->cap_docs) return 0;
    int cap = g->cap_docs ? 2 * g->cap_docs : 64;
    GpuDoc *d2 = (GpuDoc *)realloc(g->docs, (size_t)cap * sizeof *d2);
    if (!d2) { snprintf(err, errlen, "out of memory"); return -1; }
    g->docs = d2;
    g->cap_docs = cap;
    return 0;
}

/* Adds x (its id set here) for question `used`, keyed by key when not NULL. */
static void doc_add(lz_llama_gpu *g, GpuDoc *x, const uint8_t *key, uint64_t used)
{
    x->used = used;
    x->id = ++g->next_id;
    if (key) {
        memcpy(x->key, key, 32);
        x->keyed = 1;
        g->used_bytes += doc_bytes(g, x);
    }
    g->docs[g->n_docs++] = *x;
}

/* The doc of segment sg for this question: resident under key, else uploaded
 * (keyed ones kept within the budget, least recently used out first;
 * unkeyed ones dropped at the next question). Its id in *id; 0 or -1. */
static int doc_for(lz_llama_gpu *g, const lz_kv_segment *sg, const uint8_t *key, uint64_t *id, char *err, size_t errlen)
{
    const int at = doc_find(g, key);
    if (at >= 0) {
        GpuDoc *x = &g->docs[at];
        x->used = g->question;
        if (x->fresh) g->misses++; /* recomputed for this question: not found, made */
        else g->hits++;
        x->fresh = 0;
        *id = x->id;
        return 0;
    }
    if (key) g->misses++;
    GpuDoc x;
    if (doc_room(g, err, errlen) || doc_upload(g, sg, &x, err, errlen)) return -1;
    doc_add(g, &x, key, g->question);
    *id = x.id;
    return 0;
}

extern "C" int lz_llama_gpu_resident(const lz_llama_gpu *g, const uint8_t key[32]) { return doc_find(g, key) >= 0; }

/* ---- documents recomputed on the query side ---- */

/* The prefix doc's descriptors for the recomputing passes (every call: the doc may have moved). */
static int prefix_descriptors(lz_llama_gpu *g, const GpuDoc *pre, char *err, size_t errlen)
{
    const int L = g->cfg.n_layers, KV = g->cfg.n_kv_heads, d = g->cfg.head_dim;
    if (!g->esegs) {
        CUDA_OK(cudaMalloc((void **)&g->esegs, (size_t)L * sizeof(lz_attn_segment)), "descriptors");
        if (cudaMalloc((void **)&g->elen, (size_t)L * KV * sizeof(int32_t)) != cudaSuccess) {
            cudaFree(g->esegs);
            g->esegs = NULL;
            snprintf(err, errlen, "GPU: no memory for descriptors");
            return -1;
        }
    }
    lz_attn_segment *hs = (lz_attn_segment *)malloc((size_t)L * sizeof *hs);
    if (!hs) { snprintf(err, errlen, "out of memory"); return -1; }
    for (int l = 0; l < L; l++)
        hs[l] = (lz_attn_segment){(const lz_bf16 *)(pre->k + pre->first[l] * d), (const lz_bf16 *)(pre->v + pre->first[l] * d),
                                  0, pre->cap[l]};
    cudaError_t ce = cudaMemcpy(g->esegs, hs, (size_t)L * sizeof *hs, cudaMemcpyHostToDevice);
    free(hs);
    if (ce == cudaSuccess) ce = cudaMemcpy(g->elen, pre->kept, (size_t)L * KV * sizeof(int32_t), cudaMemcpyHostToDevice);
    CUDA_OK(ce, "uploading the prefix descriptors");
    return 0;
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
    if (!g->side[0]) { /* the side streams, at the first call: the documents' attention side by side */
        CUDA_OK(cudaEventCreateWithFlags(&g->fork, cudaEventDisableTiming), "events");
        for (int i = 0; i < LZ_GPU_SIDE; i++) {
            CUDA_OK(cudaStreamCreateWithFlags(&g->side[i], cudaStreamNonBlocking), "streams");
            CUDA_OK(cudaEventCreateWithFlags(&g->join[i], cudaEventDisableTiming), "events");
        }
    }
    /* the question about to begin uses them all: nothing it needs is evicted before it */
    const uint64_t used = g->question + 1;
    int at = doc_find(g, prefix_key);
    if (at < 0) { /* the prefix, kept like a document (the question's begin finds it) */
        GpuDoc x;
        if (doc_room(g, err, errlen) || doc_upload(g, prefix, &x, err, errlen)) return -1;
        x.fresh = 1;
        doc_add(g, &x, prefix_key, used);
        at = g->n_docs - 1;
    }
    g->docs[at].used = used;
    if (prefix_descriptors(g, &g->docs[at], err, errlen)) return -1;
    const int64_t s = prefix->n;
    lz_prefill_params p = attn_params(g, 1);
    p.n_seg = 1;
    p.seg_keys = g->docs[at].keys;
    int *hid = (int *)malloc((size_t)N * sizeof(int));
    Part *parts = (Part *)malloc((size_t)(n_docs > 0 ? n_docs : 1) * sizeof *parts);
    GpuDoc *xs = (GpuDoc *)calloc((size_t)(n_docs > 0 ? n_docs : 1), sizeof *xs);
    int *todo = (int *)malloc((size_t)(n_docs > 0 ? n_docs : 1) * sizeof(int));
    int rc = -1, n_todo = 0;
    if (!hid || !parts || !xs || !todo) { snprintf(err, errlen, "out of memory"); goto done; }
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
        int made = b0, ok = 1;
        for (; ok && made < b1; made++) ok = !doc_alloc(g, NULL, n[todo[made]], &xs[made], err, errlen);
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
            for (int j = b0, off = 0; j < b1; off += n[todo[j]], j++) {
                const size_t at_l = (size_t)l * KV * n[todo[j]] * d;
                parts[j - b0] = (Part){off, n[todo[j]], xs[j].k + at_l, xs[j].v + at_l};
            }
            ok = !layer(g, l, rows, s, NULL, parts, b1 - b0, &p, 0, NULL, 0, 0, err, errlen);
        }
        cudaError_t ce = cudaGetLastError();
        if (ce == cudaSuccess) ce = cudaStreamSynchronize(g->st);
        if (ok && ce != cudaSuccess) {
            snprintf(err, errlen, "GPU: recomputing documents: %s", cudaGetErrorString(ce));
            ok = 0;
        }
        for (int j = b0; j < made; j++) {
            if (ok && !doc_room(g, err, errlen)) {
                xs[j].fresh = 1;
                doc_add(g, &xs[j], keys[todo[j]], used);
            } else {
                ok = 0;
                doc_free(&xs[j]);
            }
        }
        if (!ok) goto done;
    }
    rc = 0;
done:
    free(hid);
    free(parts);
    free(xs);
    free(todo);
    return rc;
}

/* Evicts keyed docs this question does not use, least recently used first,
 * until the budget holds (this question's own stay even past it). */
static void doc_trim(lz_llama_gpu *g)
{
    while (g->used_bytes > g->cache_bytes) {
        int lru = -1;
        for (int i = 0; i < g->n_docs; i++)
            if (g->docs[i].keyed && g->docs[i].used != g->question && (lru < 0 || g->docs[i].used < g->docs[lru].used))
                lru = i;
        if (lru < 0) return;
        doc_drop(g, lru);
    }
}

/* A decode step's lz_decode_params for layer l (g->dec set). */
static lz_decode_params decode_params(const lz_llama_gpu *g, int l)
{
    const lz_llama_config *c = &g->cfg;
    const size_t at = (size_t)l * c->n_kv_heads * g->dNB;
    lz_decode_params p;
    memset(&p, 0, sizeof p);
    p.o = (lz_bf16 *)g->oh;
    p.q = (const lz_bf16 *)g->qh;
    p.k_pool = (const lz_bf16 *)g->dk0;
    p.v_pool = (const lz_bf16 *)g->dv0;
    p.blocks = g->dwords ? g->dwords + at : NULL;
    p.v_rows = g->dvrows ? g->dvrows + at : NULL;
    p.n_blocks = g->dnb ? g->dnb + (size_t)l * c->n_kv_heads : NULL;
    p.inv_freq = g->inv_freq;
    p.max_blocks = g->dNB;
    p.batch = 1;
    p.n_heads = c->n_heads;
    p.n_kv_heads = c->n_kv_heads;
    p.head_dim = c->head_dim;
    p.rope_layout = c->rope_layout;
    p.scale = 1.0f / sqrtf((float)c->head_dim);
    p.work = g->dwork;
    p.work_bytes = g->dwork_bytes;
    p.n_split = g->dsplit;
    return p;
}

/* The block words of a question whose segments hs (L, S + 1; the last the own rows) were just
 * set: per (layer, kv head), each segment's kept rows at its offset, then the own rows in full
 * 64-key blocks (each step counts those in use: lz_op_own_words). Leaves g->dec = 0 (decode by
 * lz_prefill_lazy) where rows or offsets exceed the words' fields, or with LAZY_GPU_DECODE=prefill
 * (A/B). */
static int decode_words(lz_llama_gpu *g, const lz_attn_segment *hs, int S, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int L = c->n_layers, KV = c->n_kv_heads, d = c->head_dim, N = g->max_tokens, W = S + 1;
    const char *mode = getenv("LAZY_GPU_DECODE");
    g->dec = 0;
    if (mode && !strcmp(mode, "prefill")) return 0;
    g->dsplit = mode ? atoi(mode) : 0; /* A/B: LAZY_GPU_DECODE=<parts> */
    if (g->dsplit < 0 || g->dsplit > LZ_DECODE_MAX_SPLIT) g->dsplit = 0;
    const bf16 *k0 = g->own_k, *v0 = g->own_v;
    int NB = 0;
    for (int l = 0; l < L; l++)
        for (int h = 0; h < KV; h++) {
            int n = (N + LZ_DECODE_BLOCK - 1) / LZ_DECODE_BLOCK;
            for (int s = 0; s < S; s++) {
                const lz_attn_segment *sg = &hs[l * W + s];
                k0 = (const bf16 *)sg->k < k0 ? (const bf16 *)sg->k : k0;
                v0 = (const bf16 *)sg->v < v0 ? (const bf16 *)sg->v : v0;
                n += (g->hqlen[((size_t)l * W + s) * KV + h] + LZ_DECODE_BLOCK - 1) / LZ_DECODE_BLOCK;
            }
            NB = n > NB ? n : NB;
        }
    /* words, values' rows and the fixed counts in one pinned buffer, one copy on the stream
     * (ordered before the question's step; the previous question's copy is done by now) */
    const size_t nw = (size_t)L * KV * NB, bytes = nw * 16 + (size_t)L * KV * 8;
    CUDA_OK(cudaStreamSynchronize(g->st), "decode block words");
    if (bytes > g->dcap) {
        cudaFree(g->dwords);
        if (g->hdw) cudaFreeHost(g->hdw);
        g->dwords = g->hdw = NULL, g->dcap = 0;
        CUDA_OK(cudaMalloc((void **)&g->dwords, bytes), "decode block words");
        CUDA_OK(cudaMallocHost((void **)&g->hdw, bytes), "decode block words");
        g->dcap = bytes;
    }
    g->dvrows = g->dwords + nw;
    g->dnf = (int32_t *)(g->dvrows + nw);
    g->dnb = g->dnf + L * KV;
    uint64_t *w = g->hdw, *vr = w + nw;
    int32_t *nf = (int32_t *)(vr + nw);
    memset(w, 0, nw * 16);
    int fits = 1;
    for (int lh = 0; fits && lh < L * KV; lh++) {
        const int l = lh / KV, h = lh % KV;
        int n = 0;
        for (int s = 0; fits && s <= S; s++) { /* s == S: the own rows, every block full */
            const lz_attn_segment *sg = &hs[l * W + s];
            const ptrdiff_t dk = (const bf16 *)sg->k - k0, dv = (const bf16 *)sg->v - v0;
            const int64_t len = s < S ? g->hqlen[((size_t)l * W + s) * KV + h] : N;
            fits = dk % d == 0 && dv % d == 0;
            if (s == S) nf[lh] = n;
            fits = fits && !lz_decode_add_segment_kv(w + (size_t)lh * NB, vr + (size_t)lh * NB, &n, NB,
                                                     (uint64_t)(dk / d) + (uint64_t)h * sg->cap,
                                                     (uint64_t)(dv / d) + (uint64_t)h * sg->cap, len, sg->offset);
        }
    }
    if (!fits) return 0;
    CUDA_OK(cudaMemcpyAsync(g->dwords, w, nw * 16 + (size_t)L * KV * 4, cudaMemcpyHostToDevice, g->st),
            "decode block words");
    g->dNB = NB;
    g->dk0 = k0;
    g->dv0 = v0;
    /* the split-KV workspace, zeroed once (the kernel leaves its counters at zero) */
    int n_sm = 0, dev = 0;
    CUDA_OK(cudaGetDevice(&dev), "device");
    CUDA_OK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev), "device");
    lz_decode_params p = decode_params(g, 0);
    const size_t wbytes = lz_decode_workspace(&p, lz_decode_splits(&p, n_sm));
    if (wbytes > g->dwork_bytes) {
        cudaFree(g->dwork);
        g->dwork = NULL, g->dwork_bytes = 0;
        CUDA_OK(cudaMalloc((void **)&g->dwork, wbytes), "decode workspace");
        CUDA_OK(cudaMemset(g->dwork, 0, wbytes), "decode workspace");
        g->dwork_bytes = wbytes;
    }
    g->dec = 1;
    return 0;
}

extern "C" int lz_llama_gpu_begin(lz_llama_gpu *g, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs,
                                  int64_t pos0, char *err, size_t errlen)
{
    g->ready = 0; /* until this question is set up */
    const lz_llama_config *c = &g->cfg;
    const int L = c->n_layers, KV = c->n_kv_heads, d = c->head_dim, N = g->max_tokens;
    if (n_segs < 0 || n_segs + 1 > LZ_PREFILL_MAX_SEG) {
        snprintf(err, errlen, "GPU: %d segments (at most %d)", n_segs, LZ_PREFILL_MAX_SEG - 1);
        return -1;
    }
    if (ensure_query(g, err, errlen)) return -1;
    for (int i = g->n_docs - 1; i >= 0; i--) /* the previous question's unkeyed segments */
        if (!g->docs[i].keyed) doc_drop(g, i);
    g->question++;
    if (n_segs + 1 > g->qcap) {
        cudaFree(g->qsegs);
        cudaFree(g->qlen);
        free(g->hqlen);
        g->qsegs = NULL, g->qlen = NULL, g->hqlen = NULL, g->qcap = 0;
        CUDA_OK(cudaMalloc((void **)&g->qsegs, (size_t)L * (n_segs + 1) * sizeof(lz_attn_segment)), "descriptors");
        CUDA_OK(cudaMalloc((void **)&g->qlen, (size_t)L * (n_segs + 1) * KV * sizeof(int32_t)), "descriptors");
        if (!(g->hqlen = (int32_t *)malloc((size_t)L * (n_segs + 1) * KV * sizeof(int32_t)))) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        g->qcap = n_segs + 1;
    }
    const int S = n_segs, W = S + 1;
    lz_attn_segment *hs = (lz_attn_segment *)malloc((size_t)L * W * sizeof *hs);
    uint64_t *ids = (uint64_t *)malloc((size_t)(S ? S : 1) * sizeof *ids);
    if (!hs || !ids) { free(hs); free(ids); snprintf(err, errlen, "out of memory"); return -1; }
    int64_t keys_hint = 0;
    for (int i = 0; i < S; i++) /* every doc first: uploads and evictions move entries */
        if (doc_for(g, &segs[i], keys ? keys[i] : NULL, &ids[i], err, errlen)) { free(hs); free(ids); return -1; }
    doc_trim(g);
    for (int i = 0; i < S; i++) {
        int at = 0;
        while (g->docs[at].id != ids[i]) at++; /* present: this question's docs are never evicted */
        const GpuDoc *x = &g->docs[at];
        keys_hint += x->keys;
        for (int l = 0; l < L; l++) {
            hs[l * W + i] = (lz_attn_segment){(const lz_bf16 *)(x->k + x->first[l] * d),
                                              (const lz_bf16 *)(x->v + x->first[l] * d), segs[i].rot, x->cap[l]};
            for (int h = 0; h < KV; h++) g->hqlen[((size_t)l * W + i) * KV + h] = x->kept[l * KV + h];
        }
    }
    free(ids);
    for (int l = 0; l < L; l++) { /* the own sequence: (KV, N, d) a layer, empty so far */
        hs[l * W + S] = (lz_attn_segment){(const lz_bf16 *)(g->own_k + (size_t)l * KV * N * d),
                                          (const lz_bf16 *)(g->own_v + (size_t)l * KV * N * d), 0, N};
        for (int h = 0; h < KV; h++) g->hqlen[((size_t)l * W + S) * KV + h] = 0;
    }
    cudaError_t ce = cudaMemcpy(g->qsegs, hs, (size_t)L * W * sizeof *hs, cudaMemcpyHostToDevice);
    if (ce == cudaSuccess) /* the kept lengths; the own sequence's are set by each step on the device */
        ce = cudaMemcpy(g->qlen, g->hqlen, (size_t)L * W * KV * sizeof(int32_t), cudaMemcpyHostToDevice);
    const int rc = ce == cudaSuccess ? decode_words(g, hs, S, err, errlen) : 0;
    free(hs);
    CUDA_OK(ce, "uploading the descriptors");
    if (rc) return -1;
    g->S = S;
    g->n_own = 0;
    g->pos0 = pos0;
    g->seg_keys = keys_hint + N; /* with the longest own sequence: one split plan for every step */
    if (g->decode) cudaGraphExecDestroy(g->decode);
    g->decode = NULL;
    CUDA_OK(cudaMemsetAsync(g->dn_own, 0, sizeof(int), g->st), "reset");
    g->ready = 1;
    return 0;
}

/* The attention parameters of a query step of n rows. */
static lz_prefill_params step_params(const lz_llama_gpu *g, int n)
{
    lz_prefill_params p = attn_params(g, n);
    p.self_offset = 0; /* own keys are rotated at their final positions */
    p.n_seg = g->S + 1;
    p.seg_keys = g->seg_keys;
    return p;
}

/* Enqueues one query step of n rows whose ids are in g->hids: every position
 * and length it needs is read from g->dn_own on the device, so the same work
 * replays as a graph. want: the last row's logits into g->hlogits. */
static int step_body(lz_llama_gpu *g, int n, int want, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int D = c->dim, KV = c->n_kv_heads, d = c->head_dim, L = c->n_layers, V = c->vocab;
    const int N = g->max_tokens, W = g->S + 1;
    cudaStream_t st = g->st;
    CUDA_OK(cudaMemcpyAsync(g->ids, g->hids, (size_t)n * sizeof(int), cudaMemcpyHostToDevice, st), "ids");
    lz_op_own_len(g->qlen, L, W, g->S, KV, g->dn_own, st); /* the tokens so far: a segment at offset 0 */
    lz_op_embed(g->x, (const lz_bf16 *)g->tok_embd, g->ids, n, D, st);
    lz_prefill_params p = step_params(g, n);
    p.work = g->work;
    p.work_bytes = g->work_bytes;
    const bool dec = n == 1 && g->dec; /* the attention by lz_decode_lazy over the block words */
    if (dec) lz_op_own_words(g->dwords, g->dnb, g->dnf, L * KV, g->dNB, g->dn_own, n, st);
    for (int l = 0; l < L; l++) {
        p.segs = g->qsegs + (size_t)l * W;
        p.seg_len = g->qlen + (size_t)l * W * KV;
        const size_t own = (size_t)l * KV * N * d; /* this step's keys and values join the sequence there */
        const lz_decode_params dp = decode_params(g, l);
        const Part part = {0, n, g->tk, g->tv, g->own_k + own, g->own_v + own, dec ? &dp : NULL};
        if (layer(g, l, n, g->pos0, g->dn_own, &part, 1, &p, 1, NULL, 0, 0, err, errlen)) return -1;
    }
    lz_op_count_add(g->dn_own, n, st);
    if (want) { /* the last row: final norm, output head */
        const float *last = g->x + (size_t)(n - 1) * D;
        int rc;
        if (D % 8 == 0 && D <= LZ_GEMV_MAX_IN) { /* the final norm fused into the head's product */
            const lz_gemv_mat m = {(const lz_bf16 *)g->out_w, g->logits, V};
            rc = lz_gemv_rmsnorm(&m, 1, last, g->out_norm, c->norm_eps, D, 0.f, st);
        } else {
            lz_op_rmsnorm((lz_bf16 *)g->xb, last, g->out_norm, 1, D, c->norm_eps, st);
            rc = gemm(g, g->logits, g->xb, g->out_w, 1, D, V, 0.f);
        }
        if (rc) return fail(err, errlen, "output head", rc);
        CUDA_OK(cudaMemcpyAsync(g->hlogits, g->logits, (size_t)V * sizeof(float), cudaMemcpyDeviceToHost, st), "logits");
    }
    return 0;
}

extern "C" int lz_llama_gpu_step(lz_llama_gpu *g, const int *ids, int n, float *logits, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int V = c->vocab, N = g->max_tokens;
    if (!g->ready) { snprintf(err, errlen, "GPU: a step without a successful lz_llama_gpu_begin"); return -1; }
    if (n <= 0 || n > N || g->n_own + n > N) {
        snprintf(err, errlen, "GPU: %d more tokens after %d (at most %d)", n, g->n_own, N);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V) { snprintf(err, errlen, "token id %d out of range", ids[i]); return -1; }
    cudaStream_t st = g->st;
    CUDA_OK(cudaStreamSynchronize(st), "forward pass"); /* g->hids is free again */
    memcpy(g->hids, ids, (size_t)n * sizeof(int));
    lz_prefill_params p = step_params(g, n);
    if (ensure_work(g, &p, err, errlen)) return -1;
    if (n == 1 && logits) { /* decode: one captured graph, replayed for every token of the answer */
        if (!g->decode) {
            cudaGraph_t graph;
            CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed), "graph capture");
            const int rc = step_body(g, 1, 1, err, errlen);
            const cudaError_t ce = cudaStreamEndCapture(st, &graph);
            if (rc) { if (ce == cudaSuccess) cudaGraphDestroy(graph); return -1; }
            CUDA_OK(ce, "graph capture");
            const cudaError_t ie = cudaGraphInstantiate(&g->decode, graph, 0);
            cudaGraphDestroy(graph);
            CUDA_OK(ie, "graph instantiation");
        }
        CUDA_OK(cudaGraphLaunch(g->decode, st), "graph launch");
    } else if (step_body(g, n, logits != NULL, err, errlen)) {
        return -1;
    }
    CUDA_OK(cudaGetLastError(), "kernel launch");
    CUDA_OK(cudaStreamSynchronize(st), "forward pass");
    g->n_own += n;
    if (logits) memcpy(logits, g->hlogits, (size_t)V * sizeof(float));
    return 0;
}

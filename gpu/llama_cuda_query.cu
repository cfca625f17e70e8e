/* llama_cuda_query.cu - a question on the GPU (llama_cuda.h): begin (its
 * documents resident, the attention's segment descriptors, and lz_decode's
 * block words over them and the own rows) and its steps: the question's rows
 * over the placed documents (lz_prefill_lazy), then one captured CUDA graph
 * a decode token (products by lz_gemv, attention by lz_decode_lazy). State:
 * llama_gpu.cuh. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/lz_gemv.h"
#include "kernels/lz_ops.h"
#include "gpu/llama_gpu.cuh"

namespace lzgpu {

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
    g->dec = 0;
    if (g->env_dec_prefill) return 0; /* A/B: LAZY_GPU_DECODE=prefill, taken at lz_llama_gpu_new */
    g->dsplit = g->env_dsplit;        /* A/B: LAZY_GPU_DECODE=<parts> */
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

static int begin(lz_llama_gpu *g, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs, int64_t pos0,
                 char *err, size_t errlen);

extern "C" int lz_llama_gpu_begin(lz_llama_gpu *g, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs,
                                  int64_t pos0, char *err, size_t errlen)
{
    g->materialise = 0;
    return begin(g, segs, keys, n_segs, pos0, err, errlen);
}

extern "C" int lz_llama_gpu_begin_block(lz_llama_gpu *g, const lz_kv_segment *segs, const uint8_t *const *keys,
                                        int n_segs, int64_t pos0, char *err, size_t errlen)
{
    g->materialise = 1;
    const int rc = begin(g, segs, keys, n_segs, pos0, err, errlen);
    g->materialise = 0;
    return rc;
}

/* A question's begin; g->materialise: block mode (every segment attended at offset 0, a copy
 * rotated to its placement made where it is not resident). */
static int begin(lz_llama_gpu *g, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs, int64_t pos0,
                 char *err, size_t errlen)
{
    g->ready = 0; /* until this question is set up */
    const lz_llama_config *c = &g->cfg;
    const int L = c->n_layers, KV = c->n_kv_heads, d = c->head_dim, N = g->max_tokens;
    if (n_segs < 0 || n_segs + 1 > LZ_PREFILL_MAX_SEG) {
        snprintf(err, errlen, "GPU: %d segments (at most %d)", n_segs, LZ_PREFILL_MAX_SEG - 1);
        return -1;
    }
    if (ensure_query(g, err, errlen)) return -1;
    if (g->layer_wait) { /* the last question's copies, never waited for by a step */
        CUDA_OK(cudaStreamSynchronize(g->cp), "the last question's copies");
        g->layer_wait = 0;
    }
    if (doc_question(g, err, errlen)) return -1;
    if (n_segs + 1 > g->qcap) {
        cudaFree(g->qsegs);
        cudaFree(g->qlen);
        cudaFree(g->qcs);
        free(g->hqlen);
        g->qsegs = NULL, g->qlen = NULL, g->qcs = NULL, g->hqlen = NULL, g->qcap = 0;
        CUDA_OK(cudaMalloc((void **)&g->qsegs, (size_t)L * (n_segs + 1) * sizeof(lz_attn_segment)), "descriptors");
        CUDA_OK(cudaMalloc((void **)&g->qlen, (size_t)L * (n_segs + 1) * KV * sizeof(int32_t)), "descriptors");
        CUDA_OK(cudaMalloc((void **)&g->qcs, (size_t)(n_segs + 2) * d * sizeof(float)), "descriptors");
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
    /* every key pinned first (an upload's evictions must not take a document this question uses
     * and that came without its data), then every doc found or uploaded: entries move */
    uint8_t *cached = (uint8_t *)calloc((size_t)(S ? S : 1), 1);
    if (!cached) { free(hs); free(ids); snprintf(err, errlen, "out of memory"); return -1; }
    for (int i = 0; i < S; i++) cached[i] = (uint8_t)doc_pin(g, keys ? keys[i] : NULL);
    for (int i = 0; i < S; i++)
        if (doc_for(g, &segs[i], keys ? keys[i] : NULL, cached[i], &ids[i], err, errlen)) {
            g->n_upq = 0; /* the queued copies dropped with the question */
            cudaStreamSynchronize(g->st); /* the copies begun read the caller's memory: done before it goes */
            free(cached);
            free(hs);
            free(ids);
            return -1;
        }
    free(cached);
    doc_trim(g); /* a lowered budget: what this question does not use leaves */
    for (int i = 0; i < S; i++) {
        const GpuDoc *x = &g->docs[doc_by_id(g, ids[i])]; /* present: this question's docs are pinned or its own */
        keys_hint += x->keys;
        for (int l = 0; l < L; l++) {
            hs[l * W + i] = (lz_attn_segment){(const lz_bf16 *)(x->k + x->first[l] * d),
                                              (const lz_bf16 *)(x->v + x->first[l] * d),
                                              g->materialise ? 0 : segs[i].rot, x->cap[l]};
            for (int h = 0; h < KV; h++) g->hqlen[((size_t)l * W + i) * KV + h] = x->kept[l * KV + h];
        }
    }
    free(ids);
    for (int l = 0; l < L; l++) { /* the own sequence: (KV, N, d) a layer, empty so far */
        hs[l * W + S] = (lz_attn_segment){(const lz_bf16 *)(g->own_k + (size_t)l * KV * N * d),
                                          (const lz_bf16 *)(g->own_v + (size_t)l * KV * N * d), 0, N};
        for (int h = 0; h < KV; h++) g->hqlen[((size_t)l * W + S) * KV + h] = 0;
    }
    /* the prefill's cos/sin of every slot (the documents', then the own sequence and the
     * step's own keys at 0), the same for every layer: the kernel need not compute them */
    int64_t *offs = (int64_t *)malloc((size_t)W * sizeof *offs);
    float *cs = (float *)malloc((size_t)(W + 1) * d * sizeof *cs);
    cudaError_t ce = offs && cs ? cudaSuccess : cudaErrorMemoryAllocation;
    if (ce == cudaSuccess) {
        for (int i = 0; i < W; i++) offs[i] = i < S && !g->materialise ? segs[i].rot : 0;
        lz_prefill_rope_table(cs, offs, W, 0, g->m->inv_freq, d);
        ce = cudaMemcpy(g->qcs, cs, (size_t)(W + 1) * d * sizeof *cs, cudaMemcpyHostToDevice);
    }
    free(offs);
    free(cs);
    if (ce == cudaSuccess) ce = cudaMemcpy(g->qsegs, hs, (size_t)L * W * sizeof *hs, cudaMemcpyHostToDevice);
    if (ce == cudaSuccess) /* the kept lengths; the own sequence's are set by each step on the device */
        ce = cudaMemcpy(g->qlen, g->hqlen, (size_t)L * W * KV * sizeof(int32_t), cudaMemcpyHostToDevice);
    const int rc = ce == cudaSuccess ? decode_words(g, hs, S, err, errlen) : 0;
    free(hs);
    if (ce != cudaSuccess || rc) g->n_upq = 0; /* no copy begun */
    CUDA_OK(ce, "uploading the descriptors");
    if (rc) return -1;
    /* the documents' copies last: every other host-to-device copy of the question is done (they
     * would queue behind these on the copy engine), and its steps read their token ids from
     * pinned host memory, not by a copy */
    if (upload_layers(g, err, errlen)) {
        g->n_upq = 0;
        if (g->cp) cudaStreamSynchronize(g->cp); /* those begun read the caller's memory */
        g->layer_wait = 0;
        return -1;
    }
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
    p.rope_cs = g->qcs;
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
    lz_op_own_len(g->qlen, L, W, g->S, KV, g->dn_own, st); /* the tokens so far: a segment at offset 0 */
    /* the ids read where they are, in pinned host memory (a copy would queue behind the
     * documents' copies on the copy engine) */
    lz_op_embed(g->x, (const lz_bf16 *)g->tok_embd, g->hids, n, D, st);
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
        if (upload_wait(g, l, err, errlen) || layer(g, l, n, g->pos0, g->dn_own, &part, 1, &p, 1, err, errlen)) return -1;
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
    lz_gemv_tune(g->gemv_bps, g->gemv_silu_bps); /* this engine's grids (LAZY_GPU_GEMV; 0, 0: the defaults) */
    memcpy(g->hids, ids, (size_t)n * sizeof(int));
    lz_prefill_params p = step_params(g, n);
    if (ensure_work(g, &p, err, errlen)) return -1;
    if (n == 1 && logits && g->layer_wait) { /* the copies done before a capture (whose waits they are not) */
        CUDA_OK(cudaStreamWaitEvent(st, g->lev[c->n_layers - 1], 0), "waiting for the copies");
        g->layer_wait = 0;
    }
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
    g->layer_wait = 0; /* the step waited for every layer's copies */
    CUDA_OK(cudaGetLastError(), "kernel launch");
    CUDA_OK(cudaStreamSynchronize(st), "forward pass");
    g->n_own += n;
    if (logits) memcpy(logits, g->hlogits, (size_t)V * sizeof(float));
    return 0;
}

} /* namespace lzgpu */

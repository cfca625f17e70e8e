/* llama_cuda_query.cu - a question on the GPU in one slot (llama_cuda.h):
 * begin (its documents resident and pinned, the attention's segment
 * descriptors, and lz_decode's block words over them and the own rows) and
 * its steps: the question's rows over the placed documents (lz_prefill_lazy),
 * then one captured CUDA graph a decode token (products by lz_gemv, attention
 * by lz_decode_lazy). Several slots in one pass: llama_cuda_batch.cu. State:
 * llama_gpu.cuh.
 *
 * Legend: L = layers, KV = kv heads, d = head_dim, N = a slot's own rows, S =
 * segments, W = S + 1, V = vocabulary.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/lz_gemv.h"
#include "kernels/lz_ops.h"
#include "gpu/llama_gpu.cuh"

namespace lzgpu {

/* A decode step's lz_decode_params for layer l of slot s (s->dec set). */
static lz_decode_params decode_params(const lz_llama_gpu *g, const Slot *s, int l)
{
    const lz_llama_config *c = &g->cfg;
    const size_t at = (size_t)l * c->n_kv_heads * s->dNB;
    lz_decode_params p;
    memset(&p, 0, sizeof p);
    p.o = (lz_bf16 *)g->oh;
    p.q = (const lz_bf16 *)g->qh;
    p.k_pool = (const lz_bf16 *)s->dk0;
    p.v_pool = (const lz_bf16 *)s->dv0;
    p.blocks = s->dwords ? s->dwords + at : NULL;
    p.v_rows = s->dwords ? s->dvrows + at : NULL;
    p.n_blocks = s->dwords ? s->dnb + (size_t)l * c->n_kv_heads : NULL;
    p.inv_freq = g->inv_freq;
    p.max_blocks = s->dNB;
    p.batch = 1;
    p.n_heads = c->n_heads;
    p.n_kv_heads = c->n_kv_heads;
    p.head_dim = c->head_dim;
    p.rope_layout = c->rope_layout;
    p.scale = 1.0f / sqrtf((float)c->head_dim);
    p.work = g->dwork;
    p.work_bytes = g->dwork_bytes;
    p.n_split = s->dsplit;
    p.pdl = 1; /* after the rotary kernel: its first blocks read while that kernel runs */
    if (s->dks) { /* fp8 segments: their blocks' rows count from dk08 / dv08 */
        p.k_pool8 = s->dk08;
        p.v_pool8 = s->dv08;
        p.k_scales = s->dks + at;
        p.v_scales = s->dvs + at;
    }
    return p;
}

int ensure_dwork(lz_llama_gpu *g, const lz_decode_params *p, char *err, size_t errlen)
{
    int n_sm = 0, dev = 0;
    CUDA_OK(cudaGetDevice(&dev), "device");
    CUDA_OK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev), "device");
    const size_t wbytes = lz_decode_workspace(p, lz_decode_splits(p, n_sm));
    if (wbytes <= g->dwork_bytes) return 0;
    graphs_drop(g); /* they point at the old one */
    CUDA_OK(cudaStreamSynchronize(g->st), "decode workspace");
    cudaFree(g->dwork);
    g->dwork = NULL, g->dwork_bytes = 0;
    CUDA_OK(cudaMalloc((void **)&g->dwork, wbytes), "decode workspace");
    CUDA_OK(cudaMemset(g->dwork, 0, wbytes), "decode workspace"); /* the kernel leaves its counters at zero */
    g->dwork_bytes = wbytes;
    return 0;
}

/* The block words of slot s whose segments hs (L, S + 1; the last the own rows) were just
 * set: per (layer, kv head), each segment's kept rows at its offset, then the own rows in full
 * 64-key blocks (each step counts those in use: lz_op_own_words). An fp8 segment's blocks (hsc[i]
 * its host scales (2, L, KV), NULL for bf16) count rows from the fp8 segments' lowest address and
 * carry their scales (dks, dvs). Leaves s->dec = 0 (decode by lz_prefill_lazy) where rows or
 * offsets exceed the words' fields, or with LAZY_GPU_DECODE=prefill (A/B). */
static int decode_words(lz_llama_gpu *g, Slot *s, const lz_attn_segment *hs, const float *const *hsc, int S, char *err,
                        size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int L = c->n_layers, KV = c->n_kv_heads, d = c->head_dim, N = s->N, W = S + 1;
    s->dec = 0;
    if (g->env_dec_prefill) return 0; /* A/B: LAZY_GPU_DECODE=prefill, taken at lz_llama_gpu_new */
    s->dsplit = g->env_dsplit;        /* A/B: LAZY_GPU_DECODE=<parts> */
    const bf16 *k0 = s->own_k, *v0 = s->own_v;
    const uint8_t *k08 = NULL, *v08 = NULL;
    int NB = 0;
    for (int i = 0; i < S; i++) {
        const lz_attn_segment *sg = &hs[i]; /* layer 0's: the lowest address of every layer's */
        if (sg->k8) {
            k08 = !k08 || sg->k8 < k08 ? sg->k8 : k08;
            v08 = !v08 || sg->v8 < v08 ? sg->v8 : v08;
        } else {
            k0 = (const bf16 *)sg->k < k0 ? (const bf16 *)sg->k : k0;
            v0 = (const bf16 *)sg->v < v0 ? (const bf16 *)sg->v : v0;
        }
    }
    for (int l = 0; l < L; l++)
        for (int h = 0; h < KV; h++) {
            int n = (N + LZ_DECODE_BLOCK - 1) / LZ_DECODE_BLOCK;
            for (int i = 0; i < S; i++)
                n += (s->hqlen[((size_t)l * W + i) * KV + h] + LZ_DECODE_BLOCK - 1) / LZ_DECODE_BLOCK;
            NB = n > NB ? n : NB;
        }
    /* words, values' rows, the fixed counts (and fp8's scales) in one pinned buffer, one copy on
     * the stream (ordered before the question's step; the previous question's copy is done by now) */
    const size_t nw = (size_t)L * KV * NB, counts = (size_t)L * KV * 8, scales = k08 ? nw * 8 : 0;
    const size_t bytes = nw * 16 + counts + scales;
    CUDA_OK(cudaStreamSynchronize(g->st), "decode block words");
    if (bytes > s->dcap) {
        cudaFree(s->dwords);
        if (s->hdw) cudaFreeHost(s->hdw);
        s->dwords = s->hdw = NULL, s->dcap = 0;
        CUDA_OK(cudaMalloc((void **)&s->dwords, bytes), "decode block words");
        CUDA_OK(cudaMallocHost((void **)&s->hdw, bytes), "decode block words");
        s->dcap = bytes;
    }
    s->dvrows = s->dwords + nw;
    s->dnf = (int32_t *)(s->dvrows + nw);
    s->dnb = s->dnf + L * KV;
    s->dks = k08 ? (float *)(void *)(s->dnb + L * KV) : NULL;
    s->dvs = k08 ? s->dks + nw : NULL;
    uint64_t *w = s->hdw, *vr = w + nw;
    int32_t *nf = (int32_t *)(vr + nw);
    float *ks = (float *)(void *)(nf + 2 * L * KV), *vs = ks + nw;
    memset(w, 0, nw * 16);
    if (k08) memset(ks, 0, scales); /* bf16 blocks: scale 0 */
    uint64_t kspan = 0, vspan = 0, kspan8 = 0, vspan8 = 0;
    int fits = 1;
    for (int lh = 0; fits && lh < L * KV; lh++) {
        const int l = lh / KV, h = lh % KV;
        int n = 0;
        for (int i = 0; fits && i <= S; i++) { /* i == S: the own rows, every block full */
            const lz_attn_segment *sg = &hs[l * W + i];
            const int64_t len = i < S ? s->hqlen[((size_t)l * W + i) * KV + h] : N;
            const uint64_t hr = (uint64_t)s->hqrow[((size_t)l * W + i) * KV + h]; /* the head's first row there */
            if (i == S) nf[lh] = n;
            if (sg->k8) {
                const ptrdiff_t dk = sg->k8 - k08, dv = sg->v8 - v08;
                fits = dk % d == 0 && dv % d == 0;
                const uint64_t kr = (uint64_t)(dk / d) + hr, vrw = (uint64_t)(dv / d) + hr;
                const size_t at = (size_t)lh * NB;
                fits = fits && !lz_decode_add_segment_fp8(w + at, vr + at, ks + at, vs + at, &n, NB, kr, vrw, len,
                                                          sg->offset, hsc[i][lh], hsc[i][L * KV + lh]);
                kspan8 = kr + len > kspan8 ? kr + len : kspan8;
                vspan8 = vrw + len > vspan8 ? vrw + len : vspan8;
                continue;
            }
            const ptrdiff_t dk = (const bf16 *)sg->k - k0, dv = (const bf16 *)sg->v - v0;
            fits = dk % d == 0 && dv % d == 0;
            const uint64_t kr = (uint64_t)(dk / d) + hr, vrw = (uint64_t)(dv / d) + hr;
            fits = fits && !lz_decode_add_segment_kv(w + (size_t)lh * NB, vr + (size_t)lh * NB, &n, NB, kr, vrw, len,
                                                     sg->offset);
            kspan = kr + len > kspan ? kr + len : kspan;
            vspan = vrw + len > vspan ? vrw + len : vspan;
        }
    }
    if (!fits) {
        s->dks = s->dvs = NULL;
        return 0;
    }
    /* the words, values' rows and fixed counts, then (fp8) the scales after the blocks in use */
    CUDA_OK(cudaMemcpyAsync(s->dwords, w, nw * 16 + (size_t)L * KV * 4, cudaMemcpyHostToDevice, g->st),
            "decode block words");
    if (k08) CUDA_OK(cudaMemcpyAsync(s->dks, ks, scales, cudaMemcpyHostToDevice, g->st), "decode block scales");
    s->dNB = NB;
    s->dk0 = k0;
    s->dv0 = v0;
    s->dk08 = k08;
    s->dv08 = v08;
    s->kspan = kspan;
    s->vspan = vspan;
    s->kspan8 = kspan8;
    s->vspan8 = vspan8;
    /* the split-KV workspace for one sequence (a batch sizes its own) */
    const lz_decode_params p = decode_params(g, s, 0);
    if (ensure_dwork(g, &p, err, errlen)) return -1;
    s->dec = 1;
    return 0;
}

/* Slot s's descriptor arrays for S segments (grown, never shrunk). 0 or -1. */
static int slot_descriptors(lz_llama_gpu *g, Slot *s, int S, char *err, size_t errlen)
{
    const int L = g->cfg.n_layers, KV = g->cfg.n_kv_heads, d = g->cfg.head_dim;
    if (S + 1 <= s->qcap) return 0;
    cudaFree(s->qsegs);
    cudaFree(s->qlen);
    cudaFree(s->qcs);
    free(s->hqlen);
    s->qsegs = NULL, s->qlen = NULL, s->qcs = NULL, s->hqlen = NULL, s->qrow = NULL, s->hqrow = NULL, s->qcap = 0;
    const size_t nl = (size_t)L * (S + 1) * KV; /* lengths, then rows (qrow, hqrow: the arrays' second halves) */
    CUDA_OK(cudaMalloc((void **)&s->qsegs, (size_t)L * (S + 1) * sizeof(lz_attn_segment)), "descriptors");
    CUDA_OK(cudaMalloc((void **)&s->qlen, 2 * nl * sizeof(int32_t)), "descriptors");
    CUDA_OK(cudaMalloc((void **)&s->qcs, (size_t)(S + 2) * d * sizeof(float)), "descriptors");
    s->qrow = s->qlen + nl;
    if (!(s->hqlen = (int32_t *)malloc(2 * nl * sizeof(int32_t)))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->hqrow = s->hqlen + nl;
    s->qcap = S + 1;
    return 0;
}

/* A question's begin in slot s; block: Block-Attention (every segment attended at offset 0, a
 * copy rotated to its placement made where it is not resident). 0, -1, or LZ_LLAMA_GPU_ENOMEM
 * when a step of it found no memory; on failure s is released. */
int slot_begin(lz_llama_gpu *g, Slot *s, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs,
               int64_t pos0, int block, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int L = c->n_layers, KV = c->n_kv_heads, d = c->head_dim, N = s->N;
    if (n_segs < 0 || n_segs + 1 > LZ_PREFILL_MAX_SEG) {
        slot_unpin(g, s); /* a failed begin leaves the slot released */
        snprintf(err, errlen, "GPU: %d segments (at most %d)", n_segs, LZ_PREFILL_MAX_SEG - 1);
        return -1;
    }
    /* what s held before released (copies still in flight into its own docs finished first) */
    int why = doc_question(g, s, err, errlen); /* a failing step's status (rc stays -1 until done) */
    if (why) return why;
    s->live = 1; /* from here its documents are pinned (a failure releases them) */
    const int S = n_segs, W = S + 1;
    lz_attn_segment *hs = NULL;
    uint64_t *ids = NULL;
    uint8_t *cached = NULL;
    const float **hsc = NULL;
    int64_t *offs = NULL;
    float *cs = NULL;
    int64_t keys_hint = 0;
    int rc = -1, copies = 0;
    cudaError_t ce = cudaSuccess;
    if ((why = slot_descriptors(g, s, S, err, errlen))) goto fail;
    hs = (lz_attn_segment *)malloc((size_t)L * W * sizeof *hs);
    ids = (uint64_t *)malloc((size_t)(S ? S : 1) * sizeof *ids);
    cached = (uint8_t *)calloc((size_t)(S ? S : 1), 1);
    hsc = (const float **)calloc((size_t)(S ? S : 1), sizeof *hsc);
    if (!hs || !ids || !cached || !hsc) {
        snprintf(err, errlen, "out of memory");
        why = LZ_LLAMA_GPU_ENOMEM;
        goto fail;
    }
    /* every key pinned first (an upload's evictions must not take a document this question uses
     * and that came without its data), then every doc found or uploaded: entries move */
    for (int i = 0; i < S; i++) cached[i] = (uint8_t)doc_pin(g, keys ? keys[i] : NULL);
    g->materialise = block;
    copies = 1;
    for (int i = 0; i < S; i++)
        if ((why = doc_for(g, &segs[i], keys ? keys[i] : NULL, cached[i], &ids[i], err, errlen)) ||
            (why = doc_use(g, s, ids[i], err, errlen))) {
            g->materialise = 0;
            goto fail;
        }
    g->materialise = 0;
    doc_trim(g); /* a lowered budget: what no live question uses leaves */
    s->fp8 = 0;
    for (int i = 0; i < S; i++) {
        const GpuDoc *x = &g->docs[doc_by_id(g, ids[i])]; /* present: pinned by s, or its own */
        keys_hint += x->keys;
        hsc[i] = x->hsc; /* fp8: its scales on the host (alive while s pins x) */
        s->fp8 |= x->k8 != NULL;
        for (int l = 0; l < L; l++) {
            hs[l * W + i] = doc_segment(g, x, l, block ? 0 : segs[i].rot);
            for (int h = 0; h < KV; h++) {
                s->hqlen[((size_t)l * W + i) * KV + h] = x->kept[l * KV + h];
                s->hqrow[((size_t)l * W + i) * KV + h] = x->hrow[l * KV + h];
            }
        }
    }
    for (int l = 0; l < L; l++) { /* the own sequence: (KV, N, d) a layer, empty so far */
        hs[l * W + S] = (lz_attn_segment){(const lz_bf16 *)(s->own_k + (size_t)l * KV * N * d),
                                          (const lz_bf16 *)(s->own_v + (size_t)l * KV * N * d), 0, N};
        for (int h = 0; h < KV; h++) s->hqlen[((size_t)l * W + S) * KV + h] = 0, s->hqrow[((size_t)l * W + S) * KV + h] = h * N;
    }
    /* the prefill's cos/sin of every slot of the table (the documents', then the own sequence
     * and the step's own keys at 0), the same for every layer: the kernel need not compute them */
    offs = (int64_t *)malloc((size_t)W * sizeof *offs);
    cs = (float *)malloc((size_t)(W + 1) * d * sizeof *cs);
    ce = offs && cs ? cudaSuccess : cudaErrorMemoryAllocation;
    if (ce == cudaSuccess) {
        for (int i = 0; i < W; i++) offs[i] = i < S && !block ? segs[i].rot : 0;
        lz_prefill_rope_table(cs, offs, W, 0, g->m->inv_freq, d);
        ce = cudaMemcpy(s->qcs, cs, (size_t)(W + 1) * d * sizeof *cs, cudaMemcpyHostToDevice);
    }
    if (ce == cudaSuccess) ce = cudaMemcpy(s->qsegs, hs, (size_t)L * W * sizeof *hs, cudaMemcpyHostToDevice);
    if (ce == cudaSuccess) /* the kept lengths (the own sequence's are set by each step on the device), then the rows */
        ce = cudaMemcpy(s->qlen, s->hqlen, (size_t)L * W * KV * sizeof(int32_t), cudaMemcpyHostToDevice);
    if (ce == cudaSuccess) ce = cudaMemcpy(s->qrow, s->hqrow, (size_t)L * W * KV * sizeof(int32_t), cudaMemcpyHostToDevice);
    if (ce != cudaSuccess) {
        snprintf(err, errlen, "GPU: uploading the descriptors: %s", cudaGetErrorString(ce));
        goto fail;
    }
    if ((why = decode_words(g, s, hs, hsc, S, err, errlen))) goto fail;
    if ((why = group_slot(g, s, hs, S, err, errlen))) goto fail; /* a batched step's grouped decode */
    /* the documents' copies last: every other host-to-device copy of the question is done (they
     * would queue behind these on the copy engine), and its steps read their token ids from
     * pinned host memory, not by a copy */
    if ((why = upload_layers(g, err, errlen))) goto fail;
    s->S = S;
    s->n_own = 0;
    s->pos0 = pos0;
    s->seg_keys = keys_hint + N; /* with the longest own sequence: one split plan for every step */
    slot_graphs_drop(s);
    ce = cudaMemsetAsync(s->dn_own, 0, sizeof(int), g->st);
    if (ce != cudaSuccess) {
        snprintf(err, errlen, "GPU: reset: %s", cudaGetErrorString(ce));
        goto fail;
    }
    s->ready = 1;
    rc = 0;
fail:
    if (rc && copies) {
        g->n_upq = 0; /* the queued copies dropped with the question */
        cudaStreamSynchronize(g->st); /* the copies begun read the caller's memory: done before it goes */
        if (g->cp) cudaStreamSynchronize(g->cp);
        g->layer_wait = 0;
    }
    if (rc) slot_unpin(g, s);
    free(hs);
    free(ids);
    free(cached);
    free(hsc);
    free(offs);
    free(cs);
    return rc && why == LZ_LLAMA_GPU_ENOMEM ? why : rc;
}

lz_prefill_params step_params(const lz_llama_gpu *g, const Slot *s, int n)
{
    lz_prefill_params p = attn_params(g, n);
    p.self_offset = 0; /* own keys are rotated at their final positions */
    p.n_seg = s->S + 1;
    p.rope_cs = s->qcs;
    p.seg_keys = s->seg_keys;
    p.seg_fp8 = s->fp8;
    return p;
}

/* Enqueues one query step of n rows of slot s whose ids are in g->hids: every position and
 * length it needs is read from s->dn_own on the device, so the same work replays as a graph.
 * want: the last row's logits into g->hlogits; greedy: its greedy tokens (lz_argmax) into
 * g->hbnext (the logits then stay on the device unless want). */
static int step_body(lz_llama_gpu *g, Slot *s, int n, int want, int greedy, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int D = c->dim, KV = c->n_kv_heads, d = c->head_dim, L = c->n_layers, V = c->vocab;
    const int N = s->N, W = s->S + 1;
    cudaStream_t st = g->st;
    lz_op_own_len(s->qlen, L, W, s->S, KV, s->dn_own, st); /* the tokens so far: a segment at offset 0 */
    /* the ids read where they are, in pinned host memory (a copy would queue behind the
     * documents' copies on the copy engine) */
    lz_op_embed(g->x, (const lz_bf16 *)g->tok_embd, g->hids, n, D, st);
    lz_prefill_params p = step_params(g, s, n);
    p.work = g->work;
    p.work_bytes = g->work_bytes;
    const bool dec = n == 1 && s->dec; /* the attention by lz_decode_lazy over the block words */
    if (dec) lz_op_own_words(s->dwords, s->dnb, s->dnf, L * KV, s->dNB, s->dn_own, n, st);
    for (int l = 0; l < L; l++) {
        p.segs = s->qsegs + (size_t)l * W;
        p.seg_len = s->qlen + (size_t)l * W * KV;
        p.seg_row = s->qrow + (size_t)l * W * KV;
        const size_t own = (size_t)l * KV * N * d; /* this step's keys and values join the sequence there */
        const lz_decode_params dp = decode_params(g, s, l);
        Part part;
        memset(&part, 0, sizeof part);
        part.n = n;
        part.kh = g->tk, part.vh = g->tv;
        part.own_k = s->own_k + own, part.own_v = s->own_v + own;
        part.dec = dec ? &dp : NULL;
        part.N = N;
        if (upload_wait(g, l, err, errlen) || layer(g, l, n, s->pos0, s->dn_own, &part, 1, &p, 1, err, errlen)) return -1;
    }
    lz_op_count_add(s->dn_own, n, st);
    if (want || greedy) { /* the last row: final norm, output head */
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
        if (want)
            CUDA_OK(cudaMemcpyAsync(g->hlogits, g->logits, (size_t)V * sizeof(float), cudaMemcpyDeviceToHost, st),
                    "logits");
        if (greedy) {
            if ((rc = lz_argmax(g->bnext, g->logits, 1, V, V, g->dban, st))) return fail(err, errlen, "greedy tokens", rc);
            CUDA_OK(cudaMemcpyAsync(g->hbnext, g->bnext, 2 * sizeof(int), cudaMemcpyDeviceToHost, st), "greedy tokens");
        }
    }
    return 0;
}

int slot_step(lz_llama_gpu *g, Slot *s, const int *ids, int n, float *logits, int *next, char *err, size_t errlen)
{
    const int want = logits || next;
    const lz_llama_config *c = &g->cfg;
    const int V = c->vocab;
    if (!s->ready) { snprintf(err, errlen, "GPU: a step without a successful lz_llama_gpu_begin"); return -1; }
    if (n <= 0 || n > g->max_tokens || s->n_own + n > s->N) {
        snprintf(err, errlen, "GPU: %d more tokens after %d (at most %d a sequence, %d a step)", n, s->n_own, s->N,
                 g->max_tokens);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V) { snprintf(err, errlen, "token id %d out of range", ids[i]); return -1; }
    cudaStream_t st = g->st;
    CUDA_OK(cudaStreamSynchronize(st), "forward pass"); /* g->hids is free again */
    lz_gemv_tune(g->gemv_bps, g->gemv_silu_bps); /* this engine's grids (LAZY_GPU_GEMV; 0, 0: the defaults) */
    memcpy(g->hids, ids, (size_t)n * sizeof(int));
    lz_prefill_params p = step_params(g, s, n);
    if (ensure_work(g, &p, err, errlen)) return -1;
    if (n == 1 && want && g->layer_wait) { /* the copies done before a capture (whose waits they are not) */
        CUDA_OK(cudaStreamWaitEvent(st, g->lev[c->n_layers - 1], 0), "waiting for the copies");
        g->layer_wait = 0;
    }
    if (n == 1 && want) { /* decode: one captured graph, replayed for every token of the answer */
        const int k = logits ? 0 : 1; /* [0] also copies the logits back (and serves both), [1] not */
        if (!s->decode[k]) {
            cudaGraph_t graph;
            CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed), "graph capture");
            const int rc = step_body(g, s, 1, k == 0, 1, err, errlen);
            const cudaError_t ce = cudaStreamEndCapture(st, &graph);
            if (rc) { if (ce == cudaSuccess) cudaGraphDestroy(graph); return -1; }
            CUDA_OK(ce, "graph capture");
            const cudaError_t ie = cudaGraphInstantiate(&s->decode[k], graph, 0);
            cudaGraphDestroy(graph);
            CUDA_OK(ie, "graph instantiation");
        }
        CUDA_OK(cudaGraphLaunch(s->decode[k], st), "graph launch");
    } else if (step_body(g, s, n, logits != NULL, next != NULL, err, errlen)) {
        return -1;
    }
    g->layer_wait = 0; /* the step waited for every layer's copies */
    CUDA_OK(cudaGetLastError(), "kernel launch");
    CUDA_OK(cudaStreamSynchronize(st), "forward pass");
    s->n_own += n;
    if (logits) memcpy(logits, g->hlogits, (size_t)V * sizeof(float));
    if (next) next[0] = g->hbnext[0], next[1] = g->hbnext[1];
    return 0;
}

} /* namespace lzgpu */

using namespace lzgpu;

extern "C" int lz_llama_gpu_begin_slot(lz_llama_gpu *g, int slot, const lz_kv_segment *segs,
                                       const uint8_t *const *keys, int n_segs, int64_t pos0, char *err, size_t errlen)
{
    const int rc = ensure_query(g, err, errlen);
    if (rc) return rc;
    Slot *s = slot_get(g, slot, err, errlen);
    return s ? slot_begin(g, s, segs, keys, n_segs, pos0, 0, err, errlen) : -1;
}

extern "C" int lz_llama_gpu_begin_block_slot(lz_llama_gpu *g, int slot, const lz_kv_segment *segs,
                                             const uint8_t *const *keys, int n_segs, int64_t pos0, char *err,
                                             size_t errlen)
{
    const int rc = ensure_query(g, err, errlen);
    if (rc) return rc;
    Slot *s = slot_get(g, slot, err, errlen);
    return s ? slot_begin(g, s, segs, keys, n_segs, pos0, 1, err, errlen) : -1;
}

extern "C" int lz_llama_gpu_step_slot(lz_llama_gpu *g, int slot, const int *ids, int n, float *logits, char *err,
                                      size_t errlen)
{
    Slot *s = slot_get(g, slot, err, errlen);
    return s ? slot_step(g, s, ids, n, logits, NULL, err, errlen) : -1;
}

extern "C" int lz_llama_gpu_begin(lz_llama_gpu *g, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs,
                                  int64_t pos0, char *err, size_t errlen)
{
    return lz_llama_gpu_begin_slot(g, 0, segs, keys, n_segs, pos0, err, errlen);
}

extern "C" int lz_llama_gpu_begin_block(lz_llama_gpu *g, const lz_kv_segment *segs, const uint8_t *const *keys,
                                        int n_segs, int64_t pos0, char *err, size_t errlen)
{
    return lz_llama_gpu_begin_block_slot(g, 0, segs, keys, n_segs, pos0, err, errlen);
}

extern "C" int lz_llama_gpu_step(lz_llama_gpu *g, const int *ids, int n, float *logits, char *err, size_t errlen)
{
    if (!g->slots) { snprintf(err, errlen, "GPU: a step without a successful lz_llama_gpu_begin"); return -1; }
    return lz_llama_gpu_step_slot(g, 0, ids, n, logits, err, errlen);
}

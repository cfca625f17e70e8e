/* llama_cuda_encode.cu - ingest on the GPU (llama_cuda.h): the prompt
 * prefix uploaded, then documents in multi-document passes (one read of the
 * weights a pass, each document its own causal attention over the prefix on
 * the side streams): a pass is enqueued (encode_start), read back into
 * pinned memory (encode_finish), and its documents fetched by any thread
 * (encoded, encoded_mass), with KV eviction's attention masses of each
 * window made on the device (kernels/lz_kvmass.cu). State: llama_gpu.cuh.
 *
 * Legend: n = tokens, D = width, H/KV = heads, d = head_dim, L = layers,
 * s = prefix tokens.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/lz_fp8_quant.h"
#include "kernels/lz_kvmass.h"
#include "kernels/lz_ops.h"
#include "base/half.h"
#include "gpu/llama_gpu.cuh"

namespace lzgpu {

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

/* Room for need floats in a growable buffer *p of *cap, on the device
 * (pinned = 0) or pinned on the host; its contents are not kept. 0 or -1. */
static int grow_floats(float **p, size_t *cap, size_t need, int pinned)
{
    if (need <= *cap) return 0;
    if (pinned && *p) cudaFreeHost(*p);
    if (!pinned) cudaFree(*p);
    *p = NULL;
    *cap = 0;
    if ((pinned ? cudaMallocHost((void **)p, need * sizeof(float)) : cudaMalloc((void **)p, need * sizeof(float))) !=
        cudaSuccess) {
        *p = NULL;
        return -1;
    }
    *cap = need;
    return 0;
}

/* Room for n EncDoc in *a (capacity *cap); 0 or -1. */
static int enc_room(EncDoc **a, int *cap, int n)
{
    if (n <= *cap) return 0;
    EncDoc *b = (EncDoc *)realloc(*a, (size_t)n * sizeof *b);
    if (!b) return -1;
    *a = b;
    *cap = n;
    return 0;
}

extern "C" int lz_llama_gpu_encode_start(lz_llama_gpu *g, const int *const *ids, const int *n, const int *c0,
                                         const int *cw, int n_docs, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int D = c->dim, H = c->n_heads, KV = c->n_kv_heads, d = c->head_dim, L = c->n_layers, KVd = KV * d;
    g->pend_docs = 0;
    if (n_docs <= 0) { snprintf(err, errlen, "GPU: no documents to encode"); return -1; }
    int rows = 0;
    size_t wq_n = 0;
    for (int i = 0; i < n_docs; i++) {
        if (n[i] <= 0 || n[i] > g->max_tokens - rows) {
            snprintf(err, errlen, "GPU: a document of %d tokens after %d in one pass (at most %d)", n[i], rows, g->max_tokens);
            return -1;
        }
        for (int j = 0; j < n[i]; j++)
            if (ids[i][j] < 0 || ids[i][j] >= c->vocab) { snprintf(err, errlen, "token id %d out of range", ids[i][j]); return -1; }
        const int w = cw && cw[i] > 0 ? cw[i] : 0;
        if (w && (c0[i] < 0 || c0[i] + w > n[i])) {
            snprintf(err, errlen, "GPU: capture rows %d..%d of %d", c0[i], c0[i] + w, n[i]);
            return -1;
        }
        rows += n[i];
        wq_n += (size_t)L * w * H * d;
    }
    if (ensure_ingest(g, err, errlen) || (n_docs > 1 && ensure_side(g, err, errlen))) return -1;
    if (enc_room(&g->pend, &g->pend_cap, n_docs) || enc_room(&g->enc, &g->enc_cap, n_docs)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* the device's windows (the host's grow at the finish: a pass's may still be read) */
    if (grow_floats(&g->wq, &g->wq_n, wq_n, 0)) { snprintf(err, errlen, "GPU: no memory for the window queries"); return -1; }
    Part *parts = (Part *)calloc((size_t)n_docs, sizeof *parts);
    int *hid = (int *)malloc((size_t)rows * sizeof(int));
    if (!parts || !hid) {
        free(parts);
        free(hid);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* KV eviction's masses for a window of the document's last rows, where the kernel runs */
    const bool masses = H / KV <= 8 && (d == 64 || d == 128);
    size_t mass_n = 0;
    for (int i = 0, off = 0; i < n_docs; off += n[i], i++) {
        const int w = cw && cw[i] > 0 ? cw[i] : 0;
        g->pend[i] = (EncDoc){off, n[i], w, i ? g->pend[i - 1].wq + (size_t)L * g->pend[i - 1].cw * H * d : 0, 0, 0};
        if (masses && w && c0[i] + w == n[i]) {
            g->pend[i].mm = w == n[i] ? n[i] : n[i] - w; /* the self window: every token a candidate */
            g->pend[i].mo = mass_n;
            mass_n += (size_t)L * H * g->pend[i].mm; /* (L, KV, G, m) */
        }
        memcpy(hid + off, ids[i], (size_t)n[i] * sizeof(int));
    }
    if (grow_floats(&g->dmass, &g->dmass_n, mass_n, 0)) {
        free(parts);
        free(hid);
        snprintf(err, errlen, "GPU: no memory for the KV eviction masses");
        return -1;
    }
    cudaStream_t st = g->st;
    lz_prefill_params p = attn_params(g, rows);
    p.n_seg = g->s > 0;
    p.seg_len = g->dlen;
    p.seg_keys = g->s;
    int rc = -1;
    for (int i = 0; i < n_docs; i++) { /* every part's workspace (its own slot on a side stream) */
        p.n_rows = n[i];
        if (ensure_work(g, &p, err, errlen)) goto done;
    }
    if (cudaMemcpyAsync(g->ids, hid, (size_t)rows * sizeof(int), cudaMemcpyHostToDevice, st) != cudaSuccess) {
        snprintf(err, errlen, "GPU: ids");
        goto done;
    }
    lz_op_embed(g->x, (const lz_bf16 *)g->tok_embd, g->ids, rows, D, st);
    for (int l = 0; l < L; l++) {
        p.segs = g->dsegs + l;
        for (int i = 0; i < n_docs; i++) { /* document i: (L, KV, n, d) from row off */
            const EncDoc &x = g->pend[i];
            const size_t at = ((size_t)x.off * L + (size_t)l * x.n) * KVd;
            parts[i] = (Part){x.off, x.n, g->kall + at, g->vall + at};
            if (x.cw) {
                parts[i].qcap = g->wq + x.wq + (size_t)l * x.cw * H * d;
                parts[i].c0 = c0[i];
                parts[i].cw = x.cw;
            }
        }
        if (layer(g, l, rows, g->s, NULL, parts, n_docs, &p, 0, err, errlen)) goto done;
    }
    for (int i = 0; i < n_docs; i++) { /* the windows' attention masses over each document's keys */
        const EncDoc &x = g->pend[i];
        if (!x.mm) continue;
        const lz_kvmass_params mp = {g->dmass + x.mo, g->wq + x.wq, (const lz_bf16 *)(g->kall + (size_t)x.off * L * KVd),
                                     (const lz_bf16 *)g->pk, x.n, g->s, g->s, x.n, x.cw, x.mm == x.n ? x.n : 0,
                                     L, H, KV, d};
        const int mrc = lz_kvmass(&mp, st);
        if (mrc) {
            snprintf(err, errlen, "GPU: KV eviction masses failed (%d)", mrc);
            goto done;
        }
    }
    if (cudaGetLastError() != cudaSuccess) {
        snprintf(err, errlen, "GPU: kernel launch");
        goto done;
    }
    g->pend_docs = n_docs;
    g->pend_rows = rows;
    g->pend_wq = wq_n;
    g->pend_mass = mass_n;
    rc = 0;
done:
    free(parts);
    free(hid);
    return rc;
}

void enc_fp8_free(EncFp8 *f)
{
    if (!f) return;
    cudaFree(f->d8), cudaFree(f->dsc), cudaFree(f->dbad);
    cudaFreeHost(f->h8), cudaFreeHost(f->hsc), cudaFreeHost(f->hbad);
    free(f);
}

/* The pending pass's documents quantised to fp8 on the stream (each (part, layer, kv head) a
 * group of n * d values) and queued for the read-back into the pinned buffers. 0 or -1. */
static int quantise_pass(lz_llama_gpu *g, int n_docs, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const size_t L = c->n_layers, KV = c->n_kv_heads, d = c->head_dim, KVd = KV * d;
    const size_t far = L * g->max_tokens * KVd, per = L * g->pend_rows * KVd;
    EncFp8 *f = g->fp8;
    cudaStream_t st = g->st;
    if (!f->d8) {
        CUDA_OK(cudaMalloc((void **)&f->d8, 2 * far), "fp8 planes");
        CUDA_OK(cudaMallocHost((void **)&f->h8, 2 * far), "fp8 planes");
    }
    if (n_docs > f->cap_docs) {
        cudaFree(f->dsc), cudaFree(f->dbad), cudaFreeHost(f->hsc), cudaFreeHost(f->hbad);
        f->dsc = f->hsc = NULL, f->dbad = f->hbad = NULL, f->cap_docs = 0;
        CUDA_OK(cudaMalloc((void **)&f->dsc, (size_t)n_docs * 2 * L * KV * sizeof(float)), "fp8 scales");
        CUDA_OK(cudaMallocHost((void **)&f->hsc, (size_t)n_docs * 2 * L * KV * sizeof(float)), "fp8 scales");
        CUDA_OK(cudaMalloc((void **)&f->dbad, (size_t)n_docs * 2 * sizeof(int)), "fp8 checks");
        CUDA_OK(cudaMallocHost((void **)&f->hbad, (size_t)n_docs * 2 * sizeof(int)), "fp8 checks");
        f->cap_docs = n_docs;
    }
    CUDA_OK(cudaMemsetAsync(f->dbad, 0, (size_t)n_docs * 2 * sizeof(int), st), "fp8 checks");
    for (int i = 0; i < n_docs; i++) {
        const EncDoc &x = g->pend[i];
        const size_t at = (size_t)x.off * L * KVd;
        for (int part = 0; part < 2; part++) {
            const lz_fp8_quant_params q = {f->d8 + part * far + at, f->dsc + ((size_t)i * 2 + part) * L * KV,
                                           f->dbad + i * 2 + part, (const lz_bf16 *)((part ? g->vall : g->kall) + at),
                                           (int64_t)x.n * (int64_t)d, (int)(L * KV)};
            const int rc = lz_fp8_quant(&q, st);
            if (rc) { snprintf(err, errlen, "GPU: fp8 quantisation failed (%d)", rc); return -1; }
        }
    }
    CUDA_OK(cudaMemcpyAsync(f->h8, f->d8, per, cudaMemcpyDeviceToHost, st), "fp8 K read-back");
    CUDA_OK(cudaMemcpyAsync(f->h8 + far, f->d8 + far, per, cudaMemcpyDeviceToHost, st), "fp8 V read-back");
    CUDA_OK(cudaMemcpyAsync(f->hsc, f->dsc, (size_t)n_docs * 2 * L * KV * sizeof(float), cudaMemcpyDeviceToHost, st), "fp8 scales");
    CUDA_OK(cudaMemcpyAsync(f->hbad, f->dbad, (size_t)n_docs * 2 * sizeof(int), cudaMemcpyDeviceToHost, st), "fp8 checks");
    return 0;
}

extern "C" void lz_llama_gpu_set_encode_fp8(lz_llama_gpu *g, int on)
{
    if (!g->fp8 && on) g->fp8 = (lzgpu::EncFp8 *)calloc(1, sizeof *g->fp8);
    if (g->fp8) g->fp8->on = on;
}

extern "C" int lz_llama_gpu_encoded_planes(const lz_llama_gpu *g, int i, int n, int dtype, const void **k, const void **v,
                                           const float **k_scales, const float **v_scales, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const size_t L = c->n_layers, KV = c->n_kv_heads, KVd = KV * c->head_dim, far = L * g->max_tokens * KVd;
    if (i < 0 || i >= g->enc_docs) {
        snprintf(err, errlen, "GPU: document %d of a pass of %d", i, g->enc_docs);
        return -1;
    }
    if (g->enc[i].n != n) {
        snprintf(err, errlen, "GPU: document %d of the pass has %d rows, not %d", i, g->enc[i].n, n);
        return -1;
    }
    const size_t at = (size_t)g->enc[i].off * L * KVd;
    *k_scales = *v_scales = NULL;
    if (dtype == 1 /* LZ_PAYLOAD_DTYPE_BF16 */) {
        if (g->enc_no16) return 0;
        *k = (const uint16_t *)g->host16 + at, *v = (const uint16_t *)g->host16 + far + at;
        return 1;
    }
    if (dtype != 3 /* LZ_PAYLOAD_DTYPE_FP8 */ || !g->fp8 || !g->fp8->on || !g->fp8->h8) return 0;
    const lzgpu::EncFp8 *f = g->fp8;
    for (int part = 0; part < 2; part++)
        if (f->hbad[i * 2 + part]) {
            const int grp = f->hbad[i * 2 + part] - 1;
            snprintf(err, errlen, "a NaN or Inf in %s of layer %d, kv head %d (fp8 would saturate it)", part ? "V" : "K",
                     grp / (int)KV, grp % (int)KV);
            return -1;
        }
    *k = f->h8 + at, *v = f->h8 + far + at;
    *k_scales = f->hsc + (size_t)i * 2 * L * KV, *v_scales = *k_scales + L * KV;
    return 1;
}

extern "C" int lz_llama_gpu_encode_finish(lz_llama_gpu *g, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const size_t L = c->n_layers, KVd = (size_t)c->n_kv_heads * c->head_dim;
    if (!g->pend_docs) { snprintf(err, errlen, "GPU: no pass started"); return -1; }
    g->enc_docs = 0; /* the last pass's results are overwritten now */
    const int n_docs = g->pend_docs;
    g->pend_docs = 0;
    if (grow_floats(&g->hwq, &g->hwq_n, g->pend_wq, 1) || grow_floats(&g->hmass, &g->hmass_n, g->pend_mass, 1)) {
        snprintf(err, errlen, "GPU: no pinned memory for the window queries and masses");
        return -1;
    }
    const size_t per = L * g->pend_rows * KVd, far = L * g->max_tokens * KVd;
    cudaStream_t st = g->st;
    if (g->fp8 && g->fp8->on && quantise_pass(g, n_docs, err, errlen)) return -1;
    g->enc_no16 = g->fp8 && g->fp8->on == 2 && !g->fp8->need16; /* fp8 planes only: no bf16 copy needed */
    if (!g->enc_no16) {
        CUDA_OK(cudaMemcpyAsync(g->host16, g->kall, per * 2, cudaMemcpyDeviceToHost, st), "K read-back");
        CUDA_OK(cudaMemcpyAsync(g->host16 + far, g->vall, per * 2, cudaMemcpyDeviceToHost, st), "V read-back");
    }
    if (g->pend_wq) CUDA_OK(cudaMemcpyAsync(g->hwq, g->wq, g->pend_wq * sizeof(float), cudaMemcpyDeviceToHost, st), "window queries");
    if (g->pend_mass)
        CUDA_OK(cudaMemcpyAsync(g->hmass, g->dmass, g->pend_mass * sizeof(float), cudaMemcpyDeviceToHost, st), "KV eviction masses");
    if (!g->enc_ev) CUDA_OK(cudaEventCreateWithFlags(&g->enc_ev, cudaEventBlockingSync | cudaEventDisableTiming), "events");
    CUDA_OK(cudaEventRecord(g->enc_ev, st), "forward pass");
    CUDA_OK(cudaEventSynchronize(g->enc_ev), "forward pass");
    EncDoc *t = g->enc; /* the pass's documents become the fetchable ones */
    const int tc = g->enc_cap;
    g->enc = g->pend, g->enc_cap = g->pend_cap;
    g->pend = t, g->pend_cap = tc;
    g->enc_docs = n_docs;
    return 0;
}

extern "C" int lz_llama_gpu_encode_many(lz_llama_gpu *g, const int *const *ids, const int *n, const int *c0,
                                        const int *cw, int n_docs, char *err, size_t errlen)
{
    return lz_llama_gpu_encode_start(g, ids, n, c0, cw, n_docs, err, errlen) || lz_llama_gpu_encode_finish(g, err, errlen)
               ? -1
               : 0;
}

extern "C" int lz_llama_gpu_encoded(const lz_llama_gpu *g, int i, lz_kv_cache *out, float *qwin, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int KV = c->n_kv_heads, d = c->head_dim, L = c->n_layers;
    if (i < 0 || i >= g->enc_docs) {
        snprintf(err, errlen, "GPU: document %d of a pass of %d", i, g->enc_docs);
        return -1;
    }
    if (g->enc_no16) {
        snprintf(err, errlen, "GPU: the pass was read back as fp8 planes only (document %d)", i);
        return -1;
    }
    const EncDoc &x = g->enc[i];
    const int n = x.n;
    if (n > out->cap) { snprintf(err, errlen, "GPU: a document of %d tokens into a cache of %d", n, out->cap); return -1; }
    const size_t at = (size_t)x.off * L * KV * d;
    const uint16_t *hk = (const uint16_t *)g->host16 + at, *hv = hk + (size_t)L * g->max_tokens * KV * d;
    /* (L, KV, n, d) -> the cache's (L, KV, cap, d), widened (an 8B model's document of 160
     * tokens is 21 MB of bf16): on every thread when called from one */
#pragma omp parallel for schedule(static) if ((size_t)L * KV * n * d > ((size_t)1 << 20))
    for (int lh = 0; lh < L * KV; lh++)
        for (size_t e = 0; e < (size_t)n * d; e++) {
            out->k[(size_t)lh * out->cap * d + e] = lz_bf16_to_f32(hk[(size_t)lh * n * d + e]);
            out->v[(size_t)lh * out->cap * d + e] = lz_bf16_to_f32(hv[(size_t)lh * n * d + e]);
        }
    if (x.cw && qwin) memcpy(qwin, g->hwq + x.wq, (size_t)L * x.cw * c->n_heads * d * sizeof(float));
    out->n = n;
    out->pos0 = g->s;
    return 0;
}

extern "C" int lz_llama_gpu_encoded_mass(const lz_llama_gpu *g, int i, float *mass)
{
    if (i < 0 || i >= g->enc_docs || !g->enc[i].mm) return 0;
    const EncDoc &x = g->enc[i];
    memcpy(mass, g->hmass + x.mo, (size_t)g->cfg.n_layers * g->cfg.n_heads * x.mm * sizeof(float));
    return 1;
}

extern "C" int lz_llama_gpu_encode(lz_llama_gpu *g, const int *ids, int n, lz_kv_cache *out, float *qwin, int c0, int cw,
                                   char *err, size_t errlen)
{
    if (n <= 0 || n > g->max_tokens || n > out->cap) {
        snprintf(err, errlen, "GPU: %d tokens (at most %d, cache %d)", n, g->max_tokens, out->cap);
        return -1;
    }
    if (!qwin || cw <= 0) cw = 0;
    if (g->fp8) g->fp8->need16 = 1; /* this document is read as bf16 whatever the passes do */
    const int rc = lz_llama_gpu_encode_many(g, &ids, &n, &c0, &cw, 1, err, errlen) ||
                           lz_llama_gpu_encoded(g, 0, out, qwin, err, errlen)
                       ? -1
                       : 0;
    if (g->fp8) g->fp8->need16 = 0;
    return rc;
}

} /* namespace lzgpu */

/* llama_cuda.cu - the forward pass on the GPU (llama_cuda.h): the weights
 * uploaded, the forward layer (ingest's passes: llama_cuda_encode.cu). Per layer: rmsnorm (bf16
 * out) -> q, k, v GEMMs (cuBLAS, bf16 in, fp32 out) -> rotary at absolute
 * positions and head-major bf16 (k and v written where the caller's KV will
 * be read back) -> lz_prefill over the prefix segment and the document's own
 * keys (causal) -> o GEMM added to the fp32 residual -> rmsnorm -> gate, up
 * GEMMs -> silu(gate) * up (bf16) -> down GEMM added. The math is
 * model/forward.c's; base/rope.h is shared; the small kernels are
 * kernels/lz_ops.cu (each with a CPU reference). Ingest's multi-document
 * passes: llama_cuda_encode.cu; the documents resident for questions:
 * llama_cuda_docs.cu; a question's steps: llama_cuda_query.cu;
 * their shared state: llama_gpu.cuh.
 *
 * Legend: n = tokens, D = width, H/KV = heads, d = head_dim, F = FFN width,
 * V = vocabulary, L = layers, s = prefix tokens.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/lz_gemv.h"
#include "kernels/lz_ops.h"
#include "base/env.h"
#include "base/half.h"
#include "gpu/llama_gpu.cuh"
#include "base/rope.h"

namespace lzgpu {

void *dalloc_bytes(lz_llama_gpu *g, size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes > 0 ? bytes : 1) != cudaSuccess) return NULL;
    void **o = (void **)realloc(g->owned, (size_t)(g->n_owned + 1) * sizeof *o);
    if (!o) { cudaFree(p); return NULL; }
    g->owned = o;
    g->owned[g->n_owned++] = p;
    return p;
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
    slots_free(g);
    lz_doc_cache_free(g->pol); /* drops the admitted docs through doc_evicted */
    for (int i = 0; i < g->n_docs; i++) doc_free(g, &g->docs[i]);
    free(g->docs);
    pool_free_all(g);
    cudaFree(g->work);
    cudaFree(g->wq);
    if (g->hwq) cudaFreeHost(g->hwq);
    free(g->enc);
    lzgpu::enc_fp8_free(g->fp8);
    free(g->pend);
    cudaFree(g->dmass);
    if (g->hmass) cudaFreeHost(g->hmass);
    cudaFree(g->esegs);
    cudaFree(g->elen);
    cudaFree(g->dwork);
    for (int i = 0; i < LZ_GPU_SIDE; i++) {
        if (g->side[i]) cudaStreamDestroy(g->side[i]);
        if (g->join[i]) cudaEventDestroy(g->join[i]);
    }
    if (g->fork) cudaEventDestroy(g->fork);
    if (g->enc_ev) cudaEventDestroy(g->enc_ev);
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
    const lz_env *env = lz_env_get(); /* the switches, read once (base/env.h) */
    if (env->error[0]) { snprintf(err, errlen, "%s", env->error); return -1; }
    lz_llama_gpu *g = (lz_llama_gpu *)calloc(1, sizeof *g);
    if (!g) { snprintf(err, errlen, "out of memory"); return -1; }
    g->host_lock_made = !pthread_mutex_init(&g->host_lock, NULL);
    /* benchmarks' A/B: the decode products' grids (LAZY_GPU_GEMV, lz_gemv_tune at each step) and
     * a decode step's attention (LAZY_GPU_DECODE) */
    g->gemv_bps = env->gpu_gemv_bps;
    g->gemv_silu_bps = env->gpu_gemv_silu_bps;
    g->env_dec_prefill = env->gpu_decode_prefill;
    g->env_dsplit = env->gpu_decode_split <= LZ_DECODE_MAX_SPLIT ? env->gpu_decode_split : 0;
    g->env_group = env->gpu_decode_group;
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

/* The query side's buffers (the output head, logits, a step's own rows), at the first question;
 * the slots (the sequences' own rows) are gpu/llama_cuda_slots.cu's. */
int ensure_query(lz_llama_gpu *g, char *err, size_t errlen)
{
    if (g->hids) return ensure_slots(g, err, errlen);
    const lz_llama_config *c = &g->cfg;
    const size_t D = c->dim, N = g->max_tokens, KVd = (size_t)c->n_kv_heads * c->head_dim;
    if ((g->out_w = c->tied_output ? g->tok_embd : upload_mat(g, g->m->output, (size_t)c->vocab * D)) &&
        (g->out_norm = upload_f32(g, g->m->out_norm, D)) && (g->logits = dalloc<float>(g, (size_t)c->vocab)) &&
        (g->dban = dalloc<int>(g, 1 + LZ_ARGMAX_MAX_BAN)) && cudaMemset(g->dban, 0, sizeof(int)) == cudaSuccess &&
        cudaMallocHost((void **)&g->hlogits, (size_t)c->vocab * sizeof(float)) == cudaSuccess &&
        (g->tk = dalloc<bf16>(g, N * KVd)) && (g->tv = dalloc<bf16>(g, N * KVd)) &&
        cudaMallocHost((void **)&g->hids, N * sizeof(int)) == cudaSuccess) {
        stage_free(g); /* the output head is up */
        return ensure_slots(g, err, errlen);
    }
    g->hids = NULL;
    snprintf(err, errlen, "GPU: out of memory for the output head and %d tokens of a question and its answer",
             g->max_tokens);
    return -1;
}

/* Rows a product runs for n rows: n rounded up to a multiple of 64 (at most
 * max_tokens). cuBLAS chooses a kernel for every new shape, about 0.25 ms on
 * the host, plus about 4 ms the first time the process uses that kernel (H200,
 * CUDA 13; bench/kernels/cublas_shapes.cu, bench/RESULTS.md); questions and batches
 * of recomputed documents of every length would each pay it. The extra rows
 * of x hold stale values (possibly not even numbers): a product's output row
 * depends on its own input row only, and nothing reads the extra output rows. */
int gemm_rows(const lz_llama_gpu *g, int n)
{
    if (n <= 1) return n;
    const int r = (n + 63) / 64 * 64;
    return r < g->max_tokens ? r : (n > g->max_tokens ? n : g->max_tokens);
}

/* y (n, out) (+)= x (n, in) @ W (out, in)^T: column-major y^T = W x^T; one
 * row (a decode step, a question's output head) by lz_gemv, which reads the
 * weights at about twice cuBLAS's rate there (tests/cuda/test_gemv.cu). */
int gemm(lz_llama_gpu *g, float *y, const bf16 *x, const bf16 *w, int n, int in, int out, float beta)
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
lz_prefill_params attn_params(const lz_llama_gpu *g, int n)
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

/* Layer l over the n rows of g->x: norm, q / k / v, then for every part
 * rotary (at positions pos0.., k and v into the part's kh, vh) and attention
 * over p's segments and the part's own keys (lazy: lz_prefill_lazy), then o
 * and FFN over all rows; the residual stream updated in place. */
int layer(lz_llama_gpu *g, int l, int n, int64_t pos0, const int *count, const Part *parts, int n_parts,
          const lz_prefill_params *p, int lazy, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int D = c->dim, H = c->n_heads, KV = c->n_kv_heads, d = c->head_dim, F = c->ffn_dim, Hd = H * d, KVd = KV * d;
    const Layer *w = &g->layers[l];
    cudaStream_t st = g->st;
    int rc;
    /* one row (a decode step): every product by lz_gemv, the norms fused into the products
     * that read them and the FFN gate into gate/up's epilogue (lz_gemv_rmsnorm_swiglu), q/k/v
     * and gate/up in one launch each, and the attention output read as it is ((H, 1, d) is
     * already token-major) */
    auto fits = [](int in) { return in % 8 == 0 && in <= LZ_GEMV_MAX_IN; };
    const bool one = n == 1 && fits(D) && fits(Hd) && fits(F);
    /* a decode step of one sequence with its own rows: the rotary and both appends in q/k/v's
     * epilogue (lz_gemv_rmsnorm_rope), bit for bit the product then lz_op_heads_own */
    const bool rope = one && n_parts == 1 && parts[0].own_k;
    /* a part's position and length (a sequence of its own, a slot among several, has its own) and
     * its own rows a head */
    auto part_pos = [&](const Part &pt) { return pt.attn ? pt.pos0 : pos0; };
    auto part_count = [&](const Part &pt) { return pt.attn ? pt.count : count; };
    auto own_rows = [&](const Part &pt) { return pt.N ? pt.N : g->max_tokens; };
    if (rope) {
        const Part &pt = parts[0];
        lz_gemv_rope r = {(const lz_bf16 *)w->wq, (const lz_bf16 *)w->wk, (const lz_bf16 *)w->wv, H, KV, d,
                          c->rope_layout, g->inv_freq, part_pos(pt), part_count(pt),
                          (lz_bf16 *)(g->qh + (size_t)pt.off * Hd), (lz_bf16 *)pt.kh, (lz_bf16 *)pt.vh, (lz_bf16 *)pt.own_k,
                          (lz_bf16 *)pt.own_v, own_rows(pt)};
        if ((rc = lz_gemv_rmsnorm_rope(&r, g->x, w->attn_norm, c->norm_eps, D, st))) return fail(err, errlen, "q/k/v", rc);
    } else if (one) {
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
        const int64_t ppos = part_pos(pt);
        const int *pcount = part_count(pt);
        if (rope) rc = 0; /* done in q/k/v's epilogue */
        else if (pt.own_k)
            rc = lz_op_heads_own((lz_bf16 *)(g->qh + qo), (lz_bf16 *)pt.kh, (lz_bf16 *)pt.vh, (lz_bf16 *)pt.own_k,
                                 (lz_bf16 *)pt.own_v, own_rows(pt), row, row + Hd, row + Hd + KVd,
                                 Hd + 2 * KVd, pt.n, H, KV, d, ppos, pcount, c->rope_layout, g->inv_freq, ps);
        else
            rc = lz_op_heads((lz_bf16 *)(g->qh + qo), (lz_bf16 *)pt.kh, (lz_bf16 *)pt.vh, row, row + Hd, row + Hd + KVd,
                             Hd + 2 * KVd, pt.n, H, KV, d, ppos, pcount, c->rope_layout, g->inv_freq, pt.qcap, pt.c0, pt.cw,
                             ps);
        if (rc) return fail(err, errlen, "rotary", rc);
        lz_prefill_params pp = pt.attn ? *pt.attn : *p;
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
    if (!one) return layer_out(g, l, n, g->ot, err, errlen);
    if ((rc = gemm(g, g->x, g->oh, w->wo, n, Hd, D, 1.f))) return fail(err, errlen, "o projection", rc);
    const lz_gemv_mat md = {(const lz_bf16 *)w->wd, g->x, D};
    /* the silu gate in gate/up's epilogue: down reads h as a plain bf16 row */
    if ((rc = lz_gemv_rmsnorm_swiglu((const lz_bf16 *)w->wg, (const lz_bf16 *)w->wu, F, g->x, w->ffn_norm, c->norm_eps, D,
                                     (lz_bf16 *)g->hb, st)))
        return fail(err, errlen, "gate/up", rc);
    if ((rc = lz_gemv(&md, 1, (const lz_bf16 *)g->hb, F, 1.f, st))) return fail(err, errlen, "down projection", rc);
    return 0;
}

int layer_out(lz_llama_gpu *g, int l, int n, const bf16 *o, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int D = c->dim, F = c->ffn_dim, Hd = c->n_heads * c->head_dim;
    const Layer *w = &g->layers[l];
    int rc;
    if ((rc = gemm(g, g->x, o, w->wo, n, Hd, D, 1.f))) return fail(err, errlen, "o projection", rc);
    lz_op_rmsnorm((lz_bf16 *)g->xb, g->x, w->ffn_norm, n, D, c->norm_eps, g->st);
    if ((rc = gemm(g, g->gate, g->xb, w->wg, n, D, 2 * F, 0.f))) return fail(err, errlen, "cuBLAS gate/up", rc); /* rows gate | up */
    lz_op_swiglu((lz_bf16 *)g->hb, g->gate, n, F, g->st);
    if ((rc = gemm(g, g->x, g->hb, w->wd, n, F, D, 1.f))) return fail(err, errlen, "down projection", rc);
    return 0;
}

/* The attention workspace for p (grown, never shrunk). */
int ensure_work(lz_llama_gpu *g, lz_prefill_params *p, char *err, size_t errlen)
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
        graphs_drop(g); /* they point at the old workspace */
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

/* The side streams several parts of a layer run on (made at the first call). */
int ensure_side(lz_llama_gpu *g, char *err, size_t errlen)
{
    if (g->side[0]) return 0;
    CUDA_OK(cudaEventCreateWithFlags(&g->fork, cudaEventDisableTiming), "events");
    for (int i = 0; i < LZ_GPU_SIDE; i++) {
        CUDA_OK(cudaStreamCreateWithFlags(&g->side[i], cudaStreamNonBlocking), "streams");
        CUDA_OK(cudaEventCreateWithFlags(&g->join[i], cudaEventDisableTiming), "events");
    }
    return 0;
}

void doc_free(lz_llama_gpu *g, GpuDoc *x)
{
    if (x->ext_bytes) pool_give(g, x->ext, x->ext_bytes);
    free(x->hsc);
    free(x->hrow);
    free(x->first);
    free(x->kept);
    memset(x, 0, sizeof *x);
}

} /* namespace lzgpu */

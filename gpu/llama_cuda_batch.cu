/* llama_cuda_batch.cu - several slots in one pass over the weights
 * (llama_cuda.h: lz_llama_gpu_decode_many, lz_llama_gpu_prefill_many):
 *   decode   one token of each of B slots: the products as cuBLAS GEMMs over
 *            B rows, rotary of each row at its own position with its K/V
 *            appended to its slot (batch_heads), lz_decode_lazy with batch B
 *            over block words gathered from the slots' own (batch_words: one
 *            launch a step, rows moved into one pool base; or grouped by
 *            document, llama_cuda_group.cu), the output head
 *            over B rows, each row's greedy tokens (lz_argmax) and the logits
 *            of the rows that want them;
 *   prefill  the questions of several slots: their rows concatenated for the
 *            products, each one's rotary and attention (lz_prefill_lazy over
 *            its own segments) a part of the layer, side by side on streams.
 * One sequence alone goes through llama_cuda_query.cu's path (its decode
 * graph), so a batch of one is the serial engine bit for bit. The small
 * kernels of a batched step are kernels/lz_batch_ops.h's. State: llama_gpu.cuh.
 *
 * Legend: B = slots in the pass, L = layers, H / KV = heads, d = head_dim,
 * D = width, V = vocabulary, NB = block words a (layer, slot, kv head) list.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/lz_gemv.h"
#include "kernels/lz_ops.h"
#include "base/rope.h"
#include "gpu/llama_gpu.cuh"

namespace lzgpu {

/* Copies row i of the pinned logits to out[i] (V floats; NULL: not wanted), rows side by side. */
static void logits_out(const float *h, float *const *out, int n, int V)
{
#pragma omp parallel for schedule(static) if (n > 1)
    for (int i = 0; i < n; i++)
        if (out[i]) memcpy(out[i], h + (size_t)i * V, (size_t)V * sizeof(float));
}

/* The batch's table and pool bases: 1 when every slot's words fit one k_pool / v_pool base
 * (rows within the words' 36 bits, every pointer a whole row from the base; fp8 words the same
 * from one k_pool8 / v_pool8 base, *k08 NULL when no slot has any), else 0 (each then decodes
 * alone). */
static int batch_table(lz_llama_gpu *g, Slot *const *ss, int B, const bf16 **k0, const bf16 **v0, const uint8_t **k08,
                       const uint8_t **v08, int *NB)
{
    const int d = g->cfg.head_dim;
    *k0 = ss[0]->dk0, *v0 = ss[0]->dv0, *NB = 0;
    *k08 = *v08 = NULL;
    for (int b = 0; b < B; b++) {
        const Slot *s = ss[b];
        if (!s->dec) return 0;
        *k0 = s->dk0 < *k0 ? s->dk0 : *k0;
        *v0 = s->dv0 < *v0 ? s->dv0 : *v0;
        *NB = s->dNB > *NB ? s->dNB : *NB;
        if (s->dks) {
            *k08 = !*k08 || s->dk08 < *k08 ? s->dk08 : *k08;
            *v08 = !*v08 || s->dv08 < *v08 ? s->dv08 : *v08;
        }
    }
    for (int b = 0; b < B; b++) {
        const Slot *s = ss[b];
        const ptrdiff_t dk = s->dk0 - *k0, dv = s->dv0 - *v0, ok = s->own_k - *k0, ov = s->own_v - *v0;
        if (dk % d || dv % d || ok % d || ov % d) return 0;
        if ((uint64_t)(dk / d) + s->kspan > LZ_DECODE_MAX_ROW + 1 || (uint64_t)(dv / d) + s->vspan > LZ_DECODE_MAX_ROW + 1)
            return 0;
        ptrdiff_t dk8 = 0, dv8 = 0;
        if (s->dks) {
            dk8 = s->dk08 - *k08, dv8 = s->dv08 - *v08;
            if (dk8 % d || dv8 % d) return 0;
            if ((uint64_t)(dk8 / d) + s->kspan8 > LZ_DECODE_MAX_ROW + 1 ||
                (uint64_t)(dv8 / d) + s->vspan8 > LZ_DECODE_MAX_ROW + 1)
                return 0;
        }
        g->hbseq[b] = (BatchSeq){s->dwords, s->dvrows, s->dnf, s->dNB, s->N, dk / d, dv / d, ok / d, ov / d,
                                 (lz_bf16 *)s->own_k, (lz_bf16 *)s->own_v, s->pos0, s->dn_own,
                                 s->dks, s->dvs, dk8 / d, dv8 / d};
    }
    return 1;
}

/* One decode token of each of ss[0..B) (B >= 2, checked) in one pass; logits[i] (NULL: not
 * wanted) and next[2i..2i+1] (next NULL: not wanted) row i's: 1 when done, 0 when the slots'
 * words do not share one base (nothing run), -1 on error, LZ_LLAMA_GPU_ENOMEM when there is no
 * device memory for the block words. */
static int decode_batch(lz_llama_gpu *g, Slot *const *ss, const int *ids, int B, float *const *logits, int *next,
                        char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int L = c->n_layers, H = c->n_heads, KV = c->n_kv_heads, d = c->head_dim, D = c->dim, V = c->vocab;
    const int Hd = H * d, KVd = KV * d;
    cudaStream_t st = g->st;
    CUDA_OK(cudaStreamSynchronize(st), "forward pass"); /* g->hids and g->hbseq are free again */
    const bf16 *k0, *v0;
    const uint8_t *k08, *v08;
    int NB;
    if (!batch_table(g, ss, B, &k0, &v0, &k08, &v08, &NB)) return 0;
    const size_t nw = (size_t)L * B * KV * NB, counts = (size_t)L * B * KV * sizeof(int32_t);
    const size_t bytes = nw * 16 + (counts + 7) / 8 * 8 + (k08 ? nw * 8 : 0); /* words, rows, counts, fp8's scales */
    if (bytes > g->bwords_bytes) {
        cudaFree(g->bwords);
        g->bwords = NULL, g->bwords_bytes = 0;
        const cudaError_t ce = cudaMalloc((void **)&g->bwords, bytes);
        if (ce != cudaSuccess) {
            cudaGetLastError();
            g->bwords = NULL;
            snprintf(err, errlen, "GPU: batch block words: %s", cudaGetErrorString(ce));
            return ce == cudaErrorMemoryAllocation ? LZ_LLAMA_GPU_ENOMEM : -1;
        }
        g->bwords_bytes = bytes;
    }
    uint64_t *words = g->bwords, *vrows = words + nw;
    int32_t *nblocks = (int32_t *)(vrows + nw);
    float *ksc = k08 ? (float *)(void *)((char *)nblocks + (counts + 7) / 8 * 8) : NULL, *vsc = k08 ? ksc + nw : NULL;
    lz_decode_params p;
    memset(&p, 0, sizeof p);
    p.o = (lz_bf16 *)g->oh;
    p.q = (const lz_bf16 *)g->qh;
    p.k_pool = (const lz_bf16 *)k0;
    p.v_pool = (const lz_bf16 *)v0;
    p.inv_freq = g->inv_freq;
    p.max_blocks = NB;
    p.batch = B;
    p.n_heads = H;
    p.n_kv_heads = KV;
    p.head_dim = d;
    p.rope_layout = c->rope_layout;
    p.scale = 1.0f / sqrtf((float)d);
    p.n_split = g->env_dsplit; /* A/B: LAZY_GPU_DECODE=<parts>; 0: lz_decode's choice for B rows */
    p.pdl = 1; /* after the rotary kernel, which writes q and each (slot, kv head)'s last block only */
    p.k_pool8 = k08;
    p.v_pool8 = v08;
    if (ensure_dwork(g, &p, err, errlen)) return -1;
    p.work = g->dwork;
    p.work_bytes = g->dwork_bytes;
    memcpy(g->hids, ids, (size_t)B * sizeof(int));
    int rc;
    CUDA_OK(cudaMemcpyAsync(g->bseq, g->hbseq, (size_t)B * sizeof(BatchSeq), cudaMemcpyHostToDevice, st), "batch table");
    if ((rc = lz_op_batch_words(words, vrows, nblocks, ksc, vsc, g->bseq, B, L, KV, NB, st)))
        return fail(err, errlen, "batch block words", rc);
    lz_decode_group_params gp; /* the rows that place one document read it once (llama_cuda_group.cu) */
    const int grouped = group_step(g, ss, B, &p, &gp, err, errlen);
    if (grouped < 0) return -1;
    lz_op_embed(g->x, (const lz_bf16 *)g->tok_embd, g->hids, B, D, st);
    for (int l = 0; l < L; l++) {
        const Layer *w = &g->layers[l];
        if (upload_wait(g, l, err, errlen)) return -1;
        lz_op_rmsnorm((lz_bf16 *)g->xb, g->x, w->attn_norm, B, D, c->norm_eps, st);
        if ((rc = gemm(g, g->q, g->xb, w->wq, B, D, Hd + 2 * KVd, 0.f))) return fail(err, errlen, "cuBLAS q/k/v", rc);
        if ((rc = lz_op_batch_heads((lz_bf16 *)g->qh, g->q, Hd + 2 * KVd, H, KV, d, l, c->rope_layout, g->inv_freq, g->bseq,
                                    B, st)))
            return fail(err, errlen, "batch rotary", rc);
        const size_t at = (size_t)l * B * KV * NB;
        p.blocks = words + at;
        p.v_rows = vrows + at;
        p.n_blocks = nblocks + (size_t)l * B * KV;
        if (ksc) p.k_scales = ksc + at, p.v_scales = vsc + at;
        if (grouped) {
            gp.dec = p;
            gp.layer = l;
            if ((rc = lz_decode_group(&gp, st))) return fail(err, errlen, "grouped decode attention", rc);
        } else if ((rc = lz_decode_lazy(&p, st))) {
            return fail(err, errlen, "batched decode attention", rc);
        }
        if (layer_out(g, l, B, g->oh, err, errlen)) return -1; /* (B, H, d): already token-major */
    }
    if ((rc = lz_op_batch_count(g->bseq, B, st))) return fail(err, errlen, "batch lengths", rc);
    lz_op_rmsnorm((lz_bf16 *)g->xb, g->x, g->out_norm, B, D, c->norm_eps, st);
    if ((rc = gemm(g, g->blogits, g->xb, g->out_w, B, D, V, 0.f))) return fail(err, errlen, "output head", rc);
    if (next) {
        if ((rc = lz_argmax(g->bnext, g->blogits, B, V, V, g->dban, st))) return fail(err, errlen, "greedy tokens", rc);
        CUDA_OK(cudaMemcpyAsync(g->hbnext, g->bnext, (size_t)B * 2 * sizeof(int), cudaMemcpyDeviceToHost, st),
                "greedy tokens");
    }
    int wanted = 0;
    for (int b = 0; logits && b < B; b++) wanted += logits[b] != NULL;
    if (wanted == B) /* every row: one copy */
        CUDA_OK(cudaMemcpyAsync(g->hblogits, g->blogits, (size_t)B * V * sizeof(float), cudaMemcpyDeviceToHost, st),
                "logits");
    else
        for (int b = 0; wanted && b < B; b++)
            if (logits[b])
                CUDA_OK(cudaMemcpyAsync(g->hblogits + (size_t)b * V, g->blogits + (size_t)b * V, (size_t)V * sizeof(float),
                                        cudaMemcpyDeviceToHost, st),
                        "logits");
    g->layer_wait = 0; /* every layer waited for the copies */
    CUDA_OK(cudaGetLastError(), "kernel launch");
    CUDA_OK(cudaStreamSynchronize(st), "forward pass");
    for (int b = 0; b < B; b++) ss[b]->n_own++;
    if (wanted) logits_out(g->hblogits, logits, B, V);
    if (next) memcpy(next, g->hbnext, (size_t)B * 2 * sizeof(int));
    return 1;
}

/* The questions of ss[0..P) (P >= 2; rows ns[i] each, n_rows in all <= max_tokens, checked) in
 * one pass; logits[i] (V) of each one's last row, NULL: none. 0, -1 or LZ_LLAMA_GPU_ENOMEM. */
static int prefill_batch(lz_llama_gpu *g, Slot *const *ss, const int *const *ids, const int *ns, int P, int n_rows,
                         float *const *logits, char *err, size_t errlen)
{
    const lz_llama_config *c = &g->cfg;
    const int L = c->n_layers, KV = c->n_kv_heads, d = c->head_dim, D = c->dim, V = c->vocab, KVd = KV * d;
    cudaStream_t st = g->st;
    CUDA_OK(cudaStreamSynchronize(st), "forward pass"); /* g->hids is free again */
    if (ensure_side(g, err, errlen)) return -1; /* the questions' attention side by side */
    lz_prefill_params *pp = (lz_prefill_params *)malloc((size_t)P * sizeof *pp);
    Part *parts = (Part *)calloc((size_t)P, sizeof *parts);
    int rc = -1;
    if (!pp || !parts) { snprintf(err, errlen, "out of memory"); rc = LZ_LLAMA_GPU_ENOMEM; goto done; }
    for (int i = 0, off = 0; i < P; off += ns[i], i++) {
        Slot *s = ss[i];
        pp[i] = step_params(g, s, ns[i]);
        if (ensure_work(g, &pp[i], err, errlen)) goto done;
        memcpy(g->hids + off, ids[i], (size_t)ns[i] * sizeof(int));
        parts[i].off = off;
        parts[i].n = ns[i];
        parts[i].kh = g->tk + (size_t)off * KVd; /* (KV, ns[i], d) this step's own keys */
        parts[i].vh = g->tv + (size_t)off * KVd;
        parts[i].N = s->N;
        parts[i].attn = &pp[i];
        parts[i].pos0 = s->pos0;
        parts[i].count = s->dn_own;
        lz_op_own_len(s->qlen, L, s->S + 1, s->S, KV, s->dn_own, st); /* the tokens so far: a segment at offset 0 */
    }
    for (int i = 0; i < P; i++) pp[i].work = g->work, pp[i].work_bytes = g->work_bytes; /* where the last growth left it */
    lz_op_embed(g->x, (const lz_bf16 *)g->tok_embd, g->hids, n_rows, D, st);
    for (int l = 0; l < L; l++) {
        for (int i = 0; i < P; i++) {
            const Slot *s = ss[i];
            const int W = s->S + 1;
            const size_t own = (size_t)l * KV * s->N * d;
            pp[i].segs = s->qsegs + (size_t)l * W;
            pp[i].seg_len = s->qlen + (size_t)l * W * KV;
            pp[i].seg_row = s->qrow + (size_t)l * W * KV;
            parts[i].own_k = s->own_k + own;
            parts[i].own_v = s->own_v + own;
        }
        if (upload_wait(g, l, err, errlen) || layer(g, l, n_rows, 0, NULL, parts, P, &pp[0], 1, err, errlen)) goto done;
    }
    for (int i = 0; i < P; i++) {
        lz_op_count_add(ss[i]->dn_own, ns[i], st);
        /* the last row of each: gathered for one product of the output head */
        const cudaError_t ce = cudaMemcpyAsync(g->blast + (size_t)i * D, g->x + (size_t)(parts[i].off + ns[i] - 1) * D,
                                               (size_t)D * sizeof(float), cudaMemcpyDeviceToDevice, st);
        if (ce != cudaSuccess) { snprintf(err, errlen, "GPU: last rows: %s", cudaGetErrorString(ce)); goto done; }
    }
    {
        lz_op_rmsnorm((lz_bf16 *)g->xb, g->blast, g->out_norm, P, D, c->norm_eps, st);
        const int hrc = gemm(g, g->blogits, g->xb, g->out_w, P, D, V, 0.f);
        if (hrc) { fail(err, errlen, "output head", hrc); goto done; }
        cudaError_t ce = cudaMemcpyAsync(g->hblogits, g->blogits, (size_t)P * V * sizeof(float), cudaMemcpyDeviceToHost, st);
        if (ce == cudaSuccess) ce = cudaGetLastError();
        if (ce == cudaSuccess) ce = cudaStreamSynchronize(st);
        g->layer_wait = 0; /* every layer waited for the copies */
        if (ce != cudaSuccess) { snprintf(err, errlen, "GPU: batched prefill: %s", cudaGetErrorString(ce)); goto done; }
    }
    for (int i = 0; i < P; i++) ss[i]->n_own += ns[i];
    if (logits) logits_out(g->hblogits, logits, P, V);
    rc = 0;
done:
    free(pp);
    free(parts);
    return rc;
}

/* Slots slots[0..n) checked (distinct, begun) for rows each (rows NULL: 1), their ids ids[i]
 * (ids_one: ids[i] the single one) in range: into ss. 0 or -1. */
static int batch_check(lz_llama_gpu *g, const int *slots, int n, const int *rows, const int *const *ids,
                       const int *ids_one, Slot **ss, char *err, size_t errlen)
{
    if (n < 1 || n > g->n_slots) {
        snprintf(err, errlen, "GPU: a pass of %d sequences (the engine holds %d: lz_llama_gpu_set_slots)", n, g->n_slots);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (slots[i] < 0 || slots[i] >= g->n_slots) {
            snprintf(err, errlen, "GPU: slot %d (the engine holds %d)", slots[i], g->n_slots);
            return -1;
        }
        Slot *s = ss[i] = &g->slots[slots[i]];
        const int r = rows ? rows[i] : 1;
        if (!s->ready) { snprintf(err, errlen, "GPU: slot %d has no question begun", slots[i]); return -1; }
        if (r <= 0 || r > g->max_tokens || s->n_own + r > s->N) {
            snprintf(err, errlen, "GPU: slot %d: %d more tokens after %d (at most %d a sequence, %d a pass)", slots[i], r,
                     s->n_own, s->N, g->max_tokens);
            return -1;
        }
        for (int j = 0; j < r; j++) {
            const int id = ids_one ? ids_one[i] : ids[i][j];
            if (id < 0 || id >= g->cfg.vocab) { snprintf(err, errlen, "token id %d out of range", id); return -1; }
        }
        for (int j = 0; j < i; j++)
            if (slots[j] == slots[i]) { snprintf(err, errlen, "GPU: slot %d twice in one pass", slots[i]); return -1; }
    }
    return 0;
}

} /* namespace lzgpu */

using namespace lzgpu;

extern "C" int lz_llama_gpu_decode_next(lz_llama_gpu *g, const int *slots, const int *ids, int n, float *const *logits,
                                        int *next, char *err, size_t errlen)
{
    int rc = ensure_slots(g, err, errlen);
    if (rc) return rc;
    const int zero = 0;
    if (!slots) { /* the one sequence of lz_llama_gpu_begin */
        if (n != 1) { snprintf(err, errlen, "GPU: %d tokens for the one sequence (one a pass)", n); return -1; }
        slots = &zero;
    }
    Slot **ss = (Slot **)malloc((size_t)(n > 0 ? n : 1) * sizeof *ss);
    if (!ss) { snprintf(err, errlen, "out of memory"); return LZ_LLAMA_GPU_ENOMEM; }
    rc = batch_check(g, slots, n, NULL, NULL, ids, ss, err, errlen);
    if (!rc && n > 1) rc = decode_batch(g, ss, ids, n, logits, next, err, errlen); /* 1 done, 0 not run */
    if (rc == 0) /* one alone (its decode graph), or words that share no base: each slot by itself */
        for (int i = 0; i < n && !rc; i++)
            rc = slot_step(g, ss[i], &ids[i], 1, logits ? logits[i] : NULL, next ? next + 2 * i : NULL, err, errlen);
    free(ss);
    return rc < 0 ? rc : 0;
}

extern "C" int lz_llama_gpu_decode_many_rows(lz_llama_gpu *g, const int *slots, const int *ids, int n,
                                             float *const *logits, char *err, size_t errlen)
{
    return lz_llama_gpu_decode_next(g, slots, ids, n, logits, NULL, err, errlen);
}

extern "C" int lz_llama_gpu_set_ban(lz_llama_gpu *g, const int *ids, int n, char *err, size_t errlen)
{
    if (n < 0 || n > LZ_ARGMAX_MAX_BAN) {
        snprintf(err, errlen, "GPU: %d ids to mask for greedy tokens (at most %d)", n, LZ_ARGMAX_MAX_BAN);
        return -1;
    }
    const int rc = ensure_query(g, err, errlen);
    if (rc) return rc;
    if (g->hban[0] == n && !memcmp(g->hban + 1, ids, (size_t)n * sizeof(int))) return 0; /* as it is */
    g->hban[0] = n;
    if (n) memcpy(g->hban + 1, ids, (size_t)n * sizeof(int));
    /* in stream order: a pass before reads the old list, a pass after the new one */
    CUDA_OK(cudaMemcpyAsync(g->dban, g->hban, (size_t)(1 + n) * sizeof(int), cudaMemcpyHostToDevice, g->st), "ban list");
    return 0;
}

extern "C" int lz_llama_gpu_decode_many(lz_llama_gpu *g, const int *slots, const int *ids, int n, float *logits,
                                        char *err, size_t errlen)
{
    float **rows = (float **)malloc((size_t)(n > 0 ? n : 1) * sizeof *rows);
    if (!rows) { snprintf(err, errlen, "out of memory"); return LZ_LLAMA_GPU_ENOMEM; }
    for (int i = 0; i < n; i++) rows[i] = logits ? logits + (size_t)i * g->cfg.vocab : NULL;
    const int rc = lz_llama_gpu_decode_many_rows(g, slots, ids, n, rows, err, errlen);
    free(rows);
    return rc;
}

extern "C" int lz_llama_gpu_prefill_many(lz_llama_gpu *g, const int *slots, const int *const *ids, const int *n,
                                         int n_seqs, float *const *logits, char *err, size_t errlen)
{
    int rc = ensure_slots(g, err, errlen);
    if (rc) return rc;
    Slot **ss = (Slot **)malloc((size_t)(n_seqs > 0 ? n_seqs : 1) * sizeof *ss);
    if (!ss) { snprintf(err, errlen, "out of memory"); return LZ_LLAMA_GPU_ENOMEM; }
    rc = batch_check(g, slots, n_seqs, n, ids, NULL, ss, err, errlen);
    /* passes of whole questions of up to max_tokens rows; a pass of one is the serial step */
    for (int i0 = 0, i1; !rc && i0 < n_seqs; i0 = i1) {
        int rows = 0;
        for (i1 = i0; i1 < n_seqs && rows + n[i1] <= g->max_tokens; i1++) rows += n[i1];
        if (i1 - i0 == 1) rc = slot_step(g, ss[i0], ids[i0], n[i0], logits ? logits[i0] : NULL, NULL, err, errlen);
        else rc = prefill_batch(g, ss + i0, ids + i0, n + i0, i1 - i0, rows, logits ? logits + i0 : NULL, err, errlen);
    }
    free(ss);
    return rc;
}

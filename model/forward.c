/* forward.c - the Llama forward pass on the CPU in fp32, batched: n tokens
 * go through every layer together so projections are GEMMs (OpenBLAS;
 * bf16 / fp16 / Q8_0 weights widened a block of rows at a time, or a dot
 * product of their own for one token: formats/weights.h);
 * attention is model/attention.c (lazy over external segments + causal over
 * the cache). Reads top to bottom like llama2.c's forward().
 *
 * Legend: n = tokens in this chunk, D = width, H/KV = heads, d = head_dim,
 * F = FFN width, V = vocabulary.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "model/attention.h"
#include "model/llama.h"

struct lz_llama_scratch {
    int max_batch;
    float *x;    /* (B, D) residual stream */
    float *xb;   /* (B, D) normed input */
    float *q;    /* (B, H*d) */
    float *k;    /* (B, KV*d) */
    float *v;    /* (B, KV*d) */
    float *att;  /* (B, H*d) attention output */
    float *hb;   /* (B, F) gate */
    float *hb2;  /* (B, F) up */
    /* weights not in fp32, n > 1: WB_ROWS rows widened to fp32 per sgemm, a buffer a thread */
    float *wbuf;      /* (wbuf_threads, wbuf_per) or NULL when every matrix is fp32 */
    size_t wbuf_per;
    int wbuf_threads;
    /* optional query capture (lz_llama_scratch_capture): rotated q rows of
     * positions [cap_pos, cap_pos + cap_count) of every layer */
    float *cap_q;      /* (L, cap_count, H, d) or NULL */
    int64_t cap_pos;
    int cap_count;
};

void lz_llama_scratch_capture(lz_llama_scratch *s, float *q_out, int64_t first_pos, int count)
{
    s->cap_q = count > 0 ? q_out : NULL;
    s->cap_pos = first_pos;
    s->cap_count = count > 0 ? count : 0;
}

enum { WB_ROWS = 128 };

static int has_packed(const lz_llama *m) /* any matrix not in fp32 */
{
    int any = m->tok_embd.type != LZ_MAT_F32 || m->output.type != LZ_MAT_F32;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const lz_llama_layer *y = &m->layers[l];
        const lz_mat *w[] = {&y->wq, &y->wk, &y->wv, &y->wo, &y->w_gate, &y->w_up, &y->w_down};
        for (int i = 0; i < 7; i++) any |= w[i]->type != LZ_MAT_F32;
    }
    return any;
}

static int threads_set; /* lz_llama_set_threads was called (by the program or by the first scratch) */

lz_llama_scratch *lz_llama_scratch_new(const lz_llama *m, int max_batch)
{
    /* a program that never chose: every core, one pool (lazyingest once ran without it: OpenBLAS's
     * own pool inside every OpenMP thread, 1.7x slower on 2 cores) */
    if (!__atomic_load_n(&threads_set, __ATOMIC_ACQUIRE)) lz_llama_set_threads(0);
    const lz_llama_config *c = &m->cfg;
    lz_llama_scratch *s = calloc(1, sizeof *s);
    if (!s || max_batch <= 0) { free(s); return NULL; }
    size_t B = (size_t)max_batch, Hd = (size_t)c->n_heads * c->head_dim, KVd = (size_t)c->n_kv_heads * c->head_dim;
    s->max_batch = max_batch;
    s->x = malloc(B * c->dim * sizeof(float));
    s->xb = malloc(B * c->dim * sizeof(float));
    s->q = malloc(B * Hd * sizeof(float));
    s->k = malloc(B * KVd * sizeof(float));
    s->v = malloc(B * KVd * sizeof(float));
    s->att = malloc(B * Hd * sizeof(float));
    s->hb = malloc(B * c->ffn_dim * sizeof(float));
    s->hb2 = malloc(B * c->ffn_dim * sizeof(float));
    if (has_packed(m)) {
        size_t widest = (size_t)c->dim;
        if ((size_t)Hd > widest) widest = Hd;
        if ((size_t)c->ffn_dim > widest) widest = c->ffn_dim;
        s->wbuf_threads = omp_get_max_threads();
        s->wbuf_per = (size_t)WB_ROWS * widest;
        s->wbuf = malloc((size_t)s->wbuf_threads * s->wbuf_per * sizeof(float));
    }
    if (!s->x || !s->xb || !s->q || !s->k || !s->v || !s->att || !s->hb || !s->hb2 || (s->wbuf_threads && !s->wbuf)) {
        lz_llama_scratch_free(s);
        return NULL;
    }
    return s;
}

void lz_llama_scratch_free(lz_llama_scratch *s)
{
    if (!s) return;
    free(s->x); free(s->xb); free(s->q); free(s->k); free(s->v); free(s->att); free(s->hb); free(s->hb2);
    free(s->wbuf);
    free(s);
}

/* One thread pool: OpenMP threads each call single-threaded OpenBLAS on their
 * own slice of output rows, so OpenBLAS's own threads never compete with
 * OpenMP's for the cores (mixing the two pools cut decode speed 4x). */
void lz_llama_set_threads(int n)
{
    if (n <= 0) n = omp_get_num_procs();
    omp_set_num_threads(n);
    openblas_set_num_threads(1);
    __atomic_store_n(&threads_set, 1, __ATOMIC_RELEASE);
}

/* y (n, out) = x (n, in) @ W (out, in)^T (+ y when beta = 1), split over
 * threads by blocks of WB_ROWS output rows. Every product (sgemm, sgemv,
 * lz_mat_gemv) covers exactly one block, whatever the thread count, so the
 * bits do not depend on it (a product's edge tiles may sum in another order:
 * with blocks that followed the thread count, --threads 2 and 3 stored
 * different payloads). W not in fp32: one token through lz_mat_gemv, more
 * through sgemm on the block widened to fp32 (the same products as an fp32
 * copy's; the smaller GEMMs sum in another order, so results agree within
 * rounding: tests/test_weights.c). */
static void matmul(lz_llama_scratch *s, float *y, const float *x, lz_mat w, int n, int in, int out, float beta)
{
    int T = omp_get_max_threads();
    if (T > 1 && (double)n * in * out < 2e5) T = 1; /* too small to split */
    const int widen = w.type != LZ_MAT_F32 && n > 1;
    if (widen && T > s->wbuf_threads) T = s->wbuf_threads; /* threads raised after the scratch was made */
    const int blocks = (out + WB_ROWS - 1) / WB_ROWS;
    if (T > blocks) T = blocks;
#pragma omp parallel for num_threads(T) schedule(static)
    for (int b = 0; b < blocks; b++) {
        const int r = b * WB_ROWS, rb = out - r < WB_ROWS ? out - r : WB_ROWS;
        if (w.type == LZ_MAT_F32) {
            const float *wf = (const float *)w.data + (size_t)r * in;
            if (n == 1) cblas_sgemv(CblasRowMajor, CblasNoTrans, rb, in, 1.0f, wf, in, x, 1, beta, y + r, 1);
            else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, rb, in, 1.0f, x, in, wf, in, beta, y + r, out);
        } else if (n == 1) {
            lz_mat_gemv(y, w, x, in, r, r + rb, beta);
        } else {
            float *buf = s->wbuf + (size_t)omp_get_thread_num() * s->wbuf_per;
            lz_mat_get_f32(w, (size_t)r * in, (size_t)rb * in, buf);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, rb, in, 1.0f, x, in, buf, in, beta, y + r, out);
        }
    }
}

/* out (n, D) = rmsnorm(x) * w */
static void rmsnorm(float *out, const float *x, const float *w, int n, int D, float eps)
{
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * D;
        float *oi = out + (size_t)i * D;
        float ss = 0;
        for (int j = 0; j < D; j++) ss += xi[j] * xi[j];
        float r = 1.0f / sqrtf(ss / (float)D + eps);
        for (int j = 0; j < D; j++) oi[j] = xi[j] * r * w[j];
    }
}

/* One chunk of n <= max_batch tokens. */
static int forward_chunk(const lz_llama *m, lz_llama_scratch *s, lz_kv_cache *cache, const lz_kv_segment *segs,
                         int n_segs, const int *tokens, int n, float *logits, int logits_mode)
{
    const lz_llama_config *c = &m->cfg;
    const int D = c->dim, H = c->n_heads, KV = c->n_kv_heads, d = c->head_dim, F = c->ffn_dim, V = c->vocab;
    const int Hd = H * d, KVd = KV * d, T = cache->cap, n_past = cache->n;
    const int64_t pos0 = cache->pos0 + n_past;

    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= V) return -1;
        lz_mat_get_f32(m->tok_embd, (size_t)tokens[i] * D, (size_t)D, s->x + (size_t)i * D);
    }
    for (int l = 0; l < c->n_layers; l++) {
        const lz_llama_layer *w = &m->layers[l];
        rmsnorm(s->xb, s->x, w->attn_norm, n, D, c->norm_eps);
        matmul(s, s->q, s->xb, w->wq, n, D, Hd, 0.0f);
        matmul(s, s->k, s->xb, w->wk, n, D, KVd, 0.0f);
        matmul(s, s->v, s->xb, w->wv, n, D, KVd, 0.0f);
        /* rotate q and k at their absolute positions; append k, v to the cache */
        float *kc = cache->k + (size_t)l * KV * T * d, *vc = cache->v + (size_t)l * KV * T * d;
#pragma omp parallel for if (n > 1) /* one token (decode): no thread wake-up for a few sincos */
        for (int i = 0; i < n; i++) {
            for (int h = 0; h < H; h++) lz_rope_apply(s->q + (size_t)i * Hd + h * d, d, pos0 + i, c->rope_layout, m->inv_freq);
            for (int h = 0; h < KV; h++) {
                float *k = s->k + (size_t)i * KVd + h * d;
                lz_rope_apply(k, d, pos0 + i, c->rope_layout, m->inv_freq);
                memcpy(kc + ((size_t)h * T + n_past + i) * d, k, (size_t)d * sizeof(float));
                memcpy(vc + ((size_t)h * T + n_past + i) * d, s->v + (size_t)i * KVd + h * d, (size_t)d * sizeof(float));
            }
        }
        if (s->cap_q) /* query capture: rows of this chunk inside [cap_pos, cap_pos + cap_count) */
            for (int i = 0; i < n; i++) {
                int64_t r = pos0 + i - s->cap_pos;
                if (r < 0 || r >= s->cap_count) continue;
                memcpy(s->cap_q + ((size_t)l * s->cap_count + (size_t)r) * Hd, s->q + (size_t)i * Hd,
                       (size_t)Hd * sizeof(float));
            }
        lz_attn_params ap = {.q = s->q, .out = s->att, .n = n, .n_heads = H, .n_kv_heads = KV, .head_dim = d,
                             .layer = l, .segs = segs, .n_segs = n_segs, .k = kc, .v = vc, .cache_stride = T,
                             .n_past = n_past, .inv_freq = m->inv_freq, .rope_layout = c->rope_layout};
        if (lz_attention_cpu(&ap)) return -1;
        matmul(s, s->x, s->att, w->wo, n, Hd, D, 1.0f); /* residual add */
        rmsnorm(s->xb, s->x, w->ffn_norm, n, D, c->norm_eps);
        matmul(s, s->hb, s->xb, w->w_gate, n, D, F, 0.0f);
        matmul(s, s->hb2, s->xb, w->w_up, n, D, F, 0.0f);
#pragma omp parallel for if ((size_t)n * F >= 65536)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < F; j++) {
                float g = s->hb[(size_t)i * F + j];
                s->hb[(size_t)i * F + j] = g / (1.0f + expf(-g)) * s->hb2[(size_t)i * F + j];
            }
        matmul(s, s->x, s->hb, w->w_down, n, F, D, 1.0f);
    }
    cache->n += n;
    if (logits_mode == LZ_LOGITS_ALL) {
        rmsnorm(s->xb, s->x, m->out_norm, n, D, c->norm_eps);
        matmul(s, logits, s->xb, m->output, n, D, V, 0.0f);
    } else if (logits_mode == LZ_LOGITS_LAST) {
        rmsnorm(s->xb, s->x + (size_t)(n - 1) * D, m->out_norm, 1, D, c->norm_eps);
        matmul(s, logits, s->xb, m->output, 1, D, V, 0.0f);
    }
    return 0;
}

int lz_llama_forward(const lz_llama *m, lz_llama_scratch *s, lz_kv_cache *cache, const lz_kv_segment *segs,
                     int n_segs, const int *tokens, int n, float *logits, int logits_mode)
{
    if (n <= 0 || cache->n + n > cache->cap || cache->n_layers != m->cfg.n_layers ||
        cache->n_kv_heads != m->cfg.n_kv_heads || cache->head_dim != m->cfg.head_dim)
        return -1;
    for (int i = 0; i < n; i += s->max_batch) {
        int b = n - i < s->max_batch ? n - i : s->max_batch;
        int last = i + b == n;
        int mode = logits_mode == LZ_LOGITS_ALL ? LZ_LOGITS_ALL : last ? logits_mode : LZ_LOGITS_NONE;
        float *lg = logits_mode == LZ_LOGITS_ALL ? logits + (size_t)i * m->cfg.vocab : logits;
        if (forward_chunk(m, s, cache, segs, n_segs, tokens + i, b, lg, mode)) return -1;
    }
    return 0;
}

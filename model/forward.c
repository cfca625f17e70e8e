/* forward.c - the Llama forward pass on the CPU in fp32, batched: n tokens
 * (of one sequence, or of several: lz_llama_forward_batch, each sequence with
 * its own cache and segments) go through every layer together so
 * projections are GEMMs (OpenBLAS;
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
    float *lg;         /* (lg_rows, V) logits of a batch's rows, gathered (lz_llama_forward_batch) */
    size_t lg_rows;
};

void lz_llama_scratch_capture(lz_llama_scratch *s, float *q_out, int64_t first_pos, int count)
{
    s->cap_q = count > 0 ? q_out : NULL;
    s->cap_pos = first_pos;
    s->cap_count = count > 0 ? count : 0;
}

enum { WB_ROWS = 128 };
/* batches of decode rows up to this many run row by row (matmul_rows); larger ones as GEMMs */
enum { PER_ROW_MAX = 64 };

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
    free(s->lg);
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
 * rounding: tests/test_weights.c). per_row (a batch of decode rows of several
 * sequences): each row through the one-token product of the block, so a row
 * gets the bits its sequence gets alone, and the block, read from memory once
 * per step, stays in cache for the other rows. */
static void matmul_rows(lz_llama_scratch *s, float *y, const float *x, lz_mat w, int n, int in, int out, float beta,
                        int per_row)
{
    int T = omp_get_max_threads();
    if (T > 1 && (double)n * in * out < 2e5) T = 1; /* too small to split */
    const int widen = w.type != LZ_MAT_F32 && n > 1 && !per_row;
    if (widen && T > s->wbuf_threads) T = s->wbuf_threads; /* threads raised after the scratch was made */
    const int blocks = (out + WB_ROWS - 1) / WB_ROWS;
    if (T > blocks) T = blocks;
#pragma omp parallel for num_threads(T) schedule(static)
    for (int b = 0; b < blocks; b++) {
        const int r = b * WB_ROWS, rb = out - r < WB_ROWS ? out - r : WB_ROWS;
        if (per_row) { /* batched decode: each row as one token alone (the same bits), the block hot in cache */
            for (int i = 0; i < n; i++) {
                float *yi = y + (size_t)i * out;
                const float *xi = x + (size_t)i * in;
                if (w.type == LZ_MAT_F32)
                    cblas_sgemv(CblasRowMajor, CblasNoTrans, rb, in, 1.0f, (const float *)w.data + (size_t)r * in, in, xi,
                                1, beta, yi + r, 1);
                else lz_mat_gemv(yi, w, xi, in, r, r + rb, beta);
            }
        } else if (w.type == LZ_MAT_F32) {
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

/* One piece of a chunk: tokens [t0, t0 + n) of a sequence, at rows [row, row + n) of the
 * scratch; logits of its last token when want (the last piece of a sequence that asked). */
typedef struct {
    lz_kv_cache *cache;
    const lz_kv_segment *segs;
    int n_segs;
    const int *tokens; /* (n) */
    int n, row;
    float *logits;     /* (V) or (n, V) with LZ_LOGITS_ALL; NULL: none */
    int logits_mode;
} piece;

/* One chunk: P pieces (at most one per sequence) of N <= max_batch rows in all. The
 * projections run over all N rows at once (the weights read once a chunk); rope, the cache
 * append and attention run per piece, at its own positions over its own segments. */
static int forward_chunk(const lz_llama *m, lz_llama_scratch *s, piece *pc, int P, int N)
{
    const lz_llama_config *c = &m->cfg;
    const int D = c->dim, H = c->n_heads, KV = c->n_kv_heads, d = c->head_dim, F = c->ffn_dim, V = c->vocab;
    const int Hd = H * d, KVd = KV * d;
    int row_piece[N > 0 ? N : 1]; /* (N) which piece a row belongs to */
    int small = 1;                /* every piece a row or a few (decode): attention parallel over pieces */
    for (int p = 0; p < P; p++) {
        for (int i = 0; i < pc[p].n; i++) {
            const int t = pc[p].tokens[i];
            if (t < 0 || t >= V) return -1;
            lz_mat_get_f32(m->tok_embd, (size_t)t * D, (size_t)D, s->x + (size_t)(pc[p].row + i) * D);
            row_piece[pc[p].row + i] = p;
        }
        small &= pc[p].n <= 4;
    }
    /* decode rows of several sequences: each through the one-token products (see matmul_rows) */
    const int pr = P > 1 && small && N <= PER_ROW_MAX;
    for (int l = 0; l < c->n_layers; l++) {
        const lz_llama_layer *w = &m->layers[l];
        rmsnorm(s->xb, s->x, w->attn_norm, N, D, c->norm_eps);
        matmul_rows(s, s->q, s->xb, w->wq, N, D, Hd, 0.0f, pr);
        matmul_rows(s, s->k, s->xb, w->wk, N, D, KVd, 0.0f, pr);
        matmul_rows(s, s->v, s->xb, w->wv, N, D, KVd, 0.0f, pr);
        /* rotate q and k at their absolute positions; append k, v to their sequence's cache */
#pragma omp parallel for if (N > 1) /* one token (decode): no thread wake-up for a few sincos */
        for (int r = 0; r < N; r++) {
            const piece *x = &pc[row_piece[r]];
            const int i = r - x->row, T = x->cache->cap, n_past = x->cache->n;
            const int64_t pos = x->cache->pos0 + n_past + i;
            float *kc = x->cache->k + (size_t)l * KV * T * d, *vc = x->cache->v + (size_t)l * KV * T * d;
            for (int h = 0; h < H; h++) lz_rope_apply(s->q + (size_t)r * Hd + h * d, d, pos, c->rope_layout, m->inv_freq);
            for (int h = 0; h < KV; h++) {
                float *k = s->k + (size_t)r * KVd + h * d;
                lz_rope_apply(k, d, pos, c->rope_layout, m->inv_freq);
                memcpy(kc + ((size_t)h * T + n_past + i) * d, k, (size_t)d * sizeof(float));
                memcpy(vc + ((size_t)h * T + n_past + i) * d, s->v + (size_t)r * KVd + h * d, (size_t)d * sizeof(float));
            }
        }
        if (s->cap_q) /* query capture: rows of this chunk inside [cap_pos, cap_pos + cap_count) */
            for (int r = 0; r < N; r++) {
                const piece *x = &pc[row_piece[r]];
                int64_t q = x->cache->pos0 + x->cache->n + (r - x->row) - s->cap_pos;
                if (q < 0 || q >= s->cap_count) continue;
                memcpy(s->cap_q + ((size_t)l * s->cap_count + (size_t)q) * Hd, s->q + (size_t)r * Hd,
                       (size_t)Hd * sizeof(float));
            }
        int bad = 0;
        /* several decode rows: one piece a thread (each piece's attention then runs on one) */
#pragma omp parallel for schedule(dynamic, 1) if (P > 1 && small) reduction(| : bad)
        for (int p = 0; p < P; p++) {
            const piece *x = &pc[p];
            const int T = x->cache->cap;
            lz_attn_params ap = {.q = s->q + (size_t)x->row * Hd, .out = s->att + (size_t)x->row * Hd, .n = x->n,
                                 .n_heads = H, .n_kv_heads = KV, .head_dim = d, .layer = l, .segs = x->segs,
                                 .n_segs = x->n_segs, .k = x->cache->k + (size_t)l * KV * T * d,
                                 .v = x->cache->v + (size_t)l * KV * T * d, .cache_stride = T,
                                 .n_past = x->cache->n, .inv_freq = m->inv_freq, .rope_layout = c->rope_layout};
            bad |= lz_attention_cpu(&ap) != 0;
        }
        if (bad) return -1;
        matmul_rows(s, s->x, s->att, w->wo, N, Hd, D, 1.0f, pr); /* residual add */
        rmsnorm(s->xb, s->x, w->ffn_norm, N, D, c->norm_eps);
        matmul_rows(s, s->hb, s->xb, w->w_gate, N, D, F, 0.0f, pr);
        matmul_rows(s, s->hb2, s->xb, w->w_up, N, D, F, 0.0f, pr);
#pragma omp parallel for if ((size_t)N * F >= 65536)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < F; j++) {
                float g = s->hb[(size_t)i * F + j];
                s->hb[(size_t)i * F + j] = g / (1.0f + expf(-g)) * s->hb2[(size_t)i * F + j];
            }
        matmul_rows(s, s->x, s->hb, w->w_down, N, F, D, 1.0f, pr);
    }
    for (int p = 0; p < P; p++) pc[p].cache->n += pc[p].n;
    /* logits: every row of an ALL piece, the last row of a LAST piece, gathered into one product */
    int n_out = 0;
    for (int p = 0; p < P; p++)
        if (pc[p].logits_mode == LZ_LOGITS_ALL) {
            if (P == 1) { /* straight into the caller's rows */
                rmsnorm(s->xb, s->x, m->out_norm, N, D, c->norm_eps);
                matmul_rows(s, pc[p].logits, s->xb, m->output, N, D, V, 0.0f, pr);
                return 0;
            }
            for (int i = 0; i < pc[p].n; i++, n_out++)
                rmsnorm(s->xb + (size_t)n_out * D, s->x + (size_t)(pc[p].row + i) * D, m->out_norm, 1, D, c->norm_eps);
        } else if (pc[p].logits_mode == LZ_LOGITS_LAST) {
            rmsnorm(s->xb + (size_t)n_out++ * D, s->x + (size_t)(pc[p].row + pc[p].n - 1) * D, m->out_norm, 1, D,
                    c->norm_eps);
        }
    if (!n_out) return 0;
    if (P == 1) { matmul_rows(s, pc[0].logits, s->xb, m->output, 1, D, V, 0.0f, pr); return 0; }
    if ((size_t)n_out > s->lg_rows) { /* the gathered logits, grown on demand */
        float *lg = realloc(s->lg, (size_t)n_out * V * sizeof(float));
        if (!lg) return -1;
        s->lg = lg;
        s->lg_rows = (size_t)n_out;
    }
    matmul_rows(s, s->lg, s->xb, m->output, n_out, D, V, 0.0f, pr);
    n_out = 0;
    for (int p = 0; p < P; p++) {
        const int rows = pc[p].logits_mode == LZ_LOGITS_ALL ? pc[p].n : pc[p].logits_mode == LZ_LOGITS_LAST;
        if (rows) memcpy(pc[p].logits, s->lg + (size_t)n_out * V, (size_t)rows * V * sizeof(float));
        n_out += rows;
    }
    return 0;
}

/* The caches and tokens of seq fit the model and the call. */
static int seq_ok(const lz_llama *m, const lz_kv_cache *cache, int n)
{
    return n > 0 && cache->n + n <= cache->cap && cache->n_layers == m->cfg.n_layers &&
           cache->n_kv_heads == m->cfg.n_kv_heads && cache->head_dim == m->cfg.head_dim;
}

int lz_llama_forward(const lz_llama *m, lz_llama_scratch *s, lz_kv_cache *cache, const lz_kv_segment *segs,
                     int n_segs, const int *tokens, int n, float *logits, int logits_mode)
{
    if (!seq_ok(m, cache, n)) return -1;
    for (int i = 0; i < n; i += s->max_batch) {
        int b = n - i < s->max_batch ? n - i : s->max_batch;
        int last = i + b == n;
        int mode = logits_mode == LZ_LOGITS_ALL ? LZ_LOGITS_ALL : last ? logits_mode : LZ_LOGITS_NONE;
        float *lg = logits_mode == LZ_LOGITS_ALL ? logits + (size_t)i * m->cfg.vocab : logits;
        piece pc = {.cache = cache, .segs = segs, .n_segs = n_segs, .tokens = tokens + i, .n = b, .row = 0,
                    .logits = lg, .logits_mode = mode};
        if (forward_chunk(m, s, &pc, 1, b)) return -1;
    }
    return 0;
}

/* Packs the sequences into chunks of at most max_batch rows, in order: a sequence that does
 * not fit the chunk's room continues in the next (so a chunk holds one piece a sequence). */
int lz_llama_forward_batch(const lz_llama *m, lz_llama_scratch *s, const lz_llama_seq *seqs, int n_seqs)
{
    if (n_seqs <= 0) return -1;
    for (int i = 0; i < n_seqs; i++) {
        if (!seq_ok(m, seqs[i].cache, seqs[i].n)) return -1;
        for (int j = 0; j < i; j++)
            if (seqs[j].cache == seqs[i].cache) return -1; /* one entry a sequence */
    }
    piece *pc = malloc((size_t)n_seqs * sizeof *pc);
    if (!pc) return -1;
    int rc = 0, P = 0, N = 0;
    for (int i = 0; i < n_seqs && !rc; i++) {
        for (int t0 = 0; t0 < seqs[i].n && !rc;) {
            const int b = seqs[i].n - t0 < s->max_batch - N ? seqs[i].n - t0 : s->max_batch - N;
            const int last = t0 + b == seqs[i].n;
            pc[P++] = (piece){.cache = seqs[i].cache, .segs = seqs[i].segs, .n_segs = seqs[i].n_segs,
                              .tokens = seqs[i].tokens + t0, .n = b, .row = N,
                              .logits = last ? seqs[i].logits : NULL,
                              .logits_mode = last && seqs[i].logits ? LZ_LOGITS_LAST : LZ_LOGITS_NONE};
            N += b;
            t0 += b;
            if (N == s->max_batch || (i == n_seqs - 1 && last)) { /* a full chunk, or the end */
                rc = forward_chunk(m, s, pc, P, N);
                P = N = 0;
            }
        }
    }
    free(pc);
    return rc;
}

/* test_forward_batch.c - the batched forward pass (lz_llama_forward_batch):
 * B sequences, each with its own cache, its own segments (documents placed
 * at their own offsets) and its own tokens, give the logits of running each
 * alone (fp32 rounding), for question prefills of mixed lengths and for
 * decode steps; greedy continuations are identical; a batch that spills
 * over the scratch's rows is cut into chunks with the same results; one
 * sequence alone gives lz_llama_forward's bits; bad calls are refused.
 * fp32 and bf16 weights (the sgemm and widened-block paths). */
#include "model/llama.h"
#include "model/sampler.h"
#include "tests/test.h"
#include "tests/test_model.h"

enum { B = 6, STEPS = 8, CAP = 96 };

static lz_kv_segment seg_of(const lz_kv_cache *c, int64_t rot)
{
    return (lz_kv_segment){.k = c->k, .v = c->v, .n = c->n, .stride = c->cap, .rot = rot};
}

static double rel(const float *a, const float *b, int n) { return lz_test_rel_diff(a, b, n); }

/* A shared prefix and three documents after it; sequence i places documents (i % 3) and
 * ((i + 1) % 3) in that order, then its own question of 1 + 3 * i tokens. */
static void test_batch(lz_llama *m, const char *what)
{
    const int V = m->cfg.vocab;
    int P[5] = {1, 40, 41, 42, 43}, D[3][11];
    for (int j = 0; j < 3; j++)
        for (int t = 0; t < 11; t++) D[j][t] = 60 + 17 * j + 3 * t;
    const int dn[3] = {11, 6, 9};
    lz_llama_scratch *s = lz_llama_scratch_new(m, 64), *tiny = lz_llama_scratch_new(m, 7);
    lz_kv_cache cp, cd[3], serial[B], batch[B], chunked[B];
    lz_kv_cache_init(&cp, &m->cfg, 8);
    lz_llama_forward(m, s, &cp, NULL, 0, P, 5, NULL, LZ_LOGITS_NONE);
    lz_kv_segment sp = seg_of(&cp, 0);
    for (int j = 0; j < 3; j++) {
        lz_kv_cache_init(&cd[j], &m->cfg, 16);
        lz_kv_cache_reset(&cd[j], 5);
        lz_llama_forward(m, s, &cd[j], &sp, 1, D[j], dn[j], NULL, LZ_LOGITS_NONE);
    }
    lz_kv_segment segs[B][3];
    int q[B][24], nq[B];
    float *ls = malloc((size_t)B * V * sizeof(float)), *lb = malloc((size_t)B * V * sizeof(float));
    float *lc = malloc((size_t)B * V * sizeof(float));
    lz_llama_seq seq[B], seqc[B];
    for (int i = 0; i < B; i++) {
        const int a = i % 3, b = (i + 1) % 3;
        segs[i][0] = sp;
        segs[i][1] = seg_of(&cd[a], 0);                /* right after the prefix */
        segs[i][2] = seg_of(&cd[b], dn[a]);            /* after a: its missing rotation */
        nq[i] = 1 + 3 * i;
        for (int t = 0; t < nq[i]; t++) q[i][t] = 200 + 11 * i + t;
        const int64_t pos0 = 5 + dn[a] + dn[b];
        lz_kv_cache_init(&serial[i], &m->cfg, CAP);
        lz_kv_cache_init(&batch[i], &m->cfg, CAP);
        lz_kv_cache_init(&chunked[i], &m->cfg, CAP);
        lz_kv_cache_reset(&serial[i], pos0);
        lz_kv_cache_reset(&batch[i], pos0);
        lz_kv_cache_reset(&chunked[i], pos0);
        lz_llama_forward(m, s, &serial[i], segs[i], 3, q[i], nq[i], ls + (size_t)i * V, LZ_LOGITS_LAST);
        seq[i] = (lz_llama_seq){&batch[i], segs[i], 3, q[i], nq[i], lb + (size_t)i * V};
        seqc[i] = (lz_llama_seq){&chunked[i], segs[i], 3, q[i], nq[i], lc + (size_t)i * V};
    }
    /* prefill: every question in one call, and through a 7-row scratch (sequences cut) */
    CHECK(lz_llama_forward_batch(m, s, seq, B) == 0, "%s: batched prefill", what);
    CHECK(lz_llama_forward_batch(m, tiny, seqc, B) == 0, "%s: chunked prefill", what);
    double worst = 0, worst_c = 0;
    for (int i = 0; i < B; i++) {
        worst = fmax(worst, rel(lb + (size_t)i * V, ls + (size_t)i * V, V));
        worst_c = fmax(worst_c, rel(lc + (size_t)i * V, ls + (size_t)i * V, V));
        CHECK(batch[i].n == nq[i] && chunked[i].n == nq[i], "%s: sequence %d holds its %d tokens", what, i, nq[i]);
    }
    CHECK(worst <= 1e-5, "%s: batched prefill logits vs serial: rel diff %g", what, worst);
    CHECK(worst_c <= 1e-5, "%s: chunked prefill logits vs serial: rel diff %g", what, worst_c);
    /* decode: greedy from each sequence's own logits, the running ones in one call a step;
     * sequence i sits out the steps where (i + step) % 4 == 0 (left, joined again) */
    int same = 1;
    for (int step = 0; step < STEPS; step++) {
        int ts[B], tb[B], nb = 0;
        lz_llama_seq run[B];
        for (int i = 0; i < B; i++) {
            if ((i + step) % 4 == 0) continue;
            ts[i] = lz_sample_argmax(ls + (size_t)i * V, V);
            tb[i] = lz_sample_argmax(lb + (size_t)i * V, V);
            same &= ts[i] == tb[i];
            lz_llama_forward(m, s, &serial[i], segs[i], 3, &ts[i], 1, ls + (size_t)i * V, LZ_LOGITS_LAST);
            run[nb] = seq[i];
            run[nb].tokens = &tb[i];
            run[nb++].n = 1;
        }
        CHECK(lz_llama_forward_batch(m, s, run, nb) == 0, "%s: decode step %d", what, step);
        for (int i = 0; i < B; i++) worst = fmax(worst, rel(lb + (size_t)i * V, ls + (size_t)i * V, V));
    }
    CHECK(same, "%s: greedy continuations differ between batched and serial", what);
    CHECK(worst <= 1e-5, "%s: batched decode logits vs serial: rel diff %g", what, worst);
    /* a decode step of several sequences from the same caches: each row gets the bits its
     * sequence gets alone (the one-token products, row by row) */
    {
        const size_t kv = (size_t)m->cfg.n_layers * m->cfg.n_kv_heads * CAP * m->cfg.head_dim * sizeof(float);
        int tok[B], exact = 1;
        lz_llama_seq one_step[B];
        for (int i = 0; i < B; i++) {
            memcpy(chunked[i].k, serial[i].k, kv);
            memcpy(chunked[i].v, serial[i].v, kv);
            chunked[i].n = serial[i].n;
            chunked[i].pos0 = serial[i].pos0;
            tok[i] = 100 + i;
            one_step[i] = (lz_llama_seq){&chunked[i], segs[i], 3, &tok[i], 1, lc + (size_t)i * V};
        }
        CHECK(lz_llama_forward_batch(m, s, one_step, B) == 0, "%s: exact decode step", what);
        for (int i = 0; i < B; i++) {
            lz_llama_forward(m, s, &serial[i], segs[i], 3, &tok[i], 1, ls + (size_t)i * V, LZ_LOGITS_LAST);
            exact &= !memcmp(ls + (size_t)i * V, lc + (size_t)i * V, (size_t)V * sizeof(float));
        }
        CHECK(exact, "%s: batched decode rows have the serial bits", what);
    }
    /* one sequence alone: lz_llama_forward's bits */
    lz_kv_cache_reset(&serial[0], 30);
    lz_kv_cache_reset(&batch[0], 30);
    lz_llama_forward(m, s, &serial[0], segs[0], 3, q[5], nq[5], ls, LZ_LOGITS_LAST);
    lz_llama_seq one = {&batch[0], segs[0], 3, q[5], nq[5], lb};
    int bits = lz_llama_forward_batch(m, s, &one, 1) == 0 && !memcmp(ls, lb, (size_t)V * sizeof(float));
    const int d = m->cfg.head_dim;
    for (int lh = 0; lh < m->cfg.n_layers * m->cfg.n_kv_heads; lh++) /* the rows it wrote */
        bits &= !memcmp(serial[0].k + (size_t)lh * CAP * d, batch[0].k + (size_t)lh * CAP * d, (size_t)nq[5] * d * 4) &&
                !memcmp(serial[0].v + (size_t)lh * CAP * d, batch[0].v + (size_t)lh * CAP * d, (size_t)nq[5] * d * 4);
    CHECK(bits, "%s: one sequence: the same bits as lz_llama_forward", what);
    /* sequences that want no logits, and joined mid-way: a fresh one beside running ones */
    lz_kv_cache_reset(&batch[1], 5);
    lz_llama_seq mix[2] = {{&batch[1], segs[1], 1, q[4], nq[4], NULL}, {&batch[2], segs[2], 3, q[0], 1, lb}};
    CHECK(lz_llama_forward_batch(m, s, mix, 2) == 0 && batch[1].n == nq[4], "%s: no logits wanted", what);
    /* refused: a cache twice, a full cache, a token out of range, nothing */
    lz_llama_seq dup[2] = {{&batch[3], segs[3], 3, q[0], 1, lb}, {&batch[3], segs[3], 3, q[0], 1, lb + V}};
    CHECK(lz_llama_forward_batch(m, s, dup, 2) != 0, "%s: a cache twice refused", what);
    int many[CAP + 1] = {0}, bad = V + 3;
    lz_llama_seq full = {&batch[4], segs[4], 3, many, CAP + 1, lb}, oob = {&batch[5], segs[5], 3, &bad, 1, lb};
    CHECK(lz_llama_forward_batch(m, s, &full, 1) != 0, "%s: a full cache refused", what);
    CHECK(lz_llama_forward_batch(m, s, &oob, 1) != 0, "%s: a token out of range refused", what);
    CHECK(lz_llama_forward_batch(m, s, seq, 0) != 0, "%s: an empty batch refused", what);
    for (int i = 0; i < B; i++) {
        lz_kv_cache_free(&serial[i]);
        lz_kv_cache_free(&batch[i]);
        lz_kv_cache_free(&chunked[i]);
    }
    for (int j = 0; j < 3; j++) lz_kv_cache_free(&cd[j]);
    lz_kv_cache_free(&cp);
    free(ls);
    free(lb);
    free(lc);
    lz_llama_scratch_free(s);
    lz_llama_scratch_free(tiny);
}

int main(void)
{
    lz_llama_set_threads(2);
    const int types[2] = {LZ_GGML_F32, LZ_GGML_BF16};
    const char *names[2] = {"fp32", "bf16"};
    for (int t = 0; t < 2; t++) {
        char dir[256], path[300];
        lz_llama *m = lz_test_model_typed(2, 4, 2, 16, 64, types[t], dir, sizeof dir, path, sizeof path);
        if (!m) continue;
        test_batch(m, names[t]);
        lz_test_model_free(m, dir, path);
    }
    return lz_test_done();
}

/* cpu_query.c - the CPU engine's question table (cpu_query.h): the query
 * session's forward passes, moved here from query/answer_run.c behind
 * lz_query_backend's slot hooks. A slot is a sequence: its own KV cache
 * (allocated by reserve, freed by release) and the segments begin_in handed
 * it (borrowed until release); the slots grow as idle_slot needs them. */
#include "engine/cpu_query.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int live;                  /* begun and not released */
    lz_kv_cache cache;         /* its own rows (cap 0: none reserved) */
    const lz_kv_segment *segs; /* (n_segs) the begin's, borrowed */
    int n_segs;
} cpu_seq;

struct lz_engine_cpu_query {
    const lz_llama *m;
    lz_llama_scratch *sc;
    cpu_seq *seq;              /* (n_seq) */
    int n_seq;
};

lz_engine_cpu_query *lz_engine_cpu_query_new(const lz_llama *m, int batch)
{
    lz_engine_cpu_query *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->m = m;
    if (!(c->sc = lz_llama_scratch_new(m, batch > 0 ? batch : 256))) {
        free(c);
        return NULL;
    }
    return c;
}

void lz_engine_cpu_query_free(lz_engine_cpu_query *c)
{
    if (!c) return;
    for (int i = 0; i < c->n_seq; i++) lz_kv_cache_free(&c->seq[i].cache);
    free(c->seq);
    lz_llama_scratch_free(c->sc);
    free(c);
}

/* Slot i, or NULL (with err) when it is none of c's. */
static cpu_seq *seq_of(lz_engine_cpu_query *c, int i, char *err, size_t errlen)
{
    if (i >= 0 && i < c->n_seq) return &c->seq[i];
    snprintf(err, errlen, "CPU engine: slot %d (it holds %d)", i, c->n_seq);
    return NULL;
}

static int t_idle_slot(void *ctx)
{
    lz_engine_cpu_query *c = ctx;
    for (int i = 0; i < c->n_seq; i++)
        if (!c->seq[i].live && !c->seq[i].cache.cap) return i;
    const int n = c->n_seq ? 2 * c->n_seq : 8;
    cpu_seq *s = realloc(c->seq, sizeof *s * (size_t)n);
    if (!s) return -1;
    memset(s + c->n_seq, 0, sizeof *s * (size_t)(n - c->n_seq));
    c->seq = s;
    const int i = c->n_seq;
    c->n_seq = n;
    return i;
}

static int t_reserve(void *ctx, int slot, int64_t n_own, char *err, size_t errlen)
{
    lz_engine_cpu_query *c = ctx;
    cpu_seq *s = seq_of(c, slot, err, errlen);
    if (!s) return -1;
    lz_kv_cache_free(&s->cache);
    if (n_own > INT32_MAX || lz_kv_cache_init(&s->cache, &c->m->cfg, (int)n_own)) {
        snprintf(err, errlen, "out of memory for %lld tokens of KV", (long long)n_own);
        return LZ_QUERY_ENOMEM;
    }
    return 0;
}

static int t_begin_in(void *ctx, int slot, int block, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs,
                      int64_t pos0, char *err, size_t errlen)
{
    lz_engine_cpu_query *c = ctx;
    cpu_seq *s = seq_of(c, slot, err, errlen);
    if (!s) return -1;
    if (block) return snprintf(err, errlen, "CPU engine: block placements come rotated (no begin_block)"), -1;
    if (!s->cache.cap) return snprintf(err, errlen, "CPU engine: slot %d begun with no rows reserved", slot), -1;
    s->segs = segs;
    s->n_segs = n_segs;
    s->live = 1;
    lz_kv_cache_reset(&s->cache, pos0);
    return 0;
}

static int t_step_in(void *ctx, int slot, const int *ids, int n, float *logits, char *err, size_t errlen)
{
    lz_engine_cpu_query *c = ctx;
    cpu_seq *s = seq_of(c, slot, err, errlen);
    if (!s) return -1;
    if (lz_llama_forward(c->m, c->sc, &s->cache, s->segs, s->n_segs, ids, n, logits,
                         logits ? LZ_LOGITS_LAST : LZ_LOGITS_NONE))
        return snprintf(err, errlen, "forward pass failed over %d tokens", n), -1;
    return 0;
}

static const lz_kv_cache *t_own_kv(void *ctx, int slot)
{
    lz_engine_cpu_query *c = ctx;
    return slot >= 0 && slot < c->n_seq ? &c->seq[slot].cache : NULL;
}

static void t_release(void *ctx, int slot)
{
    lz_engine_cpu_query *c = ctx;
    if (slot < 0 || slot >= c->n_seq) return;
    cpu_seq *s = &c->seq[slot];
    lz_kv_cache_free(&s->cache);
    memset(s, 0, sizeof *s);
}

/* Rows ids[i][0..n[i]) of slots[i] for i < n_seqs in one pass (one sequence:
 * lz_llama_forward), logits[i] each one's last row's (NULL: none). 0, -1 or
 * LZ_QUERY_ENOMEM; what failed is what: the question or the decoding. */
static int run_many(lz_engine_cpu_query *c, const int *slots, const int *const *ids, const int *n, int n_seqs,
                    float *const *logits, const char *what, char *err, size_t errlen)
{
    for (int i = 0; i < n_seqs; i++)
        if (!seq_of(c, slots[i], err, errlen)) return -1;
    if (n_seqs == 1) {
        cpu_seq *s = &c->seq[slots[0]];
        if (lz_llama_forward(c->m, c->sc, &s->cache, s->segs, s->n_segs, ids[0], n[0], logits[0],
                             logits[0] ? LZ_LOGITS_LAST : LZ_LOGITS_NONE))
            return snprintf(err, errlen, "forward pass failed %s", what), -1;
        return 0;
    }
    lz_llama_seq *seqs = malloc((size_t)(n_seqs > 0 ? n_seqs : 1) * sizeof *seqs);
    if (!seqs) return snprintf(err, errlen, "out of memory"), LZ_QUERY_ENOMEM;
    for (int i = 0; i < n_seqs; i++) {
        cpu_seq *s = &c->seq[slots[i]];
        seqs[i] = (lz_llama_seq){.cache = &s->cache, .segs = s->segs, .n_segs = s->n_segs, .tokens = ids[i],
                                 .n = n[i], .logits = logits[i]};
    }
    const int frc = n_seqs > 0 ? lz_llama_forward_batch(c->m, c->sc, seqs, n_seqs) : 0;
    free(seqs);
    if (frc) return snprintf(err, errlen, "forward pass failed %s", what), -1;
    return 0;
}

static int t_prefill_many(void *ctx, const int *slots, const int *const *ids, const int *n, int n_seqs,
                          float *const *logits, char *err, size_t errlen)
{
    return run_many(ctx, slots, ids, n, n_seqs, logits, "on the question", err, errlen);
}

static int t_decode_many(void *ctx, const int *slots, const int *ids, int n, float *const *logits, char *err,
                         size_t errlen)
{
    const int **rows = malloc((size_t)(n > 0 ? n : 1) * sizeof *rows);
    int *ones = malloc((size_t)(n > 0 ? n : 1) * sizeof *ones);
    int rc = LZ_QUERY_ENOMEM;
    if (!rows || !ones) snprintf(err, errlen, "out of memory");
    else {
        for (int i = 0; i < n; i++) rows[i] = &ids[i], ones[i] = 1;
        rc = run_many(ctx, slots, rows, ones, n, logits, "while decoding", err, errlen);
    }
    free(rows);
    free(ones);
    return rc;
}

void lz_engine_cpu_query_table(lz_engine_cpu_query *c, lz_query_backend *b)
{
    *b = (lz_query_backend){.ctx = c, .idle_slot = t_idle_slot, .reserve = t_reserve, .begin_in = t_begin_in,
                            .step_in = t_step_in, .own_kv = t_own_kv, .release = t_release,
                            .prefill_many = t_prefill_many, .decode_many = t_decode_many, .reads_fp8 = 1};
}

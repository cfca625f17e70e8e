/* cpu_encode.c - the CPU engine's document table (cpu_encode.h): the
 * encoder's forward pass over a document (and its probe), moved here from
 * ingest/encode.c, behind lz_encode_backend's encode and encode_probe; idle
 * scratches kept on a stack under a mutex, so concurrent callers never
 * share one. */
#include "engine/cpu_encode.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct lz_engine_cpu_encode {
    const lz_llama *m;
    lz_kv_segment prefix;      /* the prefix's rows (n 0: none) */
    pthread_mutex_t mu;
    lz_llama_scratch **idle;   /* (n_idle) scratches no call holds */
    int n_idle, cap_idle;
};

lz_engine_cpu_encode *lz_engine_cpu_encode_new(const lz_llama *m)
{
    lz_engine_cpu_encode *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->m = m;
    pthread_mutex_init(&c->mu, NULL);
    if (!(c->idle = malloc(sizeof *c->idle)) || !(c->idle[0] = lz_llama_scratch_new(m, LZ_ENCODE_CHUNK))) {
        lz_engine_cpu_encode_free(c);
        return NULL;
    }
    c->n_idle = c->cap_idle = 1;
    return c;
}

void lz_engine_cpu_encode_free(lz_engine_cpu_encode *c)
{
    if (!c) return;
    for (int i = 0; i < c->n_idle; i++) lz_llama_scratch_free(c->idle[i]);
    free(c->idle);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void lz_engine_cpu_encode_set_prefix(lz_engine_cpu_encode *c, const lz_kv_cache *prefix)
{
    c->prefix = prefix && prefix->n > 0 ? (lz_kv_segment){.k = prefix->k, .v = prefix->v, .n = prefix->n, .stride = prefix->cap}
                                        : (lz_kv_segment){0};
}

/* A scratch for one call: an idle one, or a new one; NULL when out of memory. */
static lz_llama_scratch *take(lz_engine_cpu_encode *c)
{
    pthread_mutex_lock(&c->mu);
    lz_llama_scratch *s = c->n_idle ? c->idle[--c->n_idle] : NULL;
    pthread_mutex_unlock(&c->mu);
    return s ? s : lz_llama_scratch_new(c->m, LZ_ENCODE_CHUNK);
}

/* Gives a call's scratch back (freed when the stack cannot grow). */
static void give(lz_engine_cpu_encode *c, lz_llama_scratch *s)
{
    pthread_mutex_lock(&c->mu);
    if (c->n_idle == c->cap_idle) {
        lz_llama_scratch **v = realloc(c->idle, sizeof *v * (size_t)(2 * c->cap_idle));
        if (v) c->idle = v, c->cap_idle *= 2;
    }
    if (c->n_idle < c->cap_idle) c->idle[c->n_idle++] = s, s = NULL;
    pthread_mutex_unlock(&c->mu);
    lz_llama_scratch_free(s);
}

/* ids[0..n) after the prefix into out (emptied first: rows at s..s+n-1), then
 * pids[0..n_pids) after them; the rotated queries of rows c0..c0+cw-1 (counted
 * from the document's first) into qwin. 0 or -1. */
static int run(lz_engine_cpu_encode *c, const int *ids, int n, const int *pids, int n_pids, lz_kv_cache *out,
               float *qwin, int c0, int cw, char *err, size_t errlen)
{
    lz_llama_scratch *sc = take(c);
    if (!sc) return snprintf(err, errlen, "out of memory (encoder scratch for %d tokens)", LZ_ENCODE_CHUNK), -1;
    const lz_kv_segment *sg = c->prefix.n ? &c->prefix : NULL;
    lz_kv_cache_reset(out, c->prefix.n);
    if (cw > 0 && qwin) lz_llama_scratch_capture(sc, qwin, (int64_t)c->prefix.n + c0, cw);
    int frc = n > 0 ? lz_llama_forward(c->m, sc, out, sg, sg ? 1 : 0, ids, n, NULL, LZ_LOGITS_NONE) : 0;
    if (!frc && n_pids > 0) /* the probe after the document: scored, never stored */
        frc = lz_llama_forward(c->m, sc, out, sg, sg ? 1 : 0, pids, n_pids, NULL, LZ_LOGITS_NONE);
    lz_llama_scratch_capture(sc, NULL, 0, 0);
    give(c, sc);
    if (frc) snprintf(err, errlen, "forward pass over %d tokens failed", n);
    return frc ? -1 : 0;
}

static int t_encode(void *ctx, const int *ids, int n, lz_kv_cache *out, float *qwin, int c0, int cw, char *err,
                    size_t errlen)
{
    return run(ctx, ids, n, NULL, 0, out, qwin, c0, cw, err, errlen);
}

static int t_encode_probe(void *ctx, const int *ids, int n, const int *pids, int n_pids, lz_kv_cache *out, float *qwin,
                          char *err, size_t errlen)
{
    return run(ctx, ids, n, pids, n_pids, out, qwin, n, n_pids, err, errlen);
}

lz_encode_backend lz_engine_cpu_encode_table(lz_engine_cpu_encode *c, int max_tokens)
{
    return (lz_encode_backend){.ctx = c, .encode = t_encode, .encode_probe = t_encode_probe,
                               .max_tokens = max_tokens > 0 ? max_tokens : INT32_MAX};
}

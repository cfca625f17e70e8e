/* engine.c - lz_engine: one object for the CPU engine and a GPU engine. The
 * CPU engine holds its two tables over model/ (cpu_query.h: made at open;
 * cpu_encode.h: made at the first lz_engine_encoder or lz_engine_set_prefix);
 * a GPU engine forwards to the GPU table this program was linked with
 * (engine_gpu_ops.h), and fails clearly in a program without one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/cpu_encode.h"
#include "engine/cpu_query.h"
#include "engine/engine_gpu_ops.h"

struct lz_engine {
    int gpu, device;
    void *ctx;                     /* the GPU engine's context */
    const lz_engine_gpu_table *ops;
    size_t granted;                /* its tier budget */
    lz_query_backend query;        /* its question table (the session keeps the address) */
    const lz_llama *m;             /* the CPU engine's model, */
    lz_engine_cpu_query *cpu_q;    /* its sequences */
    lz_engine_cpu_encode *cpu_d;   /* and its documents (NULL until asked for) */
};

int lz_engine_gpu_built(void) { return lz_engine_gpu_ops() != NULL; }

int lz_engine_gpu_count(void)
{
    const lz_engine_gpu_table *t = lz_engine_gpu_ops();
    return t ? t->count() : 0;
}

int lz_engine_use_device(int dev, char *err, size_t errlen)
{
    const lz_engine_gpu_table *t = lz_engine_gpu_ops();
    return t && dev >= 0 ? t->use(dev, err, errlen) : 0;
}

int lz_engine_open(const lz_llama *m, const lz_engine_opts *o, lz_engine **out, char *err, size_t errlen)
{
    *out = NULL;
    const lz_engine_gpu_table *t = lz_engine_gpu_ops();
    if (o->gpu && !t) {
        snprintf(err, errlen, "this build has no CUDA support: GPU engines are in the programs of 'make cuda' "
                 "(build/cuda/)");
        return -1;
    }
    lz_engine *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    e->device = o->gpu ? o->device : -1;
    if (o->gpu) {
        e->gpu = 1;
        e->ops = t;
        if (!(e->ctx = t->open(m, o, &e->granted, err, errlen))) {
            free(e);
            return -1;
        }
        t->query(e->ctx, &e->query);
    } else {
        e->m = m;
        if (!(e->cpu_q = lz_engine_cpu_query_new(m, o->batch))) {
            free(e);
            snprintf(err, errlen, "out of memory (the CPU engine's scratch for %d tokens)", o->batch > 0 ? o->batch : 256);
            return -1;
        }
        lz_engine_cpu_query_table(e->cpu_q, &e->query);
    }
    *out = e;
    return 0;
}

void lz_engine_free(lz_engine *e)
{
    if (!e) return;
    if (e->gpu) e->ops->close(e->ctx);
    lz_engine_cpu_query_free(e->cpu_q);
    lz_engine_cpu_encode_free(e->cpu_d);
    free(e);
}

int lz_engine_is_gpu(const lz_engine *e) { return e->gpu; }
int lz_engine_device(const lz_engine *e) { return e->device; }
size_t lz_engine_gpu_cache(const lz_engine *e) { return e->granted; }

const lz_query_backend *lz_engine_query(lz_engine *e) { return &e->query; }

int lz_engine_set_slots(lz_engine *e, int n, int seq_tokens, char *err, size_t errlen)
{
    if (!e->gpu) {
        snprintf(err, errlen, "slots are a GPU engine's: the CPU engine batches in the scheduler");
        return -1;
    }
    const int rc = e->ops->set_slots(e->ctx, n, seq_tokens, err, errlen);
    e->ops->query(e->ctx, &e->query); /* n_slots and seq_tokens as they now are */
    return rc;
}

void lz_engine_tier_stats(lz_engine *e, lz_doc_cache_stats *policy, lz_engine_tiers *t)
{
    lz_doc_cache_stats p;
    lz_engine_tiers z;
    memset(&p, 0, sizeof p);
    memset(&z, 0, sizeof z);
    if (e->gpu) e->ops->tiers(e->ctx, &p, &z);
    if (policy) *policy = p;
    if (t) *t = z;
}

void lz_engine_policy_stats(void *e, lz_doc_cache_stats *st) { lz_engine_tier_stats((lz_engine *)e, st, NULL); }

void lz_engine_decode_stats(void *e, int64_t *grouped_steps, int64_t *blocks_read, int64_t *blocks_placed)
{
    lz_engine_tiers t;
    lz_engine_tier_stats((lz_engine *)e, NULL, &t);
    *grouped_steps = t.grouped_steps;
    *blocks_read = t.grouped_blocks_read;
    *blocks_placed = t.grouped_blocks_placed;
}

/* The CPU engine's document table, made the first time it is asked for; NULL when out of memory. */
static lz_engine_cpu_encode *cpu_docs(lz_engine *e)
{
    if (!e->cpu_d) e->cpu_d = lz_engine_cpu_encode_new(e->m);
    return e->cpu_d;
}

lz_encode_backend lz_engine_encoder(lz_engine *e, const lz_engine_encode_opts *o)
{
    if (e->gpu) return e->ops->encoder(e->ctx, o);
    if (cpu_docs(e)) return lz_engine_cpu_encode_table(e->cpu_d, o->max_tokens);
    lz_encode_backend none; /* out of memory: the encoder computes on its own CPU table */
    memset(&none, 0, sizeof none);
    return none;
}

int lz_engine_set_prefix(lz_engine *e, const lz_kv_cache *prefix, int fp8, char *err, size_t errlen)
{
    if (e->gpu) return e->ops->set_prefix(e->ctx, prefix, fp8, err, errlen);
    if (!cpu_docs(e)) return snprintf(err, errlen, "out of memory (the CPU engine's encoder scratch)"), -1;
    lz_engine_cpu_encode_set_prefix(e->cpu_d, prefix); /* fp8: the encoder quantises its payloads itself */
    return 0;
}

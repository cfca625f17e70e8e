/* engine.c - lz_engine: one object for the CPU engine and a GPU engine. The
 * CPU engine holds nothing (its tables are empty: the pipelines compute on the
 * CPU themselves); a GPU engine forwards to the GPU table this program was
 * linked with (engine_gpu_ops.h), and fails clearly in a program without one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/engine_gpu_ops.h"

struct lz_engine {
    int gpu, device;
    void *ctx;                     /* the GPU engine's context */
    const lz_engine_gpu_table *ops;
    size_t granted;                /* its tier budget */
    lz_query_backend query;        /* its question table (the session keeps the address) */
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
    }
    *out = e;
    return 0;
}

void lz_engine_free(lz_engine *e)
{
    if (!e) return;
    if (e->gpu) e->ops->close(e->ctx);
    free(e);
}

int lz_engine_is_gpu(const lz_engine *e) { return e->gpu; }
int lz_engine_device(const lz_engine *e) { return e->device; }
size_t lz_engine_gpu_cache(const lz_engine *e) { return e->granted; }

const lz_query_backend *lz_engine_query(lz_engine *e) { return e->gpu ? &e->query : NULL; }

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

lz_encode_backend lz_engine_encoder(lz_engine *e, const lz_engine_encode_opts *o)
{
    if (e->gpu) return e->ops->encoder(e->ctx, o);
    lz_encode_backend none;
    memset(&none, 0, sizeof none);
    return none;
}

int lz_engine_set_prefix(lz_engine *e, const lz_kv_cache *prefix, int fp8, char *err, size_t errlen)
{
    return e->gpu ? e->ops->set_prefix(e->ctx, prefix, fp8, err, errlen) : 0;
}

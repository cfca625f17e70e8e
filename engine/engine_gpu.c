/* engine_gpu.c - the GPU engine behind lz_engine (gpu/llama_cuda.h, one
 * device): its question table (every hook the engine has, its slots, fp8
 * documents read as stored; the engine's LZ_LLAMA_GPU_ENOMEM is the hooks'
 * LZ_QUERY_ENOMEM) and its document table (whole documents taking turns on
 * the engine, or several in a pass enqueued and finished on one thread and
 * fetched on many; every call makes the engine's device current first).
 * Linked only into the programs of 'make cuda', before the library, whose
 * stand-in (engine_cpu_only.c) it replaces (engine_gpu_ops.h).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_gpu_ops.h"
#include "gpu/llama_cuda.h"

typedef struct {
    lz_llama_gpu *g;
    int dev;              /* -1: the device current when it was made */
    pthread_mutex_t one;  /* whole-document encodes take turns */
} gpu_ctx;

#define G(ctx) (((gpu_ctx *)(ctx))->g)

/* An engine call's status as a hook's: its shortage of memory as LZ_QUERY_ENOMEM, the rest as it is. */
static int status(int rc) { return rc == LZ_LLAMA_GPU_ENOMEM ? LZ_QUERY_ENOMEM : rc; }

/* Makes c's device the calling thread's current one (a document hook may run on any thread). */
static int here(gpu_ctx *c, char *err, size_t errlen) { return c->dev >= 0 ? lz_llama_gpu_use_device(c->dev, err, errlen) : 0; }

/* ---- the question table ---- */

static int q_begin(void *ctx, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs, int64_t pos0, char *err,
                   size_t errlen)
{
    return status(lz_llama_gpu_begin(G(ctx), segs, keys, n_segs, pos0, err, errlen));
}
static int q_begin_block(void *ctx, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs, int64_t pos0,
                         char *err, size_t errlen)
{
    return status(lz_llama_gpu_begin_block(G(ctx), segs, keys, n_segs, pos0, err, errlen));
}
static void q_settle(void *ctx) { lz_llama_gpu_settle(G(ctx)); }
static int q_keep_own(void *ctx, int t0, int n, const uint8_t key[32], char *err, size_t errlen)
{
    return status(lz_llama_gpu_keep_own(G(ctx), t0, n, key, err, errlen));
}
static int q_step(void *ctx, const int *ids, int n, float *logits, char *err, size_t errlen)
{
    return status(lz_llama_gpu_step(G(ctx), ids, n, logits, err, errlen));
}
static int q_resident(void *ctx, const uint8_t key[32]) { return lz_llama_gpu_resident(G(ctx), key); }
static void *q_host_alloc(void *ctx, size_t bytes) { return lz_llama_gpu_host_alloc(G(ctx), bytes); }
static void q_host_free(void *ctx, void *p, size_t bytes) { lz_llama_gpu_host_free(G(ctx), p, bytes); }
static int q_preload(void *ctx, const lz_kv_segment *seg, const uint8_t key[32], double hits, char *err, size_t errlen)
{
    return status(lz_llama_gpu_preload(G(ctx), seg, key, hits, err, errlen));
}
static int q_encode(void *ctx, const lz_kv_segment *prefix, const uint8_t *prefix_key, const int *const *ids,
                    const int *n, const uint8_t *const *keys, int n_docs, char *err, size_t errlen)
{
    return status(lz_llama_gpu_encode_keep(G(ctx), prefix, prefix_key, ids, n, keys, n_docs, err, errlen));
}
static int q_idle_slot(void *ctx) { return lz_llama_gpu_idle_slot(G(ctx)); }
static int q_begin_in(void *ctx, int slot, int block, const lz_kv_segment *segs, const uint8_t *const *keys,
                      int n_segs, int64_t pos0, char *err, size_t errlen)
{
    return status((block ? lz_llama_gpu_begin_block_slot : lz_llama_gpu_begin_slot)(G(ctx), slot, segs, keys, n_segs,
                                                                                     pos0, err, errlen));
}
static int q_step_in(void *ctx, int slot, const int *ids, int n, float *logits, char *err, size_t errlen)
{
    return status(lz_llama_gpu_step_slot(G(ctx), slot, ids, n, logits, err, errlen));
}
static int q_keep_own_in(void *ctx, int slot, int t0, int n, const uint8_t key[32], char *err, size_t errlen)
{
    return status(lz_llama_gpu_keep_own_slot(G(ctx), slot, t0, n, key, err, errlen));
}
static void q_release(void *ctx, int slot) { lz_llama_gpu_release(G(ctx), slot); }
static int q_prefill_many(void *ctx, const int *slots, const int *const *ids, const int *n, int n_seqs,
                          float *const *logits, char *err, size_t errlen)
{
    return status(lz_llama_gpu_prefill_many(G(ctx), slots, ids, n, n_seqs, logits, err, errlen));
}
static int q_decode_many(void *ctx, const int *slots, const int *ids, int n, float *const *logits, char *err,
                         size_t errlen)
{
    return status(lz_llama_gpu_decode_many_rows(G(ctx), slots, ids, n, logits, err, errlen));
}
static int q_decode_next(void *ctx, const int *slots, const int *ids, int n, float *const *logits, int *next,
                         const int *ban, int n_ban, char *err, size_t errlen)
{
    const int rc = lz_llama_gpu_set_ban(G(ctx), ban, n_ban, err, errlen); /* a no-op when it is the same list */
    return status(rc ? rc : lz_llama_gpu_decode_next(G(ctx), slots, ids, n, logits, next, err, errlen));
}
static int q_fits(void *ctx, int64_t doc_tokens) { return lz_llama_gpu_fits(G(ctx), doc_tokens); }

static void gpu_query(void *ctx, lz_query_backend *b)
{
    *b = (lz_query_backend){.ctx = ctx, .begin = q_begin, .step = q_step, .resident = q_resident,
                            .encode = q_encode, .host_alloc = q_host_alloc, .host_free = q_host_free,
                            .preload = q_preload, .begin_block = q_begin_block, .keep_own = q_keep_own,
                            .settle = q_settle, .n_slots = lz_llama_gpu_slots(G(ctx)),
                            .seq_tokens = lz_llama_gpu_slot_tokens(G(ctx)), .idle_slot = q_idle_slot,
                            .begin_in = q_begin_in, .step_in = q_step_in, .keep_own_in = q_keep_own_in,
                            .release = q_release, .prefill_many = q_prefill_many, .decode_many = q_decode_many,
                            .fits = q_fits, .decode_next = q_decode_next, .reads_fp8 = 1};
}

/* ---- the document table ---- */

static int d_encode(void *ctx, const int *ids, int n, lz_kv_cache *out, float *qwin, int c0, int cw, char *err,
                    size_t errlen)
{
    gpu_ctx *c = ctx;
    /* documents encoded in parallel take turns on the engine, their KV eviction scoring and
     * packing side by side on the host */
    pthread_mutex_lock(&c->one);
    const int rc = here(c, err, errlen) ? -1 : lz_llama_gpu_encode(c->g, ids, n, out, qwin, c0, cw, err, errlen);
    pthread_mutex_unlock(&c->one);
    return rc;
}
static int d_start(void *ctx, const int *const *ids, const int *n, const int *c0, const int *cw, int n_docs, char *err,
                   size_t errlen)
{
    gpu_ctx *c = ctx;
    return here(c, err, errlen) ? -1 : lz_llama_gpu_encode_start(c->g, ids, n, c0, cw, n_docs, err, errlen);
}
static int d_finish(void *ctx, char *err, size_t errlen)
{
    gpu_ctx *c = ctx;
    return here(c, err, errlen) ? -1 : lz_llama_gpu_encode_finish(c->g, err, errlen);
}
static int d_fetch(void *ctx, int i, lz_kv_cache *out, float *qwin, char *err, size_t errlen)
{
    gpu_ctx *c = ctx;
    return here(c, err, errlen) ? -1 : lz_llama_gpu_encoded(c->g, i, out, qwin, err, errlen);
}
static int d_fetch_mass(void *ctx, int i, float *mass)
{
    gpu_ctx *c = ctx;
    char err[256];
    return here(c, err, sizeof err) ? 0 : lz_llama_gpu_encoded_mass(c->g, i, mass); /* 0: scored on the CPU */
}
static int d_fetch_planes(void *ctx, int i, int n, int dtype, const void **k, const void **v, const float **ks,
                          const float **vs, char *err, size_t errlen)
{
    gpu_ctx *c = ctx;
    return here(c, err, errlen) ? -1 : lz_llama_gpu_encoded_planes(c->g, i, n, dtype, k, v, ks, vs, err, errlen);
}

static lz_encode_backend gpu_encoder(void *ctx, const lz_engine_encode_opts *o)
{
    lz_encode_backend b = {.ctx = ctx, .encode = d_encode, .max_tokens = o->max_tokens};
    if (o->pass_tokens > 0) {
        b.start = d_start, b.finish = d_finish, b.fetch = d_fetch, b.pass_tokens = o->pass_tokens;
        if (o->masses) b.fetch_mass = d_fetch_mass;
        if (o->planes) b.fetch_planes = d_fetch_planes;
    }
    return b;
}

static int gpu_set_prefix(void *ctx, const lz_kv_cache *prefix, int fp8, char *err, size_t errlen)
{
    gpu_ctx *c = ctx;
    if (here(c, err, errlen)) return -1;
    lz_llama_gpu_set_encode_fp8(c->g, fp8);
    return lz_llama_gpu_set_prefix(c->g, prefix, err, errlen);
}

/* ---- making and the rest ---- */

static void *gpu_open(const lz_llama *m, const lz_engine_opts *o, size_t *granted, char *err, size_t errlen)
{
    gpu_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->dev = o->device;
    if (here(c, err, errlen) || lz_llama_gpu_new(m, o->own_tokens > 0 ? o->own_tokens : 4096, &c->g, err, errlen)) {
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->one, NULL);
    if (o->gpu_cache) *granted = lz_llama_gpu_set_cache(c->g, o->gpu_cache);
    else {
        lz_doc_cache_stats st;
        lz_llama_gpu_cache_policy_stats(c->g, &st);
        *granted = st.bytes_budget;
    }
    lz_llama_gpu_set_cache_policy(c->g, o->cache_policy);
    return c;
}

static void gpu_close(void *ctx)
{
    gpu_ctx *c = ctx;
    char err[256];
    if (here(c, err, sizeof err)) fprintf(stderr, "warning: freeing a GPU engine: %s\n", err);
    lz_llama_gpu_free(c->g);
    pthread_mutex_destroy(&c->one);
    free(c);
}

static int gpu_set_slots(void *ctx, int n, int seq_tokens, char *err, size_t errlen)
{
    return status(lz_llama_gpu_set_slots(G(ctx), n, seq_tokens, err, errlen));
}

static void gpu_tiers(void *ctx, lz_doc_cache_stats *policy, lz_engine_tiers *t)
{
    lz_llama_gpu_cache_policy_stats(G(ctx), policy);
    lz_llama_gpu_tiers ft;
    lz_llama_gpu_tier_stats(G(ctx), &ft);
    lz_llama_gpu_group_info gi;
    lz_llama_gpu_group_stats(G(ctx), &gi);
    *t = (lz_engine_tiers){.copies = ft.uploads, .bytes_in = ft.bytes_up, .copy_s = ft.copy_s,
                           .pool_bytes = ft.pool_capacity, .pool_used = ft.pool_used, .pool_regions = ft.pool_regions,
                           .pool_grows = ft.pool_grows, .pool_evictions = ft.pool_evictions,
                           .pinned_bytes = ft.pinned_capacity, .pinned_used = ft.pinned_used,
                           .grouped_steps = gi.steps, .grouped_blocks_read = gi.blocks_read,
                           .grouped_blocks_placed = gi.blocks_placed};
}

static const lz_engine_gpu_table table = {
    .count = lz_llama_gpu_device_count, .use = lz_llama_gpu_use_device, .open = gpu_open, .close = gpu_close,
    .query = gpu_query, .set_slots = gpu_set_slots, .tiers = gpu_tiers, .encoder = gpu_encoder,
    .set_prefix = gpu_set_prefix};

const lz_engine_gpu_table *lz_engine_gpu_ops(void) { return &table; }

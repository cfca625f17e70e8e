/* gpu_engines.h - lazyingest's GPU device contexts (--gpu, --gpus): one
 * lz_llama_gpu a listed device, each made on a thread that first made its
 * device current, the encode backend over each (every call makes its device
 * current first: CUDA's current device is per host thread), the prefix and
 * fp8 setup of every context, and their release. Header-only and static, for
 * ingest/lazyingest.c alone: it is the one ingest file compiled with LZ_CUDA
 * (the library is built without), as query/gpu_backend.h is for the query
 * tools. */
#ifndef LZ_INGEST_GPU_ENGINES_H
#define LZ_INGEST_GPU_ENGINES_H
#ifdef LZ_CUDA

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "gpu/llama_cuda.h"
#include "ingest/ingest_run.h"

/* ---- --gpu, --gpus: the device contexts (ingest_gpu) and their backend ---- */

/* Makes c's device the calling thread's current one (CUDA's current device is per host thread:
 * every thread of a pipeline calls this before it touches its engine). */
static int gpu_here(ingest_gpu *c, char *err, size_t errlen)
{
    return c->dev >= 0 ? lz_llama_gpu_use_device(c->dev, err, errlen) : 0;
}

/* the encoder's forward passes on the device, a whole document a call */
static int gpu_encode(void *ctx, const int *ids, int n, lz_kv_cache *out, float *qwin, int c0, int cw, char *err,
                      size_t errlen)
{
    ingest_gpu *c = ctx;
    /* one device context: documents encoded in parallel (par) take turns on it, their
     * KV eviction scoring and packing run side by side */
    pthread_mutex_lock(&c->one);
    const int rc = gpu_here(c, err, errlen) ? -1 : lz_llama_gpu_encode(c->gpu, ids, n, out, qwin, c0, cw, err, errlen);
    pthread_mutex_unlock(&c->one);
    return rc;
}

/* a batch's documents in passes (ingest_jobs.c): enqueued and finished on the pipeline's
 * driving thread, fetched by the threads that pack them */
static int gpu_start(void *ctx, const int *const *ids, const int *n, const int *c0, const int *cw, int n_docs, char *err,
                     size_t errlen)
{
    ingest_gpu *c = ctx;
    return gpu_here(c, err, errlen) ? -1 : lz_llama_gpu_encode_start(c->gpu, ids, n, c0, cw, n_docs, err, errlen);
}
static int gpu_finish(void *ctx, char *err, size_t errlen)
{
    ingest_gpu *c = ctx;
    return gpu_here(c, err, errlen) ? -1 : lz_llama_gpu_encode_finish(c->gpu, err, errlen);
}
static int gpu_fetch(void *ctx, int i, lz_kv_cache *out, float *qwin, char *err, size_t errlen)
{
    ingest_gpu *c = ctx;
    return gpu_here(c, err, errlen) ? -1 : lz_llama_gpu_encoded(c->gpu, i, out, qwin, err, errlen);
}
static int gpu_fetch_mass(void *ctx, int i, float *mass)
{
    ingest_gpu *c = ctx;
    char err[256];
    return gpu_here(c, err, sizeof err) ? 0 : lz_llama_gpu_encoded_mass(c->gpu, i, mass); /* 0: scored on the CPU */
}
static int gpu_fetch_planes(void *ctx, int i, int n, int dtype, const void **k, const void **v, const float **ks,
                            const float **vs, char *err, size_t errlen)
{
    ingest_gpu *c = ctx;
    return gpu_here(c, err, errlen) ? -1 : lz_llama_gpu_encoded_planes(c->gpu, i, n, dtype, k, v, ks, vs, err, errlen);
}

/* The encode backend of device context c (this run's pass size and switches). */
static lz_encode_backend gpu_backend(ingest *g, ingest_gpu *c)
{
    lz_encode_backend b = {.ctx = c, .encode = gpu_encode, .max_tokens = g->o.max_doc_tokens};
    if (g->gpu_pass > 0)
        b.start = gpu_start, b.finish = gpu_finish, b.fetch = gpu_fetch, b.fetch_mass = gpu_fetch_mass,
        b.pass_tokens = g->gpu_pass;
    if (!lz_env_get()->ingest_gpu_mass) b.fetch_mass = NULL; /* KV eviction scored on the CPU (A/B) */
    if (g->gpu_pass > 0 && lz_env_get()->ingest_planes) b.fetch_planes = gpu_fetch_planes; /* the device's own bytes */
    return b;
}

typedef struct {
    ingest *g;
    ingest_gpu *c;
    int rows, rc;
    char err[1024];
} gpu_make_arg;

/* One device context, on a thread of its own that made its device current first. */
static void *gpu_make(void *p)
{
    gpu_make_arg *a = p;
    a->rc = gpu_here(a->c, a->err, sizeof a->err) || lz_llama_gpu_new(a->g->m, a->rows, &a->c->gpu, a->err, sizeof a->err)
                ? -1 : 0;
    return NULL;
}

/* --gpu: one device context on the current device; --gpus: one a listed entry, their
 * weights uploaded side by side. 0, or -1 with g->err naming the device. */
static int gpus_open(ingest *g, int rows)
{
    const int n = g->o.n_devs > 0 ? g->o.n_devs : 1;
    gpu_make_arg *a = calloc((size_t)n, sizeof *a);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    int *started = calloc((size_t)n, sizeof *started);
    if (!a || !th || !started || !(g->gpus = calloc((size_t)n, sizeof *g->gpus))) {
        free(a), free(th), free(started);
        snprintf(g->err, sizeof g->err, "out of memory");
        return -1;
    }
    g->n_gpus = n;
    for (int i = 0; i < n; i++) {
        g->gpus[i].dev = g->o.n_devs > 0 ? g->o.devs[i] : -1;
        pthread_mutex_init(&g->gpus[i].one, NULL);
        a[i] = (gpu_make_arg){.g = g, .c = &g->gpus[i], .rows = rows};
        started[i] = pthread_create(&th[i], NULL, gpu_make, &a[i]) == 0;
        if (!started[i]) gpu_make(&a[i]);
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        if (a[i].rc && !rc) {
            if (g->o.n_devs > 1) snprintf(g->err, sizeof g->err, "pipeline %d (GPU %d): %s", i, g->gpus[i].dev, a[i].err);
            else snprintf(g->err, sizeof g->err, "%s", a[i].err);
            rc = -1;
        }
    }
    g->gpu = g->gpus[0].gpu;
    free(a), free(th), free(started);
    return rc;
}

static void gpus_free(ingest *g)
{
    char err[256];
    for (int i = 0; i < g->n_gpus; i++) {
        if (g->gpus[i].gpu && !gpu_here(&g->gpus[i], err, sizeof err)) lz_llama_gpu_free(g->gpus[i].gpu);
        pthread_mutex_destroy(&g->gpus[i].one);
    }
    free(g->gpus);
    g->gpus = NULL;
    g->n_gpus = 0;
    g->gpu = NULL;
}

/* Every device context: the prefix's KV, fp8 quantisation on the device when the store is
 * fp8 (planes). 0 or -1. */
static int gpus_setup(ingest *g)
{
    for (int i = 0; i < g->n_gpus; i++) {
        ingest_gpu *c = &g->gpus[i];
        if (gpu_here(c, g->err, sizeof g->err)) return -1;
        if (g->backend.fetch_planes) lz_llama_gpu_set_encode_fp8(c->gpu, g->o.kv_dtype == LZ_PAYLOAD_DTYPE_FP8);
        if (lz_llama_gpu_set_prefix(c->gpu, lz_encoder_prefix_cache(g->enc), g->err, sizeof g->err)) {
            if (g->n_gpus > 1) {
                const size_t k = strlen(g->err);
                snprintf(g->err + k, sizeof g->err - k, " (pipeline %d)", i);
            }
            return -1;
        }
    }
    return 0;
}

#endif /* LZ_CUDA */
#endif /* LZ_INGEST_GPU_ENGINES_H */

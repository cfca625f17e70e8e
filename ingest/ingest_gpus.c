/* ingest_gpus.c - lazyingest's GPU engines (--gpu, --gpus): one lz_engine a
 * listed device, made side by side (each on a thread of its own: an 8B
 * model's upload takes seconds), the document table over each with this
 * run's pass size and switches, the prefix and fp8 setup of every engine,
 * and their release. The engines themselves: engine/engine.h.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "ingest/ingest_run.h"

lz_encode_backend ingest_gpu_backend(const ingest *g, ingest_gpu *c)
{
    const lz_engine_encode_opts eo = {.max_tokens = g->o.max_doc_tokens, .pass_tokens = g->gpu_pass,
                                      .masses = lz_env_get()->ingest_gpu_mass, /* 0: scored on the CPU (A/B) */
                                      .planes = lz_env_get()->ingest_planes};  /* the device's own bytes */
    return lz_engine_encoder(c->engine, &eo);
}

typedef struct {
    const ingest *g;
    ingest_gpu *c;
    int rows, rc;
    char err[1024];
} gpu_make_arg;

static void *gpu_make(void *p)
{
    gpu_make_arg *a = p;
    const lz_engine_opts eo = {.gpu = 1, .device = a->c->dev, .own_tokens = a->rows};
    a->rc = lz_engine_open(a->g->m, &eo, &a->c->engine, a->err, sizeof a->err);
    return NULL;
}

int ingest_gpus_open(ingest *g, int rows)
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
    free(a), free(th), free(started);
    return rc;
}

void ingest_gpus_free(ingest *g)
{
    for (int i = 0; i < g->n_gpus; i++) lz_engine_free(g->gpus[i].engine);
    free(g->gpus);
    g->gpus = NULL;
    g->n_gpus = 0;
}

int ingest_gpus_setup(ingest *g)
{
    /* fp8 on the device; with every document stored whole (no KV policy, no probe), read back as
     * fp8 planes only (2): the encoders never fetch a pass's bf16 */
    int fp8 = g->backend.fetch_planes && g->o.kv_dtype == LZ_PAYLOAD_DTYPE_FP8;
    if (fp8 && g->o.kv.kind == LZ_KVPOLICY_NONE && !g->n_probe && !g->learn) fp8 = 2;
    for (int i = 0; i < g->n_gpus; i++) {
        if (lz_engine_set_prefix(g->gpus[i].engine, lz_encoder_prefix_cache(g->enc), fp8, g->err, sizeof g->err)) {
            if (g->n_gpus > 1) {
                const size_t k = strlen(g->err);
                snprintf(g->err + k, sizeof g->err - k, " (pipeline %d)", i);
            }
            return -1;
        }
    }
    return 0;
}
